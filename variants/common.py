"""What the consumers beyond the post share, and consume.py leaves out to stay the post's listing.

- `Database`: a connection that reconnects after a lost server and runs a transaction again
  after a deadlock or a serialization failure, so the batched variants (d, p, k, o, e/f) keep
  it through a Postgres restart. consume.py stops instead, for its supervisor to start again,
  which is as safe: no offset moves before its transaction commits (README, "Reconnect or exit").
- `consuming`: the consumer, dead-letter producer and Database a variant's loop needs, with
  its rebalances logged (PARTITIONS_LOG) so the lab can tell a zombie from the new owner.
- `Parser`: argparse that reports a bad flag in one line; `run_command`, a consumer's command line.
- `role_dsn`: a role's DSN on CONSUMER_DSN's server, so one variable moves them all.
- the loops' common steps: `polled` and `fetched` (a client error logged, never handled),
  `decoded` and `settle` (a batch's poison, skips and dead letters), `commit_offsets`.

Imports run one way: this module imports only the post's files.
"""
import argparse
import contextlib
import inspect
import logging
import os
import random
import sys
import time

import psycopg
from confluent_kafka import Consumer, KafkaException, Message, TopicPartition
from psycopg.conninfo import make_conninfo

import consume
from publish import DEMO_TOPIC, ensure_topic, make_producer

log = logging.getLogger("consume")  # the lab reads one logger's lines, whichever loop prints them

# The lines the lab counts, printed here and nowhere else (lab/harness.py parses them).
PARTITIONS_LOG = "partitions %s: %s"  # assigned, revoked or lost: who owns what, when
RETRIED_LOG = "transaction retried after %s (attempt %d of %d)"
RECONNECTED_LOG = "database reconnected after %.1fs"


class Parser(argparse.ArgumentParser):
    """argparse, with a bad flag reported in one line that says what is wrong."""

    def error(self, message):
        print(f"{self.prog}: {message} (see --help)", file=sys.stderr)
        sys.exit(2)


def at_least(parser: argparse.ArgumentParser, args, least: int, *names: str) -> None:
    for name in names:
        if getattr(args, name) < least:
            parser.error(f"--{name.replace('_', '-')} must be at least {least}")


def run_command(run, description: str, group: str = consume.CONSUMER_NAME, **counts: str) -> None:
    """A consumer's command: its flags parsed, its log lines set up, then run(topic, group, **counts).
    Flags: --topic, --group, and for each of `counts` (name=help) a whole number of at least 1,
    whose default is run's own."""
    defaults = inspect.signature(run).parameters
    parser = Parser(description=description)
    parser.add_argument("--topic", default=DEMO_TOPIC)
    parser.add_argument("--group", default=group)
    for name, meaning in counts.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=defaults[name].default, help=meaning)
    args = parser.parse_args()
    at_least(parser, args, 1, *counts)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    run(args.topic, args.group, **{name: getattr(args, name) for name in counts})


def role_dsn(role: str, variable: str) -> str:
    """$variable, or CONSUMER_DSN's server and database as `role` (whose password is its name)."""
    return os.environ.get(variable) or make_conninfo(consume.DSN, user=role, password=role)


# Errors after which the server has rolled the whole transaction back, committed nothing and
# moved no offset: running the same work again is safe, and usually succeeds.
ROLLED_BACK = {psycopg.errors.DeadlockDetected: "deadlock",
               psycopg.errors.SerializationFailure: "serialization failure"}
# Errors by which the server refused a value (a balance past bigint): no retry can fix them, so
# a batch that meets one runs again an event at a time, and the refused event is dead-lettered.
REFUSED = (psycopg.DataError, psycopg.IntegrityError)


class Database:
    """A consumer's connection, which outlives a database restart and a deadlock.

    `run(work, *args)` calls work(conn, *args), where work is one transaction (and
    whatever it does once that has committed), and calls it again:
    - after a deadlock or a serialization failure (ROLLED_BACK), at most `retries`
      times, after a jittered backoff (so the two parties of a deadlock do not meet again);
    - after the connection broke: the server rolled the transaction in hand back (or, if
      the break came during COMMIT, it may have committed: the inbox row tells on the
      retry), so no offset has moved; it reconnects with a bounded backoff, and raises
      after `give_up_s` without a connection.
    Any other error on a live connection is raised: the consumer stops without
    committing anything it has not applied.
    """

    def __init__(self, dsn: str, give_up_s: float = 120.0, retries: int = 10):
        self.dsn, self.give_up_s, self.retries = dsn, give_up_s, retries
        self.conn = consume.connect(dsn, give_up_s)  # a server that refuses the first connection is waited for too
        # Called after a reconnect, before the work runs again; it may raise to abandon the work
        # (consume_offsets.py re-reads its offsets from whatever server it reached).
        self.on_reconnect = None

    def run(self, work, *args):
        rolled_back = 0
        for _ in range(1000):  # each pass is a fresh connection; the deadline ends it long before this
            try:
                return work(self.conn, *args)
            except psycopg.Error as e:  # the server can end a session with any class of error
                # (25P03, an idle-in-transaction timeout, is an InternalError): the broken
                # connection, not the class, says whether the work may have been cut off
                if not self.conn.closed and not self.conn.broken:
                    cause = ROLLED_BACK.get(type(e))
                    if cause is None or rolled_back >= self.retries:
                        raise  # a real error on a live connection is not ours to hide
                    rolled_back += 1
                    log.warning(RETRIED_LOG, cause, rolled_back, self.retries)
                    time.sleep(random.uniform(0, min(0.01 * 2 ** rolled_back, 1.0)))
                    continue
                log.warning("database connection lost (%s); reconnecting", consume.first_line(e))
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
                log.warning(RECONNECTED_LOG, time.monotonic() - started)
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


