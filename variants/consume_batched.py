"""The batched inbox (variant d): consume.py's guarantee, one transaction per batch.

Claim: the same as consume.py's, paid once per batch instead of once per message.
Up to `batch` messages are taken at once; every event ID is claimed with one
INSERT ... ON CONFLICT DO NOTHING RETURNING, only the IDs that came back are
applied (one statement for the ledger, one for the balances), the transaction
commits, and then the next offset of every partition in the batch is committed.
A crash replays the whole batch in hand, and the inbox skips what of it had
committed. Consumers whose batches share IDs or accounts wait for each other and
never deadlock: each transaction locks inbox rows in ID order, then accounts in
id order, and nothing else (see credit_accounts).

Assumptions: consume.py's, whose validation, dead letters, client config and
reconnecting Database this shares.

    python -m variants.consume_batched --batch 500
"""
import logging
import threading

import psycopg
from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition

from consume import (
    COMMIT_FAILED_LOG,
    CONSUMER_NAME,
    DEAD_LETTERED_LOG,
    DSN,
    SKIPPED_LOG,
    PoisonMessage,
    checked_event_id,
    dead_letter,
    event_id_of,
    first_line,
    parse_event,
)
from publish import DEMO_TOPIC
from variants import common
from variants.common import consuming

log = logging.getLogger("consume")  # consume.py's logger: one stream for a harness to read

# What the lab runs of this file (lab/registry.py reads it without importing the module).
VARIANTS = {
    "d": {"label": "d: batched inbox, one transaction per batch", "reads": ["batch", "crash_after"]},
}


def credit_accounts(conn: psycopg.Connection, credits: list[tuple[str, dict]]) -> None:
    """The side effect for a batch, set-based: one statement for the ledger, one for the balances.

    Lock order, and why it is deadlock-free: the inbox claim (handle_batch) takes its rows
    in ID order, then this takes every account row it will touch, in id order, before
    anything else touches accounts. The mode is FOR NO KEY UPDATE, the lock the balance
    UPDATE itself takes, because the ledger INSERT's foreign-key check takes FOR KEY SHARE
    on the same rows: KEY SHARE does not conflict with NO KEY UPDATE, so the check never
    waits. (FOR UPDATE would conflict with it; locking after the INSERT would let two
    batches each hold KEY SHARE on an account and wait for the other's: a deadlock.)
    """
    ids = [event_id for event_id, _ in credits]
    accounts = [event["account_id"] for _, event in credits]
    amounts = [event["amount"] for _, event in credits]
    conn.execute("SELECT 1 FROM accounts WHERE id = ANY(%b) ORDER BY id FOR NO KEY UPDATE",
                 (sorted(set(accounts)),))
    conn.execute("INSERT INTO ledger (event_id, account_id, amount) "
                 "SELECT * FROM unnest(%b::text[], %b::int[], %b::bigint[])", (ids, accounts, amounts))
    conn.execute("UPDATE accounts SET balance = balance + credit.total "
                 "FROM (SELECT id, sum(amount) AS total FROM unnest(%b::int[], %b::bigint[]) AS c(id, amount) "
                 "GROUP BY id) AS credit WHERE accounts.id = credit.id", (accounts, amounts))


def handle_batch(conn: psycopg.Connection, events: list[tuple[str, dict]], apply_batch=credit_accounts,
                 consumer: str = CONSUMER_NAME) -> tuple[list[tuple[str, dict]], list[tuple[str, dict, str]]]:
    """handle_once for many events in one transaction: (applied, rejected).

    Every ID is claimed with one INSERT, in sorted order, so overlapping batches
    in two consumers wait for each other instead of deadlocking; only the IDs
    that came back are applied. An ID repeated inside the batch counts once.
    Events for accounts that do not exist are returned as rejected (event_id,
    event, reason), unclaimed, for the dead-letter topic.
    """
    with conn.transaction():
        wanted = sorted({event["account_id"] for _, event in events})
        known = {row[0] for row in conn.execute("SELECT id FROM accounts WHERE id = ANY(%b)", (wanted,))}
        # Each copy is judged on its own: a bad copy of an ID is rejected, a good one of the same ID is not.
        rejected = [(eid, ev, f"unknown account {ev['account_id']}") for eid, ev in events
                    if ev["account_id"] not in known]
        first_copy = {}
        for event_id, event in events:
            if event["account_id"] in known:
                first_copy.setdefault(event_id, event)
        candidates = sorted(first_copy)
        claimed = {row[0] for row in conn.execute(
            "INSERT INTO processed_messages (consumer, message_id) "
            "SELECT %s, id FROM unnest(%b::text[]) AS id ORDER BY id "
            "ON CONFLICT DO NOTHING RETURNING message_id", (consumer, candidates))}
        applied = [(eid, first_copy[eid]) for eid in candidates if eid in claimed]
        if applied:
            apply_batch(conn, applied)
    return applied, rejected


