"""Variant k, per-key parallel handlers: the watermark (pure), then the real services."""
import threading

import pytest
from helpers import drained, read_all, send

import consume_parallel
import harness
import measure_kill
import measure_rebalance
from consume_parallel import Window
from publish import make_producer, publish


def test_the_watermark_never_passes_an_unfinished_message():
    window = Window("t", 0)
    window.offsets.extend([5, 6, 7, 8])
    window.done |= {6, 7}
    assert window.watermark() is None  # 5 is still in flight: nothing may be committed
    window.done.add(5)
    assert window.watermark() == 8  # 5, 6 and 7 are done: read from 8 next
    assert window.watermark() is None and list(window.offsets) == [8]
    window.done.add(8)
    assert window.watermark() == 9


def run_in_thread(topic, group, dsn, **options):
    stop = threading.Event()
    thread = threading.Thread(target=consume_parallel.run_parallel, args=(topic, group),
                              kwargs={"dsn": dsn, "stop": stop, **options}, daemon=True)
    thread.start()
    return stop, thread


@pytest.mark.parametrize("lanes, window", [(8, 500), (3, 4)], ids=["wide", "window-of-4"])
def test_every_event_once_and_each_account_in_order(lanes, window, group, dsn, conn, kafka):
    topic = harness.create_topic(f"test.k.{harness.unique('t')}", partitions=3)
    events = harness.make_events(900, "k", accounts=12, seed=3)
    harness.produce_events(topic, events)
    stop, thread = run_in_thread(topic, group, dsn, lanes=lanes, window=window)
    try:
        drained(group, topic)
    finally:
        stop.set()
        thread.join(60)
        harness.delete_topics(topic, topic + ".dlq")
    assert not thread.is_alive()
    rows = conn.execute("SELECT event_id, account_id, amount FROM ledger ORDER BY id").fetchall()
    balances = dict(conn.execute("SELECT id, balance FROM accounts").fetchall())
    verdict = harness.checker.check(dict(events), rows, balances)
    assert (verdict["duplicates"], verdict["lost"], verdict["balances_exact"]) == (0, 0, True)
    assert harness.checker.order_violations(dict(events), rows) == 0


def test_poison_in_the_window_is_dead_lettered_and_passed(topic, group, dsn, conn):
    producer = make_producer()
    publish(producer, topic, "g-1", {"account_id": 1, "amount": 10})
    assert producer.flush(30) == 0
    send(topic, [(b"1", b"not json", [("event_id", b"p-1")])])
    publish(producer, topic, "g-2", {"account_id": 1, "amount": 10})
    assert producer.flush(30) == 0
    stop, thread = run_in_thread(topic, group, dsn, lanes=4)
    try:
        drained(group, topic)  # the watermark went past the poison: it was dead-lettered first
    finally:
        stop.set()
        thread.join(60)
    [letter] = read_all(topic + ".dlq", 1)
    assert dict(letter.headers())["dlq_reason"].decode().startswith("value is not JSON")
    assert conn.execute("SELECT event_id FROM ledger ORDER BY id").fetchall() == [("g-1",), ("g-2",)]


@pytest.mark.slow
@pytest.mark.usefixtures("services")
def test_k_survives_hard_kills_in_order():
    config = {"runs": 1, "kills": 3, "events": 3000, "partitions": 3, "work_ms": 5, "life": [0.5, 1.5],
              "seed": 13, "session_timeout_ms": 2000, "heartbeat_interval_ms": 500, "lanes": 8}
    record = measure_kill.run_once("k", 1, config)
    assert record["kills"] == 3, record["kill_log"]
    assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0)
    assert record["balances_exact"] is True and record["order_violations"] == 0


@pytest.mark.slow
@pytest.mark.usefixtures("services")
def test_k_with_a_handler_that_outlives_max_poll_loses_and_duplicates_nothing():
    """M2's stall, under k: the stall is in a lane, the poll loop goes on, so the member is not
    evicted for it; whatever the rebalances of the run do, every credit lands once, in order."""
    config = {"events": 20, "consumers": 2, "partitions": 2, "slow_every": 15, "slow_seconds": 5,
              "max_poll_interval_ms": 3000, "session_timeout_ms": 2000, "work_ms": 5, "seed": 3, "lanes": 4,
              "group_protocol": "classic"}
    record = measure_rebalance.run_once("k", 1, config)
    assert record["stalls"] == 1, record["examples"]
    assert record["evictions"] == 0, record["examples"]
    assert (record["duplicates"], record["lost"], record["order_violations"]) == (0, 0, 0), record
