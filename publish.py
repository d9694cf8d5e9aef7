"""The producer side: every credit carries its own event ID in a header.

Claim: the consumer can only deduplicate what the producer names. The ID is set
once, where the event is born, and travels in the `event_id` header, so a copy
published again (a retry, a relay restart) carries the same ID at a new offset.

Assumptions: the topic exists or this script may create it (the broker does not
auto-create topics); `KAFKA_BROKERS` points at the broker (settings.py).

    python publish.py 1000        # 1,000 demo credits to consumer.deposits
"""
import itertools
import json
import sys
import time
from pathlib import Path

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

import cli
from settings import BROKERS

DEMO_TOPIC = "consumer.deposits"


def make_producer(**overrides) -> Producer:
    return Producer({
        "bootstrap.servers": BROKERS,
        # librdkafka's default is false: without it a retried send can land twice.
        "enable.idempotence": True,
        # Implied by idempotence, spelled out: a send counts only once every in-sync replica has it.
        "acks": "all",
        **overrides,
    })


def ready_producer(topic: str, timeout_s: float = 30.0, **overrides) -> Producer:
    """make_producer(), returned once its first send can leave at once: connected, with
    `topic`'s metadata, and (if idempotent) holding its producer ID. librdkafka asks for the
    ID in the background; here, in about half the starts, it got one only on a retry ~0.5 s
    after start (its statistics: idemp_state WaitTransport, then Assigned), and a paced
    publisher's first records waited that long in the client, latency no consumer caused."""
    assigned = []

    def statistics(text: str) -> None:
        if not assigned and json.loads(text).get("eos", {}).get("idemp_state") == "Assigned":
            assigned.append(True)

    producer = make_producer(**{"statistics.interval.ms": 50, "stats_cb": statistics, **overrides})
    producer.list_topics(topic, timeout=timeout_s)
    idempotent = str(overrides.get("enable.idempotence", True)).lower() not in ("false", "0")
    end = time.monotonic() + timeout_s
    while idempotent and not assigned:
        if time.monotonic() > end:
            raise RuntimeError(f"the producer had no producer ID from the broker within {timeout_s:g}s")
        producer.poll(0.01)
    return producer


def publish(producer: Producer, topic: str, event_id: str, event: dict, on_delivery=None,
            partition: int | None = None) -> None:
    """Queue one event; the ID rides in a header, the account is the key (one partition per account).

    `partition` overrides the key's partition: the race harness puts an event's copies on
    partitions of its choosing, as a republish under another key would."""
    producer.produce(
        topic,
        **({} if partition is None else {"partition": partition}),
        key=str(event["account_id"]).encode(),
        value=json.dumps(event).encode(),
        headers=[("event_id", event_id.encode())],
        on_delivery=on_delivery,
    )


def ensure_topic(name: str, partitions: int = 1, timeout_s: float = 30.0) -> None:
    """Create the topic unless it exists; wait until the broker confirms."""
    admin = AdminClient({"bootstrap.servers": BROKERS})
    existing = admin.list_topics(timeout=timeout_s).topics
    if name in existing:
        return
    # Replication factor -1: the broker's default.replication.factor (1 on the single-node stack,
    # 3 in the replicated lab).
    future = admin.create_topics([NewTopic(name, partitions, -1)], operation_timeout=timeout_s)[name]
    try:
        future.result(timeout=timeout_s)
    except KafkaException as e:
        if e.args[0].name() != "TOPIC_ALREADY_EXISTS":  # a racing creator is fine
            raise


def demo_event(n: int) -> tuple[str, dict]:
    """The n-th demo credit: 100 accounts, amounts 1..10, IDs evt-1, evt-2, ..."""
    return f"evt-{n}", {"account_id": n % 100 + 1, "amount": n % 10 + 1}


def publish_acknowledged(producer: Producer, topic: str, events, timeout_s: float = 60.0, partitions=None) -> int:
    """Publish (event_id, event) pairs; return how many the broker acknowledged within the deadline.
    `partitions`, if given, names each pair's partition, in the same order."""
    acked = 0
    failures = []

    def delivered(err, _msg):
        nonlocal acked
        if err is None:
            acked += 1
        else:
            failures.append(err)

    sent = 0
    for (event_id, event), partition in zip(events, partitions or itertools.repeat(None), strict=False):
        for _ in range(120):
            try:
                publish(producer, topic, event_id, event, on_delivery=delivered, partition=partition)
                break
            except BufferError:  # local queue full: let deliveries drain it
                producer.poll(0.5)
        else:
            raise RuntimeError("the producer's local queue stayed full for 60 s: is the broker up?")
        sent += 1
        producer.poll(0)
    remaining = producer.flush(timeout_s)
    if failures:
        print(f"publish: {len(failures)} sends failed, first: {failures[0]}", file=sys.stderr)
    if remaining:
        print(f"publish: {remaining} sends still unacknowledged after {timeout_s:g}s", file=sys.stderr)
    return acked


def publish_journaled(producer: Producer, topic: str, events, journal: Path, rate: float = 0,
                      on_first_ack=None) -> int:
    """The application's own retry, across restarts: publish each (event_id, event) not yet
    in `journal` (one acknowledged ID per line), appending each ID as its acknowledgement
    arrives, at most `rate` sends a second (0: as fast as it goes). Whatever was sent but
    not yet journaled when the process died is sent again by the next one: same ID, new
    offset, and a new producer session that idempotence cannot match to the old one.
    Returns how many were acknowledged in this session."""
    done = set(journal.read_text().split()) if journal.exists() else set()
    acked = 0
    with open(journal, "a") as log:
        def delivered(err, event_id):
            nonlocal acked
            if err is None:
                log.write(event_id + "\n")
                log.flush()  # into the kernel: it survives a SIGKILL of this process
                acked += 1
                if acked == 1 and on_first_ack:
                    on_first_ack()

        started, sent = time.monotonic(), 0
        for event_id, event in events:
            if event_id in done:
                continue
            if rate:
                time.sleep(max(0.0, started + sent / rate - time.monotonic()))
            while True:
                try:
                    publish(producer, topic, event_id, event,
                            on_delivery=lambda err, _msg, event_id=event_id: delivered(err, event_id))
                    break
                except BufferError:
                    producer.poll(0.1)
            sent += 1
            producer.poll(0)
        while producer.flush(1.0):  # librdkafka's message.timeout.ms bounds this
            pass
    return acked


def main(argv=None) -> int:
    parser = cli.Parser(description=__doc__.splitlines()[0])
    parser.add_argument("count", type=int, help="how many demo credits to publish")
    parser.add_argument("--topic", default=DEMO_TOPIC)
    parser.add_argument("--partitions", type=int, default=6, help="used only if the topic is created")
    args = parser.parse_args(argv)
    if args.count < 1:
        parser.error("count must be at least 1")
    ensure_topic(args.topic, args.partitions)
    acked = publish_acknowledged(make_producer(), args.topic, (demo_event(n) for n in range(1, args.count + 1)))
    print(f"published {acked} of {args.count} credits to {args.topic}")
    return 0 if acked == args.count else 1


if __name__ == "__main__":
    sys.exit(main())
