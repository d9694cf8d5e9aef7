"""The pipelined batched inbox (variant p) against a real PostgreSQL and, where it says so,
a real Kafka: the one statement, its lock order beside d's, poison, a rebalance and kills."""
import random
import threading

import psycopg
import pytest
from confluent_kafka import KafkaError, KafkaException, Message
from helpers import (
    POISONED_BATCH,
    Positioned,
    holding_credit,
    hostile_batch_is_handled,
    read_all,
    run_threads,
    run_until_drained,
    second_waits_for_first,
    send,
)

import measure_kill
import measure_rebalance
from tests.seeds import shifted
from variants import consume_batched, consume_pipelined
from variants.consume_pipelined import claim_and_credit

pytestmark = pytest.mark.usefixtures("on_p_schema")  # p's own schema, as p runs


def credits(ids, account=1, amount=10) -> dict:
    return {i: {"account_id": account, "amount": amount} for i in ids}


def per_id(conn) -> dict:
    return dict(conn.execute("SELECT event_id, count(*) FROM ledger GROUP BY event_id").fetchall())


def test_the_statement_applies_new_ids_and_reports_unknown_accounts(conn):
    events = {**credits(["e1", "e2", "e3"]), "e4": {"account_id": 4242, "amount": 5},
              "e5": {"account_id": 2, "amount": 7}}
    applied, rejected = claim_and_credit(conn, events)
    assert applied == {"e1", "e2", "e3", "e5"} and rejected == {"e4"}
    assert per_id(conn) == {"e1": 1, "e2": 1, "e3": 1, "e5": 1}
    balances = conn.execute("SELECT id, balance FROM accounts WHERE id IN (1, 2) ORDER BY id").fetchall()
    assert balances == [(1, 30), (2, 7)]
    assert "e4" not in {row[0] for row in conn.execute("SELECT message_id FROM processed_messages")}


def test_any_id_and_amount_reach_the_statement_as_they_were(conn):
    """The batch goes as text array literals (text_array, int_array): every character an event
    ID may hold (all but NUL) comes back unchanged, and so do the integer bounds."""
    hostile = ['"', "\\", '\\"', 'a"b\\c', "{}", "a,b", " padded ", "\n\t", "NULL", "null", "é€😀", "'", "}{\","]
    events = {event_id: {"account_id": 1 + n % 3, "amount": 2**53 if n == 0 else 1 + n}
              for n, event_id in enumerate(hostile)}
    applied, rejected = claim_and_credit(conn, events)
    assert (applied, rejected) == (set(hostile), set())
    rows = conn.execute("SELECT event_id, account_id, amount FROM ledger").fetchall()
    assert sorted(rows) == sorted((i, e["account_id"], e["amount"]) for i, e in events.items())
    assert {r[0] for r in conn.execute("SELECT message_id FROM processed_messages")} == set(hostile)


def test_a_second_delivery_applies_only_what_is_new(conn):
    claim_and_credit(conn, credits(["e1", "e2"]))
    applied, _ = claim_and_credit(conn, credits(["e2", "e1", "e3"]))
    assert applied == {"e3"}
    assert per_id(conn) == {"e1": 1, "e2": 1, "e3": 1}
    assert conn.execute("SELECT balance FROM accounts WHERE id = 1").fetchone()[0] == 30


def test_a_replay_skips_the_plain_insert_until_a_batch_holds_no_id_claimed_before(conn):
    """A batch with an ID claimed before fails as CLAIM_NEW_AND_CREDIT and runs again with ON
    CONFLICT; the batches after it go straight to ON CONFLICT until one holds no such ID."""
    claim_and_credit(conn, credits(["a"]))
    assert conn not in consume_pipelined.REPLAYING
    assert claim_and_credit(conn, credits(["a", "b"]))[0] == {"b"}
    assert conn in consume_pipelined.REPLAYING
    assert claim_and_credit(conn, credits(["b", "c"]))[0] == {"c"}
    assert conn in consume_pipelined.REPLAYING
    assert claim_and_credit(conn, credits(["d"]))[0] == {"d"}  # none claimed before: plain again
    assert conn not in consume_pipelined.REPLAYING
    assert per_id(conn) == dict.fromkeys("abcd", 1)
    assert conn.execute("SELECT balance FROM accounts WHERE id = 1").fetchone()[0] == 40


