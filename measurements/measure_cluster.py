"""M8, the replicated lab: what a leader move, a controller loss or a Postgres failover does
to each consumer, under load.

Claim: with acks=all, min.insync.replicas=2 and unclean elections off, killing or pausing a
partition leader (or the active controller) loses no acknowledged record, and the inbox (c, d)
applies each credit once through the move; b may duplicate where an offset commit is lost in the
handover. On the database side the inbox is exactly as durable as the commit it rides in: a failover
to an asynchronous standby can forget commits whose offsets Kafka already holds, and those credits
are gone for good; to a synchronous standby it forgets none.

Workload: a publisher (worker.py --variant publisher, journaling each acknowledgement) sends
`--events` credits at `--rate` while one consumer of the variant reads them. Fault: once,
`--fault-after-s` after the consumer's first credit (lab/faults/, those on the replicated lab):
    leader-kill      SIGKILL the node leading most partitions, restarted after --down-s
    leader-pause     SIGSTOP it for --pause-s, then SIGCONT
    isolate-leader   move it into a network namespace, give it its partitions back, then cut all its
                     links (clients, brokers, controllers) for --isolate-s and heal
    controller-kill  SIGKILL the active KRaft controller, restarted after --down-s
    pg-failover      SIGKILL the Postgres primary (every process at once), promote the standby
    pg-failover-stalled  the same after pausing the primary's WAL sender for --stall-s
Recovery: the publisher finishes, the consumer drains, under a deadline; a Postgres failover's dead
node is cloned again as the new standby before the next run. Checker: checker.check on the ledger;
acknowledged records missing from the log (the journal against the topic, Jepsen's lost write); the
seconds from the fault's end to the next credit.

Assumptions: the replicated lab is up (`make up-replicated`) and KAFKA_BROKERS and CONSUMER_DSN
point at it (`eval "$(python -m lab.stack env --replicated)"`; the make target does this); nothing
else measures on it.

    python -m measurements.measure_cluster --fault leader-kill --variant c --runs 1
    python -m measurements.measure_cluster --fault pg-failover-stalled --variant c,o --pg-replication async --runs 5
"""
import json
import sys
import time

from lab import checker, cli, faults, harness, registry, results, settings
from lab.stack import cluster

FAULTS = faults.select("replicated")

ALL = ("b", "c", "d", "o")  # --variant all: the variants the committed files hold
VARIANTS = registry.names(kind="consumer")  # any consumer in a group


def run_once(fault: str, variant: str, replication: str, acks: str, run: int, config: dict) -> dict:
    name = f"{fault}-{variant}-{replication}-acks{acks}-r{run}"
    log_dir = harness.log_dir()
    for suffix in ("log", "events", "acked"):
        (log_dir / f"cluster-{name}.{suffix}").unlink(missing_ok=True)
    cluster.cluster_postgres_up(replication)  # a standby streaming again (cloned anew after a failover)
    seed = config["seed"] + run
    begun = time.monotonic()
    events = harness.make_events(config["events"], prefix=f"r{run}", seed=seed)
    events_file, journal = log_dir / f"cluster-{name}.events", log_dir / f"cluster-{name}.acked"
    events_file.write_text("".join(json.dumps(pair) + "\n" for pair in events))
    with harness.run_space("m8", name, config["partitions"], keep=config.get("keep", False)) as space:
        publisher_args = ("--events-file", events_file, "--journal", journal, "--rate", config["rate"], "--acks",
                          acks, *(("--idempotence", "off") if acks != "all" else ()))
        publisher = harness.Worker("publisher", space.topic, space.group, space.dsn,
                                   log_dir / f"cluster-{name}-publisher.log", publisher_args)
        consumer = harness.Worker(variant, space.topic, space.group, space.dsn, log_dir / f"cluster-{name}.log",
                                  harness.worker_args(variant, config))
        try:
            if not consumer.wait_first_effect(120):
                raise RuntimeError(f"the consumer applied nothing:\n{consumer.log_tail()}")
            time.sleep(config["fault_after_s"])
            results.progress(f"{name}: {fault}")
            hit = time.time()
            injected = faults.get(fault).land(faults.Scene(config=config, topic=space.topic))
            healed, healed_at, rows = time.monotonic(), time.time(), harness.ledger_count(space.admin)
            try:
                harness.wait_until(lambda: harness.ledger_count(space.admin) > rows
                                   or harness.distinct_applied(space.admin) >= len(events), 300,
                                   f"a credit after {fault}")
                resume_s = round(time.monotonic() - healed, 2)
            except TimeoutError:  # stuck: recorded, and what never comes is counted lost below, not raised away
                consumer.dump_stacks()  # where it is stuck, into its log
                results.progress(f"{name}: no credit within 300 s after {fault}; the consumer's stacks are at the "
                                 f"end of {consumer.log_path}")
                resume_s = None
            harness.wait_until(lambda: publisher.proc.poll() is not None, 600, "the publisher to finish")
            if resume_s is not None:
                harness.settle([consumer], space.admin, None, 600, space.group, space.topic)
        finally:
            publisher.stop()
            consumer.stop()
        acknowledged = journal.read_text().split() if journal.exists() else []
        log = checker.log_copies(acknowledged, harness.record_ids(space.topic, "read_uncommitted"))
        verdict = harness.verdict_of(events, space.admin)
        # The longest wait between two credits from the fault's start to a minute after its end.
        stamps = sorted(t for _, t in harness.credit_times(space.admin) if hit - 1 <= t <= healed_at + 60)
        stall_s = round(max((b - a for a, b in zip(stamps, stamps[1:], strict=False)), default=0.0), 2)
    return {"fault": fault, "variant": variant, "replication": replication, "acks": acks, "run": run, "seed": seed,
            "events": len(events), "acknowledged": len(set(acknowledged)), "acked_missing": log["missing"],
            "log_copies": log["copies"], **verdict, "resume_s": resume_s, "stuck": resume_s is None,
            "longest_stall_s": stall_s, "fault_at": hit,
            **injected,
            "commit_failed": sum(n for k, n in consumer.counts.items() if k.startswith("commit_failed")),
            "skipped": consumer.counts.get("skipped", 0), "wall_s": round(time.monotonic() - begun, 1)}


