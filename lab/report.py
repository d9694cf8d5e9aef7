"""Generate the README's results tables and the chart from the JSON in results/.

Claim: no figure in the README is typed by hand. Each table sits between
`<!-- report:NAME -->` and `<!-- /report:NAME -->` markers and is rewritten from
the results files (and the post's own figures, quoted in
results/post-figures.json); `--check` fails when the README is out of date.

    python -m lab.report            # rewrite README.md, docs/results.md and the charts (charts.py)
    python -m lab.report --check    # exit 1 if any of them differs from what results/ says
"""
import collections
import json
import re
import statistics
import subprocess
import sys

from lab import charts, claims, cli, faults, registry, results
from lab.provenance import digest
from lab.settings import RESULTS, ROOT

README = ROOT / "README.md"
VARIANT_NAMES = {**registry.labels(),  # each variant's own label, where it is declared
                 "external": "external: an HTTP charge, keys honoured"}  # the race's; M5 names its policies
# cluster.json: every fault and variant with acks=all (make measure-cluster); cluster-acks1.json: leader
# kills under acks=1, the same harness and parameters otherwise
CLUSTER_FILES = ("cluster.json", "cluster-acks1.json")
POINT_NAMES = {"kill": "SIGKILL on M1's schedule", "pg-committed": "planted: after Postgres, before Kafka's commit",
               "kafka-committed": "planted: after Kafka's commit, before the next poll"}
SOURCE_NAMES = {("relay", "on"): "relay: killed, and crashed between the ack and the mark",
                ("retries", "off"): "one producer, link cut and broker restarted; idempotence off",
                ("retries", "on"): "the same, idempotence on",
                ("restart", "on"): "a journaling publisher, killed and restarted"}


class Missing(Exception):
    """A section's results file is not there yet: the section says so, and how to make it."""


def need(name: str, command: str = "make measure") -> dict:
    """A results file a section cannot do without; Missing (shown in its place) when absent."""
    doc = load(name)
    if doc is None:
        raise Missing(f"_No `results/{name}` yet: run `{command}`._\n")
    return doc


def load(name: str) -> dict | None:
    return results.read(name, RESULTS)  # this module's RESULTS, which a test may point elsewhere


def spread(stat: dict, digits: int = 0) -> str:
    fmt = f"{{:,.{digits}f}}"
    return f"{fmt.format(stat['median'])} ({fmt.format(stat['min'])}–{fmt.format(stat['max'])})"


def markdown_table(headers: list[str], rows: list[list], text_columns: int = 1, last_is_text: bool = False) -> str:
    """A table whose first `text_columns` (and, if `last_is_text`, its last) are text, left-aligned,
    and every other column a figure, right-aligned."""
    aligns = ["---"] * text_columns + ["---:"] * (len(headers) - text_columns)
    if last_is_text:
        aligns[-1] = "---"
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(aligns) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def totals_rows(summary: dict, names: dict, cells) -> list[list]:
    """Per summary entry: its name, its runs, cells(totals)'s figures, and its exact balances."""
    return [[names[key], s["runs"], *cells(s["totals"]), f"{s['balances_exact_runs']} of {s['runs']}"]
            for key, s in summary.items()]


def provenance(doc: dict) -> str:
    m, v = doc["machine"], doc["versions"]
    return (f"{m['cores']} cores, {m['memory_gib']} GiB; Kafka {v['kafka']}, PostgreSQL {v['postgresql']}, "
            f"confluent-kafka {v['confluent_kafka']} (librdkafka {v['librdkafka']}){frameworks_ran(doc)}; "
            f"{measured_by(doc)}")


FRAMEWORKS = {"faststream": "FastStream", "quixstreams": "Quix Streams", "aiokafka": "aiokafka"}


def frameworks_ran(doc: dict) -> str:
    """The frameworks the runs' workers imported, with their versions, and a confluent-kafka of a
    worker's own environment where it is not the harness's (runs record their packages)."""
    seen: dict[str, set] = collections.defaultdict(set)
    for run in doc["runs"]:
        for name, versions in run.get("packages", {}).items():
            seen[name].update(versions.split(", "))
    said = [f"{FRAMEWORKS[name]} {', '.join(sorted(seen[name]))}" for name in FRAMEWORKS if seen.get(name)]
    if other := sorted(seen.get("confluent_kafka", set()) - {doc["versions"]["confluent_kafka"]}):
        said.append(f"confluent-kafka {', '.join(other)} in a framework's own environment")
    return f"; the workers ran {', '.join(said)}" if said else ""


# What a run may have loaded, for runs that did not record it: the code, less the tests and the
# report's own modules (no measurement imports them; test_provenance checks a real run's record).
CODE = ("*.py", "*.sql", ":!tests", ":!lab/report.py", ":!lab/claims.py", ":!lab/charts.py")
LISTED = 6  # changed files named in a footer; the rest are counted


def legacy_changes(commit: str) -> list[str]:
    """For runs from before they recorded what they loaded: every code file changed since."""
    diff = subprocess.run(["git", "-C", str(ROOT), "diff", "--name-only", "--no-renames", commit, "--", *CODE],
                          capture_output=True, text=True)
    return diff.stdout.split() if diff.returncode == 0 else [f"(commit {commit} unknown here)"]


def measured_by(doc: dict) -> str:
    """Which code the runs of a results file come from, and which of the files they loaded
    differ now (lab.provenance): the section is stale exactly when that list is not empty."""
    runs = doc["runs"]
    commits = sorted({r.get("commit") or "" for r in runs})
    if commits == [""]:
        return "code: not recorded (measured before runs named their commit)"
    dirty = any(r.get("dirty") for r in runs)
    named = ", ".join(c or "not recorded" for c in commits) + (" with local changes" if dirty else "")
    if all("loaded" in r for r in runs):
        hashes = collections.defaultdict(set)
        for run in runs:
            for path, hashed in run["loaded"].items():
                hashes[path].add(hashed)
        changed, how = sorted(p for p, seen in hashes.items() if seen != {digest(p)}), ""
    else:
        changed = sorted({path for commit in filter(None, commits) for path in legacy_changes(commit)})
        how = " (files loaded not recorded: any code file counts)"
    if not changed:
        return f"code: commit {named}{how}"
    listed = ", ".join(changed[:LISTED]) + (f" and {len(changed) - LISTED} more" if len(changed) > LISTED else "")
    return f"code: commit {named}{how}; **changed since: {listed}**"


