"""Your consumer, any command (docs/your-consumer.md): measure_kill.py --command runs M1 on a
process the lab knows nothing about but how to start it. consume.py started as a plain
command must give c's verdict, and the naive consumer (auto-commit, no inbox) must fail the
same schedule; a command that cannot be measured gets one line saying why."""
import json

import pytest

import measure_kill
import measure_rebalance

pytestmark = pytest.mark.xdist_group("shared")  # the measurement lock: one worker, in turn

NAIVE = "python examples/python/naive_consume.py"
# Reads every message and commits, but writes nothing anywhere.
READS_ONLY = ("python -c \"import os; from confluent_kafka import Consumer; c = Consumer({'bootstrap.servers': "
              "os.environ['KAFKA_BROKERS'], 'group.id': os.environ['KAFKA_GROUP'], 'auto.offset.reset': 'earliest'}); "
              "c.subscribe([os.environ['KAFKA_TOPIC']]); [c.poll(0.5) for _ in range(1000)]\"")


def kill_schedule(command: str, out, events: int = 2000) -> dict:
    """Three SIGKILLs 0.5-1.5 s into each life, seed 7, on a command, from the command line."""
    args = measure_kill.parse_args(["--command", command, "--runs", "1", "--kills", "3", "--events", str(events),
                                    "--partitions", "3", "--life", "0.5,1.5", "--seed", "7",
                                    "--session-timeout-ms", "2000", "--out", str(out)])
    assert measure_kill.main(args) == 0
    document = json.loads(out.read_text())
    assert document["config"]["command"] == command
    return document["runs"][0]


@pytest.mark.slow
@pytest.mark.usefixtures("services")
def test_consume_py_as_a_command_credits_each_event_once_under_kills(tmp_path):
    record = kill_schedule("python consume.py", tmp_path / "kill.json")
    assert record["kills"] == 3, record["kill_log"]
    assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0)
    assert record["balances_exact"] is True and record["ledger_rows"] == 2000


@pytest.mark.slow
@pytest.mark.usefixtures("services")
def test_the_control_a_naive_command_duplicates_under_the_same_kills(tmp_path):
    """Auto-commit every second, no inbox: each kill replays what was applied since the last
    timer commit. consume.py's zeros above are worth something only because this fails them."""
    record = kill_schedule(NAIVE, tmp_path / "kill.json")
    assert record["kills"] >= 2, record["kill_log"]
    assert record["duplicates"] >= 1 and record["balances_exact"] is False, record


@pytest.mark.usefixtures("services")
@pytest.mark.parametrize("command, says", [
    ("no-such-consumer --flag", "your command could not be started (the shell's exit 127: not found)"),
    ("echo starting; exit 3", "your command exited with code 3 at once, before applying anything"),
    (READS_ONLY, "your command read the whole topic (the group's lag is 0) but wrote nothing"),
])
def test_a_command_that_cannot_be_measured_gets_one_line_saying_why(tmp_path, capsys, command, says):
    args = measure_kill.parse_args(["--command", command, "--runs", "1", "--kills", "2", "--events", "50",
                                    "--partitions", "1", "--out", str(tmp_path / "kill.json")])
    assert measure_kill.main(args) == 1
    [line] = [line for line in capsys.readouterr().err.splitlines() if line.startswith("measure_kill.py: ")]
    assert says in line


def test_command_flags_go_together():
    with pytest.raises(SystemExit):
        measure_kill.parse_args(["--variant", "c", "--effects", "SELECT event_id FROM ledger"])
    with pytest.raises(SystemExit):
        measure_kill.parse_args(["--variant", "c", "--command", "python consume.py"])


@pytest.mark.slow
@pytest.mark.usefixtures("services")
@pytest.mark.parametrize("command", ["python consume.py", "python examples/python/naive_consume.py --commit after"])
def test_a_stall_made_in_the_database_evicts_any_command_and_only_the_inbox_skips(tmp_path, command):
    """M2 with no code of the consumer's: a trigger sleeps the first write of every 500th event
    12 s, past max.poll.interval.ms 10 s. consume.py's copy meets its inbox row and is skipped;
    the post's b as a command (commit after, no inbox), the control, credits it twice."""
    out = tmp_path / "rebalance.json"
    args = measure_rebalance.parse_args(["--command", command, "--runs", "1", "--events", "1000",
                                         "--slow-every", "500", "--consumers", "2", "--out", str(out)])
    assert measure_rebalance.main(args) == 0
    [record] = json.loads(out.read_text())["runs"]
    assert record["stalls"] == 2 and record["evictions"] >= 1, record
    assert record["lost"] == 0 and record["commit_failed"].get("UNKNOWN_MEMBER_ID", 0) >= 1, record
    if command == "python consume.py":
        assert record["duplicates"] == 0 and record["skipped"] >= 1 and record["balances_exact"], record
    else:
        assert record["duplicates"] >= 1 and not record["balances_exact"], record
