"""Helpers the Kafka tests share: a consumer in a thread, bounded waits, raw sends and reads."""
import contextlib
import threading
import uuid

from confluent_kafka import Consumer

import consume
import harness
from publish import make_producer

DRAIN_S = 60


@contextlib.contextmanager
def consuming(topic, group, dsn):
    """consume.run in a thread, stopped and closed on exit."""
    stop, errors = threading.Event(), []

    def target():
        try:
            consume.run(topic, group, dsn=dsn, stop=stop)
        except Exception as e:  # re-raised in the test below
            errors.append(e)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(30)
    assert not errors, errors


def drained(group, topic):
    harness.wait_until(lambda: harness.lag(group, topic) == 0, DRAIN_S, f"group {group} to commit all of {topic}",
                       interval_s=0.2)


def send(topic, messages):
    """messages: (key, value bytes, headers) as raw as a broken producer might send them."""
    producer = make_producer()
    for key, value, headers in messages:
        producer.produce(topic, key=key, value=value, headers=headers)
    assert producer.flush(30) == 0


def read_all(topic, expected, timeout_s=30):
    reader = Consumer({"bootstrap.servers": consume.BROKERS, "group.id": f"reader-{uuid.uuid4().hex[:8]}",
                       "auto.offset.reset": "earliest", "enable.auto.commit": False})
    reader.subscribe([topic])
    got = []
    try:
        harness.wait_until(lambda: got.extend(m for m in reader.consume(10, 0.5) if not m.error()) or
                           len(got) >= expected, timeout_s, f"{expected} messages on {topic}", interval_s=0)
    finally:
        reader.close()
    return got
