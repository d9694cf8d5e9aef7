"""M10's faults, each once on the real services, with its control: the same schedule on a
variant without the inbox (or with auto-commit) fails where the inbox holds. Each run uses a
login role of its own (nemesis.role_of_its_own), so refusing its connections, or pausing its
consumer, touches no other test on the same server."""
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from lab import nemesis, registry, stack
from lab.pgproxy import CommitReplyDropper
from measurements import measure_faults_more
from tests.seeds import shifted

pytestmark = pytest.mark.usefixtures("services")

CONFIG = {"events": 400, "partitions": 6, "work_ms": 10, "faults": 1, "every_s": 2, "pause_s": 5, "outage_s": 3,
          "stop_deadline_s": 30, "idle_tx_timeout_ms": 0, "session_timeout_ms": 3000, "max_poll_interval_ms": 5000,
          "batch": 50, "seed": shifted(1), "forgotten": 0.0, "delete_group": True}
# pause-consumer lands while a consumer is stalled inside a credit's transaction (1 s on every
# 100th event's first handling), so that the pause holds the inbox row's lock: by construction.
# The fault comes due early (every_s: 0.25-0.75 s after both consumers applied a credit), when a
# consumer can have begun one stall at most, so stalls are still to come for the fault to wait
# for: with every_s 2 all four had sometimes begun, and the fault waited for a fifth in vain.
# The pause outlasts the session timeout by enough for the other consumer to be given the
# partition and reach the held row while the paused one still stands: an early fault leaves it
# most of the 400 credits to work through first (up to ~3 s, and its own stalls), so 12 s, where
# 7 s sometimes ended before it got there.
PAUSED_IN_A_TRANSACTION = {**CONFIG, "in_handler": 100, "in_handler_s": 1, "pause_s": 12,
                           "session_timeout_ms": 2000, "every_s": 0.5}


def run(fault: str, variant: str, config: dict = CONFIG) -> dict:
    record = measure_faults_more.run_once(fault, variant, 1, config)
    assert record["faults"] == config["faults"] and record["settled"], record
    return record


def test_a_commit_whose_reply_is_lost_is_not_applied_twice():
    record = run("lost-commit-reply", "c")
    assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0), record
    assert record["fault_log"][0]["dropped"].startswith("COMMIT"), record
    # the witness: the message whose reply was lost came again and met its inbox row
    assert record["skipped"] >= 1, record


def test_without_the_inbox_a_commit_whose_reply_is_lost_is_applied_twice():
    record = run("lost-commit-reply", "b")
    assert record["duplicates"] == record["faults"] and record["lost"] == 0, record


def test_a_paused_consumer_holds_its_row_and_the_new_owner_skips_it():
    record = run("pause-consumer", "c", PAUSED_IN_A_TRANSACTION)
    met = record["fault_log"][0]
    assert met["in_transaction"] is True, record
    # the new owner reached the paused consumer's inbox row and waited on its lock, seen in
    # pg_stat_activity while the pause lasted (with no idle_in_transaction_session_timeout,
    # nothing ends that wait but the paused process)
    assert met["lock_waited"] is True, record
    assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0), record
    assert record["skipped"] >= 1, record


def test_without_the_inbox_a_paused_consumer_and_its_successor_both_credit():
    record = run("pause-consumer", "b", PAUSED_IN_A_TRANSACTION)
    met = record["fault_log"][0]
    assert met["in_transaction"] is True, record
    # b's stall comes before its first write: the paused transaction holds no row, nobody waits
    assert met["lock_waited"] is False, record
    assert record["duplicates"] >= 1 and record["lost"] == 0, record


@pytest.mark.serial  # mostly waiting on its pause: on the second stack, beside the rest
@pytest.mark.parametrize("variant, holds", [("p", False), ("d", True)])
def test_a_paused_p_holds_no_transaction_where_d_holds_one(variant, holds):
    """p's batches are single statements in autocommit, so a pause of p at work lands outside any
    transaction and no new owner waits on a row of it. The control: d, paused on the same schedule,
    is inside its batch's transaction (whether its successor reaches those rows while the pause
    lasts depends on its own backlog, so that is not asked). Neither loses or doubles a credit."""
    record = run("pause-consumer", variant, {**CONFIG, "events": 2000, "pause_s": 8})  # 400 drain before it is due
    met = record["fault_log"][0]
    assert met["in_transaction"] is holds, record
    if not holds:
        assert met["lock_waited"] is False, record
    assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0), record


