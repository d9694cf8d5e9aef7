"""One variant in one process, so a harness can SIGKILL it mid-stream.

Claim: the worker is the same for every variant; what differs is declared with the
variant, in its own file (lab/registry.py reads the declarations). The worker parses the
flags every variant shares, builds the Lab a variant runs on (its flags, the stop event, the
credit with the handler's sleep and stall, the planted crash points, the supervisor), and
calls the variant's run function. The side effect is the same single Postgres transaction
(credit the account, write a ledger row) in every consumer; they differ in when the offset
is committed and whether the inbox is used.

Assumptions: CONSUMER_DSN points at a database (or a schema, via search_path) with
schema.sql's tables, grants.sql's grants and the lab's tables (harness.create_schema makes
all three); the topic exists. The worker runs until it is killed, or stops cleanly on
SIGTERM. The lines a harness waits on or counts are defined once, where they are printed
(the *_LOG constants below and in consume.py), and parsed in one place, harness.py; a
planted crash exits with one of the EXIT_CRASHED_* codes.

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

import psycopg

import consume
from lab import cli, provenance, registry
from lab.settings import DSN

log = logging.getLogger("worker")
LOG_FORMAT = "%(asctime)s {variant}[{pid}] %(name)s %(message)s"  # harness.py parses this shape

# The lines the harnesses count or wait on, printed here and nowhere else (harness.py parses them).
FIRST_EFFECT_LOG = "first side effect %s"
STALLING_LOG = "stalling %s for %gs"
STALL_OVER_LOG = "stall over %s, writing its effect"
REPORT_LOG = "report: %s"  # a self-timed worker's own measurement, one JSON object
ACK_FAILED_LOG = "acknowledgement failed: %s (%s/%s)"  # share groups: the record's lock had expired
# Exit codes of a worker that crashed itself on purpose (a planted crash), not by accident.
EXIT_CRASHED_AFTER_EFFECT = 3  # the effect landed (a DB commit, a provider call); nothing records it further
EXIT_CRASHED_BEFORE_CALL = 4  # the lease is taken; the call never went out
# Where a worker may crash itself on purpose (--crash-point), once per chosen event: e and f
# at the first two, kafka-relay at the last.
CRASH_POINTS = {"pg-committed": "after the event's Postgres commit, before commit_transaction",
                "kafka-committed": "after commit_transaction of the event's batch, before the next poll",
                "acked": "after the broker acknowledged the event, before the relay marked it published"}
CRASHING_LOG = "crashing %s: %s"  # the point's description, the event ID
CRASH_AFTER_COMMIT_LOG = "crashing after the DB commit of %s, before its offset commit"
PUBLISHED_LOG = "publisher done: %d acknowledged in this session"
RESTARTED_LOG = "consumer stopped on a lost database (%s); started again after %.1fs"
RESTART_GIVE_UP_S = 120.0  # without a run that lasted, the database is gone, not restarting

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


def seq_from_id(event_id: str) -> int:
    """The harnesses' IDs end in the event's seq (r1-42); a relay sees only the ID."""
    tail = event_id.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


class FirstTime:
    """Every N-th event (by its seq), the first time any process handles it. A table records
    the claim, on a connection of its own so that it survives the handler's rollback; a
    redelivery of the same event is then not picked again. The table is the schema owner's
    to make (harness.LAB_TABLES): the consumer's role may not create one."""

    def __init__(self, every: int, table: str):
        self.every, self.table = every, table

    def __call__(self, event_id: str, event: dict | None = None) -> bool:
        if not self.every:  # first: the usual case, and a handler calls this for every event
            return False
        seq = (event or {}).get("seq", 0) if event is not None else seq_from_id(event_id)
        if seq % self.every:
            return False
        with psycopg.connect(DSN, autocommit=True) as own:
            return own.execute(f"INSERT INTO {self.table} VALUES (%s) ON CONFLICT DO NOTHING RETURNING 1",
                               (event_id,)).fetchone() is not None