def partition_logging(on_assign=None, on_revoke=None, on_lost=None) -> dict:
    """consume.run's `rebalance_callbacks` that log every assignment, revocation and loss, then call
    on_assign, on_revoke or on_lost (consumer, partitions), if given."""
    return {"on_assign": log_partitions("assigned", on_assign), "on_revoke": log_partitions("revoked", on_revoke),
            "on_lost": log_partitions("lost", on_lost)}


@contextlib.contextmanager
def consuming(topic: str, group: str, dsn: str, overrides: dict, on_revoke=None, on_lost=None, on_assign=None):
    """The consumer, the dead-letter producer and the Database a variant's loop needs.
    `on_assign`, `on_revoke`, `on_lost`: what else to do when partitions come or go (after the log line).

    The consumer is closed on the way out (a clean exit leaves the group at once);
    a SIGKILL skips this, as it skips everything.
    """
    ensure_topic(consume.dead_letter_topic(topic))
    db = Database(dsn)  # first: a consumer that joined the group while it waits for the database
    # would hold partitions it cannot work on
    consumer = Consumer(consume.consumer_config(group, **overrides))
    dead_letters = make_producer()
    try:
        consumer.subscribe([topic], **partition_logging(on_assign, on_revoke, on_lost))
        yield consumer, dead_letters, db
    finally:
        db.close()
        consumer.close()


def apply_without_inbox(conn: psycopg.Connection, event_id: str, event: dict, apply=consume.credit_account) -> bool:
    """b's handler (and a1's, a2's, e's): the same transaction as handle_once, without the inbox row."""
    with conn.transaction():
        apply(conn, event_id, event)
    return True


# --- the loops' common steps

def polled(consumer: Consumer, timeout_s: float) -> Message | None:
    """The next message; None when nothing came, or when what came was an error (logged)."""
    msg = consumer.poll(timeout_s)
    if msg is not None and msg.error():
        log.warning("consumer error: %s", msg.error())
        return None
    return msg


def fetched(consumer: Consumer, batch: int) -> list[Message]:
    """Up to `batch` messages, errors logged and left out. A short wait: a partial batch beats an idle one."""
    messages = []
    for msg in consumer.consume(batch, 0.1):
        if msg.error():
            log.warning("consumer error: %s", msg.error())
        else:
            messages.append(msg)
    return messages


def decoded(messages: list[Message], read_id=consume.checked_event_id, read_event=consume.parse_event):
    """A batch through consume.py's checks (or faster ones that give the same verdicts): each
    valid message as (msg, event_id, event), in order, and the poison as (msg, reason)."""
    valid, poison = [], []
    for msg in messages:
        try:
            valid.append((msg, read_id(msg), read_event(msg.value())))
        except consume.PoisonMessage as e:
            poison.append((msg, e.reason))
    return valid, poison


def settle(valid, applied: set, bad: dict, poison: list, dead_letters) -> int:
    """A batch after its transaction: each valid copy was applied (the first copy of an ID in
    `applied`; a repeat of it is a skip), skipped (logged), or refused (`bad`: the copy's id() ->
    why), which makes it poison. All the poison is then dead-lettered, durably. Returns the skips."""
    applied, skipped = set(applied), 0
    # A batch of new IDs, each once, all applied (the usual one) has nothing to sort out: as
    # many IDs applied as valid copies means every copy's ID is distinct and applied.
    for msg, event_id, event in () if not bad and len(applied) == len(valid) else valid:
        if id(event) in bad:
            poison.append((msg, bad[id(event)]))
        elif event_id in applied:
            applied.discard(event_id)
        else:
            skipped += 1
            log.info(consume.SKIPPED_LOG, event_id)
    for msg, reason in poison:
        consume.dead_letter(dead_letters, msg, reason)
        log.warning(consume.DEAD_LETTERED_LOG, msg.topic(), msg.partition(), msg.offset(), reason)
    return skipped


def next_offsets(messages: list[Message]) -> list[TopicPartition]:
    """The offset after the last of `messages` in each partition. Not the consumer's position:
    that counts what was fetched and handed over, and a pass cut short (an exception, a
    revoke on the way out) has not handled all of that."""
    after = {}
    for msg in messages:
        key = (msg.topic(), msg.partition())
        after[key] = max(after.get(key, 0), msg.offset() + 1)
    return [TopicPartition(topic, partition, offset) for (topic, partition), offset in after.items()]


def commit_offsets(consumer: Consumer, offsets: list[TopicPartition]) -> bool:
    """Commit `offsets`, synchronously. A failure is logged, not raised, as consume.commit_offset's
    is: the partition went to a new owner, which finds the inbox rows and skips."""
    try:
        consumer.commit(offsets=offsets, asynchronous=False)
    except KafkaException as e:
        log.warning(consume.COMMIT_FAILED_LOG, e.args[0].name())
        return False
    return True
