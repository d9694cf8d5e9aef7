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
under a deadline. Checker: harness.check on (published IDs, ledger rows).

Assumptions: the stack is up and nothing else measures on it (a lock enforces
that); each run has its own schema, topic and group.

    python measure_kill.py --variant c
    python measure_kill.py --variant all --runs 5 --kills 20 --events 10000
"""
import argparse
import json
import random
import sys
import time
from pathlib import Path

import cli
import harness

POST_VARIANTS = ("a1", "a2", "b", "c")  # the post's table: what --variant all runs
VARIANTS = (*POST_VARIANTS, "d")
FIRST_EFFECT_S = 120.0


def kill_schedule(seed: int, kills: int, life: tuple[float, float]) -> list[float]:
    """Seconds each worker lives after its first side effect; the same for every variant."""
    rng = random.Random(seed)
    return [round(rng.uniform(*life), 3) for _ in range(kills)]


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def wait_for_work(worker: harness.Worker, group: str, topic: str) -> bool:
    """True once the worker applied a credit; False if there is nothing left to consume."""
    end = time.monotonic() + FIRST_EFFECT_S
    while time.monotonic() < end:
        if worker.first_effect.wait(1.0):
            return True
        if worker.proc.poll() is not None:
            raise RuntimeError(f"worker exited with {worker.proc.returncode} before any credit:\n{worker.log_tail()}")
        if harness.lag(group, topic) == 0:
            return False
    raise RuntimeError(f"worker applied nothing within {FIRST_EFFECT_S:g}s:\n{worker.log_tail()}")


def run_once(variant: str, run: int, config: dict, log_dir: Path, keep: bool) -> dict:
    log_path = log_dir / f"kill-{variant}-r{run}.log"
    log_path.unlink(missing_ok=True)
    worker_args = ("--work-ms", config["work_ms"], "--session-timeout-ms", config["session_timeout_ms"])
    if variant == "d":
        worker_args += ("--batch", config["batch"])
    if config.get("heartbeat_interval_ms"):
        worker_args += ("--heartbeat-interval-ms", config["heartbeat_interval_ms"])
    started = time.monotonic()
    events = harness.make_events(config["events"], prefix=f"r{run}", seed=config["seed"] + run)
    with harness.run_space("m1", f"{variant}-r{run}", config["partitions"], keep=keep) as space:
        topic, group, dsn = space.topic, space.group, space.dsn
        harness.produce_events(topic, events)
        kill_log = []
        for k, life in enumerate(kill_schedule(config["seed"] + run, config["kills"], config["life"]), 1):
            worker = harness.Worker(variant, topic, group, dsn, log_path, worker_args)
            if not wait_for_work(worker, group, topic):
                worker.kill()
                progress(f"{variant} run {run}: nothing left to consume before kill {k}; stopping the kills")
                break
            time.sleep(life)  # the fault schedule itself: the kill lands wherever the worker happens to be
            worker.kill()
            rows = harness.ledger_count(dsn)
            kill_log.append({"kill": k, "life_s": life, "ledger_rows": rows, "counts": dict(worker.counts)})
            progress(f"{variant} run {run}: kill {k} of {config['kills']}, ledger rows {rows}")
        recovery = harness.recover(variant, topic, group, dsn, deadline_s=max(300.0, config["events"] * 0.1),
                                   log_path=log_path, args=worker_args)
        verdict = harness.verdict_of(events, dsn)
    skipped = sum(entry["counts"].get("skipped", 0) for entry in kill_log) + recovery["counts"].get("skipped", 0)
    return {"variant": variant, "run": run, "seed": config["seed"] + run, "events": config["events"],
            "kills": len(kill_log), **verdict, "skipped": skipped, "recovery_s": recovery["recovery_s"],
            "wall_s": round(time.monotonic() - started, 1), "kill_log": kill_log}


def summarise(runs: list[dict]) -> dict:
    summary = {}
    for variant in VARIANTS:
        mine = [r for r in runs if r["variant"] == variant]
        if mine:
            summary[variant] = {"runs": len(mine), "balances_exact_runs": sum(r["balances_exact"] for r in mine),
                                **{field: harness.stats(r[field] for r in mine)
                                   for field in ("duplicates", "lost", "kills", "wall_s")}}
    return summary


def table(summary: dict) -> str:
    lines = ["variant  runs  duplicates median (min-max)  lost median (min-max)  exact balances",
             "-------  ----  ----------------------------  ---------------------  --------------"]
    for variant, s in summary.items():
        d, lost = s["duplicates"], s["lost"]
        lines.append(f"{variant:<7}  {s['runs']:>4}  {d['median']:>8g} ({d['min']:g}-{d['max']:g}){'':<10}"
                     f"  {lost['median']:>6g} ({lost['min']:g}-{lost['max']:g}){'':<7}"
                     f"  {s['balances_exact_runs']}/{s['runs']}")
    return "\n".join(lines)


def verdict_line(r: dict) -> str:
    exact = "balances exact" if r["balances_exact"] else "balances WRONG"
    return (f"{r['variant']} run {r['run']}: {r['duplicates']} duplicates, {r['lost']} lost, {exact} "
            f"({r['kills']} kills, {r['events']} events, {r['wall_s']:g}s)")


def main(args) -> int:
    variants = POST_VARIANTS if args.variant == "all" else (args.variant,)
    config = {"runs": args.runs, "kills": args.kills, "events": args.events, "partitions": args.partitions,
              "work_ms": args.work_ms, "life": list(args.life), "seed": args.seed,
              "session_timeout_ms": args.session_timeout_ms, "group_protocol": "classic",
              "kill": "SIGKILL (Popen.kill)", "life_from": "the worker's first side effect"}
    if args.variant == "d":
        config["batch"] = args.batch
    results = harness.ResultsFile("measure_kill", args.out, config, args.force)
    log_dir = harness.log_dir()
    with harness.measurement_lock("measure_kill"):
        for run in range(1, args.runs + 1):  # interleaved, so machine noise spreads over every variant
            for variant in variants:
                if results.done(variant=variant, run=run):
                    continue
                progress(f"{variant} run {run} of {args.runs}: {args.events} events, {args.kills} kills")
                record = run_once(variant, run, config, log_dir, args.keep)
                results.add(record, summarise)
                print(verdict_line(record))
                print(json.dumps({k: v for k, v in record.items() if k != "kill_log"}), flush=True)
    results.close(table)
    return 0


def life_range(text: str) -> tuple[float, float]:
    try:
        low, high = (float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MIN,MAX in seconds, got {text!r}") from None
    if not 0 < low <= high:
        raise argparse.ArgumentTypeError(f"need 0 < MIN <= MAX, got {text!r}")
    return low, high


def parse_args(argv=None):
    parser = cli.Parser(description="M1: hard-kill each consumer variant and count duplicates and losses.")
    parser.add_argument("--variant", required=True, choices=(*VARIANTS, "all"))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--events", type=int, default=10000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--work-ms", type=float, default=10, help="handler sleep per message")
    parser.add_argument("--life", type=life_range, default=(1.0, 8.0), metavar="MIN,MAX",
                        help="seconds a worker lives after its first side effect")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--batch", type=int, default=500, help="d only: messages per transaction")
    parser.add_argument("--out", help="results JSON (default results/kill.json, or results/kill-VARIANT.json)")
    parser.add_argument("--keep", action="store_true", help="keep each run's schema and topic")
    parser.add_argument("--force", action="store_true", help="overwrite an --out file with another config")
    args = parser.parse_args(argv)
    for name in ("runs", "kills", "events", "partitions"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.work_ms < 0:
        parser.error("--work-ms cannot be negative")
    if args.out is None:
        args.out = str(harness.RESULTS / ("kill.json" if args.variant == "all" else f"kill-{args.variant}.json"))
    return args


if __name__ == "__main__":
    sys.exit(main(parse_args()))
