"""M9: FastStream's aiokafka broker (variants/consume_faststream_aio.py), on the real services.

First the schedule that pins fs-inbox's loss on the confluent broker (test_faststream_commit.py),
on aiokafka: a one-partition topic of two messages, N and N+1, both written before the subscriber
starts, so that the fetch that brings N brings N+1 with it (aiokafka reads ahead); N's handler
returns at once, N+1's is held on an Event, and the group's committed offset is read from the
broker while it is held. aiokafka's consumer class is swapped, for the brokers built here, for a
subclass that records what FastStream's subscriber asks of it, in its order: each getone(), and
each commit() with the consumed positions it finds (what a commit without offsets sends) and the
partition's high watermark as the last fetch saw it.

    AckPolicy.ACK (fs-ack-aio, fs-inbox-aio)  committed N+1, never past the unfinished handler.
        N's ack awaits `commit()` with no offsets, which commits the positions as they are when it
        is called (aiokafka: "current consumed offsets"), N+1 there, although the fetch had brought
        N+1 already; and the loop's getone() of N+1 comes after that commit returned. Nothing
        else commits while N+1's handler runs. This is aiokafka's documented behaviour, and the
        reason the inbox here loses nothing under kills.
    ACK_FIRST (fs-default-aio)  committed N+2 by aiokafka's auto-commit (every 5 s), past N+1's
        unfinished handler: getone() moved the position before the handler ran, and the ack
        commits nothing. A kill then loses N+1.

Then fs-inbox-aio under SIGKILLs through M1's harness in small (no duplicate, nothing lost,
exact balances), and the three at the planted crash point right after the database committed,
before FastStream committed anything, as test_frameworks.py runs the confluent ones."""
import asyncio
import threading

import aiokafka
import pytest
from confluent_kafka import Consumer, TopicPartition
from faststream.kafka import KafkaBroker, KafkaMessage
from faststream.middlewares import AckPolicy
from test_crash_points import crash_then_recover

import measure_kill
from lab import harness, space
from lab.settings import BROKERS
from publish import make_producer
from tests.seeds import shifted
from variants.consume_faststream import raw_body

DEADLINE_S = 30.0  # every wait is bounded by this; none decides the outcome by running out
N = 0  # the first message; its handler returns at once, N+1's is held


class Recording(aiokafka.AIOKafkaConsumer):
    """aiokafka's consumer, recording the calls FastStream's subscriber makes, as it makes them."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls: list[tuple] = []

    async def getone(self, *partitions):
        record = await super().getone(*partitions)
        self.calls.append(("getone", record.offset))
        return record

    async def commit(self, offsets=None):
        assigned = sorted(self.assignment())
        positions = {tp.partition: await self.position(tp) for tp in assigned}
        self.calls.append(("commit", offsets, positions, {tp.partition: self.highwater(tp) for tp in assigned}))
        await super().commit(offsets)
        self.calls.append(("commit returned",))


def read_committed(topic: str, group: str, reached) -> int:
    """The group's committed offset of partition 0 once `reached(offset)` holds (a fresh group has
    none: -1001), read by a consumer that shares the group's id and never joins it."""
    probe = Consumer({"bootstrap.servers": BROKERS, "group.id": group, "enable.auto.commit": False})
    try:
        def offset():
            found = space.committed_offsets(probe, [TopicPartition(topic, 0)], DEADLINE_S)[0].offset
            return (found,) if reached(found) else None

        return harness.wait_until(offset, DEADLINE_S, f"group {group}'s committed offset")[0]
    finally:
        probe.close()


