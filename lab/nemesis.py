"""The nemesis: what the lab does to a process that is not a fault of lab/faults/.

Claim: each is bounded in time, and the ones drawn at random are drawn from a seed, so every
variant meets the same schedule.

    kill schedule   SIGKILL a worker `life` seconds after its first effect, for each life on
                    a seeded schedule (M1, M5, M7); no finally, no close()
    stall           --slow-every N --slow-seconds S: the first handling of every N-th event
                    (by seq) sleeps S inside its handler (worker.Stall), past
                    max.poll.interval.ms (M2) or a share lock (M6)
    pause           SIGSTOP a process for a while, then SIGCONT, through a pidfd
    own role        a run's login role of its own, so a fault on it touches no other run

The faults themselves (restarts, cuts, failovers, pauses, lost replies, ...) are one module
each in lab/faults/, found by its registry; faults.schedule lands them (M6's fault_schedule,
and composed schedules drawn from several).
"""
import argparse
import contextlib
import os
import random
import signal
import threading
import time
import uuid

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from lab import stack

# --- the kill schedule -------------------------------------------------------------

def kill_schedule(seed: int, kills: int, life: tuple[float, float]) -> list[float]:
    """Seconds each worker lives after its first side effect; the same for every variant."""
    rng = random.Random(seed)
    return [round(rng.uniform(*life), 3) for _ in range(kills)]


def life_range(text: str) -> tuple[float, float]:
    """--life MIN,MAX, for argparse."""
    try:
        low, high = (float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MIN,MAX in seconds, got {text!r}") from None
    if not 0 < low <= high:
        raise argparse.ArgumentTypeError(f"need 0 < MIN <= MAX, got {text!r}")
    return low, high


def kill_loop(schedule: list[float], start, working, after_kill, on_progress=None, mid_life=None,
              before_kill=None) -> list[dict]:
    """The kill loop. For each life: start() a worker; working(worker) is True once it applied
    something and False when nothing is left to do (the loop then ends early); let it live
    `life` seconds, wherever that leaves it, and SIGKILL it. after_kill(k, life, worker,
    exit_code) makes the log entry (exit_code: None, or the code it crashed itself with).
    `mid_life(k, worker)`, if given, runs halfway through each life (another fault, landed
    while the worker works), and `before_kill(k, worker)` just before its SIGKILL (what the
    worker faces at that moment); what each returns joins the life's entry."""
    log = []
    for k, life in enumerate(schedule, 1):
        worker = start()
        if not working(worker):
            worker.kill()
            break
        # the fault schedule itself: the kill lands wherever the worker happens to be
        met = {}
        if mid_life:
            halfway = time.monotonic() + life / 2
            time.sleep(life / 2)
            met = mid_life(k, worker) or {}
            time.sleep(max(0.0, halfway + life / 2 - time.monotonic()))  # a fault's own time counts in the life
        else:
            time.sleep(life)
        exit_code = worker.proc.poll()
        if before_kill:
            met = {**met, **(before_kill(k, worker) or {})}
        worker.kill()
        log.append({**after_kill(k, life, worker, exit_code), **met})
        if on_progress:
            on_progress(f"kill {k} of {len(schedule)}")
    return log


# --- stalls --------------------------------------------------------------------------

def stall_count(events: int, slow_every: int) -> int:
    """How many handlers a run's --slow-every stalls: each N-th event, once."""
    return events // slow_every if slow_every else 0


# --- pauses, and a run's own role ---------------------------------------------------

def pause(pid: int, seconds: float, watch: dict | None = None) -> dict:
    """SIGSTOP `pid` (a long GC pause, a frozen VM) for `seconds`, then SIGCONT, whatever happens.
    `watch`: name -> a function asked every quarter second from half a second into the pause;
    returned: name -> whether it ever answered True while the process stood still."""
    seen = {name: False for name in watch or {}}
    end = time.monotonic() + seconds
    # Signals go through a pidfd: if the process dies while it stands still (a harness kills
    # it, Postgres reaps a backend), its pid may be reused, and a SIGCONT by number would then
    # reach a stranger. A pidfd names this process only.
    pidfd = os.pidfd_open(pid)
    # The SIGCONT is a timer's, not the loop's: a look that blocks on the stopped process (a
    # query that waits on its locks) must not stretch the pause past `seconds`.
    resume = threading.Timer(seconds, _continue, (pidfd,))
    try:
        signal.pidfd_send_signal(pidfd, signal.SIGSTOP)
        resume.start()
        time.sleep(min(0.5, seconds))
        while time.monotonic() < end and resume.is_alive():
            for name, look in (watch or {}).items():
                seen[name] = seen[name] or bool(look())
            time.sleep(max(0.0, min(0.25, end - time.monotonic())))
    finally:
        resume.cancel()
        resume.join()  # a timer already running has sent its SIGCONT before the pidfd closes
        _continue(pidfd)
        os.close(pidfd)
    return seen


def stopped_until(pid: int, resume_when, deadline_s: float) -> threading.Thread:
    """SIGSTOP `pid` now; a thread sends SIGCONT once `resume_when()` answers True (asked every
    0.2 s) or `deadline_s` has passed, whichever comes first. Returned: that thread, to join."""
    pidfd = os.pidfd_open(pid)
    signal.pidfd_send_signal(pidfd, signal.SIGSTOP)

    def hold():
        try:
            end = time.monotonic() + deadline_s
            while time.monotonic() < end and not resume_when():
                time.sleep(0.2)
        finally:
            _continue(pidfd)
            os.close(pidfd)

    thread = threading.Thread(target=hold, name=f"stopped-{pid}", daemon=True)
    thread.start()
    return thread


def _continue(pidfd: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # it may have been killed while it stood still
        signal.pidfd_send_signal(pidfd, signal.SIGCONT)


@contextlib.contextmanager
def role_of_its_own(dsn: str):
    """`dsn` as a fresh login role with the consumer's rights (a member of its role), dropped on
    the way out: a fault that refuses a role its connections refuses this one, and no other
    run or test on the same server notices."""
    params = conninfo_to_dict(dsn)
    role = f"lab_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(stack.SUPERUSER_DSN, autocommit=True) as su:
        su.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {} IN ROLE {}").format(
            sql.Identifier(role), sql.Literal(role), sql.Identifier(params["user"])))
        try:
            yield make_conninfo(dsn, user=role, password=role)
        finally:
            su.execute(sql.SQL("ALTER ROLE {} CONNECTION LIMIT 0").format(sql.Identifier(role)))
            su.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
            su.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