def key(r: dict) -> str:
    return f"{r['fault']} {r['variant']} {r['replication']} {r['acks']}"


def summarise(runs: list[dict]) -> dict:
    groups = list(dict.fromkeys(key(r) for r in runs))
    def resumed(mine: list[dict]) -> dict:  # a stuck run never resumed: it is counted, not timed
        times = [r["resume_s"] for r in mine if r["resume_s"] is not None]
        return {"resume_s": results.stats(times) if times else None, "stuck": sum(r.get("stuck", False) for r in mine)}
    return results.summarise_runs(runs, groups, key=key, totals=("duplicates", "lost", "acked_missing"),
                                  spreads=("longest_stall_s", "wall_s"), extra=resumed)


def table(summary: dict) -> str:
    return results.text_table(
        ["fault", "variant", "replication", "acks", "runs", "duplicates", "lost", "acked missing", "longest stall s",
         "exact balances"],
        [[*name.split(" "), s["runs"], s["totals"]["duplicates"], s["totals"]["lost"], s["totals"]["acked_missing"],
          f"{s['longest_stall_s']['median']:g}", f"{s['balances_exact_runs']}/{s['runs']}"]
         for name, s in summary.items()],
        note="totals over runs; longest stall: median of each run's longest gap between credits around the fault")


verdict_line = cli.verdict("{fault} ({replication}, acks={acks}) {variant} run {run}: {duplicates} duplicates, "
                           "{lost} lost, {acked_missing} acknowledged records missing, {resumed} ({wall_s:g}s)",
                           resumed=lambda r: "stuck: no credit within 300 s" if r["resume_s"] is None
                           else f"resumed after {r['resume_s']:g}s")


def parse_args(argv=None):
    parser = cli.measurement("M8: faults of a replicated Kafka and a Postgres standby, under load.", None,
                             events=6000, keep=True)
    parser.add_argument("--fault", required=True, choices=(*FAULTS, "all"))
    parser.add_argument("--variant", required=True, type=cli.names_of((*VARIANTS, "all")),
                        help="one of b, c, d, o, a comma list (interleaved run by run), or all")
    parser.add_argument("--pg-replication", choices=(*cluster.REPLICATION_MODES, "both"), default="async")
    parser.add_argument("--acks", choices=("all", "1"), default="all", help="the publisher's")
    parser.add_argument("--rate", type=float, default=300, help="credits a second the publisher sends")
    parser.add_argument("--fault-after-s", type=float, default=5.0, help="after the consumer's first credit")
    parser.add_argument("--down-s", type=float, default=10.0, help="leader-kill, controller-kill: time down")
    parser.add_argument("--pause-s", type=float, default=15.0, help="leader-pause: time stopped")
    parser.add_argument("--stall-s", type=float, default=4.0, help="pg-failover-stalled: WAL sender paused")
    parser.add_argument("--isolate-s", type=float, default=15.0, help="isolate-leader: every link cut this long")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    args = parser.parse_args(argv)
    results.reader_paths(args, "cluster.json")  # a reader's own file, unless --out names one
    cli.at_least(parser, args, 1, "runs", "events", "partitions")
    cli.positive(parser, args, "rate", "down_s", "pause_s", "stall_s", "isolate_s")
    cli.at_least(parser, args, 0, "fault_after_s")
    if settings.BROKERS != settings.CLUSTER_BROKERS or settings.DSN != settings.CLUSTER_DSN:
        parser.error('KAFKA_BROKERS and CONSUMER_DSN must point at the replicated lab: '
                     'eval "$(python -m lab.stack env --replicated)" first, or run make measure-cluster')
    return args


def main(args) -> int:
    chosen = FAULTS if args.fault == "all" else (args.fault,)
    variants = ALL if "all" in args.variant else tuple(args.variant)
    modes = cluster.REPLICATION_MODES if args.pg_replication == "both" else (args.pg_replication,)
    config = results.config_of(args, "out", "force", "keep", "fault", "variant", "pg_replication", "acks",
                               batch=500, brokers=3, min_insync_replicas=2, standby="one, streaming")
    plan = [{"fault": f, "variant": v, "replication": m, "acks": args.acks}
            for f in chosen for v in variants
            # a fault on the Postgres standby runs once per replication mode
            for m in (modes if "pg-standby" in faults.get(f).needs else modes[:1])]
    results.drive("measure_cluster", args.out, config, plan, run_once, summarise, table, verdict_line, args.force,
                  options={"keep": args.keep})
    return 0


if __name__ == "__main__":
    sys.exit(main(parse_args()))