class Stall:
    """--slow-every N: the first handling of every N-th event sleeps --slow-seconds."""

    def __init__(self, every: int, seconds: float):
        self.first_time, self.seconds = FirstTime(every, "stalls"), seconds

    def maybe(self, conn: psycopg.Connection | None, event_id: str, event: dict) -> None:
        if self.first_time(event_id, event):
            log.warning(STALLING_LOG, event_id, self.seconds)
            time.sleep(self.seconds)
            log.warning(STALL_OVER_LOG, event_id)


class Lab:
    """What a variant's run function gets from the lab: its flags, when to stop, the credit
    with the handler's work, the crash points, the supervisor, and the lines to say. The
    variants use these and never import the lab (variants/__init__.py)."""

    ACK_FAILED_LOG = ACK_FAILED_LOG
    CRASH_POINTS = CRASH_POINTS

    def __init__(self, args, stop: threading.Event):
        self.args, self.stop, self.log = args, stop, log
        self.stall = Stall(args.slow_every, args.slow_seconds)
        self.overrides = client_overrides(args)
        self.producer_overrides = producer_overrides(args)
        self._first = threading.Event()
        self._applied = 0  # credits this process applied, for --crash-after-applied

    def first_effect(self, event_id: str) -> None:
        """Say the first effect once (the line a harness waits on before its clock starts)."""
        if not self._first.is_set():
            self._first.set()
            log.info(FIRST_EFFECT_LOG, event_id)

    def work(self, credits) -> None:
        """The handler's work for (event_id, event) pairs: each one's stall, then --work-ms each."""
        credits = list(credits)
        if self.stall.first_time.every:
            for event_id, event in credits:
                self.stall.maybe(None, event_id, event)
        if self.args.work_ms:
            time.sleep(self.args.work_ms * len(credits) / 1000)

    def apply(self, conn: psycopg.Connection, event_id: str, event: dict) -> None:
        """The handler: its 'work' (a sleep standing in for real processing), then the credit."""
        self.work([(event_id, event)])
        consume.credit_account(conn, event_id, event)
        self.first_effect(event_id)

    def committed(self, event_ids) -> None:
        """These events' effects are committed in Postgres and nothing else yet: the planted
        crash (--crash-after, --crash-after-applied) lands here, with no finally, no close(), no
        offset commit."""
        event_ids = [e for e in event_ids if e is not None]
        self._applied += len(event_ids)
        chosen = self.args.crash_after if self.args.crash_after in event_ids else \
            event_ids[-1] if event_ids and 0 < self.args.crash_after_applied <= self._applied else None
        if chosen is not None:
            log.warning(CRASH_AFTER_COMMIT_LOG, chosen)
            os._exit(EXIT_CRASHED_AFTER_EFFECT)

    def after_db_commit(self, msg, outcome) -> None:
        """consume.run's hook: an applied message's commit is the crash point."""
        if outcome == "applied":
            self.committed([consume.event_id_of(msg)])

    def once_every(self, every: int, table: str) -> FirstTime:
        """A picker of every `every`-th event, each once across processes (a planted crash's)."""
        return FirstTime(every, table)

    def crash(self, reason: str, *args, before_effect: bool = False) -> None:
        """A planted crash: say where, and exit at once."""
        log.warning(reason, *args)
        os._exit(EXIT_CRASHED_BEFORE_CALL if before_effect else EXIT_CRASHED_AFTER_EFFECT)

    def crash_at(self, point: str, event_id: str) -> None:
        self.crash(CRASHING_LOG, CRASH_POINTS[point], event_id)

    def supervised(self, run_once) -> None:
        supervised(self.stop, run_once)

    def report(self, figures: dict) -> None:
        """A self-timed worker's measurement, for the harness."""
        log.info(REPORT_LOG, json.dumps(figures))

    def published(self, acknowledged: int) -> None:
        log.info(PUBLISHED_LOG, acknowledged)


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


def producer_overrides(args) -> dict:
    overrides = {"enable.idempotence": args.idempotence == "on", "acks": args.acks}
    if args.socket_timeout_ms:
        # How long a request may go unanswered before librdkafka gives up on it and sends it
        # again, on a new connection: a cut link longer than this makes retries. (Not
        # request.timeout.ms: that one is the broker's wait for acks, sent in the request.)
        overrides["socket.timeout.ms"] = args.socket_timeout_ms
    return overrides


