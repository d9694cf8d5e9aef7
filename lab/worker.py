"""One consumer variant in one process, so a harness can SIGKILL it mid-stream.

Claim: the variants differ only in when the offset is committed and whether
the inbox is used; the side effect is the same single Postgres transaction
(credit the account, write a ledger row) in all of them:

    a1  auto-commit with the client's defaults, poll() one message at a time, no dedup
    a2  auto-commit with the client's defaults, consume() in batches of 100, no dedup
    b   auto-commit off, synchronous commit after the DB transaction, no inbox
    c   consume.run() unchanged: the inbox, then the commit; started again if it stops on a
        lost database, as a supervisor would (supervised)
    c-reconnect  c's loop on variants.common.Database, which reconnects in place instead
    d   consume_batched.run_batched(): the inbox for up to --batch messages in one transaction,
        then one synchronous commit of the batch's offsets
    k   consume_parallel.run_parallel(): handle_once on --lanes threads, one key to one lane,
        each partition's offset committed up to its contiguous watermark
    p   consume_pipelined.run_pipelined(): d's guarantee, one statement per batch, the next
        batch read and decoded while the last one commits
    raw the same client reading the topic with no database and no commits: the
        ceiling the client alone reaches, for measure_throughput.py
    db, db-d  no Kafka and no decoding: --expect credits, built in memory in batches of --batch,
        through p's statement (db) or d's handle_batch (db-d), one after another on one
        connection: the database's ceiling for that work, for measure_throughput.py
    ext     the effect is a call to provider.py, with consume_external's lease and --policy
    outbox  the inbox transaction writes an outbox row; a relay makes the call
    relay   the outbox relay (no Kafka), calling provider.py with each row's key
    share-b, share-c   b and c as members of a share group (KIP-932) instead of a consumer group
    e, f    consume_eos.run_eos(): Kafka's exactly-once loop (read_committed, a transactional
            producer, one output record per credit, --every messages per transaction), crediting
            Postgres directly (e) or through handle_once (f)
    o       consume_offsets.run_with_offsets(): c with each partition's next offset in the inbox
            transaction, read back (and sought to) on every assignment and reconnect
    kafka-relay  relay.py: events_outbox to --topic (CONSUMER_DSN is then the publisher's)
    publisher    publishing.publish_journaled(): --events-file to --topic at --rate, resending on
                 restart whatever --journal holds no acknowledgement for

Assumptions: CONSUMER_DSN points at a database (or a schema, via search_path)
with schema.sql's tables, grants.sql's grants and the lab's tables
(harness.create_schema makes all three); the topic exists. The worker runs until it is killed,
or stops cleanly on SIGTERM. The lines a harness waits on or counts are
defined once, where they are printed (the *_LOG constants below and in
consume.py), and parsed in one place, harness.py; a planted crash exits with
one of the EXIT_CRASHED_* codes.

    CONSUMER_DSN=... python -m lab.worker --variant c --topic T --group G --work-ms 10
"""
import faulthandler
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

import psycopg
from confluent_kafka import Consumer

import consume
from lab import cli, more_variants, provenance
from lab.settings import BROKERS, DSN
from publish import ensure_topic, make_producer
from variants import common, consume_batched, consume_parallel, consume_pipelined

log = logging.getLogger("worker")
LOG_FORMAT = "%(asctime)s {variant}[{pid}] %(name)s %(message)s"  # harness.py parses this shape

# The lines the harnesses count or wait on, printed here and nowhere else (harness.py parses them).
FIRST_EFFECT_LOG = "first side effect %s"
STALLING_LOG = "stalling %s for %gs"
STALL_OVER_LOG = "stall over %s, writing its effect"
REPORT_LOG = "report: %s"  # raw's own measurement, one JSON object
ACK_FAILED_LOG = "acknowledgement failed: %s (%s/%s)"  # share groups: the record's lock had expired
# Exit codes of a worker that crashed itself on purpose (a planted crash), not by accident.
EXIT_CRASHED_AFTER_EFFECT = 3  # the effect landed (a DB commit, a provider call); nothing records it further
EXIT_CRASHED_BEFORE_CALL = 4  # the lease is taken; the call never went out
VARIANTS = ("a1", "a2", "b", "c", "c-reconnect", "d", "k", "p", "raw", "db", "db-d", "ext", "outbox", "relay",
            "share-b", "share-c", "e", "f", "kafka-relay", "publisher", "o")
