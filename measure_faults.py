"""M6: the faults the post could not show, counted like M1.

Claim: the inbox (c, and the batched d) keeps every credit exactly once through
database restarts, broker restarts and network partitions; without it (b),
each fault that separates a write from its offset commit costs a duplicate.

Faults, one kind per run, each bounded in time and always healed:

    pg-restart        PostgreSQL stopped in immediate mode and started again,
                      --faults times; the consumer reconnects (consume.Database)
    broker-restart    the Kafka broker SIGKILLed and started again, --faults times
    partition-broker  two consumers; the first lives in a network namespace
                      (netlab.py) whose link to the broker is cut for
                      --outage-s, longer than the session timeout, while it can
                      still reach Postgres: the group evicts it and the other
                      consumer takes its partitions, a zombie of a new kind
    partition-db      the same, but the link to Postgres is cut while Kafka
                      stays reachable, for longer than max.poll.interval.ms
    share-lock        two members of a share group (KIP-932) whose record lock
                      is --lock-ms; every --slow-every-th event's first handling
                      outlives the lock, so the broker hands the record (and the
                      rest of the batch acquired with it) to the other member

Workload: `--events` credits on 6 partitions, published up front, handler
sleep `--work-ms`. Recovery: the consumers run on until every event is
applied, the lag is 0 and the ledger is still, under a deadline. Checker:
harness.check, plus the workers' logs (skips, reconnects, failed commits).

Assumptions: the embedded stack (stack.py) is up, since the restarts go
through it; root, for the namespaces; nothing else measures meanwhile.

    python measure_faults.py --fault pg-restart --variant c --runs 5
"""
import json
import sys
import time
import uuid

import cli
import harness
import netlab
import stack
from measure_kill import progress

FAULTS = ("pg-restart", "broker-restart", "partition-broker", "partition-db", "share-lock")
VARIANTS = ("b", "c", "d")


def run_share_lock(variant: str, run: int, config: dict, log_dir) -> dict:
    """share-lock: the fault is the handler itself, outliving the broker's record lock."""
    slow_s = config["lock_ms"] / 1000 + config["overrun_s"]
    args = ("--work-ms", config["work_ms"], "--slow-every", config["slow_every"], "--slow-seconds", slow_s,
            "--max-poll-records", config.get("max_poll_records", 0))
    events = harness.make_events(config["events"], prefix=f"r{run}", seed=config["seed"] + run)
    # A share group locks what it acquires, and it acquires whole producer batches: with
    # one record per batch (and per poll) an expiry hands over one record, not a batch of them.
    single = {"linger.ms": 0, "batch.num.messages": 1, "max.in.flight.requests.per.connection": 1}
    started = time.monotonic()
    with harness.run_space("m6", f"share-lock-{variant}-r{run}", config["partitions"], stalls=True) as space:
        # A share group's lock and start position are group configs on the broker; `earliest`, or
        # the members would skip the backlog published up front.
        harness.set_group_configs(space.group, {"share.record.lock.duration.ms": config["lock_ms"],
                                                "share.auto.offset.reset": "earliest"})
        harness.produce_events(space.topic, events, **(single if config.get("one_record_batches") else {}))
        workers = []
        try:
            for i in range(2):
                log_path = log_dir / f"faults-share-lock-{variant}-r{run}-w{i + 1}.log"
                log_path.unlink(missing_ok=True)
                workers.append(harness.Worker(f"share-{variant}", space.topic, space.group, space.dsn, log_path,
                                              args))
            stalls = config["events"] // config["slow_every"]
            settle_s = harness.settle(workers, space.dsn, config["events"], 300.0 + stalls * slow_s)
        finally:
            for worker in workers:
                worker.stop()
        counts, _ = harness.tally(workers)
        verdict = harness.verdict_of(events, space.dsn)
    return {"variant": variant, "fault": "share-lock", "run": run, "events": config["events"],
            "faults": counts.get("stalls", 0), **verdict, "skipped": counts.get("skipped", 0), "evictions": 0,
            "commit_failed": harness.failures(counts, "ack_failed"), "resume_s": None, "settle_s": settle_s,
            "wall_s": round(time.monotonic() - started, 1), "fault_log": []}


