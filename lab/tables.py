"""How a results table is written: one renderer (Table) for every section declared as data, and
the provenance every footer ends in (the machine, the versions, the code and what changed since).
"""
import collections
import functools
import statistics
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from lab import registry, results
from lab.provenance import digest
from lab.settings import RESULTS, ROOT

# Variants that retired into another, by the label they had, for the results files measured
# with them (p-lean's steps are p's own since #46).
RETIRED = {"p-lean-py": "p-lean-py: p, decoding by msgspec, fewer cycle collections",
           "p-lean-sql": "p-lean-sql: and the join once, rows back only for what was not applied",
           "p-lean": "p-lean: and the ledger without its foreign key"}
VARIANT_NAMES = {**RETIRED, **registry.labels(),  # each variant's own label, where it is declared
                 "external": "external: an HTTP charge, keys honoured"}  # the race's; M5 names its policies


class Missing(Exception):
    """A section's results file is not there yet: the section says so, and how to make it."""


def load(name: str) -> dict | None:
    """results/NAME, or None; read once while the file stays as it is (figures read files many times)."""
    path = RESULTS / name  # this module's RESULTS, which a test may point elsewhere
    return read(path, path.stat().st_mtime_ns) if path.exists() else None


@functools.lru_cache(maxsize=256)
def read(path: Path, modified: int) -> dict:
    return results.read(path.name, path.parent)


def need(name: str, command: str = "make measure") -> dict:
    """A results file a section cannot do without; Missing (shown in its place) when absent."""
    if (doc := load(name)) is None:
        raise Missing(f"_No `results/{name}` yet: run `{command}`._\n")
    return doc


def spread(stat: dict | None, digits: int = 0) -> str:
    """A summary's median (min–max), as every table prints it; a dash where there is none."""
    return "{median:,.{digits}f} ({min:,.{digits}f}–{max:,.{digits}f})".format(**stat, digits=digits) if stat else "–"


def markdown_table(headers: list[str], rows: list[list], text_columns: int = 1, also_text: tuple = ()) -> str:
    """Its first `text_columns` (and those at the negative indices `also_text`) left-aligned text, the rest figures."""
    aligns = ["---" if i < text_columns or i - len(headers) in also_text else "---:" for i in range(len(headers))]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(aligns) + "|"]
    return "\n".join(lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows])


def read_footers() -> dict[str, str]:
    """The sections' prose templates (lab/footers.md): each `## NAME` over its lines, joined by single spaces."""
    found: dict[str, list[str]] = {}
    for line in Path(__file__).with_name("footers.md").read_text().splitlines():
        if line.startswith("## "):
            found[line[3:]] = lines = []
        elif line and found:
            lines.append(line)
    return {name: " ".join(lines) for name, lines in found.items()}


FOOTERS = read_footers()


def say(name: str, **fields) -> str:
    """The prose template `name` (lab/footers.md) filled in with `fields`."""
    return FOOTERS[name].format(**fields)


def runs_of(doc: dict, **fields) -> list[dict]:
    return [r for r in doc["runs"] if all(r.get(k) == v for k, v in fields.items())]


def total(runs, field: str) -> int:
    return sum(r[field] for r in runs)


def exact(runs) -> str:
    return f"{sum(bool(r['balances_exact']) for r in runs)} of {len(runs)}"


# --- provenance: what every footer ends with ------------------------------------------------

FRAMEWORKS = {"faststream": "FastStream", "quixstreams": "Quix Streams", "aiokafka": "aiokafka"}
# What a run may have loaded, for runs that did not record it: the code, less the tests and the
# report's own modules (no measurement imports them; test_provenance checks a real run's record).
REPORT_MODULES = ("report", "claims", "charts", "tables", "sections", "figures", "overview", "costs")
CODE = ("*.py", "*.sql", ":!tests", *(f":!lab/{name}.py" for name in REPORT_MODULES))
LISTED = 6  # changed files named in a footer; the rest are counted


