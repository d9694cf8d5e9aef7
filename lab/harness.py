"""The lab's workers and its recovery phase, on top of lab/space.py's per-run world.

A worker is one process: a worker.py running a declared variant, or a command of the
reader's own (lab/registry.py's command variants), whose log is read as it is written
(the lines it counts parsed by lab/logs.py). The faults are lab/faults/'s, the verdicts checker.py's, the
results files results.py's. The run space's names are re-exported here, so a measurement
imports one module: `harness.run_space`, `harness.Worker`, `harness.settle`.

Assumptions: the services named in settings.py are up (`make up`).
"""
import atexit
import collections
import contextlib
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
from confluent_kafka import KafkaException
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from lab import checker, provenance, registry, results  # noqa: F401  checker: harness.checker, as tests read it
from lab.logs import (  # noqa: F401  re-exported: measurements and tests read harness.X
    COUNTED,
    FIRST_EFFECT,
    LEASE_RUNNING_OUT,
    OWNERSHIP,
    REPORT,
    partitions_in,
    said_by,
    timeline,
    timeline_of,
)
from lab.settings import ADMIN_DSN, BROKERS, RESULTS, ROOT  # noqa: F401  the first two re-exported
from lab.space import (  # noqa: F401  re-exported: measurements read harness.X
    ACCOUNTS,
    COORDINATOR_NOT_READY,
    FILL_IDS,
    ID_TYPES,
    LAB_TABLES,
    LEDGER_EFFECTS,
    RunSpace,
    applied_ids,
    committed_offsets,
    create_schema,
    create_topic,
    credit_times,
    delete_topics,
    distinct_applied,
    drop_schema,
    effects,
    event_ids,
    evidence_of,
    external_pending,
    fill_inbox,
    kept_inbox,
    kept_inbox_schema,
    kept_mark,
    lag,
    ledger_applied,
    ledger_count,
    make_events,
    order_of,
    produce_events,
    provider_applied,
    provider_charges,
    read_records,
    record_ids,
    record_times,
    rescue_kept_inbox,
    run_space,
    scoped_dsn,
    set_group_configs,
    topic_size,
    unique,
    verdict_of,
    wait_until,
)

# --- workers: start them, read their logs, kill them -----------------------------

class CommandError(RuntimeError):
    """A reader's command that cannot be measured: it never started, exited before applying
    anything, or applied nothing the effects query counts. The message is one line, with
    the command's last output beneath."""


def command_env(topic: str, group: str, dsn: str, args: tuple) -> dict:
    """The contract (docs/your-consumer.md): where to read and write, as environment variables,
    and the group timeouts a harness sets (`args`: worker flags, mapped by COMMAND_ENV)."""
    info = conninfo_to_dict(dsn)
    schema = re.search(r"search_path=(\S+)", info.get("options", "")).group(1)
    flags = dict(zip(args[::2], args[1::2], strict=True))  # worker flags come in pairs
    return dict(os.environ, KAFKA_BROKERS=BROKERS, KAFKA_TOPIC=topic, KAFKA_GROUP=group, CONSUMER_DSN=dsn,
        CONSUMER_SCHEMA=schema, PGHOST=info.get("host", "localhost"), PGPORT=str(info.get("port", 5432)),
        PGDATABASE=info["dbname"], PGUSER=info["user"], PGPASSWORD=info.get("password", ""),
        PGOPTIONS=f"-c search_path={schema}", PYTHONUNBUFFERED="1",
        # `python` in a command is the harness's own interpreter, with the lab's packages, venv or not
        PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        **{env: str(flags["--" + key.replace("_", "-")]) for key, env in registry.COMMAND_ENV.items()
           if "--" + key.replace("_", "-") in flags})


def effects_count(dsn: str, query: str, distinct: bool = False) -> int:
    """The rows a command's effects query returns (or the distinct event IDs among them), read as
    the schema's owner (the consumer's role need not be able to read what it writes)."""
    counted = "count(DISTINCT e)" if distinct else "count(*)"
    with psycopg.connect(make_conninfo(ADMIN_DSN, options=conninfo_to_dict(dsn)["options"])) as conn:
        return conn.execute(f"SELECT {counted} FROM ({query}) AS effects(e)").fetchone()[0]


