"""p's lean steps (issue #46, variants/consume_pipelined.py), against a real PostgreSQL where
they need one: the fast decoding gives consume.py's verdict on everything, the cycle
collector is put back when the last p stops, the statement answers only for what it did not
apply, and an account deleted under the statement is parked, never credited into nothing.
(p-lean and its steps, which measured these beside p, are now p: test_pipelined.py,
test_fuzz.py and test_kafka.py run p's whole contract on them.)"""
import gc
import json
import threading

import hypothesis
import psycopg
import pytest
from confluent_kafka import Message
from helpers import POISON
from hypothesis import strategies as st

import consume
from lab import harness, registry
from variants import consume_pipelined
from variants.consume_pipelined import decode_credit, decode_event_id

pytestmark = pytest.mark.usefixtures("on_p_schema")  # p's own schema, as p runs


def verdict(decode, value):
    """What a decoder makes of a value (or a message): what it read, or the poison's reason."""
    try:
        event = decode(value)
    except consume.PoisonMessage as e:
        return ("poison", e.reason)
    return event if isinstance(event, str) else (event["account_id"], event["amount"])


@pytest.mark.parametrize("kind", list(POISON))
def test_the_fast_path_gives_every_poison_consume_pys_reason(kind):
    key, value, headers = POISON[kind][0]
    assert verdict(decode_credit, value) == verdict(consume.parse_event, value)
    msg = Message(topic="t", partition=0, offset=0, key=key, value=value, headers=headers)
    assert verdict(decode_event_id, msg) == verdict(consume.checked_event_id, msg)


@pytest.mark.parametrize("value", [
    b'{"account_id": 1, "amount": 5, "amount": 7}',  # a repeated key: the last one, as json has it
    b'\xef\xbb\xbf{"account_id": 1, "amount": 5}',  # a byte-order mark msgspec refuses and json takes
    b' {"account_id": 3, "amount": 9007199254740992, "note": [1, {"x": null}]} ',
    b'{"account_id": 2147483648, "amount": 5}', b'{"account_id": 1, "amount": 5.0}', b'{"account_id": 1}',
    b'{"account_id": 1, "amount": NaN}', b'{"account_id": 1, "amount": 1e2}', b"null",
    # deep nesting inside a field (msgspec's recursion limit), and what msgspec takes that
    # json refuses (invalid UTF-8 in a string, an integer of 5,000 digits)
    b'{"account_id": 1, "amount": 5, "x": ' + b"[" * 1500 + b"]" * 1500 + b"}",
    b'{"account_id": 1, "amount": 5, "x": "\xff\xfe"}', b'{"account_id": 1, "amount": 5, "x": ' + b"9" * 5000 + b"}",
    b'{"account_id": 1, "amount": 5, "seq": ' + b"9" * 5000 + b"}",
])
def test_the_fast_decoder_agrees_with_consume_py_at_the_edges(value):
    assert verdict(decode_credit, value) == verdict(consume.parse_event, value)


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=8),
                           lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                   st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                           max_leaves=8)
FIELD = st.one_of(st.integers(-5, 2**63), st.sampled_from([0, 1, 2**31 - 1, 2**31, 2**53, 2**53 + 1]), JSON_VALUES)


@hypothesis.settings(max_examples=300, derandomize=True, deadline=None)
@hypothesis.given(st.dictionaries(st.sampled_from(["account_id", "amount", "seq", "x"]), FIELD, max_size=4)
                  | JSON_VALUES, st.binary(max_size=4))
def test_the_fast_decoder_agrees_with_consume_py_on_any_json(document, tail):
    value = json.dumps(document).encode()
    assert verdict(decode_credit, value) == verdict(consume.parse_event, value)
    assert verdict(decode_credit, value + tail) == verdict(consume.parse_event, value + tail)


@hypothesis.settings(max_examples=300, derandomize=True, deadline=None)
@hypothesis.given(st.integers(0, 60), st.binary(min_size=1, max_size=3), st.booleans())
def test_the_fast_decoder_agrees_with_consume_py_on_a_credit_with_bytes_inserted_or_replaced(at, noise, replace):
    value = b'{"account_id": 17, "amount": 250, "seq": 3}'
    at = min(at, len(value))
    mutated = value[:at] + noise + value[at + (len(noise) if replace else 0):]
    assert verdict(decode_credit, mutated) == verdict(consume.parse_event, mutated)


HEADER_VALUES = st.one_of(st.sampled_from([None, b"", b"e-1", b"\xff", b"e\x00", b"x" * 512, b"x" * 513,
                                           "é".encode() * 256, "é".encode() * 257]), st.binary(max_size=8))