def test_an_idle_in_transaction_timeout_ends_the_paused_transaction_and_loses_nothing():
    record = run("pause-consumer", "c", {**PAUSED_IN_A_TRANSACTION, "idle_tx_timeout_ms": 2000})
    assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0), record
    # the server ended the paused session (IdleInTransactionSessionTimeout, an InternalError, not
    # an OperationalError): the paused consumer woke to a dead connection and stopped, its
    # supervisor started it again, and the message it held was applied once, by someone
    assert record["exits"] or record["restarted"], record


# pause-postgres: the server process of a consumer stalled inside its transaction is stopped
# for longer than max.poll.interval.ms, so the consumer, hung in its next statement, leaves the group
PAUSED_SERVER = {**PAUSED_IN_A_TRANSACTION, "max_poll_interval_ms": 3000}


def test_a_paused_server_process_keeps_its_rows_and_the_new_owner_skips_its_work():
    record = run("pause-postgres", "c", PAUSED_SERVER)
    met = record["fault_log"][0]
    assert met["state"] == "idle in transaction" and met["lock_waited"] is True, record
    assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0), record
    assert record["skipped"] >= 1, record


def test_without_the_inbox_a_paused_server_process_and_the_new_owner_both_credit():
    record = run("pause-postgres", "b", PAUSED_SERVER)
    assert record["fault_log"][0]["state"] == "idle in transaction", record
    assert record["duplicates"] >= 1 and record["lost"] == 0, record


@pytest.mark.root  # mounts a tmpfs
@pytest.mark.parametrize("variant", ["c", "p"])  # p: once hung on its way out after the error
def test_a_full_disk_stops_the_credits_and_loses_nothing_once_it_has_room(variant):
    record = run("disk-full", variant)
    # the consumer met DiskFull on its live connection, stopped, and its supervisor (in-process or
    # the pool) started it again until the disk had room
    # c restarts in its own process, on a line that names the full disk; p's worker exits, and the pool starts it again
    restarts = record["restarted_on_disk_full"] + (len(record["exits"]) if variant == "p" else 0)
    assert restarts >= 1, record
    assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0), record


@pytest.mark.root  # mounts a tmpfs
def test_with_auto_commit_a_full_disk_loses_the_rest_of_the_poll():
    # a2 stops on the error mid-batch; close() commits the offsets of the whole poll
    record = run("disk-full", "a2")
    assert record["lost"] >= 1, record


def test_offsets_gone_replay_the_topic_and_the_inbox_skips_all_it_remembers():
    record = run("offsets-expired", "c", {**CONFIG, "events": 200})
    assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0), record
    assert record["skipped"] == 200, record  # the whole topic again, every copy met its row


def test_offsets_gone_after_retention_forgot_half_the_inbox_apply_that_half_again():
    # the inbox must remember at least as long as the broker keeps the group's offsets
    record = run("offsets-expired", "c", {**CONFIG, "events": 200, "forgotten": 0.5})
    assert record["fault_log"][0]["forgotten"] == 100, record
    assert record["duplicates"] == 100 and record["lost"] == 0, record


def test_offsets_kept_in_the_database_do_not_replay_when_the_groups_expire():
    record = run("offsets-expired", "o", {**CONFIG, "events": 200, "forgotten": 0.5})
    assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0), record
    assert record["skipped"] == 0, record  # o starts where its database says: nothing is read twice


# The signal lands while the consumer is stalled inside a handler (1 s on the first handling of
# every 100th credit), so it always holds something unfinished: a message, a batch, lanes. The
# fault comes due early (every_s 0.5: 0.25-0.75 s after the first credit), when stalls are still
# to come for it to wait for (the schedule PAUSED_IN_A_TRANSACTION explains).
SIGNAL_IN_A_HANDLER = {**CONFIG, "in_handler": 100, "in_handler_s": 1, "every_s": 0.5}


