"""The sections of docs/throughput.md on what the batched inboxes (d, p) cost: against their ceilings,
step by step, against p's old self, the inbox's own price, and over more accounts.
"""
import functools

from lab import results, tables
from lab.tables import CPU_KINDS, Table, cpu_table, load, markdown_table, named, provenance, runs_of, say, spread

P_GOAL = 1.5  # what p was built for: half again d's rate, on this machine
TARGET_CUT = 0.30  # issue #31: p's CPU per message at least 30% lower


def rates_table(doc: dict) -> str:
    return markdown_table(["Variant", "Runs", "msgs/s, median (min–max)"], [
        [named(name), s["runs"], spread(s["msgs_per_s"], 1)] for name, s in doc["summary"]["variants"].items()])


def batch_of(doc: dict) -> dict:
    """The batch size a footer names: the run's --batch, or the worker's default."""
    return {"batch": doc["config"].get("batch", 500)}


def throughput_tables(doc: dict) -> str:
    """A measure_throughput invocation: msgs/s per variant, then its paired ratios."""
    return rates_table(doc) + "\n\n" + markdown_table(["Ratio", "Median of per-run ratios (min–max)"], [
        [name, spread(r, 3)] for name, r in doc["summary"]["ratios"].items()])


def p_goal(doc: dict) -> str:
    """Whether p met its goal, on one connection and (in the other invocation) on two."""
    if (alone := doc["summary"]["ratios"].get("p/d")) is None:
        return "\n\n"
    said = say("pipelined.goal", alone=alone, goal=P_GOAL,
               met="at or past" if alone["median"] >= P_GOAL else "short of")
    if both := ((two := load("throughput-connections.json")) or {}).get("summary", {}).get("ratios", {}).get("p@2/d"):
        d_of = {r["run"]: r["msgs_per_s"] for r in runs_of(two, variant="d")}
        paired = [r["msgs_per_s"] / d_of[r["run"]] for r in runs_of(two, variant="p@2") if r["run"] in d_of]
        said += " " + say("pipelined.goal-two", both=both, goal=P_GOAL, past=sum(x >= P_GOAL for x in paired),
                          runs=len(paired))
    return "\n" + said + "\n"


def contention_section() -> str:
    """#31: the credits over 10,000 accounts as well as 100, where a batch of 500 locks most of them."""
    parts = []
    for name, what in (("throughput-accounts.json", "one consumer process, p also on two connections"),
                       ("throughput-consumers-accounts.json", "1, 2 and 3 consumer processes in one group")):
        if (doc := load(name)) is None:
            continue
        stats, ratios, c = doc["summary"]["variants"], doc["summary"]["ratios"], doc["config"]
        counts = [f"{n:,} accounts" for n in sorted(c["accounts"])]  # each paired with the fewest
        rows = []
        for base in dict.fromkeys(key.partition(", ")[0] for key in stats):
            cells = [named(base)]
            for count in counts:
                s = stats.get(f"{base}, {count}")
                cells += [spread(s and s["msgs_per_s"]),
                          f"{s['cpu_us_per_msg']['total']['median']:,.1f}" if s and "cpu_us_per_msg" in s else "–"]
            ratio = ratios.get(f"{base}, {counts[-1]}/{base}, {counts[0]}")
            rows.append([*cells, spread(ratio, 2)])
        within = {}  # "p@2 ÷ p" -> count -> ratios: two connections against one, per account count
        rate = {(r["variant"], r.get("accounts"), r["run"]): r["msgs_per_s"] for r in doc["runs"]}
        for (variant, accounts, run), value in rate.items():
            if variant.endswith("@2") and (one := (variant.partition("@")[0], accounts, run)) in rate:
                within.setdefault(f"{variant} ÷ {one[0]}", {}).setdefault(f"{accounts:,} accounts", []).append(
                    value / rate[one])
        extra = ("\n\n" + markdown_table(["Paired by run, within one account count", *counts], [
            [pair, *(spread(results.stats(by[n]), 2) if n in by else "–" for n in counts)]
            for pair, by in within.items()])) if within else ""
        parts.append(f"{what.capitalize()}:\n\n" + cpu_table(doc) + markdown_table(
            ["Variant", *(f"{n}: {h}" for n in counts for h in ("msgs/s, median (min–max)", "CPU µs/msg")),
             f"{counts[-1]} ÷ {counts[0]}, paired by run"], rows) + extra
            + "\n\n" + say("contention", c=c, events=tables.events_of_text(c), file=name, prov=provenance(doc),
                             **batch_of(doc)) + "\n")
    if not parts:
        raise tables.Missing("_Not measured yet: `python measure_throughput.py --variants d,p,p@2 "
                             "--accounts 100,10000 --runs 5 --events 100000 --out "
                             "results/throughput-accounts.json`._\n")
    return "\n".join(parts)


