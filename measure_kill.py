"""M1, the hard-kill harness: what each variant duplicates or loses when its consumer
process is SIGKILLed mid-stream, again and again.

Claim: only the inbox (c) comes out with zero duplicates and zero lost credits.
Auto-commit replays whatever it had not committed (a1) and, when it takes
batches, also loses what it had been handed but not finished (a2); committing
after the database (b) duplicates only when a kill lands between the two commits.

Workload: `--events` credits over 100 accounts, published up front to a topic
of `--partitions`. Fault: one worker at a time, SIGKILLed (Popen.kill(): no
finally, no close(), no last commit) `--life` seconds after its first side
effect, `--kills` times, on one seeded schedule that every variant shares.
Recovery: one worker drains until the group's lag is 0 and the ledger is still,
under a deadline. Checker: checker.check on (published IDs, ledger rows).

`--planted-crash N` adds the post's own test before the kills: the first life crashes
itself (os._exit) right after the database commit of the N-th credit it applies, before
its offset commit, and the run records how many times that event was credited in the end:
twice without the inbox (b), once with it (c), whose redelivered copy meets its inbox row.

Assumptions: the stack is up and nothing else measures on it (a lock enforces
that); each run has its own schema, topic and group.

    python measure_kill.py --variant c
    python measure_kill.py --variant all --runs 5 --kills 20 --events 10000
    python measure_kill.py --variant b,c --planted-crash 40 --runs 1 --kills 5 --events 2000 --explain  # make demo
    python measure_kill.py --command "python consume.py" --runs 1 --kills 5   # any consumer: docs/your-consumer.md
    python measure_kill.py --variant c --fault pg-restart,broker-restart --runs 1   # kills mixed with faults
    python measure_kill.py --variant b,c --consumers 3 --runs 1   # three in the group, one killed at a time

`--consumers N` kills in a group: N workers share the group from the start, and each life
ends with a SIGKILL of one of them, drawn on the run's seed, whose place a fresh worker takes
while the group rebalances around it (lab/kill_group.py).

`--fault NAME[,NAME]` mixes faults into the kills: halfway through each life, one of them,
drawn on the run's seed (lab/faults/schedule.composed), is landed on the working consumer; any
fault of lab/faults/ that needs only the single-node stack and acts by itself (mixable_faults).
"""
import sys
import time

from lab import cli, command, harness, nemesis, registry, results

POST_VARIANTS = registry.names(group="post")  # the post's table (a1, a2, b, c): what --variant all runs
VARIANTS = registry.names(kind="consumer")  # any consumer in a group the registry declares (the frameworks: M9)


def mixable_faults() -> tuple[str, ...]:
    """The faults a kill run can mix in: on the single-node stack, landed by themselves on a
    working consumer. Asked for only when --fault is given: the registry imports every fault
    module, and a run records what it loaded (lab.provenance)."""
    from lab import faults
    return tuple(name for name in faults.select("stack", without=("pool", "netns", "root"))
                 if (f := faults.get(name)).inject and not (f.in_handler or f.once or f.republishes
                                                            or f.consumers > 1))


def fault_names(text: str) -> list[str]:
    return cli.names_of(mixable_faults(), "fault")(text)
PLANTED_WAIT_S = 120.0
LIBRDKAFKA_HEARTBEAT_MS = 3000  # heartbeat.interval.ms's default


def planted_crash(variant: str, space, args: tuple, config: dict, log_path) -> dict:
    """The post's test, as the first life: a worker that crashes itself right after the database
    commit of the N-th credit it applies, before its offset commit. Waits for that exit, and
    reads which event it was from the worker's log (an error if no crash comes: fewer credits)."""
    crashing = harness.Worker(variant, space.topic, space.group, space.dsn, log_path,
                              (*args, "--crash-after-applied", config["planted_crash"]))
    try:
        harness.wait_until(lambda: crashing.proc.poll() is not None, PLANTED_WAIT_S,
                           f"{variant}'s planted crash after the database commit of its "
                           f"{config['planted_crash']}th credit")
    finally:
        crashing.kill()
    [event_id] = [key.split(":", 1)[1] for key in crashing.counts if key.startswith("crashed_after_commit:")] or [None]
    if event_id is None:
        raise RuntimeError(f"{variant}'s first worker exited ({crashing.proc.returncode}) without its planted "
                           f"crash:\n{crashing.log_tail()}")
    results.progress(f"{variant}: crashed itself after the database commit of {event_id}")
    return {"event": event_id, "exit_code": crashing.proc.returncode}


