"""CPU seconds per process, read from /proc: what a message costs.

msgs/s is a figure of this machine on this day; CPU per message says where each message's
cost goes, process by process (on a shared virtual machine it moves with the host too: see
docs/throughput.md). A throughput run takes a Snapshot when its
worker applies its first credit and another when the last is in, and divides each
process's CPU between them by the messages applied between them.

The processes: the consumer (split into its Python threads and librdkafka's, by thread
name: librdkafka names its own "rdk:..."), the Postgres backends of the consumer's role
(the ones serving it), every other Postgres process (WAL writer, checkpointer, the
harness's own polling), and the broker. Threads or backends that ended between the two
snapshots are not counted (none should in a run without faults); a thread that started
in between counts from zero.

Linux only (/proc); times are in clock ticks (usually 10 ms), fine over a window of seconds.
"""
import dataclasses
import os
from pathlib import Path

import psycopg

TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def _stat_fields(path: Path) -> list[str]:
    """/proc/.../stat after the command name, which may hold spaces and parentheses."""
    text = path.read_text()
    return text[text.rindex(")") + 2:].split()


def cpu_seconds(pid: int, tid: int | None = None) -> float:
    """User plus system CPU of a process (all its threads) or of one of its threads."""
    path = Path(f"/proc/{pid}/task/{tid}/stat") if tid else Path(f"/proc/{pid}/stat")
    fields = _stat_fields(path)
    return (int(fields[11]) + int(fields[12])) * TICK_S  # utime, stime: stat's 14th and 15th


def threads(pid: int) -> dict[int, tuple[str, float]]:
    """Each live thread of `pid`: (its name, its CPU seconds)."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found[int(task.name)] = ((task / "comm").read_text().strip(), cpu_seconds(pid, int(task.name)))
        except (FileNotFoundError, ProcessLookupError):  # it ended while we looked
            continue
    return found


def peak_rss_mib(pid: int) -> float | None:
    """The process's high-water resident set (VmHWM), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return None


def children(pid: int) -> list[int]:
    """The direct children of `pid` (Postgres's backends and helpers are the postmaster's)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int(_stat_fields(entry / "stat")[1]) == pid:
                    found.append(int(entry.name))
            except (FileNotFoundError, ProcessLookupError):
                continue
    return found


def backends_of(admin_dsn: str, role: str) -> set[int]:
    with psycopg.connect(admin_dsn) as conn:
        return {row[0] for row in conn.execute("SELECT pid FROM pg_stat_activity WHERE usename = %s", (role,))}


@dataclasses.dataclass
class Snapshot:
    """CPU seconds per (kind, pid or tid) at one moment."""
    consumer_threads: dict[tuple[int, int], tuple[str, float]]
    backends: dict[int, float]
    postgres_others: dict[int, float]
    broker: float

    @classmethod
    def take(cls, consumer_pids: list[int], postmaster: int, backend_pids: set[int], broker: int) -> "Snapshot":
        def alive(pids, read):
            out = {}
            for pid in pids:
                try:
                    out[pid] = read(pid)
                except (FileNotFoundError, ProcessLookupError):
                    continue
            return out

        consumer = {(pid, tid): named for pid, named_threads in alive(consumer_pids, threads).items()
                    for tid, named in named_threads.items()}
        postgres = alive(children(postmaster), cpu_seconds)
        return cls(consumer_threads=consumer,
                   backends={p: s for p, s in postgres.items() if p in backend_pids},
                   postgres_others={p: s for p, s in postgres.items() if p not in backend_pids},
                   broker=alive([broker], cpu_seconds).get(broker, 0.0))


def per_message(before: Snapshot, after: Snapshot, messages: int) -> dict:
    """µs of CPU per message for each kind of process between two snapshots, and their sum."""
    def spent(a: dict, b: dict, value=lambda v: v) -> float:
        """What each entry of `b` used since `a` (from zero if it was not in `a`)."""
        return sum(value(b[k]) - (value(a[k]) if k in a else 0.0) for k in b)

    name_cpu = lambda named: named[1]  # noqa: E731 - (thread name, CPU)
    librdkafka = {k: v for k, v in after.consumer_threads.items() if v[0].startswith("rdk:")}
    python = {k: v for k, v in after.consumer_threads.items() if not v[0].startswith("rdk:")}
    seconds = {
        "consumer_python": spent(before.consumer_threads, python, name_cpu),
        "consumer_librdkafka": spent(before.consumer_threads, librdkafka, name_cpu),
        "postgres_backends": spent(before.backends, after.backends),
        "postgres_other": spent(before.postgres_others, after.postgres_others),
        "broker": after.broker - before.broker,
    }
    us = {kind: round(s / messages * 1e6, 2) for kind, s in seconds.items()}
    us["total"] = round(sum(seconds.values()) / messages * 1e6, 2)
    return us