# Where an e or f worker may crash itself on purpose (--crash-point), once per chosen event.
CRASH_POINTS = {"pg-committed": "after the event's Postgres commit, before commit_transaction",
                "kafka-committed": "after commit_transaction of the event's batch, before the next poll",
                "acked": "after the broker acknowledged the event, before the relay marked it published"}
CRASHING_LOG = "crashing %s: %s"  # the point's description, the event ID
PUBLISHED_LOG = "publisher done: %d acknowledged in this session"
RESTARTED_LOG = "consumer stopped on a lost database (%s); started again after %.1fs"
RESTART_GIVE_UP_S = 120.0  # without a run that lasted, the database is gone, not restarting


def run_reconnecting(args, stop: threading.Event, apply, after_db_commit, overrides: dict) -> None:
    """c-reconnect: consume.run's loop with variants.common.Database, which keeps the connection
    through a database restart instead of stopping (what consume.py did before it left that to
    its supervisor). Kept so M6 can measure the two side by side (README, "Reconnect or exit")."""
    with common.consuming(args.topic, args.group, DSN, overrides) as (consumer, dead_letters, db):
        while not stop.is_set():
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            outcome = db.run(consume.process, msg, dead_letters, consume.handle_once, apply)
            after_db_commit(msg, outcome)
            consume.commit_offset(consumer, msg)


# The server's ways of ending a session beside an OperationalError: an idle-in-transaction
# (25P03) or transaction timeout (25P04). A restart reconnects, and replays only unacknowledged work.
SESSION_ENDED = ("25P03", "25P04")


def ended_the_session(error: psycopg.Error) -> bool:
    """Whether `error` means the session is gone (so a restart may help), not that the work is wrong."""
    if isinstance(error, psycopg.OperationalError):
        return not consume.refused_for_good(error)  # a wrong password is not waited out
    return error.sqlstate in SESSION_ENDED


def supervised(stop: threading.Event, run_once) -> None:
    """What systemd's Restart=on-failure does for consume.py: start it again once it has stopped
    on a lost database. It never commits an offset before its transaction, so the restart
    replays only what the inbox skips (or, for b, what it credits again). Backs off, capped,
    and gives up after RESTART_GIVE_UP_S of runs that ended within seconds of starting."""
    delay, failing_since = 0.1, None
    while not stop.is_set():
        started = time.monotonic()
        try:
            run_once()
            return
        except psycopg.errors.TransactionRollback:
            raise  # a deadlock or serialization failure is no lost database: not restarted; the harness
            # records the worker's exit as a crash
        except psycopg.Error as e:
            if not ended_the_session(e):
                raise  # a real error on a live connection: the harness records the exit as a crash
            now = time.monotonic()
            if now - started > 10:  # it had been running: a new outage, not the same one
                delay, failing_since = 0.1, None
            failing_since = failing_since or now
            if now - failing_since > RESTART_GIVE_UP_S:
                raise
            stop.wait(delay)
            log.warning(RESTARTED_LOG, consume.first_line(e), delay)
            delay = min(delay * 2, 5.0)


def apply_without_inbox(conn: psycopg.Connection, event_id: str, event: dict, apply=consume.credit_account) -> bool:
    """Variant b's (and a1's, a2's) handler: the same transaction as handle_once, without the inbox row."""
    with conn.transaction():
        apply(conn, event_id, event)
    return True


class FirstTime:
    """Every N-th event (by its seq), the first time any process handles it. A table records
    the claim, on a connection of its own so that it survives the handler's rollback; a
    redelivery of the same event is then not picked again. The table is the schema owner's
    to make (harness.LAB_TABLES): the consumer's role may not create one."""

    def __init__(self, every: int, table: str):
        self.every, self.table = every, table

    def __call__(self, event_id: str, event: dict) -> bool:
        if not self.every or event.get("seq", 0) % self.every:
            return False
        with psycopg.connect(DSN, autocommit=True) as own:
            return own.execute(f"INSERT INTO {self.table} VALUES (%s) ON CONFLICT DO NOTHING RETURNING 1",
                               (event_id,)).fetchone() is not None


