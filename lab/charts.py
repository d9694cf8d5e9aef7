"""The README's charts, one per measurement, drawn from results/*.json alone and never older than
what they draw: each PNG carries, in a text chunk, a hash of its results files and of this module,
and `stale()` recomputes it. A chart is a declaration (CHARTS): its results files, a body that
draws into the axes, its labels and its size; Chart makes the figure around the body.
"""
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lab import results
from lab.settings import RESULTS

HASH_KEY = "inputs-sha256"
RED, BLUE, GREY, DARK = "#c0392b", "#2e86c1", "#95a5a6", "#2c3e50"
COLOURS = {"c": DARK, "d": BLUE, "p": RED}


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


def spans(stats: list[dict]) -> list[list]:
    """Error bars from a summary's medians to its min and max."""
    return [[s["median"] - s["min"] for s in stats], [s["max"] - s["median"] for s in stats]]


def median_bars(ax, names, stats, color) -> None:
    """A bar per name at its median, min–max as its error bar, labelled with the median."""
    medians = [s["median"] for s in stats]
    label(ax, ax.bar(names, medians, color=color, yerr=spans(stats), capsize=4), medians)


def grouped_bars(ax, groups: list[str], series: list[tuple[str, list[float], str]]) -> None:
    """Bars side by side per group, each series one colour, each bar labelled with its value."""
    width = 0.8 / len(series)
    for i, (name, values, colour) in enumerate(series):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        label(ax, ax.bar(xs, values, width, color=colour, label=name), values)
    ax.set_xticks(range(len(groups)), groups, fontsize=8)
    ax.legend(frameon=False, fontsize=8)
    tidy(ax)


def distinct(doc: dict, *fields: str) -> list[dict]:
    """The runs' distinct values of `fields`, in order of first appearance, each as a filter."""
    return [dict(zip(fields, key, strict=True)) for key in dict.fromkeys(tuple(r[f] for f in fields)
                                                                           for r in doc["runs"])]


def tally(*fields: str, **where) -> Callable:
    """A series' value for a group: `fields` added up over the group's runs (and `where`'s)."""
    return lambda doc, key: sum(r[f] for r in doc["runs"] if all(r[k] == v for k, v in {**key, **where}.items())
                                for f in fields)


def of_summary(field: str) -> Callable:
    return lambda doc, key: doc["summary"][key][field]["median"]


def grouped(groups: Callable, tick: Callable, series) -> Callable:
    """A body of bars side by side: a group per key of groups(doc), under tick(doc, key); one bar
    in each per series (name, value(doc, key), colour), from a list or from series(doc)."""
    def body(ax, doc):
        keys = groups(doc)
        grouped_bars(ax, [tick(doc, key) for key in keys], [(name, [value(doc, key) for key in keys], colour)
                                                            for name, value, colour in (
                                                                series(doc) if callable(series) else series)])
    return body


def text(template, doc: dict) -> str:
    """A label: a str.format template over c (the config), m (the machine) and doc, or a function of doc."""
    return template(doc) if callable(template) else template.format(c=doc.get("config"), m=doc.get("machine"), doc=doc)


@dataclass(frozen=True)
class Chart:
    """A chart: the results files it draws, and body(ax, *docs) drawing them into `panels` axes
    side by side (a list of them if more than one) or, with panels=0, body(plt, *docs) making
    the whole figure; the labels, the title (over the panels, if several) and the size."""
    files: tuple
    body: Callable
    title: object = ""
    ylabel: str = ""
    xlabel: str = ""
    size: tuple = (8, 4.2)
    panels: int = 1
    yscale: str = ""
    sharey: bool = False

    def __call__(self, plt, *docs):
        if not self.panels:
            return self.body(plt, *docs)
        fig, ax = plt.subplots(1, self.panels, figsize=self.size, sharey=self.sharey)
        self.body(ax, *docs)
        for each in [ax] if self.panels == 1 else ax:
            if self.xlabel:
                each.set_xlabel(self.xlabel)
            tidy(each)
        if self.yscale:
            ax.set_yscale(self.yscale)
        if self.ylabel:
            ax.set_ylabel(text(self.ylabel, docs[0]))
        (fig.suptitle if self.panels > 1 else ax.set_title)(text(self.title, docs[0]), fontsize=11)
        return fig


# --- the bodies that are not one of the kinds ------------------------------------------

