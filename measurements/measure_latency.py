"""What batching costs in latency: from a credit's publication to its ledger row, at a fixed
offered load, per variant.

Claim: at a load every variant keeps up with, c's latency is one transaction and one offset
commit; d and p trade latency for throughput, since a credit waits for the rest of its batch
and for the batch's statement; at a load c cannot sustain, its latency grows for as long as
the load lasts, while d's and p's stay flat.

Workload: one warm-up credit in each partition, all applied before anything is timed (the
group joined, the connections open, a position in every partition); then a publisher (worker.py
--variant publisher, lab.publishing.ready_producer) sends `--seconds` worth of credits at each
`--rate`, paced, while one consumer of the variant reads them. Variants and rates are
interleaved run by run. Measure: per credit, the ledger row's clock_timestamp() (a moment
before the commit) minus the record's CreateTime (stamped by the producer client); p50, p99
and the largest, in ms, both clocks this machine's. Checker: every credit applied once.

Near saturation (--load 0.5,0.8,0.95, in place of --rates): each run first measures the
variant's capacity (M3's kind: a backlog of --capacity-events credits already in the topic,
drained at the consumer's own pace), then the publisher offers that fraction of it for
--seconds. The paced publisher shares the machine with the consumer, which the backlog's
producer did not: 95% of that capacity may already be more than the consumer takes.

The batch wait (--sweep-batch N,N,...): d and p read with consume(batch, 0.1), which returns
once `batch` records are in or 0.1 s has passed, so below batch/0.1 s that wait is the floor
of their latency. Each N adds d and p at that batch beside the --batch ones: a batch the rate
fills sooner lowers the floor; at a high rate a small batch falls behind.

Assumptions: the stack is up and nothing else measures on it (a lock enforces it).

    python -m measurements.measure_latency --variants c,d,p --rates 200,500,5000 --runs 5
    python -m measurements.measure_latency --variants c,d,p --load 0.5,0.8,0.95 --capacity-events-of c=3000 \
        --runs 5 --out results/latency-saturation.json
    python -m measurements.measure_latency --variants c,d,p --rates 200,5000 --sweep-batch 50,10,1 --runs 5 \
        --out results/latency-batch.json
"""
import argparse
import json
import sys
import time

import psycopg

from lab import cli, harness, registry, results

VARIANTS = registry.names(kind="consumer")  # any consumer in a group: CreateTime to its ledger row
BATCHED = registry.names(kind="consumer", reads="batch")  # --batch and --sweep-batch apply to these


def percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def transaction_sizes(admin_dsn: str, event_ids: list[str]) -> list[int]:
    """How many of these credits each transaction wrote: ledger rows share the xmin of the
    transaction that inserted them (none is updated afterwards). A batch as the consumer made it."""
    with psycopg.connect(admin_dsn) as conn:
        return [n for (n,) in conn.execute("SELECT count(*) FROM ledger WHERE event_id = ANY(%s) GROUP BY xmin::text",
                                           (event_ids,))]


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


def run_once(variant: str, run: int, config: dict, rate: float | None = None, load: float | None = None,
             batch: int | None = None, swept: bool = False) -> dict:
    """One consumer, warmed up, then credits offered at `rate` a second, or at `load` times the
    capacity it showed on a backlog just before. `batch`: d's and p's (`swept`: one of
    --sweep-batch, not --batch)."""
    name = f"{variant}-{rate:g}-r{run}" if load is None else f"{variant}-load{load:g}-r{run}"
    if swept:
        name += f"-b{batch}"
    worker_config = {**config, "batch": batch or config["batch"]}
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
                                  harness.worker_args(variant, worker_config))

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
        sizes = transaction_sizes(space.admin, [eid for eid, _ in events])
    latencies = sorted((applied[eid] - created[eid]) * 1000 for eid, _ in events if eid in applied)
    stamps = sorted(created[eid] for eid, _ in events)
    offered = (len(stamps) - 1) / (stamps[-1] - stamps[0]) if stamps[-1] > stamps[0] else None
    record = {"variant": variant, "rate": rate if load is None else round(rate, 1), "run": run, "events": count,
              "offered_per_s": round(offered, 1) if offered else None,
              "p50_ms": round(percentile(latencies, 0.5), 2), "p99_ms": round(percentile(latencies, 0.99), 2),
              "max_ms": round(latencies[-1], 2),
              "credits_per_transaction": round(sum(sizes) / len(sizes), 1), "largest_transaction": max(sizes),
              "duplicates": verdict["duplicates"], "lost": verdict["lost"],
              "balances_exact": verdict["balances_exact"], "wall_s": round(time.monotonic() - started, 1)}
    if load is not None:
        record.update({"load": load, "capacity_per_s": round(measured, 1)})
    if batch is not None:
        record["batch"] = batch
    if swept:
        record["swept"] = True
    return record


