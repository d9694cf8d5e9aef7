"""fs-default, fs-ack and fs-inbox on FastStream's other Kafka broker, faststream.kafka (aiokafka) (M9).

Claim: the same subscriber on aiokafka does not lose what fs-inbox loses on librdkafka. Its ack
(`KafkaAckableMessage.ack`, faststream/kafka/message.py) awaits `AIOKafkaConsumer.commit()` with no
offsets, which commits "current consumed offsets for all subscribed partitions" (its docstring):
the positions it reads when it is called, each one past the last record getone() returned. The
subscriber's loop (faststream/kafka/subscriber/usecase.py) awaits the ack before its next
getone(), and aiokafka's fetcher, which reads ahead in the background, moves no position: only
getone() does. So under AckPolicy.ACK the commit covers the message just handled and nothing
after it; tests/frameworks/test_faststream_aio.py pins that on the schedule that makes the
confluent broker commit past an unfinished handler. What is left is the ACK's own window (a kill
between the database and the commit replays the message, which the inbox skips) and ACK_FIRST's
auto-commit, every 5 s, of positions that getone() moved before the handler ran.

    fs-default-aio   fs-default on aiokafka: FastStream's defaults (ACK_FIRST: aiokafka's auto-commit)
    fs-ack-aio       fs-ack on aiokafka: AckPolicy.ACK, the commit awaited after the handler
    fs-inbox-aio     fs-inbox on aiokafka: AckPolicy.ACK, handle_once in the handler

The subscriber, its handler and its loop are consume_faststream.py's, with this file's Backend:
the harness's client settings go to aiokafka under its own names, the lab's rebalance callbacks
become an aiokafka listener, and the handler reads the record as a confluent-kafka Message (the
lab's confluent-kafka builds one from its fields), so consume.process, its dead-letter producer
(confluent-kafka's, the lab's) and the crash point are unchanged.

Assumptions: faststream[kafka] (aiokafka 0.14, requirements-frameworks.txt), beside the lab's
confluent-kafka; the classic group protocol (aiokafka does not speak KIP-848's; a worker asked
for it refuses to start). aiokafka has no "lost" callback: a member that finds itself out of
the group revokes what it had when it joins again. Its leaving the group on
max_poll_interval_ms prints no librdkafka MAXPOLL line: the harness counts no eviction of it.
"""
from aiokafka import ConsumerRebalanceListener
from confluent_kafka import Message
from faststream.kafka import KafkaBroker, KafkaMessage

from variants import consume_faststream

# What the lab runs of this file (lab/registry.py reads it without importing the module).
VARIANTS = {
    "fs-default-aio": {"label": "fs-default-aio: FastStream on aiokafka, its defaults (ACK_FIRST: auto-commit)",
                       "groups": ["frameworks"], "reads": ["crash_after"]},
    "fs-ack-aio": {"label": "fs-ack-aio: FastStream on aiokafka, AckPolicy.ACK (commit after the handler)",
                   "groups": ["frameworks"], "reads": ["crash_after"]},
    "fs-inbox-aio": {"label": "fs-inbox-aio: FastStream on aiokafka, AckPolicy.ACK, handle_once in the handler",
                     "groups": ["frameworks"], "reads": ["crash_after"]},
}
SETTINGS = {"fs-default-aio": "fs-default", "fs-ack-aio": "fs-ack", "fs-inbox-aio": "fs-inbox"}  # consume_faststream's

# The client settings the harness passes (lab/worker.py, in librdkafka's names) -> aiokafka's,
# which FastStream's subscriber takes as keywords.
AIOKAFKA_NAMES = {"session.timeout.ms": "session_timeout_ms", "heartbeat.interval.ms": "heartbeat_interval_ms",
                  "max.poll.interval.ms": "max_poll_interval_ms"}


def as_message(record) -> Message:
    """An aiokafka ConsumerRecord as a confluent-kafka Message: what consume.process, its
    dead-letter step and the lab's crash point read."""
    return Message(topic=record.topic, partition=record.partition, offset=record.offset, key=record.key,
                   value=record.value, headers=list(record.headers) or None)  # confluent-kafka says None for none


class Rebalances(ConsumerRebalanceListener):
    """The lab's rebalance callbacks, each (consumer, partitions), as aiokafka's listener. It hands
    them no consumer (aiokafka's listener has none; the lab's log only the partitions), and
    calls no on_lost: aiokafka revokes a lost assignment instead."""

    def __init__(self, on_assign=None, on_revoke=None, on_lost=None):
        self.on_assign, self.on_revoke = on_assign, on_revoke

    def on_partitions_revoked(self, revoked) -> None:
        if self.on_revoke is not None:
            self.on_revoke(None, sorted(revoked))

    def on_partitions_assigned(self, assigned) -> None:
        if self.on_assign is not None:
            self.on_assign(None, sorted(assigned))


def aiokafka_options(settings: dict, callbacks: dict) -> tuple[dict, dict]:
    """The settings as the subscriber's keywords under aiokafka's names, the callbacks as its
    listener; the broker gets neither. A setting aiokafka has no name for here is refused, not
    dropped: group.protocol=consumer among them."""
    if unknown := sorted(settings.keys() - AIOKAFKA_NAMES.keys()):
        raise ValueError(f"FastStream's aiokafka broker takes no {', '.join(unknown)} here "
                         f"(it speaks the classic group protocol only); it takes {', '.join(AIOKAFKA_NAMES)}")
    options = {AIOKAFKA_NAMES[name]: value for name, value in settings.items()}
    if callbacks:
        options["listener"] = Rebalances(**callbacks)
    return {}, options


AIOKAFKA = consume_faststream.Backend("aiokafka", KafkaBroker, KafkaMessage, as_message, aiokafka_options)


def run_worker(lab) -> None:
    """The lab's entry point: consume_faststream's subscriber, with the settings of the variant
    without -aio, on FastStream's aiokafka broker."""
    consume_faststream.run_worker(lab, variant=SETTINGS[lab.args.variant], backend=AIOKAFKA)
