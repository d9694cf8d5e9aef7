"""M10: the faults a reviewer tries next, counted like M1 and M6.

Claim: the inbox (c, d, p, and o with its offsets in the database) keeps every credit
exactly once through a paused consumer, a graceful stop at any moment, a server that
refuses connections when the consumer starts, and a COMMIT whose reply never reaches the
client. Without it (b) the commit the client never hears of is credited twice.

Faults, one kind per run, each healed (lab/faults/, those that act on the run's consumers;
each module says how it lands):

    pause-consumer      the first of two consumers SIGSTOPped for --pause-s, past the session
                        timeout; the other may wait on its inbox row lock (--idle-tx-timeout-ms)
    pause-postgres      the server process serving the first of two consumers SIGSTOPped for
                        --pause-s, past max.poll.interval.ms
    sigterm             SIGTERM at a random moment, SIGKILL after --stop-deadline-s
    pg-max-connections  a SIGKILLed consumer started again while its role is refused, --outage-s
    lost-commit-reply   a proxy (lab/pgproxy.py) lets a COMMIT land and cuts the reply
    disk-full           the run's tablespace, a small tmpfs, filled for --outage-s
    offsets-expired     the empty group outlives offsets.retention.minutes (or, --delete-group,
                        is deleted) and the topic replays; --forgotten F: retention has first
                        forgotten that share of the inbox
    topic-recreated     the topic deleted and made again, as many new credits published to it

Workload: `--events` credits on 6 partitions, published up front, handler sleep
`--work-ms`; --faults faults --every-s apart. A worker that exits on its own is started
again at once, as a supervisor would (its exit code is recorded), and each fault meets a live
one that has credited something (Supervised.working). After a fault the run waits for the
next credit; if none comes within RESUME_DEADLINE_S, or a run's first part (every credit
applied, before topic-recreated or offsets-expired) never ends, the run is recorded as stuck
(`stuck`), not raised away. Recovery: the consumers run on until every event is applied, the
lag is 0 and the ledger is still, under a deadline; what never came is lost.
Checker: checker.check, and checker.longest_wait: the longest an account (a partition) went
without a credit.

Assumptions: the embedded stack (stack.py) is up and nothing else measures on it.

    python -m measurements.measure_faults_more --fault lost-commit-reply --variant b,c,d,p,o --runs 5
"""
import contextlib
import random
import sys
import time
import uuid

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from lab import checker, cli, faults, harness, nemesis, registry, results

FAULTS = faults.select("pool")
# How long a run waits for a credit after a fault (or for every credit, before a fault that needs
# them all); past it the run is recorded as stuck, and recovery counts what is missing.
RESUME_DEADLINE_S = 300.0
VARIANTS = registry.names(kind="consumer")  # any consumer in a group (the committed files: b, c, d, p, o, a2)


