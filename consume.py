"""An idempotent Kafka consumer: the inbox pattern.

Claim: each credit is applied once however often Kafka delivers it. Its event ID goes
into `processed_messages` in the same Postgres transaction as the credit, the credit is
applied only if that insert claimed a new row, and the offset is committed only after
the transaction has. A crash replays at most the message in hand, which finds its row.

Assumptions: producers put a stable ID in the `event_id` header (publish.py); the side
effect lives in the inbox's database; CONSUMER_DSN and KAFKA_BROKERS name the services
(`make up` starts them and makes the tables). What this file adds to the post's listing,
and why, is a table in README.md ("consume.py beside the post's listing").

    python consume.py        # reads consumer.deposits as group wallet-credits
    KAFKA_TOPIC=t KAFKA_GROUP=g python consume.py   # as the lab starts it (docs/your-consumer.md)
"""
import hashlib
import json
import logging
import os
import signal
import sys
import threading
import time

import psycopg
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer

from publish import ensure_topic, make_producer, send_durably

DSN = os.environ.get("CONSUMER_DSN", "postgresql://inbox_consumer:inbox_consumer@localhost:55432/consumer")
BROKERS = os.environ.get("KAFKA_BROKERS", "localhost:59092")
CONSUMER_NAME = "wallet-credits"  # the inbox key's first half: each consumer remembers its own IDs
MAX_EVENT_ID_BYTES = 512  # far above any UUID; a B-tree entry has a hard size limit
log = logging.getLogger("consume")
# Added: the librdkafka settings a harness may set through the environment (docs/your-consumer.md).
FROM_ENVIRONMENT = {"KAFKA_SESSION_TIMEOUT_MS": "session.timeout.ms",
                    "KAFKA_MAX_POLL_INTERVAL_MS": "max.poll.interval.ms",
                    "KAFKA_HEARTBEAT_INTERVAL_MS": "heartbeat.interval.ms",
                    "KAFKA_GROUP_PROTOCOL": "group.protocol"}

# The lines the lab counts, printed here and nowhere else (lab/harness.py parses them).
SKIPPED_LOG = "skipped duplicate %s"
DEAD_LETTERED_LOG = "dead-lettered %s/%s/%s: %s"
COMMIT_FAILED_LOG = "offset commit failed: %s"
CONNECT_RETRY_LOG = "database refused the first connection, retrying in %.1fs: %s"


def credit_account(conn: psycopg.Connection, event_id: str, event: dict) -> None:
    """The side effect. An increment: running it twice credits twice."""
    updated = conn.execute("UPDATE accounts SET balance = balance + %s WHERE id = %s",
                           (event["amount"], event["account_id"])).rowcount
    if updated == 0:  # added: a credit to no account is poison, not a silent no-op
        raise PoisonMessage(f"unknown account {event['account_id']}")
    conn.execute("INSERT INTO ledger (event_id, account_id, amount) VALUES (%s, %s, %s)",
                 (event_id, event["account_id"], event["amount"]))


def handle_once(conn: psycopg.Connection, event_id: str, event: dict, apply=credit_account,
                consumer: str = CONSUMER_NAME) -> bool:
    """Apply the event unless this consumer already has; True if it was applied now.

    A concurrent handler of the same ID waits on the primary key until the first one
    commits (then it claims nothing) or rolls back (then it claims the row)."""
    with conn.transaction():
        claimed = conn.execute(
            "INSERT INTO processed_messages (consumer, message_id) VALUES (%s, %s) "
            "ON CONFLICT DO NOTHING RETURNING message_id",
            (consumer, event_id),
        ).fetchone()
        if claimed is None:
            return False  # already done: skip it, but still commit the offset
        apply(conn, event_id, event)  # if this raises, the inbox row rolls back with it
    return True


def event_id_of(msg: Message) -> str | None:
    """The producer's ID from the `event_id` header; None if absent, empty or not UTF-8.
    Never the offset: a republished copy of the same event gets a new one."""
    for key, value in msg.headers() or ():
        if key == "event_id" and value:
            try:
                return value.decode("utf-8")
            except UnicodeDecodeError:
                return None
    return None


