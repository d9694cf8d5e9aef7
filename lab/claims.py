"""The README's claims table: what the post says, its figure, this lab's and the verdict, each a
constant or a small function of results/; a claim whose results file is not there yet is left out.
"""
from lab import provenance, results
from lab.figures import FIGURES, runs, summary, tot
from lab.tables import Missing, load, markdown_table, need, spread, total
from lab.tables import runs_of as matching


def post(*path: str):
    """The post's own figure, quoted in results/post-figures.json."""
    found = need("post-figures.json")
    for part in path:
        found = found[part]
    return found


def holds(ok: bool) -> str:
    return "holds" if ok else "differs"


def kill_claim(says: str, variant: str, field: str) -> tuple:
    """A claim that `field` happens under hard kills: it holds in the runs where it did."""
    def verdict():
        mine = runs("kill.json", variant=variant)
        seen = sum(r[field] > 0 for r in mine)
        return "holds" if seen == len(mine) else f"holds in {seen} of {len(mine)} runs" if seen else "differs"
    return (says, lambda: f"{spread(post('kill', 'variants', variant, field))} a run",
            lambda: f"{spread(results.stats(r[field] for r in runs('kill.json', variant=variant)))} a run", verdict)


def one_against_other(name: str, **where) -> tuple:
    """b's duplicates a run against c's most: the inbox catches what b applies twice."""
    b, c = (results.stats(r["duplicates"] for r in runs(name, variant=v, **where)) for v in "bc")
    return f"b {spread(b)} duplicates a run, c {c['max']}", holds(c["max"] == 0 < b["min"])


def kip848() -> tuple:
    (s, short), (g, long) = ((summary(name, "b", "totals"), f"{need(name)['config']['slow_seconds']:g}")
                             for name in ("rebalance-b-consumer.json", "rebalance-b-consumer-stall20.json"))
    return (f"{s['duplicates']} of {s['evictions']} with a {short} s stall, "
            f"{g['duplicates']} of {g['evictions']} with {long} s",
            "holds" if s["duplicates"] == s["evictions"] and g["duplicates"] == g["evictions"] else
            "holds for long stalls only" if g["duplicates"] == g["evictions"] else "differs")


def partitions() -> tuple:
    cuts = [r for r in need("faults.json")["runs"] if r["fault"].startswith("partition")]
    b, c = ([r for r in cuts if r["variant"] == v] for v in "bc")
    return (f"b {total(b, 'duplicates')} duplicates in {len(b)} runs, c "
            f"{sum(r['duplicates'] + r['lost'] for r in c)} duplicates or losses in {len(c)}",
            "the inbox holds" if not any(r["duplicates"] or r["lost"] for r in c) else "differs")


def inbox_cost() -> tuple:
    ratio, theirs = summary("throughput.json", "ratios", "c/b"), post("throughput", "variants")
    cost, their = 1 - ratio["median"], theirs["c"]["msgs_per_s"] / theirs["b"]["msgs_per_s"]
    return (f"{their:.3f} (about {1 - their:.0%} slower)", spread(ratio, 3),
            f"{holds(0 < cost < 0.2)}: {cost:.0%} slower here")


def bytes_per_id() -> tuple:
    mine, theirs = summary("storage.json", "size"), post("storage", "layouts")
    shared = [k for k in theirs if k in mine]
    close = all(abs(mine[k]["total_bytes_per_row"]["median"] / theirs[k]["total_bytes_per_row"] - 1) < 0.05
                for k in shared)
    return (f"Bytes per remembered ID: {', '.join(shared)}",
            " / ".join(str(theirs[k]["total_bytes_per_row"]) for k in shared),
            " / ".join(str(mine[k]["total_bytes_per_row"]["median"]) for k in shared),
            "holds (within 5%)" if close and len(shared) == len(theirs) else "differs")


def replay() -> tuple:
    s, age = summary("retention.json"), need("retention.json")["config"]["age_days"]
    short, long = s["c shorter"], s["c longer"]
    return (f"Retention slips first: a replay from {age} days back into an inbox that remembers less",
            "argued, not measured",
            f"c: {short['totals']['duplicates'] / short['runs']:,.0f} duplicates a run keeping {age - 1} days (alarm "
            f"in {short['totals']['alarm']} of {short['runs']} runs first), "
            f"{long['totals']['duplicates'] / long['runs']:,.0f} keeping {2 * age}",
            holds(short["totals"]["duplicates"] and not long["totals"]["duplicates"]
                  and short["totals"]["alarm"] == short["runs"]))


