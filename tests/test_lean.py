"""p-lean (variants/consume_lean.py) against a real PostgreSQL and Kafka: the fast decoder
gives consume.py's verdict on everything, the leaner statement keeps p's contract, the
ledger without its foreign key still refuses unknown accounts and credited deletions."""
import json
import threading

import hypothesis
import psycopg
import pytest
from helpers import POISON, every_kind_of_poison_is_parked, hostile_batch_is_handled, run_threads
from hypothesis import strategies as st

import consume
from lab import harness
from variants import consume_batched, consume_lean, consume_pipelined
from variants.consume_lean import claim_and_credit, decode_fast


def credits(ids, account=1, amount=10) -> dict:
    return {i: {"account_id": account, "amount": amount} for i in ids}


def verdict(decode, value):
    """What a decoder makes of a value: the credit's two fields, or the poison's reason."""
    try:
        event = decode(value)
    except consume.PoisonMessage as e:
        return ("poison", e.reason)
    return (event["account_id"], event["amount"])


@pytest.mark.parametrize("kind", list(POISON))
def test_the_fast_decoder_gives_every_poison_consume_pys_reason(kind):
    value = POISON[kind][0][1]
    assert verdict(decode_fast, value) == verdict(consume.parse_event, value)


@pytest.mark.parametrize("value", [
    b'{"account_id": 1, "amount": 5, "amount": 7}',  # a repeated key: the last one, as json has it
    b'\xef\xbb\xbf{"account_id": 1, "amount": 5}',  # a byte-order mark msgspec refuses and json takes
    b' {"account_id": 3, "amount": 9007199254740992, "note": [1, {"x": null}]} ',
    b'{"account_id": 2147483648, "amount": 5}', b'{"account_id": 1, "amount": 5.0}', b'{"account_id": 1}',
    b'{"account_id": 1, "amount": NaN}', b'{"account_id": 1, "amount": 1e2}', b"null",
    # found in review: deep nesting inside a field (msgspec's recursion limit), and what msgspec
    # takes that json refuses (invalid UTF-8 in a string, an integer of 5,000 digits)
    b'{"account_id": 1, "amount": 5, "x": ' + b"[" * 1500 + b"]" * 1500 + b"}",
    b'{"account_id": 1, "amount": 5, "x": "\xff\xfe"}', b'{"account_id": 1, "amount": 5, "x": ' + b"9" * 5000 + b"}",
    b'{"account_id": 1, "amount": 5, "seq": ' + b"9" * 5000 + b"}",
])
def test_the_fast_decoder_agrees_with_consume_py_at_the_edges(value):
    assert verdict(decode_fast, value) == verdict(consume.parse_event, value)


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                       max_size=3), max_leaves=8)
FIELD = st.one_of(st.integers(-5, 2**63), st.sampled_from([0, 1, 2**31 - 1, 2**31, 2**53, 2**53 + 1]), JSON_VALUES)


@hypothesis.settings(max_examples=300, derandomize=True, deadline=None)
@hypothesis.given(st.dictionaries(st.sampled_from(["account_id", "amount", "seq", "x"]), FIELD, max_size=4)
                  | JSON_VALUES, st.binary(max_size=4))
def test_the_fast_decoder_agrees_with_consume_py_on_any_json(document, tail):
    value = json.dumps(document).encode()
    assert verdict(decode_fast, value) == verdict(consume.parse_event, value)
    assert verdict(decode_fast, value + tail) == verdict(consume.parse_event, value + tail)


@hypothesis.settings(max_examples=300, derandomize=True, deadline=None)
@hypothesis.given(st.integers(0, 60), st.binary(min_size=1, max_size=3), st.booleans())
def test_the_fast_decoder_agrees_with_consume_py_on_a_credit_with_bytes_inserted_or_replaced(at, noise, replace):
    value = b'{"account_id": 17, "amount": 250, "seq": 3}'
    at = min(at, len(value))
    mutated = value[:at] + noise + value[at + (len(noise) if replace else 0):]
    assert verdict(decode_fast, mutated) == verdict(consume.parse_event, mutated)


def test_the_statement_reports_unknown_accounts_and_applies_only_what_is_new(conn):
    events = {**credits(["e1", "e2"]), "e4": {"account_id": 4242, "amount": 5}}
    assert claim_and_credit(conn, events) == ({"e1", "e2"}, {"e4"})
    applied, unknown = claim_and_credit(conn, {**credits(["e2", "e3"]), "e4": {"account_id": 4242, "amount": 5}})
    assert (applied, unknown) == ({"e3"}, {"e4"})
    rows = conn.execute("SELECT event_id, count(*) FROM ledger GROUP BY event_id ORDER BY 1").fetchall()
    assert rows == [("e1", 1), ("e2", 1), ("e3", 1)]
    assert conn.execute("SELECT balance FROM accounts WHERE id = 1").fetchone()[0] == 30


def without_foreign_key(conn) -> None:
    conn.execute(consume_lean.LEDGER_WITHOUT_FOREIGN_KEY)
    assert conn.execute("SELECT count(*) FROM pg_constraint WHERE conrelid = 'ledger'::regclass "
                        "AND contype = 'f'").fetchone()[0] == 0


def test_every_kind_of_poison_is_parked_with_p_s_reasons(topic, group, dsn, conn):
    without_foreign_key(conn)
    every_kind_of_poison_is_parked(topic, group, dsn, conn, consume_lean.run_lean, batch=10)
    assert consume_pipelined.claim_and_credit is not claim_and_credit, "p's own statement is back after the run"


