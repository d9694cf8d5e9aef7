"""Results files, their provenance, and the one loop that drives every measurement.

Claim: every figure the README shows was written here, by a harness, into
results/*.json of one shape: {"harness", "config", "machine", "versions",
"runs": [...], "summary"}, with the machine and the versions it ran on. A file
is rewritten atomically after every run, and a measurement started again with
the same config and versions resumes where it stopped, if every file its runs loaded
is unchanged (ran_this_code).

Assumptions: the services in settings.py answer (versions() asks them).
"""
import itertools
import json
import os
import platform
import re
import statistics
import sys
import time
from pathlib import Path

from lab import cli, provenance
from lab.settings import BROKERS, DSN, RESULTS, ROOT

# Where a reader's own runs go by default: beside the committed files, never over them (gitignored).
LOCAL = RESULTS / "local"

# --- provenance --------------------------------------------------------------------

def machine() -> dict:
    mem_kib = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    except OSError:
        pass
    return {"cores": os.cpu_count(), "memory_gib": round(mem_kib / 1024 / 1024, 1),
            "platform": platform.platform(), "python": platform.python_version()}


def versions() -> dict:
    import confluent_kafka
    import psycopg

    from lab import stack

    with psycopg.connect(DSN) as conn:
        postgres = conn.execute("SHOW server_version").fetchone()[0]
    return {"kafka": stack.kafka_version() or "unknown", "postgresql": postgres,
            "confluent_kafka": confluent_kafka.__version__, "librdkafka": confluent_kafka.libversion()[0],
            "psycopg": psycopg.__version__}


CODE_FILES = ("*.py", "*.sql", "lab/pom.xml", "requirements*.txt")  # what a run's figures depend on


def provenance_line() -> str:
    """One line for a measurement that writes text, not JSON (the profiles): where, with what,
    and which code."""
    m, v, c = machine(), versions(), code()
    return (f"{m['cores']} cores, {m['memory_gib']} GiB; Kafka {v['kafka']}, PostgreSQL {v['postgresql']}, "
            f"confluent-kafka {v['confluent_kafka']}; code: commit {c['commit']}"
            + (" with local changes" if c.get("dirty") else ""))


def code() -> dict:
    """The code a run was measured with: the checkout's commit, and whether its code (CODE_FILES)
    differed from it (then `diff` is a hash of that difference, so only the same edit can
    resume the file). {"commit": None} outside a git checkout."""
    import hashlib
    import subprocess

    def git(*args) -> str | None:  # over the code alone: prose and results may change beside a run
        done = subprocess.run(["git", "-C", str(ROOT), *args, "--", *CODE_FILES], capture_output=True, text=True)
        return done.stdout if done.returncode == 0 else None

    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    except OSError:  # no git on this machine
        return {"commit": None, "dirty": None}
    if head.returncode != 0:
        return {"commit": None, "dirty": None}
    changed = git("diff", "HEAD")
    dirty = bool(changed) or bool(git("ls-files", "--others", "--exclude-standard"))
    record = {"commit": head.stdout.strip()[:12], "dirty": dirty}
    if dirty:
        untracked = git("ls-files", "--others", "--exclude-standard") or ""
        record["diff"] = hashlib.sha1(((changed or "") + untracked).encode()).hexdigest()[:12]
    return record


def ran_this_code(run: dict, current: dict) -> bool:
    """Whether a recorded run was made by the code as it is now, so a measurement may resume
    beside it: every file it loaded is unchanged (lab.provenance), whatever has been committed
    since; a run from before runs recorded their files, only at the same commit, unedited."""
    if "loaded" in run:
        return not provenance.changed_since(run["loaded"])
    return {k: run.get(k) for k in current} == current


def reader_paths(args, local_name: str, committed_name: str | None = None) -> Path | None:
    """A reader's run writes their own file (results/local/NAME) unless --out names one; the
    committed results are written only when --out asks for them (as `make measure` does).
    Sets args.out; returns the committed file to compare with at the end (None: it is --out)."""
    committed = RESULTS / (committed_name or local_name)
    if args.out is None:
        args.out = str(LOCAL / local_name)
    return None if Path(args.out).resolve() == committed.resolve() else committed


def read(name: str, folder: Path = RESULTS) -> dict | None:
    """A results file's document, or None if there is none yet."""
    path = Path(folder) / name
    return json.loads(path.read_text()) if path.exists() else None


# --- figures -----------------------------------------------------------------------

