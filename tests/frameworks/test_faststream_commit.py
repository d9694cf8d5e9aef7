"""M9: why fs-inbox loses credits, pinned. FastStream's confluent subscriber under AckPolicy.ACK
acks with `consumer.commit(asynchronous=True)`, no offsets: librdkafka commits what it has
*stored* when its own thread builds the request, and FastStream polls the next message right
after the ack, which (enable.auto.offset.store, on by default) stores that message's offset + 1.
Whenever the request is built after that poll, the group's offset passes a message whose handler
has not finished, and a kill then loses it.

The schedule, the same for the test and its control, on a one-partition topic of two messages:
message N's handler returns at once; N+1's is held on an Event. The confluent Consumer inside
FastStream's subscriber is wrapped (here, nowhere else) so that the commit FastStream asks for
in N's ack reaches librdkafka only once the next poll has returned N+1: the worst case of the
race, every time, with FastStream's own calls in FastStream's own order. The group's committed
offset is then read from the broker by a consumer of the same group that does not join it.

    FastStream as it is      committed N+2: past N+1, whose handler is still held
    the fix (fs-inbox-fixed) committed N+1: enable.auto.offset.store=false, the handler stores
                             its own offset; the same held commit stops at the unfinished handler

Then fs-inbox-fixed itself: through M1's kill harness in small, at its planted crash point
right after the database committed (the replay meets the inbox), and through two Postgres
restarts mid-stream (one in each life of M1's kills), where a handler raises: fs-inbox, whose
AckPolicy.ACK acks past it, loses credits; fs-inbox-fixed, under NACK_ON_ERROR, has FastStream
seek back to the failed message and loses none.

Last, poison: FastStream's parser decodes every header as UTF-8 before any handler runs, so a
record whose event_id is not UTF-8 never reaches fs-inbox's handler, and the commit after the
next message passes it with no dead letter (the control). The fixed variants parse such a
record as if it had no headers, and their handler parks it with its reason, like every other
kind of poison (tests/helpers.py's battery)."""
import asyncio
import threading

import pytest
from confluent_kafka import Consumer, TopicPartition
from faststream.confluent import KafkaBroker, KafkaMessage
from faststream.middlewares import AckPolicy
from helpers import POISON, consuming, credit, drained, every_kind_of_poison_is_parked, send, worker_run
from test_crash_points import crash_then_recover

import measure_kill
from lab import harness
from lab.settings import BROKERS
from publish import make_producer
from tests.seeds import shifted
from variants.consume_faststream import raw_body
from variants.consume_faststream_fixed import NO_STORE_ON_POLL, store_handled

DEADLINE_S = 30.0  # every wait is bounded by this; none decides the outcome by running out
N = 0  # the first message; its handler returns at once, N+1's is held


class HeldCommit:
    """librdkafka's Consumer as FastStream's subscriber calls it, with its first commit held: sent
    on a thread of the test's own once poll() has returned message N+1 (and so, by default, stored
    its offset + 1). Everything else goes straight through. `calls` records the order of it all."""

    def __init__(self, consumer):
        self._consumer = consumer
        self.calls: list[str] = []
        self.polled_next, self.sent = threading.Event(), threading.Event()
        self.held: threading.Thread | None = None
        self.errors: list[str] = []

    def __getattr__(self, name):
        return getattr(self._consumer, name)

    def poll(self, *args, **kwargs):
        msg = self._consumer.poll(*args, **kwargs)
        if msg is not None and not msg.error():
            self.calls.append(f"poll -> {msg.offset()}")
            if msg.offset() == N + 1:
                self.polled_next.set()
        return msg

    def commit(self, *args, **kwargs):
        self.calls.append(f"commit {kwargs}" + (" (held)" if self.held is None else ""))
        if self.held is not None:
            return self._consumer.commit(*args, **kwargs)
        self.held = threading.Thread(target=self._send_after_the_next_poll, args=(args, kwargs), daemon=True)
        self.held.start()
        return None  # as an asynchronous commit returns: at once, nothing said

    def _send_after_the_next_poll(self, args, kwargs) -> None:
        if not self.polled_next.wait(DEADLINE_S):
            self.errors.append(f"FastStream did not poll message {N + 1} within {DEADLINE_S:g}s of the ack of {N}")
            return
        try:
            self._consumer.commit(*args, **kwargs)
        except Exception as e:  # said by the test, not lost in a thread
            self.errors.append(f"the held commit failed: {type(e).__name__}: {e}")
            return
        self.calls.append("held commit sent")
        self.sent.set()


