"""The post's variants, as the lab runs them: a1 and a2 (auto-commit), b (commit after the
database, no inbox) and c (consume.py, unchanged), plus c-reconnect.

Claim: they differ only in when the offset is committed and whether the inbox is used;
the side effect is the same single Postgres transaction (credit the account, write a
ledger row) in all of them. c is consume.run() itself, started again by the lab's
supervisor when it stops on a lost database, as systemd's Restart=on-failure would.

Each run_worker takes what the lab's worker process gives a variant (lab/worker.py, Lab):
its flags (`args`), `stop`, the credit (`apply`: handler sleep, stall, first-effect line),
the planted crash point (`after_db_commit`), the client `overrides` and the `supervised`
restart loop.
"""
import logging

from confluent_kafka import Consumer

import consume
from variants import common

log = logging.getLogger("worker")

VARIANTS = {
    "a1": {"label": "a1: auto-commit, poll()", "groups": ["post"]},
    "a2": {"label": "a2: auto-commit, 100-message batches", "groups": ["post"]},
    "b": {"label": "b: commit after the DB, no inbox", "groups": ["post"], "reads": ["crash_after"]},
    "c": {"label": "c: inbox + commit after the DB", "groups": ["post"], "reads": ["crash_after"]},
    "c-reconnect": {"label": "c-reconnect: c, reconnecting in place instead of restarting",
                    "reads": ["crash_after"]},
}


def run_auto_commit(topic: str, group: str, apply, stop, batch: int | None, overrides: dict) -> None:
    """a1 (batch None: poll()) and a2 (consume(batch)): the client's auto-commit defaults.
    auto.offset.reset is earliest, as in every variant, so a new group reads the backlog;
    everything else about committing is librdkafka's default."""
    consumer = Consumer({"bootstrap.servers": consume.BROKERS, "group.id": group,
                         "auto.offset.reset": "earliest", **overrides})
    try:
        with consume.connect(consume.DSN) as conn:  # before joining the group: no partitions held while it waits
            consumer.subscribe([topic])
            while not stop.is_set():
                messages = consumer.consume(batch, 0.5) if batch else [m for m in [consumer.poll(0.5)] if m]
                for msg in messages:
                    if msg.error():
                        log.warning("consumer error: %s", msg.error())
                        continue
                    event_id = consume.checked_event_id(msg)
                    common.apply_without_inbox(conn, event_id, consume.parse_event(msg.value()), apply)
    finally:
        consumer.close()


def run_reconnecting(lab) -> None:
    """c-reconnect: consume.run's loop on variants.common.Database, which keeps the connection
    through a database restart instead of stopping (what consume.py did before it left that to
    its supervisor). Kept so M6 can measure the two side by side (README, "Reconnect or exit")."""
    args = lab.args
    with common.consuming(args.topic, args.group, consume.DSN, lab.overrides) as (consumer, dead_letters, db):
        while not lab.stop.is_set():
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            outcome = db.run(consume.process, msg, dead_letters, consume.handle_once, lab.apply)
            lab.after_db_commit(msg, outcome)
            consume.commit_offset(consumer, msg)


def run_worker(lab) -> None:
    args = lab.args
    if args.variant in ("a1", "a2"):
        run_auto_commit(args.topic, args.group, lab.apply, lab.stop, 100 if args.variant == "a2" else None,
                        lab.overrides)
    elif args.variant == "c-reconnect":
        run_reconnecting(lab)
    else:
        handle = consume.handle_once if args.variant == "c" else common.apply_without_inbox
        lab.supervised(lambda: consume.run(args.topic, args.group, lab.apply, handle=handle, stop=lab.stop,
                                           after_db_commit=lab.after_db_commit,
                                           rebalance_callbacks=common.partition_logging(), **lab.overrides))
