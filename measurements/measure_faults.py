"""M6: the faults the post could not show, counted like M1.

Claim: the inbox (c, and the batched d) keeps every credit exactly once through database
restarts, broker restarts and network partitions; without it (b), each fault that separates
a write from its offset commit costs a duplicate.

Faults, one kind per run, each bounded in time and always healed (lab/faults/, those on the
single-node stack that leave the consumers alone; each module says how it lands):

    pg-restart        PostgreSQL stopped in immediate mode and started again, --faults times
    broker-restart    the Kafka broker SIGKILLed and started again, --faults times
    partition-broker  the first of two consumers, in a network namespace (netlab.py), cut from
                      the broker for --outage-s, past the session timeout: a zombie of a new kind
    partition-db      the same, cut from Postgres, past max.poll.interval.ms
    share-lock        two members of a share group (KIP-932); every --slow-every-th event's first
                      handling outlives the --lock-ms record lock, so the other member gets it

Workload: `--events` credits on 6 partitions, published up front, handler sleep `--work-ms`.
Recovery: the consumers run on until every event is applied, the lag is 0 and the ledger is
still, under a deadline. Checker: checker.check, plus the workers' logs (skips, reconnects,
failed commits).

Assumptions: the embedded stack (stack.py) is up, since the restarts go through it; root,
for the namespaces; nothing else measures meanwhile.

    python -m measurements.measure_faults --fault pg-restart --variant c --runs 5
"""
import contextlib
import sys
import time

from lab import checker, cli, faults, harness, registry, results
from lab.faults import schedule

FAULTS = faults.select("stack", without=("pool",))
# c-reconnect: c's loop keeping its connection through a restart (lab/worker.py), beside c,
# which stops on a lost database and is started again: README, "Reconnect or exit".
VARIANTS = registry.names(kind="consumer")  # any consumer in a group (the committed files: b, c, d, c-reconnect)