def provenance(doc: dict) -> str:
    m, v = doc["machine"], doc["versions"]
    return (f"{m['cores']} cores, {m['memory_gib']} GiB; Kafka {v['kafka']}, PostgreSQL {v['postgresql']}, "
            f"confluent-kafka {v['confluent_kafka']} (librdkafka {v['librdkafka']}){frameworks_ran(doc)}; "
            f"{measured_by(doc)}")


def frameworks_ran(doc: dict) -> str:
    """The frameworks the runs' workers imported, and their confluent-kafka where it is not the harness's."""
    seen: dict[str, set] = collections.defaultdict(set)
    for run in doc["runs"]:
        for name, versions in run.get("packages", {}).items():
            seen[name].update(versions.split(", "))
    said = [f"{FRAMEWORKS[name]} {', '.join(sorted(seen[name]))}" for name in FRAMEWORKS if seen.get(name)]
    if other := sorted(seen.get("confluent_kafka", set()) - {doc["versions"]["confluent_kafka"]}):
        said.append(f"confluent-kafka {', '.join(other)} in a framework's own environment")
    return f"; the workers ran {', '.join(said)}" if said else ""


def legacy_changes(commit: str) -> list[str]:
    """For runs from before they recorded what they loaded: every code file changed since."""
    diff = subprocess.run(["git", "-C", str(ROOT), "diff", "--name-only", "--no-renames", commit, "--", *CODE],
                          capture_output=True, text=True)
    return diff.stdout.split() if diff.returncode == 0 else [f"(commit {commit} unknown here)"]


def measured_by(doc: dict) -> str:
    """The runs' commit, and the files they loaded that differ now: the section is stale exactly then."""
    runs = doc["runs"]
    commits = sorted({r.get("commit") or "" for r in runs})
    if commits == [""]:
        return "code: not recorded (measured before runs named their commit)"
    dirty = any(r.get("dirty") for r in runs)
    named_ = ", ".join(c or "not recorded" for c in commits) + (" with local changes" if dirty else "")
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
        return f"code: commit {named_}{how}"
    listed = ", ".join(changed[:LISTED]) + (f" and {len(changed) - LISTED} more" if len(changed) > LISTED else "")
    return f"code: commit {named_}{how}; **changed since: {listed}**"


# --- names and the CPU table, which several sections share -----------------------------------

def named(name: str) -> str:
    """A measure_throughput run name in words: p@2 p on 2 connections (k@16 16 lanes, d@50 batches of 50),
    p:3 three processes of p, "p@2, 10,000 accounts" an account sweep's, p@2~1b663da 1b663da's code."""
    name, _, tag = name.partition("~")
    base, _, accounts = name.partition(", ")
    base, _, consumers = base.partition(":")
    variant, _, swept = base.partition("@")
    unit = {"k": "lane", "d": "message"}.get(variant, "connection")  # what @N sweeps

    def counted(n, noun):
        return f", {n} {noun}{'' if n == '1' else 's'}"
    swept = counted(swept, unit) + " a batch" * (variant == "d") if swept else ""
    return (VARIANT_NAMES.get(variant, variant) + swept
            + (counted(consumers, "consumer") if consumers else "") + (f", {accounts}" if accounts else "")
            + (f", {tag}'s code" if tag else ""))


CPU_KINDS = {"consumer_python": "consumer, Python", "consumer_librdkafka": "consumer, librdkafka",
             "postgres_backends": "Postgres, its backends", "postgres_other": "Postgres, the rest",
             "broker": "broker"}


def cores_busy(stats: dict) -> str:
    """The cores a variant's processes kept busy: CPU per message times messages per second (medians)."""
    return f"{results.cores_busy(stats):.2f}"


def cpu_table(doc: dict) -> str:
    """µs of CPU per message, per process, of the variants whose runs recorded it (lab/cpu.py), or ""."""
    variants = {name: s for name, s in doc["summary"]["variants"].items() if "cpu_us_per_msg" in s}
    if not variants:
        return ""
    rows = [[named(name), s["runs"], *(f"{s['cpu_us_per_msg'][kind]['median']:,.1f}" for kind in CPU_KINDS),
             spread(s["cpu_us_per_msg"]["total"], 1), cores_busy(s), f"{s['consumer_peak_rss_mib']['median']:,.0f}"]
            for name, s in variants.items()]
    return (markdown_table(["Variant", "Runs", *(f"µs/msg: {label}" for label in CPU_KINDS.values()),
                            "µs/msg, all, median (min–max)", "Cores busy", "Consumer peak RSS (MiB)"], rows)
            + f"\n\n{say('cpu')}{self_timed_cpu(doc)}\n\n")