@hypothesis.settings(max_examples=300, derandomize=True, deadline=None)
@hypothesis.given(st.none() | st.lists(st.tuples(st.sampled_from(["event_id", "other", "Event_id"]), HEADER_VALUES),
                                       max_size=3))
def test_the_one_pass_header_read_agrees_with_consume_py(headers):
    msg = Message(topic="t", partition=0, offset=0, key=b"1", value=b"{}", headers=headers)
    assert verdict(decode_event_id, msg) == verdict(consume.checked_event_id, msg)


def test_the_lab_s_stall_picks_the_same_events_from_a_credit_as_from_consume_py_s_dict():
    """worker.Stall reads event.get("seq", 0): a Credit must answer as parse_event's dict does."""
    for value in (b'{"account_id": 1, "amount": 5, "seq": 40}', b'{"account_id": 1, "amount": 5}',
                  b'{"account_id": 1, "amount": 5, "seq": "40"}'):
        assert decode_credit(value).get("seq", 0) == consume.parse_event(value).get("seq", 0)


def test_the_collector_is_put_back_when_the_last_p_stops():
    """Two p's in one process (the tests run several): the first to stop leaves the second's
    thresholds alone; the last puts the process's own back, and unfreezes what was frozen."""
    before, collector = gc.get_threshold(), consume_pipelined.FewerCollections()
    with collector:
        assert gc.get_threshold() == collector.THRESHOLDS and gc.get_freeze_count() > 0
        collector.__enter__()  # the second p starts, and outlives the first
    assert gc.get_threshold() == collector.THRESHOLDS, "a p still runs"
    collector.__exit__(None, None, None)
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def rows_back(conn, events: dict) -> list[tuple]:
    ids = sorted(events)
    return conn.execute(consume_pipelined.CLAIM_AND_CREDIT, {
        "ids": ids, "accounts": [events[i]["account_id"] for i in ids], "amounts": [events[i]["amount"] for i in ids],
        "wanted": sorted({e["account_id"] for e in events.values()}), "consumer": "c"}).fetchall()


def test_the_statement_answers_only_for_what_it_did_not_apply(dsn):
    """A batch of new credits sends no rows back; an ID claimed before comes back true, an
    unknown account false."""
    events = {f"e{n}": {"account_id": n, "amount": 5} for n in (1, 2, 3)}
    with psycopg.connect(dsn, autocommit=True) as c:
        assert rows_back(c, events) == []
        assert sorted(rows_back(c, {**events, "e4": {"account_id": 4242, "amount": 5}})) == [
            ("e1", True), ("e2", True), ("e3", True), ("e4", False)]


# p's statement without `checked`: what it was before, trusting the lock and the key alone.
UNCHECKED = consume_pipelined.CLAIM_AND_CREDIT.replace("(SELECT n FROM checked) > 0",
                                                       "(SELECT count(*) FROM locked) > 0")


def unchecked(conn, events):
    return consume_pipelined.batch_statement(conn, UNCHECKED, events, consumer=consume.CONSUMER_NAME)


def delete_account_7_under(claim, events: dict, dsn, conn, schema):
    """The schedule: the statement waits on account 7's lock, which a DELETE holds and then
    commits; the statement goes on. On p's schema (its setup: the ledger without its foreign
    key). Returns what claim_and_credit_each answered."""
    registry.prepare("p", dsn)
    deleter = psycopg.connect(harness.scoped_dsn(schema, harness.ADMIN_DSN))
    consumer = psycopg.connect(dsn, autocommit=True)
    result, errors = {}, []

    def statement_in_flight():
        try:
            result["outcome"] = consume_pipelined.claim_and_credit_each(
                consumer, {i: {"account_id": a, "amount": 5} for i, a in events.items()}, claim)
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
    return result["outcome"]


@pytest.mark.parametrize("statement, events, outcome, inbox", [
    # one of two accounts gone: p's ledger has no foreign key, so `checked` alone refuses it;
    # the other account's credit is written
    ("checked", {"x-1": 7, "x-2": 1}, ({"x-2"}, {"x-1"}, {}), [("x-2",)]),
    ("checked", {"x-1": 7}, (set(), {"x-1"}, {}), []),
    # the control: the batch's only account deleted, the writes' guard skips them all and the
    # claim commits alone, so the schedule does reach the window
    ("unchecked (the control)", {"x-1": 7}, ({"x-1"}, set(), {}), [("x-1",)]),
])
def test_an_account_deleted_under_the_statement_is_parked_not_claimed_into_nothing(
        statement, events, outcome, inbox, dsn, conn, schema):
    """An account that `known` found and a DELETE removed before `locked` reached it: the
    statement fails whole, and the event is parked as an unknown account on its own retry."""
    claim = consume_pipelined.claim_and_credit if statement == "checked" else unchecked
    assert delete_account_7_under(claim, events, dsn, conn, schema) == outcome
    assert conn.execute("SELECT message_id FROM processed_messages").fetchall() == inbox
    assert conn.execute("SELECT event_id FROM ledger WHERE account_id = 7").fetchall() == []


