"""The README's charts, one per measurement, drawn from results/*.json alone.

Claim: a chart is never older than what it draws. Each PNG carries, in a text
chunk, a hash of the results files it was drawn from and of this module, which
draws them; `stale()` recomputes the hash, so a test fails when a chart is missing
or was drawn from other results (or by other code) than those committed.

Assumptions: matplotlib (requirements.txt); report.py calls build() and stale().
"""
import hashlib
from pathlib import Path

from lab import results
from lab.settings import RESULTS

HASH_KEY = "inputs-sha256"
RED, BLUE, GREY, DARK = "#c0392b", "#2e86c1", "#95a5a6", "#2c3e50"


def load(name: str) -> dict | None:
    return results.read(name, RESULTS)  # this module's RESULTS, which a test may point elsewhere


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def tidy(ax) -> None:
    ax.spines[["top", "right"]].set_visible(False)


def label(ax, bars, values, fmt: str = "{:,.0f}") -> None:
    """Each bar's value over it, so that a bar too short to see still says what it is."""
    for bar, value in zip(bars, values, strict=True):
        ax.annotate(fmt.format(value), (bar.get_x() + bar.get_width() / 2, bar.get_height() + bar.get_y()),
                    ha="center", va="bottom", fontsize=8, xytext=(0, 2), textcoords="offset points")


# --- M1: hard kills ------------------------------------------------------------------

def kill(plt, kill):
    variants = list(kill["summary"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    for ax, field, colour in ((axes[0], "duplicates", RED), (axes[1], "lost", DARK)):
        stats = [kill["summary"][v][field] for v in variants]
        medians = [s["median"] for s in stats]
        errors = [[s["median"] - s["min"] for s in stats], [s["max"] - s["median"] for s in stats]]
        label(ax, ax.bar(variants, medians, color=colour, yerr=errors, capsize=4), medians)
        ax.set_title(f"{'Duplicate' if field == 'duplicates' else 'Lost'} credits per run (median, min–max)")
        ax.set_ylim(bottom=0, top=max(1, max(s["max"] for s in stats)) * 1.15)
        tidy(ax)
    c = kill["config"]
    fig.suptitle(f"{c['kills']} SIGKILLs per run, {c['events']:,} credits, {c['runs']} runs per variant "
                 f"({kill['machine']['cores']} cores)", fontsize=11)
    return fig


# --- M2: one eviction, b beside c ---------------------------------------------------------

LANES = {"zombie": (2, "the zombie"), "other": (1, "another member"), "db": (0, "ledger (commit time)")}


def rebalance_timeline(plt, b, c):
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.6), sharey=True)
    for ax, doc, variant in ((axes[0], b, "b: no inbox"), (axes[1], c, "c: inbox")):
        story = next(r["first_eviction"] for r in doc["runs"] if r.get("first_eviction"))
        credits = sum(step[2] == "credit committed" for step in story["steps"])
        placed = {}
        for t, who, what in story["steps"]:
            colour = RED if what == "credit committed" and credits > 1 else (
                BLUE if what == "skipped duplicate" else DARK)
            y = LANES[who][0]
            ax.plot([t], [y], "o", color=colour, markersize=8)
            nth = placed.setdefault(who, 0)
            placed[who] += 1
            ax.annotate(f"{t:.1f} s: {what}", (t, y), xytext=(5, 7 + 11 * (nth % 3)), textcoords="offset points",
                        fontsize=7.5)
        cfg = doc["config"]
        ax.axvspan(0, cfg["slow_seconds"], color=GREY, alpha=0.15, label=f"the {cfg['slow_seconds']:g} s stall")
        ax.axvline(cfg["max_poll_interval_ms"] / 1000, color=GREY, linestyle="--", linewidth=1,
                   label="max.poll.interval.ms")
        ax.set_title(f"{variant}: {story['event_id']} credited {credits}×", fontsize=10,
                     color=RED if credits > 1 else DARK)
        ax.set_xlabel("seconds since the handler stalled")
        ax.set_yticks([y for y, _ in LANES.values()], [name for _, name in LANES.values()])
        ax.set_ylim(-0.5, 2.9)
        ax.legend(loc="lower right", fontsize=8, frameon=False)
        tidy(ax)
    fig.suptitle(f"M2: one eviction under the {b['config']['group_protocol']} protocol, from the workers' logs "
                 "and the ledger's clock", fontsize=11)
    return fig


