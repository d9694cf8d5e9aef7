"""An idempotent Kafka consumer: the inbox pattern.

Claim: each credit is applied once however many times Kafka delivers it. The
event's ID goes into `processed_messages` in the same Postgres transaction as
the credit, the credit is applied only when that insert claimed a new row, and
the Kafka offset is committed only after the transaction has committed. A crash
anywhere replays at most the message in hand, and the replay finds its row.

Assumptions: producers put a stable ID in the `event_id` header (publish.py);
the side effect lives in the same database as the inbox; `CONSUMER_DSN` and
`KAFKA_BROKERS` (settings.py) point at the services.

Beyond the happy path: a message that no retry can fix (no ID, not JSON, a
malformed credit, an unknown account) is parked on `<topic>.dlq` with a
`dlq_reason` header, and its offset is committed only once the broker has
confirmed the dead letter, so nothing is lost and the consumer keeps going.

    python consume.py                     # reads consumer.deposits as group wallet-credits
"""
import contextlib
import json
import logging
import random
import threading
import time

import psycopg
from confluent_kafka import Consumer, KafkaException, Message, Producer

import cli
from publish import DEMO_TOPIC, ensure_topic, make_producer
from settings import BROKERS, DSN

CONSUMER_NAME = "wallet-credits"  # the inbox key's first half: each consumer remembers its own IDs
MAX_EVENT_ID_BYTES = 512  # far above any UUID; a B-tree entry has a hard size limit
DEAD_LETTER_TIMEOUT_S = 30.0
log = logging.getLogger("consume")

# The lines the lab's harnesses count, printed here and nowhere else (harness.py parses them).
SKIPPED_LOG = "skipped duplicate %s"
DEAD_LETTERED_LOG = "dead-lettered %s/%s/%s: %s"
COMMIT_FAILED_LOG = "offset commit failed: %s"
PARTITIONS_LOG = "partitions %s: %s"  # assigned, revoked or lost: who owns what, when
RETRIED_LOG = "transaction retried after %s (attempt %d of %d)"


# --- the pattern: the side effect and the dedup, in one transaction ----------------------

def credit_account(conn: psycopg.Connection, event_id: str, event: dict) -> None:
    """The side effect. An increment: running it twice credits twice."""
    updated = conn.execute(
        "UPDATE accounts SET balance = balance + %s WHERE id = %s",
        (event["amount"], event["account_id"]),
    ).rowcount
    if updated == 0:
        raise PoisonMessage(f"unknown account {event['account_id']}")
    conn.execute(
        "INSERT INTO ledger (event_id, account_id, amount) VALUES (%s, %s, %s)",
        (event_id, event["account_id"], event["amount"]),
    )


def handle_once(conn: psycopg.Connection, event_id: str, event: dict, apply=credit_account,
                consumer: str = CONSUMER_NAME) -> bool:
    """Apply the event unless this consumer already has; True if it was applied now.

    A concurrent handler of the same ID blocks on the primary key until the
    first one commits (then claims nothing) or rolls back (then claims the row).
    """
    with conn.transaction():
        claimed = conn.execute(
            "INSERT INTO processed_messages (consumer, message_id) VALUES (%s, %s) "
            "ON CONFLICT DO NOTHING RETURNING message_id",
            (consumer, event_id),
        ).fetchone()
        if claimed is None:
            return False
        apply(conn, event_id, event)  # if this raises, the inbox row rolls back with it
    return True


# --- one message to a durable outcome, then its offset -----------------------------------

def process(conn: psycopg.Connection, msg: Message, dead_letters: Producer, handle, apply) -> str:
    """Bring one message to a durable outcome: "applied", "skipped" or "dead-lettered".

    `handle(conn, event_id, event, apply)` is the dedup step: handle_once, unless a
    variant swaps it. A poison message is parked before this returns, so its offset
    may be committed like any other's."""
    try:
        event_id = checked_event_id(msg)
        event = parse_event(msg.value())
        applied = handle(conn, event_id, event, apply)
    except PoisonMessage as poison:
        dead_letter(dead_letters, msg, poison.reason)
        log.warning(DEAD_LETTERED_LOG, msg.topic(), msg.partition(), msg.offset(), poison.reason)
        return "dead-lettered"
    if not applied:
        log.info(SKIPPED_LOG, event_id)
        return "skipped"
    return "applied"


