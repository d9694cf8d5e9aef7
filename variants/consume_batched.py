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
import threading

import psycopg
from confluent_kafka import Consumer, Message, Producer

from consume import CONSUMER_NAME, DSN, event_id_of, first_line
from variants import common

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
    """handle_once for many events in one transaction: (applied, rejected). Every ID is claimed
    with one INSERT, in ID order (credit_accounts: the lock order); only the IDs that came back
    are applied. An ID repeated inside the batch counts once. Events for accounts that do not
    exist are returned as rejected (event_id, event, reason), unclaimed, for the dead letters."""
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
    return common.commit_offsets(consumer, common.next_offsets(messages))


def process_batch(conn: psycopg.Connection, messages: list[Message], dead_letters: Producer,
                  apply_batch=credit_accounts) -> dict:
    """Bring a batch to durable outcomes: the database transaction, then the dead letters."""
    events, poison = common.decoded(messages)
    try:
        applied, rejected = handle_batch(conn, [(eid, ev) for _, eid, ev in events], apply_batch)
    except common.REFUSED:
        # The database refused a value (a balance past bigint): the batch rolled back whole. Each
        # event again in a transaction of its own, so the refused one is parked alone.
        applied, rejected = [], []
        for _, eid, ev in events:
            try:
                one_applied, one_rejected = handle_batch(conn, [(eid, ev)], apply_batch)
            except common.REFUSED as e:
                one_applied, one_rejected = [], [(eid, ev, f"the database refused it: {first_line(e)}")]
            applied += one_applied
            rejected += one_rejected
    refused = {id(ev): reason for _, ev, reason in rejected}  # per copy, not per ID
    skipped = common.settle(events, {eid for eid, _ in applied}, refused, poison, dead_letters)
    return {"applied": len(applied), "skipped": skipped, "dead-lettered": len(poison)}


def run_batched(topic: str, group: str, apply_batch=credit_accounts, *, batch: int = 500, dsn: str = DSN,
                stop: threading.Event | None = None, after_db_commit=None, **overrides) -> None:
    """run(), a batch at a time: up to `batch` messages, one transaction, then one offset commit.
    `after_db_commit(messages, outcome)` runs between the database commit and the offset commit."""
    with common.consuming(topic, group, dsn, overrides) as (consumer, dead_letters, db):
        while stop is None or not stop.is_set():
            messages = common.fetched(consumer, batch)
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


if __name__ == "__main__":
    common.run_command(run_batched, "Consume credits through the batched inbox.", batch="messages per transaction")