# d, p and k end on the batch (or the lanes) in hand, o with its offsets in its own transaction:
# docs/faults-more.md says every loop ends after what it holds, each closing cleanly. k's 16
# lanes would drain 400 credits at 10 ms each before the first stalls were over: it is given
# 1,000 at 100 ms.
@pytest.mark.parametrize("variant, config", [
    ("c", SIGNAL_IN_A_HANDLER), ("d", SIGNAL_IN_A_HANDLER), ("p", SIGNAL_IN_A_HANDLER), ("o", SIGNAL_IN_A_HANDLER),
    ("k", {**SIGNAL_IN_A_HANDLER, "events": 1000, "work_ms": 100})], ids=["c", "d", "p", "o", "k"])
def test_a_graceful_stop_finishes_what_it_holds_and_exits_cleanly(variant, config):
    record = run("sigterm", variant, config)
    stop = record["fault_log"][0]
    assert (stop["exit_code"], stop["sigkilled"]) == (0, False), record
    assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0), record


def test_even_with_auto_commit_a_graceful_stop_loses_nothing_here():
    # No consumer of the lab's abandons what it holds on SIGTERM: a2 finishes the stalled credit
    # and the rest of the up to 100 messages its last poll handed over before close() commits
    # their offsets.
    record = run("sigterm", "a2", SIGNAL_IN_A_HANDLER)
    assert (record["fault_log"][0]["exit_code"], record["fault_log"][0]["sigkilled"]) == (0, False), record
    assert record["lost"] == 0, record


# The control: a2's loop, but leaving what it holds at the signal: the credit whose handler was
# working when it came (the stall) and the rest of its batch. Their offsets were stored when
# consume() handed the batch over, so close() commits past what it never credited: at least
# the stalled credit is lost, wherever in its batch it was.
LEAVES_ITS_BATCH = '''
"""The control of the graceful-stop tests: a2's loop, leaving its batch when told to stop."""
VARIANTS = {"a2-leaves-its-batch": {"label": "a2, leaving its batch at SIGTERM (a test's control)"}}


def run_worker(lab):
    from confluent_kafka import Consumer

    import consume
    from variants import common

    def credit(conn, event_id, event):
        consume.credit_account(conn, event_id, event)
        lab.first_effect(event_id)

    consumer = Consumer({"bootstrap.servers": consume.BROKERS, "group.id": lab.args.group,
                         "auto.offset.reset": "earliest", **lab.overrides})
    try:
        with consume.connect(consume.DSN) as conn:
            consumer.subscribe([lab.args.topic])
            while not lab.stop.is_set():
                for msg in consumer.consume(100, 0.5):
                    event_id, event = consume.checked_event_id(msg), consume.parse_event(msg.value())
                    lab.work([(event_id, event)])  # the handler's work, where the stall is
                    if lab.stop.is_set():
                        break  # the message in hand and the rest of the batch, left
                    common.apply_without_inbox(conn, event_id, event, credit)
    finally:
        consumer.close()
'''


def test_a_loop_that_leaves_its_batch_at_the_signal_loses_the_rest_of_it(tmp_path, monkeypatch):
    path = tmp_path / "leaves_its_batch.py"
    path.write_text(LEAVES_ITS_BATCH)
    monkeypatch.setenv(registry.EXTRA, "")
    registry.add_file(path)
    try:
        record = run("sigterm", "a2-leaves-its-batch", SIGNAL_IN_A_HANDLER)
    finally:
        monkeypatch.delenv(registry.EXTRA)
        registry.everything.cache_clear()
    assert (record["fault_log"][0]["exit_code"], record["fault_log"][0]["sigkilled"]) == (0, False), record
    assert record["lost"] > 0 and record["duplicates"] == 0, record


def test_a_consumer_started_while_postgres_refuses_it_waits_and_then_consumes():
    record = run("pg-max-connections", "c")
    assert record["connect_refused"] >= 1 and record["exits"] == [], record
    assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0), record


@pytest.mark.parametrize("variant", ["o"])
def test_a_topic_deleted_and_created_again_is_read_whole(variant):
    # o keyed its offsets by the topic's name and sought the new log to the old one's offsets,
    # skipping its first records (tests/test_offsets.py shows that on the old code); now by its ID
    record = run("topic-recreated", variant, {**CONFIG, "events": 200})
    assert record["fault_log"][0]["republished"] == 200
    assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0), record