def lean_lines(doc: dict) -> str:
    """#31: p's CPU per message cut step by step, each step beside the one before in one invocation."""
    stats, ratios = doc["summary"]["variants"], doc["summary"]["ratios"]
    by_run = {(r["variant"], r["run"]): r["cpu_us_per_msg"]["total"] for r in doc["runs"] if r.get("cpu_us_per_msg")}
    lines = []
    for lean, base in (("p-lean", "p"), ("p-lean@2", "p@2")):
        paired = [1 - by_run[lean, run] / by_run[base, run] for v, run in by_run if v == lean and (base, run) in by_run]
        if paired and lean in stats and base in stats:
            cut, ratio = results.stats(paired), ratios[f"{lean}/{base}"]
            before, after = (stats[v]["cpu_us_per_msg"]["total"]["median"] for v in (base, lean))
            verdict = {(True, True): "both", (True, False): "the paired median only",
                       (False, True): "the medians only", (False, False): "neither"}[
                (cut["median"] >= TARGET_CUT, 1 - after / before >= TARGET_CUT)]
            lines.append(say("lean.step", lean=lean, base=base, before=before, after=after, medians=1 - after / before,
                             cut=cut, target=TARGET_CUT, verdict=verdict, ratio=ratio))
    return "\n".join(lines) + "\n\n" + throughput_tables(doc)


# #46's bars, each a paired ratio in one invocation: (what, where in the summary, at least or at most, the bar)
AGAINST_BARS = (("p's CPU per message, today's over the old p's", ("against", "p", "cpu_us_per_msg", "total"),
                 "at most", 0.60),
                ("p@2's msgs/s, today's over the old p@2's", ("against", "p@2", "msgs_per_s"), "at least", 1.30),
                ("p/d, msgs/s", ("ratios", "p/d"), "at least", 1.6),
                ("p@2/db@2, msgs/s", ("ratios", "p@2/db@2"), "at least", 0.9))


def against_lines(doc: dict, bars: tuple) -> str:
    """Today's code over another commit's, paired by run in one invocation, and `bars` (#46's)."""
    cases, old = doc["summary"]["against"], doc["config"]["against"]["commit"][:7]
    kinds = ("total", "consumer_python", "postgres_backends")
    table = markdown_table(["Today's", "Runs", "msgs/s, today ÷ old", "CPU µs/msg, all, today ÷ old",
                            *(f"{CPU_KINDS[k]}, today ÷ old" for k in kinds[1:]), "WAL bytes/credit, today ÷ old"],
                           [[named(name), e["runs"], spread(e["msgs_per_s"], 3),
                             *(spread(e["cpu_us_per_msg"].get(k), 3) for k in kinds), spread(e["wal_bytes_per_msg"], 3)]
                            for name, e in cases.items()])
    said = []
    for what, path, how, bar in bars:
        stat = functools.reduce(lambda node, key: (node or {}).get(key), path, doc["summary"])
        if stat:
            met = stat["median"] <= bar if how == "at most" else stat["median"] >= bar
            said.append(say("against.bar", what=what, stat=spread(stat, 3), how=how, bar=bar,
                            verdict="met" if met else "not met"))
    return (say("against.intro", old=old) + "\n\n" + table + "\n\n" + "".join(s + "\n" for s in said) + "\n"
            + throughput_tables(doc))


def bare_lines(doc: dict) -> str:
    """#31: the inbox's own cost at batch scale, p against p-bare (p's statement without the claim)."""
    stats, lines = doc["summary"]["variants"], []
    if rate := results.paired_by_run(doc, "p", "p-bare", lambda r: r["msgs_per_s"]):
        lines.append(say("bare.rate", spread=spread(rate, 3), cost=1 - rate["median"]))
    cpu = results.paired_by_run(doc, "p", "p-bare", lambda r: (r.get("cpu_us_per_msg") or {}).get("total"))
    if cpu and all("cpu_us_per_msg" in stats.get(v, {}) for v in ("p", "p-bare")):
        p, bare = (stats[v]["cpu_us_per_msg"]["total"]["median"] for v in ("p", "p-bare"))
        lines.append(say("bare.cpu", p=p, bare=bare, spread=spread(cpu, 3), share=1 - 1 / cpu["median"]))
    return rates_table(doc) + "\n\n" + "\n".join(lines)