def test_a_replay_on_a_partitioned_inbox_is_skipped_not_refused(dsn, conn):
    """A partitioned inbox's unique violations name its partitions' keys, not the table's: IDs
    claimed before are still skips, and none of the batch is parked as refused."""
    conn.execute("""
        DROP TABLE processed_messages;
        CREATE TABLE processed_messages (consumer text NOT NULL, message_id text NOT NULL,
            processed_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (consumer, message_id))
            PARTITION BY RANGE (message_id);
        CREATE TABLE processed_messages_to_m PARTITION OF processed_messages FOR VALUES FROM (MINVALUE) TO ('m');
        CREATE TABLE processed_messages_rest PARTITION OF processed_messages DEFAULT;
        GRANT SELECT, INSERT ON processed_messages TO inbox_consumer""")
    with psycopg.connect(dsn, autocommit=True) as c:
        claim_and_credit(c, credits(["b", "n"]))
        applied, unknown, refused = consume_pipelined.claim_and_credit_each(c, credits(["b", "c", "n", "o"]))
    assert (applied, unknown, refused) == ({"c", "o"}, set(), {})
    assert per_id(conn) == dict.fromkeys("bcno", 1)


def test_a_unique_violation_outside_the_inbox_is_still_a_refused_value(dsn, conn):
    """The fallback runs the batch again with ON CONFLICT on the inbox only: a unique index
    elsewhere (here one put on the ledger's event_id, with a row for z already in it) still
    refuses, and p parks that event alone with the database's reason."""
    conn.execute("CREATE UNIQUE INDEX ledger_event_id_once ON ledger (event_id)")
    conn.execute("INSERT INTO ledger (event_id, account_id, amount) VALUES ('z', 1, 1)")
    with psycopg.connect(dsn, autocommit=True) as c:
        applied, unknown, refused = consume_pipelined.claim_and_credit_each(c, credits(["y", "z"]))
    assert applied == {"y"} and unknown == set() and list(refused) == ["z"]
    assert "ledger_event_id_once" in refused["z"]


def test_a_claim_rolled_back_under_the_statement_leaves_it_all_to_apply(dsn, conn):
    """The plain INSERT waits on another transaction's uncommitted claims of its IDs; that
    transaction rolls back, so the statement claims and credits every ID itself."""
    def claim_then_roll_back(c, hold):
        with c.transaction():
            c.execute("INSERT INTO processed_messages (consumer, message_id) SELECT %s, unnest(%s::text[])",
                      [consume_pipelined.CONSUMER_NAME, ["b", "d"]])
            hold()
            raise psycopg.Rollback()

    _, applied = second_waits_for_first(dsn, conn, claim_then_roll_back,
                                        lambda c: claim_and_credit(c, credits(["f", "d", "e", "b"]))[0])
    assert applied == {"b", "d", "e", "f"}
    assert per_id(conn) == dict.fromkeys("bdef", 1)


def test_ids_repeated_inside_a_batch_of_messages_count_once(topic, group, dsn, conn):
    """Batch keeps the first copy of each ID; the statement never sees a repeat."""
    send(topic, [(b"1", b'{"account_id": 1, "amount": 10}', [("event_id", i.encode())])
                 for i in ("r1", "r2", "r1", "r3", "r2")])
    run_until_drained(consume_pipelined.run_pipelined, topic, group, dsn, batch=10)
    assert per_id(conn) == {"r1": 1, "r2": 1, "r3": 1}
    assert conn.execute("SELECT balance FROM accounts WHERE id = 1").fetchone()[0] == 30


def test_the_statement_waits_for_a_batch_holding_shared_ids_then_applies_its_own(dsn, conn):
    """d claims its IDs and holds its transaction; p's statement, overlapping it, must wait on
    the shared IDs (not fail, not apply them), then apply only its own."""
    _, applied = second_waits_for_first(
        dsn, conn, lambda c, hold: consume_batched.handle_batch(c, list(credits(["a", "b", "c", "d"]).items()),
                                                               apply_batch=holding_credit(hold)),
        lambda c: claim_and_credit(c, credits(["f", "d", "e", "b"]))[0])
    assert applied == {"e", "f"}
    assert per_id(conn) == dict.fromkeys("abcdef", 1)
    assert conn.execute("SELECT balance FROM accounts WHERE id = 1").fetchone()[0] == 60


