"""Where the pipelined inbox's time goes (variant p): CPU seconds per part, against the wall.

Claim: with the decoding moved beside the statement, p is as fast as the one part that
is busy all the time. This runs run_pipelined in this process over --events credits and
reads, from /proc, the CPU seconds of each part while it ran: the main thread (reading,
decoding, offsets), the database thread (psycopg), librdkafka's threads, the Postgres
backend serving the statements, and the broker. A part whose CPU seconds come near the
wall is the one saturated; on 2 cores, the sum cannot pass twice the wall. Then one more
batch runs under EXPLAIN ANALYZE, so the server's own share is split by plan node.

Assumptions: the stack is up, nothing else runs on it; Linux (/proc); a scratch schema
and topic are made and dropped.

    python -m measurements.profile_p --events 100000 --batch 500 --out results/profile-p.txt
"""
import os
import sys
import threading
import time
import uuid
from pathlib import Path

import psycopg

from lab import harness, profiling, registry, results, stack
from lab.settings import ADMIN_DSN
from variants import consume_pipelined

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(stat_path: str) -> float:
    """utime + stime of a process or thread, in seconds."""
    fields = Path(stat_path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def snapshot(parts: dict) -> dict:
    return {name: sum(cpu_s(p) for p in paths() if Path(p).exists()) for name, paths in parts.items()}


def main(args) -> int:
    schema = harness.unique("prof")
    dsn = harness.create_schema(schema)
    registry.prepare("p", dsn)  # p's own schema, as every run of p has it (the ledger without its key)
    owner = harness.scoped_dsn(schema, ADMIN_DSN)
    topic = harness.create_topic(f"prof.{uuid.uuid4().hex[:8]}", 6)
    pipelines = []
    original = consume_pipelined.Pipeline.__init__

    def remember(self, *a, **k):  # the database thread and its backend, for /proc
        original(self, *a, **k)
        pipelines.append(self)

    consume_pipelined.Pipeline.__init__ = remember
    try:
        harness.produce_events(topic, harness.make_events(args.events, "p"))
        stop = threading.Event()
        runner = threading.Thread(target=consume_pipelined.run_pipelined, args=(topic, harness.unique("prof")),
                                  kwargs={"dsn": dsn, "stop": stop, "batch": args.batch}, daemon=True)
        runner.start()
        harness.wait_until(lambda: pipelines and harness.ledger_count(owner) > 0, 120, "p's first batch", 0.05)
        flow = pipelines[0]
        own = {runner.native_id, flow.thread.native_id, threading.get_native_id()}
        parts = {
            "main thread (read, decode, offsets)": lambda: [f"/proc/self/task/{runner.native_id}/stat"],
            "database thread (psycopg)": lambda: [f"/proc/self/task/{flow.thread.native_id}/stat"],
            "librdkafka threads": lambda: [f"/proc/self/task/{t}/stat" for t in os.listdir("/proc/self/task")
                                           if int(t) not in own],
            "Postgres backend (the statements)": lambda: [f"/proc/{flow.db.conn.info.backend_pid}/stat"],
            "Kafka broker": lambda: [f"/proc/{stack.kafka_pid()}/stat"],
        }
        rows, before, started = harness.ledger_count(owner), snapshot(parts), time.monotonic()
        harness.wait_until(lambda: harness.ledger_count(owner) >= args.events, 600, "every credit applied", 0.2)
        wall, after = time.monotonic() - started, snapshot(parts)
        rate = (args.events - rows) / wall
        stop.set()
        runner.join(60)
        events = {f"x-{n}": {"account_id": n % 100 + 1, "amount": 1} for n in range(args.batch)}
        ids = sorted(events)
        with psycopg.connect(owner, autocommit=True) as conn:
            plan = [row[0] for row in conn.execute(
                "EXPLAIN (ANALYZE, BUFFERS, COSTS off) " + consume_pipelined.CLAIM_AND_CREDIT,
                {"ids": ids, "accounts": [events[i]["account_id"] for i in ids], "amounts": [1] * len(ids),
                 "wanted": sorted({e["account_id"] for e in events.values()}), "consumer": "profile"}, binary=True)]
    finally:
        consume_pipelined.Pipeline.__init__ = original
        harness.drop_schema(schema)
        harness.delete_topics(topic, topic + ".dlq")
    lines = [f"# python -m measurements.profile_p --events {args.events} --batch {args.batch}: "
             f"{args.events - rows:,} credits timed in {wall:.2f} s wall, {rate:,.0f} a second", "",
             "CPU seconds while they ran, and as a share of the wall (on 2 cores the total can reach 200%):"]
    for name in parts:
        used = after[name] - before[name]
        lines.append(f"  {name:38} {used:6.2f} s  {used / wall:6.1%}")
    total = sum(after[n] - before[n] for n in parts)
    lines += [f"  {'all of them':38} {total:6.2f} s  {total / wall:6.1%}", "",
              f"One more batch of {args.batch} under EXPLAIN ANALYZE (as the owner, on an idle server):", *plan]
    text = f"# {results.provenance_line()}\n" + "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


def parse_args(argv=None):
    return profiling.parse_args("Where the pipelined inbox's time goes (variant p).", 100000, "profile-p.txt", argv)


if __name__ == "__main__":
    sys.exit(main(parse_args()))