class Stall:
    """--slow-every N: the first handling of every N-th event sleeps --slow-seconds."""

    def __init__(self, every: int, seconds: float):
        self.first_time, self.seconds = FirstTime(every, "stalls"), seconds

    def maybe(self, conn: psycopg.Connection, event_id: str, event: dict) -> None:
        if self.first_time(event_id, event):
            log.warning(STALLING_LOG, event_id, self.seconds)
            time.sleep(self.seconds)
            log.warning(STALL_OVER_LOG, event_id)


def make_apply(work_ms: float, stall: Stall):
    """The handler: its 'work' (a sleep standing in for real processing), then the credit."""
    first = threading.Event()

    def apply(conn: psycopg.Connection, event_id: str, event: dict) -> None:
        stall.maybe(conn, event_id, event)
        if work_ms:
            time.sleep(work_ms / 1000)
        consume.credit_account(conn, event_id, event)
        if not first.is_set():
            first.set()
            log.info(FIRST_EFFECT_LOG, event_id)

    return apply


def make_apply_batch(work_ms: float, stall: Stall):
    """The batched handler: the same work per message, then the set-based credit."""
    first = threading.Event()

    def apply_batch(conn: psycopg.Connection, credits: list[tuple[str, dict]]) -> None:
        for event_id, event in credits:
            stall.maybe(conn, event_id, event)
        if work_ms:
            time.sleep(work_ms * len(credits) / 1000)
        consume_batched.credit_accounts(conn, credits)
        if not first.is_set():
            first.set()
            log.info(FIRST_EFFECT_LOG, credits[0][0])

    return apply_batch


def self_cost(backend_pids: set[int]):
    """For a worker that times itself (raw, db): a function that takes a CPU snapshot of this
    process, these Postgres backends, the rest of Postgres and the broker (lab.cpu), or None
    where this checkout did not start the services (their pids unknown: no CPU is reported)."""
    from lab import cpu, stack

    postmaster, broker = stack.postgres_pid(), stack.kafka_pid()
    if postmaster is None or broker is None:
        return None
    return lambda: cpu.Snapshot.take([os.getpid()], postmaster, backend_pids, broker)


def cost_report(before, after, messages: int) -> dict:
    """The CPU fields of a self-timed worker's report: what the throughput harness reads from
    /proc for every other variant, here read by the worker itself around its own window."""
    from lab import cpu

    if before is None or after is None or messages < 1:
        return {"cpu_us_per_msg": None, "cpu_window_msgs": None, "consumer_peak_rss_mib": None}
    return {"cpu_us_per_msg": cpu.per_message(before, after, messages), "cpu_window_msgs": messages,
            "consumer_peak_rss_mib": cpu.peak_rss_mib(os.getpid())}


