"""Plumbing shared by the tests and the measure_* harnesses, and the checker.

Every run gets a schema, a topic and a group of its own (uuid suffix), so a hard
kill leaves nothing behind that a later run could trip over. The checker is a
pure function of what was published and what the ledger holds; it never asks
Kafka or Postgres anything, so it is unit-tested on hand-made data.

Assumptions: the services named in settings.py are up (`make up`).
"""
import collections
import contextlib
import dataclasses
import json
import os
import platform
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psycopg
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from psycopg import sql
from psycopg.conninfo import make_conninfo

import consume
from publish import ensure_topic, make_producer, publish_acknowledged
from settings import BROKERS, DSN

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results"
ACCOUNTS = 100


# --- bounded waiting -----------------------------------------------------------

def wait_until(predicate, timeout_s: float, what: str, interval_s: float = 0.1):
    """Return predicate()'s first truthy value; TimeoutError naming `what` at the deadline."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    value = predicate()  # one last look, so a deadline of 0 still checks once
    if value:
        return value
    raise TimeoutError(f"timed out after {timeout_s:g}s waiting for {what}")


# --- per-run schema, topic, group ---------------------------------------------

def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


def scoped_dsn(schema: str, dsn: str = DSN) -> str:
    """The same database, with `schema` first on the search path: the scripts' unqualified
    table names then resolve to this run's tables."""
    return make_conninfo(dsn, options=f"-c search_path={schema}")


def create_schema(schema: str, accounts: int = ACCOUNTS, dsn: str = DSN) -> str:
    """Create `schema` with schema.sql's tables and `accounts` zero balances; return its DSN."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    scoped = scoped_dsn(schema, dsn)
    with psycopg.connect(scoped, autocommit=True) as conn:
        conn.execute((ROOT / "schema.sql").read_text())
        conn.execute("INSERT INTO accounts (id) SELECT generate_series(1, %s)", (accounts,))
    return scoped


def drop_schema(schema: str, dsn: str = DSN) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def create_topic(name: str, partitions: int = 1) -> str:
    ensure_topic(name, partitions)
    return name


def set_group_configs(group: str, configs: dict, timeout_s: float = 30.0) -> None:
    """Set group-level configs on the broker (KIP-848 and share groups keep their timeouts
    there), before the group exists, so that its first member already sees them."""
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(name, str(value), incremental_operation=AlterConfigOpType.SET) for name, value in configs.items()])
    admin = AdminClient({"bootstrap.servers": BROKERS})
    for future in admin.incremental_alter_configs([resource], request_timeout=timeout_s).values():
        future.result(timeout=timeout_s)


def delete_topics(*names: str, timeout_s: float = 30.0) -> None:
    admin = AdminClient({"bootstrap.servers": BROKERS})
    existing = admin.list_topics(timeout=timeout_s).topics
    doomed = [n for n in names if n in existing]
    for future in admin.delete_topics(doomed, operation_timeout=timeout_s).values() if doomed else ():
        future.result(timeout=timeout_s)


@dataclasses.dataclass(frozen=True)
class RunSpace:
    """What one run owns: its schema (and the DSN that puts it first), its topic and its group."""
    schema: str
    dsn: str
    topic: str
    group: str


@contextlib.contextmanager
def run_space(experiment: str, name: str, partitions: int, stalls: bool = False, keep: bool = False,
              accounts: int = ACCOUNTS):
    """A fresh schema, topic and group for one run, with uuid suffixes, so that whatever a
    hard kill leaves behind cannot meet a later run; dropped on the way out unless `keep`.
    `stalls` adds the table the --slow-every handlers claim their first handling in, made
    here so that the workers never race to create it."""
    suffix = uuid.uuid4().hex[:8]
    schema = unique(f"{experiment}_{name}".replace("-", "_").replace(".", "_"))
    space = RunSpace(schema, create_schema(schema, accounts), f"{experiment}.{name}.{suffix}",
                     f"{experiment}-{name}-{suffix}")
    try:
        if stalls:
            with psycopg.connect(space.dsn, autocommit=True) as conn:
                conn.execute("CREATE TABLE stalls (event_id text PRIMARY KEY)")
        create_topic(space.topic, partitions)
        yield space
    finally:
        if not keep:
            drop_schema(schema)
            delete_topics(space.topic, space.topic + ".dlq")


def tally(workers) -> tuple[collections.Counter, dict]:
    """The workers' counted log lines, added up, and the first example line of each kind."""
    counts, examples = collections.Counter(), {}
    for worker in workers:
        counts.update(worker.counts)
        for kind, line in worker.examples.items():
            examples.setdefault(kind, line)
    return counts, examples