async def second_handler_held(topic: str, group: str, reached, **subscribing) -> dict:
    """Both messages written; the subscriber started; once N+1's handler has started (and is held),
    the committed offset that satisfies `reached`, and the calls made up to then."""
    producer = make_producer()
    for _ in range(2):
        producer.produce(topic, value=b"{}")
    assert producer.flush(DEADLINE_S) == 0
    started, finished = [threading.Event(), threading.Event()], [threading.Event(), threading.Event()]
    release = threading.Event()
    broker = KafkaBroker(BROKERS, allow_auto_create_topics=False)
    subscriber = broker.subscriber(topic, group_id=group, auto_offset_reset="earliest", decoder=raw_body,
                                   **subscribing)

    @subscriber
    def handler(body: bytes, msg: KafkaMessage) -> None:  # FastStream runs a plain def in a thread
        at = msg.raw_message.offset - N
        started[at].set()
        if at == 1:
            release.wait(DEADLINE_S)
        finished[at].set()

    async def until(event: threading.Event, what: str) -> None:
        assert await asyncio.to_thread(event.wait, DEADLINE_S), f"{what} within {DEADLINE_S:g}s"

    async with broker:
        await broker.start()
        consumer = subscriber.consumer
        assert isinstance(consumer, Recording), type(consumer)
        try:
            await until(started[1], f"message {N + 1}'s handler to start")
            committed = await asyncio.to_thread(read_committed, topic, group, reached)
            seen = {"committed": committed, "handler_still_held": not finished[1].is_set(),
                    "calls": list(consumer.calls)}
        finally:
            release.set()
        await until(finished[1], f"message {N + 1}'s handler to return once released")
    return seen


@pytest.fixture
def recording(monkeypatch):
    """Brokers built while it is in use make their consumers Recording (FastStream builds them
    from `aiokafka.AIOKafkaConsumer` when the broker is made)."""
    monkeypatch.setattr(aiokafka, "AIOKafkaConsumer", Recording)


@pytest.mark.usefixtures("recording")
def test_the_ack_commits_the_consumed_offset_when_called_never_past_a_handler_still_running(topic, group):
    seen = asyncio.run(second_handler_held(topic, group, lambda offset: offset >= 0, ack_policy=AckPolicy.ACK))
    assert seen["handler_still_held"], seen
    # The commit N's ack asked for: no offsets, the position one past N, with N+1 already fetched
    # (the high watermark the fetch saw is past it); the next getone() only after it returned.
    expected = [("getone", N), ("commit", None, {0: N + 1}, {0: N + 2}), ("commit returned",), ("getone", N + 1)]
    assert seen["calls"] == expected, seen
    # N+1: a successor would start at the message whose handler had not finished
    assert seen["committed"] == N + 1, seen


@pytest.mark.usefixtures("recording")
def test_ack_first_auto_commit_passes_a_handler_still_running(topic, group):
    # FastStream's default policy, with its default auto-commit interval (5 s): the committed
    # offset is awaited until it reaches N+2, as aiokafka's auto-commit makes it while N+1 is held.
    seen = asyncio.run(second_handler_held(topic, group, lambda offset: offset == N + 2))
    assert seen["handler_still_held"], seen
    assert seen["calls"] == [("getone", N), ("getone", N + 1)], seen  # the ack committed nothing itself
    assert seen["committed"] == N + 2, seen  # past N+1, whose handler never finished: with a kill now, lost


KILLS = {"events": 1500, "partitions": 3, "work_ms": 5, "kills": 4, "life": (1.0, 2.5), "seed": shifted(11),
         "session_timeout_ms": 6000}


@pytest.mark.slow
@pytest.mark.usefixtures("services")
def test_fs_inbox_aio_under_sigkills_credits_every_event_once():
    record = measure_kill.run_once("fs-inbox-aio", 1, KILLS)
    assert record["kills"] >= 1 and not record["crashes"], record["kill_log"]
    outcome = {name: record[name] for name in ("duplicates", "lost", "unexpected", "balances_exact")}
    assert outcome == {"duplicates": 0, "lost": 0, "unexpected": 0, "balances_exact": True}, record


@pytest.mark.slow
@pytest.mark.parametrize("variant, replayed_twice", [("fs-default-aio", True), ("fs-ack-aio", True),
                                                     ("fs-inbox-aio", False)])
def test_a_crash_after_the_database_before_faststream_commits(variant, replayed_twice, topic, group, dsn, schema,
                                                               tmp_path):
    """The crash comes before fs-default-aio's first auto-commit (5 s after its assignment) and
    before fs-ack-aio's commit went out: both credit the crashed event again. fs-inbox-aio's
    successor gets it again too, and its inbox skips it."""
    admin = harness.scoped_dsn(schema, harness.ADMIN_DSN)
    verdict = crash_then_recover(variant, topic, group, dsn, admin, tmp_path)
    assert verdict["lost"] == 0, verdict
    if replayed_twice:
        assert verdict["duplicates"] >= 1 and verdict["balances_exact"] is False, verdict
    else:
        assert (verdict["duplicates"], verdict["balances_exact"]) == (0, True) and verdict["skipped"] >= 1, verdict