def kill(axes, doc):
    variants = list(doc["summary"])
    for ax, field, colour in ((axes[0], "duplicates", RED), (axes[1], "lost", DARK)):
        stats = [doc["summary"][v][field] for v in variants]
        median_bars(ax, variants, stats, colour)
        ax.set_title(f"{'Duplicate' if field == 'duplicates' else 'Lost'} credits per run (median, min–max)")
        ax.set_ylim(bottom=0, top=max(1, max(s["max"] for s in stats)) * 1.15)


LANES = {"zombie": (2, "the zombie"), "other": (1, "another member"), "db": (0, "ledger (commit time)")}


def rebalance_timeline(axes, b, c):
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
        ax.set_yticks([y for y, _ in LANES.values()], [name for _, name in LANES.values()])
        ax.set_ylim(-0.5, 2.9)
        ax.legend(loc="lower right", fontsize=8, frameon=False)


def throughput(ax, doc):
    stats = doc["summary"]["variants"]
    names = [n for n in stats if n != "raw"]
    median_bars(ax, names, [stats[n]["msgs_per_s"] for n in names], [BLUE if n in ("c", "d") else GREY for n in names])
    if "raw" in stats:
        raw = stats["raw"]["msgs_per_s"]["median"]
        ax.axhline(raw, color=RED, linestyle="--", linewidth=1)
        ax.annotate(f"raw: the client alone, {raw:,.0f} msgs/s", (0, raw), xytext=(0, 4), textcoords="offset points",
                    color=RED, fontsize=9)


def throughput_batch(ax, doc):
    names = list(doc["summary"]["variants"])
    stats = [doc["summary"]["variants"][n]["msgs_per_s"] for n in names]
    ax.errorbar([int(n.split("@")[1]) for n in names], [s["median"] for s in stats], yerr=spans(stats), marker="o",
                capsize=4, color=DARK)
    ax.set_xscale("log")


def storage(axes, doc):
    expiry = doc["summary"]["expiry"]
    layouts = list(expiry)
    heap = [expiry[x]["total_bytes_per_row"]["median"] - expiry[x]["index_bytes_per_row"]["median"] for x in layouts]
    index = [expiry[x]["index_bytes_per_row"]["median"] for x in layouts]
    axes[0].bar(layouts, heap, color=GREY, label="heap")
    label(axes[0], axes[0].bar(layouts, index, bottom=heap, color=BLUE, label="indexes (the cleanup index included)"),
          [h + i for h, i in zip(heap, index, strict=True)], "{:.0f}")
    axes[0].legend(fontsize=8, frameon=False)
    for ax, (values, fmt, colour, title) in zip(axes, [(None, None, None, "bytes per remembered ID"), (
            [expiry[x]["expire_s"]["median"] for x in layouts], "{:.2f}", DARK,
            f"seconds to forget {doc['config']['rows']:,} IDs"), (
            [expiry[x]["expire_wal_bytes"]["median"] / 1e6 for x in layouts], "{:.1f}", RED,
            "WAL written to forget them, MB")], strict=True):
        if values:
            label(ax, ax.bar(layouts, values, color=colour), values, fmt)
        ax.set_title(title, fontsize=10)
        ax.tick_params(axis="x", rotation=30, labelsize=8)


def external(ax, doc):
    policies = list(doc["summary"])
    totals = [doc["summary"][p]["totals"] for p in policies]
    width, xs = 0.38, range(len(policies))
    for offset, field, colour in ((-width / 2, "duplicates", RED), (width / 2, "lost", DARK)):
        values = [t[field] for t in totals]
        name = "duplicate charges" if field == "duplicates" else "lost charges"
        label(ax, ax.bar([x + offset for x in xs], values, width, color=colour, label=name), values)
    ax.set_xticks(list(xs), policies)
    ax.legend(frameon=False)


