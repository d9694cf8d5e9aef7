"""A consumer with effects of its own, for the lab's --schema and --effects: one row per event
ID in `my_effects`, a table the lab does not know (tests/test_command.py makes it with a plain
CREATE TABLE, which fails if run twice in one schema). The row's primary key makes a redelivery
a no-op, and the offset is committed after the row's transaction; before anything else it
prints a byte that is not UTF-8, which the harness must read past.

    python measure_kill.py --command "python tests/consumers/own_effects.py" \
        --schema my_effects.sql --effects "SELECT event_id FROM my_effects"
"""
import os
import sys

import psycopg
from confluent_kafka import Consumer, KafkaException


def main() -> int:
    sys.stdout.buffer.write(b"starting \xff\n")  # not UTF-8: a harness reading lines must not choke on it
    sys.stdout.flush()
    consumer = Consumer({"bootstrap.servers": os.environ["KAFKA_BROKERS"], "group.id": os.environ["KAFKA_GROUP"],
                         "auto.offset.reset": "earliest",
                         "enable.auto.commit": False,  # committed below, after the row's transaction
                         "session.timeout.ms": int(os.environ.get("KAFKA_SESSION_TIMEOUT_MS", 6000))})
    consumer.subscribe([os.environ["KAFKA_TOPIC"]])
    with psycopg.connect(os.environ["CONSUMER_DSN"], autocommit=True) as conn:
        while True:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            event_id = dict(message.headers() or [])["event_id"].decode()
            conn.execute("INSERT INTO my_effects (event_id) VALUES (%s) ON CONFLICT DO NOTHING", (event_id,))
            try:
                consumer.commit(message, asynchronous=False)
            except KafkaException as e:  # evicted meanwhile: the next owner reads it again, and the key skips it
                print(f"offset commit failed: {e.args[0].name()}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