def inject(fault: str, config: dict, ns, kafka_port: int, pg_port: int) -> float:
    """One fault, bounded in time and healed before it returns; how long the service was out."""
    hit = time.monotonic()
    if fault == "pg-restart":
        return stack.postgres_restart_immediate()
    if fault == "broker-restart":
        stack.kafka_kill()
        stack.kafka_up()
        return time.monotonic() - hit
    port = kafka_port if fault == "partition-broker" else pg_port
    ns.bridge.cut(port)
    try:
        time.sleep(config["outage_s"])
    finally:
        ns.bridge.heal(port)
    return config["outage_s"]


def run_once(fault: str, variant: str, run: int, config: dict, log_dir) -> dict:
    if fault == "share-lock":
        return run_share_lock(variant, run, config, log_dir)
    args = ("--work-ms", config["work_ms"], "--session-timeout-ms", config["session_timeout_ms"],
            "--heartbeat-interval-ms", config["session_timeout_ms"] // 3,
            "--max-poll-interval-ms", config["max_poll_interval_ms"])
    if variant == "d":
        args += ("--batch", config["batch"])
    log_path = log_dir / f"faults-{fault}-{variant}-r{run}.log"
    log_path.unlink(missing_ok=True)
    events = harness.make_events(config["events"], prefix=f"r{run}", seed=config["seed"] + run)
    started = time.monotonic()
    _, kafka_port = stack.kafka_address()
    pg_port = stack.postgres_params()["port"]
    with harness.run_space("m6", f"{fault}-{variant}-r{run}", config["partitions"]) as space:
        harness.produce_events(space.topic, events)
        workers, ns, fault_log = [], None, []
        try:
            if fault.startswith("partition"):
                ns = netlab.Namespace(f"lab-{uuid.uuid4().hex[:6]}", [kafka_port, pg_port])
                workers.append(harness.Worker(variant, space.topic, space.group, space.dsn, log_path, args,
                                              prefix=ns.prefix))
            workers.append(harness.Worker(variant, space.topic, space.group, space.dsn, log_path, args))
            for worker in workers:
                if not worker.wait_first_effect(120):
                    raise RuntimeError(f"a worker applied nothing:\n{worker.log_tail()}")
            for k in range(1, config["faults"] + 1):
                time.sleep(config["every_s"])  # the schedule: faults land wherever the consumers are
                outage = inject(fault, config, ns, kafka_port, pg_port)
                healed, rows_before = time.monotonic(), harness.ledger_count(space.dsn)
                harness.wait_until(lambda before=rows_before: harness.ledger_count(space.dsn) > before or
                                   harness.distinct_applied(space.dsn) >= config["events"], 300,
                                   f"a credit after {fault} {k}", interval_s=0.1)
                # resume_s: from the end of the outage (healed, or the service back) to the next credit
                fault_log.append({"fault": k, "outage_s": round(outage, 2),
                                  "resume_s": round(time.monotonic() - healed, 2)})
                progress(f"{fault} {variant} run {run}: fault {k} of {config['faults']}, "
                         f"ledger rows {harness.ledger_count(space.dsn)}")
            settle_s = harness.settle(workers, space.dsn, config["events"], 600.0, space.group, space.topic)
        finally:
            for worker in workers:
                worker.stop()
            if ns is not None:
                ns.close()
        counts, _ = harness.tally(workers)
        verdict = harness.verdict_of(events, space.dsn)
    return {"variant": variant, "fault": fault, "run": run, "events": config["events"], "faults": len(fault_log),
            **verdict, "skipped": counts.get("skipped", 0), "evictions": counts.get("evictions", 0),
            "commit_failed": harness.failures(counts),
            "resume_s": harness.stats(f["resume_s"] for f in fault_log) if fault_log else None,
            "settle_s": settle_s, "wall_s": round(time.monotonic() - started, 1), "fault_log": fault_log}


def summarise(runs: list[dict]) -> dict:
    summary = {}
    for fault in FAULTS:
        for variant in VARIANTS:
            mine = [r for r in runs if r["fault"] == fault and r["variant"] == variant]
            if mine:
                summary[f"{fault}/{variant}"] = {
                    "fault": fault, "variant": variant, "runs": len(mine),
                    "balances_exact_runs": sum(r["balances_exact"] for r in mine),
                    "totals": {f: sum(r[f] for r in mine) for f in ("faults", "duplicates", "lost", "skipped")},
                    # share-lock has no outage to resume from: the handler itself is the fault
                    "resume_s": harness.stats(r["resume_s"]["median"] for r in mine) if mine[0]["resume_s"] else None,
                }
    return summary