def test_p_beside_p_and_d_never_deadlocks(dsn, conn):
    """Rounds of unsynchronised batches over the same IDs and accounts, in opposite orders and
    in a seeded shuffle (LAB_TEST_SEED moves it), from three p's and a d: a lock order that
    differed between them would deadlock."""
    errors = []
    shuffled = list(range(25, 125))
    random.Random(shifted(4)).shuffle(shuffled)

    def batch_of(round_, ids):
        return [(f"r{round_}-{i}", {"account_id": i % 7 + 1, "amount": 1}) for i in ids]

    def hammer_p(ids):
        with psycopg.connect(dsn, autocommit=True) as c:
            for round_ in range(15):
                try:
                    claim_and_credit(c, dict(batch_of(round_, ids)))
                except psycopg.Error as e:
                    errors.append(e)

    def hammer_d(ids):
        with psycopg.connect(dsn, autocommit=True) as c:
            for round_ in range(15):
                try:
                    consume_batched.handle_batch(c, batch_of(round_, ids))
                except psycopg.Error as e:
                    errors.append(e)

    threads = [threading.Thread(target=hammer_p, args=(range(100),)),
               threading.Thread(target=hammer_p, args=(range(99, -1, -1),)),
               threading.Thread(target=hammer_p, args=(shuffled,)),
               threading.Thread(target=hammer_d, args=(range(50, 150),))]
    run_threads(threads)
    assert errors == []
    assert conn.execute("SELECT count(*), count(DISTINCT event_id) FROM ledger").fetchone() == (2250, 2250)
    assert conn.execute("SELECT sum(balance) FROM accounts").fetchone()[0] == 2250


@pytest.mark.parametrize("seed", [shifted(1), shifted(2)])
def test_four_connections_racing_over_shared_ids_credit_each_once(seed, dsn, conn, monkeypatch):
    """Four connections, unsynchronised, each sending batches drawn at random from one pool of
    IDs: most batches meet IDs another connection claimed a moment before, or holds uncommitted,
    so the plain INSERT fails or waits, and the ON CONFLICT run and the replay's path take over.
    Every ID sent is credited once, whatever the interleaving."""
    pool = [f"s{seed}-{i}" for i in range(400)]
    sent, errors, ran = set(), [], []
    batch_statement = consume_pipelined.batch_statement

    def noting_which(c, statement, events, **params):
        ran.append(statement)
        return batch_statement(c, statement, events, **params)

    monkeypatch.setattr(consume_pipelined, "batch_statement", noting_which)

    def race(worker: int):
        rng = random.Random(seed * 10 + worker)
        with psycopg.connect(dsn, autocommit=True) as c:
            for _ in range(25):
                ids = rng.sample(pool, 40)
                sent.update(ids)
                try:
                    claim_and_credit(c, {i: {"account_id": int(i.split("-")[1]) % 9 + 1, "amount": 1} for i in ids})
                except psycopg.Error as e:
                    errors.append(e)

    run_threads([threading.Thread(target=race, args=(w,)) for w in range(4)])
    assert errors == []
    assert conn.execute("SELECT count(*), count(DISTINCT event_id) FROM ledger").fetchone() == (len(sent), len(sent))
    assert conn.execute("SELECT sum(balance) FROM accounts").fetchone()[0] == len(sent)
    # both forms ran: the plain INSERT, and ON CONFLICT after one failed or while replaying
    assert {consume_pipelined.CLAIM_NEW_AND_CREDIT, consume_pipelined.CLAIM_AND_CREDIT} <= set(ran)


@pytest.mark.parametrize("connections", [1, 2])
def test_poison_inside_a_batch_goes_to_dlq_before_the_offsets_move(connections, topic, group, dsn, conn):
    send(topic, POISONED_BATCH)
    run_until_drained(consume_pipelined.run_pipelined, topic, group, dsn, batch=2, connections=connections)
    reasons = sorted(dict(m.headers())["dlq_reason"].decode() for m in read_all(topic + ".dlq", 2))
    assert reasons[0] == "unknown account 9999" and reasons[1].startswith("value is not JSON")
    assert per_id(conn) == {"g-1": 1, "g-2": 1}


