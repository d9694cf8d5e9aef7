"""Helpers the Kafka tests share: a consumer in a thread, bounded waits, raw sends and reads."""
import contextlib
import json
import threading
import uuid

import psycopg
from confluent_kafka import Consumer

import consume
from lab import harness
from publish import make_producer
from variants import consume_batched

DRAIN_S = 60

# Each kind of poison a topic can hold, as raw as a broken producer sends it, with the
# reason its dead letter must give (issue #28's battery).
POISON = {
    "no event_id": ((b"1", b'{"account_id": 1, "amount": 5}', []), "no event_id header"),
    "empty event_id": ((b"1", b'{"account_id": 1, "amount": 5}', [("event_id", b"")]), "no event_id header"),
    "not JSON": ((b"1", b"credit 5 to 1", [("event_id", b"p-1")]), "value is not JSON"),
    "not an object": ((b"1", b"[1, 5]", [("event_id", b"p-1")]), "not an object"),
    "no account_id": ((b"1", b'{"amount": 5}', [("event_id", b"p-1")]), "event has no account_id"),
    "no amount": ((b"1", b'{"account_id": 1}', [("event_id", b"p-1")]), "event has no amount"),
    "amount a string": ((b"1", b'{"account_id": 1, "amount": "5"}', [("event_id", b"p-1")]),
                        "amount must be an integer, got str"),
    "account_id a float": ((b"1", b'{"account_id": 1.5, "amount": 5}', [("event_id", b"p-1")]),
                           "account_id must be an integer, got float"),
    "unknown account": ((b"9", b'{"account_id": 9999, "amount": 5}', [("event_id", b"p-1")]),
                        "unknown account 9999"),
    # issue #28's hostile inputs: each parked once, with its reason, and nothing stops
    "event_id not UTF-8": ((b"1", b'{"account_id": 1, "amount": 5}', [("event_id", b"\xff\xfe")]),
                           "no event_id header"),
    "event_id with a NUL": ((b"1", b'{"account_id": 1, "amount": 5}', [("event_id", b"p\x00-1")]), "NUL byte"),
    "event_id too long": ((b"1", b'{"account_id": 1, "amount": 5}', [("event_id", b"x" * 600)]), "longer than 512"),
    "two event_id headers": ((b"1", b'{"account_id": 1, "amount": 5}', [("event_id", b"p-a"), ("event_id", b"p-b")]),
                             "more than one event_id header"),
    "empty value": ((b"1", b"", [("event_id", b"p-1")]), "value is not JSON"),
    "tombstone": ((b"1", None, [("event_id", b"p-1")]), "value is empty"),
    "value not UTF-8": ((b"1", b"\xff\xfe{}", [("event_id", b"p-1")]), "value is not JSON"),
    "nested 10,000 deep": ((b"1", b"[" * 10_000 + b"]" * 10_000, [("event_id", b"p-1")]), "nested too deep"),
    "amount a float": ((b"1", b'{"account_id": 1, "amount": 5.0}', [("event_id", b"p-1")]),
                       "amount must be an integer, got float"),
    "amount a bool": ((b"1", b'{"account_id": 1, "amount": true}', [("event_id", b"p-1")]),
                      "amount must be an integer, got bool"),
    "amount 0": ((b"1", b'{"account_id": 1, "amount": 0}', [("event_id", b"p-1")]), "amount 0 is outside"),
    "amount negative": ((b"1", b'{"account_id": 1, "amount": -5}', [("event_id", b"p-1")]), "is outside"),
    "amount 2^63": ((b"1", b'{"account_id": 1, "amount": 9223372036854775808}', [("event_id", b"p-1")]),
                    "is outside"),
    "a credit that overflows its balance": ((b"2", b'{"account_id": 2, "amount": 100}', [("event_id", b"p-big")]),
                                            "the database refused it: bigint out of range"),
}
FULL_ACCOUNT = 2  # its balance sits 10 below bigint's maximum, so a credit of 100 overflows it


@contextlib.contextmanager
def consuming(topic, group, dsn, run=None, **options):
    """consume.run (or another variant's loop, `run`) in a thread, stopped and closed on exit."""
    stop, errors = threading.Event(), []

    def target():
        try:
            (run or consume.run)(topic, group, dsn=dsn, stop=stop, **options)
        except Exception as e:  # re-raised in the test below
            errors.append(e)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(30)
    assert not errors, errors