class Subscriber:
    """A FastStream subscriber under AckPolicy.ACK on its own thread and event loop, its librdkafka
    Consumer wrapped in HeldCommit; N+1's handler waits for `release`."""

    def __init__(self, topic: str, group: str, fixed: bool):
        self.started = {N: threading.Event(), N + 1: threading.Event()}
        self.finished = {N: threading.Event(), N + 1: threading.Event()}
        self.release, self.ready, self.stop = threading.Event(), threading.Event(), threading.Event()
        self.consumer: HeldCommit | None = None
        self.failure: BaseException | None = None
        self.broker = KafkaBroker(BROKERS, allow_auto_create_topics=False, config=NO_STORE_ON_POLL if fixed else {})
        self.subscriber = self.broker.subscriber(topic, group_id=group, auto_offset_reset="earliest",
                                                 decoder=raw_body, ack_policy=AckPolicy.ACK)

        @self.subscriber
        def handler(body: bytes, msg: KafkaMessage) -> None:
            offset = msg.raw_message.offset()
            self.started[offset].set()
            if offset == N + 1:
                self.release.wait(DEADLINE_S)
            if fixed:
                store_handled(msg)
            self.finished[offset].set()

        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        async def main() -> None:
            async with self.broker:
                await self.broker.start()
                inner = self.subscriber.consumer  # FastStream's AsyncConfluentConsumer, built by start()
                self.consumer = inner.consumer = HeldCommit(inner.consumer)
                self.ready.set()
                while not self.stop.is_set():
                    await asyncio.sleep(0.05)

        try:
            asyncio.run(main())
        except BaseException as e:  # said by the test
            self.failure = e

    def __enter__(self) -> "Subscriber":
        self.thread.start()
        self.wait(self.ready, "the FastStream subscriber to start")
        return self

    def wait(self, event: threading.Event, what: str) -> None:
        """Until `event`, or a failure on the subscriber's thread or the held commit's, at most DEADLINE_S."""
        def failures() -> list[str]:
            held = self.consumer.errors if self.consumer is not None else []
            return held + ([repr(self.failure)] if self.failure is not None else [])

        harness.wait_until(lambda: event.is_set() or failures(), DEADLINE_S, what)
        assert not failures(), f"waiting for {what}: {failures()}"

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.stop.set()
        self.thread.join(DEADLINE_S)
        assert not self.thread.is_alive(), f"the FastStream subscriber did not stop within {DEADLINE_S:g}s"


def committed_offset(topic: str, group: str) -> int:
    """The group's committed offset of partition 0, once one has landed (a fresh group has none),
    read by a consumer that shares the group's id and never joins it."""
    probe = Consumer({"bootstrap.servers": BROKERS, "group.id": group, "enable.auto.commit": False})
    try:
        def landed():
            offset = probe.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
            return (offset,) if offset >= 0 else None

        return harness.wait_until(landed, DEADLINE_S, f"a committed offset for group {group}")[0]
    finally:
        probe.close()


def commit_with_the_next_poll_first(topic: str, group: str, fixed: bool) -> dict:
    """The schedule: both messages produced; N handled and acked; that ack's commit held until
    the poll of N+1; the committed offset read while N+1's handler is still held."""
    with Subscriber(topic, group, fixed) as sub:
        producer = make_producer()
        for _ in range(2):
            producer.produce(topic, value=b"{}")
        assert producer.flush(DEADLINE_S) == 0

        sub.wait(sub.started[N + 1], f"message {N + 1}'s handler to start")
        sub.wait(sub.consumer.sent, "the held commit to be sent")
        offset = committed_offset(topic, group)
        still_held = not sub.finished[N + 1].is_set()
        calls = list(sub.consumer.calls)
    assert sub.failure is None, repr(sub.failure)
    assert sub.finished[N + 1].is_set(), "N+1's handler returned once released"
    return {"committed": offset, "handler_still_held": still_held, "calls": calls}


def assert_the_schedule_ran(seen: dict) -> None:
    """FastStream asked for the commit in N's ack before it polled N+1 (its order, not the
    test's); the wrapper sent it after that poll; nothing else committed meanwhile."""
    calls = seen["calls"]
    commit = calls.index("commit {'asynchronous': True} (held)")
    assert calls[:commit] == [f"poll -> {N}"], calls
    assert calls[commit + 1:] == [f"poll -> {N + 1}", "held commit sent"], calls
    assert seen["handler_still_held"], seen


def test_faststream_ack_commits_past_a_handler_still_running(topic, group):
    seen = commit_with_the_next_poll_first(topic, group, fixed=False)
    assert_the_schedule_ran(seen)
    # N+2: a successor would start after N+1, whose handler never finished; with a kill now, lost
    assert seen["committed"] == N + 2, seen


