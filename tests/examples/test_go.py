"""The contract proved from outside Python (docs/your-consumer.md) on a third Kafka client: the Go
consumers in examples/go, on franz-go and pgx, measured by the same harnesses as any command.
The inbox consumer credits each event once under SIGKILLs and skips a zombie's copy; its control,
franz-go's autocommit and no inbox, fails both schedules."""
import json
from pathlib import Path

import pytest

import measure_kill
import measure_rebalance
from tests.seeds import shifted

pytestmark = pytest.mark.xdist_group("shared")  # the measurement lock: one worker, in turn

BIN = Path(__file__).resolve().parents[2] / "examples" / "go" / "bin"
INBOX = str(BIN / "inbox")
AUTO_COMMIT = str(BIN / "autocommit")


@pytest.fixture(autouse=True)
def _built():
    for binary in (INBOX, AUTO_COMMIT):
        assert Path(binary).exists(), f"{binary} is not built: run `make examples` (Go 1.26)"


def kill_schedule(command: str, out) -> dict:
    """Three SIGKILLs 1-2 s into each life, seed 7: the Java pair's schedule."""
    args = measure_kill.parse_args(["--command", command, "--version-command", f"{command} --version",
                                    "--runs", "1", "--kills", "3", "--events", "4000", "--partitions", "3",
                                    "--life", "1,2", "--seed", str(shifted(7)), "--session-timeout-ms", "3000",
                                    "--out", str(out)])
    assert measure_kill.main(args) == 0
    document = json.loads(out.read_text())
    name = Path(command).name
    assert document["config"]["command_version"].startswith(f"{name}-go 1.0.0 (franz-go v1.22.3)"), document["config"]
    return document["runs"][0]


@pytest.mark.usefixtures("services")
def test_the_go_inbox_consumer_credits_each_event_once_under_kills(tmp_path):
    record = kill_schedule(INBOX, tmp_path / "kill.json")
    assert record["kills"] == 3, record["kill_log"]
    assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0)
    assert record["balances_exact"] is True


@pytest.mark.usefixtures("services")
def test_the_control_the_go_autocommit_consumer_duplicates_under_the_same_kills(tmp_path):
    record = kill_schedule(AUTO_COMMIT, tmp_path / "kill.json")
    assert record["kills"] >= 2, record["kill_log"]
    assert record["duplicates"] >= 1 and record["balances_exact"] is False, record


@pytest.mark.usefixtures("services")
@pytest.mark.parametrize("command", [INBOX, AUTO_COMMIT], ids=["inbox", "autocommit"])
def test_a_stall_made_in_the_database_evicts_the_go_consumers_and_only_the_inbox_skips(tmp_path, command):
    """M2's finding on the Go pair, with the stall in the database (lab/faults/db_stall.py). franz-go
    has no max.poll.interval.ms: the consumers' own watchdog leaves the group when a batch is held past
    KAFKA_MAX_POLL_INTERVAL_MS, as librdkafka and kafka-clients do. The evicted zombie finishes its
    credit; the next owner of its partition meets the inbox row and skips, or, with autocommit,
    credits again (the zombie's credit was never committed)."""
    out = tmp_path / "rebalance.json"
    args = measure_rebalance.parse_args(["--command", command, "--runs", "1", "--events", "1000",
                                         "--slow-every", "500", "--consumers", "2", "--seed", str(shifted(1)),
                                         "--out", str(out)])
    assert measure_rebalance.main(args) == 0
    [record] = json.loads(out.read_text())["runs"]
    assert record["stalls"] == 2 and record["evictions"] >= 1 and record["lost"] == 0, record
    if command == INBOX:
        assert record["duplicates"] == 0 and record["skipped"] >= 1 and record["balances_exact"], record
    else:
        assert record["duplicates"] >= 1 and not record["balances_exact"], record