def run_once(variant: str, run: int, config: dict) -> dict:
    log_path = harness.fresh_log(f"kill-{variant}-r{run}")
    args, seed, events = harness.run_workload(variant, run, config)
    started = time.monotonic()
    with harness.run_space("m1", f"{variant}-r{run}", config["partitions"], keep=config.get("keep", False)) as space:
        # workload
        harness.produce_events(space.topic, events)

        planted = planted_crash(variant, space, args, config, log_path) if config.get("planted_crash") else None

        # nemesis: the seeded kill schedule
        effects_query = registry.get(variant).effects
        def after_kill(k, life, worker, exit_code):
            # a command's effects may live elsewhere than the ledger: count what its query counts
            rows = (harness.effects_count(space.dsn, effects_query) if effects_query
                    else harness.ledger_count(space.admin))
            results.progress(f"{variant} run {run}: kill {k} of {config['kills']}, "
                             f"{'effects' if effects_query else 'ledger rows'} {rows}"
                             + (f" (it had exited by itself, code {exit_code})" if exit_code is not None else ""))
            # credits applied at least once: a duplicator's extra rows must not read as work done
            applied = (harness.effects_count(space.dsn, effects_query, distinct=True) if effects_query
                       else harness.distinct_applied(space.admin))
            # A worker that exited before its kill was not killed: that is a crash, kept apart.
            return {"kill": k, "life_s": life, "ledger_rows": rows, "applied": applied, "exit_code": exit_code,
                    "counts": dict(worker.counts)}

        drawn = []
        if config.get("faults"):
            from lab import faults
            from lab.faults import schedule
            drawn = [name for _, name in schedule.composed(config["faults"], seed, config["kills"])]

        def mid_life(k, worker):  # one drawn fault, landed on the working consumer
            scene = faults.Scene(config=config, space=space, events=events, target=worker)
            results.progress(f"{variant} run {run}: {drawn[k - 1]} in life {k}")
            return {"fault": drawn[k - 1], "met": faults.get(drawn[k - 1]).land(scene)}

        schedule, survivors, exited = nemesis.kill_schedule(seed, config["kills"], config["life"]), {}, []
        if config.get("consumers", 1) > 1:
            from lab.kill_group import kill_in_a_group  # only a group's runs load it (lab.provenance)

            # a place in the group keeps one log over the lives it saw
            slot_logs = {slot: harness.fresh_log(f"kill-{variant}-r{run}-w{slot}")
                         for slot in range(1, config["consumers"] + 1)}
            kill_log, survivors, exited = kill_in_a_group(
                schedule, config["consumers"], seed,
                start=lambda slot: harness.Worker(variant, space.topic, space.group, space.dsn, slot_logs[slot], args),
                done=lambda entry: entry["applied"] >= len(events) or harness.lag(space.group, space.topic) == 0,
                after_kill=after_kill, group=space.group, topic=space.topic)
        else:
            kill_log = nemesis.kill_loop(
                schedule, start=lambda: harness.Worker(variant, space.topic, space.group, space.dsn, log_path, args),
                working=lambda worker: worker.working(space.group, space.topic) == "effect", after_kill=after_kill,
                mid_life=mid_life if drawn else None)
        if len(kill_log) < config["kills"]:
            results.progress(f"{variant} run {run}: nothing left to consume after {len(kill_log)} kills")

        # recovery, then the checker
        recovery = harness.recover(variant, space, deadline_s=max(300.0, config["events"] * 0.1), log_path=log_path,
                                   args=args)
        verdict = harness.verdict_of(events, space.admin, effects_query=effects_query)
        if effects_query and verdict["unexpected"] and verdict["lost"] == len(events):
            raise harness.CommandError(
                f"`{effects_query}` returned {verdict['unexpected']:,} IDs and none of the {len(events):,} event IDs "
                f"published: is the event ID (the record's event_id header) its first column?")
        order = None if effects_query else harness.order_of(events, space.admin)
        # what a duplicate or a loss points at: the first IDs, with their records' partition/offset
        evidence = None
        if verdict["duplicates"] or verdict["lost"]:
            applied = harness.applied_ids(space.admin, effects_query or harness.LEDGER_EFFECTS)
            evidence = harness.evidence_of(events, applied, space.topic)
        if planted:  # how often the crashed event was credited in the end: the post's test
            planted["ledger_rows"] = sum(row[0] == planted["event"] for row in harness.effects(space.admin)["ledger"])

    def counted(kind: str) -> int:  # a kind of line, over every life of the run and its recovery
        return (sum(entry["counts"].get(kind, 0) for entry in kill_log) + survivors.get(kind, 0)
                + recovery["counts"].get(kind, 0))

    return {"variant": variant, "run": run, "seed": seed, "events": config["events"],
            "kills": sum(entry["exit_code"] is None for entry in kill_log),
            # a kill tests something only while credits are left to apply
            "mid_stream_kills": sum(entry["exit_code"] is None and entry["applied"] < config["events"]
                                    for entry in kill_log),
            "crashes": [entry["exit_code"] for entry in kill_log if entry["exit_code"] is not None] + exited,
            **verdict, "order_violations": order, "skipped": counted("skipped"),
            "handler_raised": counted("handler_raised"), **({"evidence": evidence} if evidence else {}),
            **({"planted": planted} if planted else {}),
            "recovery_s": recovery["recovery_s"],
            "wall_s": round(time.monotonic() - started, 1), "kill_log": kill_log}


