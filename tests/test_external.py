"""Effects behind an HTTP call, against the repo's own provider (a real HTTP service on
loopback, its charges in Postgres): each redelivery rule, and the outbox relay."""
import threading
import time

import pytest
from helpers import POISON, consuming, drained, read_all, send

from lab import harness
from lab.settings import PROVIDER_DSN
from tests.seeds import shifted
from variants import consume_external as ext
from variants import provider


@pytest.fixture
def provider_in(schema):
    running = []

    def start(mode):
        running.append(provider.Running(mode, harness.scoped_dsn(schema, PROVIDER_DSN)))
        return provider.Client(running[-1].url)

    yield start
    for p in running:
        p.stop()


EVENT = {"account_id": 1, "amount": 25}


def charges(conn, reference="evt-1") -> int:
    return conn.execute("SELECT count(*) FROM provider_charges WHERE reference = %s", (reference,)).fetchone()[0]


def state(conn, event_id="evt-1"):
    return conn.execute("SELECT state, attempts FROM external_effects WHERE message_id = %s", (event_id,)).fetchone()


def died_holding_the_lease(conn, client, called: bool, key=True):
    """An earlier handler claimed evt-1, maybe called the provider, and died before mark-done;
    its lease has run out (set in the past here, rather than waited for)."""
    assert ext.claim(conn, "evt-1", lease_s=30) == ("fresh", 1)
    if called:
        client.charge("evt-1", 1, 25, key=ext.effect_key("evt-1") if key else None)
    conn.execute("UPDATE external_effects SET locked_until = now() - interval '1 second'")


def test_done_means_skip(conn, provider_in):
    client = provider_in("none")
    assert ext.handle_external(conn, "evt-1", EVENT, client=client, policy="retry") is True
    assert ext.handle_external(conn, "evt-1", EVENT, client=client, policy="retry") is False
    assert charges(conn) == 1 and state(conn) == ("done", 1)


def test_a_live_lease_means_someone_is_on_it(conn, provider_in):
    client = provider_in("none")
    assert ext.claim(conn, "evt-1", lease_s=30) == ("fresh", 1)
    with pytest.raises(ext.LeaseHeld):
        ext.handle_external(conn, "evt-1", EVENT, client=client, policy="retry", lease_s=0.1)
    assert charges(conn) == 0 and state(conn) == ("processing", 1)


def test_a_handler_whose_lease_runs_short_does_not_call(conn, provider_in):
    client = provider_in("none")
    with pytest.raises(ext.LeaseRunningOut):  # a stall between claim and call outlasts 3/4 of the lease
        ext.handle_external(conn, "evt-1", EVENT, client=client, policy="retry", lease_s=0.2,
                            before_call=lambda event_id: time.sleep(0.2))
    assert charges(conn) == 0 and state(conn) == ("processing", 1)


def test_a_mark_done_after_a_takeover_is_refused(conn):
    assert ext.claim(conn, "evt-1", lease_s=30) == ("fresh", 1)
    conn.execute("UPDATE external_effects SET locked_until = now() - interval '1 second'")
    assert ext.claim(conn, "evt-1", lease_s=30) == ("expired", 2)  # a second handler took the lease over
    assert ext.mark_done(conn, "evt-1", attempt=1) is False
    assert state(conn) == ("processing", 2)
    assert ext.mark_done(conn, "evt-1", attempt=2) is True and state(conn) == ("done", 2)


def test_expired_lease_with_keys_calls_again_and_the_provider_replays(conn, provider_in):
    client = provider_in("keys")
    died_holding_the_lease(conn, client, called=True)
    assert ext.handle_external(conn, "evt-1", EVENT, client=client, policy="keys") is True
    assert charges(conn) == 1 and state(conn) == ("done", 2)