def consumer_role(dsn: str) -> str:
    return conninfo_to_dict(dsn)["user"]


_COMMANDS_PREPARED: set[tuple[str, str]] = set()  # (variant, dsn): a command's --schema ran there


def prepare_command(variant: str, dsn: str) -> None:
    """A command's --schema, once per run's schema (not at every restart: a plain CREATE TABLE
    would fail the second time), as the schema's owner; then the consumer's role may read and
    write the tables and use the sequences that SQL made, as it may the lab's (lab/grants.sql)
    and no more: the lab's own tables keep their grants. Then the effects query is tried once,
    so a wrong one is one line now, not a traceback in the middle of a run."""
    if (variant, dsn) in _COMMANDS_PREPARED:
        return
    options = conninfo_to_dict(dsn)["options"]
    made = "SELECT oid::regclass::text, relkind FROM pg_class WHERE relnamespace = current_schema()::regnamespace"
    with psycopg.connect(make_conninfo(ADMIN_DSN, options=options), autocommit=True) as conn:
        before = set(conn.execute(made).fetchall())
        registry.prepare(variant, dsn)
        _COMMANDS_PREPARED.add((variant, dsn))  # ran: a restart must not run it again, whatever follows
        role = sql.Identifier(consumer_role(dsn))
        for name, kind in sorted(set(conn.execute(made).fetchall()) - before):  # regclass's text: quoted as needed
            if kind in ("r", "p", "v"):  # a table, a partitioned table, a view
                conn.execute(sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON {} TO {}").format(sql.SQL(name), role))
            elif kind == "S":
                conn.execute(sql.SQL("GRANT USAGE, SELECT ON SEQUENCE {} TO {}").format(sql.SQL(name), role))
    query = registry.get(variant).effects or LEDGER_EFFECTS
    try:
        effects_count(dsn, query)
    except psycopg.OperationalError:
        pass  # the server away for a moment (a fault landing early): the supervisor looks again
    except psycopg.Error as e:
        raise CommandError(f"the effects query `{query}` fails on a fresh run's schema: "
                           f"{str(e).strip().splitlines()[0]}") from None


# Every worker process not yet ended, so that a harness that stops on an error or a Ctrl-C
# does not leave consumers running (a command runs in a session of its own, out of reach of
# the terminal's SIGINT): atexit kills what is left.
_LIVE: "set[Worker]" = set()


@atexit.register
def _kill_the_rest() -> None:
    # Worker.kill: ended first, so that no supervisor starts a command again behind the kill, then
    # reaped, so that no killed process outlives the harness as a zombie for whoever inherits it.
    for worker in list(_LIVE):
        with contextlib.suppress(Exception):
            worker.kill()


def _interrupted(kind, value, traceback) -> None:
    """A Ctrl-C is one line, not a traceback: what was measured is in the results file already."""
    if issubclass(kind, KeyboardInterrupt):
        print(f"{Path(sys.argv[0]).name}: interrupted; its consumers are killed, and each run already finished "
              f"is in the results file (the same command resumes from there)", file=sys.stderr)
        return
    _previous_hook(kind, value, traceback)


_previous_hook, sys.excepthook = sys.excepthook, _interrupted


def _terminated(number, frame) -> None:
    """A SIGTERM (a `kill`, a CI's timeout) ends a measurement as a Ctrl-C does. Its default
    action ends the process at once, skipping the finally blocks and atexit that stop its
    consumers, which would go on consuming with nobody to stop them."""
    raise KeyboardInterrupt


# Only where nobody chose otherwise, and only from the main thread, where Python runs handlers.
if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
    signal.signal(signal.SIGTERM, _terminated)


class Worker:
    """One consumer process: `worker.py` running a declared variant, or a reader's own command.
    Its log is read as it is written, so a harness can wait on events ("first side effect")
    instead of sleeping, and count what the checkers need. A command prints none of the lab's
    lines, so its first effect is watched for in the database instead, and the worker acts as
    its supervisor: a command that exits after it has applied something is started again."""

    def __init__(self, variant: str, topic: str, group: str, dsn: str, log_path: Path | None = None,
                 args: tuple = (), prefix: tuple = (), root: Path = ROOT):
        """`prefix` runs the worker through another command, e.g. `ip netns exec NS`
        (which execs it, so the pid, and a kill, are the worker's own). `root`: the checkout
        whose lab/worker.py runs, if not this one (a worktree of another commit, lab/against.py:
        its lab, variants and consume.py, its variant's setup SQL; the same interpreter and
        environment)."""
        declared = registry.get(variant)
        self.command, self.dsn, self.root = declared.command, dsn, Path(root)
        if self.command and self.root != ROOT:
            raise ValueError(f"{variant} is a command: it has no worker of another commit to run")
        if self.root == ROOT and self.command:
            prepare_command(variant, dsn)
            environment = os.environ
        elif self.root == ROOT:
            registry.prepare(variant, dsn)  # what the variant's declaration asks of the schema
            environment = os.environ
        else:
            from lab import against  # only a run of another commit's code needs it

            against.prepare(self.root, variant, dsn)  # as the other commit declares it
            environment = against.worker_env(self.root)  # its folder first on the import path
        self.loaded_there: dict[str, str] = {}  # files a worker of another root said it loaded
        if self.command:
            self.effects_query = declared.effects or LEDGER_EFFECTS
            self.argv, self.env = [*prefix, "/bin/sh", "-c", self.command], command_env(topic, group, dsn,
                                                                                          args)
        else:
            self.argv = [*prefix, registry.python_for(variant), "-m", "lab.worker", "--variant", variant, "--topic",
                         topic, "--group", group, *map(str, args)]
            self.env = dict(environment, CONSUMER_DSN=dsn, PYTHONUNBUFFERED="1")
        self.first_effect = threading.Event()
        self.report: dict | None = None
        self.counts = collections.Counter()
        self.examples: dict[str, str] = {}
        self.assignment: set[int] = set()  # the partitions it holds now, from its own log lines
        self.tail = collections.deque(maxlen=40)
        self._lock = threading.Lock()
        self._ended = threading.Event()  # killed or stopped by the harness: no restart
        self.log_path = log_path
        self._log = open(log_path, "a") if log_path else None
        self._spawn()
        if self.command:
            threading.Thread(target=self._supervise, daemon=True).start()

    def _spawn(self) -> None:
        self.started = time.monotonic()
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, errors="replace", env=self.env, cwd=self.root,
                                     start_new_session=bool(self.command))  # a command's children die with it
        _LIVE.add(self)  # at once: a Ctrl-C while the reader starts must still find it to kill
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _supervise(self) -> None:
        """A command's watcher: its first effect from the effects query; a restart whenever it
        exits after that, as a supervisor would (an exit before it is working()'s to report).
        A database that is away (a restart landing before the first effect) is looked at again
        on the next tick, not taken for a broken query."""
        try:
            try:
                baseline = effects_count(self.dsn, self.effects_query)  # before the command can write
            except psycopg.OperationalError:
                baseline = None  # taken on the first tick the database answers
            while not self._ended.wait(0.25):
                if not self.first_effect.is_set():
                    try:
                        applied = effects_count(self.dsn, self.effects_query)
                    except psycopg.OperationalError:
                        continue  # the server restarting, or refusing for a moment
                    baseline = applied if baseline is None else baseline
                    if applied > baseline:
                        self.first_effect.set()
                if self.proc.poll() is not None and not self._ended.is_set():
                    if not self.first_effect.is_set():
                        return  # exited before applying anything: working() says which way
                    self._reader.join(10)
                    self.counts["restarts"] += 1
                    self._spawn()
        except psycopg.Error as e:  # the effects query itself fails (a wrong --effects): say so where it shows
            with self._lock:
                self.tail.append(f"(the lab could not run the effects query `{self.effects_query}`: "
                                 f"{str(e).strip().splitlines()[0]})")

    def _read(self) -> None:
        for line in self.proc.stdout:
            if self._log:
                self._log.write(line)
            if self.root != ROOT and (found := provenance.LOADED.search(line)):
                # another checkout's file: not this one's, whose hashes the run's record holds
                self.loaded_there[found.group(1)] = found.group(2)
                continue
            if provenance.heard(line):  # a file it loaded, for the run's record; nothing to count
                continue
            with self._lock:
                self.tail.append(line.rstrip())
                if FIRST_EFFECT.search(line):
                    self.first_effect.set()
                if owned := OWNERSHIP.search(line):
                    held = set(partitions_in(owned.group(2)))
                    self.assignment = held if owned.group(1) == "assigned" else self.assignment - held
                if reported := REPORT.search(line):
                    self.report = json.loads(reported.group(1))
                for name, pattern in COUNTED.items():
                    match = pattern.search(line)
                    if match:
                        key = f"{name}:{match.group(1)}" if match.groups() else name
                        self.counts[key] += 1
                        self.examples.setdefault(name, line.strip())
        if self._log:
            self._log.flush()

    def wait_first_effect(self, timeout_s: float) -> bool:
        """True once the worker applied its first credit; False if it exited or the time ran out."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.first_effect.wait(0.2):
                return True
            if self.proc.poll() is not None:
                return False
        return False

    def working(self, group: str, topic: str, timeout_s: float = 120.0, crashed=None) -> str:
        """"effect" once the worker applied its first credit (or made its first call),
        "idle" as soon as the group has nothing left to consume, "crashed" if it exited and
        `crashed(worker)` says that was on purpose; RuntimeError for any other exit, or none
        of these within the deadline."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.first_effect.wait(1.0):
                return "effect"
            if self.proc.poll() is not None:
                if crashed and crashed(self):
                    return "crashed"
                if self.command:
                    self._ended.set()
                    raise CommandError(self.exited_early())
                raise RuntimeError(f"worker exited with {self.proc.returncode} before any effect:\n{self.log_tail()}")
            if lag(group, topic) == 0:
                if self.command and effects_count(self.dsn, self.effects_query) == 0:
                    self.kill()
                    raise CommandError(f"your command read the whole topic (the group's lag is 0) but wrote nothing "
                                       f"that `{self.effects_query}` counts: does it write there?\n{self.log_tail()}")
                return "idle"
        if self.command:
            self.kill()
            raise CommandError(f"your command ran {timeout_s:g} s and applied nothing that `{self.effects_query}` "
                               f"counts; the group's lag is {lag(group, topic)}: is it reading {topic} as group "
                               f"{group} (KAFKA_TOPIC, KAFKA_GROUP)?\n{self.log_tail()}")
        raise RuntimeError(f"worker applied nothing within {timeout_s:g}s:\n{self.log_tail()}")

    def exited_early(self) -> str:
        """One line for a command that ended before its first effect, and which way it ended."""
        code, after = self.proc.returncode, time.monotonic() - self.started
        self._reader.join(5)
        if code in (126, 127):  # the shell's own: not found, or not executable
            how = f"could not be started (the shell's exit {code}: " + \
                  ("not found)" if code == 127 else "not executable)")
        else:
            when = "at once" if after < 3 else f"after {after:.0f} s"
            how = f"exited with code {code} {when}, before applying anything"
        return f"your command {how}: {self.command}\n{self.log_tail()}"

    def send_signal(self, number: int) -> None:
        """To the worker, or to a command's whole process group (a shell's children with it)."""
        with contextlib.suppress(ProcessLookupError):
            if self.command:
                os.killpg(self.proc.pid, number)
            else:
                self.proc.send_signal(number)

    def kill(self) -> None:
        """SIGKILL: no finally, no close(), no last commit."""
        self._ended.set()
        self.send_signal(signal.SIGKILL)
        self._finish()

    def dump_stacks(self) -> None:
        """Every thread's Python stack, into the worker's log (worker.py's SIGUSR1), for a worker
        that stopped making progress; nothing if it has already exited."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGUSR1)
            time.sleep(1.0)  # the dump is written by the worker; give it a moment to land in the log

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM: the worker leaves the group cleanly; SIGKILL if it does not within the deadline."""
        self._ended.set()
        if self.proc.poll() is None:
            self.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.send_signal(signal.SIGKILL)
        self._finish()

    def _finish(self) -> None:
        self.proc.wait(30)
        _LIVE.discard(self)
        self._reader.join(10)
        if self._log and not self._log.closed:
            self._log.close()

    def log_tail(self) -> str:
        with self._lock:
            return "\n".join(self.tail)