def measured(variant: str) -> dict | None:
    """A variant's summary in results/kill-frameworks.json, or None while it has no runs there."""
    return (load("kill-frameworks.json") or {"summary": {}})["summary"].get(variant)


def at_most(s: dict) -> str:
    return f"at most {s['duplicates']['max']} duplicates and {s['lost']['max']} lost a run"


def restart_row(variant: str) -> dict | None:
    """A variant's pg-restart row in its conformance table (results/conformance-VARIANT.json), if measured."""
    doc = load(f"conformance-{variant}.json")
    return next((r for r in doc["runs"] if r["check"] == "pg-restart"), None) if doc else None


def faststream() -> tuple:
    """FastStream's defaults duplicate; its inbox under ACK still loses on the confluent backend,
    by that backend's ack (docs/frameworks.md); the fix, and the aiokafka backend, where measured."""
    default, inbox = (summary("kill-frameworks.json", v) for v in ("fs-default", "fs-inbox"))
    fixed, aio = measured("fs-inbox-fixed"), measured("fs-inbox-aio")
    restart, fixed_restart = restart_row("fs-inbox"), restart_row("fs-inbox-fixed")
    changed = fixed_restart and provenance.changed_since(fixed_restart.get("loaded", {"?": ""}))
    lab = (f"fs-default {spread(default['duplicates'])} duplicates a run; with the inbox in its handler (ACK, "
           f"confluent backend) {at_most(inbox)}: its ack commits the offsets librdkafka stored, and the next "
           "poll has stored one past a handler still running"
           + (f"; offsets stored after the handler (fs-inbox-fixed) {at_most(fixed)}" if fixed else "")
           + (f"; on aiokafka (fs-inbox-aio) {at_most(aio)}" if aio else "")
           + (f"; under a Postgres restart (the conformance check) fs-inbox loses {restart['lost']:,}, acked past a "
              f"handler that raised, and fs-inbox-fixed (NACK_ON_ERROR: the message read again) "
              f"{fixed_restart['lost']:,}{' (measured before its code changed)' if changed else ''}"
              if restart and fixed_restart else ""))
    fixed_exact = fixed and fixed["duplicates"]["max"] == fixed["lost"]["max"] == 0
    return lab, (holds(default["duplicates"]["min"] > 0)
                 + ("; but under ACK the confluent backend loses, inbox or not (M9)" if inbox["lost"]["max"] else "")
                 + ("; storing the offset after the handler fixes it" if fixed_exact else "")
                 + ("; and NACK_ON_ERROR the restart" if fixed_exact and fixed_restart and fixed_restart["passed"]
                    and not changed else ""))


def keyed_sink() -> tuple:
    """Quix's stock PostgreSQL sink writes ledger rows and credits no account; a sink of the inbox's
    own (qx-eos-inbox, qx-alo-inbox) credits exactly, where measured."""
    k = summary("kill-frameworks.json", "qx-eos-keyed")
    mine = [(v, s) for v in ("qx-eos-inbox", "qx-alo-inbox") if (s := measured(v))]
    lab = (f"qx-eos-keyed: at most {k['duplicates']['max']} duplicate rows and {k['lost']['max']} lost a run (its "
           "stock sink writes ledger rows and credits no account)"
           + "".join(f"; {v}, the inbox in a sink of its own: {at_most(s)}, balances exact in "
                     f"{s['balances_exact_runs']} of {s['runs']} runs" for v, s in mine))
    return lab, holds(k["duplicates"]["max"] == k["lost"]["max"] == 0)


def lost_reply() -> tuple:
    b, c = (summary("faults-more.json", f"lost-commit-reply/{v}", "totals") for v in "bc")
    return (f"b {b['duplicates']} duplicates in {b['faults']} lost replies; c {c['duplicates']} duplicates, "
            f"{c['lost']} lost, {c['skipped']} skipped in {c['faults']}",
            holds(c["duplicates"] == c["lost"] == 0 < b["duplicates"]))


def offsets_expired() -> tuple:
    kept, forgot = need("faults-more-offsets.json"), need("faults-more-offsets-forgotten.json")
    whole, half = kept["summary"]["offsets-expired/c"], forgot["summary"]["offsets-expired/c"]
    forgotten = sum(f["forgotten"] for r in matching(forgot, variant="c") for f in r["fault_log"])
    events = kept["config"]["events"] * whole["runs"]
    return (f"c, inbox remembering all: {whole['totals']['skipped']:,} of {events:,} replayed and skipped, "
            f"{whole['totals']['duplicates']} duplicates; with {forgotten:,} IDs forgotten first: "
            f"{half['totals']['duplicates']:,} duplicates",
            holds(whole["totals"]["skipped"] == events and whole["totals"]["duplicates"] == 0
                  and half["totals"]["duplicates"] == forgotten > 0))