def drained(group, topic):
    harness.wait_until(lambda: harness.lag(group, topic) == 0, DRAIN_S, f"group {group} to commit all of {topic}",
                       interval_s=0.2)


def send(topic, messages):
    """messages: (key, value bytes, headers) as raw as a broken producer might send them."""
    producer = make_producer()
    for key, value, headers in messages:
        producer.produce(topic, key=key, value=value, headers=headers)
    assert producer.flush(30) == 0


def read_all(topic, expected, timeout_s=30):
    reader = Consumer({"bootstrap.servers": consume.BROKERS, "group.id": f"reader-{uuid.uuid4().hex[:8]}",
                       "auto.offset.reset": "earliest", "enable.auto.commit": False})
    reader.subscribe([topic])
    got = []
    try:
        harness.wait_until(lambda: got.extend(m for m in reader.consume(10, 0.5) if not m.error()) or
                           len(got) >= expected, timeout_s, f"{expected} messages on {topic}", interval_s=0)
    finally:
        reader.close()
    return got


def second_waits_for_first(dsn, monitor, first, second):
    """Two overlapping batches on two connections. first(conn, hold) runs the first and calls
    hold() while its claims are held; second(conn) starts only then, must be seen waiting on a
    lock (pg_stat_activity, read on `monitor`), and the first is released only after that.
    Returns (first's result, second's result); an error in either (a deadlock) fails the test."""
    held, release = threading.Event(), threading.Event()
    results, errors = {}, []

    def hold():
        held.set()
        assert release.wait(30)

    def run(name, work, conn):
        try:
            results[name] = work(conn)
        except Exception as e:  # a deadlock would land here
            errors.append(e)

    first_conn = psycopg.connect(dsn, autocommit=True)
    second_conn = psycopg.connect(dsn, autocommit=True)
    try:
        a = threading.Thread(target=run, args=("first", lambda c: first(c, hold), first_conn))
        a.start()
        assert held.wait(30)
        b = threading.Thread(target=run, args=("second", second, second_conn))
        b.start()
        harness.wait_until(lambda: monitor.execute("SELECT wait_event_type = 'Lock' FROM pg_stat_activity "
                                                   "WHERE pid = %s", (second_conn.info.backend_pid,)).fetchone()[0]
                           is True, 30, "the second batch to wait on a shared ID", interval_s=0.02)
        release.set()
        a.join(30)
        b.join(30)
    finally:
        release.set()
        first_conn.close()
        second_conn.close()
    assert not errors, errors
    return results["first"], results["second"]


# A batch with poison in it: good credits g-1 (twice) and g-2, a value that is not JSON (p-1)
# and a credit for an account that does not exist (p-2).
POISONED_BATCH = [
    (b"1", b'{"account_id": 1, "amount": 100}', [("event_id", b"g-1")]),
    (b"1", b"not json", [("event_id", b"p-1")]),
    (b"9", b'{"account_id": 9999, "amount": 5}', [("event_id", b"p-2")]),
    (b"1", b'{"account_id": 1, "amount": 100}', [("event_id", b"g-2")]),
    (b"1", b'{"account_id": 1, "amount": 100}', [("event_id", b"g-1")]),
]


# Hostile to a batch: a bad copy of an ID beside a good one (g-3: unknown account, then a real
# one), and a credit that overflows a balance (p-3: account 2 sits 10 below bigint's maximum).
HOSTILE_BATCH = [
    (b"1", b'{"account_id": 1, "amount": 100}', [("event_id", b"g-1")]),
    (b"9", b'{"account_id": 9999, "amount": 5}', [("event_id", b"g-3")]),
    (b"2", b'{"account_id": 2, "amount": 100}', [("event_id", b"p-3")]),
    (b"1", b'{"account_id": 1, "amount": 7}', [("event_id", b"g-3")]),
    (b"1", b"[" * 10_000 + b"]" * 10_000, [("event_id", b"p-4")]),
    (b"1", b'{"account_id": 1, "amount": 100}', [("event_id", b"g-2")]),
]
FULL_BALANCE = 2**63 - 11


