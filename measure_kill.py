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

Assumptions: the stack is up and nothing else measures on it (a lock enforces
that); each run has its own schema, topic and group.

    python measure_kill.py --variant c
    python measure_kill.py --variant all --runs 5 --kills 20 --events 10000
"""
import sys
import time

from lab import cli, harness, nemesis, registry, results

POST_VARIANTS = registry.names(group="post")  # the post's table (a1, a2, b, c): what --variant all runs
VARIANTS = registry.names(kind="consumer")  # any consumer in a group the registry declares (the frameworks: M9)


def run_once(variant: str, run: int, config: dict) -> dict:
    log_path = harness.log_dir() / f"kill-{variant}-r{run}.log"
    log_path.unlink(missing_ok=True)
    args = harness.worker_args(variant, config)
    seed = config["seed"] + run
    started = time.monotonic()
    events = harness.make_events(config["events"], prefix=f"r{run}", seed=seed)
    with harness.run_space("m1", f"{variant}-r{run}", config["partitions"], keep=config.get("keep", False)) as space:
        # workload
        harness.produce_events(space.topic, events)

        # nemesis: the seeded kill schedule
        def after_kill(k, life, worker, exit_code):
            rows = harness.ledger_count(space.admin)
            results.progress(f"{variant} run {run}: kill {k} of {config['kills']}, ledger rows {rows}"
                             + (f" (it had exited by itself, code {exit_code})" if exit_code is not None else ""))
            # A worker that exited before its kill was not killed: that is a crash, kept apart.
            return {"kill": k, "life_s": life, "ledger_rows": rows, "exit_code": exit_code,
                    "counts": dict(worker.counts)}

        kill_log = nemesis.kill_loop(
            nemesis.kill_schedule(seed, config["kills"], config["life"]),
            start=lambda: harness.Worker(variant, space.topic, space.group, space.dsn, log_path, args),
            working=lambda worker: worker.working(space.group, space.topic) == "effect", after_kill=after_kill)
        if len(kill_log) < config["kills"]:
            results.progress(f"{variant} run {run}: nothing left to consume after {len(kill_log)} kills")

        # recovery, then the checker
        recovery = harness.recover(variant, space, deadline_s=max(300.0, config["events"] * 0.1), log_path=log_path,
                                   args=args)
        verdict = harness.verdict_of(events, space.admin)
        order = harness.order_of(events, space.admin)
    skipped = sum(entry["counts"].get("skipped", 0) for entry in kill_log) + recovery["counts"].get("skipped", 0)
    return {"variant": variant, "run": run, "seed": seed, "events": config["events"],
            "kills": sum(entry["exit_code"] is None for entry in kill_log),
            "crashes": [entry["exit_code"] for entry in kill_log if entry["exit_code"] is not None],
            **verdict, "order_violations": order, "skipped": skipped,
            "recovery_s": recovery["recovery_s"],
            "wall_s": round(time.monotonic() - started, 1), "kill_log": kill_log}


def summarise(runs: list[dict]) -> dict:
    return results.summarise_runs(runs, results.seen(runs), spreads=("duplicates", "lost", "kills", "wall_s"))


def table(summary: dict) -> str:
    def spread(stat):
        return f"{stat['median']:g} ({stat['min']:g}-{stat['max']:g})"

    return results.text_table(
        ["variant", "runs", "duplicates median (min-max)", "lost median (min-max)", "exact balances"],
        [[variant, s["runs"], spread(s["duplicates"]), spread(s["lost"]), f"{s['balances_exact_runs']}/{s['runs']}"]
         for variant, s in summary.items()])


def verdict_line(r: dict) -> str:
    exact = "balances exact" if r["balances_exact"] else "balances WRONG"
    crashed = f", {len(r['crashes'])} exited by themselves (codes {r['crashes']})" if r.get("crashes") else ""
    return (f"{r['variant']} run {r['run']}: {r['duplicates']} duplicates, {r['lost']} lost, {exact} "
            f"({r['kills']} kills{crashed}, {r['events']} events, {r['wall_s']:g}s)")


NAMES = {"a1": "auto-commit consumer (a1)", "a2": "batched auto-commit consumer (a2)",
         "b": "commit-after-the-database consumer (b)", "c": "inbox consumer (c)", "d": "batched inbox consumer (d)",
         "p": "pipelined batched inbox consumer (p)"}


def explain(document: dict) -> str:
    """Three lines for `make demo`: what was killed and how often, what was counted, where the rest is."""
    c, runs = document["config"], document["runs"]
    kills, events = sum(r["kills"] for r in runs), sum(r["events"] for r in runs)
    duplicates, lost = sum(r["duplicates"] for r in runs), sum(r["lost"] for r in runs)
    exact = sum(r["balances_exact"] for r in runs)
    names = [NAMES[v] for v in dict.fromkeys(r["variant"] for r in runs)]
    who = f"the {names[0]} was" if len(names) == 1 else f"the {', '.join(names[:-1])} and {names[-1]} were"
    return "\n".join([
        f"What you saw: {who} SIGKILLed {kills:,} times, each {c['life'][0]:g}-{c['life'][1]:g} s "
        f"after it began crediting, over {events:,} credits; then one last consumer drained the topic.",
        f"What was counted: ledger rows per event ID: {duplicates:,} duplicated, {lost:,} lost, balances exact in "
        f"{exact} of {len(runs)} runs; {sum(r['skipped'] for r in runs):,} redelivered messages met their inbox row "
        "and were skipped.",
        "The full table, every variant over 5 runs of 20 kills: README.md, section M1 (results/kill.json); "
        "`make measure` measures it again."])


def parse_args(argv=None):
    parser = cli.measurement("M1: hard-kill each consumer variant and count duplicates and losses.", None,
                             events=10000, work_ms=10, keep=True)
    parser.add_argument("--variant", required=True, choices=(*VARIANTS, "all", "frameworks"),
                        help="one variant; all: the post's four; frameworks: M9's, side by side")
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--life", type=nemesis.life_range, default=(1.0, 8.0), metavar="MIN,MAX",
                        help="seconds a worker lives after its first side effect")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--batch", type=int, default=500, help="d and p: messages per transaction")
    parser.add_argument("--lanes", type=int, default=16, help="k only: handlers at once")
    parser.add_argument("--connections", type=int, default=1, help="p only: statements at once")
    parser.add_argument("--explain", action="store_true", help="end with three lines on what was measured")
    args = parser.parse_args(argv)
    cli.at_least(parser, args, 1, "runs", "kills", "events", "partitions", "connections", "batch", "lanes",
                 "session_timeout_ms")
    cli.at_least(parser, args, 0, "work_ms")
    local = "kill.json" if args.variant == "all" else f"kill-{args.variant}.json"  # kill-frameworks.json: M9
    post_file = "kill.json" if args.variant in (*POST_VARIANTS, "all") else local
    args.committed = results.reader_paths(args, local, post_file)
    return args


def post_lines(groups) -> list[str]:
    post = results.read("post-figures.json")["kill"]["variants"]
    return [f"  {v}: duplicates {p['duplicates']['median']:,} ({p['duplicates']['min']:,}-{p['duplicates']['max']:,}), "
            f"lost {p['lost']['median']:,} ({p['lost']['min']:,}-{p['lost']['max']:,}) per run of 20 kills"
            for v, p in post.items() if v in groups]


def main(args) -> int:
    variants = {"all": POST_VARIANTS, "frameworks": registry.names(group="frameworks")}.get(args.variant,
                                                                                          (args.variant,))
    config = {"runs": args.runs, "kills": args.kills, "events": args.events, "partitions": args.partitions,
              "work_ms": args.work_ms, "life": list(args.life), "seed": args.seed,
              "session_timeout_ms": args.session_timeout_ms, "group_protocol": "classic",
              "kill": "SIGKILL (Popen.kill)", "life_from": "the worker's first side effect"}
    if args.variant in ("d", "p"):
        config["batch"] = args.batch
    if args.variant == "k":
        config["lanes"] = args.lanes
    if args.variant == "p" and args.connections != 1:
        config["connections"] = args.connections
    document = results.drive("measure_kill", args.out, config, [{"variant": v} for v in variants], run_once,
                             summarise, table, verdict_line, args.force, options={"keep": args.keep},
                             committed=args.committed, post_lines=post_lines)
    if args.explain:
        print("\n" + explain(document))
    return 0


if __name__ == "__main__":
    sys.exit(main(parse_args()))
