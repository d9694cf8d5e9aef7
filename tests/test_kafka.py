"""The consumer against a real Kafka broker and a real PostgreSQL: redelivery,
dead letters for every kind of poison message, and a real process that dies
between its database commit and its offset commit."""
import hashlib
import json
import threading
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from helpers import DRAIN_S, POISON, consuming, credit, drained, every_kind_of_poison_is_parked, read_all, send

import consume
from lab import harness, registry, worker
from publish import make_producer, publish
from variants import consume_batched, consume_eos, consume_offsets, consume_parallel, consume_pipelined


@pytest.mark.post
def test_republished_event_is_skipped_and_its_id_comes_from_the_header(topic, group, dsn, conn):
    producer = make_producer()
    for _ in range(2):  # the same event twice, as a relay that restarted would send it
        publish(producer, topic, "evt-1", {"account_id": 1, "amount": 100})
    assert producer.flush(30) == 0
    copies = read_all(topic, 2)
    assert [m.offset() for m in copies] == [0, 1]
    assert [consume.event_id_of(m) for m in copies] == ["evt-1", "evt-1"]

    with consuming(topic, group, dsn):
        drained(group, topic)
    assert conn.execute("SELECT event_id, count(*) FROM ledger GROUP BY event_id").fetchall() == [("evt-1", 1)]
    assert conn.execute("SELECT balance FROM accounts WHERE id = 1").fetchone()[0] == 100




@pytest.mark.post
def test_every_kind_of_poison_goes_to_dlq_with_its_reason_and_the_consumer_goes_on(topic, group, dsn, conn):
    every_kind_of_poison_is_parked(topic, group, dsn, conn)


@pytest.mark.parametrize("variant", ["k", "o"])
def test_every_kind_of_poison_is_parked_by_the_other_one_at_a_time_variants(variant, topic, group, dsn, conn):
    """k's lanes and o's offsets-in-the-inbox loop share consume.process: the same battery."""
    runs = {"k": (consume_parallel.run_parallel, {"lanes": 4}), "o": (consume_offsets.run_with_offsets, {})}
    run, options = runs[variant]
    every_kind_of_poison_is_parked(topic, group, dsn, conn, run, **options)


@pytest.mark.parametrize("variant", ["d", "p"])
def test_every_kind_of_poison_is_parked_by_the_batched_variants(variant, topic, group, dsn, conn):
    """The whole battery, in batches of 10 that hold several kinds at once: each is parked alone,
    with the reason c gives it, and the good credit after them is applied once."""
    run = {"d": consume_batched.run_batched, "p": consume_pipelined.run_pipelined}[variant]
    if variant == "p":
        registry.prepare("p", dsn)  # p's own schema, as p runs
    every_kind_of_poison_is_parked(topic, group, dsn, conn, run, batch=10)


def test_a_credit_with_many_headers_is_applied_once(topic, group, dsn, conn):
    """200 headers beside its event_id: read, applied once, nothing parked."""
    key, value, headers = credit("many-1")
    send(topic, [(key, value, [*((f"h{i}", b"x" * 20) for i in range(200)), *headers])])
    with consuming(topic, group, dsn):
        drained(group, topic)
    assert conn.execute("SELECT event_id, count(*) FROM ledger GROUP BY event_id").fetchall() == [("many-1", 1)]


def test_every_kind_of_poison_is_parked_by_kafkas_exactly_once_loop(topic, group, dsn, conn):
    """f parks poison through its transactional producer: the dead letters commit with the offsets."""
    every_kind_of_poison_is_parked(topic, group, dsn, conn, consume_eos.run_eos, apply=consume.credit_account, every=5)


def test_a_poison_message_too_large_for_the_dlq_is_parked_as_a_reference(topic, group, dsn, conn):
    """A value the broker took (its limit is 1,048,588 bytes) that the dead-letter producer may not
    send (message.max.bytes, 1,000,000): the dead letter says where the message is, its size and
    its hash, and the consumer goes on."""
    value = b'{"padding": "' + b"x" * 1_010_000 + b'"}'  # poison (no account_id), past the DLQ producer's 1 MB
    producer = make_producer(**{"message.max.bytes": 1_048_576})
    producer.produce(topic, key=b"1", value=value, headers=[("event_id", b"p-huge")])
    assert producer.flush(30) == 0
    send(topic, [credit("good-after")])
    with consuming(topic, group, dsn):
        drained(group, topic)
    parked = read_all(topic + ".dlq", 1)[0]
    reference, headers = json.loads(parked.value()), dict(parked.headers())
    assert reference == {"parked_as": "reference", "bytes": len(value), "sha256": hashlib.sha256(value).hexdigest(),
                         "headers": 1}
    assert headers["dlq_source"] == f"{topic}/0/0".encode() and b"no account_id" in headers["dlq_reason"]
    assert conn.execute("SELECT event_id FROM ledger").fetchall() == [("good-after",)]


def refusing_dlq(topic: str) -> None:
    """The topic's DLQ made before the consumer's, taking no record at all (max.message.bytes 1):
    the broker answers every dead letter, and its reference, with MSG_SIZE_TOO_LARGE."""
    admin = AdminClient({"bootstrap.servers": consume.BROKERS})
    admin.create_topics([NewTopic(topic + ".dlq", 1, -1, config={"max.message.bytes": "1"})])[topic + ".dlq"].result(30)


