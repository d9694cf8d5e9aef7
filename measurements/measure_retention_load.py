"""#31: what forgetting old IDs costs the consumer while it consumes.

Claim: retention.sql's batched DELETE, run beside p against a backlog of expired IDs, writes WAL for
every row it forgets and takes CPU and I/O from p; an inbox partitioned by the ID's day forgets the
same backlog by dropping tables, which writes next to no WAL. A partition drop (inbox_v7.sql's
inbox_v7_drop_before, one DROP TABLE a day, in one transaction) needs the parent's ACCESS EXCLUSIVE
lock, so it waits for p's statement in flight and p's next statements wait behind it; DETACH
PARTITION ... CONCURRENTLY, then DROP, takes no lock p's statement conflicts with. How long p stalls
for either is measured (the longest gap between two credits), not assumed.

Workload: `--events` credits with UUIDv7 IDs, published up front, then one p worker drains them. Its
inbox already remembers `--backlog` IDs from 15 to 21 days back, past a 14-day window, so all are
due. The modes, interleaved run by run in a rotating order:

    alone        processed_messages as schema.sql makes it (with retention.sql's index)
    delete       the same, with lab.retention.forget (retention.sql's DELETE, 10,000 a batch)
    partitioned  processed_messages range-partitioned by message_id, a partition per UTC day
                 (inbox_v7_ensure_days' bounds: a v7 ID sorts by its millisecond)
    drop         the same, with inbox_v7_drop_before dropping the expired days
    detach       the same, each expired day DETACHed CONCURRENTLY, then dropped

Retention runs beside p (from its first credit, as the retention role or the schema's owner) in
delete, drop and detach; p's statement is the same in every mode (the partitioned table keeps the
key (consumer, message_id), which holds the partition key).

Measure: p's msgs/s from first to last credit, its longest gap between two credits, the WAL written
from p's start until both are done, how long retention took and whether it ended before p's last
credit. Checker: every credit once, the balances exact, and the backlog gone where retention ran.

Assumptions: the stack is up and nothing else measures on it (the measurement lock); PostgreSQL 18
(uuidv7(interval) back-dates the backlog's IDs).

    python -m measurements.measure_retention_load --runs 5
"""
import sys
import threading
import time
from datetime import datetime, timedelta

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

import consume
from lab import cli, harness, results
from lab import retention as inbox_retention
from lab.settings import RETENTION_DSN
from variants import inbox_v7

MODES = ("alone", "delete", "partitioned", "drop", "detach")
PARTITIONED = ("partitioned", "drop", "detach")
WINDOW = timedelta(days=14)
BACKLOG_DAYS = (15, 21)  # the expired IDs' ages, spread evenly over these days
# Each retention statement's bound: a DETACH ... CONCURRENTLY waits for every transaction that
# might still see the partition, so one stuck transaction would hold the run forever; over the
# bound it fails, and the run raises with the reason, rather than hang.
RETENTION_STATEMENT_TIMEOUT_S = 300

# The inbox partitioned by the ID's UTC day, in the shape schema.sql gives it, with
# grants.sql's grants (the consumer claims, retention forgets).
PARTITIONED_INBOX = """
DROP TABLE processed_messages;
CREATE TABLE processed_messages (
    consumer     text        NOT NULL,
    message_id   text        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, message_id)
) PARTITION BY RANGE (message_id);
GRANT SELECT, INSERT ON processed_messages TO inbox_consumer;
GRANT SELECT, DELETE ON processed_messages TO inbox_retention;
"""


def fill_backlog(owner: psycopg.Connection, rows: int) -> None:
    """`rows` expired IDs, each a UUIDv7 made `age` ago with processed_at as long ago."""
    low, high = BACKLOG_DAYS
    owner.execute(
        "INSERT INTO processed_messages (consumer, message_id, processed_at) "
        "SELECT %s, uuidv7(-age)::text, now() - age FROM (SELECT make_interval(secs => "
        "(%s + (%s - %s) * g::float8 / %s) * 86400) AS age FROM generate_series(1, %s) g) aged",
        (consume.CONSUMER_NAME, low, high, low, rows, rows))
    owner.execute("VACUUM (ANALYZE) processed_messages")
    owner.execute("CHECKPOINT")


