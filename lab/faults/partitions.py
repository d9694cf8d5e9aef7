"""partition-broker and partition-db: one consumer's link to the broker, or to Postgres, cut
at netlab.py's bridge and healed (M6). Every byte stays on loopback.

Claim: the cut lasts --outage-s, longer than the session timeout, and is healed whatever
happens meanwhile; the other consumer of the run (not in the namespace) is never cut.

Assumptions: root (ip netns); the single-node stack's services on the host's loopback.
"""
import contextlib
import time
import uuid

from lab import netlab, stack
from lab.faults import Fault


def service_ports() -> tuple[int, int]:
    """(Kafka's port, Postgres's port): the links a namespace's bridge can cut."""
    return stack.kafka_address()[1], stack.postgres_params()["port"]


def isolated() -> netlab.Namespace:
    """A network namespace whose links to both services run through a bridge this process holds."""
    return netlab.Namespace(f"lab-{uuid.uuid4().hex[:6]}", list(service_ports()))


def cut(ns: netlab.Namespace, port: int, seconds: float) -> float:
    """Blackhole one link of `ns` for `seconds`, then heal it, whatever happens meanwhile."""
    ns.bridge.cut(port)
    try:
        time.sleep(seconds)
    finally:
        ns.bridge.heal(port)
    return seconds


def _cut(scene, *, broker: bool, **_) -> None:
    kafka_port, pg_port = service_ports()
    scene.cut_port = kafka_port if broker else pg_port  # the link the heal gives back
    scene.ns.bridge.cut(scene.cut_port)


def _heal(scene, **_) -> None:
    scene.ns.bridge.heal(scene.cut_port)


def _namespace(scene) -> contextlib.closing:
    """The namespace the run's first consumer lives in, closed after the consumers stop."""
    scene.ns = isolated()
    return contextlib.closing(scene.ns)


def _check(args) -> str | None:
    if args.outage_s * 1000 <= args.session_timeout_ms:
        return "--outage-s must outlast the session timeout, or nobody is evicted"
    return None


def _partition(name: str, summary: str, broker: bool, order: int) -> Fault:
    return Fault(name, summary, needs={"stack", "netns"}, order=order, consumers=2, in_handler=True,
                 inject=lambda scene, **params: _cut(scene, broker=broker, **params), heal=_heal,
                 hold="outage_s", defaults={"outage_s": 12.0}, check=_check, around_consumers=_namespace)


FAULTS = (
    _partition("partition-broker", "one consumer's link to the broker cut at a bridge for --outage-s, then healed",
               True, 20),
    _partition("partition-db", "one consumer's link to Postgres cut at a bridge for --outage-s, then healed",
               False, 21),
)