def dlq_size(topic: str) -> int:
    probe = Consumer({"bootstrap.servers": consume.BROKERS, "group.id": "dlq-size"})
    try:
        low, high = probe.get_watermark_offsets(TopicPartition(topic + ".dlq", 0), timeout=10)
    finally:
        probe.close()
    return high - low


def test_a_dead_letter_the_broker_refuses_stops_the_consumer_short_of_the_poison(topic, group, dsn, conn, monkeypatch):
    """The offset may pass a poison message only once its dead letter is durable. The DLQ refuses
    every record: the consumer stops on the poison with its offset still on it, and nothing after
    it is applied; once the DLQ takes records again, a new consumer parks the poison and applies
    the rest, once. The control: a dead letter sent without waiting for the broker's answer lets
    the offset pass a poison the DLQ never got (it is gone), on the same refusing DLQ."""
    poison = POISON["not JSON"][0]
    refusing_dlq(topic)
    send(topic, [credit("good-1"), poison, credit("good-2")])
    stop, ended = threading.Event(), []

    def first_consumer():
        try:
            consume.run(topic, group, dsn=dsn, stop=stop)
            ended.append(None)
        except Exception as e:  # the one this test waits for
            ended.append(e)

    thread = threading.Thread(target=first_consumer, daemon=True)
    thread.start()
    thread.join(DRAIN_S)
    stop.set()
    thread.join(30)
    assert ended and isinstance(ended[0], KafkaException), f"the consumer went on past a refused dead letter: {ended}"
    assert ended[0].args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert harness.lag(group, topic) == 2  # its offset on the poison: the poison and good-2 still to come
    assert conn.execute("SELECT event_id FROM ledger").fetchall() == [("good-1",)]
    assert dlq_size(topic) == 0

    admin = AdminClient({"bootstrap.servers": consume.BROKERS})
    taking = ConfigResource(ResourceType.TOPIC, topic + ".dlq", incremental_configs=[
        ConfigEntry("max.message.bytes", None, incremental_operation=AlterConfigOpType.DELETE)])  # the default again
    for done in admin.incremental_alter_configs([taking]).values():
        done.result(30)
    with consuming(topic, group, dsn):
        drained(group, topic)
    parked = read_all(topic + ".dlq", 1)
    assert [dict(m.headers())["dlq_source"] for m in parked] == [f"{topic}/0/1".encode()]
    assert conn.execute("SELECT event_id, count(*) FROM ledger GROUP BY 1 ORDER BY 1").fetchall() == [
        ("good-1", 1), ("good-2", 1)]

    control = harness.create_topic(f"test.{uuid.uuid4().hex[:12]}")
    try:
        refusing_dlq(control)
        send(control, [credit("control-1"), poison, credit("control-2")])
        monkeypatch.setattr(consume, "dead_letter", lambda producer, msg, reason: producer.produce(
            consume.dead_letter_topic(msg.topic()), key=msg.key(), value=msg.value()))
        with consuming(control, f"{group}-control", dsn):
            drained(f"{group}-control", control)
        assert dlq_size(control) == 0  # committed past, never parked: the poison is lost
    finally:
        harness.delete_topics(control, control + ".dlq")


@pytest.mark.post
@pytest.mark.parametrize("variant, evt2_rows, balance", [("c", 1, 500), ("b", 2, 600)])
def test_real_consumer_killed_after_db_commit(variant, evt2_rows, balance, topic, group, dsn, conn, tmp_path):
    """A real worker process calls os._exit() right after evt-2's DB commit, before its
    offset commit; a restarted worker gets evt-2 again."""
    producer = make_producer()
    for event_id, amount in (("evt-1", 100), ("evt-2", 100), ("evt-3", 300)):
        publish(producer, topic, event_id, {"account_id": 1, "amount": amount})
    assert producer.flush(30) == 0

    # A short session lets the group give the dead member's partition away in seconds, not 45.
    session = ("--session-timeout-ms", 2000, "--heartbeat-interval-ms", 500)
    crashing = harness.Worker(variant, topic, group, dsn, tmp_path / "crash.log", ("--crash-after", "evt-2", *session))
    assert crashing.proc.wait(DRAIN_S) == worker.EXIT_CRASHED_AFTER_EFFECT, crashing.log_tail()
    restarted = harness.Worker(variant, topic, group, dsn, tmp_path / "restart.log", session)
    try:
        drained(group, topic)
        harness.wait_until(lambda: conn.execute("SELECT count(*) FROM ledger").fetchone()[0] >= 2 + evt2_rows,
                           DRAIN_S, "the credits to land")
    finally:
        restarted.stop()
    counts = dict(conn.execute("SELECT event_id, count(*) FROM ledger GROUP BY event_id").fetchall())
    assert counts == {"evt-1": 1, "evt-2": evt2_rows, "evt-3": 1}
    assert conn.execute("SELECT balance FROM accounts WHERE id = 1").fetchone()[0] == balance
    assert restarted.counts["skipped"] == (1 if variant == "c" else 0)
