"""pg-max-connections: the consumer SIGKILLed and started again while the server refuses its role
any connection (the FATAL a server at max_connections answers), for --outage-s (M10).

Claim: the refusal is lifted on the way out, whatever happens; connections the role already
has stay meanwhile.

Assumptions: the single-node stack's superuser; the run connects as a role of its own
(nemesis.role_of_its_own), so no other run is refused.
"""
import contextlib

import psycopg
from psycopg import sql

from lab import stack
from lab.faults import Fault


@contextlib.contextmanager
def connections_refused(role: str):
    """While inside, the server refuses every new connection of `role` ("too many connections
    for role", the FATAL a role at its limit, or a server at max_connections, answers); the
    connections it already has stay. Lifted on the way out, whatever happens."""
    with psycopg.connect(stack.SUPERUSER_DSN, autocommit=True) as su:
        su.execute(sql.SQL("ALTER ROLE {} CONNECTION LIMIT 0").format(sql.Identifier(role)))
        try:
            yield
        finally:
            su.execute(sql.SQL("ALTER ROLE {} CONNECTION LIMIT -1").format(sql.Identifier(role)))


def restart_refused(scene, outage_s: float) -> dict:
    worker = scene.pool.live[0]
    worker.kill()
    with connections_refused(scene.role):
        scene.pool.replace(worker)
        scene.pool.wait(outage_s)
    return {"outage_s": outage_s}


def met(log: list, runs: list) -> str:
    return f"{sum(r.get('connect_refused', 0) for r in runs)} refused first connections, waited for"


FAULTS = (
    Fault("pg-max-connections", "the consumer SIGKILLed and started again while the server refuses its role, "
          "for --outage-s", needs={"stack", "pool"}, inject=restart_refused, defaults={"outage_s": 5.0}, order=43,
          met=met),
)
