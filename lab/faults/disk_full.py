"""disk-full: the run's tables and indexes on a tablespace of their own, a small tmpfs, filled to
its last byte for --outage-s, then given their room back (M10). The server fails to extend a
table with DiskFull (SQLSTATE 53100) on the consumer's live connection; the WAL stays on the
main disk (a full WAL disk stops the whole server, a PANIC: M6's pg-restart).

Claim: the room is given back whatever happens; the restarts whose error names the full disk
are counted (restarted_on_disk_full).

Assumptions: root (mount); the single-node stack's superuser, for the tablespace.
"""
import contextlib
import os
import subprocess
import uuid
from pathlib import Path

import psycopg
from psycopg import sql

from lab import harness, stack
from lab.faults import Fault

DISK_FULL = "No space left on device"  # what the server says when it cannot extend a table (DiskFull, 53100)


class SmallDisk:
    """A filesystem of `size_mb` (a tmpfs the harness mounts, as root) holding a tablespace, to
    which a run moves its tables and their indexes; `fill()` takes every byte left, as a log or
    another table would, and `free()` gives the room back. The server then fails to extend a
    table with DiskFull (53100) on the consumer's live connection. The WAL stays where it was."""

    def __init__(self, size_mb: int = 64):
        if os.geteuid() != 0:
            raise RuntimeError("disk-full mounts a tmpfs, which needs root")
        self.name = f"lab_small_{uuid.uuid4().hex[:8]}"
        self.path = Path("/tmp") / self.name
        self.path.mkdir(mode=0o700)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=700", "tmpfs", str(self.path)],
                       check=True, capture_output=True, text=True)
        user = stack.server_user()
        if user is not None:  # the server's user must own its tablespace's directory
            os.chown(self.path, user.pw_uid, user.pw_gid)
        self.filler = self.path / "filler"
        with psycopg.connect(stack.SUPERUSER_DSN, autocommit=True) as su:
            su.execute(sql.SQL("CREATE TABLESPACE {} LOCATION {}").format(sql.Identifier(self.name),
                                                                          sql.Literal(str(self.path))))

    def take(self, schema: str) -> None:
        """Move `schema`'s tables and indexes onto the small disk."""
        with psycopg.connect(stack.SUPERUSER_DSN, autocommit=True) as su:
            relations = su.execute("SELECT c.relkind, c.relname FROM pg_class c JOIN pg_namespace n "
                                   "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind IN ('r', 'i')",
                                   (schema,)).fetchall()
            for kind, name in relations:
                su.execute(sql.SQL("ALTER {} {} SET TABLESPACE {}").format(
                    sql.SQL("TABLE" if kind == "r" else "INDEX"), sql.Identifier(schema, name),
                    sql.Identifier(self.name)))

    def fill(self) -> int:
        """Write until the filesystem is full; the bytes written."""
        written, chunk = 0, b"\0" * (1 << 20)
        with open(self.filler, "wb", buffering=0) as f:
            while True:
                try:
                    written += f.write(chunk)
                except OSError:  # ENOSPC: full; what fits of a last chunk is written
                    return written

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def close(self) -> None:
        """Drop the tablespace (whatever was in it must be dropped first) and unmount."""
        self.free()
        with psycopg.connect(stack.SUPERUSER_DSN, autocommit=True) as su:
            su.execute(sql.SQL("DROP TABLESPACE IF EXISTS {}").format(sql.Identifier(self.name)))
        subprocess.run(["umount", str(self.path)], check=True, capture_output=True, text=True)
        self.path.rmdir()


def restarts_naming(workers, cause: str) -> int:
    """The restarts (worker.RESTARTED_LOG) whose logged error names `cause`, over every life."""
    restarted = harness.COUNTED["restarted"]
    return sum(1 for w in workers if w.log_path and w.log_path.exists()
               for line in w.log_path.read_text(errors="replace").splitlines()
               if restarted.search(line) and cause in line)


def small_disk(scene) -> contextlib.closing:
    """The tablespace on a small filesystem, made before the run's schema and dropped after it."""
    scene.disk = SmallDisk()
    return contextlib.closing(scene.disk)


def move_the_tables(scene) -> contextlib.nullcontext:
    scene.disk.take(scene.space.schema)
    return contextlib.nullcontext()


def fill(scene, outage_s: float) -> dict:
    filled = scene.disk.fill()
    try:
        scene.pool.wait(outage_s)
    finally:
        scene.disk.free()
    return {"outage_s": outage_s, "filled_bytes": filled}


def met(log: list, runs: list) -> str:
    # restarted_on_disk_full: the restarts whose error named the full disk (older files: all restarts)
    restarts = sum(r.get("restarted_on_disk_full", r.get("restarted", 0)) for r in runs)
    return f"{restarts} restarts on DiskFull in process"


FAULTS = (
    Fault("disk-full", "the small disk under the run's tables filled to its last byte for --outage-s",
          needs={"stack", "pool", "root"}, inject=fill, defaults={"outage_s": 5.0}, order=45,
          around_run=small_disk, around_consumers=move_the_tables,
          tally=lambda workers: {"restarted_on_disk_full": restarts_naming(workers, DISK_FULL)}, met=met),
)