def summarise(runs: list[dict]) -> dict:
    summary = results.summarise_runs(runs, results.seen(runs), spreads=("duplicates", "lost", "kills", "wall_s"))
    for variant, entry in summary.items():  # a command judged by its own effects query has no balances to check
        entry["balances_checked"] = any(r["balances_exact"] is not None for r in runs if r["variant"] == variant)
    return summary


def table(summary: dict) -> str:
    def spread(stat):
        return f"{stat['median']:g} ({stat['min']:g}-{stat['max']:g})"

    return results.text_table(
        ["variant", "runs", "kills median (min-max)", "duplicates median (min-max)", "lost median (min-max)",
         "exact balances"],
        [[variant, s["runs"], spread(s["kills"]), spread(s["duplicates"]), spread(s["lost"]),
          f"{s['balances_exact_runs']}/{s['runs']}" if s.get("balances_checked", True) else "not checked"]
         for variant, s in summary.items()])


def untested(r: dict) -> bool:
    """No kill landed while credits were left to apply: the run tested nothing (a consumer
    faster than the schedule applies every credit before its first kill)."""
    return r.get("mid_stream_kills") == 0


def verdict_line(r: dict) -> str:
    exact = {True: "balances exact", False: "balances WRONG", None: "balances not checked"}[r["balances_exact"]]
    crashed = f", {len(r['crashes'])} exited by themselves (codes {r['crashes']})" if r.get("crashes") else ""
    line = (f"{r['variant']} run {r['run']}: {r['duplicates']} duplicates, {r['lost']} lost, {exact} "
            f"({r['kills']} kills{crashed}, {r['events']} events, {r['wall_s']:g}s)")
    if untested(r):
        line += f"; NOT A TEST: {UNTESTED}"
    return line


UNTESTED = ("no kill landed while credits were left to apply (the consumer had applied all of them): "
            "publish more (--events) or kill sooner (--life)")


def times(n: int) -> str:
    return "once" if n == 1 else "twice" if n == 2 else f"{n:,} times"


