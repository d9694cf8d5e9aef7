"""The conformance matrix (measurements/conformance.py, docs/conformance.md): consume.py as a
plain command passes the copies, the poison and the kills; the naive consumer, the control,
fails the copies and the kills; a fast consumer's kills land mid-stream; a check that cannot
run is a row, not a crash; a command that cannot be measured is one line. Small sizes: the
whole file takes about a minute and a half."""
import json

import pytest

from measurements import conformance
from tests.seeds import shifted

pytestmark = pytest.mark.xdist_group("shared")  # the measurement lock: one worker, in turn

NAIVE = "python examples/python/naive_consume.py"
# 1,000 credits to copy, 2,000 to kill three times, 0.5-1.5 s into each life
SMALL = ["--scale", "0.5", "--kills", "3", "--life", "0.5,1.5", "--session-timeout-ms", "2000",
         "--seed", str(shifted(7))]


def rows_of(command: str, checks: str, out, *more: str) -> dict:
    """The conformance checks on a command, from the command line: each check's row, by name."""
    args = conformance.parse_args(["--command", command, "--checks", checks, "--out", str(out), *SMALL, *more])
    assert conformance.main(args) == 0
    document = json.loads(out.read_text())
    assert document["config"]["command"] == command
    assert set(document) == {"harness", "config", "machine", "versions", "runs", "summary"}
    return {run["check"]: run for run in document["runs"]}


@pytest.mark.slow
@pytest.mark.usefixtures("services")
def test_consume_py_passes_the_copies_the_poison_and_the_kills(tmp_path):
    rows = rows_of("python consume.py", "copies,poison,kills", tmp_path / "conformance.json")
    assert set(rows) == {"copies", "poison", "kills"}
    for check, row in rows.items():
        assert row["error"] is None and row["passed"] is True, (check, row)
        assert (row["duplicates"], row["lost"]) == (0, 0), (check, row)
    assert rows["copies"]["details"]["skipped"] >= 1  # the inbox caught the copies
    assert rows["kills"]["details"]["kills"] >= 1
    poison = rows["poison"]
    assert poison["evidence"]["poison_applied"] == [] and poison["details"]["dlq"] == len(conformance.POISON)


@pytest.mark.slow
@pytest.mark.usefixtures("services")
def test_the_control_a_naive_command_fails_the_copies_and_the_kills(tmp_path):
    """Auto-commit, no inbox: every copy is credited again, and each kill replays what was applied
    since the last timer commit. consume.py's rows above are worth something only because these fail."""
    rows = rows_of(NAIVE, "copies,kills", tmp_path / "conformance.json")
    for check in ("copies", "kills"):
        row = rows[check]
        assert row["error"] is None and row["passed"] is False and row["duplicates"] > 0, (check, row)
        [first, *_] = row["evidence"]["duplicated"]
        assert first["applied"] >= 2 and first["records"], row["evidence"]  # where its records sit: partition/offset
    assert rows["copies"]["duplicates"] >= 1000  # the second copy of each of 1,000 credits, at least


@pytest.mark.slow
@pytest.mark.usefixtures("services")
def test_every_kill_lands_mid_stream_even_on_a_fast_consumer(tmp_path):
    """d drains thousands of credits a second: published up front, they were all applied in its
    first life and no kill landed mid-stream. Kept a backlog, it has credits unapplied at each
    SIGKILL (as counted at that moment)."""
    args = conformance.parse_args(["--variant", "d", "--checks", "kills", "--out", str(tmp_path / "d.json"), *SMALL])
    assert conformance.main(args) == 0
    [row] = json.loads((tmp_path / "d.json").read_text())["runs"]
    assert row["error"] is None and (row["duplicates"], row["lost"]) == (0, 0), row
    assert row["details"]["kills"] == 3 and row["details"]["mid_stream"] >= 1, row["details"]


