"""The contract proved from outside Python (docs/your-consumer.md): the Java consumers in
examples/java, on Kafka's own kafka-clients 4.3.1, measured by the same harnesses as any
command. The inbox consumer credits each event once under SIGKILLs and skips a zombie's
copy; its control, auto-commit and no inbox, fails both schedules."""
from pathlib import Path

import pytest

from tests.examples.schedules import held_to_kills, kill_schedule, stalled_in_the_database

pytestmark = pytest.mark.xdist_group("shared")  # the measurement lock: one worker, in turn

JAR = Path(__file__).resolve().parents[2] / "examples" / "java" / "target" / "consumers.jar"
INBOX = f"java -cp {JAR} inbox.InboxConsumer"
AUTO_COMMIT = f"java -cp {JAR} inbox.AutoCommitConsumer"


@pytest.fixture(autouse=True)
def _built():
    assert JAR.exists(), f"{JAR} is not built: run `make examples` (Maven, a JDK)"


@pytest.mark.usefixtures("services")
def test_the_java_inbox_consumer_credits_each_event_once_under_kills(tmp_path):
    held_to_kills(kill_schedule(INBOX, tmp_path / "kill.json", "InboxConsumer"), inbox=True)


@pytest.mark.usefixtures("services")
def test_the_control_the_java_auto_commit_consumer_duplicates_under_the_same_kills(tmp_path):
    held_to_kills(kill_schedule(AUTO_COMMIT, tmp_path / "kill.json", "AutoCommitConsumer"), inbox=False)


@pytest.mark.usefixtures("services")
@pytest.mark.parametrize("command", [INBOX, AUTO_COMMIT])
def test_a_stall_made_in_the_database_evicts_the_java_consumers_and_only_the_inbox_skips(tmp_path, command):
    """M2's finding on the Java pair: with auto-commit, the next owner credits again, since the
    client commits inside poll(), which a stalled handler does not reach."""
    stalled_in_the_database(command, tmp_path / "rebalance.json", inbox=command == INBOX)
