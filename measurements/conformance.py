"""Conformance: one consumer, seven checks, one table (issue #45).

Claim: a consumer that keeps the contract (docs/your-consumer.md) and the inbox passes every row:
each credit applied exactly once through republished copies, SIGKILLs, an evicted zombie, poison
messages, a database restart, a broker restart and a soak that mixes them; a consumer without the
inbox (examples/python/naive_consume.py) fails at least the copies and the kills.

Checks, each in a run space of its own (schema, topic, group), each a row of the table and a run of
the results file:

    copies          every credit published twice (every fourth three times), same key, the copies
                    later in the log than the originals; one consumer drains
    kills           M1's seeded SIGKILL schedule while the consumer is kept a backlog to apply (so
                    its kills land mid-stream, however fast it is), then one consumer drains
    zombie          M2 with the stall made in the database (lab/faults/db_stall.py): two chosen
                    events stall past max.poll.interval.ms, two consumers
    poison          a battery of bad messages between good credits, on one partition
    pg-restart      PostgreSQL restarted in immediate mode, twice, mid-stream
    broker-restart  the Kafka broker SIGKILLed and started again, once, mid-stream
    soak            --soak-minutes of a steady stream of credits, two consumers, and a mixed seeded
                    schedule of SIGKILLs, pauses (SIGSTOP) and restarts; then a drain

A check passes with 0 duplicates and 0 lost (and exact balances, where the ledger is counted);
poison also wants no effect of any poison message and a consumer still consuming. A check that
cannot run is a row "error: ...", never the end of the others; a command that cannot be measured at
all (the first check finds it so) ends the measurement in one line, exit 1.

Assumptions: the embedded stack (stack.py) this checkout started, with LAB_STACK_HOME, KAFKA_BROKERS
and CONSUMER_DSN naming it: the restarts act on it.

    python -m measurements.conformance --command "python consume.py"
    python -m measurements.conformance --command "python examples/python/naive_consume.py" --checks copies,kills
    python -m measurements.conformance --variant c --soak-minutes 3
"""
import collections
import contextlib
import itertools
import json
import math
import random
import signal
import sys
import threading
import time
from pathlib import Path

import psycopg

import consume
from lab import checker, cli, command, faults, harness, nemesis, registry, results
from lab.faults import db_stall, schedule
from publish import make_producer, publish

CHECKS = ("copies", "kills", "zombie", "poison", "pg-restart", "broker-restart", "soak")
VARIANTS = registry.names(kind="consumer")
LEDGER = harness.LEDGER_EFFECTS
SHOWN = 3  # IDs per kind in the table's evidence column (the file holds harness.evidence_of's first five)

# Sizes at --scale 1: events per check.
SIZES = {"copies": 2000, "kills": 4000, "zombie": 1000, "poison": 200, "pg-restart": 3000, "broker-restart": 3000}
PARTITIONS = {"copies": 3, "kills": 3, "zombie": 6, "poison": 1, "pg-restart": 3, "broker-restart": 3, "soak": 6}
STALL_S, MAX_POLL_MS, ZOMBIE_SESSION_MS = 12.0, 10000, 6000  # M2's: the stall outlasts max.poll.interval.ms
# Drawn by schedule.composed, beside the kills; pause-consumer is landed here as a SIGSTOP of the
# consumer's process group (M10's own fault needs its supervised pool), and logged as a pause.
SOAK_FAULTS = ("pause-consumer", "pg-restart", "broker-restart")
SOAK_ACTIONS = {"pause-consumer": "pause"}
SOAK_LIFE = (10.0, 30.0)  # seconds between SIGKILLs in the soak
SOAK_PAUSE = (2.0, 10.0)  # seconds a paused consumer stands still (past the session timeout, sometimes)
SOAK_CONSUMERS = 2

