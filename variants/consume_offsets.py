"""Variant o: the offset rides in the inbox transaction, so a database that forgets is re-read, not lost.

Claim: c is exactly as durable as the commit its inbox row rides in, and its
Kafka offset is not in that commit. A failover to a standby that had not yet
received the last commits forgets those credits, while Kafka still holds the
offsets committed after them: nobody will ever deliver them again. o stores the
next offset of each partition in `consumer_offsets`, in the same transaction as
the inbox row and the credit (Kafka's "storing offsets outside Kafka"). A
database that forgets a tail of transactions forgets their offsets with them;
o seeks to what the database holds and reads that tail again, and the inbox
skips whatever of it survived.

When it reads the database's offsets and seeks there:
    on every assignment (a partition with no row starts at the topic's beginning);
    after every reconnect, before anything else: the server it reached (perhaps a
    promoted standby) may hold less than the one it lost, and whatever had been
    fetched is dropped.
Kafka's committed offset is still written after each transaction, and the
database's offsets again after each seek, for lag monitoring and tools; it is
never read.

A topic is keyed by its identity, its name and its Kafka topic ID (`name@ID`), not by
its name: a topic deleted and created again under the same name is a new log whose
offsets start at 0 again, and seeking it to the old log's offsets would skip its first
records (M10's topic-recreated measured exactly that, when the key was the name).

The cost: one more row written in every transaction, a seek on every assignment and
reconnect, and a topic description from the broker on every assignment.

Assumptions: consume.py's; schema.sql's consumer_offsets, with grants.sql's grants.

    python -m variants.consume_offsets               # consumer.deposits as group wallet-credits-o
"""
import concurrent.futures
import threading
import time

import psycopg
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient

from consume import BROKERS, CONSUMER_NAME, DSN, commit_offset, credit_account, handle_once, process
from variants import common
from variants.common import log

# What the lab runs of this file (lab/registry.py reads it without importing the module).
VARIANTS = {
    "o": {"label": "o: the inbox, with the offset in its transaction", "reads": ["crash_after"]},
}
RESEEKED_LOG = "re-read the database's offsets after %s: %s"  # why, and partition=offset pairs


class Reseeked(Exception):
    """The database connection was new: the message in hand is dropped, the consumer re-seeked."""


def topic_identity(topic: str, admin: AdminClient | None = None, timeout_s: float = 10.0,
                   give_up_s: float = 60.0) -> str:
    """`name@ID`: the topic's name and the ID Kafka gave this incarnation of it. Asked again
    with backoff while the broker cannot answer (a restart, a leader moving); without the ID
    the consumer cannot tell where to start, so after `give_up_s` it raises and stops."""
    admin = admin or AdminClient({"bootstrap.servers": BROKERS})
    started, delay = time.monotonic(), 0.2
    while True:
        try:
            described = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout_s)[topic]
            return f"{topic}@{described.result(timeout=timeout_s).topic_id}"
        except (KafkaException, concurrent.futures.TimeoutError) as e:
            if time.monotonic() - started > give_up_s:
                raise RuntimeError(f"could not learn topic {topic}'s ID in {give_up_s:g} s: {e}") from e
            log.warning("could not describe topic %s, asking again in %.1fs: %s", topic, delay, e)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


def record_offset(conn: psycopg.Connection, msg: Message, identity: str, consumer: str = CONSUMER_NAME) -> None:
    """Inside the message's transaction: the partition's next offset is the one after it."""
    conn.execute(
        "INSERT INTO consumer_offsets (consumer, topic, partition, next_offset) VALUES (%s, %s, %s, %s) "
        "ON CONFLICT (consumer, topic, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset",
        (consumer, identity, msg.partition(), msg.offset() + 1))