def explain(document: dict) -> str:
    """A few lines for `make demo`, one per variant and fault: what was done, what was counted."""
    c, lines = document["config"], []
    for variant in results.seen(document["runs"]):
        runs = [r for r in document["runs"] if r["variant"] == variant]
        name = registry.get(variant).label
        for planted in (r["planted"] for r in runs if r.get("planted")):
            again = planted["ledger_rows"] - 1
            lines.append(f"{name}\n  the post's test: it crashed itself right after the database commit of "
                         f"{planted['event']}, before its offset commit, and the next consumer got "
                         f"{planted['event']} again: credited {times(planted['ledger_rows'])} in the end "
                         + (f"({again} duplicate{'s' if again > 1 else ''}: no inbox caught the copy)" if again
                            else "(the copy met its inbox row and was skipped)" if again == 0 else "(lost)"))
        kills, events = sum(r["kills"] for r in runs), sum(r["events"] for r in runs)
        duplicates, lost = sum(r["duplicates"] for r in runs), sum(r["lost"] for r in runs)
        exact = sum(r["balances_exact"] for r in runs)
        skipped = sum(r["skipped"] for r in runs)
        lines.append(("  then" if any(r.get("planted") for r in runs) else f"{name}\n ")
                     + f" {kills:,} SIGKILLs, each {c['life'][0]:g}-{c['life'][1]:g} s after "
                     + (f"the last, of one of {c['consumers']} consumers in the group" if c.get("consumers")
                        else "a consumer began crediting")
                     + f"; over the {events:,} credits, in all: {duplicates:,} credited twice, {lost:,} never "
                     f"credited, balances exact in {exact} of {len(runs)} run{'s' if len(runs) > 1 else ''}"
                     + (f"; {skipped:,} redelivered messages met their inbox row, skipped." if skipped else "."))
    lines.append("Counted from the ledger, per event ID, after one last consumer drained the topic. The full table, "
                 "every variant over 5 runs of 20 kills: README.md, section M1 (results/kill.json).")
    return "\n".join(lines)


def parse_args(argv=None):
    parser = cli.measurement("M1: hard-kill each consumer variant and count duplicates and losses.", None,
                             events=10000, work_ms=10, keep=True)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--variant", type=cli.names_of((*VARIANTS, "all", "frameworks")),
                       help="one variant, or several (b,c), side by side; all: the post's four; frameworks: M9's")
    command.command_flags(parser, which)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--life", type=nemesis.life_range, default=(1.0, 8.0), metavar="MIN,MAX",
                        help="seconds a worker lives after its first side effect (--consumers: a member, "
                             "after the group's first side effect, then after the kill before)")
    parser.add_argument("--session-timeout-ms", type=cli.session_timeout_ms(most=cli.DEFAULT_MAX_POLL_INTERVAL_MS),
                        default=6000)
    parser.add_argument("--batch", type=int, help="d and p: messages per transaction (default 500)")
    parser.add_argument("--lanes", type=int, help="k only: handlers at once (default 16)")
    parser.add_argument("--connections", type=int, help="p only: statements at once (default 1)")
    parser.add_argument("--planted-crash", type=int, default=0, metavar="N",
                        help="first, the post's test: crash right after the DB commit of the N-th credit applied")
    parser.add_argument("--fault", type=fault_names, default=[], metavar="NAME[,NAME]",
                        help="mix faults into the kills, one halfway through each life: pg-restart, broker-restart "
                             "(those of lab/faults/ that need only this stack and act alone)")
    parser.add_argument("--consumers", type=int, default=1,
                        help="workers in the group at once; each life kills one of them (default 1)")
    parser.add_argument("--explain", action="store_true", help="end with a few lines on what was measured")
    args = parser.parse_args(argv)
    command.declare_command(parser, args)
    if args.command and any(a.split("=")[0] == "--work-ms" for a in (sys.argv[1:] if argv is None else argv)):
        parser.error("--work-ms is the lab's variants' handler sleep: a command works as it is written")
    args.variants = [v for name in args.variant for v in {"all": POST_VARIANTS, "frameworks": registry.names(
        group="frameworks")}.get(name, (name,))]
    if twice := sorted({v for v in args.variants if args.variants.count(v) > 1}):
        parser.error(f"--variant {','.join(args.variant)} names {', '.join(twice)} twice")
    args.reads = registry.only_some_read(parser, args, args.variants, VARIANTS, batch=500, lanes=16, connections=1)
    cli.at_least(parser, args, 1, "runs", "kills", "events", "partitions", "connections", "batch", "lanes",
                 "session_timeout_ms", "consumers")
    if args.fault and args.consumers > 1:
        parser.error("--fault lands on the one working consumer: it goes with --consumers 1")
    if args.consumers > args.partitions:
        parser.error(f"--consumers {args.consumers} on --partitions {args.partitions}: a member without a partition "
                     "has nothing a kill could interrupt")
    cli.at_least(parser, args, 0, "work_ms", "planted_crash")
    if args.planted_crash > args.events:
        parser.error(f"--planted-crash {args.planted_crash}: a run publishes only --events {args.events}")
    if args.planted_crash and (by_hand := [v for v in args.variants if "crash_after" not in registry.get(v).reads]):
        parser.error(f"--planted-crash needs variants that commit by hand after the database; not {', '.join(by_hand)}"
                     + (" (a command cannot be told where to crash)" if args.command else ""))
    local = "kill.json" if args.variant == ["all"] else f"kill-{'-'.join(args.variant)}.json"  # kill-frameworks.json
    post_file = "kill.json" if set(args.variants) <= set(POST_VARIANTS) else local
    if args.consumers > 1:  # compared with the committed group of that size (kill-consumers3.json), if any
        local = local.removesuffix(".json") + f"-consumers{args.consumers}.json"
        post_file = f"kill-consumers{args.consumers}.json"
    args.committed = results.reader_paths(args, local, post_file)
    return args