def run(topic: str, group: str, apply=credit_account, *, handle=handle_once, stop: threading.Event | None = None,
        after_db_commit=None, rebalance_callbacks: dict | None = None, dsn: str | None = None, **overrides) -> None:
    """Consume `topic` as `group`: each message to a durable outcome, then its offset commit.
    `overrides` are librdkafka settings; the rest is for the lab, which drives this loop (README,
    "consume.py beside the post's listing"). A lost database raises, no offset past unapplied work."""
    ensure_topic(dead_letter_topic(topic))
    with connect(dsn or DSN) as conn:
        consumer = Consumer(consumer_config(group, **overrides))
        dead_letters = make_producer()
        consumer.subscribe([topic], **(rebalance_callbacks or {}))
        try:
            while stop is None or not stop.is_set():
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                if msg.error():
                    log.warning("consumer error: %s", msg.error())
                    continue
                outcome = process(conn, msg, dead_letters, handle, apply)
                if after_db_commit is not None:
                    after_db_commit(msg, outcome)
                commit_offset(consumer, msg)  # last, after the DB commit
        finally:
            consumer.close()


# --- added to the post's listing: the first connection, the client config, poison, and the offset commit

# A server that is starting, restarting or at max_connections refuses a connection for a
# while; a wrong password, role, database or pg_hba rule refuses it for good, so that fails at once.
REFUSED_FOR_GOOD = ("password authentication failed", "does not exist", "no pg_hba.conf entry",
                    "permission denied", "not permitted to log in", "no password supplied")


def refused_for_good(error: psycopg.OperationalError) -> bool:
    return any(cause in str(error) for cause in REFUSED_FOR_GOOD)


def first_line(error: Exception) -> str:
    """An error's message for a log line or a dead letter's reason: its first line, never empty."""
    return next((line for line in str(error).splitlines() if line.strip()), type(error).__name__)


def connect(dsn: str, give_up_s: float = 120.0) -> psycopg.Connection:
    """The consumer's connection, retried with backoff while the server refuses it."""
    started, delay = time.monotonic(), 0.2
    while True:
        try:
            return psycopg.connect(dsn, autocommit=True, connect_timeout=10)
        except psycopg.OperationalError as e:
            if refused_for_good(e) or time.monotonic() - started > give_up_s:
                raise
            log.warning(CONNECT_RETRY_LOG, delay, first_line(e))
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


def consumer_config(group: str, **overrides) -> dict:
    return {
        "bootstrap.servers": BROKERS,
        "group.id": group,
        "enable.auto.commit": False,  # we commit, and only after Postgres has
        "auto.offset.reset": "earliest",  # a new group starts at the beginning; latest would skip the backlog
        **overrides,
    }


