"""isolate-leader: the node leading most of a topic's partitions, moved into a network namespace,
given its partitions back, and cut off from everyone (clients, brokers, controllers) for a
while (M8).

Claim: healed before it returns, and the node moved back out; every byte of it stops at the
bridge, both ways, while the cut lasts.

Assumptions: the replicated lab; root (ip netns).
"""
import time
import uuid

from lab import harness, netlab, stack
from lab.faults import Fault
from lab.faults.kafka_nodes import in_sync, leader_of, leaders, node_start, node_stop, prefer_leaders
from lab.stack import cluster


def isolate_leader(topic: str, isolate_s: float = 15.0) -> dict:
    """Cut every link of the node leading most of `topic`'s partitions, for `isolate_s`, and heal it.

    A node's links can be cut only if it runs in a network namespace whose bridge this
    process holds, so first it moves there: a controlled shutdown, a start inside, and a
    preferred-leader election that gives it its partitions back. Then every byte to and
    from it (clients, the other brokers, the controllers) stops at the bridge, both ways,
    until the heal. Afterwards it moves back the same way (the bridge ends with this process)."""
    node = leader_of(topic)
    nodes = cluster.cluster_nodes()
    port = nodes[node - 1][2]
    others = [q for n, _, p in nodes if n != node for q in (p, p + 1)]
    node_stop(node)
    ns = netlab.Namespace(f"kafka{node}-{uuid.uuid4().hex[:6]}", others, served=[port, port + 1])
    try:
        cluster.start_node(node, prefix=ns.prefix)
        stack.wait_for(lambda: stack.kafka_answers(brokers=f"localhost:{port}", expect=len(nodes)), 120,
                       f"node {node} up inside its namespace", stack.node_home(node) / "kafka.log")
        harness.wait_until(lambda: in_sync(topic, node), 120, f"node {node} back in sync", interval_s=0.5)
        prefer_leaders(topic)
        harness.wait_until(lambda: node in leaders(topic).values(), 60, f"node {node} leading again")
        led = sum(1 for leader in leaders(topic).values() if leader == node)
        ns.bridge.cut_all()
        try:
            time.sleep(isolate_s)
        finally:
            ns.bridge.heal_all()
        harness.wait_until(lambda: in_sync(topic, node), 120, f"node {node} in sync after the heal", interval_s=0.5)
    finally:
        node_stop(node)
        ns.close()
        node_start(node)
    return {"node": node, "partitions_led": led}


FAULTS = (
    Fault("isolate-leader", "the leader moved into a network namespace and every link of it cut for --isolate-s",
          needs={"replicated", "netns"}, inject=lambda scene, isolate_s: isolate_leader(scene.topic, isolate_s),
          defaults={"isolate_s": 15.0}, order=53, title="leader cut off from everyone for {isolate_s:g} s"),
)