def cpu_of_runs(mine: list[dict]) -> tuple[str, ...]:
    """For a file that summarised no CPU (the growing inbox): the medians of the consumer's, the backends'
    and all CPU per message, and of the consumer's peak RSS; dashes if a run did not record them."""
    if not mine or any(not r.get("cpu_us_per_msg") for r in mine):
        return ("–",) * 4

    def median_of(*kinds):
        return f"{statistics.median(sum(r['cpu_us_per_msg'][kind] for kind in kinds) for r in mine):,.1f}"
    return (median_of("consumer_python", "consumer_librdkafka"), median_of("postgres_backends"), median_of("total"),
            f"{statistics.median(r['consumer_peak_rss_mib'] for r in mine):,.0f}")


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
    text = [" " + say(f"cpu.{name}") for name in ("raw", "db") if name in read or name == "db" and "db-d" in read]
    if any("cpu_us_per_msg" not in stats[name] for name in mine):  # a row of raw or a ceiling without its CPU
        text.append(" Rows without CPU figures were not read.")
    return "".join(text)


def events_of_text(config: dict) -> str:
    """", c: 5,000": the variants a measure_throughput run gave another --events (--events-of)."""
    return "".join(f", {v}: {n:,}" for v, n in config.get("events_of", {}).items())


# --- a section as a declaration ------------------------------------------------------------

class Row(NamedTuple):
    """One table row's material: its key, its summary entry (if any), its runs, and the file."""
    key: object
    s: dict | None
    runs: list
    doc: dict

    @property
    def t(self) -> dict:
        return self.s["totals"]


def summary(*path: str, match: Callable = lambda r, key: r.get("variant") == key) -> Callable:
    """Rows from a summary (doc["summary"][*path]): one per entry, with the runs `match` gives it."""
    def rows(doc):
        entries = doc["summary"]
        for part in path:
            entries = entries[part]
        return [Row(key, s, [r for r in doc["runs"] if match(r, key)], doc) for key, s in entries.items()]
    return rows


@dataclass(frozen=True)
class Table:
    """A section that is one table of one results file; its footer is the template of its name in
    lab/footers.md, over c (the config), doc, prov (the provenance), command and extra(doc)'s fields."""
    name: str
    file: str
    columns: list | None = None  # None: body(doc) is the table
    rows: Callable = field(default_factory=lambda: summary())
    command: str = "make measure"
    text_columns: int = 1
    cpu: bool = False  # the CPU table (cpu_table) first
    extra: Callable = lambda doc: {}
    after: Callable = lambda doc: ""  # more text, after the footer
    also: tuple = ()  # other results files it cannot do without
    body: Callable | None = None
    before: str = ""  # text before it all
    optional: bool = False  # "" when its file is missing (a part of another section)
    indent: bool = False  # every line indented by two spaces (the page shows it inside a list item)

    def __call__(self) -> str:
        if self.optional and load(self.file) is None:
            return ""
        doc, _ = need(self.file, self.command), [need(name) for name in self.also]
        table = self.body(doc) if self.body else markdown_table(
            [h for h, _ in self.columns], [[cell(e) for _, cell in self.columns] for e in self.rows(doc)],
            self.text_columns)
        footer = FOOTERS[self.name].format(c=doc.get("config", {}), doc=doc, prov=provenance(doc), command=self.command,
                                           **self.extra(doc))
        text = self.before + (cpu_table(doc) if self.cpu else "") + table + "\n\n" + footer + "\n" + self.after(doc)
        return "".join("  " * bool(line.strip()) + line for line in text.splitlines(True)) if self.indent else text
