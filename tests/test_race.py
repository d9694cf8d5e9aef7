"""Concurrent consumers on hot rows, against a real PostgreSQL: no deadlock, and a deadlock
that does happen is retried rather than ending the consumer."""
import random
import threading

import psycopg
import pytest

import consume
from lab import harness
from lab.harness import wait_until
from lab.settings import ADMIN_DSN
from measurements import measure_race
from tests.seeds import shifted
from variants import common
from variants.consume_batched import credit_accounts, handle_batch


def hammer(dsn: str, name: str, rounds: int, accounts: int, errors: list, start: threading.Barrier,
           shared: bool = False, one_at_a_time: bool = False, apply_batch=credit_accounts) -> None:
    """Batches of 40 credits over a few hot accounts, in a shuffled order: what three consumers
    of one group do when every event's copies sit on different partitions. `shared`: every
    thread gets the same IDs (the copies), each in its own order; `one_at_a_time`: handle_once
    per event, as c does, beside the batches."""
    rng = random.Random(f"{name}-{shifted(0)}")  # each thread its own order, moved by LAB_TEST_SEED
    with psycopg.connect(dsn, autocommit=True) as conn:
        start.wait(30)
        for round_ in range(rounds):
            owner = "all" if shared else name
            batch = [(f"{owner}-{round_}-{i}", {"account_id": (i * 7 + round_) % accounts + 1, "amount": 1})
                     for i in range(40)]
            rng.shuffle(batch)
            try:  # no Database.run here: its retry would hide a deadlock
                if one_at_a_time:
                    for event_id, event in batch:
                        consume.handle_once(conn, event_id, event)
                else:
                    handle_batch(conn, batch, apply_batch)
            except psycopg.Error as e:
                errors.append(e)
                return


@pytest.mark.parametrize("shared, last_one_at_a_time, width",
                         [(False, False, 3), (True, False, 3), (True, True, 3), (False, False, 8), (True, True, 8)],
                         ids=["own-ids", "copies", "copies-with-c", "own-ids-8", "copies-with-c-8"])
def test_batches_on_hot_accounts_never_deadlock(dsn, conn, shared, last_one_at_a_time, width):
    """Fails on a lock order where the ledger's foreign-key check (FOR KEY SHARE, in the batch's
    order) comes before the ordered account locks: two batches then each wait for the other.
    Three threads and eight, over three hot accounts."""
    errors, threads = [], []
    start = threading.Barrier(width)
    for n, name in enumerate(f"thread{i}" for i in range(width)):
        one_at_a_time = last_one_at_a_time and n == width - 1
        threads.append(threading.Thread(target=hammer, args=(dsn, name, 40, 3, errors, start, shared, one_at_a_time)))
        threads[-1].start()
    for t in threads:
        t.join(120)
    assert errors == []
    events = 1600 if shared else 1600 * width
    assert conn.execute("SELECT count(*), count(DISTINCT event_id) FROM ledger").fetchone() == (events, events)
    assert conn.execute("SELECT sum(balance) FROM accounts").fetchone()[0] == events


def credit_accounts_locking_after_the_ledger(conn, credits) -> None:
    """The control's lock order: the ledger's rows first (their foreign-key checks take FOR KEY
    SHARE on the accounts, in the batch's order), then the accounts FOR UPDATE, which conflicts
    with another batch's KEY SHARE: two batches each wait for the other."""
    ids, accounts, amounts = ([c[0] for c in credits], [c[1]["account_id"] for c in credits],
                              [c[1]["amount"] for c in credits])
    conn.execute("INSERT INTO ledger (event_id, account_id, amount) "
                 "SELECT * FROM unnest(%b::text[], %b::int[], %b::bigint[])", (ids, accounts, amounts))
    conn.execute("SELECT 1 FROM accounts WHERE id = ANY(%b) ORDER BY id FOR UPDATE", (sorted(set(accounts)),))
    for account, amount in zip(accounts, amounts, strict=True):
        conn.execute("UPDATE accounts SET balance = balance + %s WHERE id = %s", (amount, account))


