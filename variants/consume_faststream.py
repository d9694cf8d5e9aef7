"""The consumer a Python reader is likely to write instead: a FastStream subscriber (M9).

Claim: FastStream acknowledges a Kafka message by committing its offset, and when it
does so is a policy. Under its default, AckPolicy.ACK_FIRST, the client's auto-commit
runs (every 5 s, whatever the handler has done), so a crash replays what was credited
since the last tick. Under AckPolicy.ACK it commits, asynchronously, after the handler
returns, so a crash between the database and that commit replays the message in hand;
and it commits after a handler that raised too, so a message whose handler failed is
passed over, not retried. Only the inbox inside the handler makes the replays harmless.

Three variants, one handler each, crediting the same accounts and ledger as consume.py:

    fs-default   the subscriber with FastStream's defaults; the credit without an inbox
    fs-ack       ack_policy=AckPolicy.ACK: commit after the handler; no inbox
    fs-inbox     AckPolicy.ACK, and handle_once inside the handler

Two deliberate departures from the defaults, the same for all three: auto_offset_reset
is "earliest" (FastStream's default, "latest", would skip a backlog a new group finds,
as it would for every variant in the lab), and FastStream may not create topics (by
default it creates a missing one with 1 partition). Poison goes through consume.process,
as in every variant: parked on the DLQ with its reason.

The same three run on FastStream's other Kafka broker, faststream.kafka (aiokafka), in
consume_faststream_aio.py: build() takes the broker as a Backend, and what differs between
the two (the broker class, the message's annotation, how the harness's client settings and
rebalance callbacks reach the client, the record's accessors) is all in it.

Assumptions: faststream[confluent] (requirements-frameworks.txt); one message at a time
per subscriber, as FastStream handles them; psycopg 3, one connection, opened again after
a lost server (as a reader's pool would).
"""
import asyncio
import dataclasses
import logging
import threading
import time
from collections.abc import Callable

import psycopg
from faststream.confluent import KafkaBroker, KafkaMessage
from faststream.middlewares import AckPolicy

from consume import BROKERS, DSN, dead_letter_topic, handle_once, process
from publish import ensure_topic, make_producer

log = logging.getLogger("consume")

# What the lab runs of this file (lab/registry.py reads it without importing the module).
VARIANTS = {
    "fs-default": {"label": "fs-default: FastStream, its defaults (ACK_FIRST: auto-commit)", "groups": ["frameworks"],
                   "reads": ["crash_after"]},
    "fs-ack": {"label": "fs-ack: FastStream, AckPolicy.ACK (commit after the handler)", "groups": ["frameworks"],
               "reads": ["crash_after"]},
    "fs-inbox": {"label": "fs-inbox: FastStream, AckPolicy.ACK, handle_once in the handler", "groups": ["frameworks"],
                 "reads": ["crash_after"]},
}

HANDLER_FAILED_LOG = "handler raised on %s/%s/%s: %s"  # the framework acks (or not) after this, by its policy
# FastStream's own logger, at WARNING: its INFO lines are one per message; its warnings and
# errors, and librdkafka's (MAXPOLL: evicted, which M2 counts), which it forwards, stay.
FRAMEWORK_LOG = logging.getLogger("faststream.lab")
FRAMEWORK_LOG.setLevel(logging.WARNING)
POLICIES = {"fs-default": None, "fs-ack": AckPolicy.ACK, "fs-inbox": AckPolicy.ACK}  # None: FastStream's own


@dataclasses.dataclass(frozen=True)
class Backend:
    """One of FastStream's Kafka brokers, as build() declares a subscriber on it."""
    name: str
    broker: type  # its KafkaBroker
    message: object  # its KafkaMessage annotation, by which FastStream hands the handler the message
    record: Callable  # the raw message -> one with confluent-kafka's Message accessors, as consume.process reads
    options: Callable  # (client settings, rebalance callbacks) -> (the broker's keyword arguments, the subscriber's)


def confluent_options(settings: dict, callbacks: dict) -> tuple[dict, dict]:
    """librdkafka takes the settings as they are, in the broker's config; FastStream merges it
    last, so it must not name enable.auto.commit, which the ack policy sets. The callbacks
    (on_assign, on_revoke, on_lost) are the subscriber's own keywords."""
    return {"config": settings}, callbacks


CONFLUENT = Backend("confluent", KafkaBroker, KafkaMessage, lambda raw: raw, confluent_options)


def credit_without_inbox(conn: psycopg.Connection, event_id: str, event: dict, apply) -> bool:
    """fs-default's and fs-ack's handler body: the credit in a transaction, no inbox row."""
    with conn.transaction():
        apply(conn, event_id, event)
    return True


