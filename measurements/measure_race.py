"""The race: several consumers of one group handling copies of the same events at
the same moment, on a few hot accounts.

Claim: however the consumers interleave, every variant with the inbox applies each event once,
exactly, and none of them dies: the batched inbox takes its locks in one order (inbox rows, then
accounts, in id order, in a mode the ledger's foreign-key check does not wait on), and a transaction
the server rolls back anyway (a deadlock, a serialization failure) is run again by
variants/common.Database, not fatal.

Workload: `--events` credits over `--accounts` accounts (few: hot rows), each published `--copies`
times, to as many distinct partitions of a `--partitions` topic (seeded), the copies side by side in
the log, as after a relay's republish. Publishing waits until every consumer holds partitions, so
the copies are met by different consumers at about the same time. Consumers: `--consumers` worker
processes of one variant in one group (outbox: as many relays beside them, racing on FOR UPDATE SKIP
LOCKED). Nemesis: none but the concurrency. Recovery: every event applied, lag 0, nothing pending,
effects still, under a deadline; a consumer that dies is counted and the others carry on. Checker:
checker.check on (published events, the ledger; the provider's charges for external and outbox).
Counted beside it: transactions retried, consumers that died.

Assumptions: the stack is up; counting only, so it may run beside a timing measurement on a second
stack.

    python -m measurements.measure_race --variant all --consumers 3 --copies 3 --accounts 20 --runs 5
"""
import random
import sys
import time

from lab import checker, cli, harness, results
from variants import provider

# variant: (worker variant, provider mode or None when the effect is the ledger); b, no inbox, is the control
VARIANTS = {"b": ("b", None), "c": ("c", None), "d": ("d", None), "external": ("ext", "keys"),
            "outbox": ("outbox", "keys"), "o": ("o", None), "p": ("p", None)}
COUNTS = ("duplicates", "lost", "retried", "died", "skipped")


def copies_of(events: list, copies: int, partitions: int, seed: int) -> tuple[list, list[int]]:
    """Each event `copies` times, side by side, on distinct partitions chosen by the seed."""
    rng = random.Random(seed)
    where = [partition for _ in events for partition in rng.sample(range(partitions), copies)]
    return [event for event in events for _ in range(copies)], where


def run_once(variant: str, run: int, config: dict) -> dict:
    worker_variant, mode = VARIANTS[variant]
    seed = config["seed"] + run
    started = time.monotonic()
    events = harness.make_events(config["events"], prefix=f"r{run}", accounts=config["accounts"], seed=seed)
    with harness.run_space("race", f"{variant}-r{run}", config["partitions"], accounts=config["accounts"]) as space:
        running = provider.Running(mode, space.provider) if mode else None
        args = harness.worker_args(worker_variant, config, provider_url=running.url if running else None)
        consumers, relays = [], []
        try:
            # the workload's consumers (no nemesis: the concurrency is the fault)
            consumers = harness.start_workers(worker_variant, space, f"race-{variant}-r{run}", args,
                                              config["consumers"])
            if worker_variant == "outbox":
                relays = harness.start_workers("relay", space, f"race-{variant}-r{run}-relay",
                                               ("--provider-url", running.url), config["consumers"])
            harness.wait_until(lambda: all(w.assignment for w in consumers) and set().union(
                *(w.assignment for w in consumers)) == set(range(config["partitions"])), 120,
                f"all {config['consumers']} consumers to hold partitions")
            messages, partitions = copies_of(events, config["copies"], config["partitions"], seed)
            harness.produce_events(space.topic, messages, partitions=partitions)
            # recovery, then the checker
            recovery = harness.settle(
                consumers + relays, space.admin, config["events"], 600.0, space.group, space.topic,
                applied=harness.provider_applied if mode else harness.ledger_applied,
                pending=harness.external_pending if mode else None, tolerate_exits=True)
            dead = [w for w in consumers + relays if w.proc.poll() is not None]
            verdict = harness.verdict_of(events, space.admin, on_provider=bool(mode))
        finally:
            for worker in consumers + relays:
                worker.stop()
            if running:
                running.stop()
    counts, _ = checker.tally(consumers + relays)
    return {"variant": variant, "run": run, "seed": seed, "events": config["events"],
            "messages": len(messages), **verdict, "retried": sum(checker.failures(counts, "retried").values()),
            "retried_by_cause": checker.failures(counts, "retried"), "died": len(dead),
            "died_of": [{"exit": w.proc.returncode, "last_lines": w.log_tail().splitlines()[-3:]} for w in dead],
            "died_of_deadlock": counts["died_of_deadlock"], "skipped": counts["skipped"],
            "settle_s": recovery.seconds, "settled": recovery.settled, "crashed": recovery.crashed,
            "wall_s": round(time.monotonic() - started, 1)}


def summarise(runs: list[dict]) -> dict:
    return results.summarise_runs(runs, VARIANTS, totals=COUNTS, spreads=("duplicates", "lost", "wall_s"))


def table(summary: dict) -> str:
    return results.text_table(
        ["variant", "runs", "duplicates", "lost", "retried", "died", "skipped", "exact"],
        [[variant, s["runs"], *(s["totals"][f] for f in COUNTS),
          f"{s['balances_exact_runs']}/{s['runs']}"] for variant, s in summary.items()], "(totals over all runs)")


verdict_line = cli.verdict("{variant} run {run}: {duplicates} duplicates, {lost} lost, balances {balances}, {retried} "
                           "retried, {died} consumers died ({messages} messages, {wall_s:g}s)",
                           balances=lambda r: "exact" if r["balances_exact"] else "WRONG")


def parse_args(argv=None):
    parser = cli.measurement("The race: consumers racing on copies of the same events; count effects.", None,
                             events=3000, work_ms=0)
    parser.add_argument("--variant", required=True, type=cli.names_of((*VARIANTS, "all")),
                        help="one variant, or several (c,p), side by side; all: every one")
    parser.add_argument("--consumers", type=int, default=3)
    parser.add_argument("--copies", type=int, default=3, help="times each event is published, on distinct partitions")
    parser.add_argument("--accounts", type=int, default=20)
    parser.add_argument("--batch", type=int, default=100, help="d and p: messages per transaction")
    args = parser.parse_args(argv)
    results.reader_paths(args, "race.json")  # a reader's own file, unless --out names one
    if "all" in args.variant and len(args.variant) > 1:
        parser.error(f"--variant {','.join(args.variant)}: all is every variant already; name it alone")
    cli.at_least(parser, args, 1, "consumers", "copies", "accounts", "runs", "events", "partitions", "batch")
    if args.copies > args.partitions:
        parser.error(f"--copies {args.copies} needs at least as many --partitions (got {args.partitions})")
    cli.at_least(parser, args, 0, "work_ms")
    return args


def main(args) -> int:
    config = results.config_of(args, "variant", "out", "force", session_timeout_ms=6000, heartbeat_interval_ms=2000,
                               lease_s=2.0, policy="keys")
    variants = list(VARIANTS) if "all" in args.variant else args.variant
    results.drive("measure_race", args.out, config, [{"variant": v} for v in variants], run_once, summarise, table,
                  verdict_line, args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main(parse_args()))
