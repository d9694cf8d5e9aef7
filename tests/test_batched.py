"""The batched inbox (variant d) against a real PostgreSQL and, where it says so, a real Kafka."""
import random
import threading

import psycopg
import pytest
from helpers import (
    POISONED_BATCH,
    holding_credit,
    hostile_batch_is_handled,
    read_all,
    run_threads,
    run_until_drained,
    second_waits_for_first,
    send,
)

import measure_kill
from tests.seeds import shifted
from variants import consume_batched
from variants.consume_batched import handle_batch


def credits(ids, account=1, amount=10):
    return [(i, {"account_id": account, "amount": amount}) for i in ids]


def per_id(conn) -> dict:
    return dict(conn.execute("SELECT event_id, count(*) FROM ledger GROUP BY event_id").fetchall())


def test_ids_repeated_inside_a_batch_are_applied_once(conn):
    applied, rejected = handle_batch(conn, credits(["e1", "e2", "e1", "e3", "e2"]))
    assert [eid for eid, _ in applied] == ["e1", "e2", "e3"]
    assert rejected == []
    assert per_id(conn) == {"e1": 1, "e2": 1, "e3": 1}
    assert conn.execute("SELECT balance FROM accounts WHERE id = 1").fetchone()[0] == 30


def test_a_second_delivery_of_the_batch_applies_nothing(conn):
    handle_batch(conn, credits(["e1", "e2"]))
    applied, _ = handle_batch(conn, credits(["e2", "e1", "e3"]))
    assert [eid for eid, _ in applied] == ["e3"]
    assert per_id(conn) == {"e1": 1, "e2": 1, "e3": 1}


def test_unknown_account_is_rejected_without_failing_the_batch(conn):
    batch = [("e1", {"account_id": 1, "amount": 5}), ("e2", {"account_id": 4242, "amount": 5})]
    applied, rejected = handle_batch(conn, batch)
    assert [eid for eid, _ in applied] == ["e1"]
    assert [(eid, reason) for eid, _, reason in rejected] == [("e2", "unknown account 4242")]
    assert conn.execute("SELECT message_id FROM processed_messages").fetchall() == [("e1",)]


def test_overlapping_batches_in_two_consumers_apply_each_id_once(dsn, conn):
    """The first batch claims its IDs and holds its transaction; the second, overlapping and
    in the opposite order, must wait on the shared IDs, then apply only its own."""
    first, second = second_waits_for_first(
        dsn, conn, lambda c, hold: handle_batch(c, credits(["a", "b", "c", "d"]), apply_batch=holding_credit(hold))[0],
        lambda c: handle_batch(c, credits(["f", "d", "e", "b"]))[0])
    assert sorted(eid for eid, _ in first) == ["a", "b", "c", "d"]
    assert sorted(eid for eid, _ in second) == ["e", "f"]
    assert set(per_id(conn).values()) == {1} and len(per_id(conn)) == 6


def hammered(dsn, handle, orders) -> list:
    """Rounds of batches, one thread per order of the same IDs (the accounts shared too), each
    batch handled by `handle`; the errors they met. The threads start each round together (a
    barrier), and a batch of 1,000 claims takes long enough that their claims overlap."""
    errors, each_round = [], threading.Barrier(len(orders))

    def hammer(ids):
        with psycopg.connect(dsn, autocommit=True) as c:
            for round_ in range(ROUNDS):
                batch = [(f"r{round_}-{i}", {"account_id": i % 7 + 1, "amount": 1}) for i in ids]
                each_round.wait(30)
                try:
                    handle(c, batch)
                except psycopg.Error as e:
                    errors.append(e)

    run_threads([threading.Thread(target=hammer, args=(ids,)) for ids in orders])
    return errors


ROUNDS, IDS = 5, 1000


def opposite_and_shuffled(seed: int) -> list:
    shuffled = list(range(IDS))
    random.Random(shifted(seed)).shuffle(shuffled)
    return [range(IDS), range(IDS - 1, -1, -1), shuffled]


def test_overlapping_batches_never_deadlock(dsn, conn):
    """Rounds of three batches over the same IDs and accounts, started together, in opposite
    orders and in a seeded shuffle (LAB_TEST_SEED moves it): without a consistent lock order
    Postgres would report a deadlock (the control below does)."""
    assert hammered(dsn, handle_batch, opposite_and_shuffled(3)) == []
    assert conn.execute("SELECT count(*), count(DISTINCT event_id) FROM ledger").fetchone() == (ROUNDS * IDS,) * 2
    assert conn.execute("SELECT sum(balance) FROM accounts").fetchone()[0] == ROUNDS * IDS


def claimed_in_arrival_order(conn, events):
    """The control: handle_batch's claim and credit, the IDs claimed in the order they came."""
    with conn.transaction():
        claimed = {row[0] for row in conn.execute(
            "INSERT INTO processed_messages (consumer, message_id) SELECT %s, id FROM unnest(%b::text[]) "
            "WITH ORDINALITY AS arrived(id, n) ORDER BY n ON CONFLICT DO NOTHING RETURNING message_id",
            (consume_batched.CONSUMER_NAME, [eid for eid, _ in events]))}
        consume_batched.credit_accounts(conn, [(eid, ev) for eid, ev in events if eid in claimed])


def test_the_control_batches_that_claim_in_arrival_order_deadlock(dsn):
    errors = hammered(dsn, claimed_in_arrival_order, opposite_and_shuffled(3))
    assert any(isinstance(e, psycopg.errors.DeadlockDetected) for e in errors), errors


def test_poison_inside_a_batch_goes_to_dlq_and_the_rest_is_applied(topic, group, dsn, conn):
    send(topic, POISONED_BATCH)
    run_until_drained(consume_batched.run_batched, topic, group, dsn, batch=10)
    reasons = sorted(dict(m.headers())["dlq_reason"].decode() for m in read_all(topic + ".dlq", 2))
    assert reasons[0] == "unknown account 9999" and reasons[1].startswith("value is not JSON")
    assert per_id(conn) == {"g-1": 1, "g-2": 1}


def test_a_hostile_batch_parks_each_bad_copy_alone_and_applies_the_rest_once(topic, group, dsn, conn):
    hostile_batch_is_handled(consume_batched.run_batched, topic, group, dsn, conn, batch=10)


@pytest.mark.slow
@pytest.mark.usefixtures("services")
@pytest.mark.parametrize("batch", [50])
def test_batched_inbox_survives_hard_kills(batch):
    config = {"runs": 1, "kills": 3, "events": 6000, "partitions": 3, "work_ms": 2, "life": [0.5, 1.5],
              "seed": shifted(11), "session_timeout_ms": 2000, "heartbeat_interval_ms": 500, "batch": batch}
    record = measure_kill.run_once("d", 1, config)
    assert record["kills"] == 3, record["kill_log"]
    assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0)
    assert record["balances_exact"] is True
