"""M4b: a replay from further back than the inbox remembers.

Claim (the post's closing bet): retention is where a team slips first, and nothing fails
until someone replays a topic older than what the inbox remembers; then every forgotten
event is applied again. The alarm (`python -m lab.retention --check AGE`) fires before
that replay whenever the window is shorter than the replay reaches back. The lean v7
inbox cannot be fooled the same way: an ID from a day it has dropped is refused as
poison (dead-lettered), not applied.

Workload: `--old` credits consumed "`--age-days` ago" and `--recent` credits consumed
today, on one topic. Time passes honestly, without waiting: the schema's owner moves the
old credits' inbox rows back by the age (`processed_at`, which the consumer's role may
not touch), where that many days of waiting would have left them. For v7 the producer's
clock is in the ID itself: the old credits carry UUIDv7 IDs made at that time.
Retention: retention.sql's batched delete as the retention role (lab.retention.forget),
keeping the window under test: shorter than the age, equal to it, or longer; for v7,
inbox_v7_drop_before drops the days older than the window.
Alarm: lab.retention.check with the age as the longest redelivery window, after
retention, before the replay (v7: the oldest day it still holds against the age).
Replay: the group's offsets set back to the start of every partition, as
`kafka-consumer-groups --reset-offsets --to-earliest` would (the group is empty then),
and one worker drains the topic again.
Checker: ledger rows per event ID (checker.check), and the dead letters.

    python -m measurements.measure_retention --variant c --runs 1
    python -m measurements.measure_retention --variant all --runs 5
"""
import calendar
import functools
import random
import sys
import time
import uuid
from datetime import timedelta

import psycopg
from confluent_kafka import Consumer, TopicPartition

import consume
from lab import cli, harness, results
from lab import retention as inbox_retention
from lab.settings import BROKERS, RETENTION_DSN
from variants import inbox_v7

VARIANTS = ("c", "d", "p", "v7")  # v7: consume.py's loop with handle_once_v7 and the lean inbox
WINDOWS = ("shorter", "equal", "longer")


def window_days(name: str, age_days: int) -> int:
    return {"shorter": age_days - 1, "equal": age_days, "longer": 2 * age_days}[name]


def v7_id_at(when_s: float, rng: random.Random) -> str:
    """A UUIDv7 made at `when_s` (the producer's clock): 48 bits of milliseconds, then random."""
    value = (int(when_s * 1000) << 80) | (rng.getrandbits(80) & ((1 << 80) - 1))
    value = (value & ~(0xF << 76)) | (0x7 << 76)  # version 7
    value = (value & ~(0x3 << 62)) | (0x2 << 62)  # RFC 4122 variant
    return str(uuid.UUID(int=value))


def credits(prefix: str, count: int, seed: int, v7_at: float | None) -> list[tuple[str, dict]]:
    events = harness.make_events(count, prefix=prefix, seed=seed)
    if v7_at is None:
        return events
    rng = random.Random(seed)
    return [(v7_id_at(v7_at + n / 1000, rng), event) for n, (_, event) in enumerate(events)]


def drain(variant: str, space, log_name: str, v7_table: str) -> dict:
    """One consumer reads the topic to its end (the group's lag 0, the ledger still); its counts."""
    if variant != "v7":
        return harness.recover(variant, space, deadline_s=300.0, log_path=harness.log_dir() / log_name)
    harness.drained_in_thread(lambda stop: consume.run(space.topic, space.group, dsn=space.dsn, stop=stop, handle=(
        functools.partial(inbox_v7.handle_once_v7, inbox=v7_table))), space.group, space.topic, 300, interval_s=0.5)
    return {"counts": {}}


def rewind(group: str, topic: str, partitions: int) -> None:
    """Every partition's committed offset back to 0: what --reset-offsets --to-earliest does."""
    resetter = Consumer({"bootstrap.servers": BROKERS, "group.id": group, "enable.auto.commit": False})
    try:
        resetter.commit(offsets=[TopicPartition(topic, p, 0) for p in range(partitions)], asynchronous=False)
    finally:
        resetter.close()