# The config keys a harness may set that become worker.py flags (work_ms -> --work-ms), in the
# order they are passed: each variant gets those every worker takes and those its declaration
# reads (lab/registry.py).
WORKER_FLAGS = (*registry.COMMON, "batch", "lanes", "connections", "every", "window", "policy", "lease_s",
                "crash_after")


def start_workers(variant: str, space: RunSpace, log_name: str, args: tuple, count: int = 1,
                  prefixes=(), extra=(), root: Path = ROOT) -> list[Worker]:
    """`count` workers of one variant in the run's group, each logging to LOG_NAME[-wN].log;
    `prefixes[i]`, if given, runs worker i through another command (a network namespace), and
    `extra[i]` gives worker i flags of its own; `root`: another commit's worktree to run them from."""
    workers = []
    for i in range(count):
        log_path = log_dir() / (f"{log_name}-w{i + 1}.log" if count > 1 else f"{log_name}.log")
        log_path.unlink(missing_ok=True)
        workers.append(Worker(variant, space.topic, space.group, space.dsn, log_path,
                              (*args, *(extra[i] if i < len(extra) else ())),
                              prefix=prefixes[i] if i < len(prefixes) else (), root=root))
    return workers


def worker_args(variant: str, config: dict, provider_url: str | None = None) -> tuple:
    """The worker.py flags for `variant` from a harness's config: each key that the variant
    takes and the config sets (not None, not 0)."""
    declared = registry.get(variant)
    args = []
    for key in WORKER_FLAGS:
        if config.get(key) and declared.takes(key):
            args += ["--" + key.replace("_", "-"), config[key]]
    if provider_url and "provider_url" in declared.reads:
        args += ["--provider-url", provider_url]
    return tuple(args)