def test_requests_racing_with_one_key_charge_once(conn, provider_in):
    client = provider_in("keys")
    start_together = threading.Barrier(8)
    answers = []

    def call():
        start_together.wait(10)
        answers.append(client.charge("evt-1", 1, 25, key="wallet-credits:evt-1"))

    callers = [threading.Thread(target=call) for _ in range(8)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(30)
    assert charges(conn) == 1
    assert len(answers) == 8 and len({answer["charge_id"] for answer in answers}) == 1


@pytest.mark.parametrize("called, expected_charges", [(True, 1), (False, 1)])
def test_expired_lease_with_lookup_asks_first(conn, provider_in, called, expected_charges):
    client = provider_in("lookup")
    died_holding_the_lease(conn, client, called=called, key=False)
    ext.handle_external(conn, "evt-1", EVENT, client=client, policy="lookup")
    assert charges(conn) == expected_charges and state(conn)[0] == "done"


def test_with_neither_retry_risks_a_duplicate_and_skip_a_loss(conn, provider_in):
    client = provider_in("none")
    died_holding_the_lease(conn, client, called=True, key=False)
    ext.handle_external(conn, "evt-1", EVENT, client=client, policy="retry")
    assert charges(conn) == 2  # the call had landed: retrying charged twice
    conn.execute("DELETE FROM external_effects")
    conn.execute("DELETE FROM provider_charges")
    died_holding_the_lease(conn, client, called=False, key=False)
    ext.handle_external(conn, "evt-1", EVENT, client=client, policy="skip")
    assert charges(conn) == 0  # the call had not landed: giving up lost it


@pytest.mark.parametrize("policy, called", [("retry", False), ("skip", True)])
def test_retry_never_loses_a_charge_and_skip_never_makes_two(conn, provider_in, policy, called):
    """The other halves of the trade above: retry after a call that never went out charges it
    once (nothing lost), and skip after one that had landed leaves that one charge (no second)."""
    client = provider_in("none")
    died_holding_the_lease(conn, client, called=called, key=False)
    ext.handle_external(conn, "evt-1", EVENT, client=client, policy=policy)
    assert charges(conn) == 1


class RelayDied(Exception):
    """The relay's crash between the provider's answer and its commit."""


@pytest.mark.parametrize("mode, expected", [("keys", 1), ("none", 2)])
def test_a_relay_that_dies_between_its_call_and_its_commit_calls_again_with_the_same_key(conn, provider_in, mode,
                                                                                       expected):
    """The outbox's crash window: the relay's call lands, then the relay dies before its commit (its
    transaction rolls back, the row stays unsent), and the next pass calls again with the row's key.
    A provider that honours keys charges once; the control, one that ignores them, twice."""
    client = provider_in(mode)
    assert ext.handle_with_outbox(conn, "evt-1", EVENT) is True

    def die(reference):
        raise RelayDied(reference)

    with pytest.raises(RelayDied):
        ext.relay_once(conn, client, after_call=die)
    assert ext.relay_once(conn, client) == 1
    assert charges(conn) == expected


def test_outbox_relay_on_two_workers_calls_once_per_row(dsn, conn, provider_in):
    client = provider_in("none")  # no dedup at the provider: a second call for a row would show
    for n in range(60):
        assert ext.handle_with_outbox(conn, f"evt-{n}", EVENT) is True
    assert ext.handle_with_outbox(conn, "evt-0", EVENT) is False  # a redelivery writes no second row
    stop, first_holding, second_sent = threading.Event(), threading.Event(), threading.Event()
    stalled = []

    def first_waits_for_second(reference):
        # The first relay holds its rows locked until the second has sent one: with SKIP
        # LOCKED the second takes other rows; with a plain FOR UPDATE it would queue here.
        first_holding.set()
        if not second_sent.wait(10):
            stalled.append(reference)

    relays = [threading.Thread(target=ext.run_relay, args=(client, dsn, stop),
                               kwargs={"batch": 5, "after_call": hook})
              for hook in (first_waits_for_second, lambda reference: second_sent.set())]
    try:
        relays[0].start()
        assert first_holding.wait(30), "the first relay sent nothing"
        relays[1].start()
        harness.wait_until(lambda: conn.execute("SELECT count(*) FROM outbox WHERE sent_at IS NULL").fetchone()[0]
                           == 0, 60, "the relays to empty the outbox", interval_s=0.1)
    finally:
        stop.set()
        for relay in relays:
            if relay.is_alive():
                relay.join(30)
    assert not stalled, "the second relay waited on the first one's locked rows"
    per_reference = conn.execute("SELECT count(*), count(DISTINCT reference) FROM provider_charges").fetchone()
    assert per_reference == (60, 60)


# The battery for effects behind a call: the database-only kinds (an unknown account, a
# balance's overflow) are valid charges here; a charge over the provider's limit is poison.
CALL_POISON = {**{kind: case for kind, case in POISON.items()
                  if kind not in ("unknown account", "a credit that overflows its balance")},
               "refused by the provider": ((b"1", b'{"account_id": 1, "amount": 2000000000}', [("event_id", b"p-r")]),
                                           "the provider refused it: 422")}
GOOD = (b"1", b'{"account_id": 1, "amount": 5}', [("event_id", b"good-1")])


def test_every_kind_of_poison_is_parked_by_the_calling_consumer(topic, group, dsn, conn, provider_in):
    client = provider_in("keys")

    def handle(conn, event_id, event, apply=None):
        return ext.handle_external(conn, event_id, event, client=client, policy="keys")

    send(topic, [poison for poison, _ in CALL_POISON.values()] + [GOOD])
    with consuming(topic, group, dsn, handle=handle):
        drained(group, topic)
    parked = {int(dict(m.headers())["dlq_source"].decode().rsplit("/", 1)[1]): dict(m.headers())["dlq_reason"]
              for m in read_all(topic + ".dlq", len(CALL_POISON))}
    assert sorted(parked) == list(range(len(CALL_POISON)))
    for offset, (kind, (_, reason)) in enumerate(CALL_POISON.items()):
        assert reason in parked[offset].decode(), kind
    # one charge, the good one; the refused charge's lease is free for a replay from the DLQ
    assert conn.execute("SELECT reference, amount FROM provider_charges").fetchall() == [("good-1", 5)]
    assert conn.execute("SELECT message_id, state FROM external_effects WHERE locked_until > now()").fetchall() == []


def test_every_kind_of_poison_is_parked_by_the_outbox_consumer_and_a_refusal_by_its_relay(
        topic, group, dsn, conn, provider_in):
    client = provider_in("keys")
    send(topic, [poison for poison, _ in CALL_POISON.values()] + [GOOD])
    with consuming(topic, group, dsn, handle=ext.handle_with_outbox):
        drained(group, topic)
    poison = {kind: case for kind, case in CALL_POISON.items() if kind != "refused by the provider"}
    parked = read_all(topic + ".dlq", len(poison))
    assert len(parked) == len(poison)  # the refusal is not the consumer's to see: it queued the call
    # The relay meets the refusal first (its row comes first), parks it, and sends the row behind it.
    assert ext.relay_once(conn, client) == 2
    rows = conn.execute("SELECT payload->>'reference', sent_at IS NOT NULL, payload->>'refused' FROM outbox "
                        "ORDER BY id").fetchall()
    assert [r[:2] for r in rows] == [("p-r", True), ("good-1", True)]
    assert rows[0][2].startswith("422: ") and rows[1][2] is None
    assert conn.execute("SELECT reference FROM provider_charges").fetchall() == [("good-1",)]


@pytest.mark.slow
@pytest.mark.usefixtures("services")
def test_keys_survive_hard_kills_and_crashes_around_the_call():
    from measurements import measure_external

    config = {"events": 200, "kills": 3, "partitions": 3, "work_ms": 5, "life": [0.5, 1.0], "seed": shifted(5),
              "lease_s": 1.0, "crash_every": 25, "crash_before_every": 23, "session_timeout_ms": 2000}
    record = measure_external.run_once("keys", 1, config)
    assert record["crashed_after_call"] + record["crashed_before_call"] >= 1, record["kill_log"]
    assert (record["duplicates"], record["lost"], record["balances_exact"]) == (0, 0, True)


@pytest.mark.slow
@pytest.mark.usefixtures("services")
def test_a_final_consumer_that_exits_on_an_unanswered_call_is_started_again():
    """M5's recovery: the provider stands still (SIGSTOP) from the recovery's start until the
    first final consumer has exited on its unanswered call, as it does by design; the harness
    starts another, as a supervisor would, and the events left uncharged are charged once.
    Before afd9242 that consumer was not started again and they were counted as lost."""
    from measurements import measure_external

    config = {"events": 300, "kills": 1, "partitions": 3, "work_ms": 5, "life": [0.3, 0.5], "seed": shifted(5),
              "lease_s": 1.0, "crash_every": 10_000, "crash_before_every": 10_000, "session_timeout_ms": 2000,
              "hold_provider_in_recovery": True}
    record = measure_external.run_once("keys", 1, config)
    assert record["recovery_restarts"] >= 1 and record["recovery_settled"], record
    assert (record["duplicates"], record["lost"], record["balances_exact"]) == (0, 0, True), record


def test_processes_starting_together_pick_a_planted_crash_once(dsn, monkeypatch):
    """The outbox consumer and its relay start together (their crash table once raced on
    CREATE TABLE IF NOT EXISTS and stopped an M5 run). Now the table is the owner's, made with
    the schema, so nothing races to make it; six processes' first handling of one event
    picks it exactly once."""
    from lab import worker

    monkeypatch.setattr(worker, "DSN", dsn)
    start_together, picked, errors = threading.Barrier(6), [], []

    def first():
        start_together.wait(10)
        try:
            picked.append(worker.FirstTime(5, "call_crashes")("r1-10", {"seq": 10}))
        except Exception as e:  # noqa: BLE001 - any failure here is the race
            errors.append(e)

    processes = [threading.Thread(target=first) for _ in range(6)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(30)
    assert errors == [] and sorted(picked) == [False] * 5 + [True]
