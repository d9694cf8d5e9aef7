"""The inbox's storage layouts, for M4 (measure_storage.py): how each is made, filled, sized and expired.

Claim: each layout here is the inbox as a reader would build it. The post's three are
processed_messages with message_id as text, as a uuid (v4, random) and as a uuidv7()
key, with the processed_at index retention needs; the lean two are inbox_v7.sql's,
a 16-byte UUIDv7 key and nothing else, expired by key range or by dropping a day.
The figures are PostgreSQL's own (pg_relation_size, pg_indexes_size, WAL positions,
n_dead_tup), read on tables of known row counts.

Assumptions: a connection whose search path starts with a schema of its own, with
inbox_v7.sql installed (measure_storage.run_once makes both).
"""
import time
from datetime import timedelta

from psycopg import sql

from lab import retention
from variants import inbox_v7

# The post's three layouts: processed_messages with message_id as text or uuid.
SIZED = {
    "text": ("text", "gen_random_uuid()::text"),
    "uuid-v4": ("uuid", "gen_random_uuid()"),
    "uuid-v7": ("uuid", "uuidv7()"),
}
# For expiry the IDs must carry the row's age: uuidv7(shift) stamps the clock's time plus
# `shift`. The shift is from clock_timestamp(), not now(): now() stands still for the whole
# INSERT, so IDs made late in a slow fill would carry a later time than `at`, and one meant
# to expire a second before the cutoff could land after it.
V7_AT = "uuidv7(at - clock_timestamp())"
AGED = {
    "text": ("text", "gen_random_uuid()::text"),
    "uuid-v4": ("uuid", "gen_random_uuid()"),
    "uuid-v7": ("uuid", V7_AT),
}
LEAN = ("v7-pk-range", "v7-partitioned")
WINDOW = timedelta(days=14)
EXPIRED_DAYS = 7
CHUNK = 100_000


def per_row(conn, relation: str, rows: int) -> dict:
    """Heap, index and total bytes per row; a partitioned table's own size is 0, so its partitions'."""
    heap, indexes, total = (int(n) for n in conn.execute(  # sum() of bigint comes back as numeric
        "SELECT sum(pg_relation_size(r)), sum(pg_indexes_size(r)), sum(pg_total_relation_size(r)) FROM "
        "(SELECT %s::regclass AS r UNION ALL SELECT inhrelid FROM pg_inherits WHERE inhparent = %s::regclass) t",
        (relation, relation)).fetchone())
    return {"heap_bytes_per_row": round(heap / rows, 1), "index_bytes_per_row": round(indexes / rows, 1),
            "total_bytes_per_row": round(total / rows, 1)}


def standard_table(conn, name: str, id_type: str) -> None:
    conn.execute(sql.SQL("CREATE TABLE {} (consumer text NOT NULL, message_id {} NOT NULL, "
                         "processed_at timestamptz NOT NULL, PRIMARY KEY (consumer, message_id))")
                 .format(sql.Identifier(name), sql.SQL(id_type)))


def size_layout(conn, layout: str, rows: int) -> dict:
    """Part one: bytes per row of one layout, then what the cleanup index adds."""
    id_type, make_id = SIZED[layout]
    table = f"sized_{layout.replace('-', '_')}"
    standard_table(conn, table, id_type)
    for start in range(0, rows, CHUNK):  # arrival order, a millisecond apart, as a live consumer writes
        conn.execute(sql.SQL("INSERT INTO {} SELECT 'wallet-credits', " + make_id + ", "
                             "now() - (%s::int - n) * interval '1 millisecond' "
                             "FROM generate_series(%s::int, %s::int) n")
                     .format(sql.Identifier(table)), (rows, start + 1, min(start + CHUNK, rows)))
    conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(sql.Identifier(table)))
    sizes = per_row(conn, table, rows)
    conn.execute(sql.SQL("CREATE INDEX {} ON {} (processed_at)").format(sql.Identifier(table + "_at"),
                                                                       sql.Identifier(table)))
    cleanup = conn.execute("SELECT pg_relation_size(%s)", (table + "_at",)).fetchone()[0]
    conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(table)))
    return {"layout": layout, **sizes, "cleanup_index_bytes_per_row": round(cleanup / rows, 1)}