def stats(values) -> dict:
    """Median, min and max: the spread every table shows."""
    values = list(values)
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def paired_by_run(doc: dict, top: str, bottom: str, value) -> dict | None:
    """stats of value(run of top) / value(run of bottom), pairing runs by number; None if no pair."""
    of = {(r["variant"], r["run"]): r for r in doc["runs"]}
    ratios = [value(of[top, n]) / value(of[bottom, n]) for v, n in of if v == top and (bottom, n) in of
              and value(of[top, n]) and value(of[bottom, n])]
    return stats(ratios) if ratios else None


def cores_busy(summary: dict) -> float:
    """The cores a variant's processes kept busy: CPU per message times messages per second (medians)."""
    return summary["cpu_us_per_msg"]["total"]["median"] * summary["msgs_per_s"]["median"] / 1e6


def median_or_none(values, digits: int = 2) -> float | None:
    values = list(values)
    return round(statistics.median(values), digits) if values else None


def seen(runs: list[dict], field: str = "variant") -> list:
    """The values of `field` in the order the runs first name them (a summary's rows, in the
    order the command line gave them)."""
    return list(dict.fromkeys(r[field] for r in runs))


def summarise_runs(runs: list[dict], groups, *, key=lambda r: r["variant"], totals=(), spreads=(),
                   extra=None) -> dict:
    """Per group (a variant, usually), in `groups`' order: how many runs, in how many the
    balances were exact, the `totals` summed over runs and the `spreads` as stats();
    `extra(mine)` adds a harness's own fields."""
    summary = {}
    for group in groups:
        mine = [r for r in runs if key(r) == group]
        if not mine:
            continue
        entry = {"runs": len(mine), "balances_exact_runs": sum(bool(r["balances_exact"]) for r in mine)}
        if totals:
            entry["totals"] = {field: sum(r[field] for r in mine) for field in totals}
        entry.update({field: stats(r[field] for r in mine) for field in spreads})
        if extra:
            entry.update(extra(mine))
        summary[group] = entry
    return summary


def text_table(headers: list[str], rows: list[list], note: str = "") -> str:
    """The closing table a harness prints: columns padded to fit, text left, numbers right."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    def number(text):  # 1,234  0.5  3/5  12 / 4, or "-" for none
        return text == "-" or text.replace(",", "").replace(".", "").replace("/", "").replace(" ", "").isdigit()

    numeric = [bool(cells) and all(number(r[i]) for r in cells) for i in range(len(headers))]

    def line(values):
        text = "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True))
        return text.rstrip()

    lines = [line(headers), line(["-" * w for w in widths]), *(line(r) for r in cells)]
    return "\n".join(lines) + (f"\n{note}" if note else "")


# --- the file ------------------------------------------------------------------------

class ResultsFile:
    """One harness's results JSON. A file with the same config and versions is resumed
    (its finished runs are kept); it is rewritten atomically after every run, so an
    interrupted measurement loses at most one run."""

    def __init__(self, name: str, path: Path, config: dict, force: bool = False):
        self.path = Path(path)
        previous = previous_document(name, self.path)  # before asking the services anything
        self.code = code()
        self.document = {"harness": name, "config": config, "machine": machine(), "versions": versions(),
                         "runs": [], "summary": {}}
        if previous is not None:
            same = (previous.get("config"), previous.get("versions")) == (config, self.document["versions"])
            same_code = all(ran_this_code(r, self.code) for r in previous.get("runs", ()))
            if same and same_code:
                self.document["runs"] = previous["runs"]
                progress(f"resuming {self.path}: {len(self.runs)} runs already done with this code")
            elif not force:
                why = ("another config or other versions" if not same else
                       "runs of other code (files they loaded have changed since)")
                raise SystemExit(f"{name}: {self.path} holds {why}; use --out for a new file, or --force to "
                                 "start it again")

    @property
    def runs(self) -> list[dict]:
        return self.document["runs"]

    def done(self, **fields) -> bool:
        """Whether a run with these field values is already recorded, e.g. done(variant="c", run=2)."""
        return any(all(r.get(k) == v for k, v in fields.items()) for r in self.runs)

    def add(self, record: dict, summarise) -> None:
        """Record a run, with the code it ran: the commit, and every file of the checkout that
        this process and the run's workers loaded (lab.provenance), with its hash."""
        self.runs.append({**record, **self.code, "loaded": provenance.loaded(), "packages": provenance.packages()})
        self.document["summary"] = summarise(self.runs)
        write_results(self.path, self.document)

    def close(self, table) -> None:
        """The closing summary table, made from the summary by `table`, and where it is."""
        print()
        print(table(self.document["summary"]))
        print(f"\nwritten to {self.path}")


def previous_document(name: str, path: Path) -> dict | None:
    """The results file a measurement would resume, None if there is none yet; one line (exit 1)
    when `path` is no place for one: parsing refuses an --out given so (cli.MeasurementParser),
    and this, a default chosen after parsing (reader_paths)."""
    try:
        return cli.results_document(path)
    except cli.NotResults as e:
        raise SystemExit(f"{name}: {e}") from None