@pytest.mark.parametrize("connections", [1, 2])
def test_a_hostile_batch_parks_each_bad_copy_alone_and_applies_the_rest_once(connections, topic, group, dsn, conn):
    hostile_batch_is_handled(consume_pipelined.run_pipelined, topic, group, dsn, conn, batch=10,
                             connections=connections)


@pytest.mark.slow
@pytest.mark.usefixtures("services")
def test_pipelined_inbox_survives_hard_kills():
    config = {"runs": 1, "kills": 2, "events": 4000, "partitions": 3, "work_ms": 2, "life": [0.5, 1.5],
              "seed": shifted(12), "session_timeout_ms": 2000, "heartbeat_interval_ms": 500, "batch": 50}
    record = measure_kill.run_once("p", 1, config)
    assert record["kills"] == 2, record["kill_log"]
    assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0)
    assert record["balances_exact"] is True


@pytest.mark.slow
@pytest.mark.usefixtures("services")
def test_a_stalled_batch_beside_a_rebalance_writes_nothing_twice():
    """M2's stall, for p: the database thread stalls 5 s on one batch while the main thread
    goes on polling (so librdkafka sees no missed poll, unlike d), and the second consumer's
    join revokes partitions whose batch is still in flight. Whoever ends up with it, each
    credit lands once."""
    config = {"events": 20, "consumers": 2, "partitions": 2, "slow_every": 15, "slow_seconds": 5,
              "max_poll_interval_ms": 3000, "session_timeout_ms": 2000, "work_ms": 5, "seed": shifted(3), "batch": 10,
              "group_protocol": "classic"}
    record = measure_rebalance.run_once("p", 1, config)
    assert record["stalls"] == 1, record["examples"]
    assert (record["duplicates"], record["lost"]) == (0, 0), record


class HeldDatabase:
    """Stands in for variants/common.Database: its statement returns when the test says so."""

    def __init__(self):
        self.release, self.started = threading.Event(), threading.Event()

    def run(self, work, batch, _work):
        self.started.set()
        assert self.release.wait(30)
        batch.applied = set(batch.events)
        return batch

    def close(self):
        pass


class RecordingConsumer:
    """Records each commit's (partition, offset) pairs; refuses the first `refusals` commits as
    a broker does a member's whose generation has passed."""

    def __init__(self, refusals=0):
        self.commits, self.refusals = [], refusals

    def commit(self, offsets, asynchronous):
        assert asynchronous is False
        if self.refusals:
            self.refusals -= 1
            raise KafkaException(KafkaError(KafkaError.ILLEGAL_GENERATION))
        self.commits.append(sorted((tp.partition, tp.offset) for tp in offsets))


def finished_flow(*batches):
    """A one-connection pipeline whose `batches` (each a list of (partition, offset)) have finished."""
    db = HeldDatabase()
    db.release.set()
    flow = consume_pipelined.Pipeline([db])
    for places in batches:
        flow.submit(consume_pipelined.Batch([Positioned(*place) for place in places]))
    while flow.in_flight:
        flow.collect(None, wait_s=1.0)
    return flow


def test_batches_finish_in_the_order_read_whichever_statement_returns_first():
    """Two connections: the second batch's statement returns first; its offsets must wait for the
    first batch's, or a crash then would leave the first batch's messages behind a committed offset."""
    first, second = HeldDatabase(), HeldDatabase()
    flow = consume_pipelined.Pipeline([first, second])
    consumer = RecordingConsumer()
    flow.submit(consume_pipelined.Batch([Positioned(0, 0), Positioned(0, 1)]))
    assert first.started.wait(30)
    flow.submit(consume_pipelined.Batch([Positioned(0, 2), Positioned(1, 0)]))
    assert second.started.wait(30)
    second.release.set()
    flow.collect(None, wait_s=0.5)  # the second is back, the first is not: nothing is finished
    assert consumer.commits == [] and flow.in_flight == 2 and flow.unsent == {}
    first.release.set()
    flow.drain(None, consumer, commit=True)
    assert consumer.commits == [[(0, 3), (1, 1)]]
    flow.close()


