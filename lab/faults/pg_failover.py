"""pg-failover and pg-failover-stalled: the replicated lab's Postgres primary dies at once, as its
machine would, and the standby is promoted (M8); stalled, the primary's WAL sender is paused
first, so that under async replication the last commits exist on the primary alone.

Claim: the promoted node takes writes before it returns (its synchronous_standby_names cleared).

Assumptions: the replicated lab, its standby streaming (cluster.cluster_postgres_up).
"""
import contextlib
import os
import signal
import time
from pathlib import Path

from lab import stack
from lab.faults import Fault
from lab.stack import cluster


def processes_of(pid: int) -> list[int]:
    """A postmaster and its children (the backends, the WAL sender, ...)."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                children.append(int(stat.parent.name))
    return [pid, *children]


def pg_failover(stall_s: float = 0.0) -> dict:
    """The primary dies at once, as its machine would, and the standby is promoted.

    With `stall_s`, the primary's WAL sender is paused first for that long, while the
    consumers go on committing: under async replication those commits exist on the
    primary alone when it dies. The promoted node gets synchronous_standby_names = '':
    it has no standby of its own, and under sync its commits would wait for one forever."""
    primary = cluster.pg_primary()
    standby = next(n for n in cluster.PG_NODES if n != primary)
    senders = []
    if stall_s:
        with cluster.pg_node_connect(primary) as conn:
            senders = [row[0] for row in conn.execute("SELECT pid FROM pg_stat_replication")]
        for pid in senders:
            os.kill(pid, signal.SIGSTOP)
        time.sleep(stall_s)
    postmaster = cluster.pg_node_pid(primary)
    doomed = processes_of(postmaster)
    for pid in doomed:  # all of them stop at the same instant; then none of them runs another line
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    hit = time.monotonic()
    for pid in doomed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    promoted = cluster.pg_node_ctl(standby, "promote", "-w", "-t", "60")
    if promoted.returncode != 0:
        raise stack.StackError(f"pg_ctl promote of {standby} failed: {promoted.stderr.strip()}")
    with cluster.pg_node_connect(standby) as conn:
        conn.execute("ALTER SYSTEM SET synchronous_standby_names = ''")
        conn.execute("SELECT pg_reload_conf()")
    cluster.record_pg_primary(standby)
    return {"killed": primary, "promoted": standby, "stalled_senders": len(senders),
            "promoted_after_s": round(time.monotonic() - hit, 2)}


FAULTS = (
    Fault("pg-failover", "SIGKILL every process of the Postgres primary at once, promote the standby",
          needs={"replicated", "pg-standby"}, inject=lambda scene: pg_failover(0.0), order=54,
          title="Postgres primary killed, standby promoted"),
    Fault("pg-failover-stalled", "the same, the primary's WAL sender paused --stall-s first",
          needs={"replicated", "pg-standby"}, inject=lambda scene, stall_s: pg_failover(stall_s),
          defaults={"stall_s": 4.0}, order=55,
          title="Postgres primary killed after its standby's stream stalled {stall_s:g} s, standby promoted"),
)
