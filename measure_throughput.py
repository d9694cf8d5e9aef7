"""M3: what each variant's commit discipline costs in messages per second, with no kills.

Claim: the inbox's extra insert is a small price next to the per-message
synchronous offset commit that b and c both pay; auto-commit (a1, a2) is the
fastest, and M1 shows what that speed costs.

Workload: `--events` credits published up front; one worker per variant reads
them all with no handler sleep. Measure: msgs/s from the first to the last side
effect, taken from the ledger's clock_timestamp() stamps, so start-up and group
join are not counted; and the gap between successive credits, p50 and p99.
The variants are interleaved run by run, in a rotating order, within one
invocation, so their ratios (c/b is the inbox's cost) are measured side by side
on this shared, noisy machine. No fault; the checker confirms every run applied
each credit once.

Assumptions: the stack is up and nothing else measures on it (a lock enforces it).

    python measure_throughput.py --variants a1,a2,b,c --runs 5 --events 100000
"""
import argparse
import json
import statistics
import sys
import time
import uuid
from pathlib import Path

import psycopg

import cli
import harness
from measure_kill import VARIANTS, progress

RATIOS = (("c", "b"), ("b", "a1"), ("c", "a1"), ("a2", "a1"))


def timing(dsn: str) -> dict:
    with psycopg.connect(dsn) as conn:
        first, last, rows = conn.execute(
            "SELECT min(applied_at), max(applied_at), count(*) FROM ledger").fetchone()
        p50, p99 = conn.execute(
            "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY gap), "
            "percentile_cont(0.99) WITHIN GROUP (ORDER BY gap) "
            "FROM (SELECT extract(epoch FROM applied_at - lag(applied_at) OVER (ORDER BY applied_at)) * 1000 AS gap "
            "FROM ledger) gaps WHERE gap IS NOT NULL").fetchone()
    seconds = (last - first).total_seconds()
    return {"msgs_per_s": round((rows - 1) / seconds, 1) if seconds > 0 else None, "first_to_last_s": round(seconds, 2),
            "gap_p50_ms": round(p50, 3), "gap_p99_ms": round(p99, 3)}


def run_once(variant: str, run: int, events_count: int, partitions: int, log_dir: Path) -> dict:
    schema = harness.unique(f"m3_{variant}_r{run}")
    topic = f"m3.{variant}.r{run}.{uuid.uuid4().hex[:8]}"
    group = f"m3-{variant}-{uuid.uuid4().hex[:8]}"
    dsn = harness.create_schema(schema)
    harness.create_topic(topic, partitions)
    started = time.monotonic()
    try:
        events = harness.make_events(events_count, prefix=f"r{run}", seed=run)
        harness.produce_events(topic, events)
        worker = harness.Worker(variant, topic, group, dsn, log_dir / f"throughput-{variant}-r{run}.log")
        try:
            # Generous: 20 msgs/s would be a tenth of the slowest variant seen here.
            harness.wait_until(lambda: harness.ledger_count(dsn) >= events_count, max(120.0, events_count / 20),
                               f"{variant} to apply {events_count} credits", interval_s=1.0)
        finally:
            worker.stop()
        applied = harness.effects(dsn)
        verdict = harness.check(dict(events), applied["ledger"], applied["balances"])
        record = {"variant": variant, "run": run, "events": events_count, **timing(dsn),
                  "duplicates": verdict["duplicates"], "lost": verdict["lost"],
                  "balances_exact": verdict["balances_exact"], "wall_s": round(time.monotonic() - started, 1)}
    finally:
        harness.drop_schema(schema)
        harness.delete_topics(topic, topic + ".dlq")
    return record


def summarise(runs: list[dict]) -> dict:
    summary = {}
    for variant in VARIANTS:
        rates = [r["msgs_per_s"] for r in runs if r["variant"] == variant]
        if rates:
            summary[variant] = {"runs": len(rates), "msgs_per_s": harness.stats(rates)}
    ratios = {}
    for top, bottom in RATIOS:
        # Paired within a run: both measured minutes apart under the same machine load.
        paired = [a["msgs_per_s"] / b["msgs_per_s"] for a in runs for b in runs
                  if a["variant"] == top and b["variant"] == bottom and a["run"] == b["run"]]
        if paired:
            ratios[f"{top}/{bottom}"] = {"median": round(statistics.median(paired), 3),
                                         "min": round(min(paired), 3), "max": round(max(paired), 3)}
    return {"variants": summary, "ratios": ratios}


def table(summary: dict) -> str:
    lines = ["variant  runs  msgs/s median (min-max)", "-------  ----  ------------------------"]
    for variant, s in summary["variants"].items():
        m = s["msgs_per_s"]
        lines.append(f"{variant:<7}  {s['runs']:>4}  {m['median']:>7.1f} ({m['min']:.1f}-{m['max']:.1f})")
    for name, r in summary["ratios"].items():
        lines.append(f"{name} paired by run: median {r['median']:.3f} ({r['min']:.3f}-{r['max']:.3f})")
    return "\n".join(lines)


def main(args) -> int:
    config = {"variants": args.variants, "runs": args.runs, "events": args.events, "partitions": args.partitions,
              "work_ms": 0, "kills": 0, "order": "interleaved by run, rotating"}
    results = harness.ResultsFile("measure_throughput", args.out, config, args.force)
    log_dir = harness.RESULTS / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    with harness.measurement_lock("measure_throughput"):
        for run in range(1, args.runs + 1):
            shift = (run - 1) % len(args.variants)
            for variant in args.variants[shift:] + args.variants[:shift]:
                if results.done(variant, run):
                    continue
                progress(f"{variant} run {run} of {args.runs}: {args.events} events")
                record = run_once(variant, run, args.events, args.partitions, log_dir)
                results.add(record, summarise)
                print(f"{variant} run {run}: {record['msgs_per_s']} msgs/s, gap p50 {record['gap_p50_ms']} ms, "
                      f"p99 {record['gap_p99_ms']} ms, {record['duplicates']} duplicates, {record['lost']} lost")
                print(json.dumps(record), flush=True)
    print()
    print(table(results.document["summary"]))
    print(f"\nwritten to {results.path}")
    return 0


def variant_list(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown variant(s) {','.join(unknown) or text!r}; "
                                         f"choose from {','.join(VARIANTS)}")
    return names


def parse_args(argv=None):
    parser = cli.Parser(description="M3: msgs/s per variant, no kills, measured side by side.")
    parser.add_argument("--variants", type=variant_list, default=list(VARIANTS))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--events", type=int, default=100000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--out", default=str(harness.RESULTS / "throughput.json"))
    parser.add_argument("--force", action="store_true", help="overwrite an --out file with another config")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.events < 2 or args.partitions < 1:
        parser.error("need --runs >= 1, --events >= 2 and --partitions >= 1")
    return args


if __name__ == "__main__":
    sys.exit(main(parse_args()))
