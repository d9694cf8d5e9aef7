"""sigterm: the consumer sent SIGTERM at a seeded moment, as systemd or Kubernetes stops it,
then started again, as a supervisor would (M10). With the config's in_handler (the tests), the
moment is one where the consumer is stalled inside a handler: it holds a message, or a batch,
it has not finished, so a loop that drops what it holds at the signal is caught doing it.

Claim: how long it took to exit, with what code, and whether it had to be SIGKILLed after
--stop-deadline-s, are recorded: a hang is reported, not hidden.
"""
import signal
import subprocess
import time

from lab.faults import Fault


def graceful_stop(worker, deadline_s: float) -> dict:
    """SIGTERM, as systemd or Kubernetes stops a consumer; how long it took to exit, with what
    code, and whether it had to be SIGKILLed at the deadline (a hang is reported, not hidden)."""
    started = time.monotonic()
    worker.proc.send_signal(signal.SIGTERM)
    try:
        worker.proc.wait(deadline_s)
        killed = False
    except subprocess.TimeoutExpired:
        worker.proc.kill()
        killed = True
    worker.stop()  # reaps it and closes its log
    return {"exit_s": round(time.monotonic() - started, 2), "exit_code": worker.proc.returncode,
            "sigkilled": killed}


def stop_and_start(scene, stop_deadline_s: float) -> dict:
    worker = scene.target  # the first consumer; with config["in_handler"], the one stalled in a handler
    stopped = graceful_stop(worker, stop_deadline_s)
    scene.pool.replace(worker)
    return {"outage_s": stopped["exit_s"], **stopped}


def met(log: list, runs: list) -> str:
    return (f"exit {', '.join(sorted({str(f['exit_code']) for f in log}))} after "
            f"{max((f['exit_s'] for f in log), default=0):.2f} s at most; {sum(f['sigkilled'] for f in log)} SIGKILLed")


FAULTS = (
    Fault("sigterm", "SIGTERM the consumer, SIGKILL it after --stop-deadline-s, start it again",
          needs={"stack", "pool"}, inject=stop_and_start, defaults={"stop_deadline_s": 30.0}, order=42, met=met,
          in_handler=True),
)
