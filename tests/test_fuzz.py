"""Property: whatever a topic holds, c and p bring each message to an outcome (applied,
skipped or dead-lettered) and never stop. Hypothesis makes the values and headers, with a
fixed seed and a bounded number of examples; each goes through the real decode, the real
Postgres statements (a fresh schema) and, for poison, a real dead letter on a real topic.
The messages are built in memory (confluent_kafka.Message): what is fuzzed is the
consumer's handling of a record, not the broker's delivery of it."""
import json

import psycopg
import pytest
from confluent_kafka import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import consume
from lab import registry
from publish import ensure_topic, make_producer
from variants import consume_pipelined

SETTINGS = settings(max_examples=120, derandomize=True, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

numbers = st.one_of(st.integers(-2**70, 2**70), st.integers(1, 120), st.floats(allow_nan=True), st.booleans(),
                    st.none(), st.text(max_size=5))
credits = st.fixed_dictionaries({}, optional={"account_id": numbers, "amount": numbers, "note": st.text(max_size=8)})
json_values = st.one_of(credits, st.lists(st.integers(), max_size=3), st.text(max_size=5), st.integers(),
                        st.recursive(st.none(), lambda inner: st.lists(inner, max_size=2), max_leaves=30))
values = st.one_of(st.none(), st.binary(max_size=64), json_values.map(lambda v: json.dumps(v).encode()),
                   st.integers(1, 3000).map(lambda depth: b"[" * depth + b"]" * depth))
event_ids = st.one_of(st.sampled_from([b"f-1", b"f-2", b"f-3"]), st.binary(max_size=16), st.just(b"x" * 600))
headers = st.lists(st.tuples(st.sampled_from(["event_id", "event_id", "other"]), event_ids), max_size=3)
records = st.tuples(st.binary(max_size=4), values, headers)


def message(topic: str, offset: int, record) -> Message:
    key, value, hs = record
    return Message(topic=topic, partition=0, offset=offset, key=key, value=value, headers=hs)


@pytest.fixture
def dead_letters(topic):
    ensure_topic(consume.dead_letter_topic(topic))
    return make_producer()


def balances_agree(conn) -> None:
    """Every credited account holds the sum of its ledger rows, and no ID is in the ledger twice."""
    assert conn.execute("SELECT count(*) FROM (SELECT event_id FROM ledger GROUP BY event_id "
                        "HAVING count(*) > 1) d").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM accounts a LEFT JOIN (SELECT account_id, sum(amount) s FROM ledger "
                        "GROUP BY account_id) l ON l.account_id = a.id "
                        "WHERE a.balance <> coalesce(l.s, 0)").fetchone()[0] == 0


def test_c_brings_every_record_to_an_outcome(topic, dsn, conn, dead_letters):
    offsets = iter(range(10**6))

    @SETTINGS
    @given(st.lists(records, min_size=1, max_size=4))
    def handled(batch):
        with psycopg.connect(dsn, autocommit=True) as consumer_conn:
            for record in batch:
                outcome = consume.process(consumer_conn, message(topic, next(offsets), record), dead_letters,
                                          consume.handle_once, consume.credit_account)
                assert outcome in ("applied", "skipped", "dead-lettered")

    handled()
    balances_agree(conn)


def test_p_brings_every_record_of_a_batch_to_an_outcome(topic, dsn, conn, dead_letters):
    registry.prepare("p", dsn)  # p's own schema, as p runs
    offsets = iter(range(10**6))

    @SETTINGS
    @given(st.lists(records, min_size=1, max_size=6))
    def handled(batch):
        batch = consume_pipelined.Batch([message(topic, next(offsets), record) for record in batch])
        with psycopg.connect(dsn, autocommit=True) as consumer_conn:
            consume_pipelined.run_statement(consumer_conn, batch)
        consume_pipelined.finish(batch, dead_letters)

    handled()
    balances_agree(conn)
