"""Quix Streams with a sink that does the inbox's job: each credit applied once (M9b).

Claim: Quix flushes its sinks at each checkpoint, before it commits the checkpoint's offsets
(in its Kafka transaction under exactly-once, with a plain offset commit under at-least-once).
A crash between the two replays the checkpoint. The stock PostgreSQLSink (consume_quix.py)
then writes its rows again, and could not credit an account in the first place. InboxSink
writes a batch (one partition's messages of one checkpoint) the way the batched inbox d does,
with d's own code (consume_batched.process_batch), in ONE Postgres transaction:

    INSERT INTO processed_messages (consumer, message_id)
        SELECT 'wallet-credits', id FROM unnest(<the batch's event IDs>) AS id ORDER BY id
        ON CONFLICT DO NOTHING RETURNING message_id
    -- then, for the IDs that came back only:
    SELECT 1 FROM accounts WHERE id = ANY(<their accounts>) ORDER BY id FOR NO KEY UPDATE
    INSERT INTO ledger (event_id, account_id, amount) SELECT * FROM unnest(...)
    UPDATE accounts SET balance = balance + credit.total FROM (<the sums per account>) ...

A replayed checkpoint meets its inbox rows and is skipped ("skipped duplicate" lines), so the
balances come out exact, whichever guarantee Quix runs under:

    qx-eos-inbox   processing_guarantee="exactly-once", with InboxSink
    qx-alo-inbox   Quix's default guarantee (at-least-once), with the same sink

Poison: a message without one valid event_id header, or whose body is not a credit's JSON, or
a credit to an account that does not exist, goes where every variant of the lab sends it:
to the dead-letter topic (<topic>.dlq, with its key, value, headers and the reason; consume.
dead_letter, made durable before write() returns), logged as "dead-lettered", and its offset
is committed with the checkpoint; the partition goes on. The processing step lets poison pass
without its work or stall, and the sink parks it after the batch's transaction (d's
process_batch: a value the database refuses rolls the batch back, which is replayed one event
per transaction so that only the refused one is parked). This departs from consume_quix.py,
whose processing step raises PoisonMessage and, under Quix's default on_processing_error,
stops the application. A kill after the sink and before Kafka's commit dead-letters the
replayed poison again: the dead letters are at least once, as in every variant.

The lab's hooks as consume_quix.py has them: the handler's stall and work (--slow-every,
--work-ms) in the processing step, per message, as Quix processes it; the first effect and the
planted crash point (lab.committed, for each event the batch's transaction applied) after
the sink's database commit, before Quix commits anything to Kafka.

Assumptions: runs in .venv-quix (requirements-quix.txt), which has psycopg 3 beside psycopg2:
the sink connects with consume.DSN (CONSUMER_DSN, whose search_path puts the run's schema
first), through variants.common.Database, which reconnects after a lost server as d does.
"""
import time

from quixstreams.sinks import BatchingSink

from consume import DSN, PoisonMessage, checked_event_id, dead_letter_topic, parse_event
from publish import ensure_topic, make_producer
from variants import consume_quix
from variants.common import Database
from variants.consume_batched import credit_accounts, process_batch

# What the lab runs of this file (lab/registry.py reads it without importing the module).
VARIANTS = {
    "qx-eos-inbox": {"label": "qx-eos-inbox: Quix Streams exactly-once, a sink that claims each event in the inbox",
                     "groups": ["frameworks"], "venv": ".venv-quix", "reads": ["crash_after"]},
    "qx-alo-inbox": {"label": "qx-alo-inbox: Quix Streams at-least-once, a sink that claims each event in the inbox",
                     "groups": ["frameworks"], "venv": ".venv-quix", "reads": ["crash_after"]},
}
# Quix's processing_guarantee for each; "at-least-once" is its default, spelled out.
GUARANTEES = {"qx-eos-inbox": "exactly-once", "qx-alo-inbox": "at-least-once"}


class Received:
    """A sink item as consume.py's checks and dead letters read a Kafka Message."""

    def __init__(self, topic: str, partition: int, item):
        self._topic, self._partition, self._item = topic, partition, item

    def topic(self):
        return self._topic

    def partition(self):
        return self._partition

    def offset(self):
        return self._item.offset

    def key(self):
        return self._item.key

    def value(self):
        return self._item.value

    def headers(self):
        return self._item.headers


class InboxSink(BatchingSink):
    """Each batch through the inbox in one transaction (process_batch), its poison dead-lettered;
    then after_commit(applied event IDs), the lab's hooks."""

    def __init__(self, topic: str, *, dsn: str = DSN, after_commit=lambda event_ids: None):
        super().__init__()
        self.topic, self.dsn, self.after_commit = topic, dsn, after_commit
        self.db = self.dead_letters = None

    def setup(self):
        ensure_topic(dead_letter_topic(self.topic))  # the broker creates no topic by itself
        self.db = Database(self.dsn)
        self.dead_letters = make_producer()

    def write(self, batch):
        messages = [Received(batch.topic, batch.partition, item) for item in batch]
        applied: list[str] = []

        def apply_batch(conn, credits):  # inside the batch's transaction, for the IDs it claimed
            credit_accounts(conn, credits)
            applied.extend(event_id for event_id, _ in credits)

        def work(conn):  # run again whole after a lost connection: the inbox tells what committed
            applied.clear()
            return process_batch(conn, messages, self.dead_letters, apply_batch)

        self.db.run(work)  # committed in Postgres, poison parked, when this returns
        self.after_commit(applied)


def build(variant: str, topic: str, group: str, *, dsn: str = DSN, work_ms: float = 0,
          after_write=lambda event_ids: None, overrides: dict | None = None, stall=None):
    """The Application as consume_quix.build makes it, with InboxSink and the variant's guarantee."""
    app = consume_quix.application(group, GUARANTEES[variant], overrides)
    source = app.topic(topic, value_deserializer="bytes", key_deserializer="bytes")

    def handler_work(value: bytes, key, timestamp: int, headers) -> bytes:
        """The handler's stall and work for a credit; poison passes untouched, for the sink to park."""
        try:
            event_id, event = checked_event_id(consume_quix.Carrying(headers)), parse_event(value)
        except PoisonMessage:
            return value
        if stall is not None:
            stall.maybe(None, event_id, event)
        if work_ms:
            time.sleep(work_ms / 1000)
        return value

    app.dataframe(source).apply(handler_work, metadata=True).sink(InboxSink(topic, dsn=dsn, after_commit=after_write))
    return app


def run_worker(lab) -> None:
    """The lab's entry point: consume_quix.run_worker, with this file's Application."""
    consume_quix.run_worker(lab, build=build)
