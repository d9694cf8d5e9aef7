"""M7b, the producer's side: copies a publisher writes into the log, and what each consumer makes of them.

Claim: every way of publishing that survives its own failures publishes some events twice, under the
same event ID, and only a consumer that deduplicates by that ID (c, d) applies each once; b, which
commits offsets carefully but has no inbox, applies every copy.

Sources (`--source`), each a workload with its fault:
    relay     relay.py publishes events_outbox, which the application fills at `--rate`; the relay
              is SIGKILLed on a seeded schedule, and also crashes itself after the broker's
              acknowledgement, before marking the rows published (`--planted` times a run). It
              republishes on restart.
    retries   one producer session sends at `--rate` from a network namespace while its link to the
              broker is cut for `--outage-s` (longer than its socket.timeout.ms, after which
              librdkafka resends) and, once, the broker is SIGKILLed and restarted; librdkafka
              resends. With enable.idempotence off, then on.
    restart   a publisher journals each acknowledgement; it is SIGKILLed on the schedule, and each
              restart sends whatever has no journal line: the application's own retry, across
              producer sessions.
Then one worker of the variant (b, c or d) drains the topic. Counted: `log_copies` (records beyond
the first per ID, checker.log_copies), and the ledger's duplicates and lost (checker.check).

Assumptions: the stack is up and nothing else measures on it; retries needs root (ip netns), as M6's
partitions do.

    python -m measurements.measure_publish --source relay --variant c --runs 1
    python -m measurements.measure_publish --source all --variant all --runs 5
"""
import json
import sys
import threading
import time

import psycopg

from lab import checker, cli, harness, nemesis, registry, results
from lab.faults import partitions, restarts
from variants import relay

SOURCES = ("relay", "retries", "restart")
VARIANTS = ("b", "c", "d")  # --variant all
SHORTCUTS = registry.names(group="shortcuts")  # M9: the post's shortcuts meet the copies too (--variant shortcuts)
STATEFUL = ("upsert", "versioned")  # their effect is a state per account: checked by stale_states()


def stale_states(events: list[tuple[str, dict]], states: dict[int, int]) -> dict:
    """The checker for a state set by business key (pure): each account's state must be its
    newest event, the one with the highest seq. `states`: account -> the seq its state holds.
    Returns the accounts whose state is an older event (stale) or missing."""
    newest = {}
    for _, event in events:
        newest[event["account_id"]] = max(newest.get(event["account_id"], 0), event["seq"])
    return {"stale_accounts": sum(1 for a, seq in newest.items() if a in states and states[a] != seq),
            "missing_accounts": sum(1 for a in newest if a not in states)}


def unpublished(space) -> int:
    with psycopg.connect(space.admin) as conn:
        return conn.execute("SELECT count(*) FROM events_outbox WHERE published_at IS NULL").fetchone()[0]


def started(worker, finished=lambda: False) -> bool:
    """True once the worker acknowledged its first event; False if `finished()` first (or it exited)."""
    harness.wait_until(lambda: worker.first_effect.is_set() or worker.proc.poll() is not None or finished(), 120,
                       "a first acknowledgement, or nothing left to publish", interval_s=0.1)
    return worker.first_effect.is_set() and worker.proc.poll() is None


