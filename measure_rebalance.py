"""M2, the rebalance zombie: a consumer the group has thrown out keeps running, and writes.

Claim: committing after the database (b) does not protect against a zombie.
When a handler outlives max.poll.interval.ms, librdkafka leaves the group, the
partition moves to another member at the last committed offset, and that member
handles the same message while the zombie finishes it too: one duplicate credit
per eviction. Only the zombie's offset commit fails. With the inbox (c), the
primary key makes the second handler wait for the first, find the row and skip.
Whether the newer group protocol (KIP-848, `--group-protocol consumer`) changes
this is measured, not assumed.

Workload: `--events` credits on 6 partitions, `--consumers` workers at once.
Fault: every `--slow-every`-th event (by seq) stalls `--slow-seconds` inside its
handler the first time any worker handles it, past `--max-poll-interval-ms`.
Recovery: the workers run on until every event is applied, the group's lag is 0
and the ledger has been still for a few seconds, under a deadline; if a worker
exited on its own meanwhile, one fresh worker then drains the topic, as a
supervisor would restart it (measure_faults does the same). Checker:
checker.check, plus the workers' logs: evictions (librdkafka's MAXPOLL line),
failed offset commits by error code, skipped duplicates, and who got an evicted
worker's partitions next (checker.handovers, on the workers' timelines).

Assumptions: the stack is up and nothing else measures on it. Under the
consumer protocol the session timeout is the broker's to set, so the harness
sets the group's `consumer.session.timeout.ms` and `consumer.heartbeat.interval.ms`
to the values the classic runs pass to the client.

    python measure_rebalance.py --variant b --runs 5
    python measure_rebalance.py --variant c --runs 5 --group-protocol consumer
    python measure_rebalance.py --variant b,c --runs 1   # several, side by side, in one file
    python measure_rebalance.py --command "python consume.py" --runs 1   # any consumer: docs/your-consumer.md

A command (--command) prints none of the lab's lines, so its stall is made on the database
side instead (lab/faults/db_stall.py: a trigger sleeps the first write of each chosen event to
the ledger), and only the lines it does print are counted (librdkafka's MAXPOLL for evictions).
"""
import collections
import sys
import time

from lab import checker, cli, command, harness, nemesis, registry, results
from lab.faults import db_stall

# A zombie needs a consumer that commits by hand, after its handler: any the registry declares
# (the frameworks: M9).
VARIANTS = registry.names(kind="consumer", reads="crash_after")
MAX_RESTARTS = 30  # a supervisor's patience: more than any run's stalls
MAX_POLL_INTERVAL_MS = 86_400_000  # librdkafka's most
# Under the consumer protocol the group gets the session timeout, and a third of it as its heartbeat
# (run_once); the lab's broker takes a heartbeat from 500 ms (lab/stack) to 15000 (Kafka's default).
CONSUMER_SESSION_TIMEOUT_MS = (1500, 45000)


