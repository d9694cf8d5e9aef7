"""Every generated section of README.md and docs/, by the name of its markers: mostly a Table
(lab/tables.py) declared at the end; the few that join several files keep a short function.
"""
import statistics

from lab import faults, registry, results, tables
from lab.tables import VARIANT_NAMES, Row, Table, load, markdown_table, need, provenance, say, spread, summary, total

POINT_NAMES = {"kill": "SIGKILL on M1's schedule", "pg-committed": "planted: after Postgres, before Kafka's commit",
               "kafka-committed": "planted: after Kafka's commit, before the next poll"}
SOURCE_NAMES = {("relay", "on"): "relay: killed, and crashed between the ack and the mark",
                ("retries", "off"): "one producer, link cut and broker restarted; idempotence off",
                ("retries", "on"): "the same, idempotence on",
                ("restart", "on"): "a journaling publisher, killed and restarted"}
POLICY_NAMES = {"keys": "keys honoured: retry with the same Idempotency-Key",
                "lookup": "status lookup: ask, then call only if nothing landed",
                "retry": "neither, retry after an expired lease", "skip": "neither, give up after an expired lease",
                "outbox": "inbox, then outbox: a keyed relay makes the call"}
LAYOUT_NAMES = {"text": "text (UUID string)", "uuid-v4": "uuid, v4 (random)", "uuid-v7": "uuid, v7 (`uuidv7()`)",
                "v7-pk-range": "lean: v7 key only, expired by key range",
                "v7-partitioned": "lean: v7 key only, a partition a day"}
RETENTION_MODES = {"alone": "p alone, the backlog in processed_messages",
                   "delete": "p, retention.sql's batched DELETE beside it",
                   "partitioned": "p alone, processed_messages partitioned by the ID's day",
                   "drop": "p, the expired days dropped beside it (inbox_v7_drop_before)",
                   "detach": "p, each expired day detached concurrently, then dropped, beside it"}
# cluster.json: every fault and variant with acks=all (make measure-cluster); cluster-acks1.json: leader
# kills under acks=1, the same harness and parameters otherwise
CLUSTER_FILES = ("cluster.json", "cluster-acks1.json")
FAULT_TOTALS = ("faults", "duplicates", "lost", "skipped")  # a fault table's columns after Runs
REBALANCE_SETS = [(f"rebalance-{v}-{p}.json", p) for v in ("b", "c", "d", "k", "o", "p")
                  for p in ("classic", "consumer")] + [(f"rebalance-{v}-consumer-stall20.json", "consumer")
                                                       for v in ("b", "c")]


def sizing_section() -> str:
    z, post = need("storage.json")["summary"]["sizing"], need("post-figures.json")["storage"]["sizing"]
    rows = [[LAYOUT_NAMES[k], f"{p['bytes_per_row']:.1f}", f"{p['gb']:.1f} GB",
             f"{post['gb'][k]} GB" if k in post["gb"] else "–"] for k, p in z["layouts"].items()]
    return (markdown_table(["Layout", "Bytes/row, measured, cleanup index included", f"{z['rows']:,} rows",
                            "Post's arithmetic"], rows) + "\n\n" + say("sizing", z=z) + "\n")


def faults_section() -> str:
    """M6, with the share-lock rows under the producer's usual batching from a file of their own."""
    doc, batched = need("faults.json"), load("faults-share-batched.json")
    rows = [[s["fault"] + note, VARIANT_NAMES[s["variant"]], s["runs"], *(s["totals"][f] for f in FAULT_TOTALS),
             spread(s.get("resume_s"), 2), f"{s['balances_exact_runs']} of {s['runs']}"]
            for d, note in ((doc, ""), (batched, ", producer batching")) if d for s in d["summary"].values()]
    c = doc["config"]
    return (markdown_table(["Fault", "Variant", "Runs", "Faults", "Duplicates", "Lost", "Skipped duplicates",
                            "Resume after the fault (s)", "Exact balances"], rows, text_columns=2) + "\n\n"
            + " ".join([say("faults", c=c)] + [say("faults.share-lock", c=c)] * ("lock_ms" in c)
                       + ([say("faults.batched", c=batched["config"])] if batched else []))
            + f" From `results/faults.json`: {provenance(doc)}.\n")


def longest_still(timeline: dict) -> float:
    """The longest the ledger stood still between a run's first credit and its last, to within a bucket (s)."""
    busy = [i for i, rate in enumerate(timeline["credits_per_s"]) if rate > 0]
    return max((b - a - 1 for a, b in zip(busy, busy[1:], strict=False)), default=0) * timeline["bucket_s"]


