"""A handler that stalls mid-transaction, made on the database side, so any consumer has one.

Claim: M2's zombie needs no code of the consumer's. A trigger on the effects table (the
ledger) sleeps the first time each chosen event is written, inside the consumer's own
transaction, after whatever it did before the write (its inbox row, its balance update), so
the consumer stalls where a slow handler would: past max.poll.interval.ms, evicted, then it
finishes and commits. "The first time" is a sequence per chosen event: nextval() is never
rolled back, so it holds across transactions, and a second consumer writing the same event
while the first still sleeps goes straight on (a plain table's row would make it wait on
the first transaction's lock, or not be seen at all).

The function runs as the schema's owner (SECURITY DEFINER), so the consumer's role needs no
grant on the plan. A helper for M2 (measure_rebalance.py --command), not a fault of the
registry's: it is the workload's, as the in-handler stall of the lab's own workers is.
"""
import psycopg
from psycopg import sql

SETUP = """
CREATE TABLE lab_stalls (event_id text PRIMARY KEY, started regclass NOT NULL, ended regclass NOT NULL);
CREATE FUNCTION lab_stall() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = {schema} AS $$
DECLARE
    plan lab_stalls;
BEGIN
    SELECT * INTO plan FROM lab_stalls WHERE event_id = NEW.event_id;
    IF FOUND AND nextval(plan.started) = 1 THEN  -- the first write of a chosen event, in any transaction
        PERFORM pg_sleep({seconds});
        PERFORM nextval(plan.ended);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER lab_stall BEFORE INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION lab_stall();
"""


def install(owner_dsn: str, schema: str, event_ids: list[str], seconds: float, table: str = "ledger") -> None:
    """Stall the first write of each of `event_ids` to `table` (which has an event_id column) for
    `seconds`; `owner_dsn` connects as the schema's owner."""
    with psycopg.connect(owner_dsn, autocommit=True) as conn, conn.transaction():
        conn.execute(sql.SQL(SETUP).format(schema=sql.Identifier(schema), seconds=sql.Literal(float(seconds)),
                                           table=sql.Identifier(table)))
        for i, event_id in enumerate(event_ids):
            started, ended = f"lab_stall_{i}_started", f"lab_stall_{i}_ended"
            conn.execute(sql.SQL("CREATE SEQUENCE {}; CREATE SEQUENCE {}").format(sql.Identifier(started),
                                                                                   sql.Identifier(ended)))
            conn.execute("INSERT INTO lab_stalls VALUES (%s, %s, %s)", (event_id, started, ended))


COUNTS = """
SELECT count(*) FILTER (WHERE s.last_value IS NOT NULL),
       count(*) FILTER (WHERE s.last_value IS NOT NULL AND e.last_value IS NULL)
FROM lab_stalls p
JOIN pg_sequences s ON s.schemaname = current_schema() AND s.sequencename = p.started::text
JOIN pg_sequences e ON e.schemaname = current_schema() AND e.sequencename = p.ended::text
"""


def stalls(owner_dsn: str) -> tuple[int, int]:
    """(stalls begun, stalls still asleep): settle() waits for the second to be 0, so a
    zombie's late write lands inside the run."""
    with psycopg.connect(owner_dsn) as conn:
        return conn.execute(COUNTS).fetchone()


def asleep(owner_dsn: str) -> int:
    return stalls(owner_dsn)[1]