# --- M3: throughput ---------------------------------------------------------------------

def throughput(plt, doc):
    stats = doc["summary"]["variants"]
    names = [n for n in stats if n != "raw"]
    medians = [stats[n]["msgs_per_s"]["median"] for n in names]
    errors = [[stats[n]["msgs_per_s"]["median"] - stats[n]["msgs_per_s"]["min"] for n in names],
              [stats[n]["msgs_per_s"]["max"] - stats[n]["msgs_per_s"]["median"] for n in names]]
    fig, ax = plt.subplots(figsize=(8, 4.2))
    label(ax, ax.bar(names, medians, yerr=errors, capsize=4, color=[BLUE if n in ("c", "d") else GREY for n in names]),
          medians)
    if "raw" in stats:
        raw = stats["raw"]["msgs_per_s"]["median"]
        ax.axhline(raw, color=RED, linestyle="--", linewidth=1)
        ax.annotate(f"raw: the client alone, {raw:,.0f} msgs/s", (0, raw), xytext=(0, 4), textcoords="offset points",
                    color=RED, fontsize=9)
    ax.set_yscale("log")
    ax.set_ylabel("msgs/s, median (min–max), log scale")
    ax.set_title(f"M3: what each commit discipline costs ({doc['config']['events']:,} messages, "
                 f"{doc['config']['runs']} interleaved runs)", fontsize=11)
    tidy(ax)
    return fig


def throughput_batch(plt, sweep):
    names = list(sweep["summary"]["variants"])
    sizes = [int(n.split("@")[1]) for n in names]
    stats = [sweep["summary"]["variants"][n]["msgs_per_s"] for n in names]
    medians = [s["median"] for s in stats]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    ax.errorbar(sizes, medians, yerr=[[s["median"] - s["min"] for s in stats], [s["max"] - s["median"] for s in stats]],
                marker="o", capsize=4, color=DARK)
    ax.set_xscale("log")
    ax.set_xlabel("messages per transaction (batch size)")
    ax.set_ylabel("msgs/s (median, min–max)")
    ax.set_title(f"Batched inbox (d): throughput by batch size ({sweep['machine']['cores']} cores)", fontsize=11)
    tidy(ax)
    return fig


# --- M4: storage ------------------------------------------------------------------------

def storage(plt, doc):
    expiry = doc["summary"]["expiry"]
    layouts = list(expiry)
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    heap = [expiry[x]["total_bytes_per_row"]["median"] - expiry[x]["index_bytes_per_row"]["median"] for x in layouts]
    index = [expiry[x]["index_bytes_per_row"]["median"] for x in layouts]
    axes[0].bar(layouts, heap, color=GREY, label="heap")
    label(axes[0], axes[0].bar(layouts, index, bottom=heap, color=BLUE, label="indexes (the cleanup index included)"),
          [h + i for h, i in zip(heap, index, strict=True)], "{:.0f}")
    axes[0].set_title("bytes per remembered ID", fontsize=10)
    axes[0].legend(fontsize=8, frameon=False)
    seconds = [expiry[x]["expire_s"]["median"] for x in layouts]
    label(axes[1], axes[1].bar(layouts, seconds, color=DARK), seconds, "{:.2f}")
    axes[1].set_title(f"seconds to forget {doc['config']['rows']:,} IDs", fontsize=10)
    wal = [expiry[x]["expire_wal_bytes"]["median"] / 1e6 for x in layouts]
    label(axes[2], axes[2].bar(layouts, wal, color=RED), wal, "{:.1f}")
    axes[2].set_title("WAL written to forget them, MB", fontsize=10)
    for ax in axes:
        ax.tick_params(axis="x", rotation=30, labelsize=8)
        tidy(ax)
    fig.suptitle(f"M4: what the inbox costs to keep and to forget (medians of {doc['config']['runs']} runs)",
                 fontsize=11)
    return fig