def stored_offsets(conn: psycopg.Connection, partitions: list[TopicPartition], identities: dict[str, str],
                   consumer: str = CONSUMER_NAME) -> list[TopicPartition]:
    """Each partition at the database's next offset for its topic's identity; at the topic's
    beginning if it has none."""
    rows = dict(((topic, partition), offset) for topic, partition, offset in conn.execute(
        "SELECT topic, partition, next_offset FROM consumer_offsets WHERE consumer = %s AND topic = ANY(%s)",
        (consumer, sorted({identities[tp.topic] for tp in partitions}))))
    return [TopicPartition(tp.topic, tp.partition, rows.get((identities[tp.topic], tp.partition), OFFSET_BEGINNING))
            for tp in partitions]


def tell_kafka(consumer: Consumer, offsets: list[TopicPartition]) -> None:
    """Commit the database's offsets to Kafka too, so that its lag tells the truth. Without this
    a partition whose last message was handled, but whose Kafka commit failed (an eviction),
    shows a lag of one for ever: the next owner starts past that message and commits nothing."""
    if known := [tp for tp in offsets if tp.offset >= 0]:
        common.commit_offsets(consumer, known)


def process_and_record(conn: psycopg.Connection, msg: Message, dead_letters, handle, apply,
                       identity: str) -> str:
    """consume.process and the offset, in one transaction: handle_once's own transaction
    becomes a savepoint inside it. A skip and a dead letter move the offset too."""
    with conn.transaction():
        outcome = process(conn, msg, dead_letters, handle, apply)
        record_offset(conn, msg, identity)
    return outcome


def describe(offsets: list[TopicPartition]) -> str:
    return ",".join(f"{tp.partition}={'beginning' if tp.offset < 0 else tp.offset}" for tp in offsets) or "none"


def run_with_offsets(topic: str, group: str, apply=credit_account, *, handle=None, dsn: str = DSN,
                     stop: threading.Event | None = None, after_db_commit=None, **overrides) -> None:
    """consume.run, with the offsets kept in the inbox transaction and read from the database."""
    handle = handle or handle_once
    holder, identities, admin = {}, {}, AdminClient({"bootstrap.servers": BROKERS})

    def seek_on_assign(consumer: Consumer, partitions):
        # On assignment the database says where each partition starts, not Kafka; and the
        # topic is asked for its ID again, in case it is not the log it was.
        identities.update({name: topic_identity(name, admin) for name in {tp.topic for tp in partitions}})
        for _ in range(3):
            try:
                start = holder["db"].run(lambda conn: stored_offsets(conn, partitions, identities))
                break
            except Reseeked:  # the read reconnected (and re-seeked the old assignment): read again
                continue
        else:
            raise RuntimeError("the database kept reconnecting while partitions were assigned")
        log.info(RESEEKED_LOG, "assignment", describe(start))
        consumer.assign(start)
        tell_kafka(consumer, start)

    with common.consuming(topic, group, dsn, overrides, on_assign=seek_on_assign) as (consumer, dead_letters, db):
        holder["db"] = db

        def reseek():
            # A new connection: the server may have forgotten transactions the old one confirmed.
            assigned = consumer.assignment()
            offsets = stored_offsets(db.conn, assigned, identities) if assigned else []
            for tp in offsets:
                consumer.seek(tp)
            log.warning(RESEEKED_LOG, "a reconnect", describe(offsets))
            tell_kafka(consumer, offsets)
            raise Reseeked()

        db.on_reconnect = reseek
        while stop is None or not stop.is_set():
            if (msg := common.polled(consumer, 0.5)) is None:
                continue
            try:
                outcome = db.run(process_and_record, msg, dead_letters, handle, apply, identities[msg.topic()])
            except Reseeked:
                continue  # the message in hand is read again from where the database says, or not at all
            if after_db_commit is not None:
                after_db_commit(msg, outcome)
            commit_offset(consumer, msg)  # for lag and tools; never read back


def run_worker(lab) -> None:
    run_with_offsets(lab.args.topic, lab.args.group, lab.apply, stop=lab.stop, after_db_commit=lab.after_db_commit,
                     **lab.overrides)


def main() -> None:
    common.run_command(run_with_offsets, "Consume credits through the inbox, the offsets kept beside it.",
                       CONSUMER_NAME + "-o")


if __name__ == "__main__":
    main()
