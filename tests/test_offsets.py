"""Variant o against the real services: the offset commits with the inbox row, the database's
offset (not Kafka's) is where a restart begins, and a database that forgets a tail of
transactions (simulated: a snapshot of the consumer's tables restored, taken a hundred-odd
credits earlier, and its connection cut) makes o read that tail again, once, while c loses it."""
import threading
import time

import psycopg
import pytest
from confluent_kafka import Consumer, TopicPartition
from psycopg.conninfo import make_conninfo

import consume
import publish
from lab import harness, worker
from lab.faults.topic_recreated import recreate_topic
from lab.settings import BROKERS, SUPERUSER_DSN
from tests.seeds import shifted
from variants import consume_offsets

CONSUMER_TABLES = ("processed_messages", "ledger", "consumer_offsets")


def fetch(topic: str, count: int) -> list:
    reader = Consumer({"bootstrap.servers": BROKERS, "group.id": harness.unique("reader"),
                       "auto.offset.reset": "earliest", "enable.auto.commit": False})
    reader.subscribe([topic])
    got, end = [], time.monotonic() + 30
    while len(got) < count and time.monotonic() < end:
        got += [m for m in reader.consume(count - len(got), 0.5) if not m.error()]
    reader.close()
    return got


def test_the_offset_commits_with_the_inbox_row_or_not_at_all(topic, dsn, conn):
    harness.produce_events(topic, harness.make_events(2, prefix="oc", seed=shifted(1)))
    first, second = fetch(topic, 2)
    with psycopg.connect(dsn, autocommit=True) as own:
        assert consume_offsets.process_and_record(own, first, publish.make_producer(), consume.handle_once,
                                                  consume.credit_account, topic) == "applied"

        def broken(_conn, _event_id, _event):
            raise RuntimeError("the credit failed")

        with pytest.raises(RuntimeError):
            consume_offsets.process_and_record(own, second, publish.make_producer(), consume.handle_once, broken,
                                               topic)
    assert conn.execute("SELECT partition, next_offset FROM consumer_offsets").fetchall() == [(0, first.offset() + 1)]
    assert conn.execute("SELECT message_id FROM processed_messages").fetchall() == [("oc-1",)]


def run_in_thread(target, **kwargs):
    stop = threading.Event()
    thread = threading.Thread(target=target, kwargs={**kwargs, "stop": stop}, daemon=True)
    thread.start()
    return stop, thread


def test_a_start_seeks_to_the_databases_offset_not_kafkas(topic, group, dsn, conn, schema):
    events = harness.make_events(10, prefix="os", seed=shifted(2))
    harness.produce_events(topic, events)
    committer = Consumer({"bootstrap.servers": BROKERS, "group.id": group, "enable.auto.commit": False})
    committer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)  # Kafka says: from offset 2
    committer.close()
    conn.execute("INSERT INTO consumer_offsets VALUES (%s, %s, 0, 7)",
                 (consume.CONSUMER_NAME, consume_offsets.topic_identity(topic)))
    stop, thread = run_in_thread(consume_offsets.run_with_offsets, topic=topic, group=group, dsn=dsn)
    try:
        admin = harness.scoped_dsn(schema, harness.ADMIN_DSN)
        harness.wait_until(lambda: harness.ledger_count(admin) >= 3, 30, "three credits")
        harness.wait_until(lambda: harness.lag(group, topic) == 0, 30, "the topic drained")
    finally:
        stop.set()
        thread.join(30)
    assert [r[0] for r in conn.execute("SELECT event_id FROM ledger ORDER BY id")] == ["os-8", "os-9", "os-10"]


def supervised_c(stop, **kwargs):
    """c as the lab runs it: consume.run stops on the lost connection, and starts again."""
    worker.supervised(stop, lambda: consume.run(stop=stop, **kwargs))


def slow_credit(conn, event_id, event):
    time.sleep(0.005)  # slow enough that the snapshot and the restore land mid-stream
    consume.credit_account(conn, event_id, event)


