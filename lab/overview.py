"""The sections that join every results file of their kind into one overview: M1 and M2 beside the
post, the findings of every measurement, the index of every results file, and the post's commands.
"""
import json
import statistics

from lab import tables
from lab.sections import CLUSTER_FILES, POINT_NAMES, REBALANCE_SETS, SOURCE_NAMES, cluster_fault_name
from lab.settings import ROOT
from lab.tables import VARIANT_NAMES, load, markdown_table, measured_by, need, provenance, runs_of, say, spread, total


def kill_section() -> str:
    """M1 per variant beside the post's figures, with the batched files' rows and M3's rates."""
    kill, throughput, post = need("kill.json"), load("throughput.json"), need("post-figures.json")
    rates = (throughput or {}).get("summary", {}).get("variants", {})
    rows = {v: (VARIANT_NAMES[v], s, runs_of(kill, variant=v), spread(rates[v]["msgs_per_s"], 1) if v in rates
                else "–") for v, s in kill["summary"].items()}
    batched = {name: doc for name in ("kill-d.json", "kill-d-batch50.json", "kill-p.json", "kill-p-connections2.json")
               if (doc := load(name)) and {"d", "p"} & set(doc["summary"])}
    for doc in batched.values():
        variant, batch, connections = next(iter(doc["summary"])), doc["config"]["batch"], doc["config"].get(
            "connections", 1)
        rows[f"{variant}@{batch}" + (f"x{connections}" if connections > 1 else "")] = (
            f"{VARIANT_NAMES[variant]}, {batch} messages" + (f", {connections} connections" if connections > 1 else ""),
            doc["summary"][variant], doc["runs"],
            spread(rates[variant]["msgs_per_s"], 1) + " (500 a batch)" if variant in rates else "–")
    table = []
    for key, (name, s, runs, rate) in rows.items():
        p = post["kill"]["variants"].get(key)
        table.append([name, s["runs"], total(runs, "kills"), spread(s["duplicates"]), spread(s["lost"]),
                      sum(r.get("skipped", 0) for r in runs), f"{s['balances_exact_runs']} of {s['runs']}", rate,
                      *((spread(p["duplicates"]), spread(p["lost"])) if p else ("not in the post", "–")),
                      post["throughput"]["variants"].get(key, {}).get("msgs_per_s", "–")])
    legend = say("kill", c=kill["config"], prov=provenance(kill))
    for name, doc in batched.items():
        kills, c = total(doc["runs"], "kills"), doc["config"]
        short = " " + say("kill.short", c=c) if kills < c["kills"] * len(doc["runs"]) else ""  # the events ran out
        # shorter lives, or more credits, land the kills before the events run out
        differs = [f"lives of {c['life'][0]:g}–{c['life'][1]:g} s"] if c["life"] != kill["config"]["life"] else []
        differs += [f"{c['events']:,} credits"] if c["events"] != kill["config"]["events"] else []
        legend += " " + say("kill.batched", variant=next(iter(doc["summary"])), c=c, file=name, code=measured_by(doc),
                            kills=kills, differs=" but " + " and ".join(differs) if differs else "") + short + "."
    crashes = [(key, code) for key, row in rows.items() for r in row[2] for code in r.get("crashes", [])]
    if crashes:  # a life that ended before its kill: counted apart, never as a kill
        legend += " " + say("kill.crashes", count=len(crashes),
                            lives=", ".join(f"{row} (exit code {code})" for row, code in crashes))
    elif all("crashes" in r for row in rows.values() for r in row[2]):
        legend += " " + say("kill.no-crashes")
    if throughput:
        legend += " " + say("kill.throughput", c=throughput["config"], code=measured_by(throughput))
    return markdown_table(["Variant", "Runs", "Kills", "Duplicates per run", "Lost per run", "Skipped duplicates",
                           "Exact balances", "Throughput, no kills (msgs/s)", "Post: duplicates", "Post: lost",
                           "Post: msgs/s"], table) + "\n\n" + legend + "\n"


