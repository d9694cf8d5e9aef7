"""Your consumer, any command (docs/your-consumer.md): measure_kill.py --command runs M1 on a
process the lab knows nothing about but how to start it. consume.py started as a plain
command must give c's verdict, and the naive consumer (auto-commit, no inbox) must fail the
same schedule; a command that cannot be measured gets one line saying why."""
import json
import signal
import subprocess
import sys

import pytest

import measure_kill
import measure_rebalance
from lab import stack
from lab.settings import ROOT
from lab.space import wait_until
from tests.seeds import shifted

pytestmark = pytest.mark.xdist_group("shared")  # the measurement lock: one worker, in turn

NAIVE = "python examples/python/naive_consume.py"
# Reads every message and commits, but writes nothing anywhere.
READS_ONLY = ("python -c \"import os; from confluent_kafka import Consumer; c = Consumer({'bootstrap.servers': "
              "os.environ['KAFKA_BROKERS'], 'group.id': os.environ['KAFKA_GROUP'], 'auto.offset.reset': 'earliest'}); "
              "c.subscribe([os.environ['KAFKA_TOPIC']]); [c.poll(0.5) for _ in range(1000)]\"")


def kill_schedule(command: str, out, events: int = 5000) -> dict:
    """Three SIGKILLs 0.5-1.5 s into each life, seed 7, on a command, from the command line. These
    commands have no handler sleep: 5,000 events outlast two lives of consume.py (under 900 a
    second on an idle host here) and the first of the naive one (about 1,500), whatever the seed."""
    args = measure_kill.parse_args(["--command", command, "--runs", "1", "--kills", "3", "--events", str(events),
                                    "--partitions", "3", "--life", "0.5,1.5", "--seed", str(shifted(7)),
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
    assert record["balances_exact"] is True and record["ledger_rows"] == 5000


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
@pytest.mark.serial  # mostly waiting on its two 12 s stalls: on the second stack, beside the rest
@pytest.mark.usefixtures("services")
@pytest.mark.parametrize("command", ["python consume.py", "python examples/python/naive_consume.py --commit after"])
def test_a_stall_made_in_the_database_evicts_any_command_and_only_the_inbox_skips(tmp_path, command):
    """M2 with no code of the consumer's: a trigger sleeps the first write of every 500th event
    12 s, past max.poll.interval.ms 10 s. consume.py's copy meets its inbox row and is skipped;
    the post's b as a command (commit after, no inbox), the control, credits it twice."""
    out = tmp_path / "rebalance.json"
    args = measure_rebalance.parse_args(["--command", command, "--runs", "1", "--events", "1000",
                                         "--slow-every", "500", "--consumers", "2", "--seed", str(shifted(1)),
                                         "--out", str(out)])
    assert measure_rebalance.main(args) == 0
    [record] = json.loads(out.read_text())["runs"]
    assert record["stalls"] == 2 and record["evictions"] >= 1, record
    assert record["lost"] == 0 and record["commit_failed"].get("UNKNOWN_MEMBER_ID", 0) >= 1, record
    if command == "python consume.py":
        assert record["duplicates"] == 0 and record["skipped"] >= 1 and record["balances_exact"], record
    else:
        assert record["duplicates"] >= 1 and not record["balances_exact"], record


OWN_EFFECTS = "python tests/consumers/own_effects.py"


@pytest.mark.slow
@pytest.mark.usefixtures("services")
def test_a_command_with_tables_of_its_own_is_prepared_once_and_may_write_them(tmp_path):
    """--schema runs once a run, not at each restart (a plain CREATE TABLE, which a second run
    would refuse), and the consumer's role may write what it made; the command's first output
    is not UTF-8, which the harness must read past. Its primary key makes it idempotent: 0/0."""
    schema = tmp_path / "my_effects.sql"
    schema.write_text("CREATE TABLE my_effects (event_id text PRIMARY KEY);\n")
    out = tmp_path / "kill.json"
    # 6,000: it has no handler sleep, and its first life (up to 0.8 s, found up to 0.25 s late)
    # must leave some for the second, the restart this test is about
    args = measure_kill.parse_args(["--command", OWN_EFFECTS, "--schema", str(schema), "--effects",
                                    "SELECT event_id FROM my_effects;", "--runs", "1", "--kills", "2", "--events",
                                    "6000", "--partitions", "3", "--life", "0.3,0.8", "--seed", str(shifted(7)),
                                    "--out", str(out)])
    assert measure_kill.main(args) == 0
    document = json.loads(out.read_text())
    [record] = document["runs"]
    assert document["config"]["effects"] == "SELECT event_id FROM my_effects"  # its semicolon gone
    assert record["kills"] == 2 and record["mid_stream_kills"] >= 1, record["kill_log"]
    assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0)
    assert record["balances_exact"] is None  # its own effects: no balances to check


@pytest.mark.usefixtures("services")
@pytest.mark.parametrize("effects, says", [
    ("SELECT nope FROM ledger", "the effects query `SELECT nope FROM ledger` fails on a fresh run's schema: column"),
    ("SELECT id FROM ledger", "`SELECT id FROM ledger` returned 100 IDs and none of the 100 event IDs published"),
])
def test_a_wrong_effects_query_is_one_line(tmp_path, capsys, effects, says):
    args = measure_kill.parse_args(["--command", "python consume.py", "--effects", effects, "--runs", "1",
                                    "--kills", "1", "--events", "100", "--partitions", "1", "--life", "0.2,0.4",
                                    "--out", str(tmp_path / "kill.json")])
    assert measure_kill.main(args) == 1
    [line] = [line for line in capsys.readouterr().err.splitlines() if line.startswith("measure_kill.py: ")]
    assert says in line


@pytest.mark.usefixtures("services")
def test_a_run_whose_kills_all_came_after_the_last_credit_is_not_a_pass(tmp_path, capsys):
    """50 credits are applied long before a kill 5 s into the first life: the run tested nothing,
    and says so instead of reading like an inbox consumer's 0 duplicates and 0 lost."""
    args = measure_kill.parse_args(["--command", NAIVE, "--runs", "1", "--kills", "3", "--events", "50",
                                    "--partitions", "1", "--life", "5,6", "--out", str(tmp_path / "kill.json")])
    assert measure_kill.main(args) == 1
    captured = capsys.readouterr()
    assert "NOT A TEST" in captured.out + captured.err
    [line] = [line for line in captured.err.splitlines() if line.startswith("measure_kill.py: ")]
    assert "no kill landed while credits were left to apply" in line


def test_work_ms_is_refused_for_a_command():
    with pytest.raises(SystemExit):
        measure_kill.parse_args(["--command", "python consume.py", "--work-ms", "5"])


@pytest.mark.usefixtures("services")
@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_ctrl_c_or_a_sigterm_kills_the_command_and_says_so_in_one_line(stop_signal, tmp_path):
    """A command runs in a session of its own, out of reach of the terminal's SIGINT: the harness
    must kill it when it stops, and a Ctrl-C is one line, not a traceback. A SIGTERM (a `kill`,
    a CI's timeout), whose default action would end the harness with no chance to, does the same."""
    pid_file = tmp_path / "consumer.pid"
    command = f"echo $$ > {pid_file}; exec python consume.py"
    harness_proc = subprocess.Popen(
        [sys.executable, "measure_kill.py", "--command", command, "--runs", "1", "--kills", "3", "--events", "5000",
         "--life", "30,40", "--out", str(tmp_path / "kill.json")],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # as a terminal's: a test runner's worker may ignore SIGINT, and its children would inherit that
        preexec_fn=lambda: [signal.signal(number, signal.SIG_DFL) for number in (signal.SIGINT, signal.SIGTERM)])
    try:
        wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), 60, "the command's pid file")
        consumer_pid = int(pid_file.read_text())
        harness_proc.send_signal(stop_signal)
        _, err = harness_proc.communicate(timeout=60)
    finally:
        harness_proc.kill()
    assert "interrupted" in err and "Traceback" not in err, err
    wait_until(lambda: not stack.pid_alive(consumer_pid), 10, "the command's process to be gone")
