"""Variant k, per-key parallel handlers: the watermark (pure), then the real services."""
import queue
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


class FakeMessage:
    def __init__(self, key, offset, partition=0):
        self._key, self._offset, self._partition = key, offset, partition

    def key(self):
        return self._key

    def topic(self):
        return "t"

    def partition(self):
        return self._partition

    def offset(self):
        return self._offset


class FakeLane:
    def __init__(self):
        self.load, self.inbox = 0, queue.Queue()


class FakeConsumer:
    def pause(self, partitions):
        pass

    def resume(self, partitions):
        pass


def test_a_key_in_flight_keeps_its_lane_and_a_new_key_takes_the_least_loaded():
    """No services: the dispatcher alone. One key's messages in flight stay on one lane (their
    order); a key with none in flight goes where the least work is, wherever its hash would."""
    lanes, finished = [FakeLane(), FakeLane(), FakeLane()], queue.Queue()
    parallel = consume_parallel.Parallel(FakeConsumer(), lanes, finished, window=100)
    for offset, key in enumerate([b"a", b"a", b"b", b"c", b"a", b"d"]):
        parallel.dispatch(FakeMessage(key, offset))
    lane_of = {msg.key(): i for i, lane in enumerate(lanes) for _, msg in list(lane.inbox.queue)}
    assert [msg.key() for _, msg in list(lanes[lane_of[b"a"]].inbox.queue)] == [b"a", b"a", b"a"]
    assert len({lane_of[b"a"], lane_of[b"b"], lane_of[b"c"]}) == 3 and lane_of[b"d"] != lane_of[b"a"]
    assert [lane.load for lane in lanes] == [3, 2, 1]  # a a a | b d | c
    # every "a" finished: the key leaves the map, and may go to the least loaded lane next
    window = parallel.windows[("t", 0)]
    for _, msg in list(lanes[lane_of[b"a"]].inbox.queue):
        finished.put(("done", window, msg, "applied"))
    parallel.collect()
    assert b"a" not in parallel.keys and set(parallel.keys) == {b"b", b"c", b"d"}
    assert window.watermark() == 2  # offsets 0 and 1 ("a", "a") done; 2 ("b") is not


def run_in_thread(topic, group, dsn, **options):
    stop = threading.Event()
    thread = threading.Thread(target=consume_parallel.run_parallel, args=(topic, group),
                              kwargs={"dsn": dsn, "stop": stop, **options}, daemon=True)
    thread.start()
    return stop, thread


# A window of 4 pauses and resumes its partitions all the time (slowly: 120 credits, not 900).
@pytest.mark.parametrize("lanes, window, count", [(8, 500, 900), (3, 4, 120)], ids=["wide", "window-of-4"])
def test_every_event_once_and_each_account_in_order(lanes, window, count, group, dsn, conn, kafka):
    topic = harness.create_topic(f"test.k.{harness.unique('t')}", partitions=3)
    events = harness.make_events(count, "k", accounts=12, seed=3)
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


def test_k_reads_every_partition_after_a_rebalance_that_came_while_it_was_paused(group, dsn, conn, kafka):
    """A's handlers block until its windows are full and its partitions paused; B joins the group;
    then A's handlers go on. Every partition, whoever holds it now, must be read to the end. (An
    M2 run of k once stopped reading with messages left; this is the scenario suspected, though
    the code before the resume-on-assign passes it too: the cause of that stop is not proven.)"""
    topic = harness.create_topic(f"test.k.{harness.unique('t')}", partitions=4)
    events = harness.make_events(200, "p", accounts=8, seed=9)
    harness.produce_events(topic, events)
    release, started = threading.Event(), threading.Event()

    def held_credit(c, event_id, event):
        started.set()
        assert release.wait(60)
        consume_parallel.credit_account(c, event_id, event)

    session = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
    stop_a, a = run_in_thread(topic, group, dsn, lanes=2, window=3, apply=held_credit, **session)
    stop_b = b = None
    try:
        assert started.wait(60)
        harness.wait_until(lambda: harness.lag(group, topic) == 200, 30, "A to have committed nothing")
        # A's windows (3 each) filled, and paused, within milliseconds; B's start and join take seconds.
        stop_b, b = run_in_thread(topic, group, dsn, lanes=2, **session)
        release.set()
        drained(group, topic)
    finally:
        release.set()
        for stop in (stop_a, stop_b):
            if stop is not None:
                stop.set()
        for thread in (a, b):
            if thread is not None:
                thread.join(60)
        harness.delete_topics(topic, topic + ".dlq")
    rows = conn.execute("SELECT event_id, account_id, amount FROM ledger ORDER BY id").fetchall()
    assert (len(rows), len({r[0] for r in rows})) == (200, 200)
