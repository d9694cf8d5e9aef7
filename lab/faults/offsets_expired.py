"""offsets-expired: once every credit is applied, the consumers stop and the group, empty, outlives
the broker's offsets.retention.minutes (or, with --delete-group, is deleted, which leaves the
same state); then the consumers start again and auto.offset.reset=earliest replays the topic
(M10). With --forgotten F, retention has first forgotten that share of the inbox.

Claim: the run waits until the broker has no offset of the group left, under a deadline.

Assumptions: a broker started with a short offsets.retention.minutes (docs/faults-more.md),
unless --delete-group; it refuses to wait out more than 5 minutes.
"""
import statistics
import time
from datetime import timedelta

import psycopg
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from lab import harness
from lab import retention as inbox_retention
from lab.faults import Fault, Refused
from lab.settings import RETENTION_DSN


def offsets_retention_minutes() -> int:
    """The broker's offsets.retention.minutes: how long a group with no member keeps its offsets."""
    admin = AdminClient({"bootstrap.servers": harness.BROKERS})
    broker = next(iter(admin.list_topics(timeout=30).brokers))
    resource = ConfigResource(ConfigResource.Type.BROKER, str(broker))
    configs = admin.describe_configs([resource])[resource].result(timeout=30)
    return int(configs["offsets.retention.minutes"].value)


def group_offsets(group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offset per partition of `topic` (none if it has none)."""
    admin = AdminClient({"bootstrap.servers": harness.BROKERS})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    answer = admin.list_consumer_group_offsets([request])[group].result(timeout=30)
    return {tp.partition: tp.offset for tp in answer.topic_partitions if tp.offset >= 0}


def offsets_expire(group: str, topic: str, partitions: int, deadline_s: float, delete: bool = False) -> float:
    """Wait, with the group empty, until the broker has expired its committed offsets
    (offsets.retention.minutes after its last member left, at its next check); or, with
    `delete`, delete the group at once, which leaves the state an expiry leaves: no offsets.
    Returns the seconds it took."""
    started = time.monotonic()
    if delete:
        admin = AdminClient({"bootstrap.servers": harness.BROKERS})
        admin.delete_consumer_groups([group], request_timeout=30)[group].result(timeout=30)
    while group_offsets(group, topic, partitions):
        if time.monotonic() - started > deadline_s:
            raise RuntimeError(f"group {group}'s offsets did not expire within {deadline_s:g} s")
        time.sleep(2)
    return round(time.monotonic() - started, 1)


def forget_some(space, events: list, share: float) -> int:
    """Retention forgets the first `share` of the events' inbox rows: the owner ages them 30 days
    (processed_at, which the consumer may not touch), then retention.sql's delete keeps 14."""
    doomed = [event_id for event_id, _ in events[:int(len(events) * share)]]
    with psycopg.connect(space.admin, autocommit=True) as owner:
        owner.execute("UPDATE processed_messages SET processed_at = processed_at - interval '30 days' "
                      "WHERE message_id = ANY(%s)", (doomed,))
    with psycopg.connect(harness.scoped_dsn(space.schema, RETENTION_DSN), autocommit=True) as forgetter:
        return sum(inbox_retention.forget(forgetter, timedelta(days=14), 1000))


def expire(scene, forgotten: float, delete_group: bool) -> dict:
    config, pool = scene.config, scene.pool
    applied, stuck = scene.applied_then_stop()
    forgotten = forget_some(pool.space, scene.events, forgotten) if forgotten else 0
    deadline = offsets_retention_minutes() * 60 + 900  # and the broker's next check
    waited = offsets_expire(pool.space.group, pool.space.topic, config["partitions"], deadline, delete=delete_group)
    pool.start()
    return {"outage_s": waited, "forgotten": forgotten, "expired_by": "delete" if delete_group
            else "retention", "applied_before": applied, "stuck_before": stuck}


def before(args) -> dict:
    """What the broker under test keeps, recorded with the runs it made; refused if it keeps
    offsets too long to wait out."""
    if args.delete_group:
        return {}
    minutes = offsets_retention_minutes()
    if minutes > 5:
        raise Refused(f"offsets-expired waits out the broker's offsets.retention.minutes ({minutes}"
                      " here): start a broker with a short one (docs/faults-more.md), or pass --delete-group")
    return {"offsets_retention_minutes": minutes}


def met(log: list, runs: list) -> str:
    how = {f["expired_by"] for f in log}
    said = (("offsets expired by the broker" if how == {"retention"} else "the empty group deleted")
            + f" after {statistics.median(f['outage_s'] for f in log):.0f} s (median)")
    if any(f["forgotten"] for f in log):
        said += f"; {sum(f['forgotten'] for f in log):,} inbox rows forgotten first"
    return said


FAULTS = (
    Fault("offsets-expired", "every credit applied, the group's committed offsets expire, the consumers "
          "start again", needs={"stack", "pool"}, inject=expire, defaults={"forgotten": 0.0, "delete_group": False},
          order=46, once=True, before=before, met=met),
)
