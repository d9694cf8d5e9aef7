"""The run's world: its own schema, topic and group, the workload published into it, and
what Kafka and Postgres hold afterwards (committed offsets, lag, the effects and the
checker's verdict on them).

Every run gets a schema, a topic and a group of its own (uuid suffix), so a hard kill
leaves nothing behind that a later run could trip over. lab/harness.py adds the workers
and the recovery phase, and re-exports these names, so a measurement reads `harness.X`.

Assumptions: the services named in settings.py are up (`make up`).
"""
import collections
import contextlib
import dataclasses
import random
import time
import uuid

import psycopg
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from psycopg import sql
from psycopg.conninfo import make_conninfo

import consume
from lab import checker, results
from lab.publishing import publish_acknowledged
from lab.settings import ADMIN_DSN, BROKERS, DSN, PROVIDER_DSN, PUBLISHER_DSN, ROOT
from publish import ensure_topic, make_producer
from variants import provider

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


# The lab's own tables: where a worker records the first handling of an event it stalls or
# crashes on (worker.FirstTime), so that a redelivery is not picked again; and provider.py's.
LAB_TABLES = """
CREATE TABLE stalls (event_id text PRIMARY KEY);
CREATE TABLE call_crashes (event_id text PRIMARY KEY);
CREATE TABLE precall_crashes (event_id text PRIMARY KEY);
CREATE TABLE planted_crashes (event_id text PRIMARY KEY);
GRANT SELECT, INSERT ON stalls, call_crashes, precall_crashes, planted_crashes TO inbox_consumer;
GRANT SELECT, INSERT ON planted_crashes TO inbox_publisher;
GRANT SELECT, INSERT, UPDATE ON provider_charges, provider_keys TO inbox_provider;
"""


def create_schema(schema: str, accounts: int = ACCOUNTS, root=ROOT) -> str:
    """Create `schema` as the owner (ADMIN_DSN): schema.sql's tables, grants.sql's grants, the
    lab's tables and `accounts` zero balances. Returns the consumer's DSN for it. `root`: the
    checkout whose schema.sql and lab/grants.sql make it (another commit's worktree, for a run
    of its code: lab/against.py); the lab's tables are this harness's."""
    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    with psycopg.connect(scoped_dsn(schema, ADMIN_DSN), autocommit=True) as conn:
        conn.execute((root / "schema.sql").read_text())
        conn.execute((root / "lab" / "grants.sql").read_text())
        conn.execute(provider.SCHEMA)
        conn.execute(LAB_TABLES)
        conn.execute("INSERT INTO accounts (id) SELECT generate_series(1, %s)", (accounts,))
    return scoped_dsn(schema)


def drop_schema(schema: str, dsn: str = ADMIN_DSN) -> None:
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
    """What one run owns: its schema, its topic and its group, and the DSNs that put the
    schema first: `dsn` the consumer's (for workers), `admin` the owner's (to read what
    they did: a consumer may not read its ledger), `provider` provider.py's, `publisher` the relay's."""
    schema: str
    dsn: str
    topic: str
    group: str

    @property
    def admin(self) -> str:
        return scoped_dsn(self.schema, ADMIN_DSN)

    @property
    def provider(self) -> str:
        return scoped_dsn(self.schema, PROVIDER_DSN)

    @property
    def publisher(self) -> str:
        return scoped_dsn(self.schema, PUBLISHER_DSN)


@contextlib.contextmanager
def run_space(experiment: str, name: str, partitions: int, keep: bool = False, accounts: int = ACCOUNTS,
              root=ROOT):
    """A fresh schema, topic and group for one run, with uuid suffixes, so that whatever a
    hard kill leaves behind cannot meet a later run; dropped on the way out unless `keep`.
    `root`: the checkout whose schema.sql makes its tables (create_schema)."""
    suffix = uuid.uuid4().hex[:8]
    schema = unique(f"{experiment}_{name}".replace("-", "_").replace(".", "_"))
    space = RunSpace(schema, create_schema(schema, accounts, root), f"{experiment}.{name}.{suffix}",
                     f"{experiment}-{name}-{suffix}")
    try:
        create_topic(space.topic, partitions)
        yield space
    finally:
        if not keep:
            drop_schema(schema)
            delete_topics(space.topic, space.topic + ".dlq", space.topic + ".credited")