def write_results(path: Path, document: dict) -> None:
    """Write atomically, so an interrupted run never leaves half a file to resume from."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(path.suffix + ".partial")
    partial.write_text(json.dumps(document, indent=2, default=str) + "\n")
    partial.replace(path)


class measurement_lock:
    """One measurement at a time on these services; a second one fails at once, by name. The
    lock is the services' (named by the broker's address), not the checkout's: a measurement
    on a second stack of its own may run beside one on the first."""

    def __init__(self, name: str):
        where = re.sub(r"[^A-Za-z0-9]+", "_", BROKERS).strip("_")
        self.path = RESULTS / f"measurement-{where}.lock"
        self.name = name
        self._fd = None

    def __enter__(self):
        import fcntl

        RESULTS.mkdir(exist_ok=True)
        self._fd = open(self.path, "a+")
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._fd.seek(0)
            holder = self._fd.read().strip() or "another measurement"
            raise SystemExit(f"{self.name}: {holder} is running on these services; wait for it to finish") from None
        self._fd.seek(0)
        self._fd.truncate()
        self._fd.write(f"{self.name} (pid {os.getpid()})")
        self._fd.flush()
        return self

    def __exit__(self, *exc):
        self._fd.close()


def config_of(args, *how, **extra) -> dict:
    """A results file's config: the parsed flags, less those that say how to run rather than
    what was measured (`how`: --out, --force, ...), plus `extra`."""
    how = {*how, "dry_run", "committed"}  # how to run, never what was measured
    return {**{k: v for k, v in vars(args).items() if k not in how}, **extra}


# --- the driver ----------------------------------------------------------------------

class Progress:
    """Where a measurement is. On a terminal: one bar over its runs, with an ETA and the latest
    news beside it (kill k of n, events applied). Elsewhere (nohup, CI): the news as plain
    lines on stderr, one each, and nothing for the passing status a bar alone can show."""

    def __init__(self, name: str, total: int, done: int = 0):
        self.bar = None
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=done, desc=name, unit="run", file=sys.stderr, dynamic_ncols=True,
                            smoothing=0)  # the ETA from the average run so far, not the last one

    def news(self, text: str) -> None:
        if self.bar is None:
            print(text, file=sys.stderr, flush=True)
        else:
            self.bar.set_postfix_str(text)

    def status(self, text: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(text)

    def out(self, line: str) -> None:
        """A line for stdout (a verdict), printed above the bar rather than through it."""
        if self.bar is None:
            print(line, flush=True)
        else:
            self.bar.write(line, file=sys.stdout)

    def advance(self) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


_progress: Progress | None = None  # the running measurement's, while drive() runs one


def progress(text: str) -> None:
    """News of a measurement: a bar's postfix on a terminal, a line on stderr elsewhere."""
    if _progress is None:
        print(text, file=sys.stderr, flush=True)
    else:
        _progress.news(text)


def status(text: str) -> None:
    """A passing state (a recovery's count so far), worth a bar's postfix but not a line."""
    if _progress is not None:
        _progress.status(text)


def estimate(plan: list[dict], todo: int, config: dict, committed: dict | None) -> str:
    """About how long `todo` runs of `plan` take, from the committed file's run times, scaled by
    events when both configs have them; a sentence saying so, or why there is no estimate."""
    if not committed or not todo:
        return "no estimate: no committed runs of this measurement to time it by" if todo else "nothing left to run"
    times = [r.get("duration_s") or r.get("wall_s") for r in committed["runs"]
             if any(all(r.get(k) == v for k, v in fields.items()) for fields in plan)]
    times = [s for s in times if s]
    if not times:
        return "no estimate: the committed runs do not say how long they took"
    both = "events" in config and "events" in committed["config"]
    scale = config["events"] / committed["config"]["events"] if both else 1.0
    minutes = max(1, round(statistics.median(times) * scale * todo / 60))
    scaled = ", scaled to your --events" if scale != 1 else ""
    return (f"about {minutes} minute{'s' if minutes > 1 else ''} for {todo} run{'s' if todo > 1 else ''} (the "
            f"committed runs took {statistics.median(times):.0f} s each{scaled})")