# --- the proxy that drops a commit's reply, on its own

@pytest.fixture
def dropper():
    proxy = CommitReplyDropper(("127.0.0.1", stack.postgres_params()["port"]))
    yield proxy
    proxy.close()


def test_the_dropper_lets_a_commit_land_and_cuts_its_reply(dropper, conn, dsn):
    with psycopg.connect(dropper.dsn(dsn), autocommit=True) as other:
        other.execute("SELECT 1")  # a read before arming: forwarded, the session stays
        dropper.arm()
        # reads while armed: held, then forwarded, since they wrote nothing; run often enough that
        # psycopg prepares the statement, so that later runs name it and carry no text
        for k in range(7):
            other.execute("SELECT count(*) FROM processed_messages WHERE message_id = %s", (str(k),))
        assert not dropper.fired.is_set()
        with pytest.raises(psycopg.OperationalError):
            with other.transaction():
                other.execute("INSERT INTO processed_messages (consumer, message_id) VALUES ('t', '1')")
    assert dropper.dropped == ["COMMIT"]  # each statement is an exchange of its own
    # the server committed what the client was never told of
    assert conn.execute("SELECT count(*) FROM processed_messages").fetchone()[0] == 1


def test_the_dropper_drops_a_select_that_wrote(dropper, conn, dsn):
    # p's one statement: a SELECT whose WITH inserts, run outside a transaction
    statement = ("WITH claimed AS (INSERT INTO processed_messages (consumer, message_id) VALUES ('t', %s) "
                 "RETURNING 1) SELECT count(*) FROM claimed")
    with psycopg.connect(dropper.dsn(dsn), autocommit=True) as other:
        for k in range(6):  # prepared by the last runs: the proxy remembers what the statement does
            other.execute(statement, (f"before-{k}",))
        dropper.arm()
        with pytest.raises(psycopg.OperationalError):
            other.execute(statement, ("armed",))
    assert dropper.dropped == ["SELECT 1"]
    assert conn.execute("SELECT count(*) FROM processed_messages").fetchone()[0] == 7