def main(args) -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=LOG_FORMAT.format(variant=args.variant, pid=os.getpid()))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    # A harness that finds this worker stuck asks where every thread is (Worker.dump_stacks).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    lab = Lab(args, stop)
    log.info("started variant %s on %s as %s", args.variant, args.topic, args.group)
    registry.runner(args.variant)(lab)


def parse_args(argv=None):
    parser = cli.Parser(description="Run one variant until killed.")
    parser.add_argument("--variant", required=True, choices=registry.names())
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
    parser.add_argument("--crash-after-applied", type=int, default=0, metavar="N",
                        help="os._exit() right after the DB commit that applies this worker's N-th credit")
    parser.add_argument("--batch", type=int, default=500, help="messages per batch, for the variants that batch")
    parser.add_argument("--connections", type=int, default=1,
                        help="statements at once, one connection each, for the variants that take it")
    parser.add_argument("--lanes", type=int, default=16, help="k: handlers at once, one key to one lane")
    parser.add_argument("--window", type=int, default=500, help="k: messages in flight per partition at most")
    parser.add_argument("--expect", type=int, default=0, help="self-timed: report once this many are in")
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
                        help="where --crash-every crashes: pg-committed or kafka-committed (e, f); acked (kafka-relay)")
    parser.add_argument("--crash-every", type=int, default=0, metavar="N",
                        help="os._exit() at --crash-point, once, for every N-th event")
    parser.add_argument("--events-file", help="publisher: JSON lines of [event_id, event]")
    parser.add_argument("--journal", help="publisher: the acknowledged IDs, one per line, kept across restarts")
    parser.add_argument("--rate", type=float, default=0, help="publisher: sends per second at most (0: no limit)")
    parser.add_argument("--idempotence", choices=("on", "off"), default="on",
                        help="publisher, kafka-relay: the producer's enable.idempotence")
    parser.add_argument("--acks", choices=("all", "1"), default="all",
                        help="publisher, kafka-relay: the producer's acks (1 needs --idempotence off)")
    parser.add_argument("--socket-timeout-ms", type=int, default=0, help="publisher, kafka-relay: librdkafka's")
    args = parser.parse_args(argv)
    variant = registry.get(args.variant)
    if args.every < 1:
        parser.error("--every must be at least 1")
    points = variant.crash_points
    if args.crash_every and not args.crash_point and len(points) == 1:
        args.crash_point = points[0]  # a variant with one point needs no --crash-point (kafka-relay: acked)
    if bool(args.crash_point) != bool(args.crash_every) or (args.crash_point and args.crash_point not in points):
        named = {name: v.crash_points for name, v in registry.everything().items() if v.crash_points}
        parser.error("--crash-point and --crash-every go together, at a point the variant has: "
                     + "; ".join(f"{' or '.join(p)} with {name}" for name, p in named.items()))
    if args.acks != "all" and args.idempotence == "on":
        parser.error("--acks 1 needs --idempotence off: the idempotent producer requires acks=all")
    if args.work_ms < 0 or args.slow_every < 0 or args.slow_seconds < 0:
        parser.error("--work-ms, --slow-every and --slow-seconds cannot be negative")
    if (args.crash_after or args.crash_after_applied) and "crash_after" not in variant.reads:
        by_hand = ", ".join(registry.names(reads="crash_after"))
        parser.error(f"--crash-after needs a variant that commits by hand ({by_hand})")
    if "expect" in variant.needs and args.expect < 2:
        parser.error(f"--variant {args.variant} needs --expect N (N >= 2): the credits to time")
    for needed in sorted(variant.needs):
        if not hasattr(args, needed):
            parser.error(f"variant {args.variant} needs --{needed.replace('_', '-')}, which the worker does not take")
        if not getattr(args, needed):
            parser.error(f"--variant {args.variant} needs --{needed.replace('_', '-')}")
    if args.lanes < 1 or args.window < 1 or args.connections < 1:
        parser.error("--lanes, --window and --connections must be at least 1")
    if args.batch < 1:
        parser.error("--batch must be at least 1")
    return args


if __name__ == "__main__":
    arguments = parse_args()  # bad flags: one line, before anything else is said
    provenance.watch(emit=provenance.print_line)  # each file it runs, said as it loads (harness.Worker reads)
    main(arguments)
