"""lost-commit-reply: the consumer reaches Postgres through a proxy (lab/pgproxy.py) that, armed,
lets a transaction that wrote commit on the server and cuts the connection before the reply
reaches the client: the indeterminate commit, on purpose (M10).

Claim: one reply a fault is dropped, or none if nothing was left to commit within 60 s (the
fault then says it met nothing: dropped None).

Assumptions: the single-node stack's Postgres on the host's loopback; clients without TLS.
"""
import contextlib
import time

from lab import harness, stack
from lab.faults import Fault
from lab.pgproxy import CommitReplyDropper


def through_the_proxy(scene) -> contextlib.closing:
    """The run's consumers connect through the proxy (scene.route), closed after they stop."""
    pg = stack.postgres_params()
    scene.proxy = CommitReplyDropper(("127.0.0.1", pg["port"]))
    scene.route = scene.proxy.dsn
    return contextlib.closing(scene.proxy)


def drop_a_reply(scene) -> dict:
    proxy, pool = scene.proxy, scene.pool
    proxy.arm()
    end = time.monotonic() + 60
    while not proxy.fired.wait(0.1):
        pool.supervise()
        if time.monotonic() > end or harness.distinct_applied(pool.space.admin) >= scene.config["events"]:
            proxy.disarm()  # nothing left to commit: this fault met nothing, and says so
            break
    return {"outage_s": 0.0, "dropped": proxy.dropped[-1] if proxy.fired.is_set() else None}


def met(log: list, runs: list) -> str:
    tags = sorted({f["dropped"].split(" ")[0] for f in log if f["dropped"]})
    said = "replies dropped to " + (", ".join("COMMIT" if tag == "COMMIT" else f"a {tag} that committed on its own"
                                              for tag in tags) or "nothing")
    if any(f["dropped"] is None for f in log):
        said += f"; {sum(f['dropped'] is None for f in log)} armed after the last commit, met nothing"
    return said


FAULTS = (
    Fault("lost-commit-reply", "a COMMIT lands on the server and its reply never reaches the consumer",
          needs={"stack", "pool"}, inject=drop_a_reply, around_consumers=through_the_proxy, order=44, met=met),
)
