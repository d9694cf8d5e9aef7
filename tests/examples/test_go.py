"""The contract proved from outside Python (docs/your-consumer.md) on a third Kafka client: the Go
consumers in examples/go, on franz-go and pgx, measured by the same harnesses as any command.
The inbox consumer credits each event once under SIGKILLs and skips a zombie's copy; its control,
franz-go's autocommit and no inbox, fails both schedules."""
from pathlib import Path

import pytest

from tests.examples.schedules import held_to_kills, kill_schedule, stalled_in_the_database

pytestmark = pytest.mark.xdist_group("shared")  # the measurement lock: one worker, in turn

BIN = Path(__file__).resolve().parents[2] / "examples" / "go" / "bin"
INBOX = str(BIN / "inbox")
AUTO_COMMIT = str(BIN / "autocommit")


@pytest.fixture(autouse=True)
def _built():
    for binary in (INBOX, AUTO_COMMIT):
        assert Path(binary).exists(), f"{binary} is not built: run `make examples` (Go 1.26)"


@pytest.mark.usefixtures("services")
def test_the_go_inbox_consumer_credits_each_event_once_under_kills(tmp_path):
    held_to_kills(kill_schedule(INBOX, tmp_path / "kill.json", "inbox-go 1.0.0 (franz-go v1.22.3)"), inbox=True)


@pytest.mark.usefixtures("services")
def test_the_control_the_go_autocommit_consumer_duplicates_under_the_same_kills(tmp_path):
    record = kill_schedule(AUTO_COMMIT, tmp_path / "kill.json", "autocommit-go 1.0.0 (franz-go v1.22.3)")
    held_to_kills(record, inbox=False)


@pytest.mark.usefixtures("services")
@pytest.mark.parametrize("command", [INBOX, AUTO_COMMIT], ids=["inbox", "autocommit"])
def test_a_stall_made_in_the_database_evicts_the_go_consumers_and_only_the_inbox_skips(tmp_path, command):
    """M2's finding on the Go pair. franz-go has no max.poll.interval.ms: the consumers' own
    watchdog leaves the group when a batch is held past KAFKA_MAX_POLL_INTERVAL_MS, as librdkafka
    and kafka-clients do, and the eviction is counted from its MAXPOLL line."""
    record = stalled_in_the_database(command, tmp_path / "rebalance.json", inbox=command == INBOX)
    assert record["evictions"] >= 1, record
