"""Every measurement command the README, docs/ and the Makefile print still runs, and records
the config of the file it writes: each is run with --dry-run (it parses its flags, builds its
config, compares it with its --out file's, and measures nothing)."""
import os
import re
import shlex
import subprocess
import sys

import pytest

from lab import settings
from lab.settings import ROOT

# Files whose runs were measured by an older harness, whose config has since gained fields:
# their commands cannot match until they are measured again. Each must still differ (below),
# so this list only shrinks.
MEASURED_BY_AN_OLDER_HARNESS: dict[str, str] = {}


def documented_commands() -> list[str]:
    """`python ...` commands in backticks (README.md, docs/*.md) and the Makefile's $(PY) lines,
    those that run a measurement: a top-level measure_*.py or a measurements module."""
    found = []
    for document in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        found += re.findall(r"`(python (?:measure_\w+\.py|-m measurements\.measure_\w+)[^`]*)`", document.read_text())
    makefile = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    for line in makefile.splitlines():
        line = line.strip()
        if line.startswith("$(PY) ") and "$$" not in line and re.match(r"\$\(PY\) (measure_|-m measurements\.measure_)",
                                                                      line):
            found.append("python " + line.removeprefix("$(PY) ").replace(" $(FORCE)", "").split(" || ")[0])
    return sorted(set(found))


def dry_run(command: str) -> subprocess.CompletedProcess:
    argv = shlex.split(command)[1:]
    env = dict(os.environ)
    if "measurements.measure_cluster" in argv:  # it must point at the replicated lab; nothing connects
        env.update(KAFKA_BROKERS=settings.CLUSTER_BROKERS, CONSUMER_DSN=settings.CLUSTER_DSN)
    return subprocess.run([sys.executable, *argv, "--dry-run"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


def test_there_are_commands_to_check():
    commands = documented_commands()
    assert len(commands) >= 20, commands
    assert any("measure_kill.py --variant all" in c for c in commands)


@pytest.mark.usefixtures("services")
def test_every_documented_command_matches_the_file_it_writes():
    mismatched, broken = {}, {}
    for command in documented_commands():
        done = dry_run(command)
        out = (done.stdout + done.stderr).strip()
        if done.returncode == 0 and ("matches" in out or "does not exist yet" in out):
            continue
        if done.returncode == 1 and "differs from" in out:
            file = os.path.relpath(re.search(r"differs from (\S+?)'s", out).group(1), ROOT)
            if not file.startswith("results/local/"):  # a reader's own file may hold any config
                mismatched[file] = f"{command}: {out}"
            continue
        broken[command] = out[-500:]
    assert not broken, broken
    unexplained = {f: why for f, why in mismatched.items() if f not in MEASURED_BY_AN_OLDER_HARNESS}
    assert not unexplained, unexplained
    assert set(MEASURED_BY_AN_OLDER_HARNESS) <= set(mismatched), "a file measured again: take it off the list"