def table(summary: dict) -> str:
    lines = ["fault             variant  runs  faults  duplicates  lost  skipped  resume s (median)",
             "----------------  -------  ----  ------  ----------  ----  -------  -----------------"]
    for s in summary.values():
        t = s["totals"]
        resume = f"{s['resume_s']['median']:.1f}" if s["resume_s"] else "-"
        lines.append(f"{s['fault']:<16}  {s['variant']:<7}  {s['runs']:>4}  {t['faults']:>6}  {t['duplicates']:>10}  "
                     f"{t['lost']:>4}  {t['skipped']:>7}  {resume:>17}")
    return "\n".join(lines)


def main(args) -> int:
    config = {"runs": args.runs, "events": args.events, "partitions": args.partitions, "work_ms": args.work_ms,
              "faults": args.faults, "every_s": args.every_s, "outage_s": args.outage_s,
              "session_timeout_ms": args.session_timeout_ms, "max_poll_interval_ms": args.max_poll_interval_ms,
              "batch": args.batch, "seed": args.seed}
    # share-lock's settings are in every config, so that one results file can hold every fault
    config.update(lock_ms=args.lock_ms, overrun_s=args.overrun_s, slow_every=args.slow_every,
                  max_poll_records=args.max_poll_records, one_record_batches=not args.producer_batching)
    results = harness.ResultsFile("measure_faults", args.out, config, args.force)
    log_dir = harness.log_dir()
    with harness.measurement_lock("measure_faults"):
        for run in range(1, args.runs + 1):
            if results.done(fault=args.fault, variant=args.variant, run=run):
                continue
            progress(f"{args.fault} {args.variant} run {run} of {args.runs}")
            record = run_once(args.fault, args.variant, run, config, log_dir)
            results.add(record, summarise)
            print(f"{args.fault} {args.variant} run {run}: {record['duplicates']} duplicates, {record['lost']} lost, "
                  f"{record['skipped']} skipped over {record['faults']} faults")
            print(json.dumps({k: v for k, v in record.items() if k != "fault_log"}), flush=True)
    results.close(table)
    return 0


def parse_args(argv=None):
    parser = cli.Parser(description="M6: restarts and partitions, counted like M1.")
    parser.add_argument("--fault", required=True, choices=FAULTS)
    parser.add_argument("--variant", required=True, choices=VARIANTS)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--events", type=int, default=3000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--work-ms", type=float, default=10)
    parser.add_argument("--faults", type=int, default=3, help="faults per run")
    parser.add_argument("--every-s", type=float, default=5, help="seconds between faults")
    parser.add_argument("--outage-s", type=float, default=12, help="partitions: how long a link stays cut")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--max-poll-interval-ms", type=int, default=10000)
    parser.add_argument("--batch", type=int, default=100, help="d only")
    parser.add_argument("--lock-ms", type=int, default=3000, help="share-lock: the group's record lock")
    parser.add_argument("--overrun-s", type=float, default=3, help="share-lock: how long a stall outlives the lock")
    parser.add_argument("--slow-every", type=int, default=500, help="share-lock: every N-th event stalls once")
    parser.add_argument("--max-poll-records", type=int, default=1, help="share-lock: 0 keeps librdkafka's default")
    parser.add_argument("--producer-batching", action="store_true",
                        help="share-lock: publish with the producer's usual batching (default: one record a batch)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default=str(harness.RESULTS / "faults.json"))
    parser.add_argument("--force", action="store_true")
    args = parser.parse_args(argv)
    if min(args.runs, args.events, args.partitions, args.faults) < 1:
        parser.error("--runs, --events, --partitions and --faults must be at least 1")
    if args.fault.startswith("partition") and args.outage_s * 1000 <= args.session_timeout_ms:
        parser.error("--outage-s must outlast the session timeout, or nobody is evicted")
    if args.fault == "share-lock" and args.variant == "d":
        parser.error("share-lock runs b and c: there is no batched share-group consumer")
    if args.fault == "share-lock" and (args.lock_ms < 1000 or args.slow_every < 1 or args.overrun_s <= 0):
        parser.error("share-lock needs --lock-ms >= 1000 (the broker's minimum), --slow-every >= 1, --overrun-s > 0")
    return args


if __name__ == "__main__":
    sys.exit(main(parse_args()))