def test_the_control_batches_that_lock_accounts_after_the_ledger_deadlock(dsn):
    """The hammer above can fail: the same three threads on the same hot accounts, with the lock
    order its docstring names, meet a deadlock."""
    errors, start = [], threading.Barrier(3)
    threads = [threading.Thread(target=hammer, args=(dsn, f"thread{i}", 40, 3, errors, start),
                                kwargs={"apply_batch": credit_accounts_locking_after_the_ledger}) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert any(isinstance(e, psycopg.errors.DeadlockDetected) for e in errors), errors


def lock_waiting(conn, pid: int) -> bool:
    return conn.execute("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s",
                        (pid,)).fetchone()[0] is True


def deadlock_once(dsn: str, watcher):
    """A work function for Database.run that takes account 1 then 2, while another transaction
    takes 2 then 1, so that the first attempt meets a real deadlock (and loses it: its
    deadlock_timeout is the shorter, so its backend finds the cycle and rolls itself back).
    Later attempts run alone. Returns (work, attempts, the other transaction's thread)."""
    attempts, holding, errors = [], threading.Event(), []
    other = psycopg.connect(dsn, autocommit=True)

    def other_side():
        try:
            with other.transaction():
                other.execute("SET LOCAL deadlock_timeout = '60s'")
                other.execute("UPDATE accounts SET balance = balance + 100 WHERE id = 2")
                holding.wait(30)
                other.execute("UPDATE accounts SET balance = balance + 100 WHERE id = 1")  # waits on the work
        except psycopg.Error as e:
            errors.append(e)
        finally:
            other.close()

    def work(conn):
        attempts.append(conn.info.backend_pid)
        with conn.transaction():
            conn.execute("SET LOCAL deadlock_timeout = '50ms'")
            conn.execute("UPDATE accounts SET balance = balance + 1 WHERE id = 1")
            if len(attempts) == 1:
                thread.start()
                holding.set()
                wait_until(lambda: lock_waiting(watcher, other.info.backend_pid), 30,
                           "the other transaction to wait on account 1", interval_s=0.01)
            conn.execute("UPDATE accounts SET balance = balance + 1 WHERE id = 2")  # closes the cycle
        return "committed"

    thread = threading.Thread(target=other_side, daemon=True)
    return work, attempts, thread, errors


@pytest.fixture
def owner_dsn(schema):
    """The deadlock tests shorten deadlock_timeout, which roles.sql lets the owner alone do."""
    return harness.scoped_dsn(schema, ADMIN_DSN)


def test_a_deadlock_is_retried_and_the_work_commits_once(owner_dsn, conn, caplog):
    db = common.Database(owner_dsn)
    work, attempts, other, other_errors = deadlock_once(owner_dsn, conn)
    with caplog.at_level("WARNING", logger="consume"):
        assert db.run(work) == "committed"
    other.join(30)
    db.close()
    assert other_errors == [] and len(attempts) == 2
    assert [r.getMessage() for r in caplog.records] == ["transaction retried after deadlock (attempt 1 of 10)"]
    # The rolled-back attempt left nothing: each side's credits landed once.
    assert conn.execute("SELECT id, balance FROM accounts WHERE id IN (1, 2) ORDER BY id").fetchall() == [
        (1, 101), (2, 101)]


def test_a_deadlock_past_the_retries_stops_the_consumer(owner_dsn, conn):
    db = common.Database(owner_dsn, retries=0)
    work, attempts, other, _ = deadlock_once(owner_dsn, conn)
    with pytest.raises(psycopg.errors.DeadlockDetected):
        db.run(work)
    other.join(30)
    db.close()
    assert len(attempts) == 1
    assert conn.execute("SELECT balance FROM accounts WHERE id = 1").fetchone()[0] == 100  # only the other's


def test_any_other_error_on_a_live_connection_is_not_retried(dsn):
    db, attempts = common.Database(dsn), []

    def work(conn):
        attempts.append(1)
        with conn.transaction():
            conn.execute("SET LOCAL statement_timeout = '1ms'")
            conn.execute("SELECT pg_sleep(1)")

    with pytest.raises(psycopg.errors.QueryCanceled):
        db.run(work)
    db.close()
    assert attempts == [1]


RACE = {"runs": 1, "consumers": 3, "copies": 3, "accounts": 5, "events": 300, "partitions": 6, "batch": 50,
        "work_ms": 0, "seed": shifted(7), "session_timeout_ms": 6000, "heartbeat_interval_ms": 2000, "lease_s": 2.0,
        "policy": "keys"}


@pytest.mark.slow
@pytest.mark.usefixtures("services")
def test_without_the_inbox_racing_consumers_apply_every_copy():
    # The control for the race below: the same schedule without the inbox applies each of an
    # event's 3 copies, so the harness would see a race the inbox failed to stop.
    record = measure_race.run_once("b", 1, RACE)
    assert record["died"] == 0 and record["lost"] == 0, record
    assert record["duplicates"] >= RACE["events"], record


@pytest.mark.slow
@pytest.mark.usefixtures("services")
@pytest.mark.parametrize("variant", ["c", "d", "external", "outbox"])
def test_consumers_racing_on_copies_apply_each_event_once(variant):
    """The race harness, small: 3 consumers, every event 3 times on distinct partitions, 5 hot
    accounts. No consumer dies; c and d, whose lock order is fixed, never even need a retry."""
    record = measure_race.run_once(variant, 1, RACE)
    assert record["died"] == 0, record["died_of"]
    assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0)
    assert record["balances_exact"] is True
    if variant in ("c", "d"):
        assert record["retried"] == 0
        assert record["skipped"] >= 600  # every copy after an event's first was met by the inbox


def test_a_serialization_failure_is_retried_too(dsn, conn, caplog):
    """Under REPEATABLE READ (a role's default_transaction_isolation can make it so), a row updated
    and committed by someone else after this transaction's snapshot fails with 40001."""
    db, attempts = common.Database(dsn), []

    def work(c):
        attempts.append(1)
        with c.transaction():
            c.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            c.execute("SELECT balance FROM accounts WHERE id = 1").fetchone()  # the snapshot is taken here
            if len(attempts) == 1:
                conn.execute("UPDATE accounts SET balance = balance + 100 WHERE id = 1")  # committed meanwhile
            c.execute("UPDATE accounts SET balance = balance + 1 WHERE id = 1")

    with caplog.at_level("WARNING", logger="consume"):
        db.run(work)
    db.close()
    assert len(attempts) == 2
    assert [r.getMessage() for r in caplog.records] == [
        "transaction retried after serialization failure (attempt 1 of 10)"]
    assert conn.execute("SELECT balance FROM accounts WHERE id = 1").fetchone()[0] == 101