def post_lines(groups) -> list[str]:
    post = results.read("post-figures.json")["kill"]["variants"]
    return [f"  {v}: duplicates {p['duplicates']['median']:,} ({p['duplicates']['min']:,}-{p['duplicates']['max']:,}), "
            f"lost {p['lost']['median']:,} ({p['lost']['min']:,}-{p['lost']['max']:,}) per run of 20 kills"
            for v, p in post.items() if v in groups]


@command.command_errors
def main(args) -> int:
    config = {"runs": args.runs, "kills": args.kills, "events": args.events, "partitions": args.partitions,
              **({} if args.command else {"work_ms": args.work_ms}), "life": list(args.life), "seed": args.seed,
              "session_timeout_ms": args.session_timeout_ms, "group_protocol": "classic",
              "kill": "SIGKILL (Popen.kill)", "life_from": "the worker's first side effect"}
    if "batch" in args.reads:
        config["batch"] = args.batch
    if "lanes" in args.reads:
        config["lanes"] = args.lanes
    if "connections" in args.reads and args.connections != 1:
        config["connections"] = args.connections
    if args.planted_crash:
        config["planted_crash"] = args.planted_crash
    if args.session_timeout_ms <= LIBRDKAFKA_HEARTBEAT_MS:  # the default beat would let such a session expire
        config["heartbeat_interval_ms"] = args.session_timeout_ms // 3
    if args.fault:
        config["faults"] = args.fault
    if args.consumers > 1:
        config.update(consumers=args.consumers, life_from="the group's first side effect, then each kill")
    config.update(command.command_config(args))
    document = results.drive("measure_kill", args.out, config, [{"variant": v} for v in args.variants], run_once,
                             summarise, table, verdict_line, args.force, options={"keep": args.keep},
                             committed=args.committed, post_lines=None if args.consumers > 1 else post_lines)
    if args.explain:
        print("\n" + explain(document))
    if nothing := [f"{r['variant']} run {r['run']}" for r in document["runs"] if untested(r)]:
        print(f"measure_kill.py: {', '.join(nothing)}: {UNTESTED}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(parse_args()))