def faults_more_section() -> str:
    """M10, with the pause under the idle timeout and offsets-expired (a broker of its own) from their files."""
    doc = need("faults-more.json", "python -m measurements.measure_faults_more --help")
    idle, offsets, forgotten = (load(f"faults-more-{n}.json") for n in ("idle-tx", "offsets", "offsets-forgotten"))
    sets = [(doc, ""), (idle, ", idle_in_transaction_session_timeout {c[idle_tx_timeout_ms]} ms"),
            (offsets, ", the inbox remembering all"), (forgotten, ", {c[forgotten]:.0%} of the inbox forgotten first")]
    rows = []
    for source, note in ((d, note.format(c=d["config"])) for d, note in sets if d):
        for s in source["summary"].values():
            mine = [r for r in source["runs"] if (r["fault"], r["variant"]) == (s["fault"], s["variant"])]
            met = faults.get(s["fault"]).met([f for r in mine for f in r["fault_log"]], mine)  # lab/faults/ says
            if stuck := sum(r.get("stuck", 0) for r in mine):  # no credit within the harness's deadline after a fault
                met += f"; **{stuck} left the consumers stuck**"
            rows.append([s["fault"] + note, VARIANT_NAMES[s["variant"]], s["runs"],
                         *(s["totals"][f] for f in FAULT_TOTALS), s["exits"], met,
                         spread(results.stats(longest_still(r["timeline"]) for r in mine), 1),
                         f"{s['balances_exact_runs']} of {s['runs']}"])
    text = (markdown_table(["Fault", "Variant", "Runs", "Faults", "Duplicates", "Lost", "Skipped duplicates", "Exits",
                            "What the faults met", "Ledger still at most (s)", "Exact balances"], rows, text_columns=2,
                           also_text=(-3,)) + "\n\n" + say("faults-more", c=doc["config"], prov=provenance(doc)))
    if idle:
        text += f" The idle-timeout rows from `results/faults-more-idle-tx.json`: {provenance(idle)}."
    for name, other in (("faults-more-offsets.json", offsets), ("faults-more-offsets-forgotten.json", forgotten)):
        if other:
            own = other["config"]["events"]
            text += " " + say("faults-more.offsets", file=name, prov=provenance(other),
                              minutes=other["config"].get("offsets_retention_minutes", 1),
                              own=f", {own:,} credits a run" if own != doc["config"]["events"] else "")
    return text + "\n"


def cluster_runs() -> list[tuple[dict, dict]]:
    """(run, its file's config) for every M8 run in every file that holds some."""
    return [(r, doc["config"]) for doc in filter(None, map(load, CLUSTER_FILES)) for r in doc["runs"]]


def cluster_fault_name(r: dict, config: dict) -> str:
    """An M8 run's fault as the tables name it: its title, the standby's mode, acks other than all."""
    fault = faults.get(r["fault"])
    return (fault.title.format(**config) + (f", {r['replication']} standby" if "pg-standby" in fault.needs else "")
            + ("" if r["acks"] == "all" else f", acks={r['acks']}"))


def stuck_note(n: int) -> str:
    """A lost count's note: the runs whose consumer got no credit within the harness's wait after the fault."""
    return f" ({n} run{'s' * (n > 1)} stuck)" if n else ""


def cluster_section() -> str:
    cluster, order = need("cluster.json", "make measure-cluster"), list(faults.registry())
    groups = {}
    for r, config in cluster_runs():
        groups.setdefault((faults.get(r["fault"]).title.format(**config), r["fault"], r["variant"], r["replication"],
                           r["acks"]), []).append(r)
    rows = [[name, VARIANT_NAMES[variant], replication if "pg-standby" in faults.get(fault).needs else "–", acks,
             len(mine), total(mine, "duplicates"),
             f"{total(mine, 'lost'):,}" + stuck_note(sum(r.get("stuck", 0) for r in mine)),
             total(mine, "acked_missing"),
             spread(results.stats(r["longest_stall_s"] for r in mine), 1), tables.exact(mine)]
            for (name, fault, variant, replication, acks), mine in sorted(
                groups.items(), key=lambda g: (order.index(g[0][1]), g[0][3], g[0][4] != "all", g[0][2]))]
    c, acks1 = cluster["config"], load("cluster-acks1.json")
    return (markdown_table(["Fault", "Variant", "Postgres standby", "acks", "Runs", "Duplicates", "Lost",
                            "Acknowledged records missing", "Longest stall, s", "Exact balances"], rows,
                           text_columns=4)
            + "\n\n" + say("cluster", c=c, prov=provenance(cluster))
            + (f"; and the acks=1 rows from `results/cluster-acks1.json`: {provenance(acks1)}" if acks1 else "")
            + ".\n")


