"""M4's machinery on a small table, against a real PostgreSQL: the layouts, the expiry
paths (batched delete, primary-key range, partition drop), the alarm, and the lean inbox."""
import uuid
from datetime import timedelta

import psycopg
import pytest

from consume import PoisonMessage
from lab import harness, layouts, retention
from variants import inbox_v7


@pytest.fixture
def lab(schema):
    """The lean inbox's functions and tables are DDL: the owner's (ADMIN_DSN) to run."""
    from lab.settings import ADMIN_DSN

    with psycopg.connect(harness.scoped_dsn(schema, ADMIN_DSN), autocommit=True) as conn:
        conn.execute(inbox_v7.SQL_FILE.read_text())
        conn.execute(f"SET search_path = {schema}, public")
        yield conn


def test_time_ordered_keys_make_the_smallest_index(lab):
    sizes = {layout: layouts.size_layout(lab, layout, 20000) for layout in layouts.SIZED}
    index = {layout: s["index_bytes_per_row"] for layout, s in sizes.items()}
    assert index["uuid-v7"] < index["uuid-v4"] < index["text"]
    assert sizes["uuid-v4"]["heap_bytes_per_row"] < sizes["text"]["heap_bytes_per_row"]
    assert all(s["cleanup_index_bytes_per_row"] > 0 for s in sizes.values())


def test_an_aged_v7_id_carries_its_time_however_long_the_fill_has_run(lab):
    # A fill is one long INSERT: with the shift taken from now() (the statement's start), an ID
    # made 300 ms into it carried a time 300 ms late, and expiry kept a row it should have dropped.
    late_ms = lab.execute(
        "SELECT abs(extract(epoch FROM uuid_extract_timestamp(" + layouts.V7_AT + ") - at)) * 1000 "
        "FROM (SELECT now() - interval '20 days' AS at, pg_sleep(0.3)) aged").fetchone()[0]
    assert late_ms < 50


@pytest.mark.parametrize("layout", [*layouts.AGED, *layouts.LEAN])
def test_every_expiry_path_keeps_exactly_the_rows_inside_the_window(lab, layout):
    record = layouts.expire_layout(lab, layout, 20000)
    assert record["kept_exactly_recent"], record
    if layout == "v7-partitioned":
        assert record["dead_tuples_after"] == 0  # dropped, not deleted
    else:
        assert record["dead_tuples_after"] == 20000


def test_the_lean_inbox_is_leaner(lab):
    lean = layouts.expire_layout(lab, "v7-pk-range", 20000)
    standard = layouts.expire_layout(lab, "uuid-v7", 20000)
    assert lean["total_bytes_per_row"] < 0.6 * standard["total_bytes_per_row"]


def old_rows(conn, count, age):
    conn.execute("INSERT INTO processed_messages (consumer, message_id, processed_at) "
                 "SELECT 'wallet-credits', gen_random_uuid()::text, now() - %s::interval FROM generate_series(1, %s)",
                 (age, count))


def test_retention_py_forgets_in_batches_until_zero(conn):
    old_rows(conn, 25000, timedelta(days=15))
    conn.execute("INSERT INTO processed_messages (consumer, message_id, processed_at) "
                 "SELECT 'wallet-credits', 'new-' || n, now() - interval '13 days' FROM generate_series(1, 100) n")
    assert retention.forget(conn, timedelta(days=14), 10000) == [10000, 10000, 5000, 0]
    assert conn.execute("SELECT count(*) FROM processed_messages").fetchone()[0] == 100


def test_alarm_fires_on_a_too_young_inbox_and_not_on_an_old_enough_one(conn):
    ok, message = retention.check(conn, timedelta(days=15))
    assert not ok and "empty" in message
    old_rows(conn, 10, timedelta(days=3))
    ok, message = retention.check(conn, timedelta(days=15))
    assert not ok and message.startswith("ALARM")
    old_rows(conn, 1, timedelta(days=16))
    assert retention.check(conn, timedelta(days=15))[0] is True


def test_alarm_exit_status(schema):
    import subprocess
    import sys

    from lab.settings import RETENTION_DSN

    env = {"RETENTION_DSN": harness.scoped_dsn(schema, RETENTION_DSN), "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-m", "lab.retention", "--check", "15d"],
                            capture_output=True, text=True, env=env, timeout=60, cwd=harness.ROOT)
    assert result.returncode == 1 and result.stderr.startswith("ALARM"), result.stderr


def test_handle_once_v7_routes_by_the_shape_of_the_id(conn):
    inbox_v7.install(conn)
    inbox_v7.ensure_days(conn, inbox_v7.DEFAULT_INBOX, 1, 1)
    v7 = conn.execute("SELECT uuidv7()::text").fetchone()[0]
    event = {"account_id": 1, "amount": 10}
    assert inbox_v7.handle_once_v7(conn, v7, event) is True
    assert inbox_v7.handle_once_v7(conn, v7, event) is False
    v4 = str(uuid.uuid4())
    assert inbox_v7.handle_once_v7(conn, v4, event) is True
    assert inbox_v7.handle_once_v7(conn, v4, event) is False
    assert conn.execute(f"SELECT message_id::text FROM {inbox_v7.DEFAULT_INBOX}").fetchall() == [(v7,)]
    assert conn.execute("SELECT message_id FROM processed_messages").fetchall() == [(v4,)]
    assert conn.execute("SELECT balance FROM accounts WHERE id = 1").fetchone()[0] == 20


def test_handle_once_v7_refuses_an_id_it_cannot_deduplicate(conn):
    inbox_v7.install(conn)
    inbox_v7.ensure_days(conn, inbox_v7.DEFAULT_INBOX, 1, 1)
    ancient = conn.execute("SELECT uuidv7(interval '-30 days')::text").fetchone()[0]
    with pytest.raises(PoisonMessage, match="does not cover"):
        inbox_v7.handle_once_v7(conn, ancient, {"account_id": 1, "amount": 10})
    assert conn.execute("SELECT count(*) FROM ledger").fetchone()[0] == 0