def failures(counts: collections.Counter, kind: str = "commit_failed") -> dict:
    """{error code: how many} for a counted kind with a code, e.g. commit_failed:UNKNOWN_MEMBER_ID."""
    return {key.split(":", 1)[1]: n for key, n in counts.items() if key.startswith(f"{kind}:")}


def verdict_of(events: list[tuple[str, dict]], dsn: str) -> dict:
    """The checker on this run's published events and its ledger and balances."""
    applied = effects(dsn)
    return check(dict(events), applied["ledger"], applied["balances"])


# --- workload ------------------------------------------------------------------

def make_events(count: int, prefix: str, accounts: int = ACCOUNTS, seed: int = 0) -> list[tuple[str, dict]]:
    """`count` credits with IDs prefix-1..prefix-count; seq lets a worker pick the ones to stall."""
    rng = random.Random(seed)
    return [(f"{prefix}-{n}", {"account_id": rng.randint(1, accounts), "amount": rng.randint(1, 100), "seq": n})
            for n in range(1, count + 1)]


def produce_events(topic: str, events: list[tuple[str, dict]], timeout_s: float = 120.0, partitions=None,
                   **producer_overrides) -> list[str]:
    """Publish every event or raise: a harness must know exactly what was published.
    `partitions`: each event's partition, in order (default: its key's)."""
    acked = publish_acknowledged(make_producer(**producer_overrides), topic, events, timeout_s, partitions)
    if acked != len(events):
        raise RuntimeError(f"only {acked} of {len(events)} events were acknowledged by the broker")
    return [event_id for event_id, _ in events]


# A broker that has just started (or restarted) answers these until its group coordinator is loaded.
COORDINATOR_NOT_READY = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                         KafkaError.COORDINATOR_NOT_AVAILABLE}


def committed_offsets(probe: Consumer, partitions: list, timeout_s: float) -> list:
    """probe.committed(), retried while the coordinator is not ready, for at most timeout_s."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            return probe.committed(partitions, timeout=timeout_s)
        except KafkaException as e:
            if e.args[0].code() not in COORDINATOR_NOT_READY:
                raise
            time.sleep(0.2)
    return probe.committed(partitions, timeout=timeout_s)  # the last try raises whatever it gets


def lag(group: str, topic: str, timeout_s: float = 10.0) -> int:
    """Messages in `topic` past `group`'s committed offsets (all of them if it committed none)."""
    probe = Consumer({"bootstrap.servers": BROKERS, "group.id": group, "enable.auto.commit": False})
    try:
        partitions = probe.list_topics(topic, timeout=timeout_s).topics[topic].partitions
        committed = committed_offsets(probe, [TopicPartition(topic, p) for p in partitions], timeout_s)
        total = 0
        for tp in committed:
            low, high = probe.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=timeout_s)
            total += high - (tp.offset if tp.offset >= 0 else low)
        return total
    finally:
        probe.close()


def topic_size(topic: str, timeout_s: float = 10.0) -> int:
    """How many messages `topic` holds (sum of its partitions' high watermarks)."""
    probe = Consumer({"bootstrap.servers": BROKERS, "group.id": unique("probe")})
    try:
        partitions = probe.list_topics(topic, timeout=timeout_s).topics[topic].partitions
        return sum(probe.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)[1] for p in partitions)
    finally:
        probe.close()


def effects(dsn: str) -> dict:
    """What the consumers did: every ledger row, and every balance."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT event_id, account_id, amount FROM ledger ORDER BY id").fetchall()
        balances = dict(conn.execute("SELECT id, balance FROM accounts").fetchall())
    return {"ledger": rows, "balances": balances}


def provider_charges(dsn: str) -> list[tuple]:
    """What provider.py charged: (reference, account, amount) rows, the ledger's shape."""
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT reference, account_id, amount FROM provider_charges ORDER BY id").fetchall()


def provider_applied(dsn: str) -> tuple[int, int]:
    """(charges, distinct references among them): settle()'s `applied` for external effects."""
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*), count(DISTINCT reference) FROM provider_charges").fetchone()


def external_pending(dsn: str) -> int:
    """Effects still `processing`, and outbox rows not yet sent."""
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT (SELECT count(*) FROM external_effects WHERE state <> 'done') + "
                            "(SELECT count(*) FROM outbox WHERE sent_at IS NULL)").fetchone()[0]


