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
and the ledger has been still for a few seconds, under a deadline. Checker:
harness.check, plus the workers' logs: evictions (librdkafka's MAXPOLL line),
failed offset commits by error code, skipped duplicates.

Assumptions: the stack is up and nothing else measures on it. Under the
consumer protocol the session timeout is the broker's to set, so the harness
sets the group's `consumer.session.timeout.ms` and `consumer.heartbeat.interval.ms`
to the values the classic runs pass to the client.

    python measure_rebalance.py --variant b --runs 5
    python measure_rebalance.py --variant c --runs 5 --group-protocol consumer
"""
import collections
import datetime
import json
import re
import statistics
import sys
import time

import cli
import harness
from measure_kill import progress

VARIANTS = ("b", "c", "d")


APP_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \S+ \S+ (.*)$")
MAXPOLL_LINE = re.compile(r"^%\d\|(\d+\.\d+)\|MAXPOLL\|")
OWNERSHIP = re.compile(r"^partitions (assigned|revoked|lost): (.*)$")


def timeline(worker: str, lines) -> list[tuple]:
    """(unix time, worker, what, detail) for each log line the handover analysis needs:
    'evicted' (librdkafka's MAXPOLL line, which carries its own unix time), 'stall over',
    and 'assigned'/'revoked'/'lost' with a frozenset of partitions."""
    events = []
    for line in lines:
        if m := MAXPOLL_LINE.match(line):
            events.append((float(m.group(1)), worker, "evicted", None))
        elif m := APP_LINE.match(line):
            at = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            text = m.group(2)
            if owned := OWNERSHIP.match(text):
                listed = owned.group(2)
                parts = frozenset() if listed == "none" else frozenset(int(p) for p in listed.split(","))
                events.append((at, worker, owned.group(1), parts))
            elif text.startswith("stall over "):
                events.append((at, worker, "stall over", None))
    return events


def handovers(logs: dict) -> list[dict]:
    """Per eviction: who was given one of the evicted worker's partitions next ("other", or
    "self" once the zombie rejoined; None if nobody was), how long after librdkafka's MAXPOLL
    line (handover_s), and how long the zombie took to finish its stalled message (zombie_s).
    Whoever owns the partition next starts at the last committed offset: if the zombie's own
    commit failed, that owner, even the zombie itself, handles the message again.
    Pure: `logs` maps a worker's name to its log lines."""
    events = sorted(e for name, lines in logs.items() for e in timeline(name, lines))
    owned = collections.defaultdict(frozenset)
    found = []
    for i, (at, worker, what, parts) in enumerate(events):
        if what == "assigned":
            owned[worker] |= parts
        elif what in ("revoked", "lost"):
            owned[worker] -= parts
        elif what == "evicted":
            mine = owned[worker]
            owner = handover = zombie = None
            for later, other, kind, moved in events[i + 1:]:
                if zombie is None and other == worker and kind == "stall over":
                    zombie = round(later - at, 2)
                if owner is None and kind == "assigned" and moved & mine:
                    owner, handover = ("self" if other == worker else "other"), round(later - at, 2)
                if zombie is not None and owner is not None:
                    break
            found.append({"worker": worker, "next_owner": owner, "handover_s": handover, "zombie_s": zombie})
    return found