def timelines(measurement: str) -> Callable:
    """A body: the first run of each fault, b above c, its credits per second, the faults shaded
    and each duplicate a red line."""
    def body(plt, doc):
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
                ax.plot([i * line["bucket_s"] for i in range(len(line["credits_per_s"]))], line["credits_per_s"],
                        color=DARK, linewidth=1)
                for start, end in line["fault_windows"]:
                    ax.axvspan(start, end, color=GREY, alpha=0.3)
                for at in line["duplicates_at"]:
                    ax.axvline(at, color=RED, linewidth=1)
                plural = "s" * (run["duplicates"] != 1)
                ax.set_title(f"{fault}, {variant}: {run['duplicates']} duplicate{plural}", fontsize=9,
                             color=RED if run["duplicates"] else DARK)
                if col == 0:
                    ax.set_ylabel(f"{variant}: credits/s")
                if row == 1:
                    ax.set_xlabel("seconds into the run")
                tidy(ax)
        fig.suptitle(f"{measurement}: credits per second through each fault (shaded); each red line is a duplicate "
                     "credit", fontsize=11)
        return fig
    return body


def parallel(ax, doc):
    stats = doc["summary"]["variants"]
    lanes = sorted(int(n.split("@")[1]) for n in stats if n.startswith("k@"))
    medians = [stats[f"k@{n}"]["msgs_per_s"]["median"] for n in lanes]
    ax.errorbar(lanes, medians, yerr=spans([stats[f"k@{n}"]["msgs_per_s"] for n in lanes]), marker="o", capsize=4,
                color=BLUE, label="k: per-key lanes")
    for n, value in zip(lanes, medians, strict=True):
        ax.annotate(f"{value:,.0f}", (n, value), xytext=(4, -12), textcoords="offset points", fontsize=8)
    if "c" in stats:
        c = stats["c"]["msgs_per_s"]["median"]
        ax.axhline(c, color=DARK, linestyle="--", linewidth=1, label=f"c: one at a time, {c:,.0f} msgs/s")
        ax.axhline(10 * c, color=GREY, linestyle=":", linewidth=1, label="10 × c")
    ax.set_xscale("log", base=2)
    ax.set_xticks(lanes, [str(n) for n in lanes])
    ax.legend(frameon=False, fontsize=8)


def growth(axes, doc):
    for variant, types in doc["summary"]["growth"].items():
        colour = COLOURS.get(variant, GREY)
        v7 = types.get("uuid-v7", {})
        rows = sorted(int(n) for n in v7 if v7[n].get("vs_text"))
        stats = [v7[str(n)]["vs_text"] for n in rows]
        axes[0].errorbar([n / 1e6 for n in rows], [s["median"] for s in stats], marker="o", capsize=4, color=colour,
                         yerr=spans(stats), label=variant)
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
        ax.legend(frameon=False, fontsize=8)


def consumers(ax, doc):
    stats = doc["summary"]["variants"]
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
    ax.set_ylim(bottom=0)
    ax.legend(frameon=False, fontsize=8)


PERCENTILES = [("p50", of_summary("p50_ms"), BLUE), ("p99", of_summary("p99_ms"), RED)]
PER_CASE = grouped(lambda doc: list(doc["summary"]), lambda doc, n: n, PERCENTILES)  # p50 and p99 of each case


def latency_batch(plt, doc):
    """p50 and p99 per case, one panel per offered rate: the batch wait's floor and its cost."""
    rates = list(dict.fromkeys(name.partition(" ")[0].partition("@")[2] for name in doc["summary"]))
    fig, axes = plt.subplots(1, len(rates), figsize=(6.5 * len(rates), 4.4), squeeze=False)
    for ax, rate in zip(axes[0], rates, strict=True):
        grouped(lambda doc, rate=rate: [n for n in doc["summary"] if n.partition(" ")[0].partition("@")[2] == rate],
                lambda doc, n: n.partition("@")[0] + (f"\n{n.rpartition(' ')[2]}" if " batch " in n else
                                                      f"\n{doc['config']['batch']}" if n[0] in "dp" else ""),
                PERCENTILES)(ax, doc)
        ax.set_yscale("log")
        ax.set_ylabel("ms, CreateTime to ledger row")
        ax.set_title(f"offered {rate}", fontsize=10)
    fig.suptitle(f"c, and d and p by batch (under each bar; --batch {doc['config']['batch']} first), "
                 "one invocation", fontsize=11)
    return fig


def contention(doc):
    """msgs/s of each variant on 100 accounts and on 10,000, side by side."""
    stats, colours = doc["summary"]["variants"], [GREY, BLUE, RED, DARK]
    return [(count, lambda doc, v, count=count: stats.get(f"{v}, {count}", {}).get("msgs_per_s", {}).get("median", 0),
             colours[i % len(colours)]) for i, count in enumerate(dict.fromkeys(n.partition(", ")[2] for n in stats))]