def commit_batch(consumer: Consumer, messages: list[Message]) -> bool:
    """Commit, synchronously, the offset after the last message of each partition in the batch."""
    next_offsets = {}
    for msg in messages:
        key = (msg.topic(), msg.partition())
        next_offsets[key] = max(next_offsets.get(key, 0), msg.offset() + 1)
    try:
        consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in next_offsets.items()], asynchronous=False)
    except KafkaException as e:
        log.warning(COMMIT_FAILED_LOG, e.args[0].name())
        return False
    return True


def process_batch(conn: psycopg.Connection, messages: list[Message], dead_letters: Producer,
                  apply_batch=credit_accounts) -> dict:
    """Bring a batch to durable outcomes: the database transaction, then the dead letters."""
    events, poison = [], []
    for msg in messages:
        try:
            events.append((checked_event_id(msg), parse_event(msg.value()), msg))
        except PoisonMessage as e:
            poison.append((msg, e.reason))
    try:
        applied, rejected = handle_batch(conn, [(eid, ev) for eid, ev, _ in events], apply_batch)
    except (psycopg.DataError, psycopg.IntegrityError):
        # The database refused a value (a balance past bigint): the batch rolled back whole. Each
        # event again in a transaction of its own, so the refused one is parked alone.
        applied, rejected = [], []
        for eid, ev, _ in events:
            try:
                one_applied, one_rejected = handle_batch(conn, [(eid, ev)], apply_batch)
            except (psycopg.DataError, psycopg.IntegrityError) as e:
                one_applied, one_rejected = [], [(eid, ev, f"the database refused it: {first_line(e)}")]
            applied += one_applied
            rejected += one_rejected
    applied_ids = {eid for eid, _ in applied}
    rejected_reasons = {id(ev): reason for _, ev, reason in rejected}  # per copy, not per ID
    skipped = 0
    for eid, ev, msg in events:
        if id(ev) in rejected_reasons:
            poison.append((msg, rejected_reasons[id(ev)]))
        elif eid in applied_ids:
            applied_ids.discard(eid)  # a repeat of the same ID later in the batch is a skip
        else:
            skipped += 1
            log.info(SKIPPED_LOG, eid)
    for msg, reason in poison:
        dead_letter(dead_letters, msg, reason)
        log.warning(DEAD_LETTERED_LOG, msg.topic(), msg.partition(), msg.offset(), reason)
    return {"applied": len(applied), "skipped": skipped, "dead-lettered": len(poison)}


def run_batched(topic: str, group: str, apply_batch=credit_accounts, *, batch: int = 500, dsn: str = DSN,
                stop: threading.Event | None = None, after_db_commit=None, **overrides) -> None:
    """run(), a batch at a time: up to `batch` messages, one transaction, then one offset commit.

    A crash replays at most the batch in hand, and the inbox skips what of it
    had committed. `after_db_commit(messages, outcome)` runs between the database
    commit and the offset commit.
    """
    with consuming(topic, group, dsn, overrides) as (consumer, dead_letters, db):
        while stop is None or not stop.is_set():
            messages = []
            for msg in consumer.consume(batch, 0.1):  # a short wait: a partial batch beats an idle one
                if msg.error():
                    log.warning("consumer error: %s", msg.error())
                else:
                    messages.append(msg)
            if not messages:
                continue
            outcome = db.run(process_batch, messages, dead_letters, apply_batch)
            if after_db_commit is not None:
                after_db_commit(messages, outcome)
            commit_batch(consumer, messages)


def run_worker(lab) -> None:
    """d, as the lab runs it: the handler's work for each batch, then the set-based credit;
    a batch's DB commit is the planted crash point."""
    args = lab.args

    def apply_batch(conn, credits: list[tuple[str, dict]]) -> None:
        lab.work(credits)
        credit_accounts(conn, credits)
        lab.first_effect(credits[0][0])

    run_batched(args.topic, args.group, apply_batch, batch=args.batch, stop=lab.stop,
                after_db_commit=lambda msgs, outcome: lab.committed(
                    [event_id_of(m) for m in msgs] if outcome["applied"] else ()), **lab.overrides)


def main() -> None:
    parser = common.Parser(description="Consume credits through the batched inbox.")
    parser.add_argument("--topic", default=DEMO_TOPIC)
    parser.add_argument("--group", default=CONSUMER_NAME)
    parser.add_argument("--batch", type=int, default=500, help="messages per transaction")
    args = parser.parse_args()
    if args.batch < 1:
        parser.error("--batch must be at least 1")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    run_batched(args.topic, args.group, batch=args.batch)


if __name__ == "__main__":
    main()
