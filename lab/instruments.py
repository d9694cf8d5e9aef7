"""The lab's own workers, which a harness starts like a variant: the ceilings and the publisher.

    raw        the client reading the topic with no database and no commits: the ceiling the
               client alone reaches, timing itself (measure_throughput.py)
    db, db-d   no Kafka and no decoding: --expect credits, built in memory in batches of --batch,
               through p's statement (db) or d's handle_batch (db-d), on --connections
               connections: the database's ceiling for that work, timing itself
    publisher  publishing.publish_journaled(): --events-file to --topic at --rate, resending on
               restart whatever --journal holds no acknowledgement for

They time themselves and report one REPORT_LOG line (lab/worker.py), with their CPU per message
read from /proc around their own window (lab.cpu), as the throughput harness reads it for the
others.
"""
import json
import os
import queue
import random
import threading
import time
from pathlib import Path

import psycopg
from confluent_kafka import Consumer

import consume
from lab.settings import BROKERS, DSN

VARIANTS = {
    "raw": {"label": "raw: the client alone, no DB, no commits", "kind": "self-timed", "reads": ["batch"],
            "run": "run_raw_worker"},
    "db": {"label": "db: p's statement alone, batches built in memory", "kind": "self-timed",
           "reads": ["batch", "connections"], "needs": ["expect"], "run": "run_db_worker",
           "setup": "variants.consume_pipelined:LEDGER_WITHOUT_FOREIGN_KEY"},  # on p's schema
    "db-d": {"label": "db-d: d's statements alone, batches built in memory", "kind": "self-timed",
             "reads": ["batch", "connections"], "needs": ["expect"], "run": "run_db_worker"},
    "publisher": {"label": "publisher: a journaling publisher, resending what was never acknowledged",
                  "kind": "producer", "needs": ["events_file", "journal"], "run": "run_publisher"},
}


def self_cost(backend_pids: set[int]):
    """For a worker that times itself (raw, db): a function that takes a CPU snapshot of this
    process, these Postgres backends, the rest of Postgres and the broker (lab.cpu), or None
    where this checkout did not start the services (their pids unknown: no CPU is reported)."""
    from lab import cpu, stack

    postmaster, broker = stack.postgres_pid(), stack.kafka_pid()
    if postmaster is None or broker is None:
        return None
    return lambda: cpu.Snapshot.take([os.getpid()], postmaster, backend_pids, broker)


def cost_report(before, after, messages: int) -> dict:
    """The CPU fields of a self-timed worker's report: what the throughput harness reads from
    /proc for every other variant, here read by the worker itself around its own window."""
    from lab import cpu

    if before is None or after is None or messages < 1:
        return {"cpu_us_per_msg": None, "cpu_window_msgs": None, "consumer_peak_rss_mib": None}
    return {"cpu_us_per_msg": cpu.per_message(before, after, messages), "cpu_window_msgs": messages,
            "consumer_peak_rss_mib": cpu.peak_rss_mib(os.getpid())}