def provider_verdict(events: list[tuple[str, dict]], dsn: str) -> dict:
    """The checker on the provider's side: charges stand in for ledger rows, and their sums for balances."""
    rows = provider_charges(dsn)
    balances = collections.Counter()
    for _, account, amount in rows:
        balances[account] += amount
    return check(dict(events), rows, dict(balances))


def ledger_count(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM ledger").fetchone()[0]


# --- the checker -----------------------------------------------------------------

def check(published: dict[str, dict], ledger: list[tuple], balances: dict[int, int]) -> dict:
    """Compare what was published with what was applied. Pure: no I/O.

    published: event ID -> event ({"account_id", "amount"}); ledger: (event_id,
    account_id, amount) rows; balances: account -> balance.
    duplicates counts ledger rows beyond the first per event ID; lost counts
    published IDs with no row; balances_exact says every account holds exactly
    the sum of its published credits.
    """
    per_id = collections.Counter(row[0] for row in ledger)
    expected = collections.Counter()
    for event in published.values():
        expected[event["account_id"]] += event["amount"]
    accounts = set(expected) | set(balances)
    return {
        "duplicates": sum(n - 1 for event_id, n in per_id.items() if event_id in published),
        "lost": sum(1 for event_id in published if event_id not in per_id),
        "unexpected": sum(n for event_id, n in per_id.items() if event_id not in published),
        "ledger_rows": len(ledger),
        "balance_total": sum(balances.values()),
        "expected_balance": sum(expected.values()),
        "balances_exact": all(balances.get(a, 0) == expected.get(a, 0) for a in accounts),
    }


# --- workers: start them, read their logs, kill them -----------------------------

COUNTED = {
    "skipped": re.compile(r"skipped duplicate "),
    "commit_failed": re.compile(r"offset commit failed: (\S+)"),
    "evictions": re.compile(r"\|MAXPOLL\|"),  # librdkafka's own line; the app's error event repeats it
    "stalls": re.compile(r"stalling "),
    "stalls_over": re.compile(r"stall over "),
    "ack_failed": re.compile(r"acknowledgement failed: (\S+)"),  # share groups: the lock had expired
    # External effects (consume_external): a lease that ran short, or was taken over, before its end.
    "lease_short": re.compile(r"LeaseRunningOut: "),
    "lease_taken_over": re.compile(r"taken over before its mark-done"),
    "provider_failed": re.compile(r"ProviderError: "),
    # consume.Database: a transaction the server rolled back (deadlock, serialization failure), run again.
    "retried": re.compile(re.escape(consume.RETRIED_LOG.split(" %s")[0]) + r" (\w+)"),
    "died_of_deadlock": re.compile(r"DeadlockDetected: "),
}
ASSIGNMENT = re.compile(r"partitions (assigned|revoked|lost): (\S+)")  # consume.log_partitions


class Worker:
    """One `worker.py` process. Its log is read as it is written, so a harness can wait
    on events ("first side effect") instead of sleeping, and count what the checkers need."""

    def __init__(self, variant: str, topic: str, group: str, dsn: str, log_path: Path | None = None,
                 args: tuple = (), prefix: tuple = ()):
        """`prefix` runs the worker through another command, e.g. `ip netns exec NS`
        (which execs it, so the pid, and a kill, are the worker's own)."""
        env = dict(os.environ, CONSUMER_DSN=dsn, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, str(ROOT / "worker.py"), "--variant", variant, "--topic", topic,
             "--group", group, *map(str, args)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        )
        self.first_effect = threading.Event()
        self.report: dict | None = None
        self.counts = collections.Counter()
        self.examples: dict[str, str] = {}
        self.assignment: set[int] = set()  # the partitions it holds now, from its own log lines
        self.tail = collections.deque(maxlen=40)
        self._lock = threading.Lock()
        self._log = open(log_path, "a") if log_path else None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if self._log:
                self._log.write(line)
            with self._lock:
                self.tail.append(line.rstrip())
                if "first side effect" in line:
                    self.first_effect.set()
                assigned = ASSIGNMENT.search(line)
                if assigned:
                    what, partitions = assigned.groups()
                    held = set() if partitions == "none" else {int(p) for p in partitions.split(",")}
                    self.assignment = held if what == "assigned" else self.assignment - held
                if " report: " in line:  # a worker's own measurement, one JSON object
                    self.report = json.loads(line.split(" report: ", 1)[1])
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

    def kill(self) -> None:
        """SIGKILL: no finally, no close(), no last commit."""
        self.proc.kill()
        self._finish()

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM: the worker leaves the group cleanly; SIGKILL if it does not within the deadline."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._finish()

    def _finish(self) -> None:
        self.proc.wait(30)
        self._reader.join(10)
        if self._log and not self._log.closed:
            self._log.close()

    def log_tail(self) -> str:
        with self._lock:
            return "\n".join(self.tail)


# config key -> worker.py flag, and the variants the flag means something to (None: all of them)
WORKER_FLAGS = {
    "work_ms": ("--work-ms", None),
    "session_timeout_ms": ("--session-timeout-ms", None),
    "heartbeat_interval_ms": ("--heartbeat-interval-ms", None),
    "max_poll_interval_ms": ("--max-poll-interval-ms", None),
    "group_protocol": ("--group-protocol", None),
    "slow_every": ("--slow-every", None),
    "slow_seconds": ("--slow-seconds", None),
    "batch": ("--batch", {"d", "raw"}),
    "policy": ("--policy", {"ext"}),
    "lease_s": ("--lease-s", {"ext"}),
}


def worker_args(variant: str, config: dict, provider_url: str | None = None) -> tuple:
    """The worker.py flags for `variant` from a harness's config: each key that the variant
    understands and the config sets (not None, not 0)."""
    args = []
    for key, (flag, only) in WORKER_FLAGS.items():
        if config.get(key) and (only is None or variant in only):
            args += [flag, config[key]]
    if provider_url and variant in ("ext", "outbox", "relay"):
        args += ["--provider-url", provider_url]
    return tuple(args)


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def drive(name: str, out, config: dict, variants, run_once, summarise, table, verdict_line,
          force: bool = False) -> dict:
    """The loop every measurement runs: runs interleaved across variants (so machine noise
    spreads over all of them), a finished run resumed rather than repeated, a verdict line
    and the record's plain counts after each, the summary table at the end."""
    results = ResultsFile(name, Path(out), config, force)
    with measurement_lock(name):
        for run in range(1, config["runs"] + 1):
            for variant in variants:
                if results.done(variant=variant, run=run):
                    continue
                progress(f"{name}: {variant} run {run} of {config['runs']}")
                record = run_once(variant, run, config)
                results.add(record, summarise)
                print(verdict_line(record))
                print(json.dumps({k: v for k, v in record.items() if not isinstance(v, (list, dict))}), flush=True)
    results.close(table)
    return results.document


def log_dir() -> Path:
    """Where the workers' logs go (results/logs, not committed)."""
    path = RESULTS / "logs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def distinct_applied(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(DISTINCT event_id) FROM ledger").fetchone()[0]