def fill_aged(conn, table: str, make_id: str, rows: int, recent: int, cutoff, with_time: bool) -> None:
    """`rows` IDs spread over the EXPIRED_DAYS before `cutoff`, then `recent` after it (from a minute on)."""
    spans = ((rows, cutoff - timedelta(days=EXPIRED_DAYS), timedelta(days=EXPIRED_DAYS) - timedelta(seconds=1)),
             (recent, cutoff + timedelta(minutes=1), WINDOW - timedelta(hours=1)))
    columns = "'wallet-credits', {id}, at" if with_time else "{id}"
    for count, start_at, span in spans:
        for start in range(0, count, CHUNK):
            conn.execute(sql.SQL("INSERT INTO {} SELECT " + columns.format(id=make_id) + " FROM "
                                 "(SELECT %s::timestamptz + %s::interval * n / %s::int AS at "
                                 "FROM generate_series(%s::int, %s::int) n) ages").format(sql.Identifier(table)),
                         (start_at, span, count, start + 1, min(start + CHUNK, count)))


def dead_tuples(conn, table: str) -> int:
    """Deleted rows that VACUUM still has to clear: the statistics' n_dead_tup, flushed first.
    (pgstattuple would miss those that later scans already pruned to bare line pointers.)"""
    conn.execute("SELECT pg_stat_force_next_flush()")  # flushed as this backend goes idle
    return conn.execute("SELECT coalesce(sum(n_dead_tup), 0)::bigint FROM pg_stat_user_tables "
                        "WHERE relid = %s::regclass OR relid IN "
                        "(SELECT inhrelid FROM pg_inherits WHERE inhparent = %s::regclass)",
                        (table, table)).fetchone()[0]


def expire_layout(conn, layout: str, rows: int) -> dict:
    """Part two: bytes per row with every index the layout needs, and the cost of forgetting `rows` IDs."""
    recent = rows // 10
    cutoff = conn.execute("SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - %s::interval",
                          (WINDOW,)).fetchone()[0]
    table = f"aged_{layout.replace('-', '_')}"
    if layout in LEAN:
        if layout == "v7-partitioned":
            conn.execute("SELECT inbox_v7_create(%s)", (table,))
            conn.execute("SELECT inbox_v7_ensure_days(%s, (%s::timestamptz AT TIME ZONE 'UTC')::date - %s, "
                         "(now() AT TIME ZONE 'UTC')::date + 1)", (table, cutoff, EXPIRED_DAYS + 1))
        else:
            conn.execute(sql.SQL("CREATE TABLE {} (message_id uuid PRIMARY KEY)").format(sql.Identifier(table)))
        fill_aged(conn, table, V7_AT, rows, recent, cutoff, with_time=False)
    else:
        id_type, make_id = AGED[layout]
        standard_table(conn, table, id_type)
        fill_aged(conn, table, make_id, rows, recent, cutoff, with_time=True)
        conn.execute(sql.SQL("CREATE INDEX ON {} (processed_at)").format(sql.Identifier(table)))
    conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(sql.Identifier(table)))
    sizes = per_row(conn, table, rows + recent)

    wal_before = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
    started = time.monotonic()
    if layout == "v7-partitioned":
        conn.execute("SELECT inbox_v7_drop_before(%s, %s)", (table, cutoff))
    elif layout == "v7-pk-range":
        inbox_v7.forget_before(conn, table, cutoff, batch=10000, max_batches=rows // 10000 + 10)
    else:
        keep = conn.execute("SELECT now() - %s::timestamptz", (cutoff,)).fetchone()[0]
        retention.forget(conn, keep, 10000, max_batches=rows // 10000 + 10, table=table)
    seconds = time.monotonic() - started
    wal = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s)", (wal_before,)).fetchone()[0]
    dead = dead_tuples(conn, table)
    left, too_old = conn.execute(
        sql.SQL("SELECT count(*), count(*) FILTER (WHERE {old}) FROM {t}").format(
            t=sql.Identifier(table),
            old=sql.SQL("message_id < uuidv7_floor(%s)" if layout in LEAN else "processed_at < %s")),
        (cutoff,)).fetchone()
    conn.execute(sql.SQL("DROP TABLE {} CASCADE").format(sql.Identifier(table)))
    return {"layout": layout, **sizes, "expired_rows": rows, "recent_rows": recent, "expire_s": round(seconds, 2),
            "expire_wal_bytes": int(wal), "dead_tuples_after": dead, "rows_left": left, "expired_left": too_old,
            "kept_exactly_recent": left == recent and too_old == 0}
