"""M7a, exactly-once: what Kafka's transactions guarantee, counted on both sides of the line.

Claim: Kafka's exactly-once loop (consume_eos.py) keeps the output topic exact under crashes,
read_committed: no copies, nothing missing. It does not reach the database. A credit written to
Postgres inside the loop outlives the Kafka transaction that aborts around it, and the input is
handed over again: without the inbox (e) the ledger duplicates; through handle_once (f) it does not.

Workload: `--events` credits over 100 accounts, published up front. Faults, one kind per run
(`--point`):
    kill             M1's schedule: one worker at a time, SIGKILLed `--life` seconds after its first
                     credit, `--kills` times
    pg-committed     planted: the worker exits right after a credit's Postgres commit, before its
                     batch's commit_transaction
    kafka-committed  planted: the worker exits right after commit_transaction, before its next poll
                     (the control: nothing is owed)
A planted crash fires once for each `events / --planted`-th event, the first time a worker reaches
the point with it; the harness restarts the worker until the topic is drained. Recovery: one worker
drains, under a deadline. Checker: checker.check on the ledger; checker.log_copies on the output
topic, read with read_committed (what a downstream consumer sees) and read_uncommitted (aborted
copies included).

Assumptions: the stack is up and nothing else measures on it (a lock enforces that); one worker at a
time, so one transactional.id per run, stable across restarts.

    python -m measurements.measure_eos --variant f --runs 1 --kills 5 --events 2000
    python -m measurements.measure_eos --variant all --runs 5 --kills 20 --events 10000
"""
import collections
import sys
import time

from lab import checker, cli, harness, nemesis, registry, results
from lab import worker as worker_script

VARIANTS = registry.names(kind="eos")  # e and f: Kafka's exactly-once loop, without and with the inbox
# The worker's crash points where e and f can stop themselves; its third, "acked", is the
# relay's (kafka-relay), which e and f never pass, so a run there would plant nothing.
PLANTED_POINTS = ("pg-committed", "kafka-committed")
assert set(PLANTED_POINTS) <= set(worker_script.CRASH_POINTS)
POINTS = ("kill", *PLANTED_POINTS)


# A worker that exits by itself, not at its planted point (a producer fenced after a stall
# longer than its transaction's timeout, say), is started again, as a supervisor would, and
# recorded as a crash; this many in one run and the loop gives up, leaving the rest to recovery.
MAX_UNPLANNED_EXITS = 20


def planted_loop(start, space, crashes: int, deadline_s: float) -> list[dict]:
    """Start a worker; when it crashes itself, start the next, until the topic is drained."""
    log = []
    while sum("exit_code" in entry for entry in log) < MAX_UNPLANNED_EXITS:
        worker = start()
        harness.wait_until(lambda w=worker: w.proc.poll() is not None or harness.lag(space.group, space.topic) == 0,
                           deadline_s, "a planted crash, or the topic drained", interval_s=0.5)
        code = worker.proc.poll()
        worker.kill() if code is not None else worker.stop()
        if code is None:
            return log
        entry = {"crash": len(log) + 1, "ledger_rows": harness.ledger_count(space.admin), "counts": dict(worker.counts)}
        if code != worker_script.EXIT_CRASHED_AFTER_EFFECT:
            entry["exit_code"] = code  # counted in the run's crashes, beside the planted ones
            results.progress(f"worker exited with {code}, not at its planted point:\n{worker.log_tail()}")
        log.append(entry)
        results.progress(f"crash {len(log)} (about {crashes} planted), ledger rows {log[-1]['ledger_rows']}")
    return log


