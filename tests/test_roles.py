"""Least privilege, against the real server: each role can do what its job needs and nothing
that would let it forget, rewrite or read past its job. Every refusal is the server's own."""
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from lab import harness, retention
from lab.settings import DSN, PROVIDER_DSN, RETENTION_DSN, ROLES, SUPERUSER_DSN

FORGETTING = ["DELETE FROM processed_messages", "TRUNCATE processed_messages", "DROP TABLE processed_messages",
              "UPDATE processed_messages SET processed_at = now() - interval '1 year'",
              "ALTER TABLE processed_messages DROP CONSTRAINT processed_messages_pkey",
              "CREATE TABLE elsewhere (message_id text)"]


def connect_as(schema: str, dsn: str) -> psycopg.Connection:
    return psycopg.connect(harness.scoped_dsn(schema, dsn), autocommit=True)


@pytest.mark.parametrize("statement", FORGETTING)
def test_the_consumer_cannot_forget_what_it_has_seen(schema, conn, statement):
    conn.execute("INSERT INTO processed_messages (consumer, message_id) VALUES ('wallet-credits', 'seen')")
    with connect_as(schema, DSN) as consumer, pytest.raises(psycopg.errors.InsufficientPrivilege):
        consumer.execute(statement)
    assert conn.execute("SELECT message_id FROM processed_messages").fetchall() == [("seen",)]


V7_FORGETTING = ["DELETE FROM {inbox}", "TRUNCATE {inbox}", "DROP TABLE {day}", "DELETE FROM {day}",
                 "SELECT inbox_v7_drop_before('{inbox}', now() + interval '2 days')"]


@pytest.mark.parametrize("statement", V7_FORGETTING)
def test_the_consumer_cannot_forget_what_the_v7_inbox_has_seen(schema, conn, statement):
    """The lean v7 inbox the same way: its day tables are the owner's, and its function that drops
    days runs with the caller's rights, which the consumer's are not."""
    from variants import inbox_v7

    inbox = inbox_v7.DEFAULT_INBOX
    inbox_v7.install(conn, inbox)
    inbox_v7.ensure_days(conn, inbox, 0, 0)
    conn.execute(f"INSERT INTO {inbox} VALUES (uuidv7())")
    day = conn.execute("SELECT %s || '_' || to_char((now() AT TIME ZONE 'UTC')::date, 'YYYYMMDD')",
                       (inbox,)).fetchone()[0]
    with connect_as(schema, DSN) as consumer, pytest.raises(psycopg.errors.InsufficientPrivilege):
        consumer.execute(statement.format(inbox=inbox, day=day))
    assert conn.execute(f"SELECT count(*) FROM {inbox}").fetchone()[0] == 1


def test_the_consumer_does_its_job_under_its_role(schema, conn):
    """handle_once's whole transaction, and the ledger it may write but not read."""
    import consume

    with connect_as(schema, DSN) as consumer:
        assert consume.handle_once(consumer, "e1", {"account_id": 1, "amount": 5}) is True
        assert consume.handle_once(consumer, "e1", {"account_id": 1, "amount": 5}) is False
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            consumer.execute("SELECT * FROM ledger")
    assert conn.execute("SELECT event_id, amount FROM ledger").fetchall() == [("e1", 5)]


def test_the_consumer_is_no_superuser_and_cannot_become_another_role(dsn):
    with psycopg.connect(dsn, autocommit=True) as consumer:
        assert consumer.execute("SELECT rolsuper, rolcreaterole, rolcreatedb, rolbypassrls FROM pg_roles "
                                "WHERE rolname = current_user").fetchone() == (False, False, False, False)
        for role in ("inbox_owner", "inbox_retention"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                consumer.execute(f"SET ROLE {role}")


@pytest.mark.parametrize("statement", ["UPDATE accounts SET balance = 0", "SELECT * FROM accounts",
                                       "SELECT * FROM ledger", "INSERT INTO ledger (event_id, account_id, amount) "
                                       "VALUES ('x', 1, 1)", "DELETE FROM outbox", "TRUNCATE processed_messages"])
def test_retention_touches_nothing_but_the_inbox(schema, statement):
    with connect_as(schema, RETENTION_DSN) as forgetting, pytest.raises(psycopg.errors.InsufficientPrivilege):
        forgetting.execute(statement)


def test_retention_forgets_under_its_role(schema, conn):
    conn.execute("INSERT INTO processed_messages (consumer, message_id, processed_at) "
                 "VALUES ('wallet-credits', 'old', now() - interval '20 days'), ('wallet-credits', 'new', now())")
    with connect_as(schema, RETENTION_DSN) as forgetting:
        from datetime import timedelta

        assert retention.forget(forgetting, timedelta(days=14), 100) == [1, 0]
    assert conn.execute("SELECT message_id FROM processed_messages").fetchall() == [("new",)]


def test_the_provider_sees_only_its_own_tables(schema):
    with connect_as(schema, PROVIDER_DSN) as charging:
        charging.execute("INSERT INTO provider_charges (reference, account_id, amount) VALUES ('e1', 1, 5)")
        for statement in ("SELECT * FROM accounts", "SELECT * FROM processed_messages", "SELECT * FROM ledger"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                charging.execute(statement)


def test_every_role_has_a_scram_password_and_tcp_trusts_nobody(postgres):
    with psycopg.connect(SUPERUSER_DSN, autocommit=True) as su:
        stored = dict(su.execute("SELECT rolname, rolpassword LIKE 'SCRAM-SHA-256$%%' FROM pg_authid "
                                 "WHERE rolname = ANY(%s)", (list(ROLES),)).fetchall())
        assert stored == {role: True for role in ROLES}
        methods = {m for (m,) in su.execute("SELECT auth_method FROM pg_hba_file_rules WHERE type LIKE 'host%'")}
        assert methods == {"scram-sha-256"}
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(make_conninfo(DSN, password="not-the-password"), connect_timeout=5)


def test_the_lab_runs_its_consumers_as_the_consumer_role(kafka):
    """The harnesses' workers get the run's consumer DSN; they read what was done as the owner."""
    with harness.run_space("roles", "check", 1) as space:
        assert conninfo_to_dict(space.dsn)["user"] == "inbox_consumer"
        assert conninfo_to_dict(space.admin)["user"] == "inbox_owner"
        assert conninfo_to_dict(space.provider)["user"] == "inbox_provider"


def test_the_consumer_role_ends_a_transaction_left_idle_for_a_minute():
    # lab/roles.sql: a frozen consumer must not hold its inbox rows' locks for ever (M10); and
    # no lock or statement timeout, which would fail the waiting consumer instead
    with psycopg.connect(DSN) as conn:
        settings = {name: conn.execute(f"SHOW {name}").fetchone()[0]
                    for name in ("idle_in_transaction_session_timeout", "lock_timeout", "statement_timeout")}
    assert settings == {"idle_in_transaction_session_timeout": "1min", "lock_timeout": "0", "statement_timeout": "0"}