# The poison battery: (what it is, key, value, headers, the event IDs it carries). Each
# readable ID is its own, so "nothing poison applied" is a look for them among the effects;
# a message with no readable ID is caught by the effects whose ID was never published.
POISON = (
    ("no event_id header", b"1", b'{"account_id": 1, "amount": 5}', [], ()),
    ("empty event_id", b"1", b'{"account_id": 1, "amount": 5}', [("event_id", b"")], ()),
    ("two event_id headers", b"1", b'{"account_id": 1, "amount": 5}',
     [("event_id", b"poison-two-a"), ("event_id", b"poison-two-b")], ("poison-two-a", "poison-two-b")),
    ("event_id not UTF-8", b"1", b'{"account_id": 1, "amount": 5}', [("event_id", b"\xff\xfe-poison")], ()),
    ("value not JSON", b"1", b"credit 5 to 1", [("event_id", b"poison-not-json")], ("poison-not-json",)),
    ("value a JSON array", b"1", b"[1, 5]", [("event_id", b"poison-array")], ("poison-array",)),
    ("no account_id", b"1", b'{"amount": 5}', [("event_id", b"poison-no-account")], ("poison-no-account",)),
    ("amount not an integer", b"1", b'{"account_id": 1, "amount": "5"}', [("event_id", b"poison-amount-text")],
     ("poison-amount-text",)),
    ("unknown account 999999", b"999999", b'{"account_id": 999999, "amount": 5}',
     [("event_id", b"poison-unknown-account")], ("poison-unknown-account",)),
)


class CannotRun(Exception):
    """A check that cannot be run on this consumer, and why (one line)."""


# --- what a check shares: its consumers, its effects, its verdict ------------------------

class Crew:
    """A check's consumers: each one started here is stopped when the check ends, however it ends."""

    def __init__(self, variant: str, space, args: tuple, name: str):
        self.variant, self.space, self.args, self.name = variant, space, args, name
        self.started: list[harness.Worker] = []

    def start(self, slot: int = 1) -> harness.Worker:
        """A consumer in the check's group, logging to conformance-NAME-wSLOT.log (a replacement
        in the same slot appends to the same log)."""
        worker = harness.Worker(self.variant, self.space.topic, self.space.group, self.space.dsn,
                                self.log(slot), self.args)
        self.started.append(worker)
        return worker

    def log(self, slot: int):
        return harness.log_dir() / f"conformance-{self.name}-w{slot}.log"


@contextlib.contextmanager
def crew(variant: str, space, args: tuple, check: str, slots: int = 1):
    team = Crew(variant, space, args, f"{check}-{variant}")
    if supervised(variant):  # a command's --schema before anything reads its effects (a backlog's publisher)
        harness.prepare_command(variant, space.dsn)
    for slot in range(1, slots + 1):
        team.log(slot).unlink(missing_ok=True)
    try:
        yield team
    finally:
        for worker in team.started:
            worker.stop()


def supervised(variant: str) -> bool:
    """A command is started again whenever it exits (the Worker supervises it); a lab worker that
    exits is gone, and a recovery with none left ends there."""
    return registry.get(variant).command is not None


def effects_query(variant: str) -> str:
    return registry.get(variant).effects or LEDGER


def effects_counted(conn, query: str) -> tuple[int, int]:
    """(effects, distinct event IDs among them), for any effects query."""
    return conn.execute(f"SELECT count(*), count(DISTINCT e) FROM ({query}) AS effects(e)").fetchone()


def applied_by(query: str):
    """settle()'s `applied` for any effects query: (effects, distinct event IDs among them)."""
    def applied(dsn: str) -> tuple[int, int]:
        with psycopg.connect(dsn) as conn:
            return effects_counted(conn, query)
    return applied


def judged(variant: str, space, events: list[tuple[str, dict]], details: dict, also=None) -> dict:
    """The check's verdict on its published `events`: the checker's counts, and as evidence the
    first duplicated and lost event IDs (in the order they were published), each with the
    partition/offset of its records. `also(verdict, applied)` -> (passed, evidence) adds a
    check's own rule."""
    query = registry.get(variant).effects
    verdict = harness.verdict_of(events, space.admin, effects_query=query)
    applied = harness.applied_ids(space.admin, query or LEDGER)
    evidence = harness.evidence_of(events, applied, space.topic)
    passed = verdict["duplicates"] == 0 and verdict["lost"] == 0 and verdict["balances_exact"] is not False
    if also:
        rule, more = also(verdict, applied)
        passed, evidence = passed and rule, {**evidence, **more}
    return {"passed": passed, "duplicates": verdict["duplicates"], "lost": verdict["lost"], "evidence": evidence,
            "details": {"events": len(events), "unexpected": verdict["unexpected"],
                        "balances_exact": verdict["balances_exact"], **details}}