# --- the recovery phase ------------------------------------------------------------

@dataclasses.dataclass
class Recovery:
    """How a recovery phase ended. `settled`: the group read everything and the effects stood
    still (False: the deadline came first, and whatever is missing then is counted as lost,
    not raised away). `crashed`: exit codes of workers that ended on their own, not killed."""
    seconds: float
    settled: bool
    crashed: list[int]
    state: str


LOSS_STILL_S = 10.0  # everything read, yet events missing: this long without a new effect, and they are lost


def settle(workers: list[Worker], dsn: str, events: int | None, deadline_s: float, group: str | None = None,
           topic: str | None = None, still_s: float = 4.0, *, applied=ledger_applied, pending=None,
           tolerate_exits: bool = False, loss_still_s: float = LOSS_STILL_S) -> Recovery:
    """The recovery phase, the one every harness ends with: wait until every event is applied
    (if `events` is given), no handler is mid-stall, the group's lag is 0 (a share group,
    given no group, has none to read), nothing is `pending(dsn)` and the effects have been
    still for `still_s`, so that a zombie's late write lands inside the window. A variant that
    loses never applies them all: once everything is read and the effects have stood still for
    LOSS_STILL_S, the phase ends with what is there. `applied(dsn)` gives (effects, distinct
    event IDs among them): the ledger's by default, the provider's charges for external
    effects. A worker that exits on its own is recorded as crashed, with its exit code; the
    others go on (every one gone ends the phase). At the deadline the phase ends unsettled,
    and the caller's checker counts what is missing: a run is recorded, never raised away."""
    started = time.monotonic()
    last_rows, still_since, state, crashed = -1, started, "", {}
    while time.monotonic() - started < deadline_s:
        time.sleep(0.5)
        rows, distinct = applied(dsn)
        try:
            behind = lag(group, topic) if group else 0
        except KafkaException as e:  # a leader moving (NOT_LEADER_FOR_PARTITION), a broker restarting: ask again
            error = e.args[0] if e.args else e
            behind = f"unknown ({error.name() if hasattr(error, 'name') else error})"
        waiting = pending(dsn) if pending else 0
        stalled = sum(w.counts.get("stalls", 0) - w.counts.get("stalls_over", 0) for w in workers)
        if rows != last_rows:
            last_rows, still_since = rows, time.monotonic()
        still = time.monotonic() - still_since
        state = (f"{distinct} of {events or '?'} events applied, lag {behind}, {waiting} pending, "
                 f"{stalled} handlers stalled, effects {rows}")
        results.status(f"recovery: {state}")
        quiet = behind == 0 and waiting == 0 and stalled == 0 and still >= still_s
        if quiet and (events is None or distinct >= events or still >= loss_still_s):
            return Recovery(round(time.monotonic() - started, 1), True, list(crashed.values()), state)
        for worker in workers:
            if worker.proc.poll() is not None and id(worker) not in crashed:
                crashed[id(worker)] = worker.proc.returncode
                results.progress(f"a worker exited on its own ({worker.proc.returncode}) mid-run:\n"
                                 f"{worker.log_tail()}")
        if crashed and len(crashed) == len(workers) and not tolerate_exits:
            break  # nobody left to consume: what is missing now stays missing
    return Recovery(round(time.monotonic() - started, 1), False, list(crashed.values()), state)