def test_finished_offsets_wait_for_the_next_commit_which_carries_each_partitions_newest(monkeypatch):
    flow, consumer = finished_flow([(0, 0), (0, 1)], [(0, 2), (1, 0)], [(1, 1)]), RecordingConsumer()
    monkeypatch.setattr(consume_pipelined, "COMMIT_EVERY_S", 3600)  # the timer is not due
    flow.commit_due(consumer)
    assert consumer.commits == [] and flow.unsent == {("t", 0): 3, ("t", 1): 2}
    monkeypatch.setattr(consume_pipelined, "COMMIT_EVERY_S", 0)  # it is
    flow.commit_due(consumer)
    assert consumer.commits == [[(0, 3), (1, 2)]] and flow.unsent == {}
    flow.commit_due(consumer)  # nothing left: no empty commit
    assert len(consumer.commits) == 1
    flow.close()


def test_a_revocation_commits_what_finished_without_waiting_for_the_timer(monkeypatch):
    monkeypatch.setattr(consume_pipelined, "COMMIT_EVERY_S", 3600)
    flow, consumer = finished_flow([(0, 0), (2, 7)]), RecordingConsumer()
    flow.drain(None, consumer, commit=True)
    assert consumer.commits == [[(0, 1), (2, 8)]] and flow.unsent == {}
    flow.close()


class SecondStatementFails(HeldDatabase):
    def __init__(self):
        super().__init__()
        self.release.set()
        self.calls = 0

    def run(self, work, batch, _work):
        self.calls += 1
        if self.calls == 2:
            raise RuntimeError("the database gave up")
        return super().run(work, batch, _work)


def test_a_revocation_commits_what_finished_before_a_later_statement_failed(monkeypatch):
    monkeypatch.setattr(consume_pipelined, "COMMIT_EVERY_S", 3600)
    flow, consumer = consume_pipelined.Pipeline([SecondStatementFails()]), RecordingConsumer()
    flow.submit(consume_pipelined.Batch([Positioned(0, 0)]))
    flow.submit(consume_pipelined.Batch([Positioned(0, 1)]))
    with pytest.raises(RuntimeError, match="gave up"):
        flow.drain(None, consumer, commit=True)
    assert consumer.commits == [[(0, 1)]] and flow.unsent == {}  # the first batch's, never the failed one's
    flow.close()


def test_a_batch_s_offsets_are_each_topic_partition_s_last_message_plus_one():
    """Two topics with the same partition numbers, interleaved; and a partition read again from an
    earlier offset inside one batch, whose later (lower) offset is the one kept: it replays more,
    and passes nothing not handled."""
    messages = [Message(topic=t, partition=p, offset=o) for t, p, o in [
        ("a", 0, 5), ("b", 0, 9), ("a", 1, 2), ("a", 0, 6), ("b", 0, 10), ("a", 1, 7), ("a", 1, 3)]]
    assert consume_pipelined.offsets_after(messages) == {("a", 0): 7, ("b", 0): 11, ("a", 1): 4}
    assert consume_pipelined.offsets_after([]) == {}


def test_a_refused_commit_is_tried_again_while_the_partitions_are_ours_and_never_after(monkeypatch):
    monkeypatch.setattr(consume_pipelined, "COMMIT_EVERY_S", 0)  # always due
    flow, consumer = finished_flow([(0, 0)]), RecordingConsumer(refusals=1)
    flow.commit_due(consumer)  # refused: kept for the next try
    assert consumer.commits == [] and flow.unsent == {("t", 0): 1}
    flow.commit_due(consumer)
    assert consumer.commits == [[(0, 1)]]
    flow.close()

    flow, consumer = finished_flow([(0, 0)]), RecordingConsumer(refusals=1)
    flow.drain(None, consumer, commit=True)  # revoked, and the commit refused: not tried later
    assert consumer.commits == [] and flow.unsent == {}
    flow.close()

    flow, consumer = finished_flow([(0, 0)]), RecordingConsumer()
    flow.drain(None, consumer, commit=False)  # lost: dropped, not committed
    flow.commit_due(consumer)
    assert consumer.commits == [] and flow.unsent == {}
    flow.close()