def rebalance_section() -> str:
    """M2: every file of every variant, protocol and stall, then the post's rows."""
    post, rows, found, sources = need("post-figures.json")["rebalance"], [], None, []
    for name, protocol in REBALANCE_SETS:
        if not (doc := load(name)):
            continue
        found = found or doc
        sources.append(f"`results/{name}` ({measured_by(doc)})")
        for variant, s in doc["summary"].items():
            t, handover = s["totals"], s.get("handover_s")
            rows.append([VARIANT_NAMES[variant], protocol, f"{doc['config']['slow_seconds']:g}", s["runs"],
                         t["evictions"], t["duplicates"], t["lost"], t["skipped"],
                         f"{t['moved_to_other']} / {t['back_to_zombie']}",
                         "–" if handover is None else f"{handover:.1f}",
                         ", ".join(f"{code} ×{n}" for code, n in s["commit_failed"].items()) or "none",
                         f"{s['balances_exact_runs']} of {s['runs']}"])
    rows += [[f"post: {VARIANT_NAMES[v]}", "classic", f"{post['config']['slow_seconds']:g}", post["config"]["runs"],
              p["evictions"], p["duplicates"], "–", p["skipped"], "–", "–", post["commit_failed"], "–"]
             for v, p in post["variants"].items()]
    table = markdown_table(["Variant", "Group protocol", "Stall (s)", "Runs", "Evictions", "Duplicates", "Lost",
                            "Skipped duplicates", "Partitions next to another member / back to the zombie",
                            "Handover after eviction (s, median)", "Failed offset commits", "Exact balances"], rows,
                           text_columns=2, also_text=(-2,))
    if found is None:
        return table + "\n\n_No M2 results yet: run `python measure_rebalance.py`._\n"
    return table + "\n\n" + say("rebalance", c=found["config"], machine=provenance(found).split("; code:")[0],
                                  sources="; ".join(sources)) + "\n"


def batched(r: dict, c: dict) -> tuple:
    connections = ", 2 connections" if c.get("connections", 1) > 1 else ""
    return "SIGKILL", f"{r['variant']}, {c['batch']} a batch{connections}"


# (measurement, its results files, how a run's fault and variant read in the findings table)
FINDINGS = [
    ("M1 hard kills", "kill.json", lambda r, c: ("SIGKILL", r["variant"])),
    ("M1 hard kills", "kill-d.json kill-d-batch50.json", batched),
    ("M1 hard kills", "kill-k.json", lambda r, c: ("SIGKILL", f"k, {c['lanes']} lanes")),
    ("M1 hard kills", "kill-p.json kill-p-connections2.json", batched),
    ("M2 rebalance zombie", " ".join(name for name, _ in REBALANCE_SETS),
     lambda r, c: (f"stall {c['slow_seconds']:g} s, {c['group_protocol']} protocol", r["variant"])),
    ("M3 throughput", "throughput.json", lambda r, c: ("none", r["variant"])),
    ("M3 pipelined inbox", "throughput-pipelined.json throughput-connections.json",
     lambda r, c: ("none", r["variant"])),
    ("M3 per-key lanes", "throughput-lanes.json", lambda r, c: (f"none, {c['work_ms']:g} ms handler", r["variant"])),
    ("M3 inbox growth", "throughput-inbox.json", lambda r, c: (
        f"none, {'v7' if r['id_type'] == 'uuid-v7' else 'v4'} IDs", r["variant"])),
    ("M3 consumers", "throughput-consumers.json", lambda r, c: (
        "none", f"{r['variant'].partition(':')[0]}, {r['consumers']} consumer{'s' * (r['consumers'] != 1)}")),
    ("M3 latency", "latency.json", lambda r, c: (f"none, {r['rate']:g} offered a second", r["variant"])),
    ("M3 latency", "latency-saturation.json", lambda r, c: (f"none, {r['load'] * 100:g}% of its capacity offered",
                                                            r["variant"])),
    ("M3 latency", "latency-batch.json", lambda r, c: (f"none, {r['rate']:g} offered a second", r["variant"] + (
        f", batch {r['batch']}" if r.get("swept") else ""))),
    ("M5 external effects", "external.json", lambda r, c: ("SIGKILL, planted crashes", r["variant"])),
    ("M6 faults", "faults.json", lambda r, c: (r["fault"], r["variant"])),
    ("M6 faults", "faults-share-batched.json", lambda r, c: ("share-lock, producer batching", r["variant"])),
    ("Race", "race.json", lambda r, c: (f"{c['consumers']} consumers, {c['copies']} copies", r["variant"])),
    ("M7 exactly-once", "eos.json", lambda r, c: (POINT_NAMES[r["point"]], r["variant"])),
    ("M7 publishers", "publish.json", lambda r, c: (SOURCE_NAMES[(r["source"], r["idempotence"])], r["variant"])),
    ("M1 hard kills", "kill-o.json", lambda r, c: ("SIGKILL", r["variant"])),
    ("M8 replicated lab", " ".join(CLUSTER_FILES), lambda r, c: (cluster_fault_name(r, c), r["variant"])),
]