def run_once(variant: str, point: str, run: int, config: dict) -> dict:
    log_path = harness.fresh_log(f"eos-{variant}-{point}-r{run}")
    args, seed, events = harness.run_workload(variant, run, config)
    started = time.monotonic()
    with harness.run_space("m7", f"{variant}-{point}-r{run}", config["partitions"],
                           keep=config.get("keep", False)) as space:
        harness.create_topic(space.topic + ".credited", config["partitions"])
        harness.produce_events(space.topic, events)

        def start(extra=()):
            return harness.Worker(variant, space.topic, space.group, space.dsn, log_path, args + extra)

        if point == "kill":
            def after_kill(k, life, worker, exit_code):
                rows = harness.ledger_count(space.admin)
                results.progress(f"{variant} run {run}: kill {k} of {config['kills']}, ledger rows {rows}")
                # exit_code: None when the kill landed; a worker that had exited by itself crashed
                return {"kill": k, "life_s": life, "ledger_rows": rows, "exit_code": exit_code,
                        "counts": dict(worker.counts)}

            fault_log = nemesis.kill_loop(
                nemesis.kill_schedule(seed, config["kills"], config["life"]), start=start,
                working=lambda worker: worker.working(space.group, space.topic) == "effect", after_kill=after_kill)
        else:
            every = max(1, config["events"] // config["planted"])
            fault_log = planted_loop(lambda: start(("--crash-point", point, "--crash-every", every)), space,
                                     config["planted"], deadline_s=max(300.0, config["events"] * 0.1))

        recovery = harness.recover(variant, space, deadline_s=max(300.0, config["events"] * 0.1), log_path=log_path,
                                   args=args)
        verdict = harness.verdict_of(events, space.admin)
        committed = harness.record_ids(space.topic + ".credited", "read_committed")
        everything = harness.record_ids(space.topic + ".credited", "read_uncommitted")
    counts = collections.Counter(recovery["counts"])
    for entry in fault_log:
        counts.update(entry["counts"])
    topic = checker.log_copies([event_id for event_id, _ in events], committed)
    return {"variant": variant, "point": point, "run": run, "seed": seed, "events": config["events"],
            "faults": sum(entry.get("exit_code") is None for entry in fault_log),
            "crashes": [entry["exit_code"] for entry in fault_log if entry.get("exit_code") is not None], **verdict,
            "topic_copies": topic["copies"], "topic_missing": topic["missing"], "topic_unexpected": topic["unexpected"],
            "aborted_copies": len(everything) - len(committed),
            "transactions_aborted": counts.get("aborted", 0), "skipped": counts.get("skipped", 0),
            "recovery_s": recovery["recovery_s"], "wall_s": round(time.monotonic() - started, 1),
            "fault_log": fault_log}


def summarise(runs: list[dict]) -> dict:
    return results.summarise_runs(
        runs, [f"{v} {p}" for v in results.seen(runs) for p in POINTS], key=lambda r: f"{r['variant']} {r['point']}",
        spreads=("duplicates", "lost", "topic_copies", "topic_missing", "aborted_copies", "faults", "wall_s"))


def table(summary: dict) -> str:
    def spread(stat):
        return f"{stat['median']:g} ({stat['min']:g}-{stat['max']:g})"

    return results.text_table(
        ["variant", "fault", "runs", "faults", "ledger duplicates", "ledger lost", "topic copies", "topic missing",
         "aborted copies"],
        [[*key.split(" "), s["runs"], spread(s["faults"]), spread(s["duplicates"]), spread(s["lost"]),
          spread(s["topic_copies"]), spread(s["topic_missing"]), spread(s["aborted_copies"])]
         for key, s in summary.items()], note="median (min-max) per run; topic: read_committed")


verdict_line = cli.verdict("{variant} {point} run {run}: ledger {duplicates} duplicates, {lost} lost; output topic "
                           "{topic_copies} copies, {topic_missing} missing (read_committed), {aborted_copies} aborted "
                           "copies ({faults} faults, {wall_s:g}s)")


def parse_args(argv=None):
    parser = cli.measurement("M7a: Kafka's exactly-once loop under crashes, counted in the topic and the ledger.",
                             None, events=10000, work_ms=10, keep=True)
    parser.add_argument("--variant", required=True, choices=(*VARIANTS, "all"))
    parser.add_argument("--point", choices=(*POINTS, "all"), default="all", help="which fault (default all)")
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--life", type=nemesis.life_range, default=(1.0, 8.0), metavar="MIN,MAX",
                        help="seconds a worker lives after its first side effect")
    parser.add_argument("--planted", type=int, default=5, help="planted crashes per run, at a named point")
    parser.add_argument("--every", type=int, default=100, help="input messages per Kafka transaction")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    args = parser.parse_args(argv)
    results.reader_paths(args, "eos.json")  # a reader's own file, unless --out names one
    cli.at_least(parser, args, 1, "runs", "kills", "planted", "events", "partitions", "every", "session_timeout_ms")
    cli.at_least(parser, args, 0, "work_ms")
    return args


def main(args) -> int:
    variants = VARIANTS if args.variant == "all" else (args.variant,)
    points = POINTS if args.point == "all" else (args.point,)
    config = results.config_of(args, "out", "force", "keep", "variant", "point", life=list(args.life),
                               group_protocol="classic", kill="SIGKILL (Popen.kill)",
                               planted_crash="os._exit(3) at the named point", isolation="read_committed consumer, "
                               "transactional producer (transaction.timeout.ms 10000)")
    results.drive("measure_eos", args.out, config, [{"variant": v, "point": p} for p in points for v in variants],
                  run_once, summarise, table, verdict_line, args.force, options={"keep": args.keep})
    return 0


if __name__ == "__main__":
    sys.exit(main(parse_args()))
