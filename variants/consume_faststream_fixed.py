"""fs-inbox with a commit that cannot run ahead of its handler: what a FastStream user can do (M9).

Claim: fs-inbox loses credits under kills because FastStream's ack does not commit the message
it acks. Its confluent backend acks with `consumer.commit(asynchronous=True)` and no offsets:
the offsets librdkafka has *stored*, gathered on librdkafka's own thread after the call
returned. Its loop polls the next message right after the ack, and by default each poll stores
that message's offset + 1 (`enable.auto.offset.store`), so the commit can cover a message whose
handler has not run, and a kill during that handler loses it. Here the poll stores nothing
(`enable.auto.offset.store=false`, a librdkafka setting FastStream passes on as it is) and the
handler stores its own message's offset once its inbox transaction has committed. The ack's
commit is FastStream's, unchanged; whenever librdkafka gathers it, the stored offsets reach no
further than the last handler that finished. A kill replays what was handled since the last
commit that landed, and the inbox skips it: no duplicate, no loss.

    fs-inbox-fixed   fs-inbox (handle_once in the handler) with AckPolicy.NACK_ON_ERROR, the poll
                     storing no offset, the handler storing its message's after the database
                     committed

A handler that raised (the database away) is the other way fs-inbox loses: under ACK FastStream
commits after it, and the next message's store goes past it. Here the policy is
AckPolicy.NACK_ON_ERROR: FastStream seeks the partition back to the failed message, which is
handled again once the database answers (after a short pause per failure, so the retries do
not spin); no store happens for it meanwhile, so no commit passes it. A message that can never
succeed is not this case: poison is parked on the DLQ by consume.process and never raises. A
record with a header that is not UTF-8 would not reach the handler at all (FastStream's parser
decodes every header first, and the commits after it pass it): FastStream parses it here as if it
had none, and the handler parks it like any poison.

Assumptions: those of fs-inbox (consume_faststream.py, whose pieces this uses), with
FastStream's one-message-at-a-time subscriber (no max_workers, no batches). The broker's config
reaches its producer too, which says once that it ignores the setting; store_offsets() refuses
to run without it, so half the fix fails loudly.
"""
from faststream.confluent import KafkaMessage
from faststream.middlewares import AckPolicy

from variants import consume_faststream

# What the lab runs of this file (lab/registry.py reads it without importing the module).
VARIANTS = {
    "fs-inbox-fixed": {"label": "fs-inbox-fixed: FastStream, AckPolicy.NACK_ON_ERROR, handle_once, the offset "
                                "stored by the handler (enable.auto.offset.store=false)", "groups": ["frameworks"],
                       "reads": ["crash_after"]},
}

# The fix's setting: a poll stores no offset, so a commit of the stored offsets covers only what
# store_handled() marked. FastStream merges the broker's config last: it overrides its own.
NO_STORE_ON_POLL = {"enable.auto.offset.store": False}
# A handler that raised: FastStream seeks back to its message, which is handled again after this pause.
REDO_FAILED = AckPolicy.NACK_ON_ERROR
FAILURE_PAUSE_S = 0.5


def store_handled(msg: KafkaMessage) -> None:
    """This message's offset + 1 into librdkafka's store, and nothing later: the next commit may cover it."""
    msg.consumer.consumer.store_offsets(message=msg.raw_message)  # FastStream's consumer, then librdkafka's


def run_worker(lab) -> None:
    """The lab's entry point: fs-inbox's subscriber (consume_faststream.run_worker), with the fix:
    the setting, the store as the handler's last step (after its transaction and the crash point),
    and a failed handler's message redone."""
    consume_faststream.run_worker(lab, variant="fs-inbox", config=NO_STORE_ON_POLL, after_handled=store_handled,
                                  policy=REDO_FAILED, failure_pause_s=FAILURE_PAUSE_S,
                                  parser=consume_faststream.parse_past_bad_headers)