@pytest.mark.usefixtures("services")
def test_a_check_that_raises_is_a_row_and_the_others_still_run(tmp_path, monkeypatch):
    def broken(variant, config):
        raise RuntimeError("the broker said no\nand more besides")

    monkeypatch.setitem(conformance.RUN, "copies", broken)
    monkeypatch.setitem(conformance.RUN, "kills", lambda variant, config: {
        "passed": True, "duplicates": 0, "lost": 0, "evidence": {"duplicated": [], "lost": []}, "details": {}})
    rows = rows_of("python consume.py", "copies,kills", tmp_path / "conformance.json")
    assert rows["copies"]["passed"] is None and rows["copies"]["error"] == "RuntimeError: the broker said no"
    assert rows["kills"]["passed"] is True
    summary = json.loads((tmp_path / "conformance.json").read_text())["summary"]
    assert "error: RuntimeError: the broker said no" in conformance.table(summary)


@pytest.mark.usefixtures("services")
def test_a_command_that_cannot_be_measured_gets_one_line(tmp_path, capsys):
    args = conformance.parse_args(["--command", "no-such-consumer --flag", "--checks", "copies", "--scale", "0.01",
                                   "--out", str(tmp_path / "conformance.json")])
    assert conformance.main(args) == 1
    [line] = [line for line in capsys.readouterr().err.splitlines() if line.startswith("conformance.py: ")]
    assert "your command could not be started (the shell's exit 127: not found)" in line


@pytest.mark.parametrize("flags", [
    ["--checks", "copies"],  # neither --command nor --variant
    ["--command", "python consume.py", "--checks", "copies,teleport"],
    ["--command", "python consume.py", "--scale", "0"],
    ["--variant", "c", "--effects", "SELECT event_id FROM ledger"],
])
def test_bad_flags_exit_2(flags, capsys):
    with pytest.raises(SystemExit) as exited:
        conformance.parse_args(flags)
    assert exited.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_the_table_shows_evidence_with_partition_and_offset():
    summary = conformance.summarise([
        {"variant": "v", "check": "kills", "passed": False, "duplicates": 7, "lost": 1, "error": None, "seconds": 12.3,
         "evidence": {"duplicated": [{"event_id": "kl-9", "applied": 2, "records": ["1/40"]}], "duplicated_ids": 7,
                      "lost": [{"event_id": "kl-3", "records": ["0/2"]}], "lost_ids": 1},
         "details": {"kills": 5, "balances_exact": False}},
        {"variant": "v", "check": "copies", "passed": True, "duplicates": 0, "lost": 0, "error": None, "seconds": 4.0,
         "evidence": {"duplicated": [], "lost": []}, "details": {"skipped": 500}}])
    assert list(summary) == ["copies", "kills"]  # in the checks' order, whatever order they ran in
    text = conformance.table(summary)
    assert "dup kl-9@1/40 (+6 more); lost kl-3@0/2" in text and "FAILED" in text and "balances WRONG" in text
    assert text.splitlines()[-1] == "1 of 2 checks passed"


def test_the_poison_battery_names_each_readable_id_once():
    ids = [event_id for *_, carried in conformance.POISON for event_id in carried]
    assert len(ids) == len(set(ids)) and not any(event_id.startswith("ok-") for event_id in ids)
    assert len(conformance.POISON) == 9


def test_the_soak_schedule_is_seeded_and_ends_in_time():
    config = {"seed": shifted(3), "soak_minutes": 2.0, "soak_every_s": 20.0}
    plan = conformance.soak_plan(config)
    assert plan == conformance.soak_plan(config) and plan != conformance.soak_plan({**config, "seed": shifted(4)})
    assert all(0 < at < 120 for at, _ in plan) and [at for at, _ in plan] == sorted(at for at, _ in plan)
    actions = [action for _, action in plan]
    assert set(actions) <= {"kill", *conformance.SOAK_FAULTS} and "kill" in actions