# --- M5: external effects ---------------------------------------------------------------

def external(plt, doc):
    policies = list(doc["summary"])
    totals = [doc["summary"][p]["totals"] for p in policies]
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.38
    xs = range(len(policies))
    for offset, field, colour in ((-width / 2, "duplicates", RED), (width / 2, "lost", DARK)):
        values = [t[field] for t in totals]
        name = "duplicate charges" if field == "duplicates" else "lost charges"
        label(ax, ax.bar([x + offset for x in xs], values, width, color=colour, label=name), values)
    ax.set_xticks(list(xs), policies)
    ax.set_ylabel(f"total over {doc['config']['runs']} runs")
    ax.legend(frameon=False)
    ax.set_title(f"M5: charges on the provider's side, {doc['config']['events']:,} events and up to "
                 f"{doc['config']['kills']} lives a run", fontsize=11)
    tidy(ax)
    return fig


# --- M6: one run per fault, b above c ---------------------------------------------------

def faults_timeline(plt, doc, title="M6: credits per second through each fault (shaded); each red line is a "
                                    "duplicate credit"):
    faults = list(dict.fromkeys(r["fault"] for r in doc["runs"]))
    fig, axes = plt.subplots(2, len(faults), figsize=(3.2 * len(faults), 5.2), sharey="row", squeeze=False)
    for col, fault in enumerate(faults):
        for row, variant in enumerate(("b", "c")):
            ax = axes[row][col]
            run = next((r for r in doc["runs"] if r["fault"] == fault and r["variant"] == variant), None)
            if run is None:
                ax.set_visible(False)
                continue
            line = run["timeline"]
            ts = [i * line["bucket_s"] for i in range(len(line["credits_per_s"]))]
            ax.plot(ts, line["credits_per_s"], color=DARK, linewidth=1)
            for start, end in line["fault_windows"]:
                ax.axvspan(start, end, color=GREY, alpha=0.3)
            for at in line["duplicates_at"]:
                ax.axvline(at, color=RED, linewidth=1)
            ax.set_title(f"{fault}, {variant}: {run['duplicates']} duplicates", fontsize=9,
                         color=RED if run["duplicates"] else DARK)
            if col == 0:
                ax.set_ylabel(f"{variant}: credits/s")
            if row == 1:
                ax.set_xlabel("seconds into the run")
            tidy(ax)
    fig.suptitle(title, fontsize=11)
    return fig


def faults_more_timeline(plt, doc):
    """M10: the first run of each fault, b above c, as M6's chart draws them."""
    return faults_timeline(plt, doc, "M10: credits per second through each fault (shaded); each red line is a "
                                     "duplicate credit")


# --- per-key lanes -------------------------------------------------------------------

def parallel(plt, doc):
    stats = doc["summary"]["variants"]
    lanes = sorted(int(n.split("@")[1]) for n in stats if n.startswith("k@"))
    medians = [stats[f"k@{n}"]["msgs_per_s"]["median"] for n in lanes]
    errors = [[stats[f"k@{n}"]["msgs_per_s"]["median"] - stats[f"k@{n}"]["msgs_per_s"]["min"] for n in lanes],
              [stats[f"k@{n}"]["msgs_per_s"]["max"] - stats[f"k@{n}"]["msgs_per_s"]["median"] for n in lanes]]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.errorbar(lanes, medians, yerr=errors, marker="o", capsize=4, color=BLUE, label="k: per-key lanes")
    for n, value in zip(lanes, medians, strict=True):
        ax.annotate(f"{value:,.0f}", (n, value), xytext=(4, -12), textcoords="offset points", fontsize=8)
    if "c" in stats:
        c = stats["c"]["msgs_per_s"]["median"]
        ax.axhline(c, color=DARK, linestyle="--", linewidth=1, label=f"c: one at a time, {c:,.0f} msgs/s")
        ax.axhline(10 * c, color=GREY, linestyle=":", linewidth=1, label="10 × c")
    ax.set_xscale("log", base=2)
    ax.set_xticks(lanes, [str(n) for n in lanes])
    ax.set_xlabel("lanes (handlers at once)")
    ax.set_ylabel("msgs/s, median (min–max)")
    ax.legend(frameon=False, fontsize=8)
    ax.set_title(f"Per-key lanes with a {doc['config']['work_ms']:g} ms handler, {doc['config']['runs']} interleaved "
                 "runs", fontsize=11)
    tidy(ax)
    return fig