def through_relay(space, events, config, seed, log_path) -> list[dict]:
    """The application writes its events at --rate; relays come and go on the kill schedule."""
    def application():
        with psycopg.connect(space.publisher, autocommit=True) as conn:
            begun = time.monotonic()
            for n in range(0, len(events), 10):  # ten events per transaction, as a busy service would
                time.sleep(max(0.0, begun + n / config["rate"] - time.monotonic()))
                with conn.transaction():
                    for event_id, event in events[n:n + 10]:
                        relay.write_event(conn, event_id, space.topic, str(event["account_id"]), event)

    app = threading.Thread(target=application, daemon=True)
    app.start()
    every = max(1, len(events) // config["planted"])

    def start():
        return harness.Worker("kafka-relay", space.topic, space.group, space.publisher, log_path,
                              ("--crash-every", every, "--batch", 100))

    def after_kill(k, life, worker, exit_code):
        return {"fault": k, "life_s": life, "planted": exit_code is not None, "counts": dict(worker.counts)}

    done = lambda: not app.is_alive() and unpublished(space) == 0  # noqa: E731
    fault_log = nemesis.kill_loop(nemesis.kill_schedule(seed, config["kills"], config["life"]), start,
                                  lambda w: started(w, done), after_kill)
    app.join()
    last = start()  # the relay that finishes the outbox; its planted crashes, if any are left, restart it

    def finished() -> bool:
        nonlocal last
        if last.proc.poll() is not None:
            fault_log.append({"fault": len(fault_log) + 1, "life_s": None, "planted": True, "counts": {}})
            last = start()
        return done()

    try:
        harness.wait_until(finished, 300, "the last relay to empty the outbox", interval_s=0.2)
    finally:
        last.stop()
    return fault_log


def with_retries(space, events_file, journal, config, idempotence, log_path) -> list[dict]:
    """One producer session in a namespace; its broker link cut, and the broker restarted once."""
    ns = partitions.isolated()
    try:
        publisher = harness.Worker("publisher", space.topic, space.group, space.dsn, log_path, (
            "--events-file", events_file, "--journal", journal, "--rate", config["rate"], "--idempotence",
            idempotence, "--socket-timeout-ms", config["socket_timeout_ms"]), prefix=ns.prefix)
        if not started(publisher):
            raise RuntimeError(f"the publisher acknowledged nothing:\n{publisher.log_tail()}")
        kafka_port, _ = partitions.service_ports()
        fault_log = []
        for k in range(1, config["faults"] + 1):
            time.sleep(config["every_s"])
            if k == (config["faults"] + 1) // 2:
                what, outage = "broker-restart", restarts.broker_restart()
            else:
                what, outage = "cut", partitions.cut(ns, kafka_port, config["outage_s"])
            fault_log.append({"fault": k, "what": what, "outage_s": round(outage, 2)})
        harness.wait_until(lambda: publisher.proc.poll() is not None, 600, "the publisher to finish")
        publisher.stop()
        if publisher.proc.returncode != 0:
            raise RuntimeError(f"the publisher failed:\n{publisher.log_tail()}")
        return fault_log
    finally:
        ns.close()


def with_restarts(space, events_file, journal, config, seed, log_path) -> list[dict]:
    """A journaling publisher, SIGKILLed on the schedule and restarted, until it finishes."""
    def start():
        return harness.Worker("publisher", space.topic, space.group, space.dsn, log_path, (
            "--events-file", events_file, "--journal", journal, "--rate", config["rate"]))

    fault_log = nemesis.kill_loop(nemesis.kill_schedule(seed, config["kills"], config["life"]), start, started,
                                  lambda k, life, worker, _code: {"fault": k, "life_s": life})
    last = start()
    harness.wait_until(lambda: last.proc.poll() is not None, 600, "the last publisher to finish")
    last.stop()
    return fault_log


def run_once(source: str, idempotence: str, variant: str, run: int, config: dict) -> dict:
    name = f"{source}-{idempotence}-{variant}-r{run}"
    log_path = harness.fresh_log(f"publish-{name}")
    begun = time.monotonic()
    args, seed, events = harness.run_workload(variant, run, config)
    events_file, journal = harness.log_dir() / f"publish-{name}.events", harness.log_dir() / f"publish-{name}.acked"
    events_file.write_text("".join(json.dumps(pair) + "\n" for pair in events))
    journal.unlink(missing_ok=True)
    with harness.run_space("m7p", name, config["partitions"], keep=config.get("keep", False)) as space:
        if source == "relay":
            fault_log = through_relay(space, events, config, seed, log_path)
        elif source == "retries":
            fault_log = with_retries(space, events_file, journal, config, idempotence, log_path)
        else:
            fault_log = with_restarts(space, events_file, journal, config, seed, log_path)
        published = [event_id for event_id, _ in events]
        log = checker.log_copies(published, harness.record_ids(space.topic, "read_uncommitted"))
        recovery = harness.recover(variant, space, deadline_s=300, log_path=log_path, args=args)
        verdict = harness.verdict_of(events, space.admin)
        if variant in STATEFUL:
            with psycopg.connect(space.admin) as conn:
                states = dict(conn.execute("SELECT account_id, last_seq FROM account_state").fetchall())
            verdict.update(stale_states(events, states))
    return {"source": source, "idempotence": idempotence, "variant": variant, "run": run, "seed": seed,
            "events": config["events"], "faults": len(fault_log), "log_copies": log["copies"],
            "log_missing": log["missing"], **verdict, "skipped": recovery["counts"].get("skipped", 0),
            "wall_s": round(time.monotonic() - begun, 1), "fault_log": fault_log}


def plan_of(sources, variants) -> list[dict]:
    settings = {"relay": ("on",), "retries": ("off", "on"), "restart": ("on",)}
    return [{"source": s, "idempotence": i, "variant": v} for s in sources for i in settings[s] for v in variants]


def key(r: dict) -> str:
    return f"{r['source']} {r['idempotence']} {r['variant']}"


def summarise(runs: list[dict]) -> dict:
    return results.summarise_runs(runs, [key(p) for p in plan_of(SOURCES, results.seen(runs))], key=key,
                                  spreads=("log_copies", "log_missing", "duplicates", "lost", "faults", "wall_s"))


def table(summary: dict) -> str:
    def spread(stat):
        return f"{stat['median']:g} ({stat['min']:g}-{stat['max']:g})"

    return results.text_table(
        ["source", "idempotence", "variant", "runs", "faults", "log copies", "duplicates", "lost", "exact balances"],
        [[*name.split(" "), s["runs"], spread(s["faults"]), spread(s["log_copies"]), spread(s["duplicates"]),
          spread(s["lost"]), f"{s['balances_exact_runs']}/{s['runs']}"] for name, s in summary.items()],
        note="median (min-max) per run")


verdict_line = cli.verdict(
    "{source} (idempotence {idempotence}) -> {variant} run {run}: {log_copies} copies in the log, {duplicates} "
    "duplicates, {lost} lost{stale} ({faults} faults, {wall_s:g}s)",
    stale=lambda r: f", {r['stale_accounts']} accounts left on an older state" if "stale_accounts" in r else "")


def parse_args(argv=None):
    parser = cli.measurement("M7b: publishers that publish twice, and what b, c and d make of the copies.",
                             None, events=5000, keep=True)
    parser.add_argument("--source", required=True, choices=(*SOURCES, "all"))
    parser.add_argument("--variant", required=True, choices=(*registry.names(kind="consumer"), "all", "shortcuts"),
                        help="all: b, c and d; shortcuts: the post's (offset-dedup, upsert, versioned)")
    parser.add_argument("--rate", type=float, default=500, help="events a second the application publishes")
    parser.add_argument("--kills", type=int, default=5, help="relay, restart: SIGKILLs a run")
    parser.add_argument("--life", type=nemesis.life_range, default=(0.5, 3.0), metavar="MIN,MAX",
                        help="relay, restart: seconds a process lives after its first acknowledgement")
    parser.add_argument("--planted", type=int, default=5, help="relay: crashes between the ack and the mark")
    parser.add_argument("--faults", type=int, default=3, help="retries: cuts, with a broker restart in the middle")
    cli.fault_pacing(parser, 2.0, 4.0, "retries: how long a cut lasts", every="retries: seconds between faults")
    parser.add_argument("--socket-timeout-ms", type=int, default=2000,
                        help="retries: the producer's wait for an answer before it resends")
    args = parser.parse_args(argv)
    results.reader_paths(args, "publish.json")  # a reader's own file, unless --out names one
    cli.at_least(parser, args, 1, "runs", "events", "partitions", "kills", "planted", "faults", "socket_timeout_ms")
    cli.positive(parser, args, "rate", "every_s", "outage_s")
    return args


def main(args) -> int:
    sources = SOURCES if args.source == "all" else (args.source,)
    variants = {"all": VARIANTS, "shortcuts": SHORTCUTS}.get(args.variant, (args.variant,))
    config = results.config_of(args, "out", "force", "keep", "source", "variant", life=list(args.life), batch=500,
                               acks="all", consumer="one worker of the variant, after publishing, no faults")
    results.drive("measure_publish", args.out, config, plan_of(sources, variants), run_once, summarise, table,
                  verdict_line, args.force, options={"keep": args.keep})
    return 0


if __name__ == "__main__":
    sys.exit(main(parse_args()))
