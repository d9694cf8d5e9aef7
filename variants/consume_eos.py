"""Kafka's exactly-once loop, and where it stops: at the database.

Claim: a read_committed consumer and a transactional producer make topic ->
processing -> topic exactly-once. The records a batch produces and the input
offsets it consumed commit in one Kafka transaction, or abort together, so the
output topic holds each input's record once, whatever crashes. A write to
Postgres inside that loop is not in that transaction: Postgres has committed it
by the time Kafka's transaction commits or aborts, and an abort (a crash, a
fence, a rebalance) makes Kafka hand the same inputs over again. Without the
inbox (variant e) the credit is applied again; through handle_once (variant f)
the second copy finds its row and is skipped.

The output is produced on every pass, applied or skipped: a skip means an earlier
pass credited the account, but that pass's output record may have been aborted
with its transaction, so only this pass's copy is sure to commit.

Errors, as confluent-kafka's transactional API sorts them:
    abortable   abort the transaction and rewind the consumer to the last committed
                offsets: the batch is read again (and handled again)
    retriable   the commit's outcome is unknown: call commit_transaction again
    fatal       this producer is done (fenced by a newer instance with the same
                transactional.id, or broken): raise, and let whatever runs the
                process start it again, which makes a new producer

Assumptions: consume.py's (IDs in the `event_id` header, validation, dead letters);
one transactional.id per concurrently running instance, stable across its restarts,
so that a restarted instance fences its dead predecessor and aborts the
transaction it left open at once (rather than after transaction.timeout.ms).

    python -m variants.consume_eos --every 100     # consumer.deposits -> consumer.deposits.credited
"""
import functools
import json
import threading

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, Producer, TopicPartition

from consume import BROKERS, CONSUMER_NAME, DSN, consumer_config, dead_letter_topic, event_id_of, handle_once, process
from publish import ensure_topic
from variants import common
from variants.common import log, log_partitions, next_offsets

# What the lab runs of this file (lab/registry.py reads it without importing the module).
VARIANTS = {
    "e": {"label": "e: Kafka's exactly-once loop, credit without the inbox", "kind": "eos", "reads": ["every"],
          "crash_points": ["pg-committed", "kafka-committed"]},
    "f": {"label": "f: Kafka's exactly-once loop, credit through the inbox", "kind": "eos", "reads": ["every"],
          "crash_points": ["pg-committed", "kafka-committed"]},
}

ABORTED_LOG = "transaction aborted (%s): rewound to the committed offsets"  # counted by the harnesses
TIMEOUT_S = 30.0


def output_topic(topic: str) -> str:
    return f"{topic}.credited"


def transactional_producer(transactional_id: str) -> Producer:
    producer = Producer({
        "bootstrap.servers": BROKERS,
        # Names this instance across restarts: init_transactions() fences the previous
        # incarnation and aborts whatever transaction it left open. Implies idempotence
        # and acks=all.
        "transactional.id": transactional_id,
        # A transaction left open by a process that never comes back blocks read_committed
        # readers until the broker aborts it; 60 s (the default) is a long stall.
        "transaction.timeout.ms": 10000,
    })
    producer.init_transactions(TIMEOUT_S)
    return producer


class Pass:
    """The loop's state: the producer's open transaction and the messages it covers."""

    def __init__(self, consumer: Consumer, producer: Producer, out: str):
        self.consumer, self.producer, self.out = consumer, producer, out
        self.pending: list[Message] = []

    def produce(self, msg: Message, outcome: str) -> None:
        """The input's output record (or nothing for a dead letter, which went to the DLQ in
        this same transaction), inside the open transaction."""
        if outcome != "dead-lettered":
            event_id, event = event_id_of(msg), json.loads(msg.value())  # process() dead-lettered any without an ID
            credited = {"event_id": event_id, "account_id": event["account_id"], "amount": event["amount"]}
            self.producer.produce(self.out, key=msg.key(), headers=[("event_id", event_id.encode())],
                                  value=json.dumps(credited).encode())
        self.pending.append(msg)

    def commit(self, rewind_on_abort: bool = True) -> bool:
        """Send the consumed offsets into the transaction and commit it; begin the next one.
        False if the transaction was aborted (and, unless told otherwise, the consumer rewound)."""
        if not self.pending:
            return True
        try:
            self.producer.send_offsets_to_transaction(next_offsets(self.pending),
                                                      self.consumer.consumer_group_metadata(), TIMEOUT_S)
            for _ in range(10):
                try:
                    self.producer.commit_transaction(TIMEOUT_S)
                    break
                except KafkaException as e:
                    if not e.args[0].retriable():
                        raise
                    log.warning("commit_transaction: %s; retrying", e.args[0].name())
            else:
                raise KafkaException("commit_transaction kept failing with retriable errors")
        except KafkaException as e:
            error = e.args[0]
            if error.fatal() or not error.txn_requires_abort():
                raise  # fenced, or broken: this producer is done (see the module's docstring)
            self.abort(error.name(), rewind_on_abort)
            return False
        finally:
            self.pending = []
        self.producer.begin_transaction()
        return True

    def abort(self, why: str, rewind_consumer: bool = True) -> None:
        """Abort the open transaction: its output records and offsets are discarded, and (unless
        the partitions are going anyway) the consumer reads the batch again."""
        self.producer.abort_transaction(TIMEOUT_S)
        self.pending = []
        if rewind_consumer:
            rewind(self.consumer)
        log.warning(ABORTED_LOG, why)
        self.producer.begin_transaction()