def test_the_control_with_the_fix_the_commit_stops_at_the_handler_still_running(topic, group):
    seen = commit_with_the_next_poll_first(topic, group, fixed=True)
    assert_the_schedule_ran(seen)
    # N+1: a successor starts at the message whose handler had not finished
    assert seen["committed"] == N + 1, seen


@pytest.mark.slow
@pytest.mark.usefixtures("services")
def test_fs_inbox_fixed_under_hard_kills_neither_duplicates_nor_loses():
    config = {"events": 800, "partitions": 3, "work_ms": 5, "kills": 4, "life": (1.0, 2.5), "seed": shifted(11),
              "session_timeout_ms": 6000}
    record = measure_kill.run_once("fs-inbox-fixed", 1, config)
    assert record["kills"] >= 1 and record["crashes"] == [], record["kill_log"]
    assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0), record
    assert record["balances_exact"] is True, record


@pytest.mark.slow
def test_fs_inbox_fixed_a_crash_after_the_database_replays_into_the_inbox(topic, group, dsn, schema, tmp_path):
    """The planted crash point (lab.after_db_commit): committed in Postgres, no offset stored or
    committed; the successor gets the event again and the inbox skips it."""
    verdict = crash_then_recover("fs-inbox-fixed", topic, group, dsn, harness.scoped_dsn(schema, harness.ADMIN_DSN),
                                 tmp_path)
    assert (verdict["duplicates"], verdict["lost"], verdict["balances_exact"]) == (0, 0, True), verdict
    assert verdict["skipped"] >= 1, verdict


RESTART_IN_EACH_LIFE = {"events": 1500, "partitions": 3, "work_ms": 5, "kills": 3, "life": (1.0, 2.0),
                        "seed": shifted(7), "session_timeout_ms": 6000, "faults": ["pg-restart"]}


@pytest.mark.slow
@pytest.mark.usefixtures("services")
@pytest.mark.serial  # the restarts stop the Postgres every test on the stack uses
@pytest.mark.parametrize("fixed_variant, control", [("fs-inbox-fixed", "fs-inbox"),  # confluent-kafka
                                                    ("fs-inbox-fixed-aio", "fs-inbox-aio")])  # aiokafka
def test_a_handler_that_raised_is_redone_under_nack_on_error_and_passed_over_under_ack(fixed_variant, control):
    """M1 with a Postgres restart halfway through each life: handlers raise while it is down.
    The fixed subscriber (NACK_ON_ERROR) reads each such message again and loses nothing; the
    control, under ACK, acks past them, and its run names the lost credits and where they sat.
    On both of FastStream's Kafka brokers."""
    fixed = measure_kill.run_once(fixed_variant, 1, RESTART_IN_EACH_LIFE)
    assert fixed["handler_raised"] >= 1, fixed  # the restart met a handler, or the zero proves nothing
    assert (fixed["duplicates"], fixed["lost"], fixed["balances_exact"]) == (0, 0, True), fixed
    control = measure_kill.run_once(control, 1, RESTART_IN_EACH_LIFE)
    assert control["handler_raised"] >= 1 and control["lost"] >= 1 and control["duplicates"] == 0, control
    assert control["evidence"]["lost_ids"] == control["lost"], control["evidence"]
    assert all(e["records"] for e in control["evidence"]["lost"]), control["evidence"]


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["fs-inbox-fixed", "fs-inbox-fixed-aio"])
def test_the_fixed_variants_park_every_kind_of_poison_and_go_on(variant, topic, group, dsn, conn, tmp_path):
    every_kind_of_poison_is_parked(topic, group, dsn, conn, worker_run(variant, tmp_path / "worker.log"))


@pytest.mark.slow
@pytest.mark.parametrize("control", ["fs-inbox", "fs-inbox-aio"])
def test_the_control_faststreams_parser_passes_a_header_not_utf8_with_no_dead_letter(control, topic, group, dsn,
                                                                                   conn, tmp_path):
    (not_utf8, _reason) = POISON["event_id not UTF-8"]
    send(topic, [not_utf8, credit("good-1")])
    with consuming(topic, group, dsn, worker_run(control, tmp_path / "worker.log")):
        drained(group, topic)  # the group's offset is past both
    assert conn.execute("SELECT event_id FROM ledger").fetchall() == [("good-1",)]
    assert harness.topic_size(topic + ".dlq") == 0, "FastStream's own parser let the poison reach the handler"
