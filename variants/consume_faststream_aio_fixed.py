"""fs-inbox-aio with a failed handler's message read again: FastStream on aiokafka that loses
nothing when the database goes away (M9).

Claim: on aiokafka, FastStream's ack commits no further than the message just handled
(consume_faststream_aio.py), so kills alone lose nothing under AckPolicy.ACK. A handler that
raised is another matter: ACK acks it all the same, committing the position past it, and the
credit is never applied. Here the policy is AckPolicy.NACK_ON_ERROR: FastStream's
`KafkaAckableMessage.nack()` seeks the partition back to the failed record, so the next
getone() returns it again, once the database answers; the handler pauses before each such
nack, as fs-inbox-fixed's does, so the retries do not spin. The position is never moved past
the failed record, so no later ack can commit past it. Poison is not this case: consume.process
parks it on the DLQ and never raises.

    fs-inbox-fixed-aio   fs-inbox-aio (AckPolicy.NACK_ON_ERROR instead of ACK, handle_once in
                         the handler), on FastStream's aiokafka broker

Assumptions: those of fs-inbox-aio (consume_faststream_aio.py), whose broker this uses.
"""
from variants import consume_faststream, consume_faststream_aio
from variants.consume_faststream_fixed import FAILURE_PAUSE_S, REDO_FAILED

# What the lab runs of this file (lab/registry.py reads it without importing the module).
VARIANTS = {
    "fs-inbox-fixed-aio": {"label": "fs-inbox-fixed-aio: FastStream on aiokafka, AckPolicy.NACK_ON_ERROR, "
                                    "handle_once in the handler", "groups": ["frameworks"],
                           "reads": ["crash_after"]},
}


def run_worker(lab) -> None:
    """The lab's entry point: fs-inbox's subscriber on aiokafka, a failed handler's message redone,
    a record whose headers are not UTF-8 parked like any poison."""
    consume_faststream.run_worker(lab, variant="fs-inbox", backend=consume_faststream_aio.AIOKAFKA,
                                  policy=REDO_FAILED, failure_pause_s=FAILURE_PAUSE_S,
                                  parser=consume_faststream.parse_past_bad_headers)