def expired_days(owner: psycopg.Connection) -> list[str]:
    """The day partitions that end before the window starts (inbox_v7_drop_before's rule). The
    names are read first and their days parsed here: in one SQL statement the planner may apply
    to_date() to every row of pg_class, whose names are not days."""
    cutoff = owner.execute("SELECT (now() - %s) AT TIME ZONE 'UTC'", (WINDOW,)).fetchone()[0]
    names = [name for (name,) in owner.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = 'processed_messages'::regclass ORDER BY 1")]
    return [name for name in names
            if datetime.strptime(name[-8:], "%Y%m%d") + timedelta(days=1) <= cutoff]


def bounded(dsn: str) -> psycopg.Connection:
    """A retention connection whose statements give up after RETENTION_STATEMENT_TIMEOUT_S (added to
    the DSN's own options, which name the run's schema)."""
    options = conninfo_to_dict(dsn).get("options", "")
    return psycopg.connect(dsn, autocommit=True,
                           options=f"{options} -c statement_timeout={RETENTION_STATEMENT_TIMEOUT_S}s".strip())


def forget(mode: str, space) -> dict:
    """The mode's retention, start to end; what it forgot."""
    if mode == "delete":
        with bounded(harness.scoped_dsn(space.schema, RETENTION_DSN)) as conn:
            return {"forgotten_ids": sum(inbox_retention.forget(conn, WINDOW, 10000))}
    with bounded(space.admin) as owner:
        if mode == "drop":
            return {"dropped_days": owner.execute("SELECT inbox_v7_drop_before('processed_messages', now() - %s)",
                                                  (WINDOW,)).fetchone()[0]}
        days = expired_days(owner)
        for name in days:
            owner.execute(sql.SQL("ALTER TABLE processed_messages DETACH PARTITION {} CONCURRENTLY").format(
                sql.Identifier(name)))
            owner.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(name)))
        return {"dropped_days": len(days)}


def credit_gaps(dsn: str) -> dict:
    with psycopg.connect(dsn) as conn:
        first, last, rows, longest = conn.execute(
            "SELECT min(applied_at), max(applied_at), count(*), max(gap) FROM (SELECT applied_at, "
            "applied_at - lag(applied_at) OVER (ORDER BY applied_at) AS gap FROM ledger) gaps").fetchone()
    seconds = (last - first).total_seconds()
    return {"msgs_per_s": round((rows - 1) / seconds, 1), "first_to_last_s": round(seconds, 2),
            "longest_stall_ms": round(longest.total_seconds() * 1000, 1), "last_credit": last}