# --- workload ------------------------------------------------------------------

# How a producer names its events: "seq" is the lab's readable prefix-N; "text" a random
# UUID (version 4) as text, the post's default; "uuid-v7" a time-ordered UUIDv7 as text,
# so a later event's ID sorts after an earlier one's and the inbox's B-tree grows at its
# right-hand edge. Both UUID kinds land in the same text column of processed_messages.
ID_TYPES = ("seq", "text", "uuid-v7")


def event_ids(count: int, prefix: str, id_type: str = "seq") -> list[str]:
    """`count` event IDs of `id_type`, in the order a producer would make them. UUIDs are
    random, not seeded: a kept inbox outlives a measurement, and a second run must not meet
    the first one's IDs there."""
    if id_type == "seq":
        return [f"{prefix}-{n}" for n in range(1, count + 1)]
    rng = random.SystemRandom()
    if id_type == "text":
        return [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(count)]
    if id_type != "uuid-v7":
        raise ValueError(f"unknown id type {id_type!r}; choose from {', '.join(ID_TYPES)}")
    # RFC 9562's layout: 48 bits of Unix milliseconds, the version, 12 bits that here count
    # within the millisecond (carrying into it), so IDs rise strictly in the order made, then
    # the variant and 62 random bits.
    start = time.time_ns() // 1_000_000 << 12
    ids = []
    for n in range(count):
        stamp = start + n
        bits = (stamp >> 12) << 80 | 0x7 << 76 | (stamp & 0xFFF) << 64 | 0b10 << 62 | rng.getrandbits(62)
        ids.append(str(uuid.UUID(int=bits)))
    return ids


def make_events(count: int, prefix: str, accounts: int = ACCOUNTS, seed: int = 0,
                id_type: str = "seq") -> list[tuple[str, dict]]:
    """`count` credits with IDs of `id_type` (prefix-1..prefix-count by default); seq lets a
    worker pick the ones to stall."""
    rng = random.Random(seed)
    return [(event_id, {"account_id": rng.randint(1, accounts), "amount": rng.randint(1, 100), "seq": n})
            for n, event_id in enumerate(event_ids(count, prefix, id_type), start=1)]


# --- a kept inbox: millions of remembered IDs, lent to one run at a time ----------

# The same IDs as event_ids() makes, made by the server, for filling.
FILL_IDS = {"text": "gen_random_uuid()::text", "uuid-v7": "uuidv7()::text"}


def kept_inbox_schema(id_type: str) -> str:
    return f"m3_inbox_{id_type.replace('-', '_')}"


