"""M4: what one remembered message ID costs, and what it costs to forget it.

Claim, part one (the post's): in a table shaped like processed_messages, a
text UUID costs the most bytes per row, a uuid column less, and a time-ordered
uuidv7() key less again, because random keys keep splitting B-tree pages while
ordered keys always append. The processed_at index that cleanup needs comes on
top, and is measured here too.

Claim, part two (beyond the post): with UUIDv7 IDs the ID is its own
timestamp, so the lean inbox (inbox_v7.sql: a 16-byte key per row, one table
per consumer, optionally one partition per day) needs no processed_at column or
index, and expiring a day is a DROP TABLE: far fewer bytes per row, and no dead
tuples or WAL burst to forget a million IDs.

Workload: `--rows` IDs per layout in a fresh schema, inserted in arrival order
with distinct processed_at values one millisecond apart, then VACUUM (ANALYZE).
The expiry phase fills each layout with `--rows` IDs older than the window plus
a tenth as many inside it, expires the old ones the layout's way, and records
time, WAL bytes (pg_current_wal_insert_lsn before and after) and the dead
tuples left behind for VACUUM (n_dead_tup), and checks that exactly the recent rows remain.

Assumptions: the stack is up, nothing else writes to this PostgreSQL meanwhile
(WAL is server-wide).

    python measure_storage.py --runs 5 --rows 1000000
    python measure_storage.py --runs 5 --per-day 5000000 --days 14
"""
import sys
import time
from datetime import timedelta

import psycopg
from psycopg import sql

import cli
import harness
import inbox_v7
import results
import retention