def rewind(consumer: Consumer) -> None:
    """Seek every assigned partition back to its committed offset (its beginning if none)."""
    assigned = consumer.assignment()
    for tp in consumer.committed(assigned, timeout=TIMEOUT_S) if assigned else ():
        consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))


def run_eos(topic: str, group: str, apply, *, handle=None, every: int = 100, transactional_id: str | None = None,
            dsn: str = DSN, stop: threading.Event | None = None, after_db_commit=None, after_kafka_commit=None,
            **overrides) -> None:
    """Consume `topic` as `group` until `stop` is set: each message through `handle` (handle_once
    by default: variant f) and its output record into the open transaction; every `every`
    messages (or when the topic goes quiet, or a partition is revoked) the offsets go into
    the transaction and it commits. `after_db_commit(msg, outcome)` runs after each database
    commit, `after_kafka_commit(msgs)` after each Kafka commit: the lab's crash points."""
    handle = handle or handle_once
    out = output_topic(topic)
    ensure_topic(out)
    ensure_topic(dead_letter_topic(topic))
    # read_committed: skip records of aborted transactions, so a crashed pass's output is never read downstream
    consumer = Consumer(consumer_config(group, **{"isolation.level": "read_committed", **overrides}))
    producer = transactional_producer(transactional_id or f"{group}-eos-0")
    state = Pass(consumer, producer, out)

    # Revoked: commit the open transaction while the generation is still ours (afterwards the
    # group would refuse its offsets). Lost: the generation is gone already, so abort it.
    db = common.Database(dsn)  # before joining the group: no partitions held while it waits for the database
    consumer.subscribe([topic], on_assign=log_partitions("assigned"),
                       on_revoke=log_partitions("revoked", lambda _c, _ps: state.commit(rewind_on_abort=False)),
                       on_lost=log_partitions("lost", lambda _c, _ps: state.abort("partitions lost", False)))
    producer.begin_transaction()
    try:
        while stop is None or not stop.is_set():
            messages = consumer.consume(every - len(state.pending), 0.5)
            for msg in messages:
                if msg.error():
                    log.warning("consumer error: %s", msg.error())
                    continue
                # Poison goes to the DLQ through the transactional producer: it commits with the offsets.
                outcome = db.run(process, msg, producer, handle, apply)
                if after_db_commit is not None:
                    after_db_commit(msg, outcome)
                state.produce(msg, outcome)
            if len(state.pending) >= every or (not messages and state.pending):
                done = list(state.pending)
                if state.commit() and after_kafka_commit is not None:
                    after_kafka_commit(done)
        state.commit()  # a clean stop leaves no transaction open
    finally:
        db.close()
        consumer.close()


def run_worker(lab) -> None:
    """e and f, with their planted crash: at --crash-point, once for every --crash-every-th
    event (by seq), the first time any process reaches that point with it."""
    args = lab.args
    chosen = lab.once_every(args.crash_every if args.crash_point else 0, "planted_crashes")

    def crash_if_chosen(point, msgs):
        for msg in msgs:
            event_id = event_id_of(msg)
            if event_id and chosen(event_id):
                lab.crash_at(point, event_id)

    after_db = after_kafka = None
    if args.crash_point == "pg-committed":
        def after_db(msg, outcome):
            if outcome == "applied":
                crash_if_chosen("pg-committed", [msg])
    elif args.crash_point == "kafka-committed":
        def after_kafka(msgs):
            crash_if_chosen("kafka-committed", msgs)
    handle = handle_once if args.variant == "f" else common.apply_without_inbox
    run_eos(args.topic, args.group, lab.apply, handle=handle,
            every=args.every, transactional_id=args.transactional_id, stop=lab.stop, after_db_commit=after_db,
            after_kafka_commit=after_kafka, **lab.overrides)


def main() -> None:
    from consume import credit_account
    common.run_command(functools.partial(run_eos, apply=credit_account),
                       "Kafka's exactly-once loop, crediting through the inbox.", CONSUMER_NAME + "-eos",
                       every="input messages per Kafka transaction")


if __name__ == "__main__":
    main()