def run_raw(topic: str, group: str, stop: threading.Event, expect: int, batch: int, overrides: dict) -> None:
    """Read as fast as the client can, touching nothing; report once `expect` messages are in.
    The clock and the CPU window open on the first message: the snapshot taken then is not
    inside the timed gaps, and what follows it (`expect` - 1 messages) is what both divide."""
    consumer = Consumer({"bootstrap.servers": BROKERS, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, **overrides})
    snapshot = self_cost(set())
    consumer.subscribe([topic])
    stamps, seen, before = [], 0, None
    try:
        while not stop.is_set():
            for msg in consumer.consume(batch, 0.1):
                if not msg.error():
                    consume.checked_event_id(msg)  # the per-message decoding every variant does
                    consume.parse_event(msg.value())
                    seen += 1
                    if seen == 1 and snapshot:
                        before = snapshot()
                    stamps.append(time.monotonic())
            if expect and seen >= expect:
                after = snapshot() if snapshot else None
                gaps = sorted(b - a for a, b in zip(stamps, stamps[1:], strict=False))
                seconds = stamps[-1] - stamps[0]
                log.info(REPORT_LOG, json.dumps({
                    "messages": len(stamps), "first_to_last_s": round(seconds, 3),
                    "msgs_per_s": round((len(stamps) - 1) / seconds, 1) if seconds else None,
                    "gap_p50_ms": round(gaps[len(gaps) // 2] * 1000, 4),
                    "gap_p99_ms": round(gaps[int(len(gaps) * 0.99)] * 1000, 4),
                    **cost_report(before, after, len(stamps) - 1)}))
                expect = 0
    finally:
        consumer.close()


def run_db_ceiling(variant: str, count: int, batch: int, connections: int = 1, accounts: int = 100) -> None:
    """db and db-d: `count` credits, already decoded, in batches of `batch`, through p's one
    statement (db) or d's handle_batch (db-d), as fast as the database takes them, on
    `connections` connections at once (each takes the next batch when it is free); report the
    rate. The credits look like the harness's (accounts 1..`accounts`, amounts 1..100), with IDs
    of their own."""
    import queue
    import random

    rng = random.Random(count)
    credits = [(f"db-{n}", {"account_id": rng.randint(1, accounts), "amount": rng.randint(1, 100)})
               for n in range(1, count + 1)]
    batches: queue.Queue = queue.Queue()
    for i in range(0, count, batch):
        batches.put(credits[i:i + batch])
    conns = [psycopg.connect(DSN, autocommit=True) for _ in range(connections)]
    snapshot = self_cost({conn.info.backend_pid for conn in conns})

    # /proc lists live threads only: each drain, once the queue is empty, stays alive until the
    # CPU after the last batch is read, or its CPU would leave the window with it.
    drained, read = threading.Barrier(connections + 1), threading.Event()

    def drain(conn):
        try:
            while True:
                try:
                    chunk = batches.get_nowait()
                except queue.Empty:
                    return
                if variant == "db":
                    consume_pipelined.claim_and_credit(conn, dict(chunk))
                else:
                    consume_batched.handle_batch(conn, chunk)
        finally:
            drained.wait()
            read.wait()

    threads = [threading.Thread(target=drain, args=(conn,)) for conn in conns]
    before = snapshot() if snapshot else None
    started = time.monotonic()
    for thread in threads:
        thread.start()
    drained.wait()
    seconds = time.monotonic() - started
    after = snapshot() if snapshot else None
    read.set()
    for thread in threads:
        thread.join()
    for conn in conns:
        conn.close()
    log.info(REPORT_LOG, json.dumps({"messages": count, "first_to_last_s": round(seconds, 3),
                                     "msgs_per_s": round(count / seconds, 1), "batch": batch,
                                     "connections": connections, **cost_report(before, after, count)}))


def run_auto_commit(topic: str, group: str, apply, stop: threading.Event, batch: int | None, overrides: dict) -> None:
    """a1 (batch None: poll()) and a2 (consume(batch)): the client's auto-commit defaults.

    auto.offset.reset is set to earliest, as in every variant, so a new group
    reads the backlog; everything else about committing is librdkafka's default.
    """
    consumer = Consumer({"bootstrap.servers": BROKERS, "group.id": group,
                         "auto.offset.reset": "earliest", **overrides})
    try:
        with consume.connect(DSN) as conn:  # before joining the group: no partitions held while it waits
            consumer.subscribe([topic])
            while not stop.is_set():
                messages = consumer.consume(batch, 0.5) if batch else [m for m in [consumer.poll(0.5)] if m]
                for msg in messages:
                    if msg.error():
                        log.warning("consumer error: %s", msg.error())
                        continue
                    event_id = consume.checked_event_id(msg)
                    apply_without_inbox(conn, event_id, consume.parse_event(msg.value()), apply)
    finally:
        consumer.close()


def seq_from_id(event_id: str) -> int:
    """The harnesses' IDs end in the event's seq (r1-42); the relay sees only the ID."""
    tail = event_id.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def run_external(args, stop: threading.Event, overrides: dict) -> None:
    """ext, outbox and relay: the effect is a call to provider.py at --provider-url."""
    from variants import consume_external
    from variants.provider import Client

    client = Client(args.provider_url) if args.provider_url else None
    crash_once = FirstTime(args.crash_after_call_every, "call_crashes")
    crash_before_once = FirstTime(args.crash_before_call_every, "precall_crashes")
    first = threading.Event()

    def note_first(event_id):
        if not first.is_set():
            first.set()
            log.info(FIRST_EFFECT_LOG, event_id)

    def after_call(event_id):
        note_first(event_id)
        if crash_once(event_id, {"seq": seq_from_id(event_id)}):
            log.warning("crashing after the call for %s, before its mark-done", event_id)
            os._exit(EXIT_CRASHED_AFTER_EFFECT)  # the call landed; nothing records that it did

    def before_call(event_id):
        if crash_before_once(event_id, {"seq": seq_from_id(event_id)}):
            log.warning("crashing after the claim of %s, before its call", event_id)
            os._exit(EXIT_CRASHED_BEFORE_CALL)

    if args.variant == "relay":
        consume_external.run_relay(client, DSN, stop, batch=10, after_call=after_call)
        return
    if args.variant == "outbox":
        handle = consume_external.handle_with_outbox
    else:
        def handle(conn, event_id, event, _apply=None):
            return consume_external.handle_external(conn, event_id, event, client=client, policy=args.policy,
                                                    lease_s=args.lease_s, before_call=before_call,
                                                    after_call=after_call)
    supervised(stop, lambda: consume.run(
        args.topic, args.group, handle=handle, stop=stop, rebalance_callbacks=common.partition_logging(),
        after_db_commit=lambda msg, outcome: note_first(consume.event_id_of(msg))
        if args.variant == "outbox" and outcome == "applied" else None,
        **overrides))


def run_share(args, stop: threading.Event, apply, handle) -> None:
    """share-b, share-c: a KIP-932 share group. Each polled record is locked for the group's
    share.record.lock.duration.ms; a handler that outlives the lock loses the record to
    another member. Records are acknowledged one by one (explicit mode), after the DB commit."""
    from confluent_kafka import ShareConsumer

    config = {"bootstrap.servers": BROKERS, "group.id": args.group,
              # Each record is acknowledged by hand, after its transaction: none is settled unhandled.
              "share.acknowledgement.mode": "explicit"}
    if args.max_poll_records:
        # Fewer records per poll; the broker may still lock a whole producer batch at once.
        config["max.poll.records"] = args.max_poll_records
    consumer = ShareConsumer(config)
    ensure_topic(consume.dead_letter_topic(args.topic))
    dead_letters = make_producer()
    try:
        with consume.connect(DSN) as conn:  # before joining the group: no records locked while it waits
            consumer.subscribe([args.topic])
            while not stop.is_set():
                for msg in consumer.poll(0.5):
                    if msg.error():
                        log.warning("consumer error: %s", msg.error())
                        continue
                    # The same outcomes as the consumer-group loop: applied, skipped, or dead-lettered
                    # (durably) before the record is acknowledged.
                    consume.process(conn, msg, dead_letters, handle=handle, apply=apply)
                    consumer.acknowledge(msg)
                for tp, error in (consumer.commit_sync(30) or {}).items():
                    if error is not None:
                        log.warning(ACK_FAILED_LOG, error.args[0].name(), tp.topic,
                                    tp.partition)
    finally:
        consumer.close()


def run_exactly_once(args, stop: threading.Event, apply, overrides: dict) -> None:
    """e and f, with their planted crash: os._exit() at --crash-point, once for every
    --crash-every-th event (by seq), the first time any process reaches that point with it."""
    from variants import consume_eos

    chosen = FirstTime(args.crash_every if args.crash_point else 0, "planted_crashes")

    def crash_if_chosen(point, msgs):
        for msg in msgs:
            event_id = consume.event_id_of(msg)
            if event_id and chosen(event_id, {"seq": seq_from_id(event_id)}):
                log.warning(CRASHING_LOG, CRASH_POINTS[point], event_id)
                os._exit(EXIT_CRASHED_AFTER_EFFECT)

    after_db = after_kafka = None
    if args.crash_point == "pg-committed":
        def after_db(msg, outcome):
            if outcome == "applied":
                crash_if_chosen("pg-committed", [msg])
    elif args.crash_point == "kafka-committed":
        def after_kafka(msgs):
            crash_if_chosen("kafka-committed", msgs)
    consume_eos.run_eos(args.topic, args.group, apply, handle=consume.handle_once if args.variant == "f"
                        else apply_without_inbox, every=args.every, transactional_id=args.transactional_id,
                        stop=stop, after_db_commit=after_db, after_kafka_commit=after_kafka, **overrides)


def run_publishing(args, stop: threading.Event) -> None:
    """kafka-relay and publisher: the producer's side, which a harness kills like a consumer."""
    from lab.publishing import publish_journaled, ready_producer
    from variants import relay

    producer_overrides = {"enable.idempotence": args.idempotence == "on", "acks": args.acks}
    if args.socket_timeout_ms:
        # How long a request may go unanswered before librdkafka gives up on it and sends it
        # again, on a new connection: a cut link longer than this makes retries. (Not
        # request.timeout.ms: that one is the broker's wait for acks, sent in the request.)
        producer_overrides["socket.timeout.ms"] = args.socket_timeout_ms
    first = threading.Event()

    def note_first(event_id):
        if not first.is_set():
            first.set()
            log.info(FIRST_EFFECT_LOG, event_id)

    if args.variant == "kafka-relay":
        chosen = FirstTime(args.crash_every, "planted_crashes")

        def after_ack(event_ids):
            note_first(event_ids[0])
            for event_id in event_ids:
                if chosen(event_id, {"seq": seq_from_id(event_id)}):
                    log.warning(CRASHING_LOG, CRASH_POINTS["acked"], event_id)
                    os._exit(EXIT_CRASHED_AFTER_EFFECT)

        relay.run(DSN, stop, batch=args.batch, after_ack=after_ack, **producer_overrides)
        return
    with open(args.events_file) as lines:
        events = [tuple(json.loads(line)) for line in lines]
    # Ready before the first send: a paced publisher's first records would otherwise wait in
    # the client for a connection or a producer ID, and carry that wait as latency they never
    # had in the broker or the consumer (measure_latency saw ~0.5 s).
    producer = ready_producer(args.topic, **producer_overrides)
    acked = publish_journaled(producer, args.topic, events, Path(args.journal),
                              rate=args.rate, on_first_ack=lambda: note_first(events[0][0]))
    log.info(PUBLISHED_LOG, acked)


def client_overrides(args) -> dict:
    overrides = {}
    if args.group_protocol == "consumer":
        # KIP-848: the session timeout and heartbeat live on the broker (group.consumer.*).
        overrides["group.protocol"] = "consumer"
    else:
        if args.session_timeout_ms:
            overrides["session.timeout.ms"] = args.session_timeout_ms
        if args.heartbeat_interval_ms:
            # Keep it well under the session timeout: librdkafka's default (3 s) would let a
            # 2 s session time out between two heartbeats.
            overrides["heartbeat.interval.ms"] = args.heartbeat_interval_ms
    if args.max_poll_interval_ms:
        overrides["max.poll.interval.ms"] = args.max_poll_interval_ms
    return overrides


def main(args) -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=LOG_FORMAT.format(variant=args.variant, pid=os.getpid()))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    # A harness that finds this worker stuck asks where every thread is (Worker.dump_stacks).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    stall = Stall(args.slow_every, args.slow_seconds)
    apply = make_apply(args.work_ms, stall)
    overrides = client_overrides(args)
    log.info("started variant %s on %s as %s", args.variant, args.topic, args.group)

    if args.variant in ("kafka-relay", "publisher"):
        run_publishing(args, stop)
        return
    if args.variant in ("a1", "a2"):
        run_auto_commit(args.topic, args.group, apply, stop, 100 if args.variant == "a2" else None, overrides)
        return
    if args.variant == "raw":
        run_raw(args.topic, args.group, stop, args.expect, args.batch, overrides)
        return

    def crash(event_ids):
        if args.crash_after in event_ids:
            log.warning("crashing after the DB commit of %s, before its offset commit", args.crash_after)
            os._exit(EXIT_CRASHED_AFTER_EFFECT)  # no finally, no close(), no offset commit

    if args.variant in ("share-b", "share-c"):
        run_share(args, stop, apply, consume.handle_once if args.variant == "share-c" else apply_without_inbox)
        return
    if args.variant in ("ext", "outbox", "relay"):
        run_external(args, stop, overrides)
        return
    if args.variant in ("db", "db-d"):
        run_db_ceiling(args.variant, args.expect, args.batch, args.connections)
        return
    if args.variant == "p":
        def work(events: dict) -> None:
            for event_id, event in events.items():
                stall.maybe(None, event_id, event)
            if args.work_ms:
                time.sleep(args.work_ms * len(events) / 1000)

        first = threading.Event()

        def after_statement(msgs, outcome):
            if outcome["applied"] and not first.is_set():
                first.set()
                log.info(FIRST_EFFECT_LOG, consume.event_id_of(msgs[0]))
            crash({consume.event_id_of(m) for m in msgs} if outcome["applied"] else ())

        consume_pipelined.run_pipelined(args.topic, args.group, batch=args.batch, connections=args.connections,
                                        work=work, stop=stop,
                                        after_db_commit=after_statement, **overrides)
        return
    if args.variant == "d":
        consume_batched.run_batched(args.topic, args.group, make_apply_batch(args.work_ms, stall), batch=args.batch,
                            stop=stop, after_db_commit=lambda msgs, outcome: crash(
                                {consume.event_id_of(m) for m in msgs} if outcome["applied"] else ()),
                            **overrides)
        return

    def after_db_commit(msg, outcome):
        if outcome == "applied":
            crash({consume.event_id_of(msg)})

    if args.variant in ("e", "f"):
        run_exactly_once(args, stop, apply, overrides)
        return

    if args.variant in more_variants.VARIANTS:  # the frameworks and the post's shortcuts
        first = threading.Event()

        def first_effect(event_id: str) -> None:
            if not first.is_set():
                first.set()
                log.info(FIRST_EFFECT_LOG, event_id)

        more_variants.run(args, stop, apply=apply, after_db_commit=after_db_commit, overrides=overrides, stall=stall,
                          first_effect=first_effect)
        return

    if args.variant == "k":
        consume_parallel.run_parallel(args.topic, args.group, apply, lanes=args.lanes, window=args.window,
                                      stop=stop, after_db_commit=after_db_commit, **overrides)
        return

    if args.variant == "o":
        from variants import consume_offsets

        consume_offsets.run_with_offsets(args.topic, args.group, apply, stop=stop, after_db_commit=after_db_commit,
                                         **overrides)
        return

    if args.variant == "c-reconnect":
        run_reconnecting(args, stop, apply, after_db_commit, overrides)
        return
    handle = consume.handle_once if args.variant == "c" else apply_without_inbox
    supervised(stop, lambda: consume.run(args.topic, args.group, apply, handle=handle, stop=stop,
                                         after_db_commit=after_db_commit,
                                         rebalance_callbacks=common.partition_logging(), **overrides))


def parse_args(argv=None):
    parser = cli.Parser(description="Run one consumer variant until killed.")
    parser.add_argument("--variant", required=True, choices=(*VARIANTS, *more_variants.VARIANTS))
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--work-ms", type=float, default=0, help="handler sleep per message")
    parser.add_argument("--session-timeout-ms", type=int, help="classic protocol only")
    parser.add_argument("--heartbeat-interval-ms", type=int, help="classic protocol only")
    parser.add_argument("--max-poll-interval-ms", type=int)
    parser.add_argument("--slow-every", type=int, default=0, help="stall every N-th event (by seq) once")
    parser.add_argument("--slow-seconds", type=float, default=0)
    parser.add_argument("--group-protocol", choices=("classic", "consumer"), default="classic")
    parser.add_argument("--crash-after", metavar="EVENT_ID", help="os._exit() right after this event's DB commit")
    parser.add_argument("--batch", type=int, default=500, help="d and raw: messages per consume() call")
    parser.add_argument("--connections", type=int, default=1,
                        help="p, db, db-d: statements at once, one connection each")
    parser.add_argument("--lanes", type=int, default=16, help="k: handlers at once, one key to one lane")
    parser.add_argument("--window", type=int, default=500, help="k: messages in flight per partition at most")
    parser.add_argument("--expect", type=int, default=0, help="raw: report once this many messages are read")
    parser.add_argument("--provider-url", help="ext, relay: provider.py's address")
    parser.add_argument("--policy", choices=("keys", "lookup", "retry", "skip"), default="keys",
                        help="ext: what to do after an expired lease")
    parser.add_argument("--lease-s", type=float, default=10.0, help="ext: how long a claim holds")
    parser.add_argument("--max-poll-records", type=int, default=0,
                        help="share-*: records per poll (librdkafka's max.poll.records); 0 keeps its default")
    parser.add_argument("--crash-after-call-every", type=int, default=0, metavar="N",
                        help="ext, relay: os._exit() between the call and the mark-done, once, for every N-th event")
    parser.add_argument("--crash-before-call-every", type=int, default=0, metavar="N",
                        help="ext: os._exit() between the claim and the call, once, for every N-th event")
    parser.add_argument("--every", type=int, default=100, help="e, f: input messages per Kafka transaction")
    parser.add_argument("--transactional-id", help="e, f: this instance's (default GROUP-eos-0)")
    parser.add_argument("--crash-point", choices=tuple(CRASH_POINTS),
                        help="e, f: where --crash-every crashes (kafka-relay: always acked)")
    parser.add_argument("--crash-every", type=int, default=0, metavar="N",
                        help="e, f: os._exit() at --crash-point, once, for every N-th event")
    parser.add_argument("--events-file", help="publisher: JSON lines of [event_id, event]")
    parser.add_argument("--journal", help="publisher: the acknowledged IDs, one per line, kept across restarts")
    parser.add_argument("--rate", type=float, default=0, help="publisher: sends per second at most (0: no limit)")
    parser.add_argument("--idempotence", choices=("on", "off"), default="on",
                        help="publisher, kafka-relay: the producer's enable.idempotence")
    parser.add_argument("--acks", choices=("all", "1"), default="all",
                        help="publisher, kafka-relay: the producer's acks (1 needs --idempotence off)")
    parser.add_argument("--socket-timeout-ms", type=int, default=0, help="publisher, kafka-relay: librdkafka's")
    args = parser.parse_args(argv)
    if args.every < 1:
        parser.error("--every must be at least 1")
    if args.variant == "kafka-relay" and args.crash_every:
        args.crash_point = args.crash_point or "acked"
    if bool(args.crash_point) != bool(args.crash_every) or (args.crash_point and args.variant not in ("e", "f")
                                                            and args.crash_point != "acked"):
        parser.error("--crash-point and --crash-every go together: pg-committed or kafka-committed with "
                     "--variant e or f, acked with kafka-relay")
    if args.acks != "all" and args.idempotence == "on":
        parser.error("--acks 1 needs --idempotence off: the idempotent producer requires acks=all")
    if args.variant == "publisher" and not (args.events_file and args.journal):
        parser.error("--variant publisher needs --events-file and --journal")
    if args.work_ms < 0 or args.slow_every < 0 or args.slow_seconds < 0:
        parser.error("--work-ms, --slow-every and --slow-seconds cannot be negative")
    if args.crash_after and args.variant not in ("b", "c", "c-reconnect", "d", "k", "o", "p", *more_variants.VARIANTS):
        parser.error("--crash-after needs a variant that commits by hand (b, c, d, k, o, p or M9's)")
    if args.variant in ("db", "db-d") and args.expect < 2:
        parser.error(f"--variant {args.variant} needs --expect N (N >= 2): the credits to time")
    if args.lanes < 1 or args.window < 1 or args.connections < 1:
        parser.error("--lanes, --window and --connections must be at least 1")
    if args.batch < 1:
        parser.error("--batch must be at least 1")
    if args.variant in ("ext", "relay") and not args.provider_url:
        parser.error(f"--variant {args.variant} needs --provider-url")
    return args


if __name__ == "__main__":
    arguments = parse_args()  # bad flags: one line, before anything else is said
    provenance.watch(emit=provenance.print_line)  # each file it runs, said as it loads (harness.Worker reads)
    main(arguments)
