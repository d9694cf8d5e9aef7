"""M3: what each variant's commit discipline costs in messages per second, with no kills.

Claim: the inbox's extra insert is a small price next to the per-message
synchronous offset commit that b and c both pay; auto-commit (a1, a2) is the
fastest, and M1 shows what that speed costs.

Workload: `--events` credits published up front; one worker per variant reads
them all with no handler sleep. Measure: msgs/s from the first to the last side
effect, taken from the ledger's clock_timestamp() stamps, so start-up and group
join are not counted; and the gap between successive credits, p50 and p99.
The variants are interleaved run by run, in a rotating order, within one
invocation, so their ratios (c/b is the inbox's cost) are measured side by side
on this shared, noisy machine. No fault; the checker confirms every run applied
each credit once.

With --consumers, the workers start first and the credits are published once the group
has settled (every worker holds partitions, together all of them, none twice), so no
late joiner's rebalance lands inside the timing; the consumer count 1 runs the same way.

How cost grows with the inbox (--inbox-rows, --id-type): each run borrows a kept
inbox that already remembers that many IDs (harness.kept_inbox; filled once, then
reused), and its events carry IDs of the same type: random UUIDs as text, or
UUIDv7s as text, which sort in the order they were made. Sizes are blocks run one
after another (a fill takes minutes); within a block the variants and ID types are
interleaved, so v7 against text is side by side, and a size against 0 is not.
Each run also records the WAL it wrote per message and how many inbox-index
blocks were read from outside shared_buffers per message.

A change's cost (--against REV): each variant also runs from REV's code (its worker from a git
worktree of REV, lab/against.py), named VARIANT~TAG, interleaved with today's run by run; the
summary's "against" pairs them by run: today's over REV's msgs/s, CPU per message by kind of
process, WAL per credit (docs/throughput.md, "Today's code against another commit's").

Assumptions: the stack is up and nothing else measures on it (a lock enforces it).

    python measure_throughput.py --variants a1,a2,b,c --runs 5 --events 100000
    python measure_throughput.py --variants c,d,p --inbox-rows 0,10000000,50000000 \
        --id-type text,uuid-v7 --events-of c=5000 --out results/throughput-inbox.json
    python measure_throughput.py --against 1b663da --variants p,p@2 --runs 5
"""
import contextlib
import sys
import time

import psycopg

from lab import against, cli, cpu, harness, registry, results, stack

# Every consumer and ceiling the registry declares; p@N, db@N, ...: N connections at once, for
# those that take --connections.
SELF_TIMED = registry.names(kind="self-timed")  # no ledger to time: the worker times itself and reports
VARIANTS = (*registry.names(kind="consumer"), *SELF_TIMED,
            *(f"{v}@{n}" for v in registry.names(reads="connections") for n in (1, 2, 3)))
BATCHED = registry.names(reads="batch")  # --batch applies to these


def base_of(name: str) -> str:
    """The variant a run name stands for: p@2 and p:3 are p."""
    return name.partition(":")[0].partition("@")[0]
CONSUMER_ROLE = "inbox_consumer"  # its backends are the ones serving the worker (lab/roles.sql)
# top/bottom pairs reported; a pair is skipped when either side was not run.
RATIOS = (("c", "b"), ("b", "a1"), ("c", "a1"), ("a2", "a1"), ("d", "c"), ("d", "raw"), ("c", "raw"),
          ("o", "c"),
          *((p, bottom) for p in ("p", "p@1", "p@2", "p@3") for bottom in ("d", "db", "raw")),
          *((f"p@{n}", f"db@{n}") for n in (1, 2, 3)), ("db@2", "db@1"), ("p@2", "p@1"),
          ("d", "db-d"), ("db", "db-d"),
          *((f"k@{n}", "c") for n in (1, 4, 16, 64)),
          # M9: a framework's cost. Quix writes a checkpoint's rows at once (every 5 s), so the
          # ledger clock sees whole checkpoints: give it many (--events-of qx-eos-keyed=...).
          ("fs-inbox", "c"), ("qx-eos-keyed", "c"), ("fs-inbox", "fs-ack"))


