"""pg-restart and broker-restart: the single-node stack's services, down and up again (M6).

Claim: each is healed before it returns: the service answers again; the outage recorded is
how long it was out, measured.

Assumptions: the embedded stack (stack.py) this checkout started; nothing else measures on it.
"""
import contextlib
import os
import signal
import time

from lab import stack
from lab.faults import Fault


def postgres_restart_immediate(deadline_s: float = 60.0) -> float:
    """Stop PostgreSQL in immediate mode (no checkpoint, every backend killed: crash recovery
    on start), start it again, and return how long until it answered."""
    _, home = stack.postgres_paths()
    started = time.monotonic()
    stopped = stack.pg_ctl("-m", "immediate", "-w", "-t", str(int(deadline_s)), "stop")
    if stopped.returncode != 0:
        raise stack.StackError(f"pg_ctl stop -m immediate failed: {stopped.stderr.strip()}")
    begun = stack.pg_ctl("-l", home / "postgres.log", "-w", "-t", str(int(deadline_s)), "start")
    if begun.returncode != 0:
        raise stack.StackError(f"PostgreSQL did not come back: {begun.stderr.strip()}\n"
                               f"{stack.tail(home / 'postgres.log')}")
    stack.wait_for(lambda: stack.postgres_connect("postgres"), deadline_s, "PostgreSQL answering after a restart")
    return time.monotonic() - started


def kafka_kill() -> None:
    """SIGKILL the broker this checkout started: no controlled shutdown, no log flush."""
    pid = stack.kafka_pid()
    if pid is None:
        raise stack.StackError("no broker started by stack.py is running")
    os.kill(pid, signal.SIGKILL)
    end = time.monotonic() + 30
    while stack.pid_alive(pid) and time.monotonic() < end:
        with contextlib.suppress(ChildProcessError):  # reap it if this process started it
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.1)
    stack.KAFKA_PID.unlink(missing_ok=True)


def broker_restart() -> float:
    """SIGKILL the broker and start it again; how long it was out."""
    hit = time.monotonic()
    kafka_kill()
    stack.kafka_up()
    return time.monotonic() - hit


FAULTS = (
    Fault("pg-restart", "PostgreSQL stopped in immediate mode (crash recovery on start) and started again",
          needs={"stack"}, inject=lambda scene: {"outage_s": postgres_restart_immediate()}, order=10),
    Fault("broker-restart", "the Kafka broker SIGKILLed and started again", needs={"stack"},
          inject=lambda scene: {"outage_s": broker_restart()}, order=11),
)