def run_once(variant: str, run: int, config: dict, log_dir) -> dict:
    protocol = config["group_protocol"]
    args = ("--work-ms", config["work_ms"], "--max-poll-interval-ms", config["max_poll_interval_ms"],
            "--slow-every", config["slow_every"], "--slow-seconds", config["slow_seconds"],
            "--group-protocol", protocol, "--session-timeout-ms", config["session_timeout_ms"],
            "--heartbeat-interval-ms", config["session_timeout_ms"] // 3)
    if variant == "d":
        args += ("--batch", config["batch"])
    started = time.monotonic()
    events = harness.make_events(config["events"], prefix=f"r{run}", seed=config["seed"] + run)
    name = f"rebalance-{variant}-{protocol}-stall{config['slow_seconds']:g}-r{run}"
    log_paths = [log_dir / f"{name}-w{i + 1}.log" for i in range(config["consumers"])]
    with harness.run_space("m2", f"{variant}-{protocol}-r{run}", config["partitions"], stalls=True) as space:
        if protocol == "consumer":
            # KIP-848 moves the session timeout and the heartbeat to the broker: the group gets what the
            # classic runs pass to the client. The heartbeat matters too: it is how fast a member hears
            # that a partition was taken from it or given to it.
            session_ms = config["session_timeout_ms"]
            harness.set_group_configs(space.group, {"consumer.session.timeout.ms": session_ms,
                                                    "consumer.heartbeat.interval.ms": session_ms // 3})
        harness.produce_events(space.topic, events)
        workers = []
        try:
            for log_path in log_paths:
                log_path.unlink(missing_ok=True)
                workers.append(harness.Worker(variant, space.topic, space.group, space.dsn, log_path, args))
            stalls = config["events"] // config["slow_every"] if config["slow_every"] else 0
            deadline = 300.0 + stalls * config["slow_seconds"] + config["events"] * config["work_ms"] / 1000
            settle_s = harness.settle(workers, space.dsn, config["events"], deadline, space.group, space.topic)
        finally:
            for worker in workers:
                worker.stop()
        counts, examples = harness.tally(workers)
        verdict = harness.verdict_of(events, space.dsn)
    moves = handovers({path.stem: path.read_text().splitlines() for path in log_paths})
    return {"variant": variant, "run": run, "group_protocol": protocol, "seed": config["seed"] + run,
            "events": config["events"], "stalls": counts.get("stalls", 0), "evictions": counts.get("evictions", 0),
            **verdict, "skipped": counts.get("skipped", 0), "commit_failed": harness.failures(counts),
            **handover_fields(moves),
            "settle_s": settle_s, "wall_s": round(time.monotonic() - started, 1), "examples": examples}


def handover_fields(moves: list[dict]) -> dict:
    return {"handover_s": [m["handover_s"] for m in moves],
            "moved_to_other": sum(m["next_owner"] == "other" for m in moves),
            "back_to_zombie": sum(m["next_owner"] == "self" for m in moves)}


def median_or_none(values):
    values = list(values)
    return round(statistics.median(values), 2) if values else None


def summarise(runs: list[dict]) -> dict:
    summary = {}
    for variant in VARIANTS:
        mine = [r for r in runs if r["variant"] == variant]
        if not mine:
            continue
        failed = collections.Counter()
        for r in mine:
            failed.update(r["commit_failed"])
        summary[variant] = {
            "runs": len(mine), "balances_exact_runs": sum(r["balances_exact"] for r in mine),
            "totals": {f: sum(r[f] for r in mine)
                       for f in ("evictions", "duplicates", "lost", "skipped", "stalls", "moved_to_other",
                                 "back_to_zombie")},
            "handover_s": median_or_none(h for r in mine for h in r["handover_s"] if h is not None),
            "commit_failed": dict(failed),
            **{f: harness.stats(r[f] for r in mine) for f in ("evictions", "duplicates", "lost", "skipped")},
        }
    return summary


def verdict_line(r: dict) -> str:
    exact = "balances exact" if r["balances_exact"] else "balances WRONG"
    failed = ", ".join(f"{code} x{n}" for code, n in r["commit_failed"].items()) or "none"
    return (f"{r['variant']} ({r['group_protocol']}) run {r['run']}: {r['evictions']} evictions, "
            f"{r['duplicates']} duplicates, {r['lost']} lost, {r['skipped']} skipped, {exact}; "
            f"failed commits: {failed}; partitions next to another member {r['moved_to_other']}, back to the "
            f"zombie {r['back_to_zombie']}, after {median_or_none(h for h in r['handover_s'] if h is not None)}s "
            "(median)")


def table(summary: dict) -> str:
    lines = ["variant  runs  evictions  duplicates  lost  skipped  to other / self  handover s  failed offset commits",
             "-------  ----  ---------  ----------  ----  -------  ---------------  ----------  ---------------------"]
    for variant, s in summary.items():
        t = s["totals"]
        failed = ", ".join(f"{code} x{n}" for code, n in s["commit_failed"].items()) or "none"
        lines.append(f"{variant:<7}  {s['runs']:>4}  {t['evictions']:>9}  {t['duplicates']:>10}  {t['lost']:>4}  "
                     f"{t['skipped']:>7}  {t['moved_to_other']:>7} / {t['back_to_zombie']:<5}  "
                     f"{str(s['handover_s']):>10}  {failed}")
    return "\n".join(lines) + "\n(totals over all runs)"


def main(args) -> int:
    config = {"runs": args.runs, "events": args.events, "consumers": args.consumers, "partitions": args.partitions,
              "slow_every": args.slow_every, "slow_seconds": args.slow_seconds,
              "max_poll_interval_ms": args.max_poll_interval_ms, "session_timeout_ms": args.session_timeout_ms,
              "group_protocol": args.group_protocol, "work_ms": args.work_ms, "seed": args.seed}
    if args.variant == "d":
        config["batch"] = args.batch
    results = harness.ResultsFile("measure_rebalance", args.out, config, args.force)
    log_dir = harness.log_dir()
    with harness.measurement_lock("measure_rebalance"):
        for run in range(1, args.runs + 1):
            if results.done(variant=args.variant, run=run):
                continue
            progress(f"{args.variant} ({args.group_protocol}) run {run} of {args.runs}: {args.events} events, "
                     f"{args.consumers} consumers")
            record = run_once(args.variant, run, config, log_dir)
            results.add(record, summarise)
            print(verdict_line(record))
            print(json.dumps(record), flush=True)
    results.close(table)
    return 0


def parse_args(argv=None):
    parser = cli.Parser(description="M2: evict a stalled consumer and count what the zombie writes.")
    parser.add_argument("--variant", required=True, choices=VARIANTS)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--consumers", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--slow-every", type=int, default=500)
    parser.add_argument("--slow-seconds", type=float, default=12)
    parser.add_argument("--max-poll-interval-ms", type=int, default=10000)
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--group-protocol", choices=("classic", "consumer"), default="classic")
    parser.add_argument("--work-ms", type=float, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--batch", type=int, default=500, help="d only: messages per transaction")
    parser.add_argument("--out", help="default results/rebalance-VARIANT-PROTOCOL.json")
    parser.add_argument("--force", action="store_true", help="overwrite an --out file with another config")
    args = parser.parse_args(argv)
    for name in ("runs", "events", "consumers", "partitions", "slow_every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.slow_seconds * 1000 <= args.max_poll_interval_ms:
        parser.error("--slow-seconds must outlast --max-poll-interval-ms, or nobody is evicted")
    if args.max_poll_interval_ms < args.session_timeout_ms:
        parser.error("librdkafka needs --max-poll-interval-ms >= --session-timeout-ms")
    if args.out is None:
        args.out = str(harness.RESULTS / f"rebalance-{args.variant}-{args.group_protocol}.json")
    return args


if __name__ == "__main__":
    sys.exit(main(parse_args()))
