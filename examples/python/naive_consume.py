"""The naive consumers, no inbox: the controls that the lab's checks must fail.

Claim: without the inbox, a redelivery credits again. `--commit auto` (the default) lets
librdkafka commit the offsets it has handed out every second, on its own thread, whatever the
handler has done, so a kill replays everything applied since the last of those commits.
`--commit after` is the post's b: the offset is committed right after the database commit,
so a kill between the two replays one message, and a handler evicted mid-transaction (M2)
finishes its credit while the partition's next owner credits the same message again.

It follows the lab's contract (docs/your-consumer.md): KAFKA_BROKERS, KAFKA_TOPIC,
KAFKA_GROUP and CONSUMER_DSN from the environment (and the group timeouts, if set), one
ledger row per credit applied.

    python measure_kill.py --command "python examples/python/naive_consume.py" --runs 1 --kills 5
    python measure_rebalance.py --command "python examples/python/naive_consume.py --commit after" --runs 1
"""
import argparse
import json
import os
import signal
import sys

import psycopg
from confluent_kafka import Consumer, KafkaException

TIMEOUTS = (("KAFKA_SESSION_TIMEOUT_MS", "session.timeout.ms"), ("KAFKA_MAX_POLL_INTERVAL_MS", "max.poll.interval.ms"))


def credit(conn: psycopg.Connection, event_id: str, event: dict) -> None:
    """The side effect, applied as many times as it is delivered."""
    with conn.transaction():
        conn.execute("UPDATE accounts SET balance = balance + %s WHERE id = %s", (event["amount"], event["account_id"]))
        conn.execute("INSERT INTO ledger (event_id, account_id, amount) VALUES (%s, %s, %s)",
                     (event_id, event["account_id"], event["amount"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commit", choices=("auto", "after"), default="auto",
                        help="auto: librdkafka's timer; after: right after each database commit (b)")
    commit = parser.parse_args().commit
    try:
        config = {
            "bootstrap.servers": os.environ["KAFKA_BROKERS"],
            "group.id": os.environ["KAFKA_GROUP"],
            "enable.auto.commit": commit == "auto",  # auto: offsets commit on a timer, not after the work
            "auto.commit.interval.ms": 1000,
            "auto.offset.reset": "earliest",
            # the harness's timeouts, if it sets them: a killed or stalled member is evicted sooner
            **{key: os.environ[name] for name, key in TIMEOUTS if os.environ.get(name)},
        }
        topic, dsn = os.environ["KAFKA_TOPIC"], os.environ["CONSUMER_DSN"]
    except KeyError as missing:
        parser.error(f"{missing.args[0]} is not set (docs/your-consumer.md)")
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    consumer = Consumer(config)
    consumer.subscribe([topic])
    with psycopg.connect(dsn) as conn:
        try:
            while not stopping:
                msg = consumer.poll(0.5)
                if msg is None or msg.error():
                    continue
                credit(conn, dict(msg.headers() or ())["event_id"].decode(), json.loads(msg.value()))
                if commit == "after":
                    try:
                        consumer.commit(message=msg, asynchronous=False)
                    except KafkaException as e:  # evicted meanwhile: the next owner reads it again
                        print(f"offset commit failed: {e.args[0].name()}", flush=True)
        finally:
            consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