def settle(workers: list[Worker], dsn: str, events: int, deadline_s: float, group: str | None = None,
           topic: str | None = None, still_s: float = 4.0, *, applied=None, pending=None,
           tolerate_exits: bool = False) -> float:
    """The recovery phase for workers that run on: wait until every event is applied, no
    handler is mid-stall, the group's lag is 0 (a share group, given no group, has none to
    read), nothing is `pending` and the effects have been still for `still_s`, so that a
    zombie's late write lands inside the window. `applied(dsn)` gives (effects, distinct
    event IDs among them); the ledger's by default. A worker that exits stops the run,
    unless `tolerate_exits` (the race harness counts the dead; the rest take over their
    partitions). Returns the seconds it took; RuntimeError with the state at the deadline."""
    applied = applied or (lambda d: (ledger_count(d), distinct_applied(d)))
    started = time.monotonic()
    last_rows, still_since, state = -1, started, ""
    while time.monotonic() - started < deadline_s:
        time.sleep(0.5)
        rows, distinct = applied(dsn)
        behind = lag(group, topic) if group else 0
        waiting = pending(dsn) if pending else 0
        stalled = sum(w.counts.get("stalls", 0) - w.counts.get("stalls_over", 0) for w in workers)
        if rows != last_rows:
            last_rows, still_since = rows, time.monotonic()
        state = (f"{distinct} of {events} events applied, lag {behind}, {waiting} pending, "
                 f"{stalled} handlers stalled, effects {rows}")
        if (distinct >= events and behind == 0 and waiting == 0 and stalled == 0
                and time.monotonic() - still_since >= still_s):
            return round(time.monotonic() - started, 1)
        dead = [w for w in workers if w.proc.poll() is not None]
        if dead and (not tolerate_exits or len(dead) == len(workers)):
            raise RuntimeError(f"a worker exited ({dead[0].proc.returncode}) mid-run:\n{dead[0].log_tail()}")
    raise RuntimeError(f"the run did not settle within {deadline_s:g}s: {state}")


