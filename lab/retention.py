"""Forget inbox IDs past the retention window, and raise the alarm when the inbox
remembers too little.

Claim: repeating retention.sql's batched delete until it deletes nothing
removes exactly the IDs older than the window and nothing newer; and an inbox
whose oldest ID is younger than the longest redelivery window among your
senders will let a late duplicate through, so `--check` pages on it.

Assumptions: RETENTION_DSN (settings.py) points at the inbox, as a role that may
delete from it and do nothing else (inbox_retention, roles.sql); retention.sql's
DELETE is the statement run here, with the window and batch size bound as
parameters instead of its literals.

    python -m lab.retention --window 14d --batch 10000     # what cron runs
    python -m lab.retention --check 15d                    # exit 1 if the inbox remembers < 15 days
"""
import re
import sys
from datetime import timedelta
from pathlib import Path

import psycopg

from consume import CONSUMER_NAME
from lab import cli
from lab.settings import RETENTION_DSN

RETENTION_SQL = Path(__file__).resolve().parents[1] / "retention.sql"
UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def window(text: str) -> timedelta:
    match = re.fullmatch(r"(\d+)([mhdw])", text.strip())
    if not match:
        raise ValueError(f"expected a window like 90m, 36h, 14d or 2w, got {text!r}")
    return timedelta(**{UNITS[match.group(2)]: int(match.group(1))})


def delete_statement() -> str:
    """retention.sql's DELETE, with its window and batch size made parameters."""
    text = "\n".join(line for line in RETENTION_SQL.read_text().splitlines() if not line.lstrip().startswith("--"))
    [statement] = [s.strip() for s in text.split(";") if s.strip().upper().startswith("DELETE")]
    for literal in ("interval '14 days'", "LIMIT 10000"):
        if literal not in statement:
            raise RuntimeError(f"retention.sql's DELETE no longer says {literal}; update retention.py")
    return statement.replace("interval '14 days'", "%(window)s::interval").replace("LIMIT 10000", "LIMIT %(batch)s")


def forget(conn: psycopg.Connection, keep: timedelta, batch: int, max_batches: int = 100000,
           table: str = "processed_messages") -> list[int]:
    """Run the batched delete until it deletes 0 rows; the rows deleted per batch. `table`: a
    table of processed_messages' shape under another name (M4 measures several side by side)."""
    statement = delete_statement().replace("processed_messages", table)
    deleted = []
    for _ in range(max_batches):
        deleted.append(conn.execute(statement, {"window": keep, "batch": batch}).rowcount)
        if deleted[-1] == 0:
            return deleted
    raise RuntimeError(f"still deleting after {max_batches} batches: is something inserting expired rows?")


def remembered(conn: psycopg.Connection, consumer: str = CONSUMER_NAME) -> timedelta | None:
    """How far back the consumer's inbox reaches; None when it is empty."""
    return conn.execute("SELECT now() - min(processed_at) FROM processed_messages WHERE consumer = %s",
                        (consumer,)).fetchone()[0]


def check(conn: psycopg.Connection, longest: timedelta, consumer: str = CONSUMER_NAME) -> tuple[bool, str]:
    """The alarm: (ok, message). Not ok when the inbox remembers less than `longest`."""
    reach = remembered(conn, consumer)
    if reach is None:
        return False, f"ALARM: the {consumer} inbox is empty, so it remembers nothing of the last {longest}"
    if reach < longest:
        return False, (f"ALARM: the {consumer} inbox remembers only {reach}, less than the longest redelivery "
                       f"window {longest}: a duplicate older than that would be applied again")
    return True, f"ok: the {consumer} inbox remembers {reach}, at least {longest}"


def main(args) -> int:
    with psycopg.connect(RETENTION_DSN, autocommit=True) as conn:
        if args.check:
            ok, message = check(conn, args.check, args.consumer)
            print(message, file=sys.stdout if ok else sys.stderr)
            return 0 if ok else 1
        batches = forget(conn, args.window, args.batch)
    for n, deleted in enumerate(batches, 1):
        print(f"batch {n}: deleted {deleted}")
    print(f"forgot {sum(batches)} IDs older than {args.window}")
    return 0


def parse_args(argv=None):
    parser = cli.Parser(description="Forget inbox IDs past the window, or check the inbox remembers enough.")
    parser.add_argument("--window", type=window, default=window("14d"), help="keep IDs this long (e.g. 14d)")
    parser.add_argument("--batch", type=int, default=10000, help="rows per DELETE")
    parser.add_argument("--check", type=window, metavar="LONGEST_WINDOW",
                        help="instead of deleting: exit 1 unless the inbox remembers at least this long")
    parser.add_argument("--consumer", default=CONSUMER_NAME)
    args = parser.parse_args(argv)
    if args.batch < 1:
        parser.error("--batch must be at least 1")
    return args


if __name__ == "__main__":
    sys.exit(main(parse_args()))