def retention_series(doc):
    variants = list(dict.fromkeys(r["variant"] for r in doc["runs"]))
    return [(f"{v}: duplicates", tally("duplicates", variant=v), {"c": BLUE, "d": DARK, "p": GREY}.get(v, GREY))
            for v in variants if v != "v7"] + [("v7: dead-lettered, too old to check", tally(
                "dead_lettered", variant="v7"), RED)] * ("v7" in variants)


def retention_tick(doc, key):
    mine = [r for r in doc["runs"] if r["window"] == key["window"]]
    return (f"keeps {mine[-1]['window_days']} d ({key['window']})\nalarm in {sum(r['alarm'] for r in mine)} of "
            f"{len(mine)} runs")


def retention_load(axes, doc):
    modes = list(doc["summary"])
    for ax, field, ylabel in zip(axes, ("msgs_per_s", "wal_mb", "longest_stall_ms"),
                                 ("p, msgs/s", "WAL written, MB", "longest gap between two credits, ms"), strict=True):
        ax.bar(range(len(modes)), [doc["summary"][m][field]["median"] for m in modes],
               color=[GREY if m in ("alone", "partitioned") else BLUE for m in modes])
        ax.set_xticks(range(len(modes)), [m.replace("partitioned", "partitioned\n(alone)") for m in modes], fontsize=8)
        ax.set_ylabel(f"{ylabel} (median)", fontsize=9)


POINTS = {"kill": "SIGKILL, M1's schedule", "pg-committed": "crash after Postgres,\nbefore Kafka's commit",
          "kafka-committed": "crash after Kafka's commit,\nbefore the next poll"}
SOURCES = {("relay", "on"): "relay killed /\ncrashed after the acks", ("retries", "off"): "link cut, broker\n"
           "restarted; no idempotence", ("retries", "on"): "the same,\nidempotence on",
           ("restart", "on"): "publisher killed\nand restarted"}
MS = "ms, CreateTime to ledger row"