def test_the_count_is_what_keeps_p_s_ledger_from_crediting_a_deleted_account(dsn, conn, schema):
    """The control for `checked` on p's schema: the same schedule (one of the batch's two
    accounts deleted while the statement waits for its lock) through the statement without
    the count writes a ledger row for an account that no longer exists, which no key stops."""
    delete_account_7_under(unchecked, {"x-1": 7, "x-2": 1}, dsn, conn, schema)
    assert conn.execute("SELECT event_id FROM ledger WHERE account_id = 7").fetchall() == [("x-1",)]
    assert conn.execute("SELECT count(*) FROM accounts WHERE id = 7").fetchone() == (0,)


def test_p_s_ledger_keeps_the_keys_other_promise_no_account_with_credits_goes(dsn, conn):
    """p's setup drops the ledger's foreign key; its trigger refuses, as the key did, to delete
    or renumber an account that has ledger rows, and lets one without them go. Run twice, the
    setup changes nothing the second time (every worker start runs it)."""
    registry.prepare("p", dsn)
    registry.prepare("p", dsn)
    assert conn.execute("SELECT count(*) FROM pg_constraint WHERE conrelid = 'ledger'::regclass "
                        "AND contype = 'f'").fetchone() == (0,)
    with psycopg.connect(dsn, autocommit=True) as consumer:
        assert rows_back(consumer, {"k-1": {"account_id": 3, "amount": 5}}) == []
    for change in ("DELETE FROM accounts WHERE id = 3", "UPDATE accounts SET id = 100003 WHERE id = 3"):
        with pytest.raises(psycopg.errors.ForeignKeyViolation, match="account 3 has ledger rows"):
            conn.execute(change)
    conn.execute("DELETE FROM accounts WHERE id = 4")  # no credits: it may go
    assert conn.execute("SELECT id FROM accounts WHERE id IN (3, 4)").fetchall() == [(3,)]


def setup_waited_on_an_open_credit(where: str, admin) -> bool:
    """Run p's setup on `where` while a credit's transaction is open there (a ledger row and a
    balance written, not committed); whether the setup had to wait for it. Seen from a third
    session: the setup's backend blocked by the credit's; the credit then rolls back, so a
    setup that waited finishes."""
    with psycopg.connect(where) as crediting:
        crediting.execute("UPDATE accounts SET balance = balance + 5 WHERE id = 2")
        crediting.execute("INSERT INTO ledger (event_id, account_id, amount) VALUES ('open-1', 2, 5)")
        errors, done = [], threading.Event()

        def set_up():
            try:
                registry.prepare("p", where)
            except BaseException as e:  # noqa: BLE001 - the test's thread: its error fails the test below
                errors.append(e)
            finally:
                done.set()

        def blocked_by_the_credit() -> bool:
            return admin.execute("SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                                 [crediting.info.backend_pid]).fetchone()[0] > 0

        threading.Thread(target=set_up, daemon=True).start()
        harness.wait_until(lambda: done.is_set() or blocked_by_the_credit(), 30,
                           "p's setup to finish or to wait on the open credit", interval_s=0.05)
        waited = not done.is_set()  # it cannot finish while it waits on the credit's locks
        crediting.rollback()
        assert done.wait(30), "p's setup still ran 30 s after the credit it waited on rolled back"
        assert not errors, errors
    return waited


def test_p_s_setup_run_again_waits_for_no_credit_in_flight(dsn, conn):
    """Every worker start runs p's setup, beside workers already crediting: once the schema has
    it, the setup takes no lock that an open credit holds. The control: the first setup (it
    drops the ledger's key, ALTER TABLE) waits for the credit, so this would see a setup that did."""
    assert not setup_waited_on_an_open_credit(dsn, conn)
    first_time = harness.unique("t")
    harness.create_schema(first_time)
    try:
        assert setup_waited_on_an_open_credit(harness.scoped_dsn(first_time), conn)
    finally:
        harness.drop_schema(first_time)