def recover(variant: str, space: RunSpace, deadline_s: float, log_path: Path | None = None, still_s: float = 3.0,
            args: tuple = (), dsn: str | None = None, **settle_options) -> dict:
    """After the faults: one fresh worker drains the topic; settle() with no event count,
    since a variant that loses never applies them all. Returns its recovery time and counts.
    `dsn`: the worker's connection, if not the run space's (a run with a role of its own)."""
    worker = Worker(variant, space.topic, space.group, dsn or space.dsn, log_path, args)
    try:
        recovery = settle([worker], space.admin, None, deadline_s, space.group, space.topic, still_s,
                          **settle_options)
    finally:
        worker.stop()
    return {"recovery_s": recovery.seconds, "settled": recovery.settled, "crashed": recovery.crashed,
            "counts": dict(worker.counts)}


def log_dir() -> Path:
    """Where the workers' logs go (results/logs, not committed)."""
    path = RESULTS / "logs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def fresh_log(name: str) -> Path:
    """results/logs/NAME.log, emptied: the lines of this run only."""
    path = log_dir() / f"{name}.log"
    path.unlink(missing_ok=True)
    return path


def run_workload(variant: str, run: int, config: dict) -> tuple[tuple, int, list]:
    """A run's worker flags, its seed (the config's plus the run's number, so runs differ and a
    rerun repeats), and its credits drawn on that seed, named r<run>-..."""
    seed = config["seed"] + run
    return worker_args(variant, config), seed, make_events(config["events"], prefix=f"r{run}", seed=seed)


def drained_in_thread(run, group: str, topic: str, deadline_s: float, interval_s: float = 0.2) -> None:
    """run(stop) in a thread until `group` has committed all of `topic`, then stopped; what run
    raised is raised here, after the stop, so a consumer that died fails with its own error."""
    stop, errors = threading.Event(), []

    def target():
        try:
            run(stop)
        except Exception as e:  # raised below, after the stop
            errors.append(e)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        wait_until(lambda: errors or lag(group, topic) == 0, deadline_s, f"group {group} to commit all of {topic}",
                   interval_s=interval_s)
    finally:
        stop.set()
        thread.join(30)
    if errors:
        raise errors[0]
