"""The producer side: every credit carries its own event ID in a header.

Claim: the consumer can only deduplicate what the producer names. The ID is set once,
where the event is born, and travels in the `event_id` header, so a copy published
again (a retry, a relay restart) carries the same ID at a new offset.

Assumptions: the topic exists or this script may create it (the lab's broker creates
no topic on its own); KAFKA_BROKERS names the broker.

    python publish.py 1000        # 1,000 demo credits to consumer.deposits
"""
import json
import os
import sys

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

BROKERS = os.environ.get("KAFKA_BROKERS", "localhost:59092")
DEMO_TOPIC = "consumer.deposits"


def make_producer(**overrides) -> Producer:
    return Producer({
        "bootstrap.servers": BROKERS,
        "enable.idempotence": True,  # librdkafka's default is false: a retried send could land twice
        "acks": "all",  # implied by idempotence, spelled out: a send counts once every in-sync replica has it
        **overrides,
    })


def publish(producer: Producer, topic: str, event_id: str, event: dict, on_delivery=None,
            partition: int | None = None) -> None:
    """Queue one event: the ID rides in a header, the account is the key (one partition per account).
    Added to the post's: `on_delivery`, and `partition` for the race harness, which puts an
    event's copies on partitions of its choosing, as a republish under another key would."""
    producer.produce(topic, key=str(event["account_id"]).encode(), value=json.dumps(event).encode(),
                     headers=[("event_id", event_id.encode())], on_delivery=on_delivery,
                     **({} if partition is None else {"partition": partition}))


def ensure_topic(name: str, partitions: int = 1, timeout_s: float = 30.0) -> None:
    """Create the topic unless it exists; wait until the broker confirms."""
    admin = AdminClient({"bootstrap.servers": BROKERS})
    if name in admin.list_topics(timeout=timeout_s).topics:
        return
    # Replication factor -1: the broker's default (1 on the single-node stack, 3 in the replicated lab).
    future = admin.create_topics([NewTopic(name, partitions, -1)], operation_timeout=timeout_s)[name]
    try:
        future.result(timeout=timeout_s)
    except KafkaException as e:
        if e.args[0].name() != "TOPIC_ALREADY_EXISTS":  # a racing creator is fine
            raise


def send_durably(producer: Producer, topic: str, key, value, headers, timeout_s: float = 30.0) -> None:
    """Produce one record and wait for the broker's answer: KafkaException if it (or the client)
    refused it, TimeoutError if no answer came in time. consume.py parks dead letters with it."""
    outcome = []
    producer.produce(topic, key=key, value=value, headers=headers, on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(timeout_s)
    if not outcome:
        raise TimeoutError(f"no answer from the broker for a record to {topic} within {timeout_s:g}s")
    if outcome[0] is not None:
        raise KafkaException(outcome[0])


def demo_event(n: int) -> tuple[str, dict]:
    """The n-th demo credit: 100 accounts, amounts 1..10, IDs evt-1, evt-2, ..."""
    return f"evt-{n}", {"account_id": n % 100 + 1, "amount": n % 10 + 1}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit() or int(argv[0]) < 1:
        print("usage: python publish.py COUNT  (how many demo credits, a whole number of at least 1)",
              file=sys.stderr)
        return 2
    count = int(argv[0])
    ensure_topic(DEMO_TOPIC, partitions=6)
    producer, failed = make_producer(), []
    for n in range(1, count + 1):
        for _ in range(120):  # 60 s at most for room in the local queue
            try:
                publish(producer, DEMO_TOPIC, *demo_event(n), on_delivery=lambda err, _m: err and failed.append(err))
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.5)
        else:
            print("publish.py: the producer's local queue stayed full for 60 s: is the broker up?", file=sys.stderr)
            return 1
        producer.poll(0)
    unacknowledged = producer.flush(60)
    acked = count - len(failed) - unacknowledged
    print(f"published {acked} of {count} credits to {DEMO_TOPIC}"
          + (f"; first failure: {failed[0]}" if failed else ""))
    return 0 if acked == count else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