def findings_section() -> str:
    """One row per measurement, fault and variant: what every results file says, from its runs."""
    grouped_runs = {}  # (measurement, fault, variant) -> runs, across the files a measurement wrote
    for measurement, names, row_of in FINDINGS:
        for doc in filter(None, map(load, names.split())):
            for run in doc["runs"]:
                if run.get("duplicates") is not None:  # raw has no effects to count
                    grouped_runs.setdefault((measurement, *row_of(run, doc["config"])), []).append(run)
    return markdown_table(["Measurement", "Fault", "Variant", "Runs", "Duplicates", "Lost", "Exact balances"], [
        [*key, len(mine), f"{total(mine, 'duplicates'):,}", f"{total(mine, 'lost'):,}", tables.exact(mine)]
        for key, mine in grouped_runs.items()], text_columns=3) + "\n"


def results_index_section() -> str:
    """Every results file, what wrote it, how many runs it holds and what it ran on."""
    rows = []
    for path in sorted(tables.RESULTS.glob("*.json")):  # tables' RESULTS, which a test may point elsewhere
        if "harness" in (doc := json.loads(path.read_text())):  # not post-figures.json: the post's numbers, quoted
            script = f"{doc['harness']}.py" if (ROOT / f"{doc['harness']}.py").exists() else \
                f"measurements/{doc['harness']}.py"
            rows.append([f"`results/{path.name}`", f"`{script}`", len(doc["runs"]), provenance(doc)])
    return markdown_table(["File", "Harness", "Runs", "Machine and versions"], rows, 2, also_text=(-1,)) + "\n"


def minutes_for(doc: dict | None, runs: int, **fields) -> str:
    """About how long `runs` runs take, from a committed file's recorded run times."""
    if doc is None:
        return "–"
    times = [s for r in runs_of(doc, **fields) if (s := r.get("duration_s") or r.get("wall_s"))]
    return f"~{statistics.median(times) * runs / 60:.0f} min" if times else "not recorded"


def try_section() -> str:
    """The post's "Try it" commands: what each writes, how long it takes here, where the committed figures are."""
    kill, throughput = load("kill.json"), load("throughput.json")
    per_round = None
    if throughput:
        rounds = [sum(r.get("wall_s") or 0 for r in throughput["runs"] if r["run"] == n)
                  for n in range(1, throughput["config"]["runs"] + 1)]
        per_round = f"~{statistics.median(rounds) * 5 / 60:.0f} min" if all(rounds) else "not recorded"
        per_round += f" ({', '.join(throughput['config'].get('variants', []))})"
    rows = [["`python measure_kill.py --variant c --runs 5`", "`results/local/kill-c.json`",
             minutes_for(kill, 5, variant="c"), "M1, `results/kill.json`"],
            ["`python measure_kill.py --variant a1 --runs 5` (a2, b alike)", "`results/local/kill-a1.json`",
             minutes_for(kill, 5, variant="a1"), "M1, `results/kill.json`"],
            ["`python measure_rebalance.py --variant b --runs 5`, then `--variant c`",
             "`results/local/rebalance-b-classic.json`", minutes_for(load("rebalance-b-classic.json"), 5),
             "M2, `results/rebalance-b-classic.json`"],
            ["`python measure_throughput.py --runs 5`", "`results/local/throughput.json`", per_round or "–",
             "M3, `results/throughput.json`"],
            ["`python measure_storage.py --runs 5`", "`results/local/storage.json`",
             minutes_for(load("storage.json"), 5 * 8), "M4, `results/storage.json`"],
            ["`python -m pytest tests/test_retention.py -q`", "nothing", "seconds",
             "the test asserts the post's batches"]]
    return markdown_table(["The post's command", "Writes", "About, here", "Committed figures"], rows, 4) + "\n"


SECTIONS = {"kill": kill_section, "rebalance": rebalance_section, "findings": findings_section,
            "results-index": results_index_section, "try": try_section}