def hostile_batch_is_handled(run, topic, group, dsn, conn, **options):
    """A batching variant meets HOSTILE_BATCH: each bad copy is parked alone, with its reason;
    the good copies, g-3's among them, are applied once; the full balance is untouched."""
    conn.execute("UPDATE accounts SET balance = %s WHERE id = 2", (FULL_BALANCE,))
    send(topic, HOSTILE_BATCH)
    run_until_drained(run, topic, group, dsn, **options)
    parked = {dict(m.headers())["event_id"].decode(): dict(m.headers())["dlq_reason"].decode()
              for m in read_all(topic + ".dlq", 3)}
    assert set(parked) == {"g-3", "p-3", "p-4"}, parked
    assert parked["g-3"] == "unknown account 9999" and "bigint out of range" in parked["p-3"]
    assert parked["p-4"] == "value is JSON nested too deep to decode"
    rows = conn.execute("SELECT event_id, count(*), sum(amount) FROM ledger GROUP BY event_id").fetchall()
    assert sorted(rows) == [("g-1", 1, 100), ("g-2", 1, 100), ("g-3", 1, 7)]
    assert conn.execute("SELECT balance FROM accounts WHERE id = 2").fetchone()[0] == FULL_BALANCE


def holding_credit(hold):
    """d's apply_batch that calls hold() (its claims held) before it credits."""
    def apply_batch(conn, batch):
        hold()
        consume_batched.credit_accounts(conn, batch)
    return apply_batch


def run_threads(threads, timeout_s: float = 120.0) -> None:
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout_s)


def run_until_drained(run, topic, group, dsn, **options):
    """run(topic, group, dsn=..., stop=..., **options) in a thread until the group has committed
    all of `topic`; then stopped. A consumer that died fails its test with its own error."""
    harness.drained_in_thread(lambda stop: run(topic, group, dsn=dsn, stop=stop, **options), group, topic, DRAIN_S)


def credit(event_id, account=1, amount=100):
    return (b"1", json.dumps({"account_id": account, "amount": amount}).encode(), [("event_id", event_id.encode())])


def worker_run(variant, log_path):
    """`consuming`'s `run` for a variant as the harness runs it (in its own venv, if it has one):
    its worker process, stopped (SIGTERM) when the test is done with it; one that exits by itself
    raises."""
    def run(topic, group, dsn, stop):
        worker = harness.Worker(variant, topic, group, dsn, log_path)
        try:
            while not stop.wait(0.2):
                if worker.proc.poll() is not None:
                    raise RuntimeError(f"{variant} exited ({worker.proc.returncode}): {worker.log_tail()}")
        finally:
            worker.stop()
    return run


def every_kind_of_poison_is_parked(topic, group, dsn, conn, run=None, inbox=True, **options):
    # One consumer through every kind in a row (one partition: key b"1" and b"9" alike), then
    # a good credit: each poison is parked with its reason, source, key, value and headers.
    conn.execute("UPDATE accounts SET balance = 9223372036854775797 WHERE id = %s", (FULL_ACCOUNT,))
    send(topic, [poison for poison, _ in POISON.values()] + [credit("good-1")])
    with consuming(topic, group, dsn, run, **options):
        drained(group, topic)
    parked = {int(dict(m.headers())["dlq_source"].decode().rsplit("/", 1)[1]): m
              for m in read_all(topic + ".dlq", len(POISON))}
    assert sorted(parked) == list(range(len(POISON)))
    for offset, (kind, (poison, reason)) in enumerate(POISON.items()):
        message, headers = parked[offset], dict(parked[offset].headers())
        assert reason in headers["dlq_reason"].decode(), kind
        assert headers["dlq_source"] == f"{topic}/0/{offset}".encode(), kind
        assert (message.key(), message.value()) == poison[:2], kind
        assert [h for h in message.headers() if not h[0].startswith("dlq_")] == poison[2], kind
    # The good message after them was applied; the poison left no trace in the database.
    assert conn.execute("SELECT event_id, amount FROM ledger").fetchall() == [("good-1", 100)]
    assert conn.execute("SELECT message_id FROM processed_messages").fetchall() == ([("good-1",)] if inbox else [])
    assert conn.execute("SELECT balance FROM accounts WHERE id = %s", (FULL_ACCOUNT,)).fetchone()[0] == 2**63 - 11


class Positioned:
    """A consumed message as a window or a batch reads it: its place, its key, an event ID
    made from its place and a one-unit credit (for the pure tests of the bookkeeping;
    everything else reads real messages)."""

    def __init__(self, partition=0, offset=0, key=b"1"):
        self._partition, self._offset, self._key = partition, offset, key

    def topic(self):
        return "t"

    def partition(self):
        return self._partition

    def offset(self):
        return self._offset

    def key(self):
        return self._key

    def headers(self):
        return [("event_id", f"e-{self._partition}-{self._offset}".encode())]

    def value(self):
        return b'{"account_id": 1, "amount": 1}'
