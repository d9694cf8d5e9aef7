"""Fixtures: the real services named in settings.py, asked for by the tests that need them,
and a fresh schema, topic and group per test (uuid suffix), so a test that kills a consumer
leaves nothing behind. A test that needs Postgres asks for `dsn` (the consumer's role, as the
scripts connect) or `conn` (the owner's, for set-up and for assertions in raw SQL: the
consumer may not read its own ledger), or `postgres`;
one that needs Kafka asks for `topic` (or `kafka`), one that runs a whole harness asks for
`services`; the pure tests (the checker's, the CLI's) ask for nothing and run with both down."""
import os
import time
import uuid

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from lab import harness, registry
from lab.settings import ADMIN_DSN, BROKERS, DSN
from tests import seeds


@pytest.fixture(scope="session")
def postgres():
    """The warm-up: stop the whole run, with one clear line, if PostgreSQL is down."""
    try:
        with psycopg.connect(DSN, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as e:
        where = conninfo_to_dict(DSN)  # never the password
        pytest.exit(f"PostgreSQL at {where.get('host')}:{where.get('port')}/{where.get('dbname')} is not reachable "
                    f"({str(e).strip().splitlines()[0]}); start it with `make up`", returncode=3)
    return DSN


@pytest.fixture(scope="session")
def kafka():
    """The warm-up for Kafka, the same way."""
    from confluent_kafka.admin import AdminClient

    brokers = AdminClient({"bootstrap.servers": BROKERS}).list_topics(timeout=15).brokers
    if not brokers:
        pytest.exit(f"Kafka at {BROKERS} is not reachable; start it with `make up`", returncode=3)
    return BROKERS


@pytest.fixture(scope="session")
def services(postgres, kafka):
    return postgres, kafka


def pytest_configure(config):
    if seeds.SHIFT is None:
        raise pytest.UsageError(f"LAB_TEST_SEED={seeds.RAW!r}: give a whole number, 0 or more "
                                "(LAB_TEST_SEED=100 make test)")


def pytest_collection_modifyitems(config, items):
    """--dist loadgroup sends the tests of one xdist_group to one worker by the "@NAME" suffix
    each worker adds to their node IDs. pytest-xdist 3.8.0 adds it to `item._nodeid`, which
    pytest 9 no longer reads (a node's ID is `item._id`), so the suffix never reached the
    scheduler and a group's tests spread over every worker, each waiting on the group's lock
    below while it could have run something else. Add it where pytest 9 reads it."""
    if not getattr(config.option, "loadgroup", False) or not items or not hasattr(items[0], "_id"):
        return  # not a loadgroup worker, or a pytest older than 9, where pytest-xdist's own suffix works
    for item in items:
        names = sorted({str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                        for mark in item.iter_markers("xdist_group")})
        if names and "@" not in item.nodeid.rpartition("]")[2]:
            item._id = type(item._id).parse(f"{item.nodeid}@{'_'.join(names)}")


GROUP_WAIT_S = 600.0  # longer than any one test of a group takes, shorter than CI's patience


@pytest.fixture(autouse=True)
def _one_group_member_at_a_time(request, tmp_path_factory):
    """Tests marked xdist_group(NAME) share state (the measurement lock, the default database and
    topic) and must not overlap. With --dist loadgroup (make test) they run in one worker, in
    turn (pytest_collection_modifyitems above); under any other -n they would spread over the
    workers, so each such test also holds the group's file lock, shared by the session's
    workers, while it runs."""
    mark = request.node.get_closest_marker("xdist_group")
    if mark is None:
        yield
        return
    import fcntl

    name = mark.args[0] if mark.args else mark.kwargs.get("name", "default")
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the session's, not a worker's
    with open(shared / f"xdist-group-{name}.lock", "a") as lock:  # released when it closes, after the test
        deadline = time.monotonic() + GROUP_WAIT_S
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail(f"waited {GROUP_WAIT_S:g} s for another test of group {name!r} to finish")
                time.sleep(0.1)
        yield


@pytest.fixture(autouse=True)
def _root_for_root_tests(request):
    """A `root` test builds network namespaces or mounts a tmpfs: without root it fails, saying so (never skipped)."""
    if request.node.get_closest_marker("root") and os.geteuid() != 0:
        pytest.fail("this test needs root (ip netns, mount); run the suite as root, as CI does")


@pytest.fixture
def schema(postgres):
    name = harness.unique("t")
    harness.create_schema(name)
    yield name
    harness.drop_schema(name)


@pytest.fixture
def dsn(schema):
    return harness.scoped_dsn(schema)


@pytest.fixture
def conn(schema):
    with psycopg.connect(harness.scoped_dsn(schema, ADMIN_DSN), autocommit=True) as c:
        yield c


@pytest.fixture
def on_p_schema(request):
    """p's schema, as its declaration sets it up in every run's (the ledger without its foreign
    key), in the test's own schema when the test has one: p's tests test p as it runs."""
    if "dsn" in request.fixturenames:
        registry.prepare("p", request.getfixturevalue("dsn"))


@pytest.fixture
def topic(kafka):
    name = f"test.{uuid.uuid4().hex[:12]}"
    harness.create_topic(name)
    yield name
    harness.delete_topics(name, name + ".dlq")


@pytest.fixture
def group():
    return f"test-{uuid.uuid4().hex[:12]}"