def offsets_section() -> str:
    """o against c: under the failover that loses c's credits, under M1 and M2, and what it costs."""
    groups = {}  # c and o as M8 ran them: interleaved run by run with b and d, in one invocation
    for r, config in cluster_runs():
        if r["fault"] == "pg-failover-stalled" and r["variant"] in ("c", "o"):
            groups.setdefault((r["replication"], r["variant"], config["stall_s"]), []).append(r)
    rows = [[f"M8, b, c, d and o interleaved, one invocation: the standby's stream stalled {stall_s:g} s, the primary "
             f"killed, {replication} standby promoted", variant, len(mine), total(mine, "duplicates"),
             f"{total(mine, 'lost'):,}", tables.exact(mine)]
            for (replication, variant, stall_s), mine in groups.items()]
    for name, label in (("kill-o.json", "M1: {kills} SIGKILLs a run"),
                        ("rebalance-o-classic.json", "M2: a {slow_seconds:g} s stall every {slow_every}th event")):
        if doc := load(name):
            rows.append([label.format(**doc["config"]), "o", len(doc["runs"]), total(doc["runs"], "duplicates"),
                         total(doc["runs"], "lost"), tables.exact(doc["runs"])])
    if not rows:
        raise tables.Missing("_No results for o yet: run `make measure-cluster`, then `python measure_kill.py "
                             "--variant o` and `python measure_rebalance.py --variant o`._\n")
    text = (markdown_table(["Fault", "Variant", "Runs", "Duplicates", "Lost", "Exact balances"], rows, text_columns=2)
            + "\n\n" + say("offsets") + "\n")
    if cost := load("throughput-offsets.json"):
        rates, ratios = cost["summary"]["variants"], cost["summary"]["ratios"]
        text += f"\n{tables.cpu_table(cost)}\n" + say(
            "offsets.cost", c=cost["config"], prov=provenance(cost), c_rate=spread(rates["c"]["msgs_per_s"]),
            o_rate=spread(rates["o"]["msgs_per_s"]), ratio=spread(ratios.get("o/c"), 3)) + "\n"
    return text


def parallel_after(doc: dict) -> str:
    """The share per lane, then k under M1's kills and M2's zombie."""
    stats, ratios, text = doc["summary"]["variants"], doc["summary"]["ratios"], ""
    if per_lane := sorted((int(n.split("@")[1]), ratios[f"{n}/c"]["median"]) for n in stats
                          if n.startswith("k@") and f"{n}/c" in ratios):
        text += "\n" + say("parallel.per-lane", lanes=", ".join(f"k@{n} {x / n:.2f}" for n, x in per_lane)) + "\n"
    under = [[label.format(**doc["config"]), len(doc["runs"]),
              *(total(doc["runs"], f) if f else "–" for f in (*counts, "duplicates", "lost", "order_violations")),
              tables.exact(doc["runs"])]
             for name, label, counts in (
                 ("kill-k.json", "M1: {kills} SIGKILLs a run, {lanes} lanes, {events:,} credits", ("kills", "")),
                 ("rebalance-k-classic.json",
                  "M2: a {slow_seconds:g} s stall every {slow_every}th event, {lanes} lanes", ("stalls", "evictions")))
             if (doc := load(name))]
    if under:
        text += ("\n" + markdown_table(["k under", "Runs", "Kills or stalls", "Evictions", "Duplicates", "Lost",
                                        "Order violations", "Exact balances"], under)
                 + "\n\n" + say("parallel.under") + "\n")
    return text


def raised_and_lost(variant: str, runs: list[dict]) -> str:
    """How many handlers raised, and where the first lost credits sat; "–" for runs measured before
    either was kept, and for a variant that never says a handler raised (only FastStream's do)."""
    if not all("handler_raised" in r for r in runs) or "faststream" not in registry.get(variant).module:
        return "–"
    lost = [f"{e['event_id']}@{'+'.join(e['records'])}" for r in runs for e in r.get("evidence", {}).get("lost", [])]
    return f"{total(runs, 'handler_raised'):,}" + (f"; {', '.join(lost[:2])}" if lost else "")