def kill_section() -> str:
    kill, throughput, post = need("kill.json"), load("throughput.json"), need("post-figures.json")
    rates = (throughput or {}).get("summary", {}).get("variants", {})
    summaries = dict(kill["summary"])
    runs = {v: [r for r in kill["runs"] if r["variant"] == v] for v in kill["summary"]}
    batched = {name: doc for name in ("kill-d.json", "kill-d-batch50.json", "kill-p.json", "kill-p-connections2.json")
               if (doc := load(name)) and {"d", "p"} & set(doc["summary"])}
    for doc in batched.values():
        variant = next(iter(doc["summary"]))
        connections = doc["config"].get("connections", 1)
        row = f"{variant}@{doc['config']['batch']}" + (f"x{connections}" if connections > 1 else "")
        summaries[row] = doc["summary"][variant]
        runs[row] = doc["runs"]
    c = kill["config"]
    rows = ["| Variant | Runs | Kills | Duplicates per run | Lost per run | Skipped duplicates | Exact balances "
            "| Throughput, no kills (msgs/s) | Post: duplicates | Post: lost | Post: msgs/s |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for variant, s in summaries.items():
        p = post["kill"]["variants"].get(variant)
        rate = spread(rates[variant]["msgs_per_s"], 1) if variant in rates else "–"
        if variant[:2] in ("d@", "p@"):
            batch, _, connections = variant[2:].partition("x")
            name = f"{VARIANT_NAMES[variant[0]]}, {batch} messages" + (
                f", {connections} connections" if connections else "")
            rate = spread(rates[variant[0]]["msgs_per_s"], 1) + " (500 a batch)" if variant[0] in rates else "–"
        else:
            name = VARIANT_NAMES[variant]
        post_rate = post["throughput"]["variants"].get(variant, {}).get("msgs_per_s", "–")
        post_cells = f"{spread(p['duplicates'])} | {spread(p['lost'])}" if p else "not in the post | –"
        kills = sum(r["kills"] for r in runs[variant])
        skipped = sum(r.get("skipped", 0) for r in runs[variant])
        rows.append(f"| {name} | {s['runs']} | {kills} | {spread(s['duplicates'])} | {spread(s['lost'])} | {skipped} "
                    f"| {s['balances_exact_runs']} of {s['runs']} | {rate} | {post_cells} | {post_rate} |")
    legend = (f"\nMedian (min–max) per run of {c['runs']} planned per variant; each run {c['events']:,} credits on "
              f"{c['partitions']} partitions, up to {c['kills']} SIGKILLs {c['life'][0]:g}–{c['life'][1]:g} s after "
              f"the worker's first side effect, handler sleep {c['work_ms']:g} ms, session.timeout.ms "
              f"{c['session_timeout_ms']}, seed {c['seed']}. Kills and skipped duplicates are totals over the runs. "
              f"From `results/kill.json`: {provenance(kill)}.")
    for name, doc in batched.items():
        d_kills = sum(r["kills"] for r in doc["runs"])
        legend += (f" Row {next(iter(doc['summary']))}, {doc['config']['batch']} messages, from `results/{name}` "
                   f"({measured_by(doc)}): the same parameters, "
                   f"{doc['config']['batch']} messages per transaction, {d_kills} kills over its runs")
        if d_kills < doc["config"]["kills"] * len(doc["runs"]):
            legend += (" (a life's kill clock starts at its first committed batch, so with large batches each "
                       f"life reads more, and the events can run out before the {doc['config']['kills']}th kill)")
        legend += "."
    crashes = [(row, code) for row, mine in runs.items() for r in mine for code in r.get("crashes", [])]
    if crashes:  # a life that ended before its kill: counted apart, never as a kill
        legend += (f" {len(crashes)} lives ended by themselves before their kill and are not counted as kills: "
                   + ", ".join(f"{row} (exit code {code})" for row, code in crashes) + ".")
    elif all("crashes" in r for mine in runs.values() for r in mine):
        legend += " Every life counted as a kill was ended by its SIGKILL; none exited by itself first."
    if throughput:
        t = throughput["config"]
        legend += (f" Throughput from `results/throughput.json` ({measured_by(throughput)}): {t['runs']} runs of "
                   f"{t['events']:,} messages per variant, no kills, no handler sleep, variants interleaved in one "
                   "invocation.")
    return "\n".join(rows) + "\n" + legend + "\n"


def ratio_section() -> str:
    throughput = need("throughput.json")
    rows = ["| Ratio | Median of per-run ratios (min–max) |", "|---|---:|"]
    for name, r in throughput["summary"]["ratios"].items():
        rows.append(f"| {name} | {r['median']:.3f} ({r['min']:.3f}–{r['max']:.3f}) |")
    return "\n".join(rows) + f"\n\nFrom `results/throughput.json`: {provenance(throughput)}.\n"


def throughput_section() -> str:
    throughput = need("throughput.json")
    variants = throughput["summary"]["variants"]
    raw = variants.get("raw", {}).get("msgs_per_s", {}).get("median")
    rows = ["| Variant | Runs | msgs/s, median (min–max) | Gap p50 (ms) | Gap p99 (ms) | Share of raw |",
            "|---|---:|---:|---:|---:|---:|"]
    for name, s in variants.items():
        mine = [r for r in throughput["runs"] if r["variant"] == name]
        p50 = statistics.median(r["gap_p50_ms"] for r in mine)
        p99 = statistics.median(r["gap_p99_ms"] for r in mine)
        share = f"{s['msgs_per_s']['median'] / raw:.1%}" if raw else "–"
        rows.append(f"| {VARIANT_NAMES.get(name, name)} | {s['runs']} | {spread(s['msgs_per_s'], 1)} | {p50:.3f} "
                    f"| {p99:.3f} | {share} |")
    c = throughput["config"]
    return (cpu_table(throughput) + "\n".join(rows) + f"\n\n{c['runs']} runs of {c['events']:,} messages per variant "
            f"on {c['partitions']} partitions, no kills, no handler sleep, interleaved run by run in one invocation; "
            "msgs/s from the first to the last side effect (ledger `clock_timestamp()`; raw times itself). Gaps are "
            f"medians over runs of each run's p50 and p99. From `results/throughput.json`: {provenance(throughput)}.\n")


CPU_KINDS = {"consumer_python": "consumer, Python", "consumer_librdkafka": "consumer, librdkafka",
             "postgres_backends": "Postgres, its backends", "postgres_other": "Postgres, the rest",
             "broker": "broker"}


def cpu_table(doc: dict) -> str:
    """µs of CPU per message, per process, for the variants whose runs recorded it (lab/cpu.py);
    "" for a file measured before runs did."""
    variants = {name: s for name, s in doc["summary"]["variants"].items() if "cpu_us_per_msg" in s}
    if not variants:
        return ""
    rows = [[named(name), s["runs"],
             *(f"{s['cpu_us_per_msg'][kind]['median']:,.1f}" for kind in CPU_KINDS),
             spread(s["cpu_us_per_msg"]["total"], 1), cores_busy(s), f"{s['consumer_peak_rss_mib']['median']:,.0f}"]
            for name, s in variants.items()]
    return (markdown_table(["Variant", "Runs", *(f"µs/msg: {label}" for label in CPU_KINDS.values()),
                            "µs/msg, all, median (min–max)", "Cores busy", "Consumer peak RSS (MiB)"], rows)
            + "\n\nCPU per message: each process's user and system CPU (from /proc) between the first credit and "
            "the last, divided by the messages applied between them; medians over the runs. Cores busy: that median "
            "times the median msgs/s, the cores the processes kept busy between them. On this shared virtual "
            "machine the same code's CPU per message moved from one invocation to another about as much as its "
            "msgs/s (docs/throughput.md): compare it within one table."
            f"{self_timed_cpu(doc)}\n\n")


def cpu_of_runs(mine: list[dict]) -> tuple[str, ...]:
    """Table cells for runs whose file summarised no CPU (the growing inbox): the medians of
    the consumer's CPU per message (Python and librdkafka), the Postgres backends' and all
    processes', and of the consumer's peak RSS; dashes if any run did not record them."""
    if not mine or any(not r.get("cpu_us_per_msg") for r in mine):
        return ("–",) * 4

    def median_of(kinds):
        return statistics.median(sum(r["cpu_us_per_msg"][kind] for kind in kinds) for r in mine)
    return (f"{median_of(('consumer_python', 'consumer_librdkafka')):,.1f}",
            f"{median_of(('postgres_backends',)):,.1f}", f"{median_of(('total',)):,.1f}",
            f"{statistics.median(r['consumer_peak_rss_mib'] for r in mine):,.0f}")


def cores_busy(stats: dict) -> str:
    """The cores a variant's processes kept busy: CPU per message times messages per second (medians)."""
    return f"{results.cores_busy(stats):.2f}"


def self_timed_cpu(doc: dict) -> str:
    """What the CPU table says of raw and the db ceilings, which time themselves."""
    stats = doc["summary"]["variants"]

    def base(name):
        return name.partition(", ")[0].partition(":")[0].partition("@")[0]
    mine = [name for name in stats if base(name) in ("raw", "db", "db-d")]
    read = {base(name) for name in mine if "cpu_us_per_msg" in stats[name]}
    if not mine:
        return ""
    if not read:
        return " raw and the db ceilings time themselves and are not read."
    text = []
    if "raw" in read:
        text.append(" raw times itself and reads its own CPU, from /proc, from its first message to its last "
                    "(the first fetch's other messages are read before the window opens, a few hundred out of "
                    "the run's).")
    if read & {"db", "db-d"}:
        text.append(" The db ceilings time themselves and read their own CPU from their first batch to their "
                    "last, their threads held alive until it is read; they read nothing from Kafka, so the "
                    "broker's column is its idle work, and their peak RSS holds the credits they build up front.")
    if len(read) < len({base(name) for name in mine}) or any("cpu_us_per_msg" not in stats[n] for n in mine):
        text.append(" Rows without CPU figures were not read.")
    return "".join(text)


def batch_section() -> str:
    sweep = need("throughput-batch.json")
    rows = ["| Batch size | msgs/s, median (min–max) |", "|---:|---:|"]
    for name, s in sweep["summary"]["variants"].items():
        rows.append(f"| {name.split('@')[1]} | {spread(s['msgs_per_s'], 1)} |")
    c = sweep["config"]
    return (cpu_table(sweep) + "\n".join(rows) + f"\n\nVariant d, {c['runs']} runs of {c['events']:,} messages per "
            f"batch size, interleaved. From `results/throughput-batch.json`: {provenance(sweep)}.\n")


REBALANCE_SETS = [(f"rebalance-{v}-{p}.json", p) for v in ("b", "c", "d", "k", "o", "p")
                  for p in ("classic", "consumer")] + [
    (f"rebalance-{v}-consumer-stall20.json", "consumer") for v in ("b", "c")]


def named(name: str) -> str:
    """A measure_throughput run name as the tables print it: p@2 is p on 2 connections, k@16 k
    with 16 lanes, d@50 d with batches of 50, p:3 three processes of p; an account sweep's
    names end in their accounts (p@2, 10,000 accounts)."""
    base, _, accounts = name.partition(", ")
    base, _, consumers = base.partition(":")
    variant, _, swept = base.partition("@")
    unit = {"k": "lane", "d": "message"}.get(variant, "connection")  # what @N sweeps
    tail = " a batch" if variant == "d" else ""

    def counted(n, noun):
        return f", {n} {noun}{'' if n == '1' else 's'}"
    return (VARIANT_NAMES.get(variant, variant) + (counted(swept, unit) + tail if swept else "")
            + (counted(consumers, "consumer") if consumers else "") + (f", {accounts}" if accounts else ""))


def throughput_tables(doc: dict) -> str:
    """A measure_throughput invocation: msgs/s per variant, then its paired ratios."""
    stats, ratios = doc["summary"]["variants"], doc["summary"]["ratios"]

    text = markdown_table(["Variant", "Runs", "msgs/s, median (min–max)"],
                          [[named(name), s["runs"], spread(s["msgs_per_s"], 1)] for name, s in stats.items()])
    return text + "\n\n" + markdown_table(["Ratio", "Median of per-run ratios (min–max)"],
                                           [[name, spread(r, 3)] for name, r in ratios.items()])


def pipelined_section() -> str:
    """p beside d and the ceilings: one invocation, variants interleaved run by run; then p on
    two connections against the two-connection ceiling, in another."""
    doc = need("throughput-pipelined.json", "python measure_throughput.py --variants raw,db-d,db,d,p --runs 5 "
                                             "--out results/throughput-pipelined.json")
    c = doc["config"]
    text = cpu_table(doc) + throughput_tables(doc) + (
        f"\n\n{c['runs']} runs of {c['events']:,} credits per variant on {c['partitions']} partitions, "
        f"batches of {c['batch']}, no handler sleep, interleaved run by run in one invocation. db and "
        "db-d read nothing from Kafka and decode nothing: they run the same number of credits, already "
        "built, through the statements one batch after another on one connection, and time "
        f"themselves. From `results/throughput-pipelined.json`: {provenance(doc)}.\n")
    if two := load("throughput-connections.json"):
        t = two["config"]
        text += "\nTwo statements at once (p@2: the worker's `--connections 2`; db@2: the ceiling, two " \
                "connections taking the batches in turn):\n\n" + cpu_table(two) + throughput_tables(two) + (
                    f"\n\n{t['runs']} runs of {t['events']:,} credits per variant, batches of {t['batch']}, "
                    f"interleaved in another invocation. From `results/throughput-connections.json`: "
                    f"{provenance(two)}.\n")
    text += "\n" + goal_line(doc, two) + "\n"
    return text


P_GOAL = 1.5  # what p was built for: half again d's rate, on this machine


def goal_line(one: dict, two: dict | None) -> str:
    """Whether p met its goal, in one sentence, from the ratios of the files above."""
    alone = one["summary"]["ratios"].get("p/d")
    if alone is None:
        return ""
    said = (f"p on one connection makes {alone['median']:.2f}× d's rate in the first invocation (median; "
            f"{alone['min']:.2f}–{alone['max']:.2f}): {'at or past' if alone['median'] >= P_GOAL else 'short of'} the "
            f"{P_GOAL:g}× p was built for.")
    both = (two or {}).get("summary", {}).get("ratios", {}).get("p@2/d")
    if both:
        d_of = {r["run"]: r["msgs_per_s"] for r in two["runs"] if r["variant"] == "d"}
        paired = [r["msgs_per_s"] / d_of[r["run"]] for r in two["runs"] if r["variant"] == "p@2" and r["run"] in d_of]
        passed = sum(x >= P_GOAL for x in paired)
        said += (f" On two connections (p@2) it makes {both['median']:.2f}× ({both['min']:.2f}–{both['max']:.2f}), "
                 f"past {P_GOAL:g}× in {passed} of {len(paired)} runs.")
    return said


def events_of_text(config: dict) -> str:
    """", c: 5,000": the variants a measure_throughput run gave another --events (--events-of)."""
    return "".join(f", {v}: {n:,}" for v, n in config.get("events_of", {}).items())


def growth_section() -> str:
    """c, d and p on inboxes already holding millions of IDs, random v4 or time-ordered v7."""
    doc = need("throughput-inbox.json", "python measure_throughput.py --variants c,d,p --inbox-rows "
                                        "0,10000000,50000000 --id-type text,uuid-v7 --events-of c=5000 "
                                        "--out results/throughput-inbox.json")
    rows = []
    for variant, types in doc["summary"]["growth"].items():
        for id_type, sizes in types.items():
            for size, e in sizes.items():
                mine = [r for r in doc["runs"] if (r["variant"], r["id_type"], str(r["inbox_rows"]))
                        == (variant, id_type, size)]
                rows.append([VARIANT_NAMES.get(variant, variant), "UUIDv7" if id_type == "uuid-v7" else "UUIDv4",
                             f"{int(size):,}", e["runs"], spread(e["msgs_per_s"], 1),
                             spread(e["vs_empty"], 3) if e.get("vs_empty") else "–",
                             spread(e["vs_text"], 3) if e.get("vs_text") else "–",
                             f"{e['wal_bytes_per_msg']['median']:,.0f}",
                             f"{e['inbox_index_reads_per_msg']['median']:.3f}", *cpu_of_runs(mine)])
    c, server = doc["config"], doc["config"]["server"]
    events = events_of_text(c)
    return (markdown_table(["Variant", "IDs", "Inbox rows before", "Runs", "msgs/s, median (min–max)",
                            "÷ empty inbox", "v7 ÷ v4", "WAL bytes/msg", "Index reads/msg",
                            "µs/msg: consumer", "µs/msg: Postgres, its backends", "µs/msg, all",
                            "Consumer peak RSS (MiB)"], rows, text_columns=3)
            + f"\n\n{c['runs']} runs per row, {c['events']:,} credits a run{events}, on "
            f"{c['partitions']} partitions. Each size is one block: the inboxes (`processed_messages`, key "
            "(consumer, message_id), IDs as text) are filled to it once, then every variant and ID type runs in "
            "turn, interleaved and rotating, so **v7 ÷ v4 is side by side**; **÷ empty** pairs run N of a size "
            "with run N of the empty inbox, measured minutes to half an hour apart, so it carries the machine's drift. "
            "The run's own credits carry IDs of the same type as the fill. WAL bytes/msg: "
            "pg_current_wal_insert_lsn() before and after, per credit; index reads/msg: the inbox key's blocks "
            "read from outside shared_buffers (pg_statio; the kernel's page cache may still have held them). "
            f"Server: shared_buffers {server['shared_buffers']}, max_wal_size {server['max_wal_size']}, "
            f"checkpoint_timeout {server['checkpoint_timeout']}, full_page_writes {server['full_page_writes']}, "
            f"synchronous_commit {server['synchronous_commit']}. From `results/throughput-inbox.json`: "
            f"{provenance(doc)}.\n")


def consumers_section() -> str:
    """c, d and p with 1, 2 and 3 processes in one group."""
    doc = need("throughput-consumers.json", "python measure_throughput.py --variants c,d,p --consumers 1,2,3 "
                                            "--events-of c=20000 --out results/throughput-consumers.json")
    stats, ratios = doc["summary"]["variants"], doc["summary"]["ratios"]
    rows = []
    for name, s in stats.items():
        variant, _, count = name.partition(":")
        ratio = ratios.get(f"{name}/{variant}:1")
        rows.append([VARIANT_NAMES.get(variant, variant), count, s["runs"], spread(s["msgs_per_s"], 1),
                     spread(ratio, 3) if ratio else "–"])
    c = doc["config"]
    events = events_of_text(c)
    return (cpu_table(doc) + markdown_table(["Variant", "Consumers", "Runs", "msgs/s, median (min–max)",
                                            "÷ one consumer, paired by run"], rows, text_columns=1)
            + f"\n\n{c['runs']} runs of {c['events']:,} credits{events}, on {c['partitions']} partitions, that many "
            "worker processes in one group (classic protocol, so the partitions are split 6, 3+3, 2+2+2), every "
            "count of every variant interleaved in one invocation; timed from the first to the last ledger row of "
            f"the run. From `results/throughput-consumers.json`: {provenance(doc)}.\n")


def saturation_section() -> str:
    """#31: latency at fractions of each variant's capacity, measured in each run just before."""
    doc = need("latency-saturation.json", "python -m measurements.measure_latency --variants c,d,p --load "
                                          "0.5,0.8,0.95 --capacity-events-of c=3000 --runs 5 "
                                          "--out results/latency-saturation.json")
    rows, short = [], []
    for name, s in doc["summary"].items():
        variant, _, load = name.partition("@")
        mine = [r for r in doc["runs"] if r["variant"] == variant and f"{r['load'] * 100:g}%" == load]
        asked = statistics.median(r["rate"] for r in mine)
        if s["offered_per_s"]["median"] < 0.9 * asked:  # the publisher, not the consumer, set the pace
            short.append(f"{variant} at {load}")
        rows.append([VARIANT_NAMES.get(variant, variant), load, s["runs"], spread(s["capacity_per_s"]),
                     f"{asked:,.0f}", spread(s["offered_per_s"]), spread(s["p50_ms"], 1), spread(s["p99_ms"], 1),
                     spread(s["max_ms"], 1), s["totals"]["duplicates"] + s["totals"]["lost"]])
    c = doc["config"]
    backlogs = ", ".join(f"{v} {n:,}" for v, n in c["capacity_events_of"].items())
    caveat = (f" Where the offered rate falls short of the asked one by more than a tenth ({', '.join(short)}), "
              "the publisher, one Python process sharing the two cores, could not send faster: those rows "
              "are latency at the publisher's pace, not at that share of the consumer's capacity."
              if short else "")
    return (markdown_table(["Variant", "Load", "Runs", "Capacity, msgs/s (the backlog)", "Asked, msgs/s (median)",
                            "Offered, msgs/s", "p50, ms", "p99, ms", "Largest, ms", "Duplicates + lost"], rows,
                           text_columns=2)
            + f"\n\nMedian (min–max) over runs of each run's figure. Each run: warm-up credits, then a backlog of "
            f"{c['capacity_events']:,} credits ({backlogs}) sent at once, whose rate from the consumer's first ledger "
            f"row to its last is the capacity; once it has drained, the publisher offers that fraction of it for "
            f"{c['seconds']:g} s, and latency is from each offered record's CreateTime to its ledger row. Variants "
            f"and loads interleaved in one invocation.{caveat} From `results/latency-saturation.json`: "
            f"{provenance(doc)}.\n")


def latency_section() -> str:
    doc = need("latency.json", "python -m measurements.measure_latency --variants c,d,p --rates 200,500,5000 --runs 5")
    rows = []
    for name, s in doc["summary"].items():
        variant, _, rate = name.partition("@")
        rows.append([VARIANT_NAMES.get(variant, variant), rate, s["runs"], spread(s["offered_per_s"]),
                     spread(s["p50_ms"], 1), spread(s["p99_ms"], 1), spread(s["max_ms"], 1),
                     s["totals"]["duplicates"] + s["totals"]["lost"]])
    c = doc["config"]
    return (markdown_table(["Variant", "Offered", "Runs", "Sent, msgs/s (from CreateTimes)", "p50, ms", "p99, ms",
                            "Largest, ms",
                            "Duplicates + lost"], rows, text_columns=2)
            + f"\n\nMedian (min–max) over runs of each run's figure. Each run: one warm-up credit per partition "
            "applied, then "
            f"{c['seconds']:g} s of credits at the offered rate from a paced publisher into {c['partitions']} "
            "partitions while one consumer reads them; latency from the record's CreateTime to its ledger row's "
            "clock_timestamp() (inside the transaction, just before its commit); variants and rates interleaved "
            f"in one invocation. From `results/latency.json`: {provenance(doc)}.\n")


def latency_batch_section() -> str:
    """#31: the floor the batch wait sets under d's and p's latency, and --batch, which lowers it."""
    doc = need("latency-batch.json", "python -m measurements.measure_latency --variants c,d,p --rates 200,5000 "
                                     "--sweep-batch 50,10,1 --runs 5 --out results/latency-batch.json")
    c = doc["config"]
    rows = []
    for name, s in doc["summary"].items():
        at, _, swept = name.partition(" batch ")  # d@200/s batch 10: d at a swept batch
        variant, _, rate = at.partition("@")
        batch = f"{int(swept):,}" if swept else f"{c['batch']:,} (--batch)" if variant in ("d", "p") else "–"
        rows.append([VARIANT_NAMES.get(variant, variant), rate, batch,
                     s["runs"], spread(s["offered_per_s"]), spread(s["credits_per_transaction"], 1),
                     spread(s["p50_ms"], 1), spread(s["p99_ms"], 1), spread(s["max_ms"], 1),
                     s["totals"]["duplicates"] + s["totals"]["lost"]])
    return (markdown_table(["Variant", "Offered", "Batch", "Runs", "Sent, msgs/s", "Credits per transaction",
                            "p50, ms", "p99, ms", "Largest, ms", "Duplicates + lost"], rows, text_columns=3)
            + f"\n\nMedian (min–max) over runs of each run's figure. As the table above: {c['seconds']:g} s of "
            f"credits at each offered rate into {c['partitions']} partitions, one consumer, latency from CreateTime "
            "to the ledger row; d and p at --batch and at each swept batch, every case interleaved in one "
            "invocation. Credits per transaction: the offered credits over the transactions that wrote them "
            "(ledger rows share their transaction's xmin), the batches the consumer really made. From "
            f"`results/latency-batch.json`: {provenance(doc)}.\n")


def rebalance_section() -> str:
    post = need("post-figures.json")["rebalance"]
    rows = ["| Variant | Group protocol | Stall (s) | Runs | Evictions | Duplicates | Lost | Skipped duplicates "
            "| Partitions next to another member / back to the zombie | Handover after eviction (s, median) "
            "| Failed offset commits "
            "| Exact balances |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    found, sources = None, []
    for name, protocol in REBALANCE_SETS:
        doc = load(name)
        if not doc:
            continue
        found = found or doc
        sources.append(f"`results/{name}` ({measured_by(doc)})")
        for variant, s in doc["summary"].items():
            t = s["totals"]
            failed = ", ".join(f"{code} ×{n}" for code, n in s["commit_failed"].items()) or "none"
            handover = s.get("handover_s")
            rows.append(f"| {VARIANT_NAMES[variant]} | {protocol} | {doc['config']['slow_seconds']:g} | {s['runs']} "
                        f"| {t['evictions']} | {t['duplicates']} | {t['lost']} | {t['skipped']} "
                        f"| {t['moved_to_other']} / {t['back_to_zombie']} "
                        f"| {'–' if handover is None else f'{handover:.1f}'} "
                        f"| {failed} | {s['balances_exact_runs']} of {s['runs']} |")
    for variant, p in post["variants"].items():
        rows.append(f"| post: {VARIANT_NAMES[variant]} | classic | {post['config']['slow_seconds']:g} "
                    f"| {post['config']['runs']} | {p['evictions']} | {p['duplicates']} | – | {p['skipped']} | – | – "
                    f"| {post['commit_failed']} | – |")
    if found is None:
        return "\n".join(rows) + "\n\n_No M2 results yet: run `python measure_rebalance.py`._\n"
    c = found["config"]
    return ("\n".join(rows) + f"\n\nTotals over all runs. Each run: {c['events']:,} credits, {c['consumers']} "
            f"consumers, every {c['slow_every']}th event stalls (the Stall column) the first time it is handled, "
            f"max.poll.interval.ms {c['max_poll_interval_ms']}, session timeout {c['session_timeout_ms']} ms, "
            f"heartbeat a third of it (under `consumer`, both set on the group at the broker). Handover: from "
            f"librdkafka's MAXPOLL line to the next assignment of one of the evicted worker's partitions, to another "
            f"worker or back to the zombie, read from the workers' logs. Machine and versions: "
            f"{provenance(found).split('; code:')[0]}. Each row's code: {'; '.join(sources)}.\n")


def frameworks_section() -> str:
    """M9: the frameworks under M1's kills and M2's zombie, beside b and c measured the same way."""
    kill = need("kill-frameworks.json", "python measure_kill.py --variant frameworks --runs 5 --out "
                                        "results/kill-frameworks.json")
    zombie = load("rebalance-frameworks-classic.json")
    beside = {"kill": load("kill.json"), "rebalance": {v: load(f"rebalance-{v}-classic.json") for v in ("b", "c")}}
    m1 = {**{v: (beside["kill"]["summary"][v], [r for r in beside["kill"]["runs"] if r["variant"] == v])
             for v in ("b", "c") if beside["kill"] and v in beside["kill"]["summary"]},
          **{v: (s, [r for r in kill["runs"] if r["variant"] == v]) for v, s in kill["summary"].items()}}
    m2 = {**{v: doc["summary"][v] for v, doc in beside["rebalance"].items() if doc},
          **(zombie["summary"] if zombie else {})}
    rows = []
    for variant, (s, runs) in m1.items():
        z = m2.get(variant)
        rows.append([VARIANT_NAMES[variant], s["runs"], sum(r["kills"] for r in runs), spread(s["duplicates"]),
                     spread(s["lost"]), f"{s['balances_exact_runs']} of {s['runs']}",
                     *([z["runs"], z["totals"]["evictions"], z["totals"]["duplicates"], z["totals"]["lost"]]
                       if z else ["–"] * 4)])
    c = kill["config"]
    sources = ["`results/kill-frameworks.json`: " + provenance(kill)]
    if zombie:
        sources.append("`results/rebalance-frameworks-classic.json`: " + provenance(zombie))
    return (markdown_table(["Variant", "M1 runs", "Kills", "Duplicates per run", "Lost per run", "Exact balances",
                            "M2 runs", "Evictions", "Duplicates", "Lost"], rows)
            + f"\n\nM1: median (min–max) per run; each run {c['events']:,} credits on {c['partitions']} partitions, "
            f"up to {c['kills']} SIGKILLs {c['life'][0]:g}–{c['life'][1]:g} s after the worker's first effect, "
            f"handler sleep {c['work_ms']:g} ms, seed {c['seed']}; b and c from `results/kill.json`, the same "
            "parameters. M2: totals over the runs, M2's parameters (b and c from `results/rebalance-b-classic.json` "
            "and `-c-`). Quix's sink writes ledger rows and credits no balance, so its balances are never exact. "
            "From " + "; ".join(sources) + ".\n")


def async_commit_section() -> str:
    doc = load("async-commit.json")
    if doc is None:
        return "  Not measured yet: `python -m measurements.measure_async_commit`.\n"
    rows = [[{"stored-offsets": "`commit(asynchronous=True)`, FastStream's", "the-message":
              "`commit(message=msg, asynchronous=True)`"}[v], s["runs"], s["totals"]["trials"],
             s["totals"]["past_the_message"]] for v, s in doc["summary"].items()]
    table = markdown_table(["The commit, then the next poll at once", "Runs", "Trials",
                            "Committed past the message in hand"], rows)
    return ("\n".join("  " + line for line in table.splitlines()) + f"\n\n  Each trial a fresh group on a topic of "
            f"10 records: one poll, the commit, the next poll, a second's wait, the committed offset read back. "
            f"From `results/async-commit.json`: {provenance(doc)}.\n")


def frameworks_throughput_section() -> str:
    """M9's frameworks beside c, d and p in one invocation (throughput-frameworks.json)."""
    doc = load("throughput-frameworks.json")
    if doc is None:
        return ("Not measured yet: `python measure_throughput.py --variants c,d,p,fs-ack,fs-inbox,qx-eos-keyed "
                "--out results/throughput-frameworks.json`.\n")
    c = doc["config"]
    sizes = ", ".join(f"{v} {n:,}" for v, n in c.get("events_of", {}).items())
    return (cpu_table(doc) + throughput_tables(doc)
            + f"\n\n{c['runs']} runs per variant, interleaved run by run in one invocation; {c['events']:,} messages a "
            f"run ({sizes} for the fast ones), no handler sleep, batches of {c['batch']}. Quix's sink writes a "
            "checkpoint's rows in one statement at the checkpoint, so the ledger's clock, which times every other "
            "row here, sees its writes and not its reading: qx-eos-keyed's msgs/s and CPU window cover its sink's "
            "writes only, and are not comparable with the others'. From `results/throughput-frameworks.json`: "
            f"{provenance(doc)}.\n")


def contention_section() -> str:
    """#31: the same variants with the credits spread over 10,000 accounts as well as the lab's
    100, where every batch of 500 locks most accounts (throughput-accounts.json, and with 1-3
    consumers, throughput-consumers-accounts.json)."""
    parts = []
    for name, what in (("throughput-accounts.json", "one consumer process, p and p-lean also on two connections"),
                       ("throughput-consumers-accounts.json", "1, 2 and 3 consumer processes in one group")):
        doc = load(name)
        if doc is None:
            continue
        stats, ratios, c = doc["summary"]["variants"], doc["summary"]["ratios"], doc["config"]
        counts = [f"{n:,} accounts" for n in sorted(c["accounts"])]  # each paired with the fewest
        bases = list(dict.fromkeys(key.partition(", ")[0] for key in stats))
        rows = []
        for base in bases:
            cells = [named(base)]
            for count in counts:
                s = stats.get(f"{base}, {count}")
                cells += [spread(s["msgs_per_s"], 0) if s else "–",
                          f"{s['cpu_us_per_msg']['total']['median']:,.1f}" if s and "cpu_us_per_msg" in s else "–"]
            ratio = ratios.get(f"{base}, {counts[-1]}/{base}, {counts[0]}")
            rows.append([*cells, spread(ratio, 2) if ratio else "–"])
        headers = ["Variant"]
        for count in counts:
            headers += [f"{count}: msgs/s, median (min–max)", f"{count}: CPU µs/msg"]
        within = {}  # "p@2 ÷ p" -> count -> paired ratio: two connections against one, per account count
        rate = {(r["variant"], r.get("accounts"), r["run"]): r["msgs_per_s"] for r in doc["runs"]}
        for (variant, accounts, run), value in rate.items():
            one = (variant.partition("@")[0], accounts, run)
            if variant.endswith("@2") and one in rate:
                within.setdefault(f"{variant} ÷ {one[0]}", {}).setdefault(f"{accounts:,} accounts", []).append(
                    value / rate[one])
        within = {name: {count: {"median": statistics.median(v), "min": min(v), "max": max(v)}
                         for count, v in by.items()} for name, by in within.items()}
        extra = ("\n\n" + markdown_table(["Paired by run, within one account count", *counts],
                                          [[name, *(spread(by.get(n), 2) if by.get(n) else "–" for n in counts)]
                                           for name, by in within.items()], text_columns=1)) if within else ""
        parts.append(f"{what.capitalize()}:\n\n" + cpu_table(doc) + markdown_table(
            [*headers, f"{counts[-1]} ÷ {counts[0]}, paired by run"], rows, text_columns=1) + extra
            + f"\n\n{c['runs']} runs of {c['events']:,} credits{events_of_text(c)} per variant and count on "
            f"{c['partitions']} partitions, batches of {c.get('batch', 500)}, every variant and count interleaved "
            f"run by run in one invocation. From `results/{name}`: {provenance(doc)}.\n")
    if not parts:
        raise Missing("_Not measured yet: `python measure_throughput.py --variants d,p,p@2,p-lean,p-lean@2 "
                      "--accounts 100,10000 --runs 5 --events 100000 --out results/throughput-accounts.json`._\n")
    return "\n".join(parts)


TARGET_CUT = 0.30  # issue #31: p's CPU per message at least 30% lower


def lean_section() -> str:
    """#31: p's CPU per message cut step by step, each step beside the one before in one
    invocation (throughput-lean.json, variants/consume_lean.py)."""
    doc = need("throughput-lean.json", "python measure_throughput.py --variants "
                                       "p,p-lean-py,p-lean-sql,p-lean,p@2,p-lean@2 --runs 5 --events 200000 "
                                       "--out results/throughput-lean.json")
    c, stats = doc["config"], doc["summary"]["variants"]
    by_run = {(r["variant"], r["run"]): r["cpu_us_per_msg"]["total"] for r in doc["runs"] if r.get("cpu_us_per_msg")}
    lines = []
    for lean, base in (("p-lean", "p"), ("p-lean@2", "p@2")):
        paired = [1 - by_run[lean, run] / by_run[base, run] for v, run in by_run if v == lean and (base, run) in by_run]
        if paired and lean in stats and base in stats:
            cut = {"median": statistics.median(paired), "min": min(paired), "max": max(paired)}
            before, after = (stats[v]["cpu_us_per_msg"]["total"]["median"] for v in (base, lean))
            verdict = {(True, True): "both", (True, False): "the paired median only",
                       (False, True): "the medians only", (False, False): "neither"}[
                (cut["median"] >= TARGET_CUT, 1 - after / before >= TARGET_CUT)]
            lines.append(f"- {lean} against {base}: CPU per message, all processes, {before:.1f} → {after:.1f} µs "
                         f"(medians over the runs: {1 - after / before:.0%} less); paired run by run, the cut's "
                         f"median is {cut['median']:.0%} ({cut['min']:.0%}–{cut['max']:.0%}); the issue's "
                         f"{TARGET_CUT:.0%} is reached by {verdict}; "
                         f"msgs/s ×{doc['summary']['ratios'][f'{lean}/{base}']['median']:.2f} "
                         f"({doc['summary']['ratios'][f'{lean}/{base}']['min']:.2f}–"
                         f"{doc['summary']['ratios'][f'{lean}/{base}']['max']:.2f}).")
    return (cpu_table(doc) + "\n".join(lines) + "\n\n" + throughput_tables(doc)
            + f"\n\n{c['runs']} runs of {c['events']:,} credits per variant on {c['partitions']} partitions, "
            f"batches of {c.get('batch', 500)}, no handler sleep, interleaved run by run in one invocation. From "
            f"`results/throughput-lean.json`: {provenance(doc)}.\n")


BARE_COMMAND = ("python measure_throughput.py --variants p,p-bare --runs 5 --events 100000 "
                "--out results/throughput-bare.json")


def bare_section() -> str:
    """#31: the inbox's own cost at batch scale, p against p-bare (p's statement without the
    claim) in one invocation: the batch version of c against b."""
    doc = need("throughput-bare.json", BARE_COMMAND)
    c, stats = doc["config"], doc["summary"]["variants"]
    rate = results.paired_by_run(doc, "p", "p-bare", lambda r: r["msgs_per_s"])
    cpu = results.paired_by_run(doc, "p", "p-bare", lambda r: (r.get("cpu_us_per_msg") or {}).get("total"))
    lines = []
    if rate:
        lines.append(f"- p/p-bare, msgs/s paired run by run: {spread(rate, 3)}; the inbox costs p "
                     f"{1 - rate['median']:.0%} of its rate (the median).")
    if cpu and all("cpu_us_per_msg" in stats.get(v, {}) for v in ("p", "p-bare")):
        p, bare = (stats[v]["cpu_us_per_msg"]["total"]["median"] for v in ("p", "p-bare"))
        lines.append(f"- CPU per message, all processes: p {p:.1f} µs against p-bare {bare:.1f} µs (medians); "
                     f"paired run by run, p/p-bare {spread(cpu, 3)}: the claim is "
                     f"{1 - 1 / cpu['median']:.0%} of p's CPU per message.")
    rates = markdown_table(["Variant", "Runs", "msgs/s, median (min–max)"],
                           [[named(name), s["runs"], spread(s["msgs_per_s"], 1)] for name, s in stats.items()])
    return (cpu_table(doc) + rates + "\n\n" + "\n".join(lines)
            + f"\n\n{c['runs']} runs of {c['events']:,} credits per variant on {c['partitions']} partitions, "
            f"p's batches of {c.get('batch', 500)}, p-bare's of the worker's default (500), no handler sleep, "
            "interleaved run by run in one invocation; p-bare is p with the "
            "claim taken out of its statement, and credits a batch read twice twice (`tests/test_bare.py`). "
            f"`{BARE_COMMAND}`; from `results/throughput-bare.json`: {provenance(doc)}.\n")


def retention_section() -> str:
    """M4b: the replay from further back than the inbox remembers, per variant and window."""
    doc = need("retention.json", "python -m measurements.measure_retention --variant all --runs 5")
    c = doc["config"]
    names = {**VARIANT_NAMES, "v7": "v7: the lean inbox, UUIDv7 IDs, a partition a day"}
    rows = []
    for key, s in doc["summary"].items():
        variant, window = key.split(" ")
        mine = [r for r in doc["runs"] if r["variant"] == variant and r["window"] == window]
        t = s["totals"]
        rows.append([names[variant], f"{mine[0]['window_days']} days ({window})", s["runs"], f"{t['duplicates']:,}",
                     t["lost"], f"{t['dead_lettered']:,}", f"{t['alarm']} of {s['runs']}"])
    return (markdown_table(["Variant", "Inbox keeps", "Runs", "Duplicates", "Lost", "Dead-lettered",
                            "Alarm before the replay"], rows, text_columns=2)
            + f"\n\nTotals over all runs. Each run: {c['old']:,} credits consumed {c['age_days']} days ago (the owner "
            f"moves their inbox rows' `processed_at` back {c['age_days']} days; v7's IDs carry that time) and "
            f"{c['recent']:,} consumed today; retention keeps the window of the row (retention.sql's batched "
            "delete; v7 drops whole days); the alarm is `lab.retention --check` against the replay's age, run "
            "before the replay; then the group is reset to the earliest offsets and the topic read again. "
            f"From `results/retention.json`: {provenance(doc)}.\n")


RETENTION_MODES = {
    "alone": "p alone, the backlog in processed_messages",
    "delete": "p, retention.sql's batched DELETE beside it",
    "partitioned": "p alone, processed_messages partitioned by the ID's day",
    "drop": "p, the expired days dropped beside it (inbox_v7_drop_before)",
    "detach": "p, each expired day detached concurrently, then dropped, beside it",
}


def retention_load_section() -> str:
    """#31: p's throughput, longest stall and WAL while retention forgets a backlog beside it."""
    doc = need("retention-load.json", "python -m measurements.measure_retention_load --runs 5")
    c = doc["config"]
    rows = []
    for mode, s in doc["summary"].items():
        ratio = s["vs_baseline"]
        rows.append([RETENTION_MODES[mode], s["runs"], spread(s["msgs_per_s"]),
                     "–" if mode == s["baseline"] or ratio is None else f"{spread(ratio, 2)} of {s['baseline']}",
                     spread(s["longest_stall_ms"]), spread(s["wal_mb"], 1),
                     "–" if s["retention_s"] is None else spread(s["retention_s"], 1),
                     "–" if s["retention_s"] is None else f"{s['retention_within_window']} of {s['runs']}",
                     s["totals"]["duplicates"] + s["totals"]["lost"],
                     f"{statistics.median(r['expired_left'] for r in doc['runs'] if r['mode'] == mode):,.0f}"])
    low, high = c["backlog_days"]
    return (markdown_table(["Mode", "Runs", "p, msgs/s", "Against", "Longest stall, ms", "WAL, MB", "Retention, s",
                            "Retention done before p's last credit", "Duplicates + lost", "Expired IDs left, a run"],
                           rows)
            + f"\n\nMedian (min–max) over runs; Against pairs each run with the same-numbered run of the mode "
            f"without retention on the same layout. Each run: {c['events']:,} credits with UUIDv7 IDs, published "
            f"first, drained by one p worker (batches of {c['batch']}) whose inbox already holds {c['backlog']:,} IDs "
            f"from {low} to {high} days back, past a {c['window_days']}-day window; retention starts at p's first "
            "credit. WAL is what the server wrote from p's start until p and retention were both done; the longest "
            "stall is the longest gap between two credits. The unpartitioned and the partitioned inbox differ "
            "in more than retention (p writes into one table with two indexes, or into today's small partition), so "
            "each retention mode is paired with its own layout alone. Modes interleaved run by run, in a rotating "
            f"order, in one invocation. From `results/retention-load.json`: {provenance(doc)}.\n")


LAYOUT_NAMES = {
    "text": "text (UUID string)", "uuid-v4": "uuid, v4 (random)", "uuid-v7": "uuid, v7 (`uuidv7()`)",
    "v7-pk-range": "lean: v7 key only, expired by key range", "v7-partitioned": "lean: v7 key only, a partition a day",
}


def storage_section() -> str:
    storage, post = need("storage.json", "python measure_storage.py --runs 5"), need("post-figures.json")["storage"]
    rows = ["| message_id type | Heap bytes/row | Index bytes/row | Total bytes/row | + cleanup index | "
            "Post: heap | Post: index | Post: total |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for layout, s in storage["summary"]["size"].items():
        p = post["layouts"][layout]
        rows.append(f"| {LAYOUT_NAMES[layout]} | {spread(s['heap_bytes_per_row'], 1)} "
                    f"| {spread(s['index_bytes_per_row'], 1)} | {spread(s['total_bytes_per_row'], 1)} "
                    f"| {spread(s['cleanup_index_bytes_per_row'], 1)} | {p['heap_bytes_per_row']} "
                    f"| {p['index_bytes_per_row']} | {p['total_bytes_per_row']} |")
    c = storage["config"]
    return ("\n".join(rows) + f"\n\nMedian (min–max) of {c['runs']} runs, {c['rows']:,} rows each in a table shaped "
            "like `processed_messages`, after `VACUUM (ANALYZE)`; the cleanup index is the `processed_at` index that "
            f"`retention.sql` creates. From `results/storage.json`: {provenance(storage)}.\n")


def layouts_section() -> str:
    storage = need("storage.json")
    rows = ["| Layout | Bytes/row, every index it needs | Time to expire | WAL written | Dead tuples left "
            "| Kept exactly the rows inside the window |", "|---|---:|---:|---:|---:|---:|"]
    for layout, s in storage["summary"]["expiry"].items():
        name = LAYOUT_NAMES[layout] + ("" if layout.startswith("v7-") else " + cleanup index")
        rows.append(f"| {name} | {spread(s['total_bytes_per_row'], 1)} | {s['expire_s']['median']:.2f} s "
                    f"| {s['expire_wal_bytes']['median'] / 1e6:,.1f} MB | {s['dead_tuples_after']['median']:,.0f} "
                    f"| {s['kept_exactly_recent_runs']} of {s['runs']} runs |")
    c = storage["config"]
    return ("\n".join(rows) + f"\n\nMedians of {c['runs']} runs. Each layout holds {c['rows']:,} IDs from the "
            f"{c['expired_days']} days before a {c['window_days']}-day window and {c['recent_rows']:,} inside it; the "
            "first three expire them with `retention.sql`'s batched delete (10,000 a batch), the lean ones by "
            f"primary-key range or by dropping whole days. From `results/storage.json`: {provenance(storage)}.\n")


def sizing_section() -> str:
    storage, post = need("storage.json"), need("post-figures.json")["storage"]["sizing"]
    z = storage["summary"]["sizing"]
    rows = [f"| Layout | Bytes/row, measured, cleanup index included | {z['rows']:,} rows | Post's arithmetic |",
            "|---|---:|---:|---:|"]
    for layout, p in z["layouts"].items():
        rows.append(f"| {LAYOUT_NAMES[layout]} | {p['bytes_per_row']:.1f} | {p['gb']:.1f} GB "
                    f"| {str(post['gb'][layout]) + ' GB' if layout in post['gb'] else '–'} |")
    return ("\n".join(rows) + f"\n\n{z['per_day']:,} IDs a day kept for {z['days']} days, priced with the medians "
            "above (the post left the cleanup index out of its sum).\n")


POLICY_NAMES = {
    "keys": "keys honoured: retry with the same Idempotency-Key",
    "lookup": "status lookup: ask, then call only if nothing landed",
    "retry": "neither, retry after an expired lease",
    "skip": "neither, give up after an expired lease",
    "outbox": "inbox, then outbox: a keyed relay makes the call",
}


def external_section() -> str:
    external = need("external.json")
    table = markdown_table(
        ["Policy", "Runs", "Lives", "SIGKILLed at random", "Crashed before / after the call", "Duplicate charges",
         "Lost charges", "Leases run short / taken over", "Exact balances"],
        totals_rows(external["summary"], POLICY_NAMES, lambda t: [
            t["kills"], t["killed_at_random"], f"{t['crashed_before_call']} / {t['crashed_after_call']}",
            t["duplicates"], t["lost"], f"{t['lease_short']} / {t['lease_taken_over']}"]))
    c = external["config"]
    return (table + f"\n\nTotals over all runs; counted on the provider's side (its own table of "
            f"charges). Each run: {c['events']:,} credits and up to {c['kills']} lives of the consumer (fewer once "
            f"nothing is left to consume or send), each SIGKILLed "
            f"{c['life'][0]:g}–{c['life'][1]:g} s after its first call unless it crashed itself first: right after "
            f"the call of every {c['crash_every']}th event, or right after the claim (before the call) of every "
            f"{c['crash_before_every']}th, the first time each is handled. The outbox consumer makes no call: its "
            f"crashes are the relay's (after a call, before marking the row sent), and the relay is killed and "
            f"restarted with each life. Lease {c['lease_s']:g} s. "
            f"From `results/external.json`: {provenance(external)}.\n")


def faults_section() -> str:
    faults = need("faults.json")
    rows = ["| Fault | Variant | Runs | Faults | Duplicates | Lost | Skipped duplicates | Resume after the fault (s) "
            "| Exact balances |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    batched = load("faults-share-batched.json")
    sets = [(faults, "")] + ([(batched, ", producer batching")] if batched else [])
    for doc, note in sets:
        for s in doc["summary"].values():
            t = s["totals"]
            resume = spread(s["resume_s"], 2) if s.get("resume_s") else "–"
            rows.append(f"| {s['fault']}{note} | {VARIANT_NAMES[s['variant']]} | {s['runs']} | {t['faults']} "
                        f"| {t['duplicates']} | {t['lost']} | {t['skipped']} | {resume} "
                        f"| {s['balances_exact_runs']} of {s['runs']} |")
    c = faults["config"]
    text = ("\n".join(rows) + f"\n\nTotals over all runs; resume is the median (min–max) over runs of each run's "
            f"median time from the end of a fault to the next credit. Each run: {c['events']:,} credits, {c['faults']} "
            f"faults {c['every_s']:g} s apart, partitions cut for {c['outage_s']:g} s, session timeout "
            f"{c['session_timeout_ms']} ms, max.poll.interval.ms {c['max_poll_interval_ms']}.")
    if "lock_ms" in c:
        text += (f" share-lock: two members of a share group with a {c['lock_ms']} ms record lock; every "
                 f"{c['slow_every']}th event's first handling outlives it by {c['overrun_s']:g} s (Faults counts those "
                 "expiries); records published one per producer batch and polled one at a time.")
    if batched:
        b = batched["config"]
        text += (f" The `producer batching` row (`results/faults-share-batched.json`): the same with the producer's "
                 f"usual batches, librdkafka's default poll size, a {b['lock_ms']} ms lock and no handler sleep.")
    return text + f" From `results/faults.json`: {provenance(faults)}.\n"


def longest_still(timeline: dict) -> float:
    """The longest the whole ledger stood still between its first credit and its last, in
    seconds, to within a bucket: read from a run's recorded credit timeline."""
    busy = [i for i, rate in enumerate(timeline["credits_per_s"]) if rate > 0]
    return max((b - a - 1 for a, b in zip(busy, busy[1:], strict=False)), default=0) * timeline["bucket_s"]


def faults_more_section() -> str:
    """M10: one row per fault and variant, from faults-more.json; the pause again with the role's
    idle_in_transaction_session_timeout, from faults-more-idle-tx.json."""
    doc = load("faults-more.json")
    if doc is None:
        return "Not measured yet: `python -m measurements.measure_faults_more --help`.\n"
    idle = load("faults-more-idle-tx.json")
    rows = ["| Fault | Variant | Runs | Faults | Duplicates | Lost | Skipped duplicates | Exits | What the faults met "
            "| Ledger still at most (s) | Exact balances |",
            "|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
    # offsets-expired runs on a broker of its own (a short offsets.retention.minutes), so in files of its own
    offsets, forgotten = load("faults-more-offsets.json"), load("faults-more-offsets-forgotten.json")
    sets = [(doc, "")] + ([(idle, f", idle_in_transaction_session_timeout {idle['config']['idle_tx_timeout_ms']} ms")]
                          if idle else [])
    sets += [(offsets, ", the inbox remembering all")] if offsets else []
    sets += [(forgotten, f", {forgotten['config']['forgotten']:.0%} of the inbox forgotten first")] if forgotten else []
    for source, note in sets:
        for s in source["summary"].values():
            mine = [r for r in source["runs"] if (r["fault"], r["variant"]) == (s["fault"], s["variant"])]
            t, log = s["totals"], [f for r in mine for f in r["fault_log"]]
            met = faults.get(s["fault"]).met(log, mine)  # each fault says what it met (lab/faults/)
            if stuck := sum(r.get("stuck", 0) for r in mine):  # no credit within the harness's deadline after a fault
                met += f"; **{stuck} left the consumers stuck**"
            rows.append(f"| {s['fault']}{note} | {VARIANT_NAMES[s['variant']]} | {s['runs']} | {t['faults']} "
                        f"| {t['duplicates']} | {t['lost']} | {t['skipped']} | {s['exits']} | {met} "
                        f"| {spread(results.stats(longest_still(r['timeline']) for r in mine), 1)} "
                        f"| {s['balances_exact_runs']} of {s['runs']} |")
    c = doc["config"]
    text = ("\n".join(rows) + f"\n\nTotals over all runs. Ledger still: the median (min–max) over runs of the "
            "longest time no credit at all was written, between the run's first and last, to within half a "
            "second (from each run's credit timeline); a consumer waiting on a paused one's lock shows here, and "
            "so does offsets-expired's wait for the expiry where a replay credits again. "
            "Exits: lives that ended on "
            f"their own and were started again. Each run: {c['events']:,} credits on {c['partitions']} partitions, "
            f"handler sleep {c['work_ms']:g} ms inside the transaction, {c['faults']} faults about "
            f"{c['every_s']:g} s apart (seeded), a pause of {c['pause_s']:g} s, a refusal of {c['outage_s']:g} s, "
            f"session timeout {c['session_timeout_ms']} ms, d and p {c['batch']} messages a batch. "
            f"From `results/faults-more.json`: {provenance(doc)}.")
    if idle:
        text += f" The idle-timeout rows from `results/faults-more-idle-tx.json`: {provenance(idle)}."
    for name, other in (("faults-more-offsets.json", offsets), ("faults-more-offsets-forgotten.json", forgotten)):
        if other:
            own = other["config"]["events"]
            text += (f" The offsets-expired rows from `results/{name}`, on a stack of their own whose broker keeps an "
                     f"empty group's offsets {other['config'].get('offsets_retention_minutes', 1)} minute"
                     + (f", {own:,} credits a run" if own != c["events"] else "") + f": {provenance(other)}.")
    return text + "\n"


def race_section() -> str:
    race = need("race.json")
    table = markdown_table(
        ["Variant", "Runs", "Duplicates", "Lost", "Transactions retried", "Consumers died", "Skipped duplicates",
         "Exact balances"],
        totals_rows(race["summary"], {**POLICY_NAMES, **VARIANT_NAMES}, lambda t: [
            t["duplicates"], t["lost"], t["retried"], t["died"], f"{t['skipped']:,}"]))
    c = race["config"]
    return (table + f"\n\nTotals over all runs. Each run: {c['consumers']} consumer processes of one "
            f"variant in one group on {c['partitions']} partitions, {c['events']:,} credits over {c['accounts']} "
            f"accounts, each published {c['copies']} times on distinct partitions, side by side, once every "
            f"consumer holds partitions; d takes batches of {c['batch']}. b, without the inbox, is the control: "
            f"its copies should all be applied. Effects are ledger rows for b, c and d and "
            f"the provider's charges for external and outbox. A retried transaction is one the server rolled back "
            f"(deadlock, serialization failure) and `variants/common.Database` ran again. "
            f"From `results/race.json`: {provenance(race)}.\n")


def cluster_fault_name(r: dict, config: dict) -> str:
    """An M8 run's fault as the tables name it: its title, the standby's mode, acks other than all."""
    fault = faults.get(r["fault"])
    return (fault.title.format(**config) + (f", {r['replication']} standby" if "pg-standby" in fault.needs else "")
            + ("" if r["acks"] == "all" else f", acks={r['acks']}"))


# (measurement, results file, how a run's fault and variant read in the findings table)
FINDINGS = [
    ("M1 hard kills", "kill.json", lambda r, c: ("SIGKILL", r["variant"])),
    ("M1 hard kills", "kill-d.json", lambda r, c: ("SIGKILL", f"d, {c['batch']} a batch")),
    ("M1 hard kills", "kill-d-batch50.json", lambda r, c: ("SIGKILL", f"d, {c['batch']} a batch")),
    ("M1 hard kills", "kill-k.json", lambda r, c: ("SIGKILL", f"k, {c['lanes']} lanes")),
    ("M1 hard kills", "kill-p.json", lambda r, c: ("SIGKILL", f"p, {c['batch']} a batch")),
    ("M1 hard kills", "kill-p-connections2.json", lambda r, c: ("SIGKILL", f"p, {c['batch']} a batch, 2 connections")),
    *[("M2 rebalance zombie", name, lambda r, c: (
        f"stall {c['slow_seconds']:g} s, {c['group_protocol']} protocol", r["variant"])) for name, _ in REBALANCE_SETS],
    ("M3 throughput", "throughput.json", lambda r, c: ("none", r["variant"])),
    ("M3 pipelined inbox", "throughput-pipelined.json", lambda r, c: ("none", r["variant"])),
    ("M3 pipelined inbox", "throughput-connections.json", lambda r, c: ("none", r["variant"])),
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
    *[("M8 replicated lab", name, lambda r, c: (cluster_fault_name(r, c), r["variant"])) for name in CLUSTER_FILES],
]


def eos_section() -> str:
    eos = need("eos.json", "python -m measurements.measure_eos --variant all --runs 5 --kills 20 --events 10000")
    rows = []
    for s_key, s in eos["summary"].items():
        variant, point = s_key.split(" ")
        mine = [r for r in eos["runs"] if r["variant"] == variant and r["point"] == point]
        total = {field: sum(r[field] for r in mine) for field in (
            "faults", "duplicates", "lost", "topic_copies", "topic_missing", "aborted_copies")}
        rows.append([VARIANT_NAMES[variant], POINT_NAMES[point], s["runs"], f"{total['faults']:,}",
                     f"{total['duplicates']:,}", f"{total['lost']:,}", f"{s['balances_exact_runs']} of {s['runs']}",
                     f"{total['topic_copies']:,}", f"{total['topic_missing']:,}", f"{total['aborted_copies']:,}"])
    c = eos["config"]
    return (markdown_table(["Variant", "Fault", "Runs", "Faults", "Ledger duplicates", "Ledger lost",
                            "Exact balances", "Output copies", "Output missing", "Aborted output copies"], rows,
                           text_columns=2)
            + f"\n\nTotals over all runs. Each run: {c['events']:,} credits on {c['partitions']} partitions, a "
            f"{c['work_ms']:g} ms handler, {c['every']} input messages per Kafka transaction, one worker at a time "
            f"with one transactional.id. The kill rows: {c['kills']} SIGKILLs a run, each {c['life'][0]:g}–"
            f"{c['life'][1]:g} s after the worker's first credit (M1's schedule); the planted rows: "
            f"{c['planted']} crashes a run (os._exit at the named point, once for every "
            f"{c['events'] // c['planted']:,}th event), the worker restarted after each. Output copies and "
            f"missing: the output topic read with read_committed, as a downstream consumer reads it; aborted "
            f"output copies: the records only read_uncommitted sees, written by passes whose transaction aborted. "
            f"From `results/eos.json`: {provenance(eos)}.\n")


def publish_section() -> str:
    publish = need("publish.json", "python -m measurements.measure_publish --source all --variant all --runs 5")
    rows = []
    for s_key, s in publish["summary"].items():
        source, idempotence, variant = s_key.split(" ")
        mine = [r for r in publish["runs"] if (r["source"], r["idempotence"], r["variant"]) ==
                (source, idempotence, variant)]
        stale = (f"{sum(r['stale_accounts'] for r in mine):,}" if all("stale_accounts" in r for r in mine)
                 else "–")
        rows.append([SOURCE_NAMES[(source, idempotence)], VARIANT_NAMES[variant], s["runs"],
                     sum(r["faults"] for r in mine), f"{sum(r['log_copies'] for r in mine):,}",
                     f"{sum(r['duplicates'] for r in mine):,}", f"{sum(r['lost'] for r in mine):,}",
                     f"{s['balances_exact_runs']} of {s['runs']}", stale])
    c = publish["config"]
    return (markdown_table(["Source of copies", "Consumer", "Runs", "Faults", "Copies in the log", "Duplicates",
                            "Lost", "Exact balances", "Accounts left on an older state"], rows, text_columns=2)
            + f"\n\nTotals over all runs. Each run: {c['events']:,} credits published at {c['rate']:g} a second "
            f"into a topic of {c['partitions']} partitions, acks=all; then one worker of the consumer variant "
            f"drains it, with no faults of its own (d in batches of {c['batch']}). relay: {c['kills']} SIGKILLs a "
            f"run, each {c['life'][0]:g}–{c['life'][1]:g} s after the relay's first acknowledgement, and "
            f"{c['planted']} planted crashes between a batch's acknowledgements and its mark (100 rows a batch). "
            f"retries: {c['faults']} faults {c['every_s']:g} s apart, cuts of {c['outage_s']:g} s with a broker "
            f"restart in the middle, socket.timeout.ms {c['socket_timeout_ms']}. restart: {c['kills']} SIGKILLs "
            f"on the same schedule. Copies in the log: records beyond the first per event ID. The last column, for "
            "upsert and versioned (whose effect is a state, not a credit, so no balance is ever exact): accounts "
            "whose final state is not their newest event. "
            f"From `results/publish.json`: {provenance(publish)}.\n")


def cluster_runs() -> list[tuple[dict, dict]]:
    """(run, its file's config) for every M8 run in every file that holds some."""
    return [(r, doc["config"]) for doc in filter(None, map(load, CLUSTER_FILES)) for r in doc["runs"]]


def cluster_section() -> str:
    cluster = need("cluster.json", "make measure-cluster")
    c = cluster["config"]
    groups = {}
    for r, config in cluster_runs():
        fault = faults.get(r["fault"]).title.format(**config)
        groups.setdefault((fault, r["fault"], r["variant"], r["replication"], r["acks"]), []).append(r)
    rows = [[name, VARIANT_NAMES[variant],
             replication if "pg-standby" in faults.get(fault).needs else "–", acks, len(mine),
             sum(r["duplicates"] for r in mine),
             f"{sum(r['lost'] for r in mine):,}", sum(r["acked_missing"] for r in mine),
             spread(results.stats(r["longest_stall_s"] for r in mine), 1),
             f"{sum(bool(r['balances_exact']) for r in mine)} of {len(mine)}"]
            for (name, fault, variant, replication, acks), mine in sorted(
                groups.items(), key=lambda g: (list(faults.registry()).index(g[0][1]), g[0][3], g[0][4] != "all",
                                               g[0][2]))]
    return (markdown_table(["Fault", "Variant", "Postgres standby", "acks", "Runs", "Duplicates", "Lost",
                            "Acknowledged records missing", "Longest stall, s", "Exact balances"], rows,
                           text_columns=4)
            + f"\n\nTotals over the runs, and the median (min–max) of each run's longest gap between two credits "
            f"from the fault to a minute after it. Each run: a publisher sends {c['events']:,} credits at "
            f"{c['rate']:g} a second into {c['partitions']} partitions (replication factor 3, min.insync.replicas 2) "
            f"while one consumer reads them; the fault comes {c['fault_after_s']:g} s after its first credit. "
            f"Acknowledged records missing: IDs the publisher's journal says the broker acknowledged, not in the "
            f"log afterwards. From `results/cluster.json`: {provenance(cluster)}"
            + (f"; and the acks=1 rows from `results/cluster-acks1.json`: {provenance(acks1)}"
               if (acks1 := load("cluster-acks1.json")) else "") + ".\n")


def offsets_section() -> str:
    """o against c: under the failover that loses c's credits, under M1 and M2, and what it costs."""
    rows = []
    # c and o as M8 ran them: interleaved run by run with b and d, in one invocation
    sets = [({"config": config, "runs": [r]}, "b, c, d and o interleaved, one invocation")
            for r, config in cluster_runs()]
    groups = {}
    for doc, how in sets:
        for r in doc["runs"]:
            if r["fault"] == "pg-failover-stalled" and r["variant"] in ("c", "o"):
                key = (how, r["replication"], r["variant"], doc["config"]["stall_s"])
                groups.setdefault(key, []).append(r)
    for (how, replication, variant, stall_s), mine in groups.items():
        rows.append([f"M8, {how}: the standby's stream stalled {stall_s:g} s, the primary killed, {replication} "
                     "standby promoted", variant, len(mine), sum(r["duplicates"] for r in mine),
                     f"{sum(r['lost'] for r in mine):,}",
                     f"{sum(bool(r['balances_exact']) for r in mine)} of {len(mine)}"])
    for name, label in (("kill-o.json", "M1: {kills} SIGKILLs a run"), ("rebalance-o-classic.json",
                                                                        "M2: a {slow_seconds:g} s stall every "
                                                                        "{slow_every}th event")):
        if doc := load(name):
            runs = doc["runs"]
            exact = sum(bool(r["balances_exact"]) for r in runs)
            rows.append([label.format(**doc["config"]), "o", len(runs), sum(r["duplicates"] for r in runs),
                         sum(r["lost"] for r in runs), f"{exact} of {len(runs)}"])
    if not rows:
        raise Missing("_No results for o yet: run `make measure-cluster`, then `python measure_kill.py --variant o` "
                      "and `python measure_rebalance.py --variant o`._\n")
    text = markdown_table(["Fault", "Variant", "Runs", "Duplicates", "Lost", "Exact balances"], rows, text_columns=2)
    text += "\n\nTotals over the runs; each measurement's other parameters as in its own section.\n"
    if cost := load("throughput-offsets.json"):
        s, ratio = cost["summary"]["variants"], cost["summary"]["ratios"].get("o/c")
        text += "\n" + cpu_table(cost)
        text += (f"\nWhat the extra upsert costs, side by side in one invocation ({cost['config']['runs']} runs of "
                 f"{cost['config']['events']:,} credits each, interleaved): c {spread(s['c']['msgs_per_s'])} msgs/s, "
                 f"o {spread(s['o']['msgs_per_s'])} msgs/s; o/c {spread(ratio, 3)}, the median of per-run ratios. "
                 f"From `results/throughput-offsets.json`: {provenance(cost)}.\n")
    return text


def parallel_section() -> str:
    lanes = need("throughput-lanes.json", "python measure_throughput.py --sweep-lanes 1,4,16,64 --work-ms 10")
    stats, ratios = lanes["summary"]["variants"], lanes["summary"]["ratios"]
    rows = [[name, s["runs"], spread(s["msgs_per_s"], 1),
             "1" if name == "c" else spread(ratios[f"{name}/c"], 2) if f"{name}/c" in ratios else "–",
             sum(r.get("order_violations") or 0 for r in lanes["runs"] if r["variant"] == name),
             sum(r["duplicates"] + r["lost"] for r in lanes["runs"] if r["variant"] == name)]
            for name, s in stats.items()]
    text = cpu_table(lanes) + markdown_table(["Variant (k@N: N lanes)", "Runs", "msgs/s, median (min–max)",
                           "× c, median of per-run ratios", "Order violations", "Duplicates + lost"], rows)
    c = lanes["config"]
    per_lane = [(int(name.split("@")[1]), ratios[f"{name}/c"]["median"]) for name in stats
                if name.startswith("k@") and f"{name}/c" in ratios]
    text += (f"\n\n{c['runs']} runs of {c['events']:,} credits per variant on {c['partitions']} partitions, "
             f"a {c['work_ms']:g} ms handler, interleaved run by run in one invocation. From "
             f"`results/throughput-lanes.json`: {provenance(lanes)}.\n")
    if per_lane:
        text += ("\nPer lane, the rate as a share of c's (× c ÷ lanes; 1 would be each lane as fast as c): "
                 + ", ".join(f"k@{n} {x / n:.2f}" for n, x in sorted(per_lane)) + ".\n")
    faults = []
    if kill := load("kill-k.json"):
        kc = kill["config"]
        faults.append([f"M1: {kc['kills']} SIGKILLs a run, {kc['lanes']} lanes, {kc['events']:,} credits",
                       len(kill["runs"]), sum(r["kills"] for r in kill["runs"]), "–",
                       sum(r["duplicates"] for r in kill["runs"]), sum(r["lost"] for r in kill["runs"]),
                       sum(r["order_violations"] for r in kill["runs"]),
                       f"{sum(r['balances_exact'] for r in kill['runs'])} of {len(kill['runs'])}"])
    if rebalance := load("rebalance-k-classic.json"):
        rc = rebalance["config"]
        faults.append([f"M2: a {rc['slow_seconds']:g} s stall every {rc['slow_every']}th event, {rc['lanes']} lanes",
                       len(rebalance["runs"]), sum(r["stalls"] for r in rebalance["runs"]),
                       sum(r["evictions"] for r in rebalance["runs"]),
                       sum(r["duplicates"] for r in rebalance["runs"]), sum(r["lost"] for r in rebalance["runs"]),
                       sum(r["order_violations"] for r in rebalance["runs"]),
                       f"{sum(r['balances_exact'] for r in rebalance['runs'])} of {len(rebalance['runs'])}"])
    if faults:
        text += "\n" + markdown_table(["k under", "Runs", "Kills or stalls", "Evictions", "Duplicates", "Lost",
                                        "Order violations", "Exact balances"], faults)
        text += ("\n\nTotals over the runs; M1's and M2's other parameters as in their sections. From "
                 "`results/kill-k.json` and `results/rebalance-k-classic.json`.\n")
    return text


def per_run(runs: list[dict], field: str) -> dict:
    return results.stats(r[field] for r in runs)


def runs_of(doc: dict, **fields) -> list[dict]:
    return [r for r in doc["runs"] if all(r.get(k) == v for k, v in fields.items())]


def claims_section() -> str:
    """The post's claims, one row each: the post's figure, this lab's per run (as the post gives
    it), and a verdict computed from the two. The full tables are in docs/results.md."""
    post = need("post-figures.json")
    kill = need("kill.json")
    rows = []

    def kill_row(claim, variant, field):
        """A claim that `field` happens under hard kills: it holds in the runs where it did."""
        runs = runs_of(kill, variant=variant)
        mine, theirs = per_run(runs, field), post["kill"]["variants"][variant][field]
        seen = sum(r[field] > 0 for r in runs)
        verdict = "holds" if seen == len(runs) else f"holds in {seen} of {len(runs)} runs" if seen else "differs"
        rows.append([claim, f"{spread(theirs)} a run", f"{spread(mine)} a run", verdict])

    kill_row("Auto-commit (a1) duplicates after hard kills", "a1", "duplicates")
    kill_row("Auto-commit in batches (a2) loses messages", "a2", "lost")
    kill_row("Committing after the database (b) still duplicates on a kill", "b", "duplicates")
    c = runs_of(kill, variant="c")
    c_dup, c_lost = sum(r["duplicates"] for r in c), sum(r["lost"] for r in c)
    rows.append(["The inbox (c): no duplicate, no loss in 100 kills", "0 duplicates, 0 lost in 100 kills",
                 f"{c_dup:,} duplicates, {c_lost:,} lost in {sum(r['kills'] for r in c)} kills",
                 "holds" if c_dup == c_lost == 0 else "differs"])

    zombie, their_zombie = need("rebalance-b-classic.json"), post["rebalance"]["variants"]
    z = zombie["summary"]["b"]["totals"]
    rows.append(["A zombie doubles every stalled credit (b, classic protocol)",
                 f"{their_zombie['b']['duplicates']} of {their_zombie['b']['evictions']} evictions",
                 f"{z['duplicates']} of {z['evictions']} evictions", "holds" if z["duplicates"] == z["evictions"] else
                 "differs"])
    short, long = load("rebalance-b-consumer.json"), load("rebalance-b-consumer-stall20.json")
    if short and long:
        s, g = short["summary"]["b"]["totals"], long["summary"]["b"]["totals"]
        rows.append(["KIP-848's consumer protocol does not change that (b)", "no change",
                     f"{s['duplicates']} of {s['evictions']} with a {short['config']['slow_seconds']:g} s stall, "
                     f"{g['duplicates']} of {g['evictions']} with {long['config']['slow_seconds']:g} s",
                     "holds" if s["duplicates"] == s["evictions"] and g["duplicates"] == g["evictions"] else
                     "holds for long stalls only" if g["duplicates"] == g["evictions"] else "differs"])
    inbox_zombie = need("rebalance-c-classic.json")["summary"]["c"]["totals"]
    rows.append(["The inbox catches every zombie credit (c)",
                 f"{their_zombie['c']['duplicates']} duplicates, {their_zombie['c']['skipped']} skipped",
                 f"{inbox_zombie['duplicates']} duplicates, {inbox_zombie['skipped']} skipped",
                 "holds" if inbox_zombie["duplicates"] == 0 else "differs"])

    publish = load("publish.json")
    if publish:
        b, c = runs_of(publish, source="relay", variant="b"), runs_of(publish, source="relay", variant="c")
        rows.append(["A relay that resends: a copy at a new offset, caught only by the event ID",
                     "argued, not measured", f"b {spread(per_run(b, 'duplicates'))} duplicates a run, c "
                     f"{per_run(c, 'duplicates')['max']}", "holds" if per_run(c, "duplicates")["max"] == 0 <
                     per_run(b, "duplicates")["min"] else "differs"])
    faults = load("faults.json")
    if faults:
        b, c = runs_of(faults, fault="share-lock", variant="b"), runs_of(faults, fault="share-lock", variant="c")
        rows.append(["A lock timeout hands a record to a second member mid-handler (share group)",
                     "argued, not measured", f"b {spread(per_run(b, 'duplicates'))} duplicates a run, c "
                     f"{per_run(c, 'duplicates')['max']}", "holds" if per_run(c, "duplicates")["max"] == 0 <
                     per_run(b, "duplicates")["min"] else "differs"])
        cuts = [r for r in faults["runs"] if r["fault"].startswith("partition")]
        cb, cc = [r for r in cuts if r["variant"] == "b"], [r for r in cuts if r["variant"] == "c"]
        rows.append(["Network partitions", "could not be shown (one broker, one machine)",
                     f"b {sum(r['duplicates'] for r in cb)} duplicates in {len(cb)} runs, c "
                     f"{sum(r['duplicates'] + r['lost'] for r in cc)} duplicates or losses in {len(cc)}",
                     "the inbox holds" if not any(r["duplicates"] or r["lost"] for r in cc) else "differs"])

    throughput = need("throughput.json")["summary"]
    theirs = post["throughput"]["variants"]
    ratio = throughput["ratios"]["c/b"]
    their_ratio = theirs["c"]["msgs_per_s"] / theirs["b"]["msgs_per_s"]
    cost = 1 - ratio["median"]
    rows.append(["The inbox's cost: c's rate against b's", f"{their_ratio:.3f} (about {1 - their_ratio:.0%} slower)",
                 f"{ratio['median']:.3f} ({ratio['min']:.3f}–{ratio['max']:.3f})",
                 f"holds: {cost:.0%} slower here" if 0 < cost < 0.2 else f"differs: {cost:.0%} slower here"])
    storage = need("storage.json")["summary"]["size"]
    layouts = post["storage"]["layouts"]
    shared = [k for k in layouts if k in storage]
    mine = [storage[k]["total_bytes_per_row"]["median"] for k in shared]
    close = all(abs(m / layouts[k]["total_bytes_per_row"] - 1) < 0.05 for k, m in zip(shared, mine, strict=True))
    rows.append([f"Bytes per remembered ID: {', '.join(shared)}",
                 " / ".join(str(layouts[k]["total_bytes_per_row"]) for k in shared), " / ".join(map(str, mine)),
                 "holds (within 5%)" if close and len(shared) == len(layouts) else "differs"])
    rows.append(["Retention deletes in batches of 10,000", "10,000, 10,000, 5,000, then 0",
                 "the same, asserted by `tests/test_retention.py`", "holds (a test)"])
    eos = load("eos.json")
    if eos:
        e, f = eos["summary"]["e kill"], eos["summary"]["f kill"]
        rows.append(["Kafka's exactly-once stops at the database (its loop, crediting Postgres)",
                     "argued, not measured",
                     f"without the inbox {spread(e['duplicates'])} duplicates a run; with it "
                     f"{f['duplicates']['max']}", "holds" if e["duplicates"]["min"] > 0 == f["duplicates"]["max"]
                     else "differs"])
    cluster = load("cluster.json")
    if cluster and "pg-failover-stalled c async all" in cluster["summary"]:
        a = cluster["summary"]["pg-failover-stalled c async all"]
        s = cluster["summary"]["pg-failover-stalled c sync all"]
        rows.append(["A Postgres failover (c): what the inbox remembers is what the standby had", "not covered",
                     f"async standby: {a['totals']['lost'] / a['runs']:,.0f} lost a run; sync: "
                     f"{s['totals']['lost'] / s['runs']:,.0f}", "new: the inbox cannot keep what the failover "
                     "lost" if a["totals"]["lost"] else "new"])
    replay = load("retention.json")
    if replay and {"c shorter", "c longer"} <= set(replay["summary"]):
        short, long = replay["summary"]["c shorter"], replay["summary"]["c longer"]
        age = replay["config"]["age_days"]
        rows.append([f"Retention slips first: a replay from {age} days back into an inbox that remembers less",
                     "argued, not measured",
                     f"c: {short['totals']['duplicates'] / short['runs']:,.0f} duplicates a run keeping "
                     f"{age - 1} days (alarm in {short['totals']['alarm']} of {short['runs']} runs first), "
                     f"{long['totals']['duplicates'] / long['runs']:,.0f} keeping {2 * age}",
                     "holds" if short["totals"]["duplicates"] and not long["totals"]["duplicates"]
                     and short["totals"]["alarm"] == short["runs"] else "differs"])
    frameworks = load("kill-frameworks.json")
    if frameworks and {"fs-default", "fs-inbox"} <= set(frameworks["summary"]):
        default, inbox = frameworks["summary"]["fs-default"], frameworks["summary"]["fs-inbox"]
        rows.append(["A framework's defaults are auto-commit: duplicates on a kill (FastStream)",
                     "argued, not measured",
                     f"fs-default {spread(default['duplicates'])} duplicates a run; with the inbox in its handler "
                     f"at most {inbox['duplicates']['max']} duplicates and {inbox['lost']['max']} lost a run",
                     ("holds" if default["duplicates"]["min"] > 0 else "differs")
                     + ("; but under ACK the inbox cannot stop a loss (M9)" if inbox["lost"]["max"] else "")])
    if frameworks and "qx-eos-keyed" in frameworks["summary"]:
        keyed = frameworks["summary"]["qx-eos-keyed"]
        rows.append(["A sink keyed on the event ID makes an insert idempotent, never an increment (Quix "
                     "Streams' exactly-once with its PostgreSQL sink)", "argued, not measured",
                     f"qx-eos-keyed: at most {keyed['duplicates']['max']} duplicate rows and {keyed['lost']['max']} "
                     f"lost a run; balances exact in {keyed['balances_exact_runs']} of {keyed['runs']} runs (the "
                     "sink writes rows, and credits no account)",
                     "holds" if keyed["duplicates"]["max"] == keyed["lost"]["max"] == 0
                     and keyed["balances_exact_runs"] == 0 else "differs"])
    more = load("faults-more.json")
    if more and {"lost-commit-reply/b", "lost-commit-reply/c"} <= set(more["summary"]):
        b, c = more["summary"]["lost-commit-reply/b"]["totals"], more["summary"]["lost-commit-reply/c"]["totals"]
        rows.append(["A commit whose reply never arrives is harmless with the inbox (the indeterminate commit)",
                     "not covered", f"b {b['duplicates']} duplicates in {b['faults']} lost replies; c "
                     f"{c['duplicates']} duplicates, {c['lost']} lost, {c['skipped']} skipped in {c['faults']}",
                     "holds" if c["duplicates"] == c["lost"] == 0 < b["duplicates"] else "differs"])
    kept, forgot = load("faults-more-offsets.json"), load("faults-more-offsets-forgotten.json")
    if kept and forgot and "offsets-expired/c" in kept["summary"] and "offsets-expired/c" in forgot["summary"]:
        whole, half = kept["summary"]["offsets-expired/c"], forgot["summary"]["offsets-expired/c"]
        forgotten = sum(f["forgotten"] for r in forgot["runs"] if r["variant"] == "c" for f in r["fault_log"])
        replayed = whole["totals"]["skipped"] == kept["config"]["events"] * whole["runs"]
        rows.append(["An empty group's expired offsets and `earliest` replay the whole topic, so the inbox must "
                     "remember as long (7 days by default)", "argued, not run",
                     f"c, inbox remembering all: {whole['totals']['skipped']:,} of "
                     f"{kept['config']['events'] * whole['runs']:,} replayed and skipped, "
                     f"{whole['totals']['duplicates']} duplicates; with {forgotten:,} IDs forgotten first: "
                     f"{half['totals']['duplicates']:,} duplicates",
                     "holds" if replayed and whole["totals"]["duplicates"] == 0 and
                     half["totals"]["duplicates"] == forgotten > 0 else "differs"])
    return markdown_table(["The post's claim", "The post", "This lab, per run", "Verdict"], rows, text_columns=4) + "\n"


def minutes_for(doc: dict | None, runs: int, **fields) -> str:
    """About how long `runs` runs take, from a committed file's recorded run times."""
    if doc is None:
        return "–"
    times = [r.get("duration_s") or r.get("wall_s") for r in runs_of(doc, **fields)]
    times = [s for s in times if s]
    if not times:
        return "not recorded"
    return f"~{statistics.median(times) * runs / 60:.0f} min"


def try_section() -> str:
    """The post's "Try it" commands, as typed there: what each writes, about how long it takes
    here (from the committed runs), and where the committed figures are."""
    kill, throughput = load("kill.json"), load("throughput.json")
    variants = (throughput or {}).get("config", {}).get("variants", [])
    per_round = None
    if throughput:
        rounds = [sum(r.get("wall_s") or 0 for r in throughput["runs"] if r["run"] == n)
                  for n in range(1, throughput["config"]["runs"] + 1)]
        per_round = f"~{statistics.median(rounds) * 5 / 60:.0f} min" if all(rounds) else "not recorded"
    rows = [
        ["`python measure_kill.py --variant c --runs 5`", "`results/local/kill-c.json`",
         minutes_for(kill, 5, variant="c"), "M1, `results/kill.json`"],
        ["`python measure_kill.py --variant a1 --runs 5` (a2, b alike)", "`results/local/kill-a1.json`",
         minutes_for(kill, 5, variant="a1"), "M1, `results/kill.json`"],
        ["`python measure_rebalance.py --variant b --runs 5`, then `--variant c`",
         "`results/local/rebalance-b-classic.json`", minutes_for(load("rebalance-b-classic.json"), 5),
         "M2, `results/rebalance-b-classic.json`"],
        ["`python measure_throughput.py --runs 5`", "`results/local/throughput.json`",
         f"{per_round} ({', '.join(variants)})" if per_round else "–", "M3, `results/throughput.json`"],
        ["`python measure_storage.py --runs 5`", "`results/local/storage.json`",
         minutes_for(load("storage.json"), 5 * 8), "M4, `results/storage.json`"],
        ["`python -m pytest tests/test_retention.py -q`", "nothing", "seconds", "the test asserts the post's batches"],
    ]
    return markdown_table(["The post's command", "Writes", "About, here", "Committed figures"], rows,
                          text_columns=4) + "\n"


RECONNECT_COMMAND = ("python -m measurements.measure_faults --fault pg-restart --variant c,c-reconnect --runs 5 "
                     "--out results/faults-reconnect.json")


def reconnect_section() -> str:
    """c, which stops on a lost database and is started again, beside c-reconnect, which keeps its
    connection, under the same Postgres restarts in one invocation."""
    doc = need("faults-reconnect.json", RECONNECT_COMMAND)
    rows = []
    for variant, how in (("c", "stops; its supervisor starts it again"), ("c-reconnect", "reconnects in place")):
        mine = runs_of(doc, variant=variant)
        if not mine:
            continue
        rows.append([f"{variant}: {how}", len(mine), sum(r["faults"] for r in mine),
                     f"{sum(r['duplicates'] for r in mine):,}", f"{sum(r['lost'] for r in mine):,}",
                     sum(r.get("restarted", 0) for r in mine), sum(r.get("reconnected", 0) for r in mine),
                     spread(results.stats(r["resume_s"]["median"] for r in mine), 2),
                     f"{sum(bool(r['balances_exact']) for r in mine)} of {len(mine)}"])
    c = doc["config"]
    return (markdown_table(["Variant", "Runs", "Restarts", "Duplicates", "Lost", "Started again", "Reconnected",
                            "First credit after a restart (s)", "Exact balances"], rows) +
            f"\n\n{c['events']:,} credits a run on {c['partitions']} partitions, {c['faults']} immediate-mode "
            f"Postgres restarts {c['every_s']:g} s apart, handler sleep {c['work_ms']:g} ms; the variants "
            f"interleaved run by run. `{RECONNECT_COMMAND}`; from `results/faults-reconnect.json`: "
            f"{provenance(doc)}.\n")


def findings_section() -> str:
    """One row per measurement, fault and variant: what every results file says, from its runs."""
    grouped = {}  # (measurement, fault, variant) -> runs, across the files a measurement wrote
    for measurement, name, row_of in FINDINGS:
        doc = load(name)
        if doc is None:
            continue
        for run in doc["runs"]:
            if run.get("duplicates") is None:  # raw: no effects to count
                continue
            grouped.setdefault((measurement, *row_of(run, doc["config"])), []).append(run)
    rows = [[measurement, fault, variant, len(mine), f"{sum(r['duplicates'] for r in mine):,}",
             f"{sum(r['lost'] for r in mine):,}", f"{sum(bool(r['balances_exact']) for r in mine)} of {len(mine)}"]
            for (measurement, fault, variant), mine in grouped.items()]
    return markdown_table(["Measurement", "Fault", "Variant", "Runs", "Duplicates", "Lost", "Exact balances"], rows,
                          text_columns=3) + "\n"


def results_index_section() -> str:
    """Every results file, what wrote it, how many runs it holds and what it ran on."""
    rows = []
    for path in sorted(RESULTS.glob("*.json")):
        doc = json.loads(path.read_text())
        if "harness" not in doc:
            continue  # post-figures.json: the post's numbers, quoted
        script = f"{doc['harness']}.py" if (ROOT / f"{doc['harness']}.py").exists() else \
            f"measurements/{doc['harness']}.py"
        rows.append([f"`results/{path.name}`", f"`{script}`", len(doc["runs"]), provenance(doc)])
    return markdown_table(["File", "Harness", "Runs", "Machine and versions"], rows, text_columns=2,
                          last_is_text=True) + "\n"


SECTIONS = {"claims": claims_section, "try": try_section, "reconnect": reconnect_section, "kill": kill_section,
            "throughput": throughput_section,
            "ratios": ratio_section,
            "batch": batch_section, "rebalance": rebalance_section, "storage": storage_section,
            "layouts": layouts_section, "sizing": sizing_section, "external": external_section,
            "faults": faults_section, "race": race_section, "findings": findings_section,
            "results-index": results_index_section, "parallel": parallel_section, "eos": eos_section,
            "publish": publish_section, "cluster": cluster_section, "offsets": offsets_section,
            "pipelined": pipelined_section, "latency": latency_section, "growth": growth_section,
            "consumers": consumers_section, "frameworks": frameworks_section,
            "retention": retention_section, "faults-more": faults_more_section,
            "async-commit": async_commit_section, "frameworks-throughput": frameworks_throughput_section,
            "lean": lean_section, "contention": contention_section, "saturation": saturation_section,
            "retention-load": retention_load_section, "bare": bare_section,
            "latency-batch": latency_batch_section}
DOCUMENTS = [README, *sorted((ROOT / "docs").glob("*.md"))]  # every file that may hold report markers


def prose_facts() -> list[str]:
    """Phrases of the README's prose that state a measurement's parameters, rendered from the
    results files that hold them: `--check` fails when the prose and the files disagree."""
    kill, zombie = need("kill.json")["config"], need("rebalance-b-classic.json")["config"]
    short, long = need("rebalance-b-consumer.json")["config"], need("rebalance-b-consumer-stall20.json")["config"]
    inbox = need("throughput-inbox.json")["config"]
    return [f"of {kill['runs']} runs), and a verdict", f"does that {kill['kills']} times a run",
            f"`max.poll.interval.ms={zombie['max_poll_interval_ms']}`; every {zombie['slow_every']}th",
            f"stalls {zombie['slow_seconds']:g} s inside its handler",
            f"({zombie['session_timeout_ms'] / 1000:g} s and {zombie['session_timeout_ms'] / 3000:g} s)",
            f"With the same {short['slow_seconds']:g} s stall", f"as the {long['slow_seconds']:g} s stall does",
            f"grows to {max(inbox['inbox_rows']) // 1_000_000} million IDs"]


def made_facts() -> list[str]:
    try:
        return prose_facts()
    except Missing:
        return []


def made(make) -> str:
    try:
        return make()
    except Missing as missing:
        return str(missing)


def render(text: str) -> str:
    for name, make in SECTIONS.items():
        pattern = re.compile(rf"(<!-- report:{name} -->\n).*?(<!-- /report:{name} -->)", re.S)
        text = pattern.sub(lambda m, make=make: m.group(1) + made(make) + m.group(2), text)
    return text


def main(argv=None) -> int:
    parser = cli.Parser(description="Rewrite README.md's and docs/'s results tables from results/.")
    parser.add_argument("--check", action="store_true", help="only check that they are up to date")
    args = parser.parse_args(argv)
    stale = [] if not args.check else charts.stale()
    for document in DOCUMENTS:
        current = document.read_text()
        fresh = render(current)
        if fresh == current:
            continue
        if args.check:
            stale.append(str(document.relative_to(ROOT)))
        else:
            document.write_text(fresh)
    if args.check:
        readme = README.read_text().replace("\n", " ")
        stale += [f"README.md's prose ({fact!r} not found)" for fact in made_facts() if fact not in readme]
        stale += claims.failing()  # the hand-written sentences that state an outcome, against the results
        if stale:
            print(f"report.py: {', '.join(stale)} out of date with results/; run `python -m lab.report`",
                  file=sys.stderr)
            return 1
        print("README.md, docs/ and the charts match results/")
        return 0
    drawn = [str(out.relative_to(ROOT)) for out in charts.build()]
    print(f"README.md and docs/ rewritten{', charts: ' + ', '.join(drawn) if drawn else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