def test_the_dropper_drops_one_reply_whoever_commits_first(dropper, conn, dsn):
    clients = [psycopg.connect(dropper.dsn(dsn), autocommit=True) for _ in range(4)]
    dropper.arm()
    failed, errors, start = [], [], threading.Barrier(len(clients))

    def write(k, client):
        try:
            start.wait(10)
            # a write outside a transaction, as p's one statement is
            client.execute("INSERT INTO processed_messages (consumer, message_id) VALUES ('t', %s)", (str(k),))
        except psycopg.OperationalError:
            failed.append(k)
        except Exception as e:  # anything else fails the test below
            errors.append(e)

    threads = [threading.Thread(target=write, args=(k, c)) for k, c in enumerate(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for client in clients:
        client.close()
    assert errors == [] and len(failed) == 1 and len(dropper.dropped) == 1, (failed, errors, dropper.dropped)
    assert conn.execute("SELECT count(*) FROM processed_messages").fetchone()[0] == len(clients)


def test_the_dropper_lets_a_transaction_that_changed_nothing_through(dropper, conn, dsn):
    # an inbox hit: its INSERT ... ON CONFLICT DO NOTHING inserts no row, and a lost reply to its
    # COMMIT could duplicate nothing, so the armed proxy waits for a transaction that did change one
    conn.execute("INSERT INTO processed_messages (consumer, message_id) VALUES ('t', 'seen')")
    claim = "INSERT INTO processed_messages (consumer, message_id) VALUES ('t', %s) ON CONFLICT DO NOTHING"
    with psycopg.connect(dropper.dsn(dsn), autocommit=True) as other:
        dropper.arm()
        with other.transaction():
            other.execute(claim, ("seen",))
        assert not dropper.fired.is_set()
        with pytest.raises(psycopg.OperationalError):
            with other.transaction():
                other.execute(claim, ("new",))
    assert dropper.dropped == ["COMMIT"]
    assert conn.execute("SELECT count(*) FROM processed_messages").fetchone()[0] == 2


def test_the_dropper_lets_a_commit_the_server_refused_through(dropper, conn, dsn):
    # a COMMIT that fails on the server (here a deferred unique check) ends with an error and
    # status 'I': nothing committed, so there is no reply whose loss could duplicate anything
    conn.execute("CREATE TABLE deferred_check (k int UNIQUE DEFERRABLE INITIALLY DEFERRED)")
    with psycopg.connect(dropper.dsn(dsn), autocommit=True) as other:
        conn.execute(sql.SQL("GRANT SELECT, INSERT ON deferred_check TO {}").format(sql.Identifier(other.info.user)))
        dropper.arm()
        with pytest.raises(psycopg.errors.UniqueViolation):
            with other.transaction():
                other.execute("INSERT INTO deferred_check VALUES (1)")
                other.execute("INSERT INTO deferred_check VALUES (1)")
        assert not dropper.fired.is_set()
        # a failed statement outside a transaction ('E' response, then 'I') is let through too
        with pytest.raises(psycopg.errors.UniqueViolation):
            other.execute("INSERT INTO processed_messages (consumer, message_id) VALUES ('t', 'x'), ('t', 'x')")
        assert not dropper.fired.is_set()
        # and a transaction that failed half-way ('E'), then rolled back
        with pytest.raises(psycopg.errors.DivisionByZero):
            with other.transaction():
                other.execute("INSERT INTO processed_messages (consumer, message_id) VALUES ('t', 'y')")
                other.execute("SELECT 1 / 0")
        assert not dropper.fired.is_set()
        with pytest.raises(psycopg.OperationalError):  # the next write that commits is the one
            with other.transaction():
                other.execute("INSERT INTO deferred_check VALUES (2)")
    assert dropper.dropped == ["COMMIT"]
    assert conn.execute("SELECT count(*) FROM deferred_check").fetchone()[0] == 1
    assert conn.execute("SELECT count(*) FROM processed_messages").fetchone()[0] == 0


def test_the_dropper_counts_a_row_lock_as_no_write(dropper, conn, dsn):
    # d locks its accounts FOR UPDATE first; when every message of its batch then meets its inbox
    # row, the transaction changed nothing and its COMMIT is not the fault's to drop
    conn.execute("INSERT INTO processed_messages (consumer, message_id) VALUES ('t', 'seen')")
    with psycopg.connect(dropper.dsn(dsn), autocommit=True) as other:
        dropper.arm()
        with other.transaction():
            other.execute("SELECT * FROM accounts WHERE id = 1 FOR UPDATE")
            other.execute("SELECT * FROM accounts FOR NO KEY UPDATE")
        assert not dropper.fired.is_set()
        with pytest.raises(psycopg.OperationalError):  # one that locks, then writes, is dropped
            with other.transaction():
                other.execute("SELECT * FROM accounts FOR UPDATE")
                other.execute("INSERT INTO processed_messages (consumer, message_id) VALUES ('t', 'new')")
    assert dropper.dropped == ["COMMIT"], dropper.dropped  # each statement is an exchange of its own
    assert conn.execute("SELECT count(*) FROM processed_messages").fetchone()[0] == 2


def test_a_pause_ends_on_time_while_a_look_at_the_paused_process_blocks():
    # the look waits on the stopped process itself, as a query waits on a paused backend's locks;
    # the timer's SIGCONT must come anyway, while the look still waits (the loop's own SIGCONT,
    # after the look, would come only once it gave up: it would never see the process run).
    # The look first sees the process stopped, so a pause that never stopped it fails too.
    paused = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])

    def look() -> bool:
        states = []
        for _ in range(200):  # up to ~10 s, then it gives up
            states.append(process_state(paused.pid))
            if "T" in states and states[-1] != "T":
                return True
            time.sleep(0.05)
        return False

    try:
        seen = nemesis.pause(paused.pid, 1.0, watch={"running_again": look})
        assert seen == {"running_again": True} and process_state(paused.pid) != "T"
    finally:
        paused.kill()
        paused.wait()


def process_state(pid: int) -> str:
    """The process's state letter in /proc (T: stopped)."""
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