def recover(variant: str, topic: str, group: str, dsn: str, deadline_s: float, log_path: Path | None = None,
            still_s: float = 3.0, args: tuple = ()) -> dict:
    """The recovery phase: one worker drains until lag is 0 and the ledger has been still
    for `still_s`; RuntimeError naming lag and rows if that does not happen by the deadline."""
    worker = Worker(variant, topic, group, dsn, log_path, args)
    started = time.monotonic()
    last_rows, still_since, behind = -1, started, None
    try:
        while time.monotonic() - started < deadline_s:
            time.sleep(0.5)
            rows, behind = ledger_count(dsn), lag(group, topic)
            if rows != last_rows:
                last_rows, still_since = rows, time.monotonic()
            if behind == 0 and time.monotonic() - still_since >= still_s:
                break
            if worker.proc.poll() is not None:
                raise RuntimeError(f"the recovery worker exited ({worker.proc.returncode}):\n{worker.log_tail()}")
        else:
            raise RuntimeError(f"recovery did not finish within {deadline_s:g}s: lag {behind}, "
                               f"ledger rows {last_rows}\n{worker.log_tail()}")
    finally:
        worker.stop()
    return {"recovery_s": round(time.monotonic() - started, 1), "counts": dict(worker.counts)}


# --- what every results file records ----------------------------------------------

def machine() -> dict:
    mem_kib = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    except OSError:
        pass
    return {"cores": os.cpu_count(), "memory_gib": round(mem_kib / 1024 / 1024, 1),
            "platform": platform.platform(), "python": platform.python_version()}


def versions() -> dict:
    import confluent_kafka

    import stack

    with psycopg.connect(DSN) as conn:
        postgres = conn.execute("SHOW server_version").fetchone()[0]
    return {"kafka": stack.kafka_version() or "unknown", "postgresql": postgres,
            "confluent_kafka": confluent_kafka.__version__, "librdkafka": confluent_kafka.libversion()[0],
            "psycopg": psycopg.__version__}


def stats(values) -> dict:
    values = list(values)
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


class ResultsFile:
    """One harness's results JSON, in the shape every harness shares. A file with the
    same config and versions is resumed (its finished runs are kept); it is rewritten
    atomically after every run, so an interrupted measurement loses at most one run."""

    def __init__(self, name: str, path: Path, config: dict, force: bool = False):
        self.path = Path(path)
        self.document = {"harness": name, "config": config, "machine": machine(), "versions": versions(),
                         "runs": [], "summary": {}}
        if self.path.exists():
            previous = json.loads(self.path.read_text())
            same = (previous.get("config"), previous.get("versions")) == (config, self.document["versions"])
            if same:
                self.document["runs"] = previous["runs"]
                print(f"resuming {self.path}: {len(self.runs)} runs already done", file=sys.stderr)
            elif not force:
                raise SystemExit(f"{name}: {self.path} holds runs with another config or other versions; "
                                 "use --out or --force")

    @property
    def runs(self) -> list[dict]:
        return self.document["runs"]

    def done(self, **fields) -> bool:
        """Whether a run with these field values is already recorded, e.g. done(variant="c", run=2)."""
        return any(all(r.get(k) == v for k, v in fields.items()) for r in self.runs)

    def add(self, record: dict, summarise) -> None:
        self.runs.append(record)
        self.document["summary"] = summarise(self.runs)
        write_results(self.path, self.document)

    def close(self, table) -> None:
        """The closing summary table, made from the summary by `table`, and where it is."""
        print()
        print(table(self.document["summary"]))
        print(f"\nwritten to {self.path}")


def write_results(path: Path, document: dict) -> None:
    """Write atomically, so an interrupted run never leaves half a file to resume from."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(path.suffix + ".partial")
    partial.write_text(json.dumps(document, indent=2, default=str) + "\n")
    partial.replace(path)


class measurement_lock:
    """One measurement at a time on these services; a second one fails at once, by name."""

    def __init__(self, name: str):
        self.path = RESULTS / "measurement.lock"
        self.name = name
        self._fd = None

    def __enter__(self):
        import fcntl

        RESULTS.mkdir(exist_ok=True)
        self._fd = open(self.path, "a+")
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._fd.seek(0)
            holder = self._fd.read().strip() or "another measurement"
            raise SystemExit(f"{self.name}: {holder} is running on these services; wait for it to finish") from None
        self._fd.seek(0)
        self._fd.truncate()
        self._fd.write(f"{self.name} (pid {os.getpid()})")
        self._fd.flush()
        return self

    def __exit__(self, *exc):
        self._fd.close()
