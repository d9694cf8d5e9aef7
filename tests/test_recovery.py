"""The recovery phase ends a run with what is there: a run that loses is recorded with its
losses (not raised away as a time-out), and a worker that ends on its own is recorded as
crashed, with its exit code. Real services; the losses are real (the group skips events,
or its only consumer crashes)."""
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from lab import harness, worker
from lab.settings import BROKERS
from tests.seeds import shifted


@pytest.fixture
def admin(schema):
    return harness.scoped_dsn(schema, harness.ADMIN_DSN)


def test_a_run_that_loses_events_is_recorded_with_them_lost(topic, group, dsn, admin, tmp_path):
    events = harness.make_events(30, prefix="gone", seed=shifted(1))
    harness.produce_events(topic, events)
    skipper = Consumer({"bootstrap.servers": BROKERS, "group.id": group, "enable.auto.commit": False})
    skipper.commit(offsets=[TopicPartition(topic, 0, 10)], asynchronous=False)  # the group starts past ten
    skipper.close()
    consumer = harness.Worker("c", topic, group, dsn, tmp_path / "c.log")
    try:
        recovery = harness.settle([consumer], admin, len(events), 60, group, topic, still_s=1, loss_still_s=2)
    finally:
        consumer.stop()
    assert recovery.settled and recovery.crashed == []
    verdict = harness.verdict_of(events, admin)
    assert (verdict["lost"], verdict["duplicates"]) == (10, 0)


def test_a_worker_that_ends_on_its_own_is_recorded_as_crashed(topic, group, dsn, admin, tmp_path):
    events = harness.make_events(30, prefix="crash", seed=shifted(2))
    harness.produce_events(topic, events)
    crashing = harness.Worker("c", topic, group, dsn, tmp_path / "c.log", ("--crash-after", "crash-5"))
    try:
        recovery = harness.settle([crashing], admin, len(events), 60, group, topic, still_s=1, loss_still_s=2)
    finally:
        crashing.stop()
    assert not recovery.settled and recovery.crashed == [worker.EXIT_CRASHED_AFTER_EFFECT]
    verdict = harness.verdict_of(events, admin)
    assert verdict["lost"] == len(events) - 5 and verdict["duplicates"] == 0


def test_a_broker_that_cannot_say_the_lag_for_a_while_is_waited_out_not_raised(topic, group, dsn, admin, tmp_path,
                                                                                  monkeypatch):
    """While a partition's leader moves (M8's kills), asking the lag fails with NOT_LEADER_FOR_PARTITION, which a
    single broker never answers: the first answers here are that error, as the replicated lab got it, and the
    phase must wait for a real answer within its deadline rather than end the run with a traceback."""
    events = harness.make_events(30, prefix="leader", seed=shifted(3))
    harness.produce_events(topic, events)
    real_lag, refusals = harness.lag, []

    def moving_leader(*args):
        if len(refusals) < 3:
            refusals.append(1)
            raise KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))
        return real_lag(*args)

    monkeypatch.setattr(harness, "lag", moving_leader)
    consumer = harness.Worker("c", topic, group, dsn, tmp_path / "c.log")
    try:
        recovery = harness.settle([consumer], admin, len(events), 60, group, topic, still_s=1, loss_still_s=2)
    finally:
        consumer.stop()
    assert len(refusals) == 3 and recovery.settled, recovery
    assert (harness.verdict_of(events, admin)["lost"], harness.verdict_of(events, admin)["duplicates"]) == (0, 0)