def run_raw(topic: str, group: str, stop: threading.Event, expect: int, batch: int, overrides: dict, report) -> None:
    """Read as fast as the client can, touching nothing; report once `expect` messages are in.
    The clock and the CPU window open on the first message: the snapshot taken then is not
    inside the timed gaps, and what follows it (`expect` - 1 messages) is what both divide."""
    consumer = Consumer({"bootstrap.servers": BROKERS, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, **overrides})
    snapshot = self_cost(set())
    consumer.subscribe([topic])
    stamps, seen, before = [], 0, None
    try:
        while not stop.is_set():
            for msg in consumer.consume(batch, 0.1):
                if not msg.error():
                    consume.checked_event_id(msg)  # the per-message decoding every variant does
                    consume.parse_event(msg.value())
                    seen += 1
                    if seen == 1 and snapshot:
                        before = snapshot()
                    stamps.append(time.monotonic())
            if expect and seen >= expect:
                after = snapshot() if snapshot else None
                gaps = sorted(b - a for a, b in zip(stamps, stamps[1:], strict=False))
                seconds = stamps[-1] - stamps[0]
                report({
                    "messages": len(stamps), "first_to_last_s": round(seconds, 3),
                    "msgs_per_s": round((len(stamps) - 1) / seconds, 1) if seconds else None,
                    "gap_p50_ms": round(gaps[len(gaps) // 2] * 1000, 4),
                    "gap_p99_ms": round(gaps[int(len(gaps) * 0.99)] * 1000, 4),
                    **cost_report(before, after, len(stamps) - 1)})
                expect = 0
    finally:
        consumer.close()


def run_db_ceiling(variant: str, count: int, batch: int, report, connections: int = 1, accounts: int = 100) -> None:
    """db and db-d: `count` credits, already decoded, in batches of `batch`, through p's one
    statement (db) or d's handle_batch (db-d), as fast as the database takes them, on
    `connections` connections at once (each takes the next batch when it is free); report the
    rate. The credits look like the harness's (accounts 1..`accounts`, amounts 1..100), with IDs
    of their own."""
    from variants import consume_batched, consume_pipelined  # db's and db-d's code, not raw's

    rng = random.Random(count)
    credits = [(f"db-{n}", {"account_id": rng.randint(1, accounts), "amount": rng.randint(1, 100)})
               for n in range(1, count + 1)]
    batches: queue.Queue = queue.Queue()
    for i in range(0, count, batch):
        batches.put(credits[i:i + batch])
    conns = [psycopg.connect(DSN, autocommit=True) for _ in range(connections)]
    snapshot = self_cost({conn.info.backend_pid for conn in conns})

    # /proc lists live threads only: each drain, once the queue is empty, stays alive until the
    # CPU after the last batch is read, or its CPU would leave the window with it.
    drained, read = threading.Barrier(connections + 1), threading.Event()

    def drain(conn):
        try:
            while True:
                try:
                    chunk = batches.get_nowait()
                except queue.Empty:
                    return
                if variant == "db":
                    consume_pipelined.claim_and_credit(conn, dict(chunk))
                else:
                    consume_batched.handle_batch(conn, chunk)
        finally:
            drained.wait()
            read.wait()

    threads = [threading.Thread(target=drain, args=(conn,)) for conn in conns]
    before = snapshot() if snapshot else None
    started = time.monotonic()
    for thread in threads:
        thread.start()
    drained.wait()
    seconds = time.monotonic() - started
    after = snapshot() if snapshot else None
    read.set()
    for thread in threads:
        thread.join()
    for conn in conns:
        conn.close()
    report({"messages": count, "first_to_last_s": round(seconds, 3), "msgs_per_s": round(count / seconds, 1),
            "batch": batch, "connections": connections, **cost_report(before, after, count)})


def run_raw_worker(lab) -> None:
    run_raw(lab.args.topic, lab.args.group, lab.stop, lab.args.expect, lab.args.batch, lab.overrides, lab.report)


def run_db_worker(lab) -> None:
    run_db_ceiling(lab.args.variant, lab.args.expect, lab.args.batch, lab.report, lab.args.connections)


def run_publisher(lab) -> None:
    """The producer's side, which a harness kills like a consumer."""
    from lab.publishing import publish_journaled, ready_producer

    args = lab.args
    with open(args.events_file) as lines:
        events = [tuple(json.loads(line)) for line in lines]
    # Ready before the first send: a paced publisher's first records would otherwise wait in
    # the client for a connection or a producer ID, and carry that wait as latency they never
    # had in the broker or the consumer (measure_latency saw ~0.5 s).
    producer = ready_producer(args.topic, **lab.producer_overrides)
    acked = publish_journaled(producer, args.topic, events, Path(args.journal),
                              rate=args.rate, on_first_ack=lambda: lab.first_effect(events[0][0]))
    lab.published(acked)