def frameworks_section() -> str:
    """M9: the frameworks under M1's kills and M2's zombie, beside b and c measured the same way."""
    kill = need("kill-frameworks.json", "python measure_kill.py --variant frameworks --runs 5 --out "
                                        "results/kill-frameworks.json")
    zombie, m1_bc = load("rebalance-frameworks-classic.json"), load("kill.json")
    m1 = {**{v: (m1_bc["summary"][v], tables.runs_of(m1_bc, variant=v)) for v in ("b", "c")
             if m1_bc and v in m1_bc["summary"]},
          **{v: (s, tables.runs_of(kill, variant=v)) for v, s in kill["summary"].items()}}
    m2 = {**{v: doc["summary"][v] for v in ("b", "c") if (doc := load(f"rebalance-{v}-classic.json"))},
          **(zombie["summary"] if zombie else {})}
    rows = [[VARIANT_NAMES[v], s["runs"], total(runs, "kills"), spread(s["duplicates"]), spread(s["lost"]),
             f"{s['balances_exact_runs']} of {s['runs']}", raised_and_lost(v, runs),
             *([z["runs"], z["totals"]["evictions"], z["totals"]["duplicates"], z["totals"]["lost"]]
               if (z := m2.get(v)) else ["–"] * 4)] for v, (s, runs) in m1.items()]
    sources = ["`results/kill-frameworks.json`: " + provenance(kill)] + (
        ["`results/rebalance-frameworks-classic.json`: " + provenance(zombie)] if zombie else [])
    return (markdown_table(["Variant", "M1 runs", "Kills", "Duplicates per run", "Lost per run", "Exact balances",
                            "Handlers that raised; first lost at (partition/offset)", "M2 runs", "Evictions",
                            "Duplicates", "Lost"], rows)
            + "\n\n" + say("frameworks", c=kill["config"], sources="; ".join(sources)) + "\n")


CHECKS = ("copies", "kills", "zombie", "poison", "pg-restart", "broker-restart", "soak")  # conformance's, in order


def conformance_cell(r: dict | None) -> str:
    if r is None:
        return "–"
    if r.get("error"):  # what kept the check from a verdict, to its first colon (the file has the rest)
        return f"**error**: {r['error'].split(':')[0]}"
    if r["passed"]:
        return "passed"
    # every reason the check failed, not only the counts: 0 and 0 with the balances wrong is a failure too
    details, evidence = r.get("details") or {}, r.get("evidence") or {}
    reasons = {"balances wrong": details.get("balances_exact") is False,
               f"{len(evidence.get('poison_applied', ()))} poison applied": bool(evidence.get("poison_applied")),
               f"{details.get('unexpected', 0):,} unexpected": bool(details.get("unexpected")),
               "stopped consuming": details.get("running") is False and details.get("restarts") == 0}
    return "**failed**: " + ", ".join([f"{r['duplicates']:,} dup.", f"{r['lost']:,} lost",
                                       *(reason for reason, held in reasons.items() if held)])


def conformance_section() -> str:
    """#45: one row a consumer (a results/conformance-*.json), one column a check (measurements/conformance.py)."""
    names = sorted(p.name for p in tables.RESULTS.glob("conformance-*.json"))  # as a test may point it
    if not names:
        raise tables.Missing("_No `results/conformance-*.json` yet: run `python -m measurements.conformance "
                             "--command CMD --out results/conformance-NAME.json`._\n")
    rows, sources = [], []
    for name in names:
        doc = need(name)
        c, latest = doc["config"], {r["check"]: r for r in doc["runs"]}
        who = f"`{c['command']}`" if c.get("command") else VARIANT_NAMES.get(c["variant"], c["variant"])
        rows.append([who, *(conformance_cell(latest.get(check)) for check in CHECKS)])
        version = f", version `{c['command_version']}`" if c.get("command_version") else ""
        sources.append(f"`results/{name}`{version}: {provenance(doc)}")
    return (markdown_table(["Consumer", *CHECKS], rows, text_columns=1 + len(CHECKS)) + "\n\n"
            + say("conformance", sources="; ".join(sources)) + "\n")


