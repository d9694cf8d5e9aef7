"""What batching costs in latency: from a credit's publication to its ledger row, at a fixed
offered load, per variant.

Claim: at a load every variant keeps up with, c's latency is one transaction and one
offset commit; d and p trade latency for throughput, since a credit waits for the rest of
its batch to be read and for the batch's statement; at a load c cannot sustain, its
latency grows for as long as the load lasts, while d's and p's stay flat.

Workload: one warm-up credit in each partition, all applied before anything is timed: the
group has joined, the connections are open, and the consumer holds a position in every
partition; then a publisher (worker.py --variant publisher, which waits for its producer
ID before its first send: lab.publishing.ready_producer) sends `--seconds` worth of credits at
each `--rate`, paced, while one consumer of the variant reads them.
Measure: per credit, the ledger row's clock_timestamp() (written inside its transaction, a
moment before the commit) minus the record's CreateTime (stamped by the producer client
when the publisher handed it the record); p50, p99 and the largest, in ms. Both clocks are
this machine's. The variants and rates are interleaved run by run in one invocation.
Checker: every credit applied once (checker.check, through the harness's verdict).

Near saturation (--load 0.5,0.8,0.95, in place of --rates): each run first measures the
variant's capacity, in the same topic, with the same consumer, right before: a backlog of
--capacity-events credits sent at once, applied at the consumer's own pace (msgs/s from its
first to its last ledger row); once it has drained, the publisher offers that fraction of it
for --seconds. The capacity is M3's kind: the backlog is in the topic before the consumer that
drains it starts. The paced publisher then shares the machine with the consumer, which the
backlog's producer did not: so 95% of that capacity may already be more than the consumer
takes with a publisher beside it.

Assumptions: the stack is up and nothing else measures on it (a lock enforces it).

    python -m measurements.measure_latency --variants c,d,p --rates 200,500,5000 --runs 5
    python -m measurements.measure_latency --variants c,d,p --load 0.5,0.8,0.95 --capacity-events-of c=3000 \
        --runs 5 --out results/latency-saturation.json
"""
import argparse
import json
import sys
import time

import psycopg

from lab import cli, harness, results

VARIANTS = ("b", "c", "d", "k", "o", "p")


def percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def capacity(space, consumer, start_consumer, variant: str, run: int, config: dict):
    """The variant's msgs/s on a backlog already in the topic when its consumer starts (first to
    last ledger row), as M3 measures it: the warmed-up consumer stops, the backlog is sent, a
    new one drains it. Then VACUUM ANALYZE, so that autovacuum, due after that many inserts,
    does not land in the paced phase. Returns (msgs/s, the backlog's events, the new consumer)."""
    count = config["capacity_events_of"].get(variant, config["capacity_events"])
    backlog = harness.make_events(count, prefix=f"r{run}-cap", seed=config["seed"] + 1000 + run)
    consumer.stop()
    harness.produce_events(space.topic, backlog)
    consumer = start_consumer("drain")
    try:
        harness.wait_until(lambda: harness.ledger_count(space.admin) >= config["partitions"] + count,
                           max(300.0, count / 50), f"{variant} to drain a backlog of {count} credits")
    except BaseException:
        consumer.stop()  # run_once's own finally knows only the consumer it started
        raise
    with psycopg.connect(space.admin, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE processed_messages, ledger, accounts")
    mine = {eid for eid, _ in backlog}
    times = [t for eid, t in harness.credit_times(space.admin) if eid in mine]
    return (len(times) - 1) / (times[-1] - times[0]), backlog, consumer


def run_once(variant: str, run: int, config: dict, rate: float | None = None, load: float | None = None) -> dict:
    """One consumer, warmed up, then credits offered at `rate` a second, or at `load` times the
    capacity it showed on a backlog just before."""
    name = f"{variant}-{rate:g}-r{run}" if load is None else f"{variant}-load{load:g}-r{run}"
    started = time.monotonic()
    partitions = config["partitions"]
    if load is None:  # one list, as the fixed-rate runs have always made it: the first few warm up
        every = harness.make_events(int(rate * config["seconds"]) + partitions, prefix=f"r{run}",
                                    seed=config["seed"] + run)
        warm, events = every[:partitions], every[partitions:]
    else:
        warm = harness.make_events(partitions, prefix=f"r{run}-warm", seed=config["seed"] + run)
    log_dir = harness.log_dir()
    events_file, journal = log_dir / f"latency-{name}.events", log_dir / f"latency-{name}.acked"
    journal.unlink(missing_ok=True)
    with harness.run_space("latency", name, config["partitions"]) as space:
        def start_consumer(life: str = "") -> harness.Worker:
            return harness.Worker(variant, space.topic, space.group, space.dsn,
                                  log_dir / f"latency-{name}{'-' + life if life else ''}.log",
                                  harness.worker_args(variant, config))

        consumer = start_consumer()
        publisher, backlog, measured = None, [], None
        try:
            harness.produce_events(space.topic, warm, partitions=range(partitions))
            harness.wait_until(lambda: harness.ledger_count(space.admin) >= partitions, 120,
                               f"{variant} to apply its {partitions} warm-up credits")
            if load is not None:
                measured, backlog, consumer = capacity(space, consumer, start_consumer, variant, run, config)
                rate = load * measured
                events = harness.make_events(int(rate * config["seconds"]), prefix=f"r{run}", seed=config["seed"] + run)
            count = len(events)
            events_file.write_text("".join(json.dumps(pair) + "\n" for pair in events))
            before = harness.ledger_count(space.admin)
            publisher = harness.Worker("publisher", space.topic, space.group, space.dsn,
                                       log_dir / f"latency-{name}-publisher.log",
                                       ("--events-file", events_file, "--journal", journal, "--rate", round(rate, 1)))
            # Generous: a variant that cannot keep up drains its backlog at its own pace.
            harness.wait_until(lambda: harness.ledger_count(space.admin) >= count + before, max(300.0, count / 50),
                               f"{variant} to apply {count} credits sent at {rate:g} a second", interval_s=0.5)
        finally:
            for worker in (publisher, consumer):
                if worker is not None:
                    worker.stop()
        created = dict(harness.record_times(space.topic))
        applied = dict(harness.credit_times(space.admin))
        verdict = harness.verdict_of(warm + backlog + events, space.admin)
    latencies = sorted((applied[eid] - created[eid]) * 1000 for eid, _ in events if eid in applied)
    stamps = sorted(created[eid] for eid, _ in events)
    offered = (len(stamps) - 1) / (stamps[-1] - stamps[0]) if stamps[-1] > stamps[0] else None
    record = {"variant": variant, "rate": rate if load is None else round(rate, 1), "run": run, "events": count,
              "offered_per_s": round(offered, 1) if offered else None,
              "p50_ms": round(percentile(latencies, 0.5), 2), "p99_ms": round(percentile(latencies, 0.99), 2),
              "max_ms": round(latencies[-1], 2), "duplicates": verdict["duplicates"], "lost": verdict["lost"],
              "balances_exact": verdict["balances_exact"], "wall_s": round(time.monotonic() - started, 1)}
    if load is not None:
        record.update({"load": load, "capacity_per_s": round(measured, 1)})
    return record


def key(r: dict) -> str:
    return f"{r['variant']}@{r['load'] * 100:g}%" if "load" in r else f"{r['variant']}@{r['rate']:g}/s"


def summarise(runs: list[dict]) -> dict:
    names = list(dict.fromkeys(key(r) for r in runs))
    loaded = any("load" in r for r in runs)
    return results.summarise_runs(runs, names, key=key, totals=("duplicates", "lost"),
                                  spreads=("p50_ms", "p99_ms", "max_ms", "offered_per_s",
                                           *(("capacity_per_s",) if loaded else ())))


def table(summary: dict) -> str:
    return results.text_table(
        ["variant@rate", "runs", "p50 ms", "p99 ms", "max ms", "offered/s", "duplicates", "lost"],
        [[name, s["runs"], f"{s['p50_ms']['median']:g}", f"{s['p99_ms']['median']:g}", f"{s['max_ms']['median']:g}",
          f"{s['offered_per_s']['median']:g}", s["totals"]["duplicates"], s["totals"]["lost"]]
         for name, s in summary.items()], note="medians over runs of each run's percentile")


def verdict_line(r: dict) -> str:
    return (f"{r['variant']} at {r['rate']:g}/s run {r['run']}: p50 {r['p50_ms']:g} ms, p99 {r['p99_ms']:g} ms, "
            f"max {r['max_ms']:g} ms (offered {r['offered_per_s']}/s), {r['duplicates']} duplicates, "
            f"{r['lost']} lost")


def parse_args(argv=None):
    parser = cli.measurement("Latency from publication to the ledger row, at fixed offered loads.",
                             str(results.RESULTS / "latency.json"))
    parser.add_argument("--variants", type=cli.names_of(VARIANTS), default=["c", "d", "p"])
    parser.add_argument("--rates", type=cli.sizes, default=[200, 500, 5000], metavar="N,N,...",
                        help="credits a second the publisher offers")
    parser.add_argument("--load", type=fractions, metavar="F,F,...",
                        help="in place of --rates: fractions of each variant's capacity, measured in each run "
                             "just before on a backlog")
    parser.add_argument("--capacity-events", type=int, default=100000, help="with --load: the backlog's credits")
    parser.add_argument("--capacity-events-of", type=cli.per_name, default={}, metavar="VARIANT=N,...",
                        help="with --load: another backlog for some variants (c is ~50x slower than p)")
    parser.add_argument("--seconds", type=float, default=5.0, help="how long each rate is offered")
    parser.add_argument("--batch", type=int, default=500, help="d and p: messages per batch")
    args = parser.parse_args(argv)
    cli.at_least(parser, args, 1, "runs", "partitions", "batch")
    if args.seconds <= 0:
        parser.error("--seconds must be positive")
    if args.capacity_events < 2:
        parser.error("--capacity-events must be at least 2")
    return args


def fractions(text: str) -> list[float]:
    """--load 0.5,0.8,0.95: fractions of capacity, above 0 and at most 2."""
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or any(not 0 < v <= 2 for v in values):
        raise argparse.ArgumentTypeError(f"expected fractions above 0 and at most 2, like 0.5,0.8,0.95; got {text!r}")
    return values


def main(args) -> int:
    if args.load is None:  # the fixed-rate file's config, as it was before --load
        config = results.config_of(args, "out", "force", "load", "capacity_events", "capacity_events_of")
        plan = [{"variant": v, "rate": float(r)} for r in args.rates for v in args.variants]
    else:
        config = results.config_of(args, "out", "force", "rates")
        plan = [{"variant": v, "load": f} for f in args.load for v in args.variants]
    results.drive("measure_latency", args.out, config, plan, run_once, summarise, table, verdict_line, args.force,
                  rotate=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(parse_args()))