# The post's three layouts: processed_messages with message_id as text or uuid.
SIZED = {
    "text": ("text", "gen_random_uuid()::text"),
    "uuid-v4": ("uuid", "gen_random_uuid()"),
    "uuid-v7": ("uuid", "uuidv7()"),
}
# For expiry the IDs must carry the row's age: uuidv7(shift) back-dates the ID by `shift`.
AGED = {
    "text": ("text", "gen_random_uuid()::text"),
    "uuid-v4": ("uuid", "gen_random_uuid()"),
    "uuid-v7": ("uuid", "uuidv7(at - now())"),
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
        fill_aged(conn, table, "uuidv7(at - now())", rows, recent, cutoff, with_time=False)
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


def run_once(part: str, layout: str, run: int, config: dict) -> dict:
    """One layout's sizing ("size") or expiry ("expiry"), in a schema of its own."""
    schema = harness.unique(f"m4_r{run}")
    harness.create_schema(schema)
    try:
        with psycopg.connect(harness.scoped_dsn(schema), autocommit=True) as conn:
            conn.execute(inbox_v7.SQL_FILE.read_text())
            conn.execute(f"SET search_path = {schema}, public")
            if part == "size":
                return {"part": "size", "run": run, "rows": config["rows"], **size_layout(conn, layout, config["rows"])}
            return {"part": "expiry", "run": run, **expire_layout(conn, layout, config["rows"])}
    finally:
        harness.drop_schema(schema)


def summarise(runs: list[dict]) -> dict:
    summary = {"size": {}, "expiry": {}}
    fields = {"size": ("heap_bytes_per_row", "index_bytes_per_row", "total_bytes_per_row",
                       "cleanup_index_bytes_per_row"),
              "expiry": ("total_bytes_per_row", "index_bytes_per_row", "expire_s", "expire_wal_bytes",
                         "dead_tuples_after")}
    for part, names in fields.items():
        for layout in dict.fromkeys(r["layout"] for r in runs if r["part"] == part):
            mine = [r for r in runs if r["part"] == part and r["layout"] == layout]
            summary[part][layout] = {"runs": len(mine), **{f: results.stats(r[f] for r in mine) for f in names}}
            if part == "expiry":
                summary[part][layout]["kept_exactly_recent_runs"] = sum(r["kept_exactly_recent"] for r in mine)
    return summary


def sizing(summary: dict, per_day: int, days: int) -> dict:
    """Rows and GB for a retention window, from the measured medians, cleanup index included."""
    rows = per_day * days
    plan = {}
    for layout, s in summary["size"].items():
        total = s["total_bytes_per_row"]["median"] + s["cleanup_index_bytes_per_row"]["median"]
        plan[layout] = {"bytes_per_row": round(total, 1), "gb": round(rows * total / 1e9, 1)}
    for layout in LEAN:
        if layout in summary["expiry"]:
            total = summary["expiry"][layout]["total_bytes_per_row"]["median"]
            plan[layout] = {"bytes_per_row": round(total, 1), "gb": round(rows * total / 1e9, 1)}
    return {"per_day": per_day, "days": days, "rows": rows, "layouts": plan}


def table(summary: dict) -> str:
    def median(s, field, scale=1.0):
        return f"{s[field]['median'] / scale:,.1f}"

    sized = results.text_table(
        ["layout", "heap/row", "index/row", "total/row", "+cleanup index/row"],
        [[layout, *(median(s, f) for f in ("heap_bytes_per_row", "index_bytes_per_row", "total_bytes_per_row",
                                           "cleanup_index_bytes_per_row"))] for layout, s in summary["size"].items()],
        "(medians, bytes)")
    expired = results.text_table(
        ["layout", "total/row", "expire s", "WAL MB", "dead tuples", "kept exactly the recent rows"],
        [[layout, median(s, "total_bytes_per_row"), f"{s['expire_s']['median']:.2f}",
          median(s, "expire_wal_bytes", 1e6), f"{s['dead_tuples_after']['median']:,.0f}",
          f"{s['kept_exactly_recent_runs']} of {s['runs']} runs"] for layout, s in summary["expiry"].items()])
    text = sized + "\n\n" + expired
    if "sizing" in summary:
        z = summary["sizing"]
        text += f"\n\nsizing: {z['per_day']:,} IDs a day for {z['days']} days = {z['rows']:,} rows\n"
        text += results.text_table(["layout", "bytes/row", "GB"], [[layout, f"{p['bytes_per_row']:.1f}",
                                                                   f"{p['gb']:.1f}"] for layout, p in
                                                                  z["layouts"].items()])
    return text


def verdict_line(r: dict) -> str:
    if r["part"] == "size":
        return f"run {r['run']}: {r['layout']} {r['total_bytes_per_row']} bytes a row"
    return (f"run {r['run']}: {r['layout']} expired in {r['expire_s']} s, {r['expire_wal_bytes']:,} WAL bytes, "
            f"{'kept exactly the recent rows' if r['kept_exactly_recent'] else 'KEPT THE WRONG ROWS'}")


def main(args) -> int:
    config = {"runs": args.runs, "rows": args.rows, "window_days": WINDOW.days, "expired_days": EXPIRED_DAYS,
              "recent_rows": args.rows // 10, "per_day": args.per_day, "days": args.days}

    def summarise_with_sizing(runs):
        summary = summarise(runs)
        summary["sizing"] = sizing(summary, args.per_day, args.days)
        return summary

    plan = [{"part": "size", "layout": layout} for layout in SIZED]
    plan += [{"part": "expiry", "layout": layout} for layout in (*AGED, *LEAN)]
    results.drive("measure_storage", args.out, config, plan, run_once, summarise_with_sizing, table, verdict_line,
                  args.force)
    return 0


def parse_args(argv=None):
    parser = cli.measurement("M4: bytes per remembered ID per layout, and the cost of expiring them.",
                             str(results.RESULTS / "storage.json"), partitions=None, seed=False)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--per-day", type=int, default=5_000_000, help="for the sizing example")
    parser.add_argument("--days", type=int, default=14, help="for the sizing example")
    args = parser.parse_args(argv)
    cli.at_least(parser, args, 1, "runs", "rows", "per_day", "days")
    if args.rows < 10000:
        parser.error("--rows must be at least 10000, or page overheads swamp the per-row figures")
    return args


if __name__ == "__main__":
    sys.exit(main(parse_args()))