def compare(document: dict, committed_path: Path | None, table, post_lines=None) -> None:
    """After a reader's run: the committed figures for the same groups, and the post's, beside them."""
    groups = {r.get("variant") for r in document["runs"]} | set(document["summary"])
    committed = json.loads(committed_path.read_text()) if committed_path and committed_path.exists() else None
    if committed and committed_path.resolve() != Path(document.get("path", "")).resolve():
        mine = {k: v for k, v in committed["summary"].items() if k in groups}
        commits = sorted({r.get("commit") or "unrecorded" for r in committed["runs"]})
        print(f"\nCommitted, for comparison ({committed_path.relative_to(ROOT)}, config {committed['config']}, "
              f"commit {', '.join(commits)}):")
        try:
            print(table(mine) if mine else "(no runs of these variants)")
        except (KeyError, TypeError):
            print("(its summary has an older shape than this harness prints; the README has its table)")
    if post_lines:
        lines = post_lines(groups)
        if lines:
            print("\nThe post's figures (results/post-figures.json, the author's machine):")
            print("\n".join(lines))


def dry_run(name: str, path: Path, config: dict):
    """--dry-run: compare the config this command would record with its file's, run nothing.
    Exits 0 when they match or there is no file yet, 1 (naming each difference) when not."""
    mine = json.loads(json.dumps(config, default=str))
    previous = previous_document(name, path)
    if previous is None:
        print(f"{name}: {path} does not exist yet; this command would start it")
        raise SystemExit(0)
    theirs = previous["config"]
    if theirs == mine:
        print(f"{name}: this command's config matches {path}")
        raise SystemExit(0)
    differences = [f"{k}: file {theirs.get(k)!r}, command {mine.get(k)!r}" for k in sorted({*theirs, *mine})
                   if theirs.get(k) != mine.get(k)]
    print(f"{name}: this command's config differs from {path}'s: {'; '.join(differences)}")
    raise SystemExit(1)


def drive(name: str, out, config: dict, plan, run_once, summarise, table, verdict_line,
          force: bool = False, rotate: bool = False, options: dict | None = None, outer: tuple = (),
          committed: Path | None = None, post_lines=None) -> dict:
    """The loop every measurement runs. `plan` lists what one run covers, as dicts of the
    fields that name a run (e.g. {"variant": "c"}); run r of each is run_once(**fields,
    run=r, config=config). Runs are interleaved across the plan, so machine noise spreads
    over all of it (`rotate` also reverses the order every other run and shifts it by one
    every two, so of two neighbours each goes first as often); a run already in the
    file is skipped, not repeated; after each, its verdict line and its plain fields.
    `options` reach run_once inside its config but are not recorded: how to run (e.g.
    keep=True), not what was measured. `outer` names fields that change slowly (an inbox
    that takes minutes to fill): the plan is cut into blocks by their values, in the plan's
    order, and each block gets all its runs before the next begins. `committed` (a committed
    results file) and `post_lines(groups)` (the post's figures as lines) are printed beside
    the reader's figures at the end, and the committed run times give the estimate up front."""
    global _progress
    if cli.DRY_RUN:
        dry_run(name, Path(out), config)
    provenance.watch()
    plan = [dict(fields) for fields in plan]
    blocks = {}
    for fields in plan:
        blocks.setdefault(tuple(fields.get(name) for name in outer), []).append(fields)
    results = ResultsFile(name, Path(out), config, force)
    with measurement_lock(name):
        runs = range(1, config["runs"] + 1)
        finished = sum(results.done(**f, run=r) for f in plan for r in runs)
        baseline = json.loads(committed.read_text()) if committed and committed.exists() else None
        print(f"{name}: {estimate(plan, len(plan) * len(runs) - finished, config, baseline)}; writing {results.path}",
              file=sys.stderr, flush=True)
        _progress = Progress(name, len(plan) * len(runs), finished)
        try:
            for block, run in itertools.product(blocks.values(), runs):
                shift = (run - 1) // 2 % len(block) if rotate else 0
                order = block[shift:] + block[:shift]
                if rotate and run % 2 == 0:  # neighbours swap every other run: a pair's first goes second
                    order.reverse()
                for fields in order:
                    if results.done(**fields, run=run):
                        continue
                    progress(f"{' '.join(map(str, fields.values()))} run {run} of {config['runs']}")
                    started = time.monotonic()
                    provenance.begin_run()
                    record = run_once(**fields, run=run, config={**config, **(options or {})})
                    results.add({**record, "duration_s": round(time.monotonic() - started, 1)}, summarise)
                    _progress.out(verdict_line(record))
                    _progress.out(json.dumps({k: v for k, v in record.items() if not isinstance(v, (list, dict))}))
                    _progress.advance()
        finally:
            _progress.close()
            _progress = None
    if results.runs and not results.document["summary"]:  # resumed with nothing left to run
        results.document["summary"] = summarise(results.runs)
        write_results(results.path, results.document)  # e.g. runs joined from two stacks' files
    results.close(table)
    if committed is not None or post_lines is not None:
        compare({**results.document, "path": str(results.path)}, committed, table, post_lines)
    return results.document