# --- M3: the inbox's size, the number of consumers, latency ---------------------------------

COLOURS = {"c": DARK, "d": BLUE, "p": RED}


def growth(plt, doc):
    growth = doc["summary"]["growth"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    for variant, types in growth.items():
        colour = COLOURS.get(variant, GREY)
        v7 = types.get("uuid-v7", {})
        rows = sorted(int(n) for n in v7 if v7[n].get("vs_text"))
        stats = [v7[str(n)]["vs_text"] for n in rows]
        axes[0].errorbar([n / 1e6 for n in rows], [s["median"] for s in stats], marker="o", capsize=4, color=colour,
                         yerr=[[s["median"] - s["min"] for s in stats], [s["max"] - s["median"] for s in stats]],
                         label=variant)
        for id_type, sizes in types.items():
            rows = sorted(int(n) for n in sizes)
            axes[1].plot([n / 1e6 for n in rows], [sizes[str(n)]["wal_bytes_per_msg"]["median"] for n in rows],
                         color=colour, marker="o", linestyle="-" if id_type == "text" else "--",
                         label=f"{variant}, {'UUIDv4' if id_type == 'text' else 'UUIDv7'}")
    axes[0].axhline(1, color=GREY, linestyle=":", linewidth=1)
    axes[0].set_ylabel("v7 msgs/s ÷ v4 msgs/s, paired by run (median, min–max)")
    axes[1].set_ylabel("WAL bytes per credit (median)")
    for ax in axes:
        ax.set_ylim(bottom=0)
        ax.set_xlabel("IDs already in the inbox (millions)")
        ax.legend(frameon=False, fontsize=8)
        tidy(ax)
    fig.suptitle(f"The inbox's size: time-ordered (v7) against random (v4) IDs, side by side, "
                 f"{doc['config']['runs']} runs each", fontsize=11)
    return fig


def consumers(plt, doc):
    stats = doc["summary"]["variants"]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for variant in dict.fromkeys(name.partition(":")[0] for name in stats):
        counts = sorted(int(name.partition(":")[2]) for name in stats if name.partition(":")[0] == variant)
        ratios = [1.0 if n == 1 else doc["summary"]["ratios"][f"{variant}:{n}/{variant}:1"]["median"] for n in counts]
        one = stats[f"{variant}:1"]["msgs_per_s"]["median"] if 1 in counts else None
        ax.plot(counts, ratios, marker="o", color=COLOURS.get(variant, GREY),
                label=f"{variant} (one consumer: {one:,.0f}/s)" if one else variant)
        for n, value in zip(counts, ratios, strict=True):
            if n == 1:  # in the legend: three labels at (1, 1) would sit on each other
                continue
            ax.annotate(f"{stats[f'{variant}:{n}']['msgs_per_s']['median']:,.0f}/s", (n, value), xytext=(4, -12),
                        textcoords="offset points", fontsize=8)
    ax.set_xticks([1, 2, 3])
    ax.set_xlabel("consumer processes in the group")
    ax.set_ylabel("msgs/s ÷ one consumer's (median of per-run ratios)")
    ax.set_ylim(bottom=0)
    ax.legend(frameon=False, fontsize=8)
    ax.set_title(f"More consumers on {doc['machine']['cores']} cores, {doc['config']['runs']} interleaved runs",
                 fontsize=11)
    tidy(ax)
    return fig


def latency(plt, doc, title="Latency at fixed offered loads (variant@rate)"):
    names = list(doc["summary"])
    fig, ax = plt.subplots(figsize=(8, 4.2))
    grouped_bars(ax, names, [("p50", [doc["summary"][n]["p50_ms"]["median"] for n in names], BLUE),
                             ("p99", [doc["summary"][n]["p99_ms"]["median"] for n in names], RED)])
    ax.set_yscale("log")
    ax.set_ylabel("ms, CreateTime to ledger row")
    ax.set_title(title, fontsize=11)
    return fig


def saturation(plt, doc):
    return latency(plt, doc, "Latency at shares of each variant's capacity, measured just before (variant@load)")


def latency_batch(plt, doc):
    """p50 and p99 per case, one panel per offered rate: the batch wait's floor and its cost."""
    rates = list(dict.fromkeys(name.partition(" ")[0].partition("@")[2] for name in doc["summary"]))
    fig, axes = plt.subplots(1, len(rates), figsize=(6.5 * len(rates), 4.4), squeeze=False)
    for ax, rate in zip(axes[0], rates, strict=True):
        names = [n for n in doc["summary"] if n.partition(" ")[0].partition("@")[2] == rate]
        labels = [n.partition("@")[0] + (f"\n{n.rpartition(' ')[2]}" if " batch " in n
                                         else f"\n{doc['config']['batch']}" if n[0] in "dp" else "") for n in names]
        grouped_bars(ax, labels, [("p50", [doc["summary"][n]["p50_ms"]["median"] for n in names], BLUE),
                                  ("p99", [doc["summary"][n]["p99_ms"]["median"] for n in names], RED)])
        ax.set_yscale("log")
        ax.set_ylabel("ms, CreateTime to ledger row")
        ax.set_title(f"offered {rate}", fontsize=10)
    fig.suptitle(f"c, and d and p by batch (under each bar; --batch {doc['config']['batch']} first), "
                 "one invocation", fontsize=11)
    return fig


def contention(plt, doc):
    """msgs/s of each variant on 100 accounts and on 10,000, side by side."""
    stats = doc["summary"]["variants"]
    variants = list(dict.fromkeys(name.partition(", ")[0] for name in stats))
    counts = list(dict.fromkeys(name.partition(", ")[2] for name in stats))
    fig, ax = plt.subplots(figsize=(8, 4.2))
    colours = [GREY, BLUE, RED, DARK]
    grouped_bars(ax, variants, [(count, [stats.get(f"{v}, {count}", {}).get("msgs_per_s", {}).get("median", 0)
                                          for v in variants], colours[i % len(colours)])
                                for i, count in enumerate(counts)])
    ax.set_ylabel("msgs/s, median over runs")
    ax.set_title(f"Credits over 100 accounts against 10,000 ({doc['config']['runs']} interleaved runs)", fontsize=11)
    return fig


# --- M7: exactly-once, and publishers that publish twice -----------------------------------

def grouped_bars(ax, groups: list[str], series: list[tuple[str, list[float], str]]) -> None:
    """Bars side by side per group, each series one colour, each bar labelled with its value."""
    width = 0.8 / len(series)
    for i, (name, values, colour) in enumerate(series):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        label(ax, ax.bar(xs, values, width, color=colour, label=name), values)
    ax.set_xticks(range(len(groups)), groups, fontsize=8)
    ax.legend(frameon=False, fontsize=8)
    tidy(ax)


def eos(plt, doc):
    points = list(dict.fromkeys(r["point"] for r in doc["runs"]))
    names = {"kill": "SIGKILL, M1's schedule", "pg-committed": "crash after Postgres,\nbefore Kafka's commit",
             "kafka-committed": "crash after Kafka's commit,\nbefore the next poll"}

    def total(variant, point, *fields):
        return sum(r[f] for r in doc["runs"] if r["variant"] == variant and r["point"] == point for f in fields)

    fig, ax = plt.subplots(figsize=(9, 4.4))
    grouped_bars(ax, [names.get(p, p) for p in points], [
        ("e: ledger duplicates", [total("e", p, "duplicates") for p in points], RED),
        ("f: ledger duplicates", [total("f", p, "duplicates") for p in points], BLUE),
        ("e: output topic copies + missing", [total("e", p, "topic_copies", "topic_missing") for p in points], GREY),
        ("f: output topic copies + missing", [total("f", p, "topic_copies", "topic_missing") for p in points],
         DARK)])
    ax.set_ylabel(f"total over {doc['config']['runs']} runs")
    ax.set_title("Kafka's exactly-once holds in the output topic (read_committed), not in the database",
                 fontsize=11)
    return fig


def publish(plt, doc):
    keys = list(dict.fromkeys((r["source"], r["idempotence"]) for r in doc["runs"]))
    names = {("relay", "on"): "relay killed /\ncrashed after the acks", ("retries", "off"): "link cut, broker\n"
             "restarted; no idempotence", ("retries", "on"): "the same,\nidempotence on",
             ("restart", "on"): "publisher killed\nand restarted"}

    def total(key, field, variant=None):
        return sum(r[field] for r in doc["runs"] if (r["source"], r["idempotence"]) == key
                   and (variant is None or r["variant"] == variant))

    fig, ax = plt.subplots(figsize=(9, 4.4))
    grouped_bars(ax, [names.get(k, " ".join(k)) for k in keys], [
        ("copies in the log, b's runs", [total(k, "log_copies", "b") for k in keys], GREY),
        ("b: duplicates", [total(k, "duplicates", "b") for k in keys], RED),
        ("c: duplicates", [total(k, "duplicates", "c") for k in keys], BLUE),
        ("d: duplicates", [total(k, "duplicates", "d") for k in keys], DARK)])
    ax.set_yscale("symlog")
    ax.set_ylabel("total over the runs (symlog)")
    ax.set_title("Every copy a publisher makes reaches b's ledger; c and d skip them", fontsize=11)
    return fig


def retention(plt, doc):
    c = doc["config"]
    windows = list(dict.fromkeys(r["window"] for r in doc["runs"]))
    days = {r["window"]: r["window_days"] for r in doc["runs"]}
    variants = list(dict.fromkeys(r["variant"] for r in doc["runs"]))
    colours = {"c": BLUE, "d": DARK, "p": GREY, "v7": RED}

    def total(variant, window, field):
        return sum(r[field] for r in doc["runs"] if r["variant"] == variant and r["window"] == window)

    fig, ax = plt.subplots(figsize=(9, 4.4))
    series = [(f"{v}: duplicates", [total(v, w, "duplicates") for w in windows], colours.get(v, GREY))
              for v in variants if v != "v7"]
    if "v7" in variants:
        series.append(("v7: dead-lettered, too old to check", [total("v7", w, "dead_lettered") for w in windows],
                       colours["v7"]))
    alarms = {w: sum(r["alarm"] for r in doc["runs"] if r["window"] == w) for w in windows}
    runs = {w: sum(r["window"] == w for r in doc["runs"]) for w in windows}
    grouped_bars(ax, [f"keeps {days[w]} d ({w})\nalarm in {alarms[w]} of {runs[w]} runs" for w in windows], series)
    ax.set_ylabel(f"total over {c['runs']} runs")
    ax.set_title(f"A replay from {c['age_days']} days back, against inboxes that remember less, as much, or more",
                 fontsize=11)
    return fig


def retention_load(plt, doc):
    modes = list(doc["summary"])
    names = [m.replace("partitioned", "partitioned\n(alone)") for m in modes]
    fig, axes = plt.subplots(1, 3, figsize=(12, 4.2))
    for ax, field, ylabel in zip(axes, ("msgs_per_s", "wal_mb", "longest_stall_ms"),
                                 ("p, msgs/s", "WAL written, MB", "longest gap between two credits, ms"), strict=True):
        ax.bar(range(len(modes)), [doc["summary"][m][field]["median"] for m in modes],
               color=[GREY if m in ("alone", "partitioned") else BLUE for m in modes])
        ax.set_xticks(range(len(modes)), names, fontsize=8)
        ax.set_ylabel(f"{ylabel} (median)", fontsize=9)
        tidy(ax)
    fig.suptitle(f"p while retention forgets {doc['config']['backlog']:,} expired IDs beside it (grey: no retention)",
                 fontsize=11)
    return fig


# --- the registry -------------------------------------------------------------------------

# chart: (the function that draws it, the results files it draws, in its arguments' order)
CHARTS = {
    "kill": (kill, ["kill.json"]),
    "rebalance-timeline": (rebalance_timeline, ["rebalance-timeline-b.json", "rebalance-timeline-c.json"]),
    "throughput": (throughput, ["throughput.json"]),
    "throughput-batch": (throughput_batch, ["throughput-batch.json"]),
    "storage": (storage, ["storage.json"]),
    "external": (external, ["external.json"]),
    "faults-timeline": (faults_timeline, ["faults-timeline.json"]),
    "faults-more-timeline": (faults_more_timeline, ["faults-more.json"]),
    "parallel": (parallel, ["throughput-lanes.json"]),
    "eos": (eos, ["eos.json"]),
    "publish": (publish, ["publish.json"]),
    "growth": (growth, ["throughput-inbox.json"]),
    "consumers": (consumers, ["throughput-consumers.json"]),
    "latency": (latency, ["latency.json"]),
    "latency-saturation": (saturation, ["latency-saturation.json"]),
    "latency-batch": (latency_batch, ["latency-batch.json"]),
    "contention": (contention, ["throughput-accounts.json"]),
    "retention": (retention, ["retention.json"]),
    "retention-load": (retention_load, ["retention-load.json"]),
}


def path_of(chart: str) -> Path:
    return RESULTS / f"{chart}.png"


def fingerprint(chart: str) -> str | None:
    """A hash of the chart's inputs and of this module (what draws every chart); None if an
    input is missing. A change anywhere here redraws them all: they take seconds."""
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for name in CHARTS[chart][1]:
        path = RESULTS / name
        if not path.exists():
            return None
        digest.update(name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def stored_fingerprint(path: Path) -> str | None:
    """The hash a PNG was saved with (its tEXt chunk), read without any imaging library."""
    data = path.read_bytes()
    at = 8  # after the PNG signature
    while at + 8 <= len(data):
        length, kind = int.from_bytes(data[at:at + 4], "big"), data[at + 4:at + 8]
        body = data[at + 8:at + 8 + length]
        if kind == b"tEXt" and body.startswith(HASH_KEY.encode() + b"\0"):
            return body.split(b"\0", 1)[1].decode()
        at += 12 + length
    return None


def build() -> list[Path]:
    """Draw every chart whose inputs exist; the paths written."""
    plt, written = None, []
    for chart, (draw, inputs) in CHARTS.items():
        mark = fingerprint(chart)
        if mark is None:
            continue
        plt = plt or pyplot()
        fig = draw(plt, *(load(name) for name in inputs))
        fig.tight_layout()
        fig.savefig(path_of(chart), dpi=110, metadata={HASH_KEY: mark})
        plt.close(fig)
        written.append(path_of(chart))
    return written


def stale() -> list[str]:
    """Charts that are missing, or were drawn from other inputs than those in results/ now."""
    found = []
    for chart in CHARTS:
        mark, path = fingerprint(chart), path_of(chart)
        if mark is not None and (not path.exists() or stored_fingerprint(path) != mark):
            found.append(f"{path.name} ({'missing' if not path.exists() else 'out of date'})")
        elif mark is None and path.exists():
            found.append(f"{path.name} (its inputs are gone)")
    return found
