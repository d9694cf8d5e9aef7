"""Another commit's code, run beside today's in one measurement (measure_throughput.py --against REV).

Claim: on a shared machine a cost is only comparable within one invocation, so the old code's
runs are interleaved with today's, run by run, on the same services, harness and events. What
differs is the worker: `python -m lab.worker` started with its working directory in a git
worktree of REV (under .cache/against/), so its lab, variants and consume.py are REV's, with
the same interpreter and environment. The run's tables come from REV's schema.sql and
lab/grants.sql, and a variant's setup SQL from REV's own declaration (prepare()).

The old worker is asked, not assumed: its --help lists the variants and flags it takes
(worker_cli), and a run it could not make is refused up front, in one line (refusal).

Assumptions: git is on the PATH and the checkout is a git repository.
"""
import dataclasses
import functools
import os
import re
import subprocess
import sys
from pathlib import Path

from lab.settings import ROOT

WORKTREES = ROOT / ".cache" / "against"  # gitignored, ruff-excluded, and not recursed into by pytest
SEP = "~"  # a run of the old code is named VARIANT~TAG (p@2~1b663da), today's VARIANT


def git(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True)


def resolve(rev: str) -> str:
    """REV's full commit hash; ValueError with one line for a REV git does not know."""
    done = git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if done.returncode != 0 or not done.stdout.strip():
        raise ValueError(f"--against {rev}: no such commit in this checkout (git rev-parse knows none)")
    return done.stdout.strip()


def worktree(commit: str) -> Path:
    """A detached worktree at `commit` under WORKTREES, made once and reused while it is at that
    commit with no edits to its tracked files; RuntimeError with one line otherwise."""
    path = WORKTREES / commit[:12]
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        done = git("worktree", "add", "--detach", str(path), commit)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
            raise RuntimeError(f"git worktree add {path.relative_to(ROOT)} {commit[:12]} failed: {last}")
    at = git("rev-parse", "HEAD", cwd=path)
    if at.returncode != 0 or at.stdout.strip() != commit:
        raise RuntimeError(f"{path.relative_to(ROOT)} is not a worktree at {commit[:12]}: remove it "
                           f"(git worktree remove --force {path.relative_to(ROOT)}) and run again")
    edited = git("status", "--porcelain", "--untracked-files=no", cwd=path).stdout.strip()
    if edited:
        raise RuntimeError(f"{path.relative_to(ROOT)} has edits to its tracked files, so it is not {commit[:12]}'s "
                           f"code: git -C {path.relative_to(ROOT)} checkout -- . (or remove the worktree)")
    return path


def worker_env(root: Path) -> dict:
    """This process's environment for a worker rooted at `root`: the same services, and its
    own folder first on the import path (`-m` puts the working directory there too, unless
    PYTHONSAFEPATH says not to)."""
    paths = [str(root), *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths), PYTHONUNBUFFERED="1")


@functools.cache
def worker_cli(root: Path) -> tuple[frozenset, frozenset]:
    """(the --variant choices, every --flag) of the lab/worker.py at `root`, from its --help."""
    done = subprocess.run([sys.executable, "-m", "lab.worker", "--help"], cwd=root, env=worker_env(root),
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise RuntimeError(f"the worker at {root} did not answer --help: {last}")
    choices = re.search(r"--variant\s*\{([^}]*)\}", done.stdout)
    variants = frozenset(v.strip() for v in choices.group(1).split(",")) if choices else frozenset()
    return variants, frozenset(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", done.stdout))


@dataclasses.dataclass(frozen=True)
class OldCode:
    """REV as a measurement uses it: what the reader typed, the commit, and its worktree."""
    rev: str
    commit: str
    root: Path

    @property
    def tag(self) -> str:
        """The suffix of its runs' names: VARIANT~TAG."""
        return self.commit[:7]

    def config(self) -> dict:
        return {"rev": self.rev, "commit": self.commit}

    def refusal(self, variant: str, args: tuple) -> str | None:
        """One line if the old worker cannot run `variant` with these flags, else None."""
        variants, flags = worker_cli(self.root)
        if variants and variant not in variants:
            return (f"--against {self.rev}: its worker has no variant {variant} (it has {', '.join(sorted(variants))})")
        missing = [str(a) for a in args if str(a).startswith("--") and str(a) not in flags]
        if missing:
            return f"--against {self.rev}: its worker takes no {', '.join(missing)}, which {variant} is run with today"
        return None


def old_code(rev: str) -> OldCode:
    """REV resolved, and its worktree made or reused."""
    commit = resolve(rev)
    return OldCode(rev, commit, worktree(commit))


def split(name: str) -> tuple[str, str | None]:
    """A run name as (today's name, the old code's tag or None): p@2~1b663da -> (p@2, 1b663da)."""
    base, sep, tag = name.partition(SEP)
    return base, (tag if sep else None)


# The variant's own setup SQL, as the code at its root declares it: the registry's prepare
# where it has one, more_variants' before the registry (1b663da), nothing before either.
PREPARE = """
import sys
try:
    from lab.registry import prepare
except ImportError:
    try:
        from lab.more_variants import prepare
    except ImportError:
        sys.exit(0)
prepare(sys.argv[1], sys.argv[2])
"""


def prepare(root: Path, variant: str, dsn: str) -> None:
    """Run `variant`'s setup SQL as the code at `root` declares it, in the schema `dsn` names."""
    done = subprocess.run([sys.executable, "-c", PREPARE, variant, dsn], cwd=root, env=worker_env(root),
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise RuntimeError(f"{variant}'s setup at {root} failed: {last}")


def cwd_of(pid: int) -> str | None:
    """Where a running process works, from /proc (None once it has gone)."""
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None


def run_root(name: str, config: dict) -> Path:
    """The checkout a run's worker runs from: this one for today's runs, the worktree of
    config["against"]'s commit for a run named VARIANT~TAG."""
    _, tag = split(name)
    if tag is None:
        return ROOT
    commit = (config.get("against") or {}).get("commit", "")
    if not commit.startswith(tag):
        raise ValueError(f"run {name}: the old code's runs are named ~{commit[:7] or '?'} in this config, not ~{tag}")
    return WORKTREES / commit[:12]


def provenance(name: str, config: dict, cwd: str | None, loaded: dict) -> dict:
    """A run's record of which code ran its worker: `code` is "now" (this checkout: the run's
    `commit` and `loaded` say which) or the old code's tag, with its full commit, its worktree
    and the working directory /proc showed the worker in; and the files the old worker said it
    loaded (a worker as old as 1b663da says none), hashed in its own worktree."""
    _, tag = split(name)
    where = os.path.relpath(cwd, ROOT) if cwd else None
    if tag is None:
        return {"code": "now", "worker_cwd": where}
    record = {"code": tag, "worker_commit": config["against"]["commit"],
              "worker_root": run_root(name, config).relative_to(ROOT).as_posix(), "worker_cwd": where}
    return {**record, "worker_loaded": dict(sorted(loaded.items()))} if loaded else record