def run_once(fault: str, variant: str, run: int, config: dict) -> dict:
    spec = faults.get(fault)
    share = spec.inject is None  # the fault is the handler itself (share-lock: outliving the broker's record lock)
    # share-lock's settings (slow_every among them) are in the config too, but not for the other faults' workers
    client = {key: config[key] for key in ("work_ms", "session_timeout_ms", "max_poll_interval_ms", "batch")}
    # in_handler (the tests): a partition's cut lands while the cut-off consumer (it alone stalls,
    # on every in_handler-th event, for in_handler_s) is inside a handler
    in_handler = bool(config.get("in_handler")) and spec.in_handler
    stalling = harness.worker_args(variant, {"slow_every": config["in_handler"],
                                             "slow_seconds": config["in_handler_s"]}) if in_handler else ()
    args = harness.worker_args(variant, {**client, "heartbeat_interval_ms": config["session_timeout_ms"] // 3})
    events = harness.make_events(config["events"], prefix=f"r{run}", seed=config["seed"] + run)
    started, began = time.monotonic(), time.time()
    with harness.run_space("m6", f"{fault}-{variant}-r{run}", config["partitions"]) as space:
        scene = faults.Scene(config=config, space=space, events=events, ns=None)
        fault_log, workers, rig = [], [], contextlib.ExitStack()
        try:
            if share:
                # the fault starts the run's consumers itself; a share group has no lag to read
                workers, settle = spec.start(scene, variant, run)
                # nor a lag whose end says everything was read: a still ledger ends the phase, so
                # it may start only once a member applies (a slow start is not a loss of all)
                try:
                    harness.wait_until(lambda: any(w.first_effect.is_set() for w in workers), 120,
                                       "a share group member's first credit")
                except TimeoutError as e:
                    raise RuntimeError("\n".join([str(e), *(w.log_tail() for w in workers)])) from None
            else:
                harness.produce_events(space.topic, events)
                # the fault's set-up, left after the workers stop: a partition's namespace (scene.ns),
                # in which the first of its two consumers lives, whose link is cut
                rig.enter_context(spec.around_consumers(scene))
                ns = scene.ns
                workers = harness.start_workers(variant, space, f"faults-{fault}-{variant}-r{run}", args,
                                                spec.consumers, prefixes=(ns.prefix,) if ns else (),
                                                extra=(stalling,))
                for worker in workers:
                    if not worker.wait_first_effect(120):
                        raise RuntimeError(f"a worker applied nothing:\n{worker.log_tail()}")
                fault_log = schedule.fault_schedule(fault, scene, f"{fault} {variant} run {run}",
                                                    in_handler=workers[0] if in_handler else None,
                                                    alive=lambda: any(w.proc.poll() is None for w in workers))
                settle = {"deadline_s": 600.0, "group": space.group, "topic": space.topic}
            recovery = harness.settle(workers, space.admin, config["events"], **settle)
            drained = None
            if recovery.crashed and not share:
                # as a supervisor would (systemd's Restart=): one worker started again drains the
                # topic, so what is lost is what the group skipped, not what nobody was left to read
                drained = harness.recover(variant, space, deadline_s=300.0, args=args,
                                          log_path=harness.log_dir() / f"faults-{fault}-{variant}-r{run}-again.log")
        finally:
            for worker in workers:
                worker.stop()
            rig.close()  # the fault's set-up goes once its workers have stopped
        counts, _ = checker.tally(workers)
        verdict = harness.verdict_of(events, space.admin)
        credits = harness.credit_times(space.admin)
    # what M6's chart draws: the faults' windows (for share-lock, each stall until its handler woke)
    stalls = checker.stall_windows(harness.timeline_of(w.log_path for w in workers)) if share else []
    windows = [f["window"] for f in fault_log] or stalls
    resumes = [f["resume_s"] for f in fault_log if f["resume_s"] is not None]
    return {"variant": variant, "fault": fault, "run": run, "events": config["events"],
            "faults": counts.get("stalls", 0) if share else len(fault_log), **verdict,
            "skipped": counts.get("skipped", 0), "evictions": 0 if share else counts.get("evictions", 0),
            "restarted": counts.get("restarted", 0), "reconnected": counts.get("reconnected", 0),
            "commit_failed": checker.failures(counts, "ack_failed" if share else "commit_failed"),
            "resume_s": results.stats(resumes) if resumes else None,
            "settle_s": recovery.seconds, "settled": drained["settled"] if drained else recovery.settled,
            "crashed": recovery.crashed, "drained_after_crash_s": drained["recovery_s"] if drained else None,
            "wall_s": round(time.monotonic() - started, 1), "fault_log": fault_log,
            "timeline": checker.credit_timeline(credits, windows, began)}


def summarise(runs: list[dict]) -> dict:
    return results.summarise_runs(
        runs, [f"{f}/{v}" for f in FAULTS for v in results.seen(runs)], key=lambda r: f"{r['fault']}/{r['variant']}",
        totals=("faults", "duplicates", "lost", "skipped"),
        # share-lock has no outage to resume from: the handler itself is the fault
        extra=lambda mine: {"fault": mine[0]["fault"], "variant": mine[0]["variant"], "resume_s": results.stats(
            r["resume_s"]["median"] for r in mine if r["resume_s"]) if any(r["resume_s"] for r in mine) else None})


def table(summary: dict) -> str:
    return results.text_table(
        ["fault", "variant", "runs", "faults", "duplicates", "lost", "skipped", "resume s (median)"],
        [[s["fault"], s["variant"], s["runs"], *(s["totals"][f] for f in ("faults", "duplicates", "lost", "skipped")),
          f"{s['resume_s']['median']:.1f}" if s["resume_s"] else "-"] for s in summary.values()])


verdict_line = cli.verdict("{fault} {variant} run {run}: {duplicates} duplicates, {lost} lost, {skipped} skipped over "
                           "{faults} faults")


def parse_args(argv=None):
    parser = cli.measurement("M6: restarts and partitions, counted like M1.", None, events=3000, work_ms=10)
    cli.fault_and_variants(parser, FAULTS, VARIANTS)
    cli.fault_pacing(parser, 5, 12, "partitions: how long a link stays cut", every="seconds between faults")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--max-poll-interval-ms", type=int, default=10000)
    parser.add_argument("--batch", type=int, default=100, help="d only")
    parser.add_argument("--lock-ms", type=int, default=3000, help="share-lock: the group's record lock")
    parser.add_argument("--overrun-s", type=float, default=3, help="share-lock: how long a stall outlives the lock")
    parser.add_argument("--slow-every", type=int, default=500, help="share-lock: every N-th event stalls once")
    parser.add_argument("--max-poll-records", type=int, default=1, help="share-lock: 0 keeps librdkafka's default")
    parser.add_argument("--producer-batching", action="store_true",
                        help="share-lock: publish with the producer's usual batching (default: one record a batch)")
    args = parser.parse_args(argv)
    results.reader_paths(args, "faults.json")  # a reader's own file, unless --out names one
    cli.at_least(parser, args, 1, "runs", "events", "partitions", "faults", "session_timeout_ms",
                 "max_poll_interval_ms", "batch", "slow_every")
    cli.at_least(parser, args, 0, "work_ms", "max_poll_records", "lock_ms")
    cli.positive(parser, args, "every_s", "outage_s", "overrun_s")
    refused = faults.get(args.fault).check(args)
    if refused:
        parser.error(refused)
    return args


def main(args) -> int:
    # share-lock's settings are in every config, so that one results file can hold every fault
    config = results.config_of(args, "fault", "variant", "out", "force", "producer_batching",
                               one_record_batches=not args.producer_batching)
    results.drive("measure_faults", args.out, config, [{"fault": args.fault, "variant": v} for v in args.variant],
                  run_once, summarise, table, verdict_line, args.force, rotate=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(parse_args()))
