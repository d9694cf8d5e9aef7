"""The post's shortcuts, and one of its mistakes, as consumers (M9).

Claim: each works only where the post says it does.

    upsert        "When you can skip the table": the effect is a state set by business key
                  (the account's latest credit), not an increment, so applying a copy again
                  writes the same row. No inbox. A copy that arrives after a newer event
                  sets the state back, and nothing notices.
    versioned     the same upsert, applied only when the event is newer than the row's
                  version (its seq, the order the producer made it in): a late copy is a
                  no-op, so the state never goes back.
    offset-dedup  "Dedup on the offset": consume.py's inbox keyed on (topic, partition,
                  offset) instead of the event ID. A redelivery of the same record is
                  skipped, so it survives M1's kills; a copy a relay or a retrying
                  producer writes again has a new offset and is credited again.

upsert and versioned write their state to `account_state` (STATE_TABLE, their setup, makes
it) and one ledger row per application, so the checker counts how often each event was
applied (a second application is harmless here; a stale state is not), and
measure_publish counts the accounts whose state is not their newest event.

Assumptions: the events carry `seq`, increasing in the order the producer made them,
and are keyed by account, so one account's events share a partition (the lab's).
"""
import threading

import psycopg
from confluent_kafka import Consumer

from consume import DSN, commit_offset, connect, consumer_config, dead_letter_topic, handle_once, process
from publish import ensure_topic, make_producer

# What the lab runs of this file (lab/registry.py reads it without importing the module).
VARIANTS = {
    "offset-dedup": {"label": "offset-dedup: the inbox keyed on topic, partition and offset", "groups": ["shortcuts"],
                     "reads": ["crash_after"]},
    "upsert": {"label": "upsert: the account's state set by key, no inbox", "groups": ["shortcuts"],
               "reads": ["crash_after"], "setup": "STATE_TABLE"},
    "versioned": {"label": "versioned: the same upsert, only if the event is newer", "groups": ["shortcuts"],
                  "reads": ["crash_after"], "setup": "STATE_TABLE"},
}
# upsert's and versioned's state by business key (last_seq is versioned's version), made by the
# schema's owner in the run's schema before the worker starts: the consumer's role may not run DDL
STATE_TABLE = ("CREATE TABLE IF NOT EXISTS account_state (account_id integer PRIMARY KEY, last_event text NOT NULL, "
               "last_seq bigint NOT NULL, last_amount bigint NOT NULL); "
               "GRANT SELECT, INSERT, UPDATE ON account_state TO inbox_consumer")


def set_state(conn: psycopg.Connection, event_id: str, event: dict, versioned: bool) -> bool:
    """Upsert the account's state to this event; versioned: only if it is newer. True if written."""
    newer_only = " WHERE s.last_seq < EXCLUDED.last_seq" if versioned else ""
    return conn.execute(
        "INSERT INTO account_state AS s (account_id, last_event, last_seq, last_amount) VALUES (%s, %s, %s, %s) "
        "ON CONFLICT (account_id) DO UPDATE SET last_event = EXCLUDED.last_event, last_seq = EXCLUDED.last_seq, "
        "last_amount = EXCLUDED.last_amount" + newer_only,
        (event["account_id"], event_id, event["seq"], event["amount"])).rowcount == 1


def state_handler(versioned: bool, first_effect=lambda event_id: None):
    """consume.run's `handle` for upsert and versioned: the state, and a ledger row per application.
    `first_effect(event_id)` after each write (these handlers credit nothing through `apply`)."""
    def handle(conn: psycopg.Connection, event_id: str, event: dict, apply=None) -> bool:
        with conn.transaction():
            written = set_state(conn, event_id, event, versioned)
            if written:
                conn.execute("INSERT INTO ledger (event_id, account_id, amount) VALUES (%s, %s, %s)",
                             (event_id, event["account_id"], event["amount"]))
        if written:
            first_effect(event_id)
        return written  # an older copy under versioned: skipped, as the inbox would say
    return handle


def offset_key(msg) -> str:
    return f"{msg.topic()}/{msg.partition()}/{msg.offset()}"


def run_offset_dedup(topic: str, group: str, apply, *, stop: threading.Event, dsn: str = DSN, after_db_commit=None,
                     rebalance_callbacks: dict | None = None, **overrides) -> None:
    """consume.run's loop, with the inbox row keyed on where the record is, not on its event ID."""
    ensure_topic(dead_letter_topic(topic))
    with connect(dsn) as conn:
        consumer = Consumer(consumer_config(group, **overrides))
        dead_letters = make_producer()
        consumer.subscribe([topic], **(rebalance_callbacks or {}))
        try:
            while not stop.is_set():
                msg = consumer.poll(0.5)
                if msg is None or msg.error():
                    continue

                def by_offset(conn, event_id, event, apply, msg=msg):
                    # the ledger still records the event ID: the checker counts per event
                    return handle_once(conn, offset_key(msg), event, apply=lambda c, _key, e: apply(c, event_id, e))

                outcome = process(conn, msg, dead_letters, by_offset, apply)
                if after_db_commit is not None:
                    after_db_commit(msg, outcome)
                commit_offset(consumer, msg)
        finally:
            consumer.close()


def run_worker(lab) -> None:
    import consume
    from variants.common import partition_logging

    args = lab.args
    if args.variant == "offset-dedup":
        run_offset_dedup(args.topic, args.group, lab.apply, stop=lab.stop, after_db_commit=lab.after_db_commit,
                         rebalance_callbacks=partition_logging(), **lab.overrides)
        return
    consume.run(args.topic, args.group, lab.apply, handle=state_handler(args.variant == "versioned", lab.first_effect),
                stop=lab.stop, after_db_commit=lab.after_db_commit, rebalance_callbacks=partition_logging(),
                **lab.overrides)