def group_args(variant: str, config: dict, **more) -> tuple:
    """The worker flags (a command: its environment) for the check's group timeouts."""
    session = more.pop("session_timeout_ms", config["session_timeout_ms"])
    return harness.worker_args(variant, {"session_timeout_ms": session, "heartbeat_interval_ms": session // 3,
                                         **more})


def sized(config: dict, check: str) -> int:
    return max(10, round(SIZES[check] * config["scale"]))


def counted(workers, *kinds: str) -> dict:
    """The workers' counted log lines of these kinds (a command prints few of them)."""
    counts, _ = checker.tally(workers)
    found = {kind: counts.get(kind, 0) for kind in kinds}
    failed = checker.failures(counts)
    return {**found, **({"commit_failed": failed} if failed else {})}


def space_for(check: str, variant: str):
    return harness.run_space("conf", f"{check}-{variant}", PARTITIONS[check])


def wait_applied(dsn: str, query: str, at_least: int, timeout_s: float) -> int:
    """Wait until `at_least` distinct event IDs are applied (or the time runs out); how many are."""
    applied = applied_by(query)
    end = time.monotonic() + timeout_s
    while True:
        distinct = applied(dsn)[1]
        if distinct >= at_least or time.monotonic() > end:
            return distinct
        time.sleep(0.1)


# --- the checks ---------------------------------------------------------------------------

def check_copies(variant: str, config: dict) -> dict:
    n = sized(config, "copies")
    events = harness.make_events(n, prefix="cp", seed=config["seed"])
    copies = events + events[::4]  # a second copy of each, and a third of every fourth
    query = effects_query(variant)
    with space_for("copies", variant) as space, crew(variant, space, group_args(variant, config), "copies") as team:
        harness.produce_events(space.topic, events)
        worker = team.start()
        worker.working(space.group, space.topic)
        # the copies go in while it consumes: same keys (same partitions), later offsets
        harness.produce_events(space.topic, copies)
        results.progress(f"copies: {n} credits, {len(copies)} copies published")
        recovery = harness.settle([worker], space.admin, n, 300.0, space.group, space.topic, applied=applied_by(query),
                                  tolerate_exits=supervised(variant))
        return judged(variant, space, events, {"copies": len(copies), "settled": recovery.settled,
                                               "restarts": worker.counts.get("restarts", 0),
                                               **counted([worker], "skipped")})


def check_kills(variant: str, config: dict) -> dict:
    n = sized(config, "kills")
    lives = nemesis.kill_schedule(config["seed"], config["kills"], config["life"])
    args, query = group_args(variant, config), effects_query(variant)
    applied = applied_by(query)
    with space_for("kills", variant) as space, crew(variant, space, args, "kills") as team:
        # n credits up front, and more as they are applied, so that the consumer always has n
        # ahead of it until the last kill: a consumer that applies thousands a second would
        # otherwise drain them in its first life and meet its kills idle.
        backlog = Backlog(space.topic, config["seed"], prefix="kl", ahead=n, dsn=space.admin, query=query)
        backlog.start()

        def before_kill(k, worker):
            """What was sent, then what was applied (in that order, which can only undercount the
            work left: the consumer still runs while they are read)."""
            return {"sent_at_kill": backlog.sent, "applied_at_kill": applied(space.admin)[1]}

        def after_kill(k, life, worker, exit_code):
            rows, distinct = applied(space.admin)
            results.progress(f"kills: {k} of {config['kills']}, {distinct} credits applied")
            return {"kill": k, "life_s": life, "effects": rows, "applied": distinct, "exit_code": exit_code}

        try:
            harness.wait_until(lambda: backlog.acked or not backlog.is_alive(), 60,
                               "the kills' first credits to be acknowledged")
            kill_log = nemesis.kill_loop(lives, start=team.start,
                                         working=lambda worker: worker.working(space.group, space.topic) == "effect",
                                         after_kill=after_kill, before_kill=before_kill)
        finally:
            backlog.finish()
        events = list(backlog.acked)
        last = team.start()
        recovery = harness.settle([last], space.admin, len(events), max(300.0, n * 0.1), space.group, space.topic,
                                  still_s=3.0, applied=applied, tolerate_exits=supervised(variant))
        killed = sum(entry["exit_code"] is None for entry in kill_log)
        # mid-stream: at its SIGKILL, credits had been sent that the consumer had not applied
        mid_stream = sum(entry["exit_code"] is None and entry["applied_at_kill"] < entry["sent_at_kill"]
                         for entry in kill_log)
        if not mid_stream:
            raise CannotRun(f"no kill landed mid-stream ({killed} kills, {len(events)} credits published)")
        return judged(variant, space, events, {"kills": killed, "mid_stream": mid_stream, "settled": recovery.settled,
                                               "refused_sends": backlog.refused, "unflushed_sends": backlog.unflushed,
                                               "exited_by_themselves": [e["exit_code"] for e in kill_log
                                                                        if e["exit_code"] is not None],
                                               **counted(team.started, "skipped")})