def key(r: dict) -> str:
    """A case's name in the summary: c@200/s, p@95%; a swept batch follows: d@200/s batch 10."""
    at = f"{r['variant']}@{r['load'] * 100:g}%" if "load" in r else f"{r['variant']}@{r['rate']:g}/s"
    return at + (f" batch {r['batch']}" if r.get("swept") else "")


def summarise(runs: list[dict]) -> dict:
    names = list(dict.fromkeys(key(r) for r in runs))
    loaded = any("load" in r for r in runs)
    return results.summarise_runs(runs, names, key=key, totals=("duplicates", "lost"),
                                  spreads=("p50_ms", "p99_ms", "max_ms", "offered_per_s", "credits_per_transaction",
                                           *(("capacity_per_s",) if loaded else ())))


def table(summary: dict) -> str:
    return results.text_table(
        ["variant@rate", "runs", "p50 ms", "p99 ms", "max ms", "offered/s", "credits/transaction", "duplicates",
         "lost"],
        [[name, s["runs"], f"{s['p50_ms']['median']:g}", f"{s['p99_ms']['median']:g}", f"{s['max_ms']['median']:g}",
          f"{s['offered_per_s']['median']:g}", f"{s['credits_per_transaction']['median']:g}",
          s["totals"]["duplicates"], s["totals"]["lost"]]
         for name, s in summary.items()], note="medians over runs of each run's percentile")


verdict_line = cli.verdict("{case} run {run}: {credits_per_transaction:g} credits a transaction, p50 {p50_ms:g} ms, "
                           "p99 {p99_ms:g} ms, max {max_ms:g} ms (offered {offered_per_s}/s), {duplicates} duplicates, "
                           "{lost} lost", case=key)


def parse_args(argv=None):
    parser = cli.measurement("Latency from publication to the ledger row, at fixed offered loads.", None)
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
    parser.add_argument("--sweep-batch", type=cli.sizes, metavar="N,N,...",
                        help="d and p at these batches too, beside --batch, in the same invocation")
    args = parser.parse_args(argv)
    results.reader_paths(args, "latency.json")  # a reader's own file, unless --out names one
    cli.at_least(parser, args, 1, "runs", "partitions", "batch")
    if args.sweep_batch and (args.batch in args.sweep_batch or len(set(args.sweep_batch)) < len(args.sweep_batch)):
        parser.error("--sweep-batch takes batches other than --batch's, each once")
    if args.sweep_batch and not set(args.variants) & set(BATCHED):
        parser.error("--sweep-batch needs d or p among --variants")
    cli.positive(parser, args, "seconds")
    cli.at_least(parser, args, 2, "capacity_events")
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


def cases(variants: list[str], batch: int, sweep: list[int] | None) -> list[dict]:
    """The consumers one rate or load is offered to: each variant (d and p at --batch), then d
    and p at each swept batch."""
    plain = [{"variant": v, **({"batch": batch} if v in BATCHED else {})} for v in variants]
    return plain + [{"variant": v, "batch": n, "swept": True} for n in sweep or () for v in variants if v in BATCHED]


def main(args) -> int:
    # the files' configs, as they were before --load and --sweep-batch: a flag they never had is left out
    unswept = ("sweep_batch",) if args.sweep_batch is None else ()
    offered_to = cases(args.variants, args.batch, args.sweep_batch)
    if args.load is None:
        config = results.config_of(args, "out", "force", "load", "capacity_events", "capacity_events_of", *unswept)
        plan = [{**case, "rate": float(r)} for r in args.rates for case in offered_to]
    else:
        config = results.config_of(args, "out", "force", "rates", *unswept)
        plan = [{**case, "load": f} for f in args.load for case in offered_to]
    results.drive("measure_latency", args.out, config, plan, run_once, summarise, table, verdict_line, args.force,
                  rotate=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(parse_args()))