@pytest.mark.parametrize("connections", [1, 2])
def test_a_hostile_batch_parks_each_bad_copy_alone_on_a_ledger_without_its_key(connections, topic, group, dsn, conn):
    without_foreign_key(conn)
    hostile_batch_is_handled(consume_lean.run_lean, topic, group, dsn, conn, batch=10, connections=connections)


def test_the_trigger_keeps_the_foreign_keys_other_job(conn):
    """Without the key, an account with ledger rows still cannot be deleted; one without can."""
    without_foreign_key(conn)
    claim_and_credit(conn, credits(["e1"], account=1))
    with pytest.raises(psycopg.errors.ForeignKeyViolation, match="account 1 has ledger rows"):
        conn.execute("DELETE FROM accounts WHERE id = 1")
    conn.execute("DELETE FROM accounts WHERE id = 3")
    assert conn.execute("SELECT count(*) FROM accounts WHERE id IN (1, 3)").fetchone()[0] == 1


def test_the_lab_s_stall_picks_the_same_events_from_a_credit_as_from_p_s_dict():
    """worker.Stall reads event.get("seq", 0): p-lean's Credit must answer as parse_event's dict does."""
    for value in (b'{"account_id": 1, "amount": 5, "seq": 40}', b'{"account_id": 1, "amount": 5}',
                  b'{"account_id": 1, "amount": 5, "seq": "40"}'):
        assert decode_fast(value).get("seq", 0) == consume.parse_event(value).get("seq", 0)


def test_p_lean_beside_p_and_d_never_deadlocks(dsn, conn):
    """Unsynchronised batches over overlapping IDs and the same accounts from p-lean (twice), p
    and d, on a ledger without its key: a lock order that differed between the statements would
    deadlock. (Each statement sorts its own IDs and accounts, so only the order between them is
    tried.)"""
    without_foreign_key(conn)
    errors = []

    def hammer(statement, ids):
        def run():
            with psycopg.connect(dsn, autocommit=True) as c:
                for round_ in range(15):
                    try:
                        statement(c, {f"r{round_}-{i}": {"account_id": i % 7 + 1, "amount": 1} for i in ids})
                    except psycopg.Error as e:
                        errors.append(e)
        return threading.Thread(target=run)

    def as_d(c, events):
        consume_batched.handle_batch(c, list(events.items()))

    run_threads([hammer(claim_and_credit, range(100)), hammer(claim_and_credit, range(99, -1, -1)),
                 hammer(consume_pipelined.claim_and_credit, range(50, 150)), hammer(as_d, range(149, 49, -1))])
    assert errors == []
    assert conn.execute("SELECT count(*), count(DISTINCT event_id) FROM ledger").fetchone() == (2250, 2250)
    assert conn.execute("SELECT sum(balance) FROM accounts").fetchone()[0] == 2250


# The statement without `checked`: what p-lean would do if it trusted the lock alone.
UNCHECKED = consume_lean.CLAIM_AND_CREDIT.replace("(SELECT n FROM checked) > 0", "(SELECT count(*) FROM locked) > 0")


@pytest.mark.parametrize("statement, credited_into_nothing", [("checked", False), ("unchecked (the control)", True)])
def test_an_account_deleted_under_the_statement_is_parked_not_credited_into_nothing(
        statement, credited_into_nothing, dsn, conn, schema, monkeypatch):
    """Without the ledger's key, an account that `known` found and a DELETE removed before
    `locked` reached it: the statement must fail whole, so the event is parked as an unknown
    account on its own retry. The control, the statement without its check, writes a ledger
    row for an account that no longer exists, so the schedule does reach the window."""
    without_foreign_key(conn)
    if statement != "checked":
        monkeypatch.setattr(consume_lean, "CLAIM_AND_CREDIT", UNCHECKED)
    deleter = psycopg.connect(harness.scoped_dsn(schema, harness.ADMIN_DSN))
    consumer = psycopg.connect(dsn, autocommit=True)
    outcome, errors = {}, []

    def statement_in_flight():
        try:
            with consume_lean.swapped(("statement",)):
                outcome["result"] = consume_pipelined.claim_and_credit_each(
                    consumer, {"x-1": {"account_id": 7, "amount": 5}, "x-2": {"account_id": 1, "amount": 5}})
        except Exception as e:  # raised below
            errors.append(e)

    try:
        deleter.execute("SELECT 1 FROM accounts WHERE id = 7 FOR UPDATE")  # `locked` will wait here
        thread = threading.Thread(target=statement_in_flight)
        thread.start()
        harness.wait_until(lambda: conn.execute("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s",
                                                (consumer.info.backend_pid,)).fetchone()[0] is True, 30,
                           "the statement to wait on account 7's lock", interval_s=0.02)
        deleter.execute("DELETE FROM accounts WHERE id = 7")
        deleter.commit()
        thread.join(30)
    finally:
        deleter.close()
        consumer.close()
    assert not errors and not thread.is_alive(), errors
    applied, unknown, refused = outcome["result"]
    orphans = conn.execute("SELECT count(*) FROM ledger WHERE account_id NOT IN (SELECT id FROM accounts)"
                           ).fetchone()[0]
    if credited_into_nothing:
        assert applied == {"x-1", "x-2"} and orphans == 1
    else:
        assert (applied, unknown, refused, orphans) == ({"x-2"}, {"x-1"}, {}, 0)
        assert conn.execute("SELECT message_id FROM processed_messages").fetchall() == [("x-2",)]
