"""handle_once on the lean inbox (inbox_v7.sql): the same guarantee for UUIDv7 event IDs,
at a fraction of the bytes per remembered ID.

Claim: for a v7 ID, one 16-byte primary-key entry in the consumer's own,
day-partitioned table is all the inbox needs: the ID's timestamp does what
processed_at did, and expiring a day is a DROP TABLE. What it costs:

- producers must send UUIDv7 IDs. Any other ID (a v4 UUID, a string) is routed,
  by its shape alone so every redelivery goes the same way, to the ordinary
  processed_messages table with its processed_at cleanup;
- the clock that matters is the producer's. A v7 ID whose day has no partition
  (older than what the inbox still remembers, or far in the future) cannot be
  deduplicated, so it is refused as poison instead of applied blind. The
  ordinary inbox has no way to tell that a text ID is too old to check.

Assumptions: inbox_v7.sql is loaded and the table has partitions for the days
in use (ensure_days); the table name is per consumer, e.g. inbox_wallet_credits.
"""
import uuid
from pathlib import Path

import psycopg
from psycopg import errors, sql

from consume import CONSUMER_NAME, PoisonMessage, credit_account, handle_once

SQL_FILE = Path(__file__).resolve().parent / "inbox_v7.sql"
DEFAULT_INBOX = f"inbox_{CONSUMER_NAME.replace('-', '_')}"


def v7_of(event_id: str) -> uuid.UUID | None:
    """The ID as a UUID if it is a version-7 UUID, else None."""
    try:
        parsed = uuid.UUID(event_id)
    except ValueError:
        return None
    return parsed if parsed.version == 7 and str(parsed) == event_id.lower() else None


def install(conn: psycopg.Connection, inbox: str = DEFAULT_INBOX) -> None:
    conn.execute(SQL_FILE.read_text())
    conn.execute("SELECT inbox_v7_create(%s)", (inbox,))


def ensure_days(conn: psycopg.Connection, inbox: str, days_back: int, days_ahead: int) -> int:
    """Partitions from days_back days ago to days_ahead days ahead (UTC); returns how many were made."""
    return conn.execute("SELECT inbox_v7_ensure_days(%s, (now() AT TIME ZONE 'UTC')::date - %s, "
                        "(now() AT TIME ZONE 'UTC')::date + %s)", (inbox, days_back, days_ahead)).fetchone()[0]


def forget_before(conn: psycopg.Connection, inbox: str, cutoff, batch: int = 10000,
                  max_batches: int = 100000) -> list[int]:
    """Retention for an unpartitioned lean inbox: every ID made before `cutoff` is a primary-key
    range (a v7 ID starts with its millisecond), deleted in batches until none is left."""
    statement = sql.SQL("DELETE FROM {t} WHERE ctid IN (SELECT ctid FROM {t} WHERE message_id < uuidv7_floor(%s) "
                        "LIMIT %s)").format(t=sql.Identifier(inbox))
    deleted = []
    for _ in range(max_batches):
        deleted.append(conn.execute(statement, (cutoff, batch)).rowcount)
        if deleted[-1] == 0:
            return deleted
    raise RuntimeError(f"still deleting after {max_batches} batches: is something inserting expired IDs?")


def handle_once_v7(conn: psycopg.Connection, event_id: str, event: dict, apply=credit_account,
                   inbox: str = DEFAULT_INBOX) -> bool:
    """handle_once, with v7 IDs remembered in the lean inbox and any other ID in processed_messages."""
    v7 = v7_of(event_id)
    if v7 is None:
        return handle_once(conn, event_id, event, apply)
    try:
        with conn.transaction():
            claimed = conn.execute(
                sql.SQL("INSERT INTO {} (message_id) VALUES (%s) ON CONFLICT DO NOTHING RETURNING 1")
                .format(sql.Identifier(inbox)), (v7,)).fetchone()
            if claimed is None:
                return False
            apply(conn, event_id, event)
    except errors.CheckViolation:  # no partition holds this ID's day
        raise PoisonMessage("event_id is a UUIDv7 from a day the inbox does not cover "
                            "(older than its retention, or in the future): cannot deduplicate it") from None
    return True
