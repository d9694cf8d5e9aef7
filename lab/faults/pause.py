"""pause-consumer and pause-postgres: a consumer, or the server process serving it, frozen
(SIGSTOP) for --pause-s and let go (SIGCONT) (M10): a long GC pause or a frozen VM; a server
that stalls on I/O.

Claim: the pause lasts --pause-s whatever the looks at pg_stat_activity meanwhile do, and what
they saw is recorded: whether the paused consumer's backend sat idle inside a transaction,
whether another consumer of the run waited on a row lock, what the backend was doing just
before it was stopped.

Assumptions: the single-node stack's superuser, to read pg_stat_activity; each consumer
names itself (application_name) per life; the run connects as a role of its own.
"""
import collections

import psycopg

from lab import harness, nemesis, stack
from lab.faults import Fault


def idle_in_transaction(application_name: str) -> bool:
    """Whether the backend of the client that named itself `application_name` sits idle inside
    an open transaction (its client stopped mid-way)."""
    with psycopg.connect(stack.SUPERUSER_DSN, autocommit=True) as su:
        return su.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                          "AND state = 'idle in transaction'", (application_name,)).fetchone()[0] > 0


def backend_of(application_name: str) -> dict | None:
    """The server process serving the client that named itself `application_name`: its pid,
    state and the statement it runs or ran last; None if it has none."""
    with psycopg.connect(stack.SUPERUSER_DSN, autocommit=True) as su:
        row = su.execute("SELECT pid, state, left(query, 60) FROM pg_stat_activity WHERE application_name = %s "
                         "AND backend_type = 'client backend' ORDER BY backend_start DESC LIMIT 1",
                         (application_name,)).fetchone()
    return {"pid": row[0], "state": row[1], "query": row[2]} if row else None


def waiting_on_a_lock(role: str) -> bool:
    """Whether any backend of `role` waits on a heavyweight lock (a row another transaction holds)."""
    with psycopg.connect(stack.SUPERUSER_DSN, autocommit=True) as su:
        return su.execute("SELECT count(*) FROM pg_stat_activity WHERE usename = %s AND wait_event_type = 'Lock'",
                          (role,)).fetchone()[0] > 0


def pause_consumer(scene, pause_s: float) -> dict:
    target = scene.target
    seen = nemesis.pause(target.proc.pid, pause_s, watch={
        # the paused consumer's own backend, inside an open transaction
        "in_transaction": lambda: idle_in_transaction(target.application_name),
        # another consumer of the run waiting on a row lock (the paused one's inbox row)
        "lock_waited": lambda: waiting_on_a_lock(scene.role)})
    return {"outage_s": pause_s, "at_work": scene.at_work, **seen}


def pause_postgres(scene, pause_s: float) -> dict:
    backend = harness.wait_until(lambda: backend_of(scene.target.application_name), 60,
                                 "the consumer's server process")
    seen = nemesis.pause(backend["pid"], pause_s, watch={
        "lock_waited": lambda: waiting_on_a_lock(scene.role)})
    return {"outage_s": pause_s, "at_work": scene.at_work, "state": backend["state"],
            "query": backend["query"], **seen}


def _outlasts_the_session(args) -> str | None:
    if args.pause_s * 1000 <= args.session_timeout_ms:
        return "--pause-s must outlast the session timeout, or nobody is evicted"
    return None


def _outlasts_the_poll_interval(args) -> str | None:
    if args.pause_s * 1000 <= args.max_poll_interval_ms:
        return "--pause-s must outlast --max-poll-interval-ms, or the consumer keeps its partitions"
    return None


def met_pausing_a_consumer(log: list, runs: list) -> str:
    met = f"{sum(bool(f.get('in_transaction')) for f in log)} of {len(log)} inside a transaction"
    if any("lock_waited" in f for f in log):
        met += f", {sum(bool(f.get('lock_waited')) for f in log)} with another consumer waiting on a lock"
    return met


def met_pausing_postgres(log: list, runs: list) -> str:
    states = collections.Counter(f["state"] for f in log)
    return (", ".join(f"{n} {state}" for state, n in states.most_common())
            + f"; {sum(bool(f.get('lock_waited')) for f in log)} with another consumer waiting on a lock")


FAULTS = (
    Fault("pause-consumer", "one of two consumers SIGSTOPped for --pause-s, past the session timeout, then SIGCONTed",
          needs={"stack", "pool"}, inject=pause_consumer, defaults={"pause_s": 12.0}, order=40, consumers=2,
          in_handler=True, check=_outlasts_the_session, met=met_pausing_a_consumer),
    Fault("pause-postgres", "the backend serving one of two consumers SIGSTOPped for --pause-s, then SIGCONTed",
          needs={"stack", "pool"}, inject=pause_postgres, defaults={"pause_s": 12.0}, order=41, consumers=2,
          in_handler=True, check=_outlasts_the_poll_interval, met=met_pausing_postgres),
)