def fill_inbox(id_type: str, rows: int, chunk: int = 1_000_000, schema: str | None = None) -> int:
    """Make the kept inbox of `id_type` (its own schema, kept between runs and measurements)
    hold at least `rows` IDs of consume.CONSUMER_NAME, and return how many it holds. Filled
    without its primary key, which is then built in one sort (far quicker than 50 million
    random inserts into a B-tree that outgrows shared_buffers, the very cost measured; its
    leaves are packed 90% full, where a key grown by random inserts settles lower), then
    VACUUM (ANALYZE) and a CHECKPOINT, so every run starts from a settled table. One that holds far more than `rows`
    (a bigger fill from before) is dropped and filled again. Each chunk and its count are one
    transaction, so an interrupted fill resumes; a table a killed run never gave back is
    fetched home first (rescue_kept_inbox). `schema`: another home than the measurement's."""
    schema = schema or kept_inbox_schema(id_type)
    rescue_kept_inbox(schema)
    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        if conn.execute("SELECT to_regclass(%s)", (f"{schema}.inbox_fill",)).fetchone()[0] is not None:
            # The mark that finds the table wherever a killed run left it (it travels with the table).
            conn.execute(sql.SQL("COMMENT ON TABLE {}.processed_messages IS {}").format(
                sql.Identifier(schema), sql.Literal(kept_mark(schema))))
            held = conn.execute(sql.SQL("SELECT rows FROM {}.inbox_fill").format(sql.Identifier(schema))).fetchone()[0]
            keyed = conn.execute("SELECT to_regclass(%s)", (f"{schema}.processed_messages_pkey",)).fetchone()[0]
            if held > max(rows * 1.25, rows + 2_000_000):
                drop_schema(schema)
            elif held >= rows and keyed is not None:
                return held
    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        if conn.execute("SELECT to_regnamespace(%s)", (schema,)).fetchone()[0] is None:
            create_schema(schema, accounts=0)
            conn.execute(sql.SQL("COMMENT ON TABLE {}.processed_messages IS {}").format(
                sql.Identifier(schema), sql.Literal(kept_mark(schema))))
            conn.execute(sql.SQL("CREATE TABLE {}.inbox_fill (rows bigint NOT NULL)").format(sql.Identifier(schema)))
            conn.execute(sql.SQL("INSERT INTO {}.inbox_fill VALUES (0)").format(sql.Identifier(schema)))
    with psycopg.connect(scoped_dsn(schema, ADMIN_DSN), autocommit=True) as conn:
        conn.execute("SET maintenance_work_mem = '1GB'")
        conn.execute("ALTER TABLE processed_messages DROP CONSTRAINT IF EXISTS processed_messages_pkey")
        held = conn.execute("SELECT rows FROM inbox_fill").fetchone()[0]
        while held < rows:
            n = min(chunk, rows - held)
            with conn.transaction():
                conn.execute(sql.SQL("INSERT INTO processed_messages (consumer, message_id) "
                                     "SELECT %s, {} FROM generate_series(1, %s)").format(sql.SQL(FILL_IDS[id_type])),
                             (consume.CONSUMER_NAME, n))
                held = conn.execute("UPDATE inbox_fill SET rows = rows + %s RETURNING rows", (n,)).fetchone()[0]
            results.status(f"filling the {id_type} inbox: {held:,} of {rows:,}")
        results.progress(f"{id_type} inbox: {held:,} IDs; building its primary key")
        conn.execute("ALTER TABLE processed_messages ADD PRIMARY KEY (consumer, message_id)")
        conn.execute("VACUUM (ANALYZE) processed_messages")
        conn.execute("CHECKPOINT")
    return held


def kept_mark(schema: str) -> str:
    return f"kept inbox, home {schema}"


def rescue_kept_inbox(schema: str) -> str | None:
    """If the kept inbox whose home is `schema` is not at home (a run was killed while it
    held it, so its finally never ran), move it back from the run's schema and recount it
    (that run's claims were never added). Returns the schema it was found in, if any."""
    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        if conn.execute("SELECT to_regnamespace(%s)", (schema,)).fetchone()[0] is None or \
                conn.execute("SELECT to_regclass(%s)", (f"{schema}.processed_messages",)).fetchone()[0] is not None:
            return None
        found = conn.execute(
            "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relname = 'processed_messages' AND obj_description(c.oid, 'pg_class') = %s",
            (kept_mark(schema),)).fetchone()
        if found is None:
            raise RuntimeError(f"the kept inbox of {schema} is gone (its schema is there, its table is not): "
                               f"DROP SCHEMA {schema} CASCADE and let the next run fill it again")
        with conn.transaction():
            conn.execute(sql.SQL("ALTER TABLE {}.processed_messages SET SCHEMA {}").format(
                sql.Identifier(found[0]), sql.Identifier(schema)))
            conn.execute(sql.SQL("UPDATE {0}.inbox_fill SET rows = (SELECT count(*) FROM {0}.processed_messages)")
                         .format(sql.Identifier(schema)))
    results.progress(f"the kept inbox {schema} was left in {found[0]} by a killed run: moved back")
    return found[0]