class Supervised:
    """The run's consumers, each started again as soon as it exits on its own."""

    def __init__(self, variant: str, space, dsn: str, args: tuple, name: str, count: int):
        self.variant, self.space, self.dsn, self.args, self.name = variant, space, dsn, args, name
        self.live: list[harness.Worker] = []
        self.all: list[harness.Worker] = []
        self.exits: list[int] = []  # exit codes of the lives that ended on their own
        for _ in range(count):
            self.start()

    def start(self) -> harness.Worker:
        life = len(self.all) + 1
        log_path = harness.fresh_log(f"{self.name}-life{life}")
        # its own application_name, so pg_stat_activity can tell this life's backend from the others'
        application_name = f"m10-{uuid.uuid4().hex[:8]}-life{life}"
        worker = harness.Worker(self.variant, self.space.topic, self.space.group,
                                make_conninfo(self.dsn, application_name=application_name), log_path, self.args)
        worker.application_name = application_name
        self.live.append(worker)
        self.all.append(worker)
        return worker

    def replace(self, worker: harness.Worker) -> harness.Worker:
        self.live.remove(worker)
        return self.start()

    def supervise(self) -> None:
        for worker in list(self.live):
            if worker.proc.poll() is not None:
                self.exits.append(worker.proc.returncode)
                worker.stop()
                self.replace(worker)

    def working(self, events: int, timeout_s: float = 60.0) -> bool:
        """Wait (bounded) until every live consumer applied a credit, or none is left to apply:
        one started again since the last look has nothing in flight, and a fault that met it
        would meet nothing. Whether they all were at work."""
        with contextlib.suppress(TimeoutError):
            harness.wait_until(lambda: self.supervise() or all(w.first_effect.is_set() for w in self.live) or
                               harness.distinct_applied(self.space.admin) >= events, timeout_s, "consumers at work")
        return all(w.first_effect.is_set() for w in self.live)

    def wait(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.supervise()
            time.sleep(0.1)

    def stop(self) -> None:
        for worker in self.live:
            worker.stop()


def all_applied_then_stop(pool: Supervised, events: int) -> tuple[int, bool]:
    """Wait until every credit is applied, or every message is read and its offset committed (a
    variant that loses leaves no lag either), or RESUME_DEADLINE_S passed; then stop every
    consumer cleanly (the group is left empty). Returns how many were applied by then, and
    whether the consumers were stuck (the deadline passed). The fault lands anyway, and the
    checker counts what is missing."""
    space = pool.space
    try:
        harness.wait_until(lambda: pool.supervise() or harness.distinct_applied(space.admin) >= events or
                           harness.lag(space.group, space.topic) == 0, RESUME_DEADLINE_S, "every credit applied")
        stuck = False
    except TimeoutError:
        stuck = True
    applied = harness.distinct_applied(space.admin)
    pool.stop()
    pool.live.clear()
    return applied, stuck


def inject(spec: faults.Fault, scene: faults.Scene) -> dict:
    """One fault, healed before it returns; what it met."""
    # a consumer that exited since the last look is started again first, and given time to
    # reach its work: the fault meets a live consumer with something in flight
    pool, config = scene.pool, scene.config
    scene.at_work = pool.working(config["events"])
    scene.target = pool.live[0]
    if spec.in_handler and config.get("in_handler"):
        # the tests: aim at whichever consumer (or its server process) is stalled inside a transaction
        stalls = {id(w): w.counts.get("stalls", 0) for w in pool.live}
        scene.target = harness.wait_until(lambda: next((w for w in pool.live if w.counts.get("stalls", 0) >
                                                        stalls.get(id(w), 0)), None), 120, "a handler to stall")
    return spec.land(scene)


def run_once(fault: str, variant: str, run: int, config: dict) -> dict:
    spec = faults.get(fault)
    client = {key: config[key] for key in ("work_ms", "session_timeout_ms", "max_poll_interval_ms", "batch")}
    if config.get("in_handler"):  # every in_handler-th event's first handling stalls in_handler_s, in its transaction
        client.update(slow_every=config["in_handler"], slow_seconds=config["in_handler_s"])
    args = harness.worker_args(variant, {**client, "heartbeat_interval_ms": config["session_timeout_ms"] // 3})
    events = harness.make_events(config["events"], prefix=f"r{run}", seed=config["seed"] + run)
    # topic-recreated: the credits published to the topic made again, after the first ones
    later = harness.make_events(config["events"], prefix=f"r{run}again", seed=config["seed"] + run + 1000)
    rng = random.Random(config["seed"] * 1000 + run)
    started, began = time.monotonic(), time.time()
    scene = faults.Scene(config=config, events=events, later=later, route=lambda dsn: dsn)
    # the fault's own set-up for the whole run, made before the run's schema and left after it is
    # dropped (disk-full: the small disk its tablespace is on)
    with (spec.around_run(scene),
          harness.run_space("m10", f"{fault}-{variant}-r{run}", config["partitions"]) as space,
          nemesis.role_of_its_own(space.dsn) as dsn):
        scene.space = space
        if config["idle_tx_timeout_ms"]:
            options = conninfo_to_dict(dsn).get("options", "")
            dsn = make_conninfo(dsn, options=f"{options} -c idle_in_transaction_session_timeout="
                                             f"{config['idle_tx_timeout_ms']}")
        scene.role = conninfo_to_dict(dsn)["user"]  # the run's login role: a fault may refuse or watch it
        # topic-recreated publishes `later` too: every event applied means its new events too
        published = events + later if spec.republishes else events
        harness.produce_events(space.topic, events)
        pool, drained, fault_log, rig = None, None, [], contextlib.ExitStack()
        try:
            # the fault's set-up before the consumers start, left after they stop: disk-full moves the
            # run's tables onto its disk, lost-commit-reply routes the consumers through its proxy
            rig.enter_context(spec.around_consumers(scene))
            pool = Supervised(variant, space, scene.route(dsn), args, f"faults-more-{fault}-{variant}-r{run}",
                              spec.consumers)
            scene.pool = pool
            scene.applied_then_stop = lambda: all_applied_then_stop(pool, config["events"])
            if not pool.live[0].wait_first_effect(120):
                raise RuntimeError(f"a worker applied nothing:\n{pool.live[0].log_tail()}")
            for k in range(1, (1 if spec.once else config["faults"]) + 1):  # a fault that ends the first part: once
                pool.wait(rng.uniform(0.5, 1.5) * config["every_s"])  # seeded: the same moments for every variant
                if harness.distinct_applied(space.admin) >= config["events"] and not spec.once:
                    break  # nothing left in flight to meet
                hit = time.time()
                met = inject(spec, scene)
                healed, rows_before = time.monotonic(), harness.ledger_count(space.admin)
                # until a credit after the fault, or nothing is left to credit: every event applied, or
                # every message read and its offset committed (a variant that loses leaves no lag either)
                try:
                    harness.wait_until(lambda before=rows_before: pool.supervise() or
                                       harness.ledger_count(space.admin) > before or
                                       harness.distinct_applied(space.admin) >= len(published) or
                                       harness.lag(space.group, space.topic) == 0, RESUME_DEADLINE_S,
                                       f"a credit after {fault} {k}", interval_s=0.1)
                    resumed = round(time.monotonic() - healed, 2)
                except TimeoutError:
                    resumed = None  # stuck: no more faults; recovery below counts what never came
                fault_log.append({"fault": k, **met, "resume_s": resumed, "window": [hit, time.time()]})
                results.progress(f"{fault} {variant} run {run}: fault {k} of {config['faults']}: {met}")
                if resumed is None:
                    break
            recovery = harness.settle(pool.live, space.admin, len(published), 300.0, space.group, space.topic)
            if not recovery.settled or recovery.crashed:
                # one more consumer, on the run's role but not through the proxy, drains what is left
                again = harness.log_dir() / f"faults-more-{fault}-{variant}-r{run}-again.log"
                drained = harness.recover(variant, space, deadline_s=300.0, args=args, log_path=again, dsn=dsn)
        finally:
            if pool is not None:
                pool.stop()
            rig.close()
        counts, _ = checker.tally(pool.all)
        tallied = spec.tally(pool.all) if spec.tally else {}  # disk-full: restarted_on_disk_full
        if drained:
            counts.update(drained["counts"])
        verdict = harness.verdict_of(published, space.admin)
        credits = harness.credit_times(space.admin)
    resumes = [f["resume_s"] for f in fault_log if f["resume_s"] is not None]
    return {"fault": fault, "variant": variant, "run": run, "seed": config["seed"] + run, "events": config["events"],
            "faults": len(fault_log), **verdict,
            **{kind: counts.get(kind, 0) for kind in ("skipped", "connect_refused", "restarted", "reconnected")},
            **tallied, "exits": pool.exits + list(recovery.crashed) + list(drained["crashed"] if drained else ()),
            "lives": len(pool.all) + (1 if drained else 0),
            "longest_wait_s": checker.longest_wait(dict(published), credits),
            "resume_s": results.stats(resumes) if resumes else None,
            # a fault after which nothing resumed, or whose run's first part never finished
            "stuck": sum(f["resume_s"] is None or f.get("stuck_before", False) for f in fault_log),
            "settled": drained["settled"] if drained else recovery.settled,
            "wall_s": round(time.monotonic() - started, 1), "fault_log": fault_log,
            "timeline": checker.credit_timeline(credits, [f["window"] for f in fault_log], began)}


def summarise(runs: list[dict]) -> dict:
    return results.summarise_runs(
        runs, [f"{f}/{v}" for f in FAULTS for v in results.seen(runs)], key=lambda r: f"{r['fault']}/{r['variant']}",
        totals=("faults", "duplicates", "lost", "skipped"),
        extra=lambda mine: {"fault": mine[0]["fault"], "variant": mine[0]["variant"],
                            "longest_wait_s": results.stats(r["longest_wait_s"] for r in mine),
                            "exits": sum(len(r["exits"]) for r in mine)})


def table(summary: dict) -> str:
    return results.text_table(
        ["fault", "variant", "runs", "faults", "duplicates", "lost", "skipped", "exits", "longest wait s (max)"],
        [[s["fault"], s["variant"], s["runs"], *(s["totals"][f] for f in ("faults", "duplicates", "lost", "skipped")),
          s["exits"], f"{s['longest_wait_s']['max']:.1f}"] for s in summary.values()])


verdict_line = cli.verdict("{fault} {variant} run {run}: {duplicates} duplicates, {lost} lost, {skipped} skipped, "
                           "{exit_count} exits over {faults} faults, longest wait {longest_wait_s:.1f} s",
                           exit_count=lambda r: len(r["exits"]))


def parse_args(argv=None):
    parser = cli.measurement("M10: pauses, graceful stops, refused connections, lost commit replies.",
                             None, events=3000, work_ms=10)
    cli.fault_and_variants(parser, FAULTS, VARIANTS)
    cli.fault_pacing(parser, 4, 5, "pg-max-connections: how long the refusal lasts")
    parser.add_argument("--pause-s", type=float, default=12, help="pause-consumer: how long the SIGSTOP lasts")
    parser.add_argument("--stop-deadline-s", type=float, default=30, help="sigterm: SIGKILL after this")
    parser.add_argument("--idle-tx-timeout-ms", type=int, default=0,
                        help="the consumer's idle_in_transaction_session_timeout (0: none, the server's default)")
    parser.add_argument("--forgotten", type=float, default=0.0,
                        help="offsets-expired: the share of the inbox retention has forgotten first (0 to 1)")
    parser.add_argument("--delete-group", action="store_true",
                        help="offsets-expired: delete the empty group instead of waiting out the broker's "
                             "offsets.retention.minutes (the same state, at once)")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--max-poll-interval-ms", type=int, default=10000)
    parser.add_argument("--batch", type=int, default=100, help="d and p only")
    args = parser.parse_args(argv)
    results.reader_paths(args, "faults-more.json")  # a reader's own file, unless --out names one
    cli.at_least(parser, args, 1, "runs", "events", "partitions", "faults", "batch", "session_timeout_ms",
                 "max_poll_interval_ms")
    cli.at_least(parser, args, 0, "work_ms", "idle_tx_timeout_ms")
    cli.positive(parser, args, "every_s", "pause_s", "outage_s", "stop_deadline_s")
    refused = faults.get(args.fault).check(args)
    if refused:
        parser.error(refused)
    if not 0 <= args.forgotten <= 1:
        parser.error("--forgotten is a share, from 0 to 1")
    return args


def main(args) -> int:
    before = faults.get(args.fault).before
    try:
        # offsets-expired: what the broker under test keeps, recorded with the runs it made
        kept = before(args) if before else {}
    except faults.Refused as refused:
        print(refused, file=sys.stderr)
        return 2
    config = results.config_of(args, "fault", "variant", "out", "force", **kept)
    results.drive("measure_faults_more", args.out, config,
                  [{"fault": args.fault, "variant": v} for v in args.variant],
                  run_once, summarise, table, verdict_line, args.force, rotate=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(parse_args()))
