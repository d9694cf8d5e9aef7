"""A consumer started while Postgres refuses it (issue #30's pg-max-connections): it waits, says
why, and consumes once the server lets it in; a wrong password still fails at once.

The refusal is real: the consumer connects as a role of its own with CONNECTION LIMIT 0, which
the server turns away with "too many connections for role", as it does any role at its limit
(or every role at max_connections); then the limit is lifted."""
import contextlib
import json
import logging
import threading
import uuid

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import consume
from lab import harness
from lab.settings import DSN, SUPERUSER_DSN
from tests.helpers import consuming, drained, send
from variants import consume_batched


class LineSeen(logging.Handler):
    """Set once a log line made from `fmt` is emitted, in whichever thread."""

    def __init__(self, fmt: str):
        super().__init__()
        self.fmt, self.seen = fmt, threading.Event()

    def emit(self, record):
        if record.msg == self.fmt:
            self.seen.set()


@contextlib.contextmanager
def watching(fmt: str):
    handler = LineSeen(fmt)
    logging.getLogger("consume").addHandler(handler)
    try:
        yield handler.seen
    finally:
        logging.getLogger("consume").removeHandler(handler)


@contextlib.contextmanager
def refused_role(schema: str):
    """A login role with the consumer's rights and no connection allowed yet; yields its DSN
    on `schema` and a function that lets it in."""
    role = f"t_refused_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(SUPERUSER_DSN, autocommit=True) as su:
        su.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{role}' IN ROLE inbox_consumer CONNECTION LIMIT 0")
        try:
            yield (harness.scoped_dsn(schema, make_conninfo(DSN, user=role, password=role)),
                   lambda: su.execute(f"ALTER ROLE {role} CONNECTION LIMIT -1"))
        finally:
            su.execute(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'")
            su.execute(f"DROP ROLE {role}")


CREDITS = [(b"1", json.dumps({"account_id": 1, "amount": 10}).encode(), [("event_id", f"conn-{i}".encode())])
           for i in range(5)]


@pytest.mark.parametrize("run", [consume.run, consume_batched.run_batched], ids=["c", "d"])
def test_a_consumer_started_while_postgres_refuses_it_waits_then_consumes(run, schema, conn, topic, group):
    send(topic, CREDITS)
    with refused_role(schema) as (dsn, let_in), watching(consume.CONNECT_RETRY_LOG) as retried:
        with consuming(topic, group, dsn, run=run):
            assert retried.wait(60), "the consumer never said it was refused and retrying"
            let_in()
            drained(group, topic)
    assert conn.execute("SELECT count(*), count(DISTINCT event_id) FROM ledger").fetchone() == (5, 5)
    assert conn.execute("SELECT balance FROM accounts WHERE id = 1").fetchone()[0] == 50


def test_a_wrong_password_fails_at_once_with_the_servers_reason(schema):
    wrong = harness.scoped_dsn(schema, make_conninfo(DSN, password="not-the-password"))
    with watching(consume.CONNECT_RETRY_LOG) as retried:
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            consume.connect(wrong)
    assert not retried.is_set()


def test_a_role_not_permitted_to_log_in_fails_at_once(schema):
    role = f"t_nologin_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(SUPERUSER_DSN, autocommit=True) as su:
        su.execute(f"CREATE ROLE {role} NOLOGIN PASSWORD '{role}' IN ROLE inbox_consumer")
        try:
            with watching(consume.CONNECT_RETRY_LOG) as retried:
                with pytest.raises(psycopg.OperationalError, match="not permitted to log in"):
                    consume.connect(make_conninfo(DSN, user=role, password=role), give_up_s=30)
            assert not retried.is_set()
        finally:
            su.execute(f"DROP ROLE {role}")


def test_an_error_without_a_message_still_has_a_first_line():
    assert consume.first_line(psycopg.OperationalError("")) == "OperationalError"
    assert consume.first_line(psycopg.OperationalError("\nconnection refused\nis the server up?")) == \
        "connection refused"