def check_zombie(variant: str, config: dict) -> dict:
    if registry.get(variant).effects:
        raise CannotRun("the zombie's stall is a trigger on the ledger; with --effects there is none to stall")
    n = sized(config, "zombie")
    events = harness.make_events(n, prefix="zb", seed=config["seed"])
    chosen = [events[int(n * 0.4)][0], events[int(n * 0.9)][0]]
    args = group_args(variant, config, session_timeout_ms=ZOMBIE_SESSION_MS, max_poll_interval_ms=MAX_POLL_MS)
    with space_for("zombie", variant) as space, crew(variant, space, args, "zombie", slots=2) as team:
        db_stall.install(space.admin, space.schema, chosen, STALL_S)
        harness.produce_events(space.topic, events)
        workers = [team.start(1), team.start(2)]
        workers[0].working(space.group, space.topic)
        recovery = harness.settle(workers, space.admin, n, 300.0 + 2 * STALL_S, space.group, space.topic,
                                  pending=db_stall.asleep, tolerate_exits=supervised(variant))
        begun, asleep = db_stall.stalls(space.admin)
        if begun == 0:
            raise CannotRun(f"neither chosen event ({', '.join(chosen)}) was written to the ledger: nothing stalled")
        return judged(variant, space, events, {"stalled": chosen, "stalls": begun, "still_asleep": asleep,
                                               "settled": recovery.settled,
                                               "restarts": sum(w.counts.get("restarts", 0) for w in workers),
                                               **counted(workers, "evictions", "skipped")})


def check_poison(variant: str, config: dict) -> dict:
    n = sized(config, "poison")
    good = harness.make_events(2 * n, prefix="ok", seed=config["seed"])
    poison_ids = {event_id for *_, ids in POISON for event_id in ids}
    query = effects_query(variant)
    with space_for("poison", variant) as space, crew(variant, space, group_args(variant, config), "poison") as team:
        # one partition: the good credits after the battery are reached only past every poison message
        harness.produce_events(space.topic, good[:n])
        producer = make_producer()
        for _, key, value, headers, _ in POISON:
            producer.produce(space.topic, key=key, value=value, headers=headers)
        if producer.flush(30):
            raise RuntimeError("the poison battery was not acknowledged within 30 s")
        harness.produce_events(space.topic, good[n:])
        worker = team.start()
        worker.working(space.group, space.topic)
        recovery = harness.settle([worker], space.admin, 2 * n, 120.0, space.group, space.topic,
                                  applied=applied_by(query), tolerate_exits=supervised(variant))
        running = worker.proc.poll() is None
        restarts = worker.counts.get("restarts", 0)

        def rule(verdict, applied):
            taken = sorted(e for e in poison_ids if e in applied)
            alive = running or restarts > 0
            return (alive and not taken and verdict["unexpected"] == 0,
                    {"poison_applied": taken, "unexpected": verdict["unexpected"]})

        return judged(variant, space, good, {"poison": len(POISON), "running": running, "restarts": restarts,
                                             "settled": recovery.settled, "dlq": dead_letters(space.topic),
                                             **counted([worker], "dead_lettered")}, also=rule)


def dead_letters(topic: str) -> int | None:
    """How many records `<topic>.dlq` holds (None if it cannot be read): information only, the
    contract asks for no dead-letter topic."""
    try:
        return harness.topic_size(consume.dead_letter_topic(topic))
    except Exception:  # no such topic, or no answer: nothing to report
        return None


