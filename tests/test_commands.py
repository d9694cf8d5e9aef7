"""The post's measurements from their command lines, with the smallest counts, against the
real services: flags, config, the driver, the run, the summary and the closing tables,
as a reader's `python measure_*.py` goes through them (M4 once broke there unseen).
Where a reader's run writes, and what it compares itself with, needs no services."""
import json

import pytest

import measure_kill
import measure_rebalance
import measure_storage
import measure_throughput
from lab import results

pytestmark = pytest.mark.xdist_group("shared")  # the measurement lock, the reader's results/local: one worker


def test_a_readers_run_writes_its_own_file_and_compares_with_the_committed_one():
    kill = measure_kill.parse_args(["--variant", "c", "--runs", "1"])
    assert kill.out == str(results.LOCAL / "kill-c.json")
    assert kill.committed == results.RESULTS / "kill.json"  # c's committed runs are the all-variant file's
    rebalance = measure_rebalance.parse_args(["--variant", "b", "--runs", "1"])
    assert rebalance.out == str(results.LOCAL / "rebalance-b-classic.json")
    asked = measure_throughput.parse_args(["--runs", "1", "--out", str(results.RESULTS / "throughput.json")])
    assert asked.committed is None, "writing the committed file itself: nothing else to compare with"


@pytest.mark.usefixtures("services")
def test_measure_storage_from_its_command_line(tmp_path, capsys):
    out = tmp_path / "storage.json"
    assert measure_storage.main(measure_storage.parse_args(["--runs", "1", "--rows", "10000", "--out", str(out)])) == 0
    doc = json.loads(out.read_text())
    assert {r["layout"] for r in doc["runs"] if r["part"] == "size"} == {"text", "uuid-v4", "uuid-v7"}
    assert all(r["kept_exactly_recent"] for r in doc["runs"] if r["part"] == "expiry")
    assert all(r["commit"] for r in doc["runs"]), "every run names the code that made it"
    printed = capsys.readouterr().out
    assert "Committed, for comparison (results/storage.json" in printed and "The post's figures" in printed


@pytest.mark.slow
@pytest.mark.usefixtures("services")
def test_measure_throughput_from_its_command_line(tmp_path, capsys):
    out = tmp_path / "throughput.json"
    args = ["--variants", "b,c", "--runs", "1", "--events", "200", "--partitions", "2", "--out", str(out)]
    assert measure_throughput.main(measure_throughput.parse_args(args)) == 0
    doc = json.loads(out.read_text())
    assert {(r["variant"], r["duplicates"], r["lost"]) for r in doc["runs"]} == {("b", 0, 0), ("c", 0, 0)}
    assert "c/b" in doc["summary"]["ratios"]
    assert "c: 323 msgs/s" in capsys.readouterr().out.replace(",", ""), "the post's figure beside the reader's"