def commit_offset(consumer: Consumer, msg: Message) -> bool:
    """Synchronously commit the offset after msg; a failure is logged, never raised.

    A failed commit means the partition moved to another member (or the group
    forgot us). Its next owner gets the message again and the inbox skips it.
    """
    try:
        consumer.commit(message=msg, asynchronous=False)
    except KafkaException as e:
        log.warning(COMMIT_FAILED_LOG, e.args[0].name())
        return False
    return True


def consumer_config(group: str, **overrides) -> dict:
    return {
        "bootstrap.servers": BROKERS,
        "group.id": group,
        # Off: the client would otherwise commit on a timer, for messages it has
        # merely handed us. We commit ourselves, after Postgres has.
        "enable.auto.commit": False,
        # A group with no committed offset starts at the beginning of the topic;
        # librdkafka's default, latest, would silently skip the backlog.
        "auto.offset.reset": "earliest",
        **overrides,
    }


def run(topic: str, group: str, apply=credit_account, *, handle=None, dsn: str = DSN,
        stop: threading.Event | None = None, after_db_commit=None, **overrides) -> None:
    """Consume `topic` as `group` until `stop` is set (or forever): each message through
    handle_once in one transaction, then its offset commit.

    `overrides` are librdkafka settings, e.g. run(t, g, **{"session.timeout.ms": 6000}).
    `handle` replaces handle_once (the lab's variants without the inbox, or with an
    external effect); `after_db_commit(msg, outcome)` runs between the database commit
    and the offset commit, where crashes hurt most.
    """
    handle = handle or handle_once
    with consuming(topic, group, dsn, overrides) as (consumer, dead_letters, db):
        while stop is None or not stop.is_set():
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                log.warning("consumer error: %s", msg.error())
                continue
            outcome = db.run(process, msg, dead_letters, handle, apply)
            if after_db_commit is not None:
                after_db_commit(msg, outcome)
            commit_offset(consumer, msg)


# --- what a message must carry, and where poison goes ------------------------------------

