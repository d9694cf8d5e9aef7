"""Fixtures: the real services named in settings.py, and a fresh schema, topic and
group per test (uuid suffix), so a test that kills a consumer leaves nothing behind."""
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
from confluent_kafka.admin import AdminClient

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import harness  # noqa: E402
from settings import BROKERS, DSN  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def services():
    """One warm-up: stop the whole run, with a clear message, if a service is down."""
    try:
        with psycopg.connect(DSN, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as e:
        pytest.exit(f"PostgreSQL at {DSN} is not reachable ({str(e).strip()}); start it with `make up`", returncode=3)
    brokers = AdminClient({"bootstrap.servers": BROKERS}).list_topics(timeout=15).brokers
    if not brokers:
        pytest.exit(f"Kafka at {BROKERS} is not reachable; start it with `make up`", returncode=3)


@pytest.fixture
def schema():
    name = harness.unique("t")
    harness.create_schema(name)
    yield name
    harness.drop_schema(name)


@pytest.fixture
def dsn(schema):
    return harness.scoped_dsn(schema)


@pytest.fixture
def conn(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        yield c


@pytest.fixture
def topic():
    name = f"test.{uuid.uuid4().hex[:12]}"
    harness.create_topic(name)
    yield name
    harness.delete_topics(name, name + ".dlq")


@pytest.fixture
def group():
    return f"test-{uuid.uuid4().hex[:12]}"