def wal_position(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint").fetchone()[0]


def run_once(mode: str, run: int, config: dict) -> dict:
    started = time.monotonic()
    events = harness.make_events(config["events"], prefix=f"r{run}", seed=config["seed"] + run, id_type="uuid-v7")
    with harness.run_space("rl", f"{mode}-r{run}", config["partitions"]) as space:
        with psycopg.connect(space.admin, autocommit=True) as owner:
            owner.execute(inbox_v7.SQL_FILE.read_text())  # uuidv7_floor and the day partitions' functions
            if mode in PARTITIONED:
                owner.execute(PARTITIONED_INBOX)
                inbox_v7.ensure_days(owner, "processed_messages", BACKLOG_DAYS[1] + 1, 1)
            else:
                owner.execute(inbox_retention.RETENTION_SQL.read_text().split(";")[0])  # its index, run once
            fill_backlog(owner, config["backlog"])
        harness.produce_events(space.topic, events)
        wal_before = wal_position(space.admin)
        [worker] = harness.start_workers("p", space, f"retention-load-{mode}-r{run}",
                                         harness.worker_args("p", {"batch": config["batch"]}))
        outcome, errors = {}, []

        def retention():
            begun = time.monotonic()
            try:
                outcome.update(forget(mode, space))
            except Exception as e:  # raised below, after the worker stops
                errors.append(e)
            outcome["retention_s"] = round(time.monotonic() - begun, 2)
            outcome["retention_ended"] = time.time()

        thread = threading.Thread(target=retention, name=f"retention-{mode}")
        try:
            harness.wait_until(worker.first_effect.is_set, 120, "p's first credit", interval_s=0.02)
            if mode in ("delete", "drop", "detach"):
                thread.start()
            harness.wait_until(lambda: worker.proc.poll() is not None or harness.ledger_count(space.admin) >= len(
                events), max(120.0, len(events) / 100), f"p to apply {len(events)} credits", interval_s=0.5)
            if worker.proc.poll() is not None:
                raise RuntimeError(f"p exited with {worker.proc.poll()} before it was done:\n{worker.log_tail()}")
        finally:
            if thread.ident is not None:
                thread.join()  # retention runs to its end, whatever happened to p: the schema is dropped after
            worker.stop()
        if errors:
            raise errors[0]
        wal = wal_position(space.admin) - wal_before
        timing = credit_gaps(space.admin)
        last_credit = timing.pop("last_credit").timestamp()
        with psycopg.connect(space.admin) as owner:
            left = owner.execute("SELECT count(*) FROM processed_messages WHERE processed_at < now() - %s",
                                 (WINDOW,)).fetchone()[0]
        verdict = harness.verdict_of(events, space.admin)
    return {"mode": mode, "run": run, "events": len(events), "backlog": config["backlog"], **timing,
            "wal_mb": round(wal / 2**20, 1), "wal_bytes_per_msg": round(wal / len(events)),
            "retention_s": outcome.get("retention_s"), "forgotten_ids": outcome.get("forgotten_ids"),
            "dropped_days": outcome.get("dropped_days"), "expired_left": left,
            "retention_within_window": outcome["retention_ended"] <= last_credit if outcome else None,
            "duplicates": verdict["duplicates"], "lost": verdict["lost"], "balances_exact": verdict["balances_exact"],
            "wall_s": round(time.monotonic() - started, 1)}


def summarise(runs: list[dict]) -> dict:
    def beside(mine):
        """The ratio to the same-numbered run of the same layout without retention, and how long retention took."""
        base = "partitioned" if mine[0]["mode"] in PARTITIONED else "alone"
        by_run = {r["run"]: r["msgs_per_s"] for r in runs if r["mode"] == base}
        paired = [r["msgs_per_s"] / by_run[r["run"]] for r in mine if r["run"] in by_run]
        took = [r["retention_s"] for r in mine if r["retention_s"] is not None]
        return {"baseline": base, "vs_baseline": results.stats(paired) if paired else None,
                "retention_s": results.stats(took) if took else None,
                "retention_within_window": sum(bool(r["retention_within_window"]) for r in mine) if took else None}
    return results.summarise_runs(runs, MODES, key=lambda r: r["mode"], totals=("duplicates", "lost", "expired_left"),
                                  spreads=("msgs_per_s", "longest_stall_ms", "wal_mb"), extra=beside)


def table(summary: dict) -> str:
    def median(stat):
        return "-" if stat is None else f"{stat['median']:,.3g}" if stat["median"] < 10 else f"{stat['median']:,.1f}"
    return results.text_table(
        ["mode", "runs", "msgs/s", "against", "ratio", "longest stall ms", "WAL MB", "retention s",
         "ended before p", "dup", "lost", "expired left"],
        [[mode, s["runs"], median(s["msgs_per_s"]), s["baseline"], median(s["vs_baseline"]),
          median(s["longest_stall_ms"]), median(s["wal_mb"]), median(s["retention_s"]),
          "-" if s["retention_within_window"] is None else f"{s['retention_within_window']}/{s['runs']}",
          s["totals"]["duplicates"], s["totals"]["lost"], s["totals"]["expired_left"]] for mode, s in summary.items()],
        note="medians over runs; ratio: msgs/s against the baseline's run of the same number")


verdict_line = cli.verdict("{mode} run {run}: {msgs_per_s:,} msgs/s, longest stall {longest_stall_ms} ms, WAL {wal_mb} "
                           "MB, retention {retention_s} s; {duplicates} duplicates, {lost} lost, {expired_left} "
                           "expired IDs left")


def parse_args(argv=None):
    parser = cli.measurement("#31: p's throughput while retention forgets a backlog beside it.",
                             None, events=200000)
    parser.add_argument("--mode", type=cli.names_of((*MODES, "all"), "mode"), default=["all"],
                        help="which modes (default all): " + ", ".join(MODES))
    parser.add_argument("--backlog", type=int, default=2_000_000, help="expired IDs the inbox holds at the start")
    parser.add_argument("--batch", type=int, default=500, help="p's messages per batch")
    args = parser.parse_args(argv)
    results.reader_paths(args, "retention-load.json")  # a reader's own file, unless --out names one
    cli.at_least(parser, args, 1, "runs", "partitions", "backlog", "batch")
    cli.at_least(parser, args, 2, "events")  # a rate needs two credits
    return args


def main(args) -> int:
    modes = MODES if "all" in args.mode else args.mode
    config = results.config_of(args, "out", "force", "mode", window_days=WINDOW.days, backlog_days=list(BACKLOG_DAYS))
    results.drive("measure_retention_load", args.out, config, [{"mode": m} for m in modes], run_once, summarise,
                  table, verdict_line, args.force, rotate=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(parse_args()))
