"""handle_once against a real PostgreSQL. Where a test needs Kafka's delivery
order and crashes at exact points, it uses SimulatedPartition, a list with a
committed offset that stands in for one partition; says so in its name. The
real-Kafka versions of these cases are in test_kafka.py."""
import threading

import psycopg
import pytest

import consume
from consume import credit_account, handle_once
from lab import harness
from variants.common import apply_without_inbox

EVENTS = [("evt-1", {"account_id": 1, "amount": 100}),
          ("evt-2", {"account_id": 1, "amount": 100}),
          ("evt-3", {"account_id": 1, "amount": 300})]


def ledger_duplicates(conn) -> list:
    return conn.execute("SELECT event_id, count(*) FROM ledger GROUP BY event_id HAVING count(*) <> 1").fetchall()


def ledger_counts(conn) -> dict:
    return dict(conn.execute("SELECT event_id, count(*) FROM ledger GROUP BY event_id").fetchall())


def balance(conn, account: int = 1) -> int:
    return conn.execute("SELECT balance FROM accounts WHERE id = %s", (account,)).fetchone()[0]


class Crash(Exception):
    """The process died here: nothing after this point ran."""


class SimulatedPartition:
    """A simulated queue (not Kafka): messages in order and a committed offset.
    A consumer restarted after a crash resumes at the committed offset, as Kafka's does."""

    def __init__(self, messages):
        self.messages = list(messages)
        self.committed = 0

    def consume_until_crash(self, step, crash_after=None, crash_at=None):
        """Deliver from the committed offset; `step(offset, event_id, event)` handles and commits.
        Raises Crash once (event_id, point) == crash_after."""
        for offset in range(self.committed, len(self.messages)):
            event_id, event = self.messages[offset]
            step(offset, event_id, event, crash_at if event_id == crash_after else None)


def db_then_offset(conn, partition, handle):
    def step(offset, event_id, event, crash_at):
        handle(conn, event_id, event, credit_account)
        if crash_at == "after-db":
            raise Crash
        partition.committed = offset + 1
    return step


def offset_then_db(conn, partition):
    def step(offset, event_id, event, crash_at):
        partition.committed = offset + 1
        if crash_at == "after-offset":
            raise Crash
        handle_once(conn, event_id, event)
    return step


@pytest.mark.post
def test_double_delivery_is_applied_once(conn):
    event_id, event = EVENTS[0]
    assert handle_once(conn, event_id, event) is True
    assert handle_once(conn, event_id, event) is False
    assert ledger_duplicates(conn) == []
    assert balance(conn) == 100


@pytest.mark.post
def test_crash_between_db_and_offset_commit_applies_once_with_inbox_simulated_queue(conn):
    partition = SimulatedPartition(EVENTS)
    with pytest.raises(Crash):
        partition.consume_until_crash(db_then_offset(conn, partition, handle_once), "evt-2", "after-db")
    partition.consume_until_crash(db_then_offset(conn, partition, handle_once))  # the restart
    assert ledger_counts(conn) == {"evt-1": 1, "evt-2": 1, "evt-3": 1}
    assert balance(conn) == 500


@pytest.mark.post
def test_crash_between_db_and_offset_commit_applies_twice_without_inbox_simulated_queue(conn):
    partition = SimulatedPartition(EVENTS)
    with pytest.raises(Crash):
        partition.consume_until_crash(db_then_offset(conn, partition, apply_without_inbox), "evt-2", "after-db")
    partition.consume_until_crash(db_then_offset(conn, partition, apply_without_inbox))
    assert ledger_counts(conn) == {"evt-1": 1, "evt-2": 2, "evt-3": 1}
    assert balance(conn) == 600


@pytest.mark.post
def test_offset_first_is_at_most_once(conn):
    partition = SimulatedPartition(EVENTS)
    with pytest.raises(Crash):
        partition.consume_until_crash(offset_then_db(conn, partition), "evt-1", "after-offset")
    partition.consume_until_crash(offset_then_db(conn, partition))
    assert ledger_counts(conn) == {"evt-2": 1, "evt-3": 1}  # evt-1 is gone for good
    assert balance(conn) == 400