async def raw_body(message) -> bytes:
    """FastStream's decoder would json.loads every body; consume.process parses it, poison included."""
    return message.body


class WithoutHeaders:
    """A record as FastStream's parser reads it, with no headers (confluent-kafka's say so by a
    method, aiokafka's by an attribute); everything else is the record's."""

    def __init__(self, record):
        self._record = record

    def __getattr__(self, name: str):
        if name == "headers":
            return (lambda: None) if callable(self._record.headers) else ()
        return getattr(self._record, name)


async def parse_past_bad_headers(record, parse):
    """FastStream's parser decodes every header value as UTF-8 before any handler runs: a record
    with one that is not never reaches the handler, and the next commit passes it with no dead
    letter. Such a record is parsed here as if it had no headers, for FastStream's own use (its
    correlation and reply fields); the handler still reads the record itself, headers intact,
    and consume.process parks it on the DLQ with its reason."""
    try:
        return await parse(record)
    except UnicodeDecodeError:
        message = await parse(WithoutHeaders(record))
        message.raw_message = record
        return message


class Connection:
    """One psycopg connection, opened again on the next message after the server went away."""

    def __init__(self, dsn: str):
        self.dsn, self.conn = dsn, None

    def get(self) -> psycopg.Connection:
        if self.conn is None or self.conn.closed or self.conn.broken:
            self.conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=10)
        return self.conn


def build(variant: str, topic: str, group: str, apply, *, backend: Backend = CONFLUENT, dsn: str = DSN,
          after_db_commit=None, rebalance_callbacks: dict | None = None, overrides: dict | None = None,
          config: dict | None = None, after_handled=None, policy: AckPolicy | None = None,
          failure_pause_s: float = 0.0, parser=None):
    """The broker with its one subscriber, as a reader would declare it. `variant`: one of
    POLICIES' settings; `backend`: which of FastStream's brokers; `overrides`: the client
    settings the harness chose (session and poll timeouts), in librdkafka's names; `config`:
    settings of the variant's own, over them; `after_handled(msg)`: the handler's last step,
    after the crash point (consume_faststream_fixed.py's offset store); `policy`: an ack policy
    other than the variant's; `failure_pause_s`: how long a handler that raised waits before
    FastStream applies the policy (a policy that redelivers would otherwise spin while the
    database is away); `parser`: one that wraps FastStream's (parse_past_bad_headers)."""
    ensure_topic(dead_letter_topic(topic))
    broker_options, subscriber_options = backend.options({**(overrides or {}), **(config or {})},
                                                         rebalance_callbacks or {})
    broker = backend.broker(BROKERS, allow_auto_create_topics=False, logger=FRAMEWORK_LOG, **broker_options)
    policy = policy or POLICIES[variant]
    handle = handle_once if variant == "fs-inbox" else credit_without_inbox
    db, dead_letters = Connection(dsn), make_producer()

    @broker.subscriber(topic, group_id=group, auto_offset_reset="earliest", decoder=raw_body,
                       **({"ack_policy": policy} if policy else {}), **({"parser": parser} if parser else {}),
                       **subscriber_options)
    def handler(body: bytes, msg: backend.message) -> None:  # a plain def: FastStream runs it in a thread
        raw = backend.record(msg.raw_message)
        try:
            outcome = process(db.get(), raw, dead_letters, handle, apply)
        except Exception as e:
            # FastStream logs it too, then applies its ack policy: under ACK that commits past this
            # message. Said here as well, in the line the lab defines, with where the message is.
            log.warning(HANDLER_FAILED_LOG, raw.topic(), raw.partition(), raw.offset(), f"{type(e).__name__}: {e}")
            time.sleep(failure_pause_s)
            raise
        if after_db_commit is not None:
            after_db_commit(raw, outcome)
        if after_handled is not None:
            after_handled(msg)

    return broker


def run(variant: str, topic: str, group: str, apply, *, stop: threading.Event, **options) -> None:
    """Run the subscriber until `stop` is set; then FastStream stops it (and closes its consumer)."""
    broker = build(variant, topic, group, apply, **options)

    async def main() -> None:
        async with broker:
            await broker.start()
            while not stop.is_set():
                await asyncio.sleep(0.1)

    asyncio.run(main())


def run_worker(lab, *, variant: str | None = None, **options) -> None:
    """The lab's entry point; `lab.apply` stalls where M2 asks and says its first effect.
    `variant`: the settings to run (POLICIES), by default the variant the lab named; `options`:
    build()'s (another backend, a variant's own config and last step)."""
    from variants.common import partition_logging

    run(variant or lab.args.variant, lab.args.topic, lab.args.group, lab.apply, stop=lab.stop,
        after_db_commit=lab.after_db_commit, rebalance_callbacks=partition_logging(), overrides=lab.overrides,
        **options)