class PoisonMessage(Exception):
    """A message that no retry can fix; it is dead-lettered with this reason."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class DeadLetterFailed(Exception):
    """The broker did not confirm a dead letter, so the offset must not move past it."""


def event_id_of(msg: Message) -> str | None:
    """The producer's ID from the `event_id` header; None when absent, empty or not UTF-8.

    Never the offset: a republished copy of the same event gets a new one.
    """
    for key, value in msg.headers() or ():
        if key == "event_id" and value:
            try:
                return value.decode("utf-8")
            except UnicodeDecodeError:
                return None
    return None


def checked_event_id(msg: Message) -> str:
    event_id = event_id_of(msg)
    if event_id is None:
        raise PoisonMessage("no event_id header (missing, empty or not UTF-8)")
    if "\x00" in event_id:
        raise PoisonMessage("event_id contains a NUL byte, which Postgres text cannot hold")
    if len(event_id.encode()) > MAX_EVENT_ID_BYTES:
        raise PoisonMessage(f"event_id is longer than {MAX_EVENT_ID_BYTES} bytes")
    return event_id


def _integer_field(event: dict, name: str, low: int, high: int) -> None:
    if name not in event:
        raise PoisonMessage(f"event has no {name}")
    value = event[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise PoisonMessage(f"{name} must be an integer, got {type(value).__name__}")
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
    if not isinstance(event, dict):
        raise PoisonMessage(f"value is JSON {type(event).__name__}, not an object")
    _integer_field(event, "account_id", 1, 2**31 - 1)
    _integer_field(event, "amount", 1, 2**53)  # a credit is positive; the sum stays in bigint
    return event


def dead_letter_topic(topic: str) -> str:
    return f"{topic}.dlq"


def dead_letter(producer: Producer, msg: Message, reason: str) -> None:
    """Park the message on the DLQ with its key, value and headers; return only once it is durable."""
    headers = list(msg.headers() or ()) + [
        ("dlq_reason", reason.encode()),
        ("dlq_source", f"{msg.topic()}/{msg.partition()}/{msg.offset()}".encode()),
    ]
    outcome = []
    producer.produce(dead_letter_topic(msg.topic()), key=msg.key(), value=msg.value(), headers=headers,
                     on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(DEAD_LETTER_TIMEOUT_S)
    if not outcome:
        raise DeadLetterFailed(f"no acknowledgement for the dead letter within {DEAD_LETTER_TIMEOUT_S:g}s")
    if outcome[0] is not None:
        raise DeadLetterFailed(f"dead letter rejected: {outcome[0]}")


# --- plumbing: a connection that outlives the database, and the harness hooks ------------

# Errors after which the server has rolled the whole transaction back, committed nothing and
# moved no offset: running the same work again is safe, and usually succeeds.
ROLLED_BACK = {psycopg.errors.DeadlockDetected: "deadlock",
               psycopg.errors.SerializationFailure: "serialization failure"}


class Database:
    """The consumer's connection, which outlives a database restart and a deadlock.

    `run(work, *args)` calls work(conn, *args), where work is one transaction (and
    whatever it does once that has committed). Two kinds of failure are retried:
    - the server rolled the transaction back for a deadlock or a serialization
      failure: nothing committed, so work runs again, at most `retries` times,
      after a jittered backoff (so the two parties of a deadlock do not meet again);
    - the connection broke: the transaction in hand was rolled back by the server
      (or, if the break came during COMMIT, may have committed: the inbox row tells
      on the retry), so no offset has moved; it reconnects with a bounded backoff
      and calls work again with the same message. After `give_up_s` without a
      connection it raises.
    Any other error on a live connection is raised: the consumer stops without
    committing anything it has not applied.
    """

    def __init__(self, dsn: str, give_up_s: float = 120.0, retries: int = 10):
        self.dsn, self.give_up_s, self.retries = dsn, give_up_s, retries
        self.conn = psycopg.connect(dsn, autocommit=True)
        # Called after a reconnect, before the work runs again; it may raise to abandon the work
        # (consume_offsets.py re-reads its offsets from whatever server it reached).
        self.on_reconnect = None

    def run(self, work, *args):
        rolled_back = 0
        for _ in range(1000):  # each pass is a fresh connection; the deadline ends it long before this
            try:
                return work(self.conn, *args)
            except psycopg.OperationalError as e:
                if not self.conn.closed and not self.conn.broken:
                    cause = ROLLED_BACK.get(type(e))
                    if cause is None or rolled_back >= self.retries:
                        raise  # a real error on a live connection is not ours to hide
                    rolled_back += 1
                    log.warning(RETRIED_LOG, cause, rolled_back, self.retries)
                    time.sleep(random.uniform(0, min(0.01 * 2 ** rolled_back, 1.0)))
                    continue
                log.warning("database connection lost (%s); reconnecting", str(e).strip().splitlines()[0])
                self.reconnect()
                if self.on_reconnect is not None:
                    self.on_reconnect()
        raise RuntimeError("gave up after 1000 reconnections")

    def reconnect(self) -> None:
        started = time.monotonic()
        delay, last_error = 0.1, None
        while time.monotonic() - started < self.give_up_s:
            try:
                self.conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=5)
                log.warning("database reconnected after %.1fs", time.monotonic() - started)
                return
            except psycopg.OperationalError as e:
                last_error = e
                time.sleep(delay)
                delay = min(delay * 2, 5.0)  # backoff, capped: a restart usually takes seconds
        raise RuntimeError(f"database unreachable for {self.give_up_s:g}s: {last_error}")

    def close(self) -> None:
        self.conn.close()


def log_partitions(what: str, then=None):
    """A rebalance callback that logs who owns what, then calls `then` (consumer, partitions)."""
    def callback(consumer, partitions):
        log.info(PARTITIONS_LOG, what, ",".join(str(p.partition) for p in partitions) or "none")
        if then is not None:
            then(consumer, partitions)
    return callback


@contextlib.contextmanager
def consuming(topic: str, group: str, dsn: str, overrides: dict, on_revoke=None, on_lost=None, on_assign=None):
    """The consumer, the dead-letter producer and the database connection a run needs.
    `on_assign`, `on_revoke`, `on_lost`: what else to do when partitions come or go (after the log line).

    The consumer is closed on the way out (a clean exit leaves the group at once);
    a SIGKILL skips this, as it skips everything.
    """
    ensure_topic(dead_letter_topic(topic))
    consumer = Consumer(consumer_config(group, **overrides))
    dead_letters = make_producer()
    # Who owns what, when: the rebalance harness reads these lines to tell a zombie from the new owner.
    consumer.subscribe([topic], on_assign=log_partitions("assigned", on_assign),
                       on_revoke=log_partitions("revoked", on_revoke),
                       on_lost=log_partitions("lost", on_lost))
    db = None
    try:
        db = Database(dsn)
        yield consumer, dead_letters, db
    finally:
        if db is not None:
            db.close()
        consumer.close()


def main() -> None:
    parser = cli.Parser(description="Consume credits through the inbox.")
    parser.add_argument("--topic", default=DEMO_TOPIC)
    parser.add_argument("--group", default=CONSUMER_NAME)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    run(args.topic, args.group)


if __name__ == "__main__":
    main()