def failover() -> tuple:
    a, s = (summary("cluster.json", f"pg-failover-stalled c {mode} all") for mode in ("async", "sync"))
    return (f"async standby: {a['totals']['lost'] / a['runs']:,.0f} lost a run; sync: "
            f"{s['totals']['lost'] / s['runs']:,.0f}",
            "new: the inbox cannot keep what the failover lost" if a["totals"]["lost"] else "new")


def zombie_row(variant: str) -> tuple:
    mine = summary(f"rebalance-{variant}-classic.json", variant, "totals")
    said = "{duplicates} of {evictions} evictions" if variant == "b" else "{duplicates} duplicates, {skipped} skipped"
    return (said.format(**post("rebalance", "variants", variant)), said.format(**mine),
            holds(mine["duplicates"] == (mine["evictions"] if variant == "b" else 0)))  # b doubles each, c none


def eos() -> tuple:
    e, f = (summary("eos.json", f"{v} kill") for v in "ef")
    return (f"without the inbox {spread(e['duplicates'])} duplicates a run; with it {f['duplicates']['max']}",
            holds(e["duplicates"]["min"] > 0 == f["duplicates"]["max"]))


ARGUED, NOT_COVERED = "argued, not measured", "not covered"
# (the claim, then a function giving the rest of its row: the post's figure where it is not a
# constant, this lab's figure and the verdict); a claim whose file is missing is left out
CLAIMS = [
    kill_claim("Auto-commit (a1) duplicates after hard kills", "a1", "duplicates"),
    kill_claim("Auto-commit in batches (a2) loses messages", "a2", "lost"),
    kill_claim("Committing after the database (b) still duplicates on a kill", "b", "duplicates"),
    ("The inbox (c): no duplicate, no loss in 100 kills", "0 duplicates, 0 lost in 100 kills", FIGURES["kill.c"],
     lambda: holds(tot("kill.json", "duplicates", variant="c") == tot("kill.json", "lost", variant="c") == 0)),
    ("A zombie doubles every stalled credit (b, classic protocol)", lambda: zombie_row("b")),
    ("KIP-848's consumer protocol does not change that (b)", "no change", kip848),
    ("The inbox catches every zombie credit (c)", lambda: zombie_row("c")),
    ("A relay that resends: a copy at a new offset, caught only by the event ID", ARGUED,
     lambda: one_against_other("publish.json", source="relay")),
    ("A lock timeout hands a record to a second member mid-handler (share group)", ARGUED,
     lambda: one_against_other("faults.json", fault="share-lock")),
    ("Network partitions", "could not be shown (one broker, one machine)", partitions),
    ("The inbox's cost: c's rate against b's", inbox_cost),
    (bytes_per_id,),
    ("Retention deletes in batches of 10,000", "10,000, 10,000, 5,000, then 0",
     "the same, asserted by `tests/test_retention.py`", "holds (a test)"),
    ("Kafka's exactly-once stops at the database (its loop, crediting Postgres)", ARGUED, eos),
    ("A Postgres failover (c): what the inbox remembers is what the standby had", NOT_COVERED, failover),
    (replay,),
    ("A framework's defaults are auto-commit: duplicates on a kill (FastStream)", ARGUED, faststream),
    ("A sink keyed on the event ID makes an insert idempotent, never an increment (Quix Streams' exactly-once "
     "with its PostgreSQL sink)", ARGUED, keyed_sink),
    ("A commit whose reply never arrives is harmless with the inbox (the indeterminate commit)", NOT_COVERED,
     lost_reply),
    ("An empty group's expired offsets and `earliest` replay the whole topic, so the inbox must remember as long "
     "(7 days by default)", "argued, not run", offsets_expired),
]


def row(claim: tuple) -> list[str]:
    """A claim's four cells: its text parts as they are, each function's figures (one or more) in its place."""
    made = [part() if callable(part) else part for part in claim]
    return [cell for part in made for cell in (part if isinstance(part, tuple) else (part,))]


def claims_section() -> str:
    """The post's claims, one row each, its figures beside this lab's per run; the full tables are in docs/."""
    need("post-figures.json"), need("kill.json")
    rows = []
    for claim in CLAIMS:
        try:
            rows.append(row(claim))
        except (Missing, KeyError):
            continue  # its results file is not there yet (or holds no runs of it)
    return markdown_table(["The post's claim", "The post", "This lab, per run", "Verdict"], rows, text_columns=4) + "\n"