def victims_rule(doc: dict) -> dict:
    """How M1 in a group drew its victims: among the members holding partitions since lab/kill_group.py
    has waited for one (its entries' waited_s), among all of them in files made before."""
    entries = [k for r in doc["runs"] for k in r["kill_log"]]
    if not any("waited_s" in k for k in entries):
        return {"victims": " among all the members"}
    known = [k for k in entries if k["held"] is not None]  # a1's, a2's and a command's say nothing of what they held
    waited = [k["waited_s"] for k in known if k["waited_s"] >= 0.05]  # at least one look found nobody holding any
    rule = (", then moved round the group to the next member holding partitions where the workers log them (not a1's, "
            "a2's or a command's), a kill that found none holding any waiting for the rebalance to hand them out")
    return {"victims": f"{rule} ({len(waited)} of those {len(known)} kills waited, at most "
                       f"{max(waited, default=0):.1f} s)"}


def reconnect_rows(doc: dict) -> list[Row]:
    """c, whose supervisor restarts it, beside c-reconnect, which reconnects in place: one row each, from its runs."""
    return [Row(f"{v}: {how}", None, mine, doc) for v, how in (("c", "stops; its supervisor starts it again"),
                                                               ("c-reconnect", "reconnects in place"))
            if (mine := tables.runs_of(doc, variant=v))]


def share_of_raw(e: Row) -> str:
    raw = e.doc["summary"]["variants"].get("raw", {}).get("msgs_per_s", {}).get("median")
    return f"{e.s['msgs_per_s']['median'] / raw:.1%}" if raw else "–"


def times_c(e: Row) -> str:
    """A lane count's rate over c's, paired by run."""
    ratio = e.doc["summary"]["ratios"].get(f"{e.key}/c")
    return "1" if e.key == "c" else spread(ratio, 2)


def saturation_extra(doc: dict) -> dict:
    """The rows where the publisher, not the consumer, set the pace: offered short of asked by a tenth."""
    short = [e.key.replace("@", " at ") for e in summary(match=at_load)(doc)
             if e.s["offered_per_s"]["median"] < 0.9 * statistics.median(r["rate"] for r in e.runs)]
    return {"backlogs": ", ".join(f"{v} {n:,}" for v, n in doc["config"]["capacity_events_of"].items()),
            "caveat": " " + say("saturation.caveat", rows=", ".join(short)) if short else ""}


def at_load(r: dict, key: str) -> bool:
    return f"{r['variant']}@{r['load'] * 100:g}%" == key


def growth_rows(doc: dict) -> list[Row]:
    return [Row((v, id_type, size), e, [r for r in doc["runs"] if (r["variant"], r["id_type"], str(r["inbox_rows"]))
                                        == (v, id_type, size)], doc)
            for v, types in doc["summary"]["growth"].items() for id_type, sizes in types.items()
            for size, e in sizes.items()]


def of_variant(e: Row) -> str:
    """The variant's label, for a key that starts with it (c@200/s, c:2, c shorter)."""
    base = e.key.partition("@")[0].partition(":")[0].partition(" ")[0]
    return VARIANT_NAMES.get(base, base)


# Columns: (header, cell of a Row)
def tot(header: str, *fields: str, digits: str = "") -> tuple:
    """A column of a summary entry's totals: one field, or several added up (digits ",": thousands separated)."""
    return header, lambda e: format(sum(e.t[f] for f in fields), digits)


def summed(header: str, field: str, digits: str = "") -> tuple:
    """A column adding up one field over a row's runs, 0 for a run without it (digits as tot's)."""
    return header, lambda e: format(sum(r.get(field) or 0 for r in e.runs), digits)


def spread_of(header: str, field: str, digits: int = 0) -> tuple:
    return header, lambda e: spread(e.s[field], digits)


RUNS = ("Runs", lambda e: e.s["runs"])
EXACT = ("Exact balances", lambda e: f"{e.s['balances_exact_runs']} of {e.s['runs']}")
RATE = ("msgs/s, median (min–max)", lambda e: spread(e.s["msgs_per_s"], 1))
DUP_LOST = tot("Duplicates + lost", "duplicates", "lost")
LATENCY_COLUMNS = [spread_of("p50, ms", "p50_ms", 1), spread_of("p99, ms", "p99_ms", 1),
                   spread_of("Largest, ms", "max_ms", 1), DUP_LOST]