@contextlib.contextmanager
def kept_inbox(space: RunSpace, id_type: str, schema: str | None = None):
    """Lend the kept inbox of `id_type` to this run: its processed_messages replaces the run's
    own (a rename: ALTER TABLE ... SET SCHEMA moves no data; grants and indexes go with the
    table) and goes back to its schema when the run ends, counted up by the credits the run
    applied (each one claimed an ID). Yields the IDs it held when lent."""
    home = sql.Identifier(schema or kept_inbox_schema(id_type))
    run = sql.Identifier(space.schema)
    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        held = conn.execute(sql.SQL("SELECT rows FROM {}.inbox_fill").format(home)).fetchone()[0]
        with conn.transaction():
            conn.execute(sql.SQL("DROP TABLE {}.processed_messages").format(run))
            conn.execute(sql.SQL("ALTER TABLE {}.processed_messages SET SCHEMA {}").format(home, run))
    try:
        yield held
    finally:
        with psycopg.connect(ADMIN_DSN, autocommit=True) as conn, conn.transaction():
            claimed = conn.execute(sql.SQL("SELECT count(DISTINCT event_id) FROM {}.ledger").format(run)).fetchone()[0]
            conn.execute(sql.SQL("ALTER TABLE {}.processed_messages SET SCHEMA {}").format(run, home))
            conn.execute(sql.SQL("UPDATE {}.inbox_fill SET rows = rows + %s").format(home), (claimed,))


def produce_events(topic: str, events: list[tuple[str, dict]], timeout_s: float = 120.0, partitions=None,
                   **producer_overrides) -> list[str]:
    """Publish every event or raise: a harness must know exactly what was published.
    `partitions`: each event's partition, in order (default: its key's)."""
    acked = publish_acknowledged(make_producer(**producer_overrides), topic, events, timeout_s, partitions)
    if acked != len(events):
        raise RuntimeError(f"only {acked} of {len(events)} events were acknowledged by the broker")
    return [event_id for event_id, _ in events]


# --- what Kafka holds: committed offsets, lag ------------------------------------

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
    """Messages in `topic` past `group`'s committed offsets (all of them if it committed none).
    The probe reads uncommitted: under read_committed the broker answers UNSTABLE_OFFSET_COMMIT,
    and librdkafka retries it, for as long as a killed transactional member's offsets are still
    pending in its open transaction (up to its transaction.timeout.ms). Those offsets are not
    counted as committed here, so the lag reads high until they are: a wait, not a wrong answer."""
    probe = Consumer({"bootstrap.servers": BROKERS, "group.id": group, "enable.auto.commit": False,
                      "isolation.level": "read_uncommitted"})
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


def record_ids(topic: str, isolation: str, timeout_s: float = 120.0) -> list[str]:
    """The event_id header of every record in `topic`, read from the beginning to the end with
    isolation.level `isolation` (read_committed skips aborted transactions' records; the end
    is then the last stable offset). Call it once no transaction is open any more."""
    return read_records(topic, isolation, consume.event_id_of, timeout_s)


def record_times(topic: str, timeout_s: float = 120.0) -> list[tuple[str, float]]:
    """(event ID, the record's timestamp in unix seconds) for every record in `topic`: the
    producer's CreateTime, stamped when publish() handed the record to the client."""
    return read_records(topic, "read_uncommitted", lambda msg: (consume.event_id_of(msg), msg.timestamp()[1] / 1000),
                        timeout_s)


def read_records(topic: str, isolation: str, take, timeout_s: float = 120.0) -> list:
    """take(msg) for every record in `topic`, from the beginning to the end (see record_ids)."""
    probe = Consumer({"bootstrap.servers": BROKERS, "group.id": unique("probe"), "enable.auto.commit": False,
                      "isolation.level": isolation, "auto.offset.reset": "earliest"})
    try:
        partitions = probe.list_topics(topic, timeout=30).topics[topic].partitions
        assigned = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions]
        ends = {p: probe.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions}
        probe.assign(assigned)
        taken, end = [], time.monotonic() + timeout_s
        while time.monotonic() < end:
            for msg in probe.consume(1000, 0.5):
                if not msg.error():
                    taken.append(take(msg))
            at = probe.position([TopicPartition(topic, p) for p in partitions])
            positions = {tp.partition: tp.offset for tp in at}
            # A partition that holds nothing readable has no position (negative): its end is its start.
            if all(ends[p] == 0 or positions[p] >= ends[p] for p in partitions):
                return taken
        raise TimeoutError(f"{topic} ({isolation}) not read to its end within {timeout_s:g}s: at {positions}, "
                           f"ends {ends}")
    finally:
        probe.close()


