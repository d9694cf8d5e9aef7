"""leader-kill, leader-pause and controller-kill: a Kafka node of the replicated lab, killed or
frozen (M8); and the node helpers the other cluster faults share.

Claim: each is healed before it returns: a killed node is started again and sees the whole
cluster, a paused one is sent SIGCONT whatever happens.

Assumptions: the replicated lab (stack.py up --replicated) this checkout started.
"""
import collections
import contextlib
import os
import signal
import time

from confluent_kafka import KafkaException, TopicPartition

from lab import stack
from lab.faults import Fault
from lab.stack import cluster


def leaders(topic: str) -> dict[int, int]:
    """partition -> the node leading it now."""
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient({"bootstrap.servers": stack.CLUSTER_BROKERS}).list_topics(topic, timeout=10)
    return {p.id: p.leader for p in metadata.topics[topic].partitions.values()}


def leader_of(topic: str) -> int:
    """The node that leads most of `topic`'s partitions: the one whose loss moves the most."""
    counts = collections.Counter(leaders(topic).values())
    return counts.most_common(1)[0][0]


def node_kill(node: int) -> None:
    pid = cluster.node_pid(node)
    if pid is None:
        raise stack.StackError(f"Kafka node {node} is not running")
    os.kill(pid, signal.SIGKILL)
    end = time.monotonic() + 30
    while stack.pid_alive(pid) and time.monotonic() < end:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.1)


def node_start(node: int, deadline_s: float = 120.0) -> None:
    """Start a killed node again and wait until it answers and sees the whole cluster."""
    cluster.start_node(node)
    _, host, port = cluster.cluster_nodes()[node - 1]
    stack.wait_for(lambda: stack.kafka_answers(brokers=f"{host}:{port}", expect=len(cluster.cluster_nodes())),
                   deadline_s, f"Kafka node {node} back", stack.node_home(node) / "kafka.log")


def leader_kill(topic: str, down_s: float = 10.0) -> dict:
    """SIGKILL the leader of most of `topic`'s partitions; start it again after `down_s`."""
    node = leader_of(topic)
    node_kill(node)
    time.sleep(down_s)
    node_start(node)
    return {"node": node}


def leader_pause(topic: str, pause_s: float = 15.0) -> dict:
    """SIGSTOP the leader for `pause_s`, then SIGCONT: a node that is alive but says nothing."""
    node = leader_of(topic)
    pid = cluster.node_pid(node)
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(pause_s)
    finally:
        os.kill(pid, signal.SIGCONT)
    return {"node": node}


def node_stop(node: int, deadline_s: float = 60.0) -> None:
    """SIGTERM: a controlled shutdown, which hands the node's leaderships over first."""
    pid = cluster.node_pid(node)
    if pid is None:
        return
    os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + deadline_s
    while stack.pid_alive(pid) and time.monotonic() < end:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.2)
    if stack.pid_alive(pid):
        node_kill(node)


def in_sync(topic: str, node: int) -> bool:
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient({"bootstrap.servers": stack.CLUSTER_BROKERS}).list_topics(topic, timeout=10)
    return all(node in p.isrs for p in metadata.topics[topic].partitions.values())


def prefer_leaders(topic: str) -> None:
    """A preferred-leader election for `topic`: each partition back to the first of its replicas."""
    from confluent_kafka import ElectionType
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": stack.CLUSTER_BROKERS})
    partitions = [TopicPartition(topic, p) for p in leaders(topic)]
    with contextlib.suppress(KafkaException):  # ELECTION_NOT_NEEDED where it leads already
        admin.elect_leaders(ElectionType.PREFERRED, partitions).result(timeout=30)


def controller_kill(down_s: float = 10.0) -> dict:
    """SIGKILL the active KRaft controller; start it again after `down_s`."""
    node = cluster.active_controller()
    if node is None:
        raise stack.StackError("no active controller found in the nodes' logs")
    node_kill(node)
    time.sleep(down_s)
    node_start(node)
    return {"node": node}



FAULTS = (
    Fault("leader-kill", "SIGKILL the node leading most of the topic's partitions, start it again after --down-s",
          needs={"replicated"}, inject=lambda scene, down_s: leader_kill(scene.topic, down_s),
          defaults={"down_s": 10.0}, order=50, title="leader SIGKILLed, back after {down_s:g} s"),
    Fault("leader-pause", "SIGSTOP the node leading most of the topic's partitions for --pause-s, then SIGCONT",
          needs={"replicated"}, inject=lambda scene, pause_s: leader_pause(scene.topic, pause_s),
          defaults={"pause_s": 15.0}, order=51, title="leader paused {pause_s:g} s"),
    Fault("controller-kill", "SIGKILL the active KRaft controller, start it again after --down-s",
          needs={"replicated"}, inject=lambda scene, down_s: controller_kill(down_s), defaults={"down_s": 10.0},
          order=52, title="active controller SIGKILLed, back after {down_s:g} s"),
)