TABLES = [
    Table("reconnect", "faults-reconnect.json", command="python -m measurements.measure_faults --fault pg-restart "
          "--variant c,c-reconnect --runs 5 --out results/faults-reconnect.json", rows=reconnect_rows, columns=[
        ("Variant", lambda e: e.key), ("Runs", lambda e: len(e.runs)), summed("Restarts", "faults"),
        summed("Duplicates", "duplicates", ","), summed("Lost", "lost", ","),
        summed("Started again", "restarted"), summed("Reconnected", "reconnected"),
        ("First credit after a restart (s)",
         lambda e: spread(results.stats(r["resume_s"]["median"] for r in e.runs), 2)),
        ("Exact balances", lambda e: tables.exact(e.runs))]),
    Table("throughput", "throughput.json", cpu=True, rows=summary("variants"), columns=[
        ("Variant", lambda e: VARIANT_NAMES.get(e.key, e.key)), RUNS, RATE,
        ("Gap p50 (ms)", lambda e: f"{statistics.median(r['gap_p50_ms'] for r in e.runs):.3f}"),
        ("Gap p99 (ms)", lambda e: f"{statistics.median(r['gap_p99_ms'] for r in e.runs):.3f}"),
        ("Share of raw", share_of_raw)]),
    Table("ratios", "throughput.json", rows=summary("ratios"), columns=[
        ("Ratio", lambda e: e.key), ("Median of per-run ratios (min–max)", lambda e: spread(e.s, 3))]),
    Table("batch", "throughput-batch.json", cpu=True, rows=summary("variants"), text_columns=0, columns=[
        ("Batch size", lambda e: e.key.split("@")[1]), RATE]),
    Table("storage", "storage.json", command="python measure_storage.py --runs 5", rows=summary("size"),
          also=("post-figures.json",), columns=[
        ("message_id type", lambda e: LAYOUT_NAMES[e.key]), spread_of("Heap bytes/row", "heap_bytes_per_row", 1),
        spread_of("Index bytes/row", "index_bytes_per_row", 1), spread_of("Total bytes/row", "total_bytes_per_row", 1),
        spread_of("+ cleanup index", "cleanup_index_bytes_per_row", 1),
        *((f"Post: {name}", lambda e, f=f"{name}_bytes_per_row": load("post-figures.json")["storage"]["layouts"][
            e.key][f]) for name in ("heap", "index", "total"))]),
    Table("layouts", "storage.json", rows=summary("expiry"), columns=[
        ("Layout", lambda e: LAYOUT_NAMES[e.key] + ("" if e.key.startswith("v7-") else " + cleanup index")),
        spread_of("Bytes/row, every index it needs", "total_bytes_per_row", 1),
        ("Time to expire", lambda e: f"{e.s['expire_s']['median']:.2f} s"),
        ("WAL written", lambda e: f"{e.s['expire_wal_bytes']['median'] / 1e6:,.1f} MB"),
        ("Dead tuples left", lambda e: f"{e.s['dead_tuples_after']['median']:,.0f}"),
        ("Kept exactly the rows inside the window",
         lambda e: f"{e.s['kept_exactly_recent_runs']} of {e.s['runs']} runs")]),
    Table("external", "external.json", columns=[
        ("Policy", lambda e: POLICY_NAMES[e.key]), RUNS, tot("Lives", "kills"),
        tot("SIGKILLed at random", "killed_at_random"),
        ("Crashed before / after the call", lambda e: f"{e.t['crashed_before_call']} / {e.t['crashed_after_call']}"),
        tot("Duplicate charges", "duplicates"), tot("Lost charges", "lost"),
        ("Leases run short / taken over", lambda e: f"{e.t['lease_short']} / {e.t['lease_taken_over']}"), EXACT]),
    Table("kill-group", "kill-consumers3.json", optional=True, command="python measure_kill.py --variant all "
          "--consumers 3 --runs 5 --kills 20 --events 10000 --out results/kill-consumers3.json", extra=victims_rule,
          columns=[
        ("Variant", lambda e: VARIANT_NAMES[e.key]), RUNS, summed("Kills", "kills"),
        ("Of a member holding partitions", lambda e: "–" if any(k.get("held") is None for r in e.runs
                                                                 for k in r["kill_log"])  # a command's: not known
         else sum(bool(k["held"]) for r in e.runs for k in r["kill_log"] if k["exit_code"] is None)),
        spread_of("Duplicates, median (min–max)", "duplicates"), spread_of("Lost, median (min–max)", "lost"),
        summed("Skipped duplicates", "skipped", ","), EXACT]),
    Table("race", "race.json", columns=[
        ("Variant", lambda e: {**POLICY_NAMES, **VARIANT_NAMES}[e.key]), RUNS,
        tot("Duplicates", "duplicates", digits=","), tot("Lost", "lost"),
        tot("Transactions retried", "retried"), tot("Consumers died", "died"),
        tot("Skipped duplicates", "skipped", digits=","), EXACT]),
    Table("parallel", "throughput-lanes.json", cpu=True, rows=summary("variants"), after=parallel_after,
          command="python measure_throughput.py --sweep-lanes 1,4,16,64 --work-ms 10", columns=[
        ("Variant (k@N: N lanes)", lambda e: e.key), RUNS, RATE, ("× c, median of per-run ratios", times_c),
        summed("Order violations", "order_violations"),
        ("Duplicates + lost", lambda e: sum(r["duplicates"] + r["lost"] for r in e.runs))]),
    Table("eos", "eos.json", command="python -m measurements.measure_eos --variant all --runs 5 --kills 20 --events "
          "10000 --out results/eos.json", text_columns=2,
          rows=summary(match=lambda r, key: f"{r['variant']} {r['point']}" == key), columns=[
        ("Variant", lambda e: VARIANT_NAMES[e.key.split()[0]]), ("Fault", lambda e: POINT_NAMES[e.key.split()[1]]),
        RUNS, summed("Faults", "faults", ","), summed("Ledger duplicates", "duplicates", ","),
        summed("Ledger lost", "lost", ","), EXACT, summed("Output copies", "topic_copies", ","),
        summed("Output missing", "topic_missing", ","), summed("Aborted output copies", "aborted_copies", ",")],
          extra=lambda doc: {"nth": doc["config"]["events"] // doc["config"]["planted"]}),
    Table("publish", "publish.json", command="python -m measurements.measure_publish --source all --variant all "
          "--runs 5 --out results/publish.json", text_columns=2,
          rows=summary(match=lambda r, key: f"{r['source']} {r['idempotence']} {r['variant']}" == key), columns=[
        ("Source of copies", lambda e: SOURCE_NAMES[tuple(e.key.split()[:2])]),
        ("Consumer", lambda e: VARIANT_NAMES[e.key.split()[2]]), RUNS, summed("Faults", "faults"),
        summed("Copies in the log", "log_copies", ","), summed("Duplicates", "duplicates", ","),
        summed("Lost", "lost", ","), EXACT,
        ("Accounts left on an older state", lambda e: f"{total(e.runs, 'stale_accounts'):,}"
         if all("stale_accounts" in r for r in e.runs) else "–")]),
    Table("latency", "latency.json", command="python -m measurements.measure_latency --variants c,d,p --rates "
          "200,500,5000 --runs 5 --out results/latency.json", text_columns=2, columns=[
        ("Variant", of_variant), ("Offered", lambda e: e.key.partition("@")[2]), RUNS,
        spread_of("Sent, msgs/s (from CreateTimes)", "offered_per_s"), *LATENCY_COLUMNS]),
    Table("growth", "throughput-inbox.json", rows=growth_rows, text_columns=3,
          extra=lambda doc: {"events": tables.events_of_text(doc["config"])},
          command="python measure_throughput.py --variants c,d,p --inbox-rows 0,10000000,50000000 --id-type "
          "text,uuid-v7 --events-of c=5000 --out results/throughput-inbox.json", columns=[
        ("Variant", lambda e: VARIANT_NAMES.get(e.key[0], e.key[0])),
        ("IDs", lambda e: "UUIDv7" if e.key[1] == "uuid-v7" else "UUIDv4"),
        ("Inbox rows before", lambda e: f"{int(e.key[2]):,}"), RUNS, RATE,
        ("÷ empty inbox", lambda e: spread(e.s.get("vs_empty"), 3)),
        ("v7 ÷ v4", lambda e: spread(e.s.get("vs_text"), 3)),
        ("WAL bytes/msg", lambda e: f"{e.s['wal_bytes_per_msg']['median']:,.0f}"),
        ("Index reads/msg", lambda e: f"{e.s['inbox_index_reads_per_msg']['median']:.3f}"),
        *((header, lambda e, i=i: tables.cpu_of_runs(e.runs)[i]) for i, header in enumerate((
            "µs/msg: consumer", "µs/msg: Postgres, its backends", "µs/msg, all", "Consumer peak RSS (MiB)")))]),
    Table("consumers", "throughput-consumers.json", cpu=True, rows=summary("variants"),
          extra=lambda doc: {"events": tables.events_of_text(doc["config"])},
          command="python measure_throughput.py --variants c,d,p --consumers 1,2,3 --events-of c=20000 --out "
          "results/throughput-consumers.json", columns=[
        ("Variant", of_variant), ("Consumers", lambda e: e.key.partition(":")[2]), RUNS, RATE,
        ("÷ one consumer, paired by run",
         lambda e: spread(e.doc["summary"]["ratios"].get(f"{e.key}/{e.key.partition(':')[0]}:1"), 3))]),
    Table("retention", "retention.json", command="python -m measurements.measure_retention --variant all --runs 5 "
          "--out results/retention.json",
          text_columns=2, rows=summary(match=lambda r, key: f"{r['variant']} {r['window']}" == key), columns=[
        ("Variant", lambda e: {**VARIANT_NAMES, "v7": "v7: the lean inbox, UUIDv7 IDs, a partition a day"}[
            e.key.split()[0]]),
        ("Inbox keeps", lambda e: f"{e.runs[0]['window_days']} days ({e.key.split()[1]})"), RUNS,
        tot("Duplicates", "duplicates", digits=","), tot("Lost", "lost"),
        tot("Dead-lettered", "dead_lettered", digits=","),
        ("Alarm before the replay", lambda e: f"{e.t['alarm']} of {e.s['runs']}")]),
    Table("async-commit", "async-commit.json", indent=True,
          command="python -m measurements.measure_async_commit --out results/async-commit.json", columns=[
        ("The commit, then the next poll at once", lambda e: {
            "stored-offsets": "`commit(asynchronous=True)`, FastStream's",
            "the-message": "`commit(message=msg, asynchronous=True)`"}[e.key]), RUNS, tot("Trials", "trials"),
        tot("Committed past the message in hand", "past_the_message")]),
    Table("saturation", "latency-saturation.json", rows=summary(match=at_load), text_columns=2, extra=saturation_extra,
          command="python -m measurements.measure_latency --variants c,d,p --load 0.5,0.8,0.95 --capacity-events-of "
          "c=3000 --runs 5 --out results/latency-saturation.json", columns=[
        ("Variant", of_variant), ("Load", lambda e: e.key.partition("@")[2]), RUNS,
        spread_of("Capacity, msgs/s (the backlog)", "capacity_per_s"),
        ("Asked, msgs/s (median)", lambda e: f"{statistics.median(r['rate'] for r in e.runs):,.0f}"),
        spread_of("Offered, msgs/s", "offered_per_s"), *LATENCY_COLUMNS]),
    Table("retention-load", "retention-load.json", rows=summary(match=lambda r, key: r["mode"] == key),
          command="python -m measurements.measure_retention_load --runs 5 --out results/retention-load.json",
          columns=[
        ("Mode", lambda e: RETENTION_MODES[e.key]), RUNS, spread_of("p, msgs/s", "msgs_per_s"),
        ("Against", lambda e: "–" if e.key == e.s["baseline"] or e.s["vs_baseline"] is None
         else f"{spread(e.s['vs_baseline'], 2)} of {e.s['baseline']}"),
        spread_of("Longest stall, ms", "longest_stall_ms"), spread_of("WAL, MB", "wal_mb", 1),
        ("Retention, s", lambda e: spread(e.s["retention_s"], 1)),
        ("Retention done before p's last credit", lambda e: "–" if e.s["retention_s"] is None
         else f"{e.s['retention_within_window']} of {e.s['runs']}"), DUP_LOST,
        ("Expired IDs left, a run", lambda e: f"{statistics.median(r['expired_left'] for r in e.runs):,.0f}")]),
    Table("latency-batch", "latency-batch.json", text_columns=3, command="python -m measurements.measure_latency "
          "--variants c,d,p --rates 200,5000 --sweep-batch 50,10,1 --runs 5 --out results/latency-batch.json", columns=[
        ("Variant", of_variant), ("Offered", lambda e: e.key.partition(" batch ")[0].partition("@")[2]),
        ("Batch", lambda e: f"{int(e.key.partition(' batch ')[2]):,}" if " batch " in e.key else
         f"{e.doc['config']['batch']:,} (--batch)" if e.key.partition("@")[0] in ("d", "p") else "–"), RUNS,
        spread_of("Sent, msgs/s", "offered_per_s"), spread_of("Credits per transaction", "credits_per_transaction", 1),
        *LATENCY_COLUMNS]),
]
SECTIONS = {table.name: table for table in TABLES} | {
    "sizing": sizing_section, "faults": faults_section, "cluster": cluster_section, "offsets": offsets_section,
    "frameworks": frameworks_section, "conformance": conformance_section, "faults-more": faults_more_section}