# --- what the consumers did: effects, and the checker's verdict on them --------------

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


def credit_times(dsn: str) -> list[tuple[str, float]]:
    """(event ID, unix time) of every ledger row, in the order they were written: the
    clock_timestamp() each credit took, for the timelines."""
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT event_id, extract(epoch FROM applied_at)::float8 FROM ledger "
                            "ORDER BY applied_at").fetchall()


def ledger_count(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM ledger").fetchone()[0]


def distinct_applied(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(DISTINCT event_id) FROM ledger").fetchone()[0]


def order_of(events: list[tuple[str, dict]], dsn: str) -> int:
    """checker.order_violations on this run's ledger: per account, its credits against the
    producer's order (an account is one key, so one partition)."""
    return checker.order_violations(dict(events), effects(dsn)["ledger"])


def ledger_applied(dsn: str) -> tuple[int, int]:
    """(ledger rows, distinct event IDs among them): settle()'s default `applied`."""
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*), count(DISTINCT event_id) FROM ledger").fetchone()


def verdict_of(events: list[tuple[str, dict]], dsn: str, on_provider: bool = False,
               effects_query: str | None = None) -> dict:
    """The checker on this run's published events and its effects: the ledger and the
    balances, or (`on_provider`) the provider's charges and what they add up to, or a
    command's own effects (`effects_query`: one event ID a row), whose balances are not checked."""
    if on_provider:
        charges = provider_charges(dsn)
        return checker.check(dict(events), charges, checker.balances_of(charges))
    if effects_query:
        with psycopg.connect(dsn) as conn:
            rows = conn.execute(effects_query).fetchall()
        verdict = checker.check(dict(events), rows, {})
        return {**verdict, "balances_exact": None, "balance_total": None}
    applied = effects(dsn)
    return checker.check(dict(events), applied["ledger"], applied["balances"])


LEDGER_EFFECTS = "SELECT event_id FROM ledger"  # one event ID a row: the effects a run counts by default
EVIDENCE = 5  # the first this many duplicated and lost IDs are named, with where their records sit


def applied_ids(dsn: str, query: str = LEDGER_EFFECTS) -> collections.Counter:
    """How many effects each event ID has."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(f"SELECT e, count(*) FROM ({query}) AS effects(e) GROUP BY e").fetchall()
    return collections.Counter({str(event_id): n for event_id, n in rows})


def positions(topic: str, wanted: set[str]) -> dict[str, list[str]]:
    """Where each wanted event ID's records sit in the topic: ["partition/offset", ...]."""
    if not wanted:
        return {}
    found = collections.defaultdict(list)
    for event_id, partition, offset in read_records(
            topic, "read_uncommitted", lambda msg: (consume.event_id_of(msg), msg.partition(), msg.offset())):
        if event_id in wanted:
            found[event_id].append(f"{partition}/{offset}")
    return dict(found)


def evidence_of(events: list[tuple[str, dict]], applied: collections.Counter, topic: str) -> dict:
    """The first duplicated and lost event IDs, in the order they were published, each with
    the partition/offset of its records (read back from the run's topic before it goes), and
    how many of each there are: what a count of duplicates or losses points at."""
    duplicated = [(event_id, applied[event_id]) for event_id, _ in events if applied.get(event_id, 0) > 1]
    lost = [event_id for event_id, _ in events if event_id not in applied]
    where = positions(topic, {event_id for event_id, _ in duplicated[:EVIDENCE]} | set(lost[:EVIDENCE]))
    return {"duplicated": [{"event_id": e, "applied": n, "records": where.get(e, [])}
                           for e, n in duplicated[:EVIDENCE]],
            "lost": [{"event_id": e, "records": where.get(e, [])} for e in lost[:EVIDENCE]],
            "duplicated_ids": len(duplicated), "lost_ids": len(lost)}
