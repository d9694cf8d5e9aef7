"""Quix Streams' exactly-once, with its PostgreSQL sink writing the ledger (M9).

Claim: `processing_guarantee="exactly-once"` covers what Quix writes to Kafka (outputs,
changelogs, the consumed offsets, all in one Kafka transaction per checkpoint). The sink
is outside it: at each checkpoint Quix first has the sink write and commit its rows in
Postgres, then commits the Kafka transaction. A crash between the two replays the
checkpoint, and the sink writes its rows again, unless the insert itself is idempotent.

    qx-eos         the sink's plain INSERT of (event_id, account_id, amount) per message
    qx-eos-keyed   the same sink with on_conflict_do_nothing=True, on a ledger whose
                   event_id is unique (its declaration's setup adds the index): a replayed
                   row conflicts and is dropped

What the sink cannot express: "add 100 to account 1". It writes rows; an increment
needs an UPDATE keyed on something else than the row it writes, which is the inbox's
job. So these variants write ledger rows only, and the accounts' balances stay 0: the
checker counts their effects per event ID in the ledger, and their balance check fails
by construction (README, M9).

Departures from the sink's defaults, forced by the lab: schema_auto_update=False (by
default the sink runs CREATE TABLE and ALTER TABLE ... ADD COLUMN on every batch, which
the consumer's role may not, and it refuses a table whose primary key it was not told
of) and include_metadata=False (its "timestamp" and "__key" columns are not the
ledger's). From the Application's defaults: auto_offset_reset "earliest" (as every
variant) and no topic creation. The transactional.id stays Quix's own: a new random one
each start.

Assumptions: runs in .venv-quix (requirements-quix.txt: Quix Streams pins a
confluent-kafka older than the lab's, and its sink needs psycopg2); the message's
`event_id` header names the event, as everywhere in the lab.
"""
import tempfile
import threading
import time

import psycopg2
from psycopg.conninfo import conninfo_to_dict
from quixstreams import Application
from quixstreams.sinks.community.postgresql import PostgreSQLSink

from consume import BROKERS, DSN, checked_event_id, parse_event

# What the lab runs of this file (lab/registry.py reads it without importing the module).
VARIANTS = {
    "qx-eos": {"label": "qx-eos: Quix Streams exactly-once, PostgreSQLSink's plain INSERT", "groups": ["frameworks"],
               "venv": ".venv-quix", "reads": ["crash_after"]},
    # the key the sink's ON CONFLICT DO NOTHING needs: one ledger row per event ID
    "qx-eos-keyed": {"label": "qx-eos-keyed: Quix Streams exactly-once, the sink's ON CONFLICT DO NOTHING on event_id",
                     "groups": ["frameworks"], "venv": ".venv-quix", "reads": ["crash_after"],
                     "setup": "CREATE UNIQUE INDEX IF NOT EXISTS ledger_event_id_key ON ledger (event_id)"},
}


class Carrying:
    """The part of a Kafka Message that consume.py's checks read: its headers. Quix hands a
    row's headers over as a list, not as the Message."""

    def __init__(self, headers):
        self._headers = headers

    def headers(self):
        return self._headers


class LedgerSink(PostgreSQLSink):
    """The stock sink, plus the lab's two hooks after each committed write: the first-effect
    line and the crash point (after Postgres, before Kafka's transaction)."""

    def __init__(self, *, after_write, **settings):
        super().__init__(**settings)
        self.after_write = after_write

    def setup(self):
        # The stock setup() runs CREATE SCHEMA IF NOT EXISTS on every start, whatever
        # schema_auto_update says, and Postgres checks the privilege before it looks: the
        # consumer's role, which may not create schemas, cannot start it. Connect only.
        self._client = psycopg2.connect(**self._client_settings)

    def write(self, batch):
        super().write(batch)  # its rows are committed in Postgres when this returns
        self.after_write([item.value["event_id"] for item in batch])


def sink_settings(dsn: str) -> dict:
    """PostgreSQLSink's connection arguments from a libpq DSN; the schema from its search_path."""
    parts = conninfo_to_dict(dsn)
    options = parts.get("options", "")
    schema = options.split("search_path=", 1)[1].split()[0] if "search_path=" in options else "public"
    return {"host": parts.get("host", "localhost"), "port": int(parts.get("port", 5432)), "dbname": parts["dbname"],
            "user": parts["user"], "password": parts.get("password", ""), "schema_name": schema}


def application(group: str, guarantee: str, overrides: dict | None) -> Application:
    """Quix's Application as the lab runs it, under `guarantee` (its processing_guarantee)."""
    return Application(
        broker_address=BROKERS,
        consumer_group=group,
        processing_guarantee=guarantee,
        auto_offset_reset="earliest",  # Quix's default, "latest", would skip the backlog a new group finds
        auto_create_topics=False,  # by default it creates a missing topic with 1 partition
        consumer_extra_config=dict(overrides or {}),  # the harness's session and poll timeouts
        state_dir=tempfile.mkdtemp(prefix="quix-state-"),  # unused (no stateful step), but made at start:
    )                                                      # not in the checkout, where it would go by default


def build(variant: str, topic: str, group: str, *, dsn: str = DSN, work_ms: float = 0, after_write=lambda ids: None,
          overrides: dict | None = None, stall=None) -> Application:
    app = application(group, "exactly-once", overrides)  # the Kafka transaction per checkpoint
    source = app.topic(topic, value_deserializer="bytes", key_deserializer="bytes")

    def ledger_row(value: bytes, key, timestamp: int, headers) -> dict:
        event_id = checked_event_id(Carrying(headers))
        event = parse_event(value)
        if stall is not None:
            stall.maybe(None, event_id, event)
        if work_ms:
            time.sleep(work_ms / 1000)
        return {"event_id": event_id, "account_id": event["account_id"], "amount": event["amount"]}

    sink = LedgerSink(**sink_settings(dsn), table_name="ledger", schema_auto_update=False, include_metadata=False,
                      on_conflict_do_nothing=variant == "qx-eos-keyed", after_write=after_write)
    app.dataframe(source).apply(ledger_row, metadata=True).sink(sink)
    return app


def run_worker(lab, build=build) -> None:
    """The lab's entry point (consume_quix_inbox's too, with its own `build`). `lab.apply` (the
    lab's credit) is unused: the sink writes the rows. Quix's run() must own the main thread (it
    sets signal handlers), so a watcher thread turns `stop` into app.stop()."""
    def after_write(event_ids):
        if event_ids:  # once the sink's first rows are committed
            lab.first_effect(event_ids[0])
        for event_id in event_ids:  # the crash point: committed in Postgres, not yet in Kafka
            lab.committed([event_id])

    app = build(lab.args.variant, lab.args.topic, lab.args.group, work_ms=lab.args.work_ms, after_write=after_write,
                overrides=lab.overrides, stall=lab.stall)
    threading.Thread(target=lambda: (lab.stop.wait(), app.stop()), daemon=True).start()
    app.run()