class PoisonMessage(Exception):
    """A message that no retry can fix; it is dead-lettered with this reason."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def checked_event_id(msg: Message) -> str:
    if sum(key == "event_id" for key, _ in msg.headers() or ()) > 1:
        raise PoisonMessage("more than one event_id header: which one to dedup on?")
    event_id = event_id_of(msg)
    if event_id is None:
        raise PoisonMessage("no event_id header (missing, empty or not UTF-8)")
    if "\x00" in event_id:
        raise PoisonMessage("event_id contains a NUL byte, which Postgres text cannot hold")
    if len(event_id.encode()) > MAX_EVENT_ID_BYTES:
        raise PoisonMessage(f"event_id is longer than {MAX_EVENT_ID_BYTES} bytes")
    return event_id


def _integer_field(event: dict, name: str, low: int, high: int) -> None:
    value = event.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise PoisonMessage(f"{name} must be an integer, got {type(value).__name__}" if name in event
                            else f"event has no {name}")
    if not low <= value <= high:
        raise PoisonMessage(f"{name} {value} is outside {low}..{high}")


def parse_event(value: bytes | None) -> dict:
    """Decode and validate a credit, or raise PoisonMessage saying what is wrong."""
    if value is None:
        raise PoisonMessage("value is empty")
    try:
        event = json.loads(value)
    except ValueError as e:  # includes UnicodeDecodeError
        raise PoisonMessage(f"value is not JSON: {e}") from None
    except RecursionError:  # ~1,000 nested brackets are enough to exhaust the parser's stack
        raise PoisonMessage("value is JSON nested too deep to decode") from None
    if not isinstance(event, dict):
        raise PoisonMessage(f"value is JSON {type(event).__name__}, not an object")
    _integer_field(event, "account_id", 1, 2**31 - 1)
    _integer_field(event, "amount", 1, 2**53)  # a credit is positive; the sum stays in bigint
    return event


def process(conn: psycopg.Connection, msg: Message, dead_letters: Producer, handle, apply) -> str:
    """One message to a durable outcome: "applied", "skipped" or "dead-lettered"."""
    try:
        event_id = checked_event_id(msg)
        applied = handle(conn, event_id, parse_event(msg.value()), apply)
    except (PoisonMessage, psycopg.DataError, psycopg.IntegrityError) as poison:  # no retry can fix it: park it
        reason = getattr(poison, "reason", None) or f"the database refused it: {first_line(poison)}"
        dead_letter(dead_letters, msg, reason)
        log.warning(DEAD_LETTERED_LOG, msg.topic(), msg.partition(), msg.offset(), reason)
        return "dead-lettered"
    if not applied:
        log.info(SKIPPED_LOG, event_id)
        return "skipped"
    return "applied"


def dead_letter_topic(topic: str) -> str:
    return f"{topic}.dlq"


def dead_letter(producer: Producer, msg: Message, reason: str) -> None:
    """Park the message on the DLQ with its key, value, headers and reason; return once it is durable.
    One too large for the DLQ (the reason headers pushed it past the limit) is parked as a
    reference instead: where it is in its topic, its size and SHA-256, so it can be fetched."""
    topic, where = dead_letter_topic(msg.topic()), f"{msg.topic()}/{msg.partition()}/{msg.offset()}"
    source = [("dlq_reason", reason.encode()), ("dlq_source", where.encode())]
    try:
        send_durably(producer, topic, msg.key(), msg.value(), [*(msg.headers() or ()), *source])
    except KafkaException as e:
        if e.args[0].code() != KafkaError.MSG_SIZE_TOO_LARGE:
            raise
        value = msg.value() or b""
        reference = {"parked_as": "reference", "bytes": len(value), "sha256": hashlib.sha256(value).hexdigest(),
                     "headers": len(msg.headers() or ())}
        send_durably(producer, topic, None, json.dumps(reference).encode(), source)


def commit_offset(consumer: Consumer, msg: Message) -> bool:
    """Commit the offset after msg, synchronously. A failure is logged, not raised: a
    rebalance took the partition, and its new owner will find the inbox row and skip."""
    try:
        consumer.commit(message=msg, asynchronous=False)
    except KafkaException as e:
        log.warning(COMMIT_FAILED_LOG, e.args[0].name())
        return False
    return True


if __name__ == "__main__":
    if sys.argv[1:]:
        print("consume.py takes no arguments: set CONSUMER_DSN and KAFKA_BROKERS (see its docstring)", file=sys.stderr)
        sys.exit(2)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    # Ctrl-C or SIGTERM ends the loop after the message in hand; poll() swallows a KeyboardInterrupt.
    stopping = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    # Added: where to read, and the group's timeouts, from the environment, as the lab's
    # harnesses start any consumer command (docs/your-consumer.md).
    settings = {key: os.environ[name] for name, key in FROM_ENVIRONMENT.items() if os.environ.get(name)}
    run(os.environ.get("KAFKA_TOPIC", "consumer.deposits"), group=os.environ.get("KAFKA_GROUP", CONSUMER_NAME),
        stop=stopping, **settings)