def cores_lines(doc: dict) -> str:
    """#46's last bar on shared cores and with a core for Postgres alone (measurements/measure_cores.py)."""
    top, bottom = doc["config"]["variants"].split(",")

    def busy(runs, variant, kinds):  # cores a kind of process kept busy, the median over runs that timed CPU
        figures = [r["figures"][variant] for r in runs if r["figures"][variant]["cpu_us_per_msg"]]
        median = results.median_or_none(sum(f["cpu_us_per_msg"][k] for k in kinds) * f["msgs_per_s"] / 1e6
                                        for f in figures)
        return "–" if median is None else f"{median:.2f}"

    rows = []
    for layout in ("shared", "apart", "niced"):
        if (s := doc["summary"].get(layout)) is None:
            continue
        mine = [r for r in doc["runs"] if r["layout"] == layout]
        cpus = {k: ",".join(map(str, mine[0][f"{k}_cpus"])) for k in ("postgres", "client")}
        rows.append([say(f"cores.{layout}", pg=cpus["postgres"], rest=cpus["client"], nice=mine[0]["client_nice"]),
                     s["runs"],
                     *(spread(s["msgs_per_s"][v], 0) for v in (top, bottom)),
                     *(busy(mine, v, ("postgres_backends",)) for v in (top, bottom)),
                     busy(mine, top, ("consumer_python", "consumer_librdkafka", "broker")), spread(s["ratio"], 3)])
    table = markdown_table(["Layout", "Runs", f"{top} msgs/s", f"{bottom} msgs/s",
                            f"Postgres backends, cores busy: {top}", f"the same: {bottom}",
                            f"{top}'s consumer and broker, cores busy", f"{top}/{bottom}, median (min–max)"], rows)
    said = [say("cores.paired", layout=layout, rates="; ".join(f"{v} {spread(pairs[v], 3)}" for v in pairs))
            for layout in ("apart", "niced") if (pairs := doc["summary"].get(f"{layout}/shared"))]
    return table + "".join("\n\n" + line for line in said)


TWO_CONNECTIONS = Table("pipelined.two", "throughput-connections.json", cpu=True, body=throughput_tables,
                        optional=True, before="\nTwo statements at once (p@2: the worker's `--connections 2`; db@2: "
                        "the ceiling, two connections taking the batches in turn):\n\n")
SECTIONS = {table.name: table for table in [
    Table("pipelined", "throughput-pipelined.json", cpu=True, body=throughput_tables, command="python "
          "measure_throughput.py --variants raw,db-d,db,d,p --runs 5 --out results/throughput-pipelined.json",
          after=lambda doc: TWO_CONNECTIONS() + p_goal(doc)),
    Table("frameworks-throughput", "throughput-frameworks.json", cpu=True, body=throughput_tables,
          extra=lambda doc: {"sizes": ", ".join(f"{v} {n:,}" for v, n in doc["config"].get("events_of", {}).items())},
          command="python measure_throughput.py --variants c,d,p,fs-ack,fs-inbox,qx-eos-keyed --out "
          "results/throughput-frameworks.json"),
    Table("lean", "throughput-lean.json", cpu=True, body=lean_lines, extra=batch_of,
          command="python measure_throughput.py --variants p,p-lean-py,p-lean-sql,p-lean,p@2,p-lean@2 --runs 5 "
          "--events 200000 --out results/throughput-lean.json"),
    *(Table(name, f"throughput-{name}.json", cpu=True, body=functools.partial(against_lines, bars=bars),
            extra=lambda doc: {"old": doc["config"]["against"]["commit"][:12], **batch_of(doc)},
            command=f"python measure_throughput.py --against {old} --variants {variants} --runs {runs} --events "
            f"100000 --out results/throughput-{name}.json")
      for name, old, variants, runs, bars in (("against", "1b663da", "p,db,p@2,db@2,d", 7, AGAINST_BARS),
                                              ("commits", "9ff66d5", "p,p@2,d", 5, ()),
                                              ("ahead", "6686431", "p,p@2,d,db@2", 5, ()))),
    Table("cores", "throughput-cores.json", body=cores_lines,
          extra=lambda doc: {"batch": 500, **doc["runs"][0]["throughput_config"]},
          command="python -m measurements.measure_cores --runs 5 --out results/throughput-cores.json"),
    Table("bare", "throughput-bare.json", cpu=True, body=bare_lines, extra=batch_of,
          command="python measure_throughput.py --variants p,p-bare --runs 5 --events 100000 "
          "--out results/throughput-bare.json"),
]} | {"contention": contention_section}