CHARTS = {
    "kill": Chart(("kill.json",), kill, "{c[kills]} SIGKILLs per run, {c[events]:,} credits, {c[runs]} runs per "
                  "variant ({m[cores]} cores)", size=(10, 4.2), panels=2),
    "rebalance-timeline": Chart(("rebalance-timeline-b.json", "rebalance-timeline-c.json"), rebalance_timeline,
                                "M2: one eviction under the {c[group_protocol]} protocol, from the workers' logs and "
                                "the ledger's clock", xlabel="seconds since the handler stalled", size=(13, 4.6),
                                panels=2, sharey=True),
    "throughput": Chart(("throughput.json",), throughput, "M3: what each commit discipline costs ({c[events]:,} "
                        "messages, {c[runs]} interleaved runs)", "msgs/s, median (min–max), log scale", yscale="log"),
    "throughput-batch": Chart(("throughput-batch.json",), throughput_batch, "Batched inbox (d): throughput by batch "
                              "size ({m[cores]} cores)", "msgs/s (median, min–max)",
                              "messages per transaction (batch size)", size=(6.5, 4)),
    "storage": Chart(("storage.json",), storage, "M4: what the inbox costs to keep and to forget (medians of {c[runs]} "
                     "runs)", size=(13, 4.2), panels=3),
    "external": Chart(("external.json",), external, "M5: charges on the provider's side, {c[events]:,} events and up "
                      "to {c[kills]} lives a run", "total over {c[runs]} runs", size=(8, 4)),
    "faults-timeline": Chart(("faults-timeline.json",), timelines("M6"), panels=0),
    "faults-more-timeline": Chart(("faults-more.json",), timelines("M10"), panels=0),
    "parallel": Chart(("throughput-lanes.json",), parallel, "Per-key lanes with a {c[work_ms]:g} ms handler, {c[runs]} "
                      "interleaved runs", "msgs/s, median (min–max)", "lanes (handlers at once)", size=(7, 4.2)),
    "eos": Chart(("eos.json",), grouped(lambda doc: distinct(doc, "point"), lambda doc, k: POINTS.get(
        k["point"], k["point"]), [
        ("e: ledger duplicates", tally("duplicates", variant="e"), RED),
        ("f: ledger duplicates", tally("duplicates", variant="f"), BLUE),
        ("e: output topic copies + missing", tally("topic_copies", "topic_missing", variant="e"), GREY),
        ("f: output topic copies + missing", tally("topic_copies", "topic_missing", variant="f"), DARK)]),
        "Kafka's exactly-once holds in the output topic (read_committed), not in the database",
        "total over {c[runs]} runs", size=(9, 4.4)),
    "publish": Chart(("publish.json",), grouped(lambda doc: distinct(doc, "source", "idempotence"), lambda doc, k: (
        SOURCES.get(tuple(k.values()), " ".join(k.values()))), [
        ("copies in the log, b's runs", tally("log_copies", variant="b"), GREY),
        *((f"{v}: duplicates", tally("duplicates", variant=v), colour) for v, colour in zip("bcd", (RED, BLUE, DARK),
                                                                                           strict=True))]),
        "Every copy a publisher makes reaches b's ledger; c and d skip them", "total over the runs (symlog)",
        size=(9, 4.4), yscale="symlog"),
    "growth": Chart(("throughput-inbox.json",), growth, "The inbox's size: time-ordered (v7) against random (v4) IDs, "
                    "side by side, {c[runs]} runs each", xlabel="IDs already in the inbox (millions)", size=(10, 4.2),
                    panels=2),
    "consumers": Chart(("throughput-consumers.json",), consumers, "More consumers on {m[cores]} cores, {c[runs]} "
                       "interleaved runs", "msgs/s ÷ one consumer's (median of per-run ratios)",
                       "consumer processes in the group", size=(7, 4.2)),
    "latency": Chart(("latency.json",), PER_CASE, "Latency at fixed offered loads (variant@rate)", MS, yscale="log"),
    "latency-saturation": Chart(("latency-saturation.json",), PER_CASE, "Latency at shares of each variant's capacity, "
                                "measured just before (variant@load)", MS, yscale="log"),
    "latency-batch": Chart(("latency-batch.json",), latency_batch, panels=0),
    "contention": Chart(("throughput-accounts.json",), grouped(lambda doc: list(dict.fromkeys(
        n.partition(", ")[0] for n in doc["summary"]["variants"])), lambda doc, v: v, contention),
        "Credits over 100 accounts against 10,000 ({c[runs]} interleaved runs)", "msgs/s, median over runs"),
    "retention": Chart(("retention.json",), grouped(lambda doc: distinct(doc, "window"), retention_tick,
                                                    retention_series),
                       "A replay from {c[age_days]} days back, against inboxes that remember less, as much, or more",
                       "total over {c[runs]} runs", size=(9, 4.4)),
    "retention-load": Chart(("retention-load.json",), retention_load, "p while retention forgets {c[backlog]:,} "
                            "expired IDs beside it (grey: no retention)", size=(12, 4.2), panels=3),
}


def fingerprint(chart: str) -> str | None:
    """A hash of the chart's inputs and of this module (what draws every chart); None if an
    input is missing. A change anywhere here redraws them all: they take seconds."""
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for name in CHARTS[chart].files:
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
    """Draw every chart whose inputs exist and whose PNG was not drawn from them already; the
    paths written. A chart is written whole or not at all (a temporary file, then a rename), so
    whoever reads it meanwhile (a check in another process) never sees half a PNG."""
    plt, written = None, []
    for name, chart in CHARTS.items():
        path = RESULTS / f"{name}.png"
        if (mark := fingerprint(name)) is None or (path.exists() and stored_fingerprint(path) == mark):
            continue
        plt = plt or pyplot()
        fig = chart(plt, *map(load, chart.files))
        fig.tight_layout()
        drawing = path.with_name(f".{path.name}.drawing")
        fig.savefig(drawing, dpi=110, format="png", metadata={HASH_KEY: mark})
        plt.close(fig)
        drawing.replace(path)
        written.append(path)
    return written


def stale() -> list[str]:
    """Charts that are missing, or were drawn from other inputs than those in results/ now."""
    found = []
    for chart in CHARTS:
        mark, path = fingerprint(chart), RESULTS / f"{chart}.png"
        if mark is not None and (not path.exists() or stored_fingerprint(path) != mark):
            found.append(f"{path.name} ({'missing' if not path.exists() else 'out of date'})")
        elif mark is None and path.exists():
            found.append(f"{path.name} (its inputs are gone)")
    return found
