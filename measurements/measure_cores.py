"""Whether p@2 falls short of db@2 because its client shares the CPU with Postgres (#46's last bar).

Claim under test: on this machine's two cores p@2 (the pipelined inbox on two connections)
reaches less of db@2's rate (its statement alone, the batches built in memory) because p's
reading and decoding take CPU that db@2 gives to its backends, not because the pipeline leaves
Postgres waiting. If so, with a core for Postgres alone and the rest for the broker and the
consumer, p@2 keeps Postgres as busy as db@2 does and p@2/db@2 comes near 1. That layout caps
db@2's backends at one core as well, so the ratio alone cannot tell p@2 gaining from db@2
losing: each variant's rate over its own with shared cores, and the cores its backends kept
busy, say which.

Workload: measure_throughput.py itself, one run of `--variants` at a time (a process of its own,
as a reader runs it), under three layouts that take turns run by run: `shared` (every process may
use every CPU, as in every other file); `apart` (the stack's Postgres, its postmaster and every
backend it forks, on the last --postgres-cores CPUs; the broker, the measuring process and the
consumer on the others); and `niced` (every CPU for every process, as in `shared`, but the
measuring process and the consumer at nice 19: the scheduler gives them a small share of a core
that a backend or the broker also wants). A run's record is the two variants' figures from that
one invocation and the ratio of the first over the second; each layout over `shared` pairs each
variant's runs of the same round.

Assumptions: the stack (stack.py) is up, from this checkout, and nothing else runs on it; at least
two CPUs. The layout is set with sched_setaffinity on the stack's processes and put back to every
CPU when a run ends, fails or is interrupted; after a SIGKILL of this process, `make down && make
up` puts it back.

    python -m measurements.measure_cores --runs 5 --events 100000
"""
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lab import cli, cpu, provenance, results, stack
from lab.settings import ROOT