def run_once(variant: str, run: int, config: dict) -> dict:
    protocol = config["group_protocol"]
    args = harness.worker_args(variant, {**config, "heartbeat_interval_ms": config["session_timeout_ms"] // 3})
    started = time.monotonic()
    events = harness.make_events(config["events"], prefix=f"r{run}", seed=config["seed"] + run)
    name = f"rebalance-{variant}-{protocol}-stall{config['slow_seconds']:g}-r{run}"
    log_paths = [harness.log_dir() / f"{name}-w{i + 1}.log" for i in range(config["consumers"])]
    with harness.run_space("m2", f"{variant}-{protocol}-r{run}", config["partitions"]) as space:
        if protocol == "consumer":
            # KIP-848 moves the session timeout and the heartbeat to the broker: the group gets what the
            # classic runs pass to the client. The heartbeat matters too: it is how fast a member hears
            # that a partition was taken from it or given to it.
            session_ms = config["session_timeout_ms"]
            harness.set_group_configs(space.group, {"consumer.session.timeout.ms": session_ms,
                                                    "consumer.heartbeat.interval.ms": session_ms // 3})
        # workload; the nemesis is in the handlers: every slow_every-th event stalls past max.poll
        # (a command's, in the database: the first write of each of those events to the ledger)
        settle_options = {}
        if registry.get(variant).command:
            chosen = [event_id for seq, (event_id, _) in enumerate(events, 1) if seq % config["slow_every"] == 0]
            db_stall.install(space.admin, space.schema, chosen, config["slow_seconds"])
            settle_options["pending"] = db_stall.asleep
        harness.produce_events(space.topic, events)
        workers = []
        try:
            for log_path in log_paths:
                log_path.unlink(missing_ok=True)
                workers.append(harness.Worker(variant, space.topic, space.group, space.dsn, log_path, args))
            stalls = nemesis.stall_count(config["events"], config["slow_every"])
            deadline = 300.0 + stalls * config["slow_seconds"] + config["events"] * config["work_ms"] / 1000
            # recovery: the same workers run on until all is applied and still
            recovery = harness.settle(workers, space.admin, config["events"], deadline, space.group, space.topic,
                                      **settle_options)
            again = []  # each restarted life's recovery
            last = {"crashed": recovery.crashed, "settled": recovery.settled}
            while last["crashed"] and not last["settled"] and len(again) < MAX_RESTARTS:
                # as a supervisor would (systemd's Restart=): a worker that exited (a Quix worker does,
                # each time it is evicted, and a restarted one meets the stalls nobody has reached yet)
                # is started again, until one drains the topic; what counts as lost is then what the
                # group skipped, not what nobody was left to read
                log_paths.append(harness.log_dir() / f"{name}-again{len(again) + 1}.log")
                last = harness.recover(variant, space, deadline_s=300.0, args=args, log_path=log_paths[-1])
                again.append(last)
        finally:
            for worker in workers:
                worker.stop()
        counts, examples = checker.tally(workers)
        for life in again:  # the restarted lives' lines count too
            counts.update(life["counts"])
        drained = again[-1] if again else None
        verdict = harness.verdict_of(events, space.admin)
        order = harness.order_of(events, space.admin)
        credits = harness.credit_times(space.admin)
        if settle_options:  # a command's stalls are counted where they happened
            counts["stalls"] = db_stall.stalls(space.admin)[0]
    timeline = harness.timeline_of(log_paths)
    moves = checker.handovers(timeline)
    return {"variant": variant, "run": run, "group_protocol": protocol, "seed": config["seed"] + run,
            "events": config["events"], "stalls": counts.get("stalls", 0), "evictions": counts.get("evictions", 0),
            **verdict, "order_violations": order,
            "skipped": counts.get("skipped", 0),
            "commit_failed": checker.failures(counts),
            **checker.handover_fields(moves), "first_eviction": checker.first_eviction(timeline, credits),
            "settle_s": recovery.seconds, "settled": drained["settled"] if drained else recovery.settled,
            "crashed": recovery.crashed, "restarts": len(again),
            "drained_after_crash_s": drained["recovery_s"] if drained else None,
            "wall_s": round(time.monotonic() - started, 1), "examples": examples}


def summarise(runs: list[dict]) -> dict:
    def extra(mine):
        failed = collections.Counter()
        for r in mine:
            failed.update(r["commit_failed"])
        return {"handover_s": results.median_or_none(h for r in mine for h in r["handover_s"] if h is not None),
                "commit_failed": dict(failed)}

    return results.summarise_runs(
        runs, results.seen(runs), totals=("evictions", "duplicates", "lost", "skipped", "stalls", "moved_to_other",
                                "back_to_zombie"), spreads=("evictions", "duplicates", "lost", "skipped"), extra=extra)


def failed_commits(failed: dict) -> str:
    return ", ".join(f"{code} x{n}" for code, n in failed.items()) or "none"


def verdict_line(r: dict) -> str:
    exact = "balances exact" if r["balances_exact"] else "balances WRONG"
    handover = results.median_or_none(h for h in r["handover_s"] if h is not None)
    if r["moved_to_other"] or r["back_to_zombie"]:
        after = "" if handover is None else f", after {handover}s (median)"
        moves = (f"partitions next to another member {r['moved_to_other']}, back to the zombie "
                 f"{r['back_to_zombie']}{after}")
    else:  # nobody was evicted, or a command, which logs no assignments: none seen, rather than none made
        moves = "no handover seen"
    return (f"{r['variant']} ({r['group_protocol']}) run {r['run']}: {r['evictions']} evictions, "
            f"{r['duplicates']} duplicates, {r['lost']} lost, {r['skipped']} skipped, {exact}; "
            f"failed commits: {failed_commits(r['commit_failed'])}; {moves}")


def table(summary: dict) -> str:
    def moves(s: dict) -> str:  # "-": none seen (as verdict_line says), rather than 0 / 0 made
        moved, back = s["totals"]["moved_to_other"], s["totals"]["back_to_zombie"]
        return f"{moved} / {back}" if moved or back else "-"

    return results.text_table(
        ["variant", "runs", "evictions", "duplicates", "lost", "skipped", "to other / self", "handover s",
         "failed offset commits"],
        [[variant, s["runs"], *(s["totals"][f] for f in ("evictions", "duplicates", "lost", "skipped")), moves(s),
          "-" if s["handover_s"] is None else s["handover_s"],
          failed_commits(s["commit_failed"])] for variant, s in summary.items()], "(totals over all runs)")


def parse_args(argv=None):
    parser = cli.measurement("M2: evict a stalled consumer and count what the zombie writes.", None, events=5000,
                             work_ms=10)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--variant", type=cli.names_of((*VARIANTS, "frameworks")),
                       help="one variant, or several (b,c), side by side; frameworks: M9's")
    command.command_flags(parser, which)
    cli.unoffered(parser, "--effects", "--schema")  # M2 counts the ledger: refused below
    parser.add_argument("--consumers", type=int, default=3)
    parser.add_argument("--slow-every", type=int, default=500)
    parser.add_argument("--slow-seconds", type=float, default=12)
    parser.add_argument("--max-poll-interval-ms", type=cli.between(1, MAX_POLL_INTERVAL_MS, "librdkafka's range"),
                        default=10000)
    parser.add_argument("--session-timeout-ms", type=cli.session_timeout_ms(), default=6000,
                        help=f"from {cli.BROKER_SESSION_TIMEOUT_MS[0]} to {cli.BROKER_SESSION_TIMEOUT_MS[1]}; "
                             f"--group-protocol consumer: {CONSUMER_SESSION_TIMEOUT_MS[0]} to "
                             f"{CONSUMER_SESSION_TIMEOUT_MS[1]}")
    parser.add_argument("--group-protocol", choices=("classic", "consumer"), default="classic")
    parser.add_argument("--batch", type=int, help="d and p: messages per transaction (default 500)")
    parser.add_argument("--lanes", type=int, help="k only: handlers at once (default 16)")
    args = parser.parse_args(argv)
    if args.effects or args.schema:  # with --command or without, M2 has no use for them
        parser.error("M2 counts the ledger: --effects and --schema go with measure_kill.py")
    command.declare_command(parser, args)
    args.variants = [v for name in args.variant
                     for v in (registry.names(group="frameworks") if name == "frameworks" else (name,))]
    if twice := sorted({v for v in args.variants if args.variants.count(v) > 1}):
        parser.error(f"--variant {','.join(args.variant)} names {', '.join(twice)} twice")
    args.reads = registry.only_some_read(parser, args, args.variants, VARIANTS, batch=500, lanes=16)
    cli.at_least(parser, args, 1, "runs", "events", "consumers", "partitions", "slow_every", "batch", "lanes")
    cli.at_least(parser, args, 0, "work_ms")
    if args.slow_seconds * 1000 <= args.max_poll_interval_ms:
        parser.error("--slow-seconds must outlast --max-poll-interval-ms, or nobody is evicted")
    if args.max_poll_interval_ms < args.session_timeout_ms:
        parser.error("librdkafka needs --max-poll-interval-ms >= --session-timeout-ms")
    least, most = CONSUMER_SESSION_TIMEOUT_MS
    if args.group_protocol == "consumer" and not least <= args.session_timeout_ms <= most:
        parser.error(f"--group-protocol consumer takes --session-timeout-ms from {least} to {most}: the broker "
                     "wants a third of it, the group's heartbeat, from group.consumer.min.heartbeat.interval.ms "
                     "(500) to group.consumer.max.heartbeat.interval.ms (15000)")
    args.committed = results.reader_paths(args, f"rebalance-{'-'.join(args.variant)}-{args.group_protocol}.json")
    return args


def post_lines(groups) -> list[str]:
    post = results.read("post-figures.json")["rebalance"]
    return [f"  {v}: {p['evictions']} evictions, {p['duplicates']} duplicates, {p['skipped']} skipped over 5 runs "
            f"({post['config']['group_protocol']} protocol)" for v, p in post["variants"].items() if v in groups]


@command.command_errors
def main(args) -> int:
    config = {"runs": args.runs, "events": args.events, "consumers": args.consumers, "partitions": args.partitions,
              "slow_every": args.slow_every, "slow_seconds": args.slow_seconds,
              "max_poll_interval_ms": args.max_poll_interval_ms, "session_timeout_ms": args.session_timeout_ms,
              "group_protocol": args.group_protocol, "work_ms": args.work_ms, "seed": args.seed,
              **command.command_config(args)}
    if "batch" in args.reads:
        config["batch"] = args.batch
    if "lanes" in args.reads:
        config["lanes"] = args.lanes
    results.drive("measure_rebalance", args.out, config, [{"variant": v} for v in args.variants], run_once, summarise,
                  table, verdict_line, args.force, committed=args.committed, post_lines=post_lines)
    return 0


if __name__ == "__main__":
    sys.exit(main(parse_args()))