@pytest.mark.post
def test_exception_in_side_effect_rolls_back_inbox_row_and_redelivery_applies(conn):
    def failing(conn, event_id, event):
        credit_account(conn, event_id, event)
        raise RuntimeError("the side effect failed half-way")

    event_id, event = EVENTS[0]
    with pytest.raises(RuntimeError):
        handle_once(conn, event_id, event, apply=failing)
    assert conn.execute("SELECT count(*) FROM processed_messages").fetchone()[0] == 0
    assert balance(conn) == 0
    assert handle_once(conn, event_id, event) is True
    assert ledger_counts(conn) == {"evt-1": 1}
    assert balance(conn) == 100


def backend_waits_on_lock(conn, pid: int) -> bool:
    return conn.execute("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s",
                        (pid,)).fetchone()[0] is True


def race(dsn, conn, first_outcome: str):
    """First handler claims evt-1 and holds its transaction open; the second handles evt-1
    too. Synchronised on events and on pg_stat_activity, never on sleeps."""
    claimed, release = threading.Event(), threading.Event()
    results, errors = {}, []

    def holding(c, event_id, event):
        claimed.set()
        assert release.wait(30), "the test never released the first handler"
        if first_outcome == "rollback":
            raise RuntimeError("first handler fails after claiming")
        credit_account(c, event_id, event)

    def first():
        with psycopg.connect(dsn, autocommit=True) as c:
            try:
                results["first"] = handle_once(c, *EVENTS[0], apply=holding)
            except RuntimeError:
                results["first"] = "rolled back"

    second_conn = psycopg.connect(dsn, autocommit=True)
    second_pid = second_conn.info.backend_pid

    def second():
        try:
            results["second"] = handle_once(second_conn, *EVENTS[0])
        except Exception as e:  # surfaced by the assertion below
            errors.append(e)

    a = threading.Thread(target=first)
    a.start()
    assert claimed.wait(30), "the first handler never claimed the row"
    b = threading.Thread(target=second)
    b.start()
    harness.wait_until(lambda: backend_waits_on_lock(conn, second_pid), 30,
                       "the second handler to block on the inbox row", interval_s=0.02)
    assert "second" not in results  # it is blocked, not done
    release.set()
    a.join(30)
    b.join(30)
    second_conn.close()
    assert not errors
    return results


@pytest.mark.post
def test_racing_consumers_primary_key_serialises_them(dsn, conn):
    results = race(dsn, conn, "commit")
    assert results == {"first": True, "second": False}
    assert ledger_duplicates(conn) == []
    assert balance(conn) == 100


@pytest.mark.post
def test_racing_consumers_second_does_the_work_if_first_rolls_back(dsn, conn):
    results = race(dsn, conn, "rollback")
    assert results == {"first": "rolled back", "second": True}
    assert ledger_counts(conn) == {"evt-1": 1}
    assert balance(conn) == 100


@pytest.mark.post
def test_inbox_is_scoped_per_consumer(conn):
    event_id, event = EVENTS[0]

    def notify(conn, event_id, event):
        conn.execute("INSERT INTO ledger (event_id, account_id, amount) VALUES (%s, 2, 0)", (event_id,))

    assert handle_once(conn, event_id, event) is True
    assert handle_once(conn, event_id, event, apply=notify, consumer="notifications") is True
    assert handle_once(conn, event_id, event, apply=notify, consumer="notifications") is False
    rows = conn.execute("SELECT consumer FROM processed_messages WHERE message_id = %s ORDER BY consumer",
                        (event_id,)).fetchall()
    assert rows == [("notifications",), (consume.CONSUMER_NAME,)]


def test_event_id_full_of_sql_metacharacters_is_stored_verbatim(conn):
    nasty = "evt'); DROP TABLE ledger; -- \"%s\" \\ $1 ;"
    assert handle_once(conn, nasty, {"account_id": 3, "amount": 7}) is True
    assert handle_once(conn, nasty, {"account_id": 3, "amount": 7}) is False
    assert conn.execute("SELECT message_id FROM processed_messages").fetchall() == [(nasty,)]
    assert conn.execute("SELECT event_id FROM ledger").fetchall() == [(nasty,)]