LAYOUTS = ("shared", "apart", "niced")
NICE = 19  # the consumer's niceness under `niced`: the least share of a contended core
EVERY_CPU = set(range(os.cpu_count() or 1))  # what a layout is put back to


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of `pid` (the JVM's many, each backend's one) on `cpus`; a process or thread
    that has just ended (a backend closing after a run) is no matter."""
    try:
        for task in list(Path(f"/proc/{pid}/task").iterdir()):
            with contextlib.suppress(ProcessLookupError, FileNotFoundError):
                os.sched_setaffinity(int(task.name), cpus)
    except (ProcessLookupError, FileNotFoundError):
        pass


def lay_out(postgres: set[int], others: set[int]) -> None:
    """The postmaster, then its children, on `postgres` (a backend forked later inherits the
    postmaster's), and the broker on `others`."""
    postmaster, broker = stack.postgres_pid(), stack.kafka_pid()
    if postmaster is None or broker is None:
        raise SystemExit("measure_cores: the stack is not up from this checkout (python -m lab.stack up)")
    pin(postmaster, postgres)
    for pid in cpu.children(postmaster):
        pin(pid, postgres)
    pin(broker, others)


def put_back() -> None:
    """Every CPU for the stack again, with Ctrl-C and SIGTERM held until it is done."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        lay_out(EVERY_CPU, EVERY_CPU)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def throughput_command(config: dict, out: Path) -> list[str]:
    return [sys.executable, "measure_throughput.py", "--variants", config["variants"], "--runs", "1",
            "--events", str(config["events"]), *(["--batch", str(config["batch"])] if config["batch"] else []),
            "--out", str(out)]


def one_invocation(config: dict, client: set[int], nice: int, out: Path) -> dict:
    """measure_throughput.py's one run of each variant, its process (and so its workers) on `client`, at `nice`."""
    def place() -> None:
        os.sched_setaffinity(0, client)
        os.nice(nice)

    child = subprocess.Popen(throughput_command(config, out), cwd=ROOT, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, preexec_fn=place)
    try:
        _, stderr = child.communicate()
    except BaseException:  # interrupted: a SIGTERM lets its harness stop its workers and drop its topic and schema
        child.terminate()
        try:
            child.wait(60)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        raise
    if child.returncode != 0:
        tail = (stderr.strip().splitlines() or ["(nothing on stderr)"])[-1]
        raise SystemExit(f"measure_cores: measure_throughput.py exited {child.returncode}: {tail}")
    return json.loads(out.read_text())


def run_once(layout: str, run: int, config: dict) -> dict:
    every = set(os.sched_getaffinity(0))
    postgres = set(sorted(every)[-config["postgres_cores"]:]) if layout == "apart" else every
    client, nice = every - postgres or every, NICE if layout == "niced" else 0
    with results.measurement_lock("measure_cores"):
        pass  # another measurement on these services: say so now, before any layout moves its Postgres
    try:
        lay_out(postgres, client)
        with tempfile.TemporaryDirectory() as folder:
            doc = one_invocation(config, client, nice, Path(folder) / "throughput.json")
    finally:
        put_back()
    figures = {r["variant"]: {k: r.get(k) for k in ("msgs_per_s", "cpu_us_per_msg", "duplicates", "lost",
                                                    "balances_exact")} for r in doc["runs"]}
    top, bottom = config["variants"].split(",")
    return {"variant": f"{top}/{bottom}", "layout": layout, "run": run, "postgres_cpus": sorted(postgres),
            "client_cpus": sorted(client), "client_nice": nice, "throughput_config": doc["config"], "figures": figures,
            "ratio": round(figures[top]["msgs_per_s"] / figures[bottom]["msgs_per_s"], 3),
            "balances_exact": figures[top]["balances_exact"],
            "loaded": merged(doc["runs"], "loaded"), "packages": merged(doc["runs"], "packages")}


def merged(runs: list[dict], field: str) -> dict:
    """The invocation's runs' records of what they loaded (or imported), as one: a file two runs
    loaded with different content is "mixed", as provenance.loaded() says of one run."""
    together: dict = {}
    for r in runs:
        for name, value in r.get(field, {}).items():
            together[name] = value if together.get(name, value) == value else "mixed"
    return together


def record_run(out: results.ResultsFile, record: dict) -> None:
    """ResultsFile.add, with what the invocation loaded beside this process's own files: the run's
    code is both (this process's measure_cores.py and lab modules, and measure_throughput.py's)."""
    mine = {"loaded": provenance.loaded(), "packages": provenance.packages()}
    for field in mine:
        for name, value in mine[field].items():
            record[field][name] = value if record[field].get(name, value) == value else "mixed"
    out.runs.append({**record, **out.code})
    out.document["summary"] = summarise(out.runs)
    results.write_results(out.path, out.document)


def summarise(runs: list[dict]) -> dict:
    by = {layout: {r["run"]: r for r in runs if r["layout"] == layout} for layout in LAYOUTS}
    summary = {layout: {"runs": len(mine), "ratio": results.stats(r["ratio"] for r in mine.values()),
                        "msgs_per_s": {v: results.stats(r["figures"][v]["msgs_per_s"] for r in mine.values())
                                       for v in next(iter(mine.values()))["figures"]}}
               for layout, mine in by.items() if mine}
    for layout in LAYOUTS[1:]:  # each variant's rate under a layout over the same round's with the cores shared
        if paired := [n for n in by[layout] if n in by["shared"]]:
            summary[f"{layout}/shared"] = {v: results.stats(round(by[layout][n]["figures"][v]["msgs_per_s"]
                                                                  / by["shared"][n]["figures"][v]["msgs_per_s"], 3)
                                                            for n in paired)
                                           for v in by[layout][paired[0]]["figures"]}
    return summary


def table(summary: dict) -> str:
    rows = [[layout, s["runs"], *(f"{m['median']:,.0f}" for m in s["msgs_per_s"].values()),
             f"{s['ratio']['median']:.3f} ({s['ratio']['min']:.3f}-{s['ratio']['max']:.3f})"]
            for layout, s in summary.items() if layout in LAYOUTS]
    names = next(s for layout, s in summary.items() if layout in LAYOUTS)["msgs_per_s"]
    return results.text_table(["layout", "runs", *(f"{v} msgs/s" for v in names), "ratio, median (min-max)"], rows)


verdict_line = cli.verdict("{layout} run {run}: {variant} {ratio} (Postgres on CPUs {postgres_cpus}, the consumer at "
                           "nice {client_nice})")


def main(argv=None) -> int:
    parser = cli.measurement("#46: p@2 against db@2, Postgres sharing the CPUs or on its own.", None,
                             events=100_000, partitions=None, seed=False)
    parser.add_argument("--variants", default="p@2,db@2", help="two of measure_throughput.py's variants: A,B (A/B)")
    parser.add_argument("--batch", type=int, help="messages per batch (measure_throughput.py's; default its own)")
    parser.add_argument("--postgres-cores", type=int, default=1,
                        help="how many CPUs Postgres gets to itself under `apart`, the highest-numbered of this "
                             "process's (default 1)")
    args = parser.parse_args(argv)
    cli.at_least(parser, args, 1, "runs", "events", "postgres_cores")
    if args.batch is not None and args.batch < 1:
        parser.error("--batch must be at least 1")
    args.variants = ",".join(name.strip() for name in args.variants.split(","))
    if len(args.variants.split(",")) != 2:
        parser.error("--variants takes two variants, A,B")
    if args.postgres_cores >= len(os.sched_getaffinity(0)):
        parser.error(f"--postgres-cores must leave at least one of this process's {len(os.sched_getaffinity(0))} "
                     "CPUs to the others")
    results.reader_paths(args, "throughput-cores.json")
    config = results.config_of(args, "out", "force")
    with tempfile.TemporaryDirectory() as folder:  # measure_throughput.py judges its own flags, in one line
        said = subprocess.run([*throughput_command(config, Path(folder) / "t.json"), "--dry-run"], cwd=ROOT,
                              capture_output=True, text=True)
    if said.returncode == 2:
        parser.error(said.stderr.strip().splitlines()[-1].partition(": ")[2].removesuffix(" (see --help)"))
    if said.returncode not in (0, 1):  # 1: its --out's config differs, which is only the temporary file's business
        raise SystemExit(f"measure_cores: measure_throughput.py --dry-run exited {said.returncode}: "
                         f"{(said.stderr.strip().splitlines() or ['(nothing on stderr)'])[-1]}")
    if cli.DRY_RUN:
        results.dry_run("measure_cores", Path(args.out), config)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a SIGTERM still puts the layout back
    provenance.watch()
    # Not results.drive(): it would hold the services' measurement lock, which each invocation takes.
    out = results.ResultsFile("measure_cores", Path(args.out), config, args.force)
    for run in range(1, args.runs + 1):
        shift = (run - 1) % len(LAYOUTS)
        order = LAYOUTS[shift:] + LAYOUTS[:shift]
        for layout in order if run % 2 else order[::-1]:  # the first place, and each neighbour's, goes round
            if out.done(layout=layout, run=run):
                continue
            results.progress(f"{layout} run {run} of {args.runs}")
            started = time.monotonic()
            record = run_once(layout, run, config)
            record_run(out, {**record, "duration_s": round(time.monotonic() - started, 1)})
            print(verdict_line(record), flush=True)
    if out.runs and not out.document["summary"]:  # resumed with nothing left to run
        out.document["summary"] = summarise(out.runs)
        results.write_results(out.path, out.document)
    out.close(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
