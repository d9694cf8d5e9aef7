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

import psycopg

from lab import cli, harness, results
from lab.layouts import AGED, EXPIRED_DAYS, LEAN, SIZED, WINDOW, expire_layout, size_layout
from variants import inbox_v7


def run_once(part: str, layout: str, run: int, config: dict) -> dict:
    """One layout's sizing ("size") or expiry ("expiry"), in a schema of its own."""
    schema = harness.unique(f"m4_r{run}")
    harness.create_schema(schema)
    try:
        # The owner's connection: every layout is DDL (CREATE TABLE, partitions, DROP), which the
        # consumer's role may not run (lab/roles.sql).
        with psycopg.connect(harness.scoped_dsn(schema, harness.ADMIN_DSN), autocommit=True) as conn:
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
                  args.force, committed=args.committed, post_lines=post_lines)
    return 0


def parse_args(argv=None):
    parser = cli.measurement("M4: bytes per remembered ID per layout, and the cost of expiring them.",
                             None, partitions=None, seed=False)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--per-day", type=int, default=5_000_000, help="for the sizing example")
    parser.add_argument("--days", type=int, default=14, help="for the sizing example")
    args = parser.parse_args(argv)
    cli.at_least(parser, args, 1, "runs", "rows", "per_day", "days")
    if args.rows < 10000:
        parser.error("--rows must be at least 10000, or page overheads swamp the per-row figures")
    args.committed = results.reader_paths(args, "storage.json")
    return args


def post_lines(_groups) -> list[str]:
    post = results.read("post-figures.json")["storage"]["layouts"]
    return [f"  {layout}: {p['total_bytes_per_row']} bytes a row ({p['heap_bytes_per_row']} heap, "
            f"{p['index_bytes_per_row']} index)" for layout, p in post.items()]


if __name__ == "__main__":
    sys.exit(main(parse_args()))
