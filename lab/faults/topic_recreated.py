"""topic-recreated: once every credit is applied, the consumer stopped, the topic deleted and made
again under the same name, as many new credits published, the consumer started again (M10).

Claim: the new topic has as many partitions and replicas as the old; its offsets start at 0.
"""
import time

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from lab import harness
from lab.faults import Fault


def recreate_topic(topic: str, timeout_s: float = 60.0) -> None:
    """Delete `topic` and create it again under the same name with as many partitions, as an
    operator resetting a topic would: a new log, its offsets from 0, and a new topic ID."""
    admin = AdminClient({"bootstrap.servers": harness.BROKERS})
    old = admin.list_topics(topic, timeout=timeout_s).topics[topic].partitions
    partitions, replicas = len(old), len(old[0].replicas)  # as it was: a cluster's topic keeps its replication
    harness.delete_topics(topic, timeout_s=timeout_s)
    end = time.monotonic() + timeout_s
    while True:  # the deletion completes in the background; until it has, a create is refused
        futures = admin.create_topics([NewTopic(topic, partitions, replicas)], operation_timeout=timeout_s)
        try:
            futures[topic].result(timeout=timeout_s)
            return
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS or time.monotonic() > end:
                raise
            time.sleep(0.5)


def recreate(scene) -> dict:
    applied, stuck = scene.applied_then_stop()
    recreate_topic(scene.pool.space.topic)
    harness.produce_events(scene.pool.space.topic, scene.later)
    scene.pool.start()
    return {"outage_s": 0.0, "republished": len(scene.later), "applied_before": applied, "stuck_before": stuck}


def met(log: list, runs: list) -> str:
    return f"{sum(f['republished'] for f in log):,} credits published to the topic made again"


FAULTS = (
    Fault("topic-recreated", "every credit applied, the topic deleted and made again, new credits published",
          needs={"stack", "pool"}, inject=recreate, order=47, once=True, republishes=True, met=met),
)