def check_restarts(fault: str, times: int):
    """pg-restart, broker-restart: the fault landed `times` times, each once the consumer has
    applied its share of the credits (k/(times+1) of them), so each lands mid-stream."""
    def check(variant: str, config: dict) -> dict:
        n = sized(config, fault)
        events = harness.make_events(n, prefix=fault[:2], seed=config["seed"])
        query = effects_query(variant)
        with space_for(fault, variant) as space, crew(variant, space, group_args(variant, config), fault) as team:
            harness.produce_events(space.topic, events)
            worker = team.start()
            worker.working(space.group, space.topic)
            landed = []
            for k in range(1, times + 1):
                reached = wait_applied(space.admin, query, n * k // (times + 1), 120.0)
                met = faults.get(fault).land(faults.Scene(config=config, space=space))
                landed.append({"fault": k, "applied_before": reached, "outage_s": round(met["outage_s"], 2)})
                results.progress(f"{fault}: {k} of {times} landed after {reached} of {n} credits "
                                 f"({met['outage_s']:.1f} s out)")
            recovery = harness.settle([worker], space.admin, n, 300.0, space.group, space.topic,
                                      applied=applied_by(query), tolerate_exits=supervised(variant))
            mid_stream = sum(f["applied_before"] < n for f in landed)
            return judged(variant, space, events, {"faults": landed, "mid_stream": mid_stream,
                                                   "settled": recovery.settled,
                                                   "restarts": worker.counts.get("restarts", 0),
                                                   **counted([worker], "skipped", "restarted", "reconnected")})
    return check


class Publisher(threading.Thread):
    """Credits published from a thread until halted; those the broker acknowledged are what was
    published (a send it refused is counted apart). A subclass says when to send (`pace`)."""

    def __init__(self, topic: str, seed: int, prefix: str):
        super().__init__(name=f"{prefix}-publisher", daemon=True)
        self.topic, self.rng, self.prefix = topic, random.Random(seed), prefix
        self.acked: list[tuple[str, dict]] = []
        self.refused = self.sent = self.unflushed = 0
        self.halt = threading.Event()
        self.error: BaseException | None = None

    def delivered(self, err, event) -> None:
        if err is None:
            self.acked.append(event)
        else:
            self.refused += 1

    def send(self, producer) -> None:
        event_id = f"{self.prefix}-{self.sent + 1}"
        event = {"account_id": self.rng.randint(1, harness.ACCOUNTS), "amount": self.rng.randint(1, 100)}
        while True:
            try:
                publish(producer, self.topic, event_id, event,
                        on_delivery=lambda err, _msg, pair=(event_id, event): self.delivered(err, pair))
                break
            except BufferError:  # the local queue is full (the broker is restarting): wait for room
                producer.poll(0.1)
        self.sent += 1
        producer.poll(0)

    def pace(self, producer) -> None:
        raise NotImplementedError

    def run(self) -> None:
        try:
            producer = make_producer()
            try:
                self.pace(producer)
            finally:
                end = time.monotonic() + 180
                while (left := producer.flush(1.0)) and time.monotonic() < end:
                    pass
                self.unflushed = left
        except BaseException as e:  # noqa: BLE001 - finish() raises it in the check's own thread
            self.error = e

    def finish(self) -> None:
        """Halt, wait for the last acknowledgements; a publisher that failed fails the check."""
        self.halt.set()
        self.join(200)
        if self.is_alive():
            raise RuntimeError(f"{self.name}: still flushing 200 s after it was halted")
        if self.error is not None:
            raise RuntimeError(f"{self.name} failed: {one_line(self.error)}") from self.error


class Stream(Publisher):
    """Credits at `rate` a second."""

    def __init__(self, topic: str, rate: float, seed: int, prefix: str = "sk"):
        super().__init__(topic, seed, prefix)
        self.rate = rate

    def pace(self, producer) -> None:
        began = time.monotonic()
        while not self.halt.is_set():
            self.send(producer)
            self.halt.wait(max(0.0, began + self.sent / self.rate - time.monotonic()))


class Backlog(Publisher):
    """Credits kept `ahead` of what the consumer has applied (the distinct IDs of `query`'s
    effects, looked at fifty times a second on one connection): `ahead` of them at once, then as
    many more as it applies."""

    def __init__(self, topic: str, seed: int, prefix: str, ahead: int, dsn: str, query: str):
        super().__init__(topic, seed, prefix)
        self.ahead, self.dsn, self.query = ahead, dsn, query

    def pace(self, producer) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.halt.is_set():
                applied = effects_counted(conn, self.query)[1]
                for _ in range(applied + self.ahead - self.sent):
                    self.send(producer)
                producer.poll(0.02)  # the acknowledgements' callbacks run here


def soak_plan(config: dict) -> list[tuple[float, str]]:
    """The soak's seeded schedule: (seconds from the start, action), the kills from
    nemesis.kill_schedule (each SOAK_LIFE after the one before) and the pauses and restarts from
    schedule.composed, merged in time; nothing after the soak's end."""
    seconds = config["soak_minutes"] * 60
    lives = nemesis.kill_schedule(config["seed"], math.ceil(seconds / SOAK_LIFE[0]) + 1, SOAK_LIFE)
    kills = [(round(at, 3), "kill") for at in itertools.accumulate(lives)]
    drawn = schedule.composed(SOAK_FAULTS, config["seed"], math.ceil(seconds / config["soak_every_s"]) + 1,
                              config["soak_every_s"])
    return sorted(item for item in [*kills, *drawn] if item[0] < seconds)


def check_soak(variant: str, config: dict) -> dict:
    query = effects_query(variant)
    rng = random.Random(config["seed"])  # whom each kill and pause hits, how long a pause lasts
    plan = soak_plan(config)
    with space_for("soak", variant) as space, \
            crew(variant, space, group_args(variant, config), "soak", slots=SOAK_CONSUMERS) as team:
        stream = Stream(space.topic, config["soak_rate"], config["seed"])
        stream.start()
        try:
            # a backlog first: a group that has read an empty topic cannot say whether its consumer works
            harness.wait_until(lambda: len(stream.acked) >= config["soak_rate"] or not stream.is_alive(), 60,
                               "the soak's first credits to be acknowledged")
            workers = [team.start(slot) for slot in range(1, SOAK_CONSUMERS + 1)]
            workers[0].working(space.group, space.topic)
            for worker in workers[1:]:
                worker.wait_first_effect(60)
            began, log = time.monotonic(), []
            for at, action in plan:
                if time.monotonic() - began >= config["soak_minutes"] * 60:
                    break  # the actions ran late: what is left of the schedule is not landed
                time.sleep(max(0.0, began + at - time.monotonic()))
                target = rng.randrange(SOAK_CONSUMERS)
                entry = {"at_s": round(time.monotonic() - began, 1), "action": SOAK_ACTIONS.get(action, action)}
                if action == "kill":
                    workers[target].kill()
                    workers[target] = team.start(target + 1)
                    # its first effect, before anything else lands (its supervisor watches the database till then)
                    entry.update(target=target + 1, working=workers[target].wait_first_effect(60))
                elif action == "pause-consumer":
                    entry.update(target=target + 1, pause_s=round(rng.uniform(*SOAK_PAUSE), 1))
                    paused(workers[target], entry["pause_s"])
                else:
                    entry["outage_s"] = round(faults.get(action).land(faults.Scene(config=config,
                                                                                   space=space))["outage_s"], 2)
                log.append(entry)
                results.progress(f"soak: {entry['action']} at {entry['at_s']:g} s ({len(log)} of {len(plan)}), "
                                 f"{len(stream.acked)} credits acknowledged")
        finally:
            stream.finish()
        events = list(stream.acked)
        results.progress(f"soak: {len(events)} credits published; draining")
        recovery = harness.settle(workers, space.admin, len(events), 600.0, space.group, space.topic,
                                  applied=applied_by(query), tolerate_exits=supervised(variant))
        return judged(variant, space, events, {
            "minutes": config["soak_minutes"], "actions": dict(collections.Counter(entry["action"] for entry in log)),
            "not_landed": len(plan) - len(log), "schedule": log,
            "refused_sends": stream.refused, "unflushed_sends": stream.unflushed, "settled": recovery.settled,
            "restarts": sum(w.counts.get("restarts", 0) for w in team.started),
            **counted(team.started, "skipped", "evictions")})


def paused(worker: harness.Worker, seconds: float) -> None:
    """SIGSTOP the consumer (a command's whole process group: its shell's children too) for
    `seconds`, then SIGCONT, whatever happens meanwhile."""
    worker.send_signal(signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        worker.send_signal(signal.SIGCONT)


RUN = {"copies": check_copies, "kills": check_kills, "zombie": check_zombie, "poison": check_poison,
       "pg-restart": check_restarts("pg-restart", 2), "broker-restart": check_restarts("broker-restart", 1),
       "soak": check_soak}
_judged: list[str] = []  # the checks this process got a verdict from


def one_line(error: BaseException) -> str:
    return next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)


def run_once(variant: str, check: str, run: int, config: dict) -> dict:
    """One check as one run of the results file; whatever stops it becomes its row's error,
    except a command that cannot be measured at all (no check has had a verdict yet)."""
    started = time.monotonic()
    record = {"variant": variant, "check": check}
    try:
        record.update(RUN[check](variant, config), error=None)
        _judged.append(check)
    except Exception as e:  # a check that cannot run is a row, not the end of the others
        if isinstance(e, harness.CommandError) and not _judged:
            raise
        said = isinstance(e, (CannotRun, harness.CommandError))  # their message says what went wrong
        record.update(passed=None, duplicates=None, lost=None, evidence={}, details={},
                      error=one_line(e) if said else f"{type(e).__name__}: {one_line(e)}")
    return {**record, "run": run, "seconds": round(time.monotonic() - started, 1)}


# --- the table -----------------------------------------------------------------------------

def result_of(row: dict) -> str:
    if row.get("error"):
        return f"error: {row['error']}"[:100]
    return "passed" if row["passed"] else "FAILED"


def evidence_of(row: dict) -> str:
    """Up to SHOWN duplicated and lost event IDs, each with its records' partition/offset."""
    parts = []
    evidence = row.get("evidence") or {}
    for kind, label in (("duplicated", "dup"), ("lost", "lost")):
        found = evidence.get(kind, [])
        if found:
            shown = " ".join(f"{e['event_id']}@{'+'.join(e['records']) or '?'}" for e in found[:SHOWN])
            more = evidence.get(f"{kind}_ids", len(found)) - min(SHOWN, len(found))
            parts.append(f"{label} {shown}" + (f" (+{more:,} more)" if more > 0 else ""))
    taken = evidence.get("poison_applied")
    if taken:
        parts.append(f"poison applied {' '.join(taken)}")
    return "; ".join(parts) or "none"


def notes_of(row: dict) -> str:
    """What the check met, from its details: for reading, not for the verdict."""
    d, notes = row.get("details") or {}, []
    labels = {"dead_lettered": "dead-lettered", "unexpected": "unexpected effects"}
    for key in ("kills", "stalls", "evictions", "skipped", "restarts", "dead_lettered", "unexpected"):
        if d.get(key):
            notes.append(f"{labels.get(key, key)} {d[key]}")
    if "faults" in d:
        notes.append(f"{len(d['faults'])} landed, {d['mid_stream']} mid-stream")
    elif "mid_stream" in d:
        notes.append(f"{d['mid_stream']} mid-stream")
    if "dlq" in d:
        notes.append(f"dlq {d['dlq'] if d['dlq'] is not None else '?'} of {d['poison']}")
    if "actions" in d:
        notes.append("landed " + ", ".join(f"{action} x{n}" for action, n in sorted(d["actions"].items())))
    if d.get("not_landed"):
        notes.append(f"{d['not_landed']} not landed (the schedule ran late)")
    if d.get("balances_exact") is False:
        notes.append("balances WRONG")
    if d.get("settled") is False:
        notes.append("not settled")
    return ", ".join(notes) or "-"


def summarise(runs: list[dict]) -> dict:
    mine = {r["check"]: r for r in runs}
    return {check: {key: mine[check].get(key) for key in ("variant", "passed", "duplicates", "lost", "evidence",
                                                         "details", "error", "seconds")}
            for check in CHECKS if check in mine}


def table(summary: dict) -> str:
    def count(value):
        return "-" if value is None else f"{value:,}"

    rows = [[check, result_of(s), count(s["duplicates"]), count(s["lost"]), f"{s['seconds']:.0f}", evidence_of(s),
             notes_of(s)] for check, s in summary.items()]
    passed = sum(bool(s["passed"]) for s in summary.values())
    return results.text_table(["check", "result", "duplicates", "lost", "seconds", "evidence (id@partition/offset)",
                               "met"], rows, f"{passed} of {len(summary)} checks passed")


def verdict_line(record: dict) -> str:
    if record["error"]:
        return f"{record['check']}: error: {record['error']}"
    return (f"{record['check']}: {result_of(record)}, {record['duplicates']} duplicates, {record['lost']} lost "
            f"({record['seconds']:g} s)")


# --- the command line ----------------------------------------------------------------------

def parse_args(argv=None):
    parser = cli.MeasurementParser(description=__doc__.splitlines()[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--variant", choices=VARIANTS, help="one of the lab's consumers")
    command.command_flags(parser, which)
    parser.add_argument("--checks", type=cli.names_of(CHECKS, "check"), default=list(CHECKS),
                        help=f"a subset, comma-separated, of {','.join(CHECKS)} (default: all)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiplies every check's event count (1: copies 2,000, kills 4,000, ...)")
    parser.add_argument("--kills", type=int, default=5, help="kills: how many SIGKILLs")
    parser.add_argument("--life", type=nemesis.life_range, default=(1.0, 3.0), metavar="MIN,MAX",
                        help="kills: seconds a consumer lives after its first effect")
    parser.add_argument("--session-timeout-ms", type=int, default=6000,
                        help="the group's session timeout, but for the zombie's (6000, as M2)")
    parser.add_argument("--soak-minutes", type=float, default=10.0)
    parser.add_argument("--soak-rate", type=float, default=50.0, help="soak: credits published a second")
    parser.add_argument("--soak-every-s", type=float, default=20.0,
                        help="soak: seconds between pauses and restarts (drawn 0.5x-1.5x)")
    parser.add_argument("--out", help="results JSON (default results/local/conformance-NAME.json)")
    parser.add_argument("--force", action="store_true",
                        help="measure the checks asked for again, over what --out holds of them")
    parser.add_argument("--dry-run", action="store_true",
                        help="run nothing: say whether this command's config matches its --out file's")
    args = parser.parse_args(argv)
    if args.command and args.schema and not args.effects:
        parser.error("--schema makes tables of your own: say with --effects where the effects are")
    command.declare_command(parser, args)
    args.variant = args.variant[0] if isinstance(args.variant, list) else args.variant
    cli.at_least(parser, args, 1, "kills", "session_timeout_ms")
    cli.positive(parser, args, "scale", "soak_minutes", "soak_rate", "soak_every_s")
    if args.out is None:
        args.out = str(results.LOCAL / f"conformance-{args.variant}.json")
    return args


def config_of(args) -> dict:
    """What the file records: what was measured, not which checks this command ran (a file
    gathers every check of one consumer, run together or one by one)."""
    return {"runs": 1, "variant": args.variant, "seed": args.seed, "scale": args.scale, "kills": args.kills,
            "life": list(args.life), "session_timeout_ms": args.session_timeout_ms,
            "zombie": {"stall_s": STALL_S, "max_poll_interval_ms": MAX_POLL_MS,
                       "session_timeout_ms": ZOMBIE_SESSION_MS, "consumers": 2},
            "soak_minutes": args.soak_minutes, "soak_rate": args.soak_rate, "soak_every_s": args.soak_every_s,
            "soak_actions": ["kill", *(SOAK_ACTIONS.get(f, f) for f in SOAK_FAULTS)], "sizes": SIZES,
            "kills_publishing": "its size kept ahead of what the consumer applied, until the last kill",
            "partitions": PARTITIONS,
            **command.command_config(args)}


def forget(path: Path, checks: list[str], everything: bool) -> None:
    """Before resuming a file: drop the rows of the checks asked for that ended in an error (or,
    with --force, all of their rows), so they are measured again."""
    if not path.exists():
        return
    document = json.loads(path.read_text())
    kept = [r for r in document.get("runs", ()) if not (r.get("check") in checks and (everything or r.get("error")))]
    if len(kept) != len(document.get("runs", ())):
        document["runs"], document["summary"] = kept, summarise(kept)
        results.write_results(path, document)


@command.command_errors
def main(args) -> int:
    config = config_of(args)
    if not cli.DRY_RUN:
        forget(Path(args.out), args.checks, args.force)
    _judged.clear()
    results.drive("conformance", args.out, config, [{"variant": args.variant, "check": c} for c in args.checks],
                  run_once, summarise, table, verdict_line, args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main(parse_args()))