def server_settings() -> dict:
    """The settings an inbox bigger than memory meets: recorded with the growth runs."""
    names = ("shared_buffers", "max_wal_size", "checkpoint_timeout", "full_page_writes", "synchronous_commit")
    with psycopg.connect(harness.ADMIN_DSN) as conn:
        return {n: conn.execute(f"SHOW {n}").fetchone()[0] for n in names}


def timing(dsn: str) -> dict:
    with psycopg.connect(dsn) as conn:
        first, last, rows = conn.execute(
            "SELECT min(applied_at), max(applied_at), count(*) FROM ledger").fetchone()
        p50, p99 = conn.execute(
            "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY gap), "
            "percentile_cont(0.99) WITHIN GROUP (ORDER BY gap) "
            "FROM (SELECT extract(epoch FROM applied_at - lag(applied_at) OVER (ORDER BY applied_at)) * 1000 AS gap "
            "FROM ledger) gaps WHERE gap IS NOT NULL").fetchone()
    seconds = (last - first).total_seconds()
    return {"msgs_per_s": round((rows - 1) / seconds, 1) if seconds > 0 else None, "first_to_last_s": round(seconds, 2),
            "gap_p50_ms": round(p50, 3), "gap_p99_ms": round(p99, 3)}


def server_counters(dsn: str) -> tuple[int, int]:
    """(WAL bytes written so far, inbox-index blocks read from outside shared_buffers so far)."""
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint, coalesce(("
            "SELECT idx_blks_read FROM pg_statio_all_indexes WHERE indexrelid = 'processed_messages_pkey'::regclass"
            "), 0)").fetchone()


def cpu_snapshot(workers) -> cpu.Snapshot:
    postmaster, broker = stack.postgres_pid(), stack.kafka_pid()
    if postmaster is None or broker is None:  # else their CPU would read as 0, not as unknown
        raise RuntimeError("CPU per message needs the PostgreSQL and Kafka this checkout's stack.py started "
                           f"(postmaster pid {postmaster}, broker pid {broker}); run it where `make up` ran")
    return cpu.Snapshot.take([w.proc.pid for w in workers], postmaster,
                             cpu.backends_of(harness.ADMIN_DSN, CONSUMER_ROLE), broker)


def label(variant: str, batch: int | None) -> str:
    """How a run is named in the results: d in a batch sweep is d@N."""
    return f"{variant}@{batch}" if batch is not None else variant


def worker_call(name: str, config: dict) -> dict:
    """What a run's name asks of its workers, as today's registry reads it: the variant, how
    many workers, the batch, lanes and connections (a sweep's d@N, k@N, p@N sets the first of
    them the variant takes), its events, and the worker flags (a run of the old code,
    NAME~TAG, gets the same ones)."""
    variant, _, consumers = against.split(name)[0].partition(":")
    variant, _, swept = variant.partition("@")
    # NAME@N sweeps the first of connections, lanes and batch that the variant takes (p@2, k@16, d@50)
    reads = registry.get(variant).reads
    swept_flag = next((flag for flag in ("connections", "lanes", "batch") if flag in reads), None) if swept else None
    call = {"variant": variant, "consumers": int(consumers or 1),
            "batch": int(swept) if swept_flag == "batch" else config.get("batch", 500),
            "lanes": int(swept) if swept_flag == "lanes" else config.get("lanes", 16),
            "connections": int(swept) if swept_flag == "connections" else config.get("connections", 1),
            "events": config.get("events_of", {}).get(variant, config["events"])}
    args = harness.worker_args(variant, {"batch": call["batch"], "lanes": call["lanes"],
                                         "connections": call["connections"], "work_ms": config.get("work_ms", 0),
                                         "window": config.get("window")})
    if variant in SELF_TIMED:
        args += ("--expect", call["events"])
    return {**call, "args": args}


def run_once(variant: str, run: int, config: dict, id_type: str = "seq", inbox_rows: int | None = None,
             accounts: int | None = None) -> dict:
    """One worker reads `config["events"]` credits; `variant` may be a sweep's d@N (N a batch),
    k@N (N lanes) or p@N (N connections), and end in :N, N workers in one group (--consumers),
    and then in ~TAG: a run of the old code (--against), from its worktree, on its schema.sql.
    `inbox_rows` (not None): the run's inbox already remembers that many `id_type` IDs.
    `accounts` (not None): the credits spread over that many accounts, not the lab's 100."""
    name = variant
    call = worker_call(name, config)
    variant, consumers, events_count, args = call["variant"], call["consumers"], call["events"], call["args"]
    batch, lanes, connections = call["batch"], call["lanes"], call["connections"]
    reads = registry.get(variant).reads
    root = against.run_root(name, config)  # this checkout, or the old code's worktree
    if inbox_rows:  # before the clock starts: the first fill of a size takes minutes
        harness.fill_inbox(id_type, inbox_rows)
    started = time.monotonic()
    # Generous: 20 msgs/s would be a tenth of the slowest variant seen here.
    deadline = max(120.0, events_count / 20)
    events = harness.make_events(events_count, prefix=f"r{run}", seed=run, id_type=id_type,
                                 accounts=accounts or harness.ACCOUNTS)
    file_name = (name.replace("@", "-").replace(":", "-x").replace(against.SEP, "-v")
                 + (f"-a{accounts}" if accounts else ""))
    with contextlib.ExitStack() as stack:
        space = stack.enter_context(harness.run_space("m3", f"{file_name}-r{run}", config["partitions"],
                                                      accounts=accounts or harness.ACCOUNTS, root=root))
        held = stack.enter_context(harness.kept_inbox(space, id_type)) if inbox_rows else 0
        settle_first = bool(config.get("consumers"))
        # the ceilings that build their credits in memory (they need --expect) read nothing from Kafka
        if "expect" not in registry.get(variant).needs and not settle_first:
            harness.produce_events(space.topic, events)
        counters = server_counters(space.admin)
        workers = harness.start_workers(variant, space, f"throughput-{file_name}-r{run}", args, count=consumers,
                                        root=root)
        worker_cwd = against.cwd_of(workers[0].proc.pid)  # where it runs, seen by /proc: the evidence
        try:
            if settle_first:  # the group settled first: otherwise each late joiner's rebalance lands inside the timing
                all_partitions = set(range(config["partitions"]))
                harness.wait_until(lambda: all(w.assignment for w in workers) and sum(
                    len(w.assignment) for w in workers) == len(all_partitions) and set().union(
                    *(w.assignment for w in workers)) == all_partitions, 120,
                    f"{consumers} {variant} workers to share {len(all_partitions)} partitions", interval_s=0.2)
                harness.produce_events(space.topic, events)
            # CPU from the first credit to the last. A self-timed worker's window is its own, which
            # /proc cannot see from here (and db's worker has exited by the end): it reads its own.
            before = applied_before = None
            if variant not in SELF_TIMED:
                harness.wait_until(lambda: any(w.first_effect.is_set() for w in workers), deadline,
                                   f"{variant}'s first credit", interval_s=0.05)
                before, applied_before = cpu_snapshot(workers), harness.ledger_count(space.admin)
            if variant in SELF_TIMED:
                report = harness.wait_until(lambda: workers[0].report, deadline,
                                            f"{variant} to report on {events_count} messages", interval_s=0.5)
            else:
                harness.wait_until(lambda: harness.ledger_count(space.admin) >= events_count, deadline,
                                   f"{variant} to apply {events_count} credits", interval_s=1.0)
            after = cpu_snapshot(workers) if before else None
            peak_rss = [cpu.peak_rss_mib(w.proc.pid) for w in workers] if before else [None]
        finally:
            for worker in workers:
                worker.stop()
        (wal_after, reads_after), (wal_before, reads_before) = server_counters(space.admin), counters
        wal, index_reads = wal_after - wal_before, reads_after - reads_before
        record = {"variant": name, "run": run, "events": events_count, "consumers": consumers,
                  "wal_bytes_per_msg": round(wal / events_count), "inbox_index_reads_per_msg":
                  round(index_reads / events_count, 3),
                  # none when the first credit's batch was the whole topic: no window left to divide
                  "cpu_us_per_msg": cpu.per_message(before, after, events_count - applied_before)
                  if before and events_count > applied_before else None,
                  "cpu_window_msgs": events_count - applied_before if before else None,
                  "consumer_peak_rss_mib": max(peak_rss) if before else None}
        if id_type != "seq":
            record["id_type"] = id_type
        if inbox_rows is not None:
            record.update({"inbox_rows": inbox_rows, "inbox_rows_held": held})
        if accounts is not None:
            record["accounts"] = accounts
        if variant in BATCHED:
            record["batch"] = batch
        if "lanes" in reads:
            record["lanes"] = lanes
        if "connections" in reads:
            record["connections"] = connections
        if "against" in config:  # which code ran it: today's, or the old commit's worker from its worktree
            record.update(against.provenance(name, config, worker_cwd,
                                             {f: h for w in workers for f, h in w.loaded_there.items()}))
        if variant in SELF_TIMED:
            record.update({k: report.get(k) for k in ("msgs_per_s", "first_to_last_s", "gap_p50_ms", "gap_p99_ms",
                                                      "cpu_us_per_msg", "cpu_window_msgs", "consumer_peak_rss_mib")})
            record.update({"duplicates": None, "lost": None, "balances_exact": None})
        else:
            verdict = harness.verdict_of(events, space.admin)
            record.update({**timing(space.admin), "duplicates": verdict["duplicates"], "lost": verdict["lost"],
                           "balances_exact": verdict["balances_exact"],
                           "order_violations": harness.order_of(events, space.admin)})
        record["wall_s"] = round(time.monotonic() - started, 1)
    return record


def paired_ratio(tops: list[dict], bottoms: list[dict]) -> dict | None:
    """Median, min and max of top/bottom msgs/s over the runs both have, paired by run number."""
    by_run = {b["run"]: b["msgs_per_s"] for b in bottoms}
    paired = [t["msgs_per_s"] / by_run[t["run"]] for t in tops if t["run"] in by_run]
    return {key: round(value, 3) for key, value in results.stats(paired).items()} if paired else None


def summarise_growth(runs: list[dict]) -> dict:
    """Per variant, ID type and inbox size: msgs/s, WAL and index reads per message; each
    size against the empty inbox, and v7 against text at each size (the side-by-side one)."""
    cases = {}
    for r in runs:
        cases.setdefault((r["variant"], r["id_type"], r["inbox_rows"]), []).append(r)
    growth = {}
    for (variant, id_type, rows), mine in cases.items():
        entry = {"runs": len(mine), "inbox_rows_held": results.stats(r["inbox_rows_held"] for r in mine),
                 **{field: results.stats(r[field] for r in mine)
                    for field in ("msgs_per_s", "wal_bytes_per_msg", "inbox_index_reads_per_msg")}}
        if rows and (variant, id_type, 0) in cases:  # blocks minutes apart: not side by side
            entry["vs_empty"] = paired_ratio(mine, cases[(variant, id_type, 0)])
        if id_type == "uuid-v7" and (variant, "text", rows) in cases:
            entry["vs_text"] = paired_ratio(mine, cases[(variant, "text", rows)])
        growth.setdefault(variant, {}).setdefault(id_type, {})[str(rows)] = entry
    return {"growth": growth}


ACCOUNTS_SUFFIX = " accounts"


def case_name(r: dict) -> str:
    """A run's row in the summary: its variant, its ID type if not the lab's own (d/uuid-v7),
    and its accounts in an --accounts sweep (p@2, 10,000 accounts)."""
    name = f"{r['variant']}/{r['id_type']}" if r.get("id_type") else r["variant"]
    return f"{name}, {r['accounts']:,}{ACCOUNTS_SUFFIX}" if r.get("accounts") else name


def sweep_ratios(names: list[str]) -> list[tuple[str, str]]:
    """The ratios a sweep adds: each consumer count against one consumer of the same variant
    (d:3/d:1), and each account count against the sweep's smallest (p, 10,000 accounts / p,
    100 accounts), both at the same everything else."""
    def split(name):
        base, _, accounts = name.partition(", ")
        return base, accounts

    fewest = min((split(n)[1] for n in names if split(n)[1]), default="",
                 key=lambda a: int(a.removesuffix(ACCOUNTS_SUFFIX).replace(",", "")))
    pairs = []
    for name in names:
        base, accounts = split(name)
        tail = f", {accounts}" if accounts else ""
        today, tag = against.split(base)  # an old code's p:3~TAG goes with its own p:1~TAG
        code = f"{against.SEP}{tag}" if tag else ""
        if ":" in today and not today.endswith(":1"):
            pairs.append((name, today.partition(":")[0] + ":1" + code + tail))
        if accounts and accounts != fewest:
            pairs.append((name, f"{base}, {fewest}"))
    return pairs


def cpu_summary(mine: list[dict]) -> dict:
    """Median (min-max) µs of CPU per message for each kind of process, and peak RSS; {} for
    runs measured before the runs recorded them."""
    if not mine or any(not r.get("cpu_us_per_msg") for r in mine):
        return {}
    return {"cpu_us_per_msg": {kind: results.stats(r["cpu_us_per_msg"][kind] for r in mine)
                               for kind in mine[0]["cpu_us_per_msg"]},
            "consumer_peak_rss_mib": results.stats(r["consumer_peak_rss_mib"] for r in mine)}


def summarise(runs: list[dict]) -> dict:
    if any("inbox_rows" in r for r in runs):
        return summarise_growth(runs)
    names = list(dict.fromkeys(case_name(r) for r in runs))  # in the order they were first run
    summary = {name: {"runs": sum(case_name(r) == name for r in runs),
                      "msgs_per_s": results.stats(r["msgs_per_s"] for r in runs if case_name(r) == name),
                      **cpu_summary([r for r in runs if case_name(r) == name])}
               for name in names}
    ratios = {}
    tags = sorted({tag for r in runs if (tag := against.split(r["variant"])[1])})
    old_ratios = [(f"{top}{against.SEP}{tag}", f"{bottom}{against.SEP}{tag}") for tag in tags for top, bottom in RATIOS]
    for top, bottom in (*RATIOS, *old_ratios, *sweep_ratios(names)):
        # Paired within a run: both measured minutes apart under the same machine load.
        paired = [a["msgs_per_s"] / b["msgs_per_s"] for a in runs for b in runs
                  if case_name(a) == top and case_name(b) == bottom and a["run"] == b["run"]]
        if paired:
            ratios[f"{top}/{bottom}"] = {key: round(value, 3) for key, value in results.stats(paired).items()}
    paired_codes = against_ratios(runs)
    return {"variants": summary, "ratios": ratios, **({"against": paired_codes} if paired_codes else {})}


def new_over_old(new, old) -> float | None:
    return round(new / old, 3) if new and old else None  # none where either is missing or 0


def against_ratios(runs: list[dict]) -> dict:
    """--against: for each case that has runs of both codes (p@2 and p@2~1b663da), today's over
    the old code's, paired by run number (both measured minutes apart in one invocation): msgs/s,
    CPU µs per message for each kind of process (and the total), and WAL bytes per credit; each
    run's ratios, and their median, min and max."""
    today = {(case_name(r), r["run"]): r for r in runs if against.split(r["variant"])[1] is None}
    cases = {}
    for old in runs:
        base, tag = against.split(old["variant"])
        new = today.get((case_name({**old, "variant": base}), old["run"])) if tag else None
        if new is None:
            continue
        new_cpu, old_cpu = new.get("cpu_us_per_msg") or {}, old.get("cpu_us_per_msg") or {}
        entry = cases.setdefault(case_name(new), {"old": case_name(old), "per_run": []})
        entry["per_run"].append({"run": old["run"],
                                 "msgs_per_s": new_over_old(new.get("msgs_per_s"), old.get("msgs_per_s")),
                                 "cpu_us_per_msg": {kind: new_over_old(new_cpu[kind], old_cpu.get(kind))
                                                    for kind in new_cpu},
                                 "wal_bytes_per_msg": new_over_old(new.get("wal_bytes_per_msg"),
                                                                   old.get("wal_bytes_per_msg"))})

    def spread_of(values):
        values = [v for v in values if v is not None]
        return results.stats(values) if values else None

    for entry in cases.values():
        mine = sorted(entry["per_run"], key=lambda r: r["run"])
        kinds = dict.fromkeys(kind for r in mine for kind in r["cpu_us_per_msg"])
        entry.update(per_run=mine, runs=len(mine), msgs_per_s=spread_of(r["msgs_per_s"] for r in mine),
                     cpu_us_per_msg={kind: spread_of(r["cpu_us_per_msg"].get(kind) for r in mine) for kind in kinds},
                     wal_bytes_per_msg=spread_of(r["wal_bytes_per_msg"] for r in mine))
    return cases


def spread(stat, digits):
    return f"{stat['median']:.{digits}f} ({stat['min']:.{digits}f}-{stat['max']:.{digits}f})"


def table(summary: dict) -> str:
    if "growth" in summary:
        return results.text_table(
            ["variant", "ids", "inbox rows", "runs", "msgs/s median (min-max)", "/ empty", "v7 / text",
             "WAL B/msg", "index reads/msg"],
            [[variant, id_type, f"{int(rows):,}", e["runs"], spread(e["msgs_per_s"], 1),
              spread(e["vs_empty"], 3) if e.get("vs_empty") else "-",
              spread(e["vs_text"], 3) if e.get("vs_text") else "-",
              f"{e['wal_bytes_per_msg']['median']:,.0f}", f"{e['inbox_index_reads_per_msg']['median']:.3f}"]
             for variant, types in summary["growth"].items() for id_type, sizes in types.items()
             for rows, e in sizes.items()])

    def cpu_cell(s):
        return f"{s['cpu_us_per_msg']['total']['median']:.1f}" if "cpu_us_per_msg" in s else "-"

    return results.text_table(["variant", "runs", "msgs/s median (min-max)", "CPU µs/msg, all processes"],
                              [[variant, s["runs"], spread(s["msgs_per_s"], 1), cpu_cell(s)]
                               for variant, s in summary["variants"].items()]) + "".join(
        f"\n{name} paired by run: median {spread(r, 3)}" for name, r in summary["ratios"].items()) + (
        against_table(summary["against"]) if summary.get("against") else "")


def against_table(cases: dict) -> str:
    """--against's table: today's code over the old code's, paired by run, and beneath it the
    CPU ratio of each kind of process (medians)."""
    def cell(stat):
        return spread(stat, 3) if stat else "-"

    olds = sorted({against.split(e["old"].partition(", ")[0].partition("/")[0])[1] for e in cases.values()})
    rows = [[name, e["runs"], cell(e["msgs_per_s"]), cell(e["cpu_us_per_msg"].get("total")),
             cell(e["wal_bytes_per_msg"])] for name, e in cases.items()]
    kinds = [f"  {name}: " + ", ".join(f"{kind} {stat['median']:.3f}" if stat else f"{kind} -"
                                       for kind, stat in e["cpu_us_per_msg"].items() if kind != "total")
             for name, e in cases.items() if e["cpu_us_per_msg"]]
    return (f"\n\nToday's code / the old code's (~{', ~'.join(olds)}), paired by run: median (min-max)\n"
            + results.text_table(["variant", "runs", "msgs/s new/old", "CPU µs/msg new/old", "WAL/credit new/old"],
                                 rows)
            + ("\nCPU µs/msg new/old by kind of process (medians):\n" + "\n".join(kinds) if kinds else ""))


def verdict_line(r: dict) -> str:
    cost = r.get("cpu_us_per_msg") or {}
    return (f"{r['variant']} run {r['run']}: {r['msgs_per_s']} msgs/s, gap p50 {r['gap_p50_ms']} ms, "
            f"p99 {r['gap_p99_ms']} ms, {r['duplicates']} duplicates, {r['lost']} lost"
            + (f", CPU {cost['total']} µs/msg ({', '.join(f'{k} {v}' for k, v in cost.items() if k != 'total')})"
               if cost else ""))


def parse_args(argv=None):
    parser = cli.measurement("M3: msgs/s per variant, no kills, measured side by side.", None, events=100000,
                             seed=False)
    parser.add_argument("--variants", type=cli.names_of(VARIANTS), default=["raw", "a1", "a2", "b", "c", "d"])
    parser.add_argument("--batch", type=int, help="d, p, raw, db, db-d: messages per batch (default 500)")
    parser.add_argument("--sweep-batch", type=cli.sizes, metavar="N,N,...",
                        help="run only d, once per batch size (default out: results/throughput-batch.json)")
    parser.add_argument("--sweep-lanes", type=cli.sizes, metavar="N,N,...",
                        help="run c and k, k once per lane count (default out: results/throughput-lanes.json)")
    parser.add_argument("--work-ms", type=float, default=0, help="handler sleep per message")
    parser.add_argument("--consumers", type=cli.sizes, metavar="N,N,...",
                        help="run each variant once per count, that many workers in one group (VARIANT:N)")
    parser.add_argument("--inbox-rows", type=cli.counts, metavar="N,N,...",
                        help="run each variant on inboxes already holding N IDs, one size after another")
    parser.add_argument("--id-type", type=cli.names_of(harness.ID_TYPES), default=["seq"],
                        help=f"the events' IDs, one or more of {', '.join(harness.ID_TYPES)} "
                             "(with --inbox-rows: text, uuid-v7)")
    parser.add_argument("--accounts", type=cli.sizes, metavar="N,N,...",
                        help="run each variant once per count of accounts the credits spread over (default: "
                             f"the lab's {harness.ACCOUNTS}, where every batch of 500 shares most of its accounts)")
    parser.add_argument("--events-of", type=cli.per_name, default={}, metavar="VARIANT=N,...",
                        help="another --events for some variants (c is ~30x slower than d)")
    parser.add_argument("--against", metavar="REV",
                        help="run each variant twice a run, today's code and REV's (its worker from a git worktree, "
                             "interleaved run by run), and report today's/REV's paired by run")
    args = parser.parse_args(argv)
    chosen = ["d"] if args.sweep_batch else list(dict.fromkeys(map(base_of, args.variants)))  # in the order given
    registry.only_some_read(parser, args, chosen, VARIANTS, batch=500)
    if args.against is not None:
        if args.inbox_rows is not None:
            parser.error("--against takes no --inbox-rows (a kept inbox is made with today's schema.sql)")
        try:
            args.against_commit = against.resolve(args.against)
        except ValueError as e:
            parser.error(str(e))
    if args.inbox_rows is not None and (set(args.id_type) - set(harness.FILL_IDS)
                                        or args.sweep_batch or args.sweep_lanes or args.consumers):
        parser.error("--inbox-rows takes --id-type text and/or uuid-v7, and no sweep or --consumers")
    unknown = set(args.events_of) - {v.partition("@")[0] for v in VARIANTS}
    if unknown:
        parser.error(f"--events-of names no variant: {', '.join(sorted(unknown))}")
    if args.consumers and set(args.variants) & set(SELF_TIMED):
        parser.error(f"--consumers times the ledger; {', '.join(SELF_TIMED)} have none")
    if args.accounts and (set(args.variants) & {v for v in VARIANTS if v.partition("@")[0] in SELF_TIMED}
                          or args.inbox_rows is not None):
        parser.error(f"--accounts takes no --inbox-rows, and none of {', '.join(SELF_TIMED)} (they build their "
                     f"credits for {harness.ACCOUNTS} accounts)")
    if args.runs < 1 or args.events < 2 or args.partitions < 1 or args.batch < 1 or args.work_ms < 0:
        parser.error("need --runs >= 1, --events >= 2, --partitions >= 1, --batch >= 1 and --work-ms >= 0")
    args.committed = results.reader_paths(args, "throughput-batch.json" if args.sweep_batch else
                                          "throughput-lanes.json" if args.sweep_lanes else "throughput.json")
    return args


def post_lines(groups) -> list[str]:
    post = results.read("post-figures.json")["throughput"]["variants"]
    return [f"  {v}: {p['msgs_per_s']:,} msgs/s (median of 5 runs of 100,000)" for v, p in post.items() if v in groups]



def main(args) -> int:
    sweep = bool(args.sweep_batch or args.sweep_lanes)
    if args.sweep_batch:
        names = [label("d", n) for n in args.sweep_batch]
    elif args.sweep_lanes:
        names = ["c", *(label("k", n) for n in args.sweep_lanes)]
    else:
        names = list(args.variants)
    if args.consumers:
        names = [f"{name}:{n}" for name in names for n in args.consumers]
    config = {"variants": names, "runs": args.runs, "events": args.events, "partitions": args.partitions,
              "work_ms": args.work_ms, "kills": 0, "order": "interleaved by run, rotating"}
    plan = [{"variant": name} for name in names]
    outer = ()
    if args.events_of:
        config["events_of"] = args.events_of
    if args.id_type != ["seq"]:
        config["id_types"] = args.id_type
        plan = [{**fields, "id_type": id_type} for fields in plan for id_type in args.id_type]
    if args.inbox_rows is not None:
        config.update(inbox_rows=args.inbox_rows, order="by inbox size; within one, interleaved by run, rotating",
                      server=server_settings())
        plan = [{**fields, "inbox_rows": rows} for rows in args.inbox_rows for fields in plan]
        outer = ("inbox_rows",)
    if not sweep and set(BATCHED) & {base_of(v) for v in args.variants}:
        config["batch"] = args.batch
    if args.consumers:
        config["consumers"] = args.consumers
    if args.accounts:
        config["accounts"] = args.accounts
        plan = [{**fields, "accounts": n} for fields in plan for n in args.accounts]
    if args.against is not None:  # each case twice, today's and the old code's, side by side in every run
        try:
            old = against.old_code(args.against)
        except (ValueError, RuntimeError) as e:
            raise SystemExit(f"measure_throughput: {e}") from None
        config["against"] = old.config()
        config["order"] += "; each variant's runs of today's code and of the old one's side by side"
        for name in names:
            call = worker_call(name, config)
            refusal = old.refusal(call["variant"], call["args"])
            if refusal:
                raise SystemExit(f"measure_throughput: {refusal}")
        plan = [entry for fields in plan
                for entry in (fields, {**fields, "variant": f"{fields['variant']}{against.SEP}{old.tag}"})]
    results.drive("measure_throughput", args.out, config, plan, run_once,
                  summarise, table, verdict_line, args.force, rotate=True, outer=outer,
                  committed=args.committed, post_lines=post_lines)
    return 0


if __name__ == "__main__":
    sys.exit(main(parse_args()))