def run_once(variant: str, window: str, run: int, config: dict) -> dict:
    age, keep = config["age_days"], window_days(window, config["age_days"])
    seed = config["seed"] + run
    started = time.monotonic()
    old_time = time.time() - age * 86400
    old = credits(f"r{run}-old", config["old"], seed, old_time if variant == "v7" else None)
    recent = credits(f"r{run}-new", config["recent"], seed + 1000, time.time() if variant == "v7" else None)
    v7_table = inbox_v7.DEFAULT_INBOX
    with harness.run_space("m4b", f"{variant}-{window}-r{run}", config["partitions"]) as space:
        with psycopg.connect(space.admin, autocommit=True) as owner:
            if variant == "v7":
                inbox_v7.install(owner, v7_table)
                inbox_v7.ensure_days(owner, v7_table, days_back=age + 1, days_ahead=1)
            # the old credits, consumed; then "age" days pass for what the inbox remembers of them
            harness.produce_events(space.topic, old)
            drain(variant, space, f"retention-{variant}-{window}-r{run}-old.log", v7_table)
            if variant != "v7":
                owner.execute("UPDATE processed_messages SET processed_at = processed_at - make_interval(days => %s)",
                              (age,))
            # today's credits, consumed
            harness.produce_events(space.topic, recent)
            drain(variant, space, f"retention-{variant}-{window}-r{run}-new.log", v7_table)
            # retention, then the alarm, as cron and the pager would run them
            if variant == "v7":
                dropped = owner.execute("SELECT inbox_v7_drop_before(%s, now() - make_interval(days => %s))",
                                        (v7_table, keep)).fetchone()[0]
                oldest = owner.execute(
                    # the partitions are named by UTC day (inbox_v7.sql)
                    "SELECT min(split_part(c.relname, '_', -1)) FROM pg_inherits i JOIN pg_class c "
                    "ON c.oid = i.inhrelid WHERE i.inhparent = %s::regclass", (v7_table,)).fetchone()[0]
                reach = (time.time() - calendar.timegm(time.strptime(oldest, "%Y%m%d"))) / 86400 if oldest else 0
                forgotten = {"dropped_days": dropped}
                alarm = reach < age
                alarm_line = (f"{'ALARM' if alarm else 'ok'}: the v7 inbox's oldest day is {reach:.1f} days back, "
                              f"the replay {age}")
            else:
                with psycopg.connect(harness.scoped_dsn(space.schema, RETENTION_DSN), autocommit=True) as forgetter:
                    forgotten = {"forgotten_ids": sum(inbox_retention.forget(forgetter, timedelta(days=keep),
                                                                             config["batch"]))}
                    ok, alarm_line = inbox_retention.check(forgetter, timedelta(days=age))
                alarm = not ok
        # the replay: an operator resets the group to the earliest offset, and the consumer reads it all again
        rewind(space.group, space.topic, config["partitions"])
        replayed = drain(variant, space, f"retention-{variant}-{window}-r{run}-replay.log", v7_table)
        verdict = harness.verdict_of(old + recent, space.admin)
        parked = harness.record_ids(space.topic + ".dlq", "read_committed") if variant == "v7" else []
    return {"variant": variant, "window": window, "run": run, "age_days": age, "window_days": keep,
            "events": len(old) + len(recent), **forgotten, "alarm": alarm, "alarm_line": alarm_line,
            **verdict, "dead_lettered": len(parked),
            "skipped": replayed["counts"].get("skipped", 0) if variant != "v7" else None,  # v7 runs in-process
            "wall_s": round(time.monotonic() - started, 1)}


def summarise(runs: list[dict]) -> dict:
    return results.summarise_runs(runs, [f"{v} {w}" for v in VARIANTS for w in WINDOWS],
                                  key=lambda r: f"{r['variant']} {r['window']}",
                                  totals=("duplicates", "lost", "dead_lettered", "alarm"),
                                  spreads=("duplicates", "wall_s"))


def table(summary: dict) -> str:
    return results.text_table(
        ["variant", "window", "runs", "duplicates", "lost", "dead-lettered", "alarm before the replay"],
        [[*key.split(" "), s["runs"], s["totals"]["duplicates"], s["totals"]["lost"], s["totals"]["dead_lettered"],
          f"{s['totals']['alarm']} of {s['runs']}"] for key, s in summary.items()], note="totals over all runs")


verdict_line = cli.verdict("{variant}, window {window_days} d against a replay from {age_days} d back, run {run}: "
                           "{duplicates} duplicates, {lost} lost, {dead_lettered} dead-lettered; {alarm_line}")


def parse_args(argv=None):
    parser = cli.measurement("M4b: replay a topic from further back than the inbox remembers.",
                             None, events=None, work_ms=None)
    parser.add_argument("--variant", required=True, type=cli.names_of((*VARIANTS, "all")))
    parser.add_argument("--old", type=int, default=2000, help="credits consumed --age-days ago")
    parser.add_argument("--recent", type=int, default=500, help="credits consumed today")
    parser.add_argument("--age-days", type=int, default=15, help="how far back the replay reaches")
    parser.add_argument("--batch", type=int, default=10000, help="rows per retention DELETE")
    args = parser.parse_args(argv)
    results.reader_paths(args, "retention.json")  # a reader's own file, unless --out names one
    cli.at_least(parser, args, 1, "runs", "old", "recent", "partitions", "batch")
    cli.at_least(parser, args, 2, "age_days")
    return args


def main(args) -> int:
    variants = VARIANTS if "all" in args.variant else args.variant
    config = {"runs": args.runs, "old": args.old, "recent": args.recent, "age_days": args.age_days,
              "partitions": args.partitions, "batch": args.batch, "seed": args.seed}
    results.drive("measure_retention", args.out, config, [{"variant": v, "window": w} for v in variants
                                                           for w in WINDOWS], run_once, summarise, table,
                  verdict_line, args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main(parse_args()))