@pytest.mark.parametrize("variant", ["o", "c"])
def test_a_database_that_forgets_a_tail(variant, topic, group, schema, conn):
    """o reads the forgotten tail again and applies each of it once; c, whose offsets Kafka
    holds, never sees it again."""
    events = harness.make_events(300, prefix="of", seed=shifted(3))
    harness.produce_events(topic, events)
    name = harness.unique("forgetful")
    dsn = make_conninfo(harness.scoped_dsn(schema), application_name=name)
    target = consume_offsets.run_with_offsets if variant == "o" else supervised_c
    stop, thread = run_in_thread(target, topic=topic, group=group, dsn=dsn, apply=slow_credit)
    admin = harness.scoped_dsn(schema, harness.ADMIN_DSN)
    try:
        harness.wait_until(lambda: harness.ledger_count(admin) >= 80, 60, "80 credits")
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")  # one consistent moment
            for table in (*CONSUMER_TABLES, "accounts"):
                conn.execute(f"CREATE TABLE snap_{table} AS TABLE {table}")
        harness.wait_until(lambda: harness.ledger_count(admin) >= 200, 60, "200 credits")
        with conn.transaction():
            # The server forgets: everything after the snapshot goes, and the connection with it.
            conn.execute("LOCK TABLE processed_messages, ledger, consumer_offsets, accounts IN ACCESS EXCLUSIVE MODE")
            for table in CONSUMER_TABLES:
                conn.execute(f"DELETE FROM {table}")
                conn.execute(f"INSERT INTO {table} OVERRIDING SYSTEM VALUE SELECT * FROM snap_{table}")
            conn.execute("UPDATE accounts SET balance = s.balance FROM snap_accounts s WHERE s.id = accounts.id")
            with psycopg.connect(SUPERUSER_DSN, autocommit=True) as root:
                cut = root.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                                   (name,)).fetchall()
            assert cut, "the consumer's connection was not found"
        harness.wait_until(lambda: harness.lag(group, topic) == 0, 60, "the topic drained")
        time.sleep(1.0)  # anything still in hand lands
    finally:
        stop.set()
        thread.join(30)
    verdict = harness.verdict_of(events, admin)
    if variant == "o":
        assert (verdict["duplicates"], verdict["lost"], verdict["balances_exact"]) == (0, 0, True)
    else:
        assert verdict["duplicates"] == 0 and verdict["lost"] > 0


def test_kafkas_lag_catches_up_with_the_database_without_a_new_message(topic, group, dsn, conn):
    """The database says everything is handled, Kafka's last commit says otherwise (a commit
    lost in an eviction): the next owner reads nothing, and still Kafka's lag ends at 0."""
    harness.produce_events(topic, harness.make_events(10, prefix="ol", seed=shifted(4)))
    committer = Consumer({"bootstrap.servers": BROKERS, "group.id": group, "enable.auto.commit": False})
    committer.commit(offsets=[TopicPartition(topic, 0, 9)], asynchronous=False)
    committer.close()
    conn.execute("INSERT INTO consumer_offsets VALUES (%s, %s, 0, 10)",
                 (consume.CONSUMER_NAME, consume_offsets.topic_identity(topic)))
    stop, thread = run_in_thread(consume_offsets.run_with_offsets, topic=topic, group=group, dsn=dsn)
    try:
        harness.wait_until(lambda: harness.lag(group, topic) == 0, 30, "Kafka's lag at 0")
    finally:
        stop.set()
        thread.join(30)
    assert conn.execute("SELECT count(*) FROM ledger").fetchone()[0] == 0


def test_a_topic_deleted_and_created_again_is_read_from_its_beginning(topic, group, dsn, conn, schema):
    # o keeps 10 as partition 0's next offset; the topic is deleted and made again, and 25 new
    # events land in it while o is down. Keyed by the name, o sought the new log to offset 10 and
    # never read its first 10 events; keyed by the topic's ID, the new log has no row and is
    # read from its beginning.
    admin = harness.scoped_dsn(schema, harness.ADMIN_DSN)
    before = harness.make_events(10, prefix="old", seed=shifted(5))
    after = harness.make_events(25, prefix="new", seed=shifted(6))
    harness.produce_events(topic, before)
    stop, thread = run_in_thread(consume_offsets.run_with_offsets, topic=topic, group=group, dsn=dsn)
    try:
        harness.wait_until(lambda: harness.ledger_count(admin) >= 10, 30, "the first topic's credits")
    finally:
        stop.set()
        thread.join(30)
    old_identity = consume_offsets.topic_identity(topic)
    recreate_topic(topic)
    assert consume_offsets.topic_identity(topic) != old_identity
    harness.produce_events(topic, after)
    stop, thread = run_in_thread(consume_offsets.run_with_offsets, topic=topic, group=group, dsn=dsn)
    try:
        harness.wait_until(lambda: harness.ledger_count(admin) >= 35, 30, "the new topic's credits")
    finally:
        stop.set()
        thread.join(30)
    assert harness.distinct_applied(admin) == 35
    assert conn.execute("SELECT count(*) FROM ledger").fetchone()[0] == 35
