"""Bad flags get one line on stderr that says what is wrong, and exit status 2. No services needed."""
import argparse
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

BAD = [
    ("measure_kill.py", ["--variant", "z"], "unknown variant(s) 'z'"),
    ("measure_kill.py", ["--variant", "a1,c", "--planted-crash", "40"], "--planted-crash needs variants that commit"),
    ("measure_kill.py", ["--variant", "c", "--life", "8,1"], "MIN <= MAX"),
    ("measure_kill.py", ["--variant", "c", "--kills", "0"], "--kills must be at least 1"),
    ("measure_kill.py", ["--variant", "c", "--lanes", "4"], "--lanes: c does not read it; k does"),
    ("measure_kill.py", ["--variant", "all", "--batch", "50"], "none of a1, a2, b, c reads it; p-bare, d, p do"),
    ("measure_throughput.py", ["--variants", "b,c", "--batch", "50"], "--batch: none of b, c reads it"),
    ("measure_kill.py", ["--command", "python consume.py", "--connections", "2"], "your command does not read it"),
    ("measure_kill.py", ["--command", " "], "the command is empty"),
    ("measure_kill.py", ["--variant", "c", "--consumers", "0"], "--consumers must be at least 1"),
    ("measure_kill.py", ["--variant", "c", "--consumers", "7"], "has nothing a kill could interrupt"),
    ("measure_kill.py", ["--variant", "c", "--consumers", "3", "--fault", "pg-restart"], "goes with --consumers 1"),
    ("measure_kill.py", ["--command", "python consume.py", "--effects", ""], "the effects query is empty"),
    ("measure_rebalance.py", ["--variant", "c", "--batch", "50"], "--batch: c does not read it"),
    ("measure_rebalance.py", ["--command", ""], "the command is empty"),
    ("measurements.conformance", ["--command", ""], "the command is empty"),
    ("measure_throughput.py", ["--variants", "c,x"], "unknown variant"),
    ("lab.worker", ["--variant", "a1", "--topic", "t", "--group", "g", "--crash-after", "e"], "--crash-after"),
    ("publish.py", ["0"], "at least 1"),
    ("publish.py", ["many"], "at least 1"),
    ("lab.stack", ["sideways"], "invalid choice"),
    ("measurements.tour", ["--republish", "5000"], "--republish"),
    ("measure_rebalance.py", ["--variant", "c", "--slow-seconds", "5"], "--slow-seconds must outlast"),
    ("measure_rebalance.py", ["--variant", "a1"], "unknown variant(s) 'a1'"),
    ("measure_rebalance.py", ["--variant", "frameworks,fs-default"], "names fs-default twice"),
    ("measurements.measure_race", ["--variant", "c,zz"], "unknown variant(s) 'zz'"),
    ("measurements.measure_race", ["--variant", "all,c"], "all is every variant already"),
    ("measure_storage.py", ["--rows", "10"], "--rows must be at least 10000"),
    ("lab.retention", ["--window", "14x"], "invalid window value"),
    ("measurements.measure_retention_load", ["--mode", "truncate"], "unknown mode(s) 'truncate'"),
    ("measurements.measure_retention_load", ["--backlog", "0"], "--backlog must be at least 1"),
    ("measurements.profile_d", ["--batch", "0"], "must be at least 1"),
    ("measure_throughput.py", ["--sweep-batch", "10,0"], "sizes must be at least 1"),
    ("measure_throughput.py", ["--inbox-rows", "10", "--id-type", "seq"], "--inbox-rows takes --id-type text"),
    ("consume.py", ["--nope"], "takes no arguments"),
    ("lab.report", ["--nope"], "unrecognized arguments"),
    ("measurements.measure_race", ["--variant", "d", "--copies", "7"], "needs at least as many --partitions"),
    ("measurements.measure_race", ["--variant", "d", "--consumers", "0"], "--consumers must be at least 1"),
    ("measurements.measure_faults", ["--fault", "flood", "--variant", "c"], "invalid choice"),
    ("measurements.measure_external", ["--policy", "all", "--crash-every", "0"], "--crash-every must be at least 1"),
    ("variants.consume_batched", ["--batch", "0"], "--batch must be at least 1"),
    ("lab.worker", ["--variant", "c", "--topic", "t", "--group", "g", "--crash-point", "pg-committed",
                   "--crash-every", "5"], "--crash-point and --crash-every go together"),
    ("lab.worker", ["--variant", "publisher", "--topic", "t", "--group", "g"], "needs --events-file"),
    ("measurements.measure_eos", ["--variant", "f", "--planted", "0"], "--planted must be at least 1"),
    ("measurements.measure_eos", ["--variant", "c"], "invalid choice"),
    ("measurements.measure_eos", ["--point", "acked"], "invalid choice"),
    ("measurements.measure_latency", ["--sweep-batch", "500"], "other than --batch's"),
    ("measurements.measure_latency", ["--variants", "c", "--sweep-batch", "10"], "needs d or p"),
    ("measurements.measure_publish", ["--source", "relay", "--variant", "c", "--rate", "0"], "must be positive"),
    ("measurements.measure_publish", ["--source", "carrier-pigeon", "--variant", "c"], "invalid choice"),
    ("variants.consume_eos", ["--every", "0"], "--every must be at least 1"),
    ("variants.relay", ["--batch", "0"], "--batch must be at least 1"),
    ("measurements.measure_cluster", ["--fault", "leader-kill", "--variant", "c"], "must point at the replicated lab"),
    ("measurements.measure_cluster", ["--fault", "meteor", "--variant", "c"], "invalid choice"),
    ("measurements.measure_cluster", ["--fault", "pg-failover", "--variant", "c,z"], "unknown variant"),
    ("lab.stack", ["up", "--pg-replication", "sync"], "--pg-replication goes with --replicated"),
    ("measurements.measure_cores", ["--variants", "p@2"], "--variants takes two variants, A,B"),
    ("measurements.measure_cores", ["--variants", "p@2,zz"], "unknown variant(s) 'zz'"),
    ("measurements.measure_cores", ["--postgres-cores", "4096"], "must leave at least one of this process's"),
    ("measurements.measure_cores", ["--postgres-cores", "0"], "--postgres-cores must be at least 1"),
    ("measurements.measure_cores", ["--batch", "0"], "--batch must be at least 1"),
]


@pytest.mark.parametrize("script, argv, says", BAD, ids=[f"{s} {' '.join(a)}" for s, a, _ in BAD])
def test_bad_flags_get_one_line(script, argv, says):
    command = [str(ROOT / script)] if script.endswith(".py") else ["-m", script]  # top-level files, or the folders'
    result = subprocess.run([sys.executable, *command, *argv], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert says in lines[0]


def one_line(script: str, *argv: str) -> str:
    """Runs a measurement with bad flags: the one line on stderr it must answer with, exit status 2."""
    command = [str(ROOT / script)] if script.endswith(".py") else ["-m", script]
    result = subprocess.run([sys.executable, *command, *argv], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


@pytest.mark.parametrize("holding, says", [
    (None, "is a directory"),
    ("{not json", "is not JSON"),
    ("[1, 2]", "not a results file of this lab"),
    ('{"config": {}}', "not a results file of this lab"),
], ids=["directory", "not JSON", "a list", "no runs"])
@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]], ids=["run", "dry run"])
def test_an_out_that_is_no_results_file_is_refused_before_anything_runs(tmp_path, holding, says, dry_run):
    out = tmp_path
    if holding is not None:
        out = tmp_path / "out.json"
        out.write_text(holding)
    line = one_line("measure_kill.py", "--variant", "c", "--runs", "1", "--out", str(out), *dry_run)
    assert f"--out: {out} " in line and says in line
    assert holding is None or out.read_text() == holding, "the file is left as it was"


def test_an_out_under_a_file_is_refused(tmp_path):
    (tmp_path / "plain").write_text("")
    line = one_line("measure_rebalance.py", "--variant", "c", "--out", str(tmp_path / "plain" / "out.json"))
    assert "is a file, not a directory" in line


def test_a_default_out_chosen_after_parsing_is_checked_too(tmp_path):
    from lab import results

    (tmp_path / "out.json").write_text("{not json")
    with pytest.raises(SystemExit, match=r"^measure_kill: .*out\.json is not JSON"):
        results.previous_document("measure_kill", tmp_path / "out.json")
    assert results.previous_document("measure_kill", tmp_path / "new.json") is None


@pytest.mark.parametrize("script, argv", [
    ("measure_kill.py", ["--variant", "c,b,c"]),
    ("measure_rebalance.py", ["--variant", "c,b,c"]),
    ("measurements.measure_race", ["--variant", "c,b,c"]),
    ("measure_throughput.py", ["--variants", "c, c"]),
])
def test_a_name_given_twice_is_refused(script, argv):
    assert "c is named twice" in one_line(script, *argv)


@pytest.mark.parametrize("script, argv, variants, out", [
    ("measure_kill.py", ["--variant", "b,c"], ["b", "c"], "kill-b-c.json"),
    ("measure_kill.py", ["--variant", "all", "--consumers", "3"], ["a1", "a2", "b", "c"], "kill-consumers3.json"),
    ("measure_rebalance.py", ["--variant", "b,c"], ["b", "c"], "rebalance-b-c-classic.json"),
    ("measure_rebalance.py", ["--variant", "c", "--group-protocol", "consumer"], ["c"], "rebalance-c-consumer.json"),
])
def test_several_variants_run_side_by_side_in_one_reader_file(script, argv, variants, out):
    """As in measure_kill.py, a list of variants is one measurement, written to a file of the reader's own."""
    import importlib

    args = importlib.import_module(script.removesuffix(".py")).parse_args(argv)
    assert list(args.variants) == variants
    assert Path(args.out).name == out and Path(args.out).parent.name == "local"


@pytest.mark.parametrize("module, argv, name", [
    ("measurements.measure_race", ["--variant", "c"], "race.json"),
    ("measurements.measure_eos", ["--variant", "all"], "eos.json"),
    ("measurements.measure_external", ["--policy", "all"], "external.json"),
    ("measurements.measure_faults", ["--fault", "pg-restart", "--variant", "c"], "faults.json"),
    ("measurements.measure_faults_more", ["--fault", "sigterm", "--variant", "c"], "faults-more.json"),
    ("measurements.measure_retention", ["--variant", "all"], "retention.json"),
    ("measurements.measure_retention_load", [], "retention-load.json"),
    ("measurements.measure_latency", [], "latency.json"),
    ("measurements.measure_publish", ["--source", "all", "--variant", "all"], "publish.json"),
])
def test_a_measurement_writes_a_readers_own_file_unless_out_names_one(module, argv, name):
    import importlib

    measurement = importlib.import_module(module)
    assert Path(measurement.parse_args(argv).out) == ROOT / "results" / "local" / name
    assert Path(measurement.parse_args([*argv, "--out", "results/x.json"]).out) == Path("results/x.json")


@pytest.mark.parametrize("argv, says", [
    (["--session-timeout-ms", "999999999"], "999999999 is outside 1000..1800000"),
    (["--session-timeout-ms", "2000000"], "2000000 is outside 1000..1800000"),
    (["--session-timeout-ms", "500"], "500 is outside 1000..1800000"),
    (["--session-timeout-ms", "20000"], "--max-poll-interval-ms >= --session-timeout-ms"),
    (["--session-timeout-ms", "50000", "--max-poll-interval-ms", "50000", "--slow-seconds", "60", "--group-protocol",
      "consumer"], "--group-protocol consumer takes --session-timeout-ms from 1500 to 45000"),
    (["--max-poll-interval-ms", "0"], "0 is outside 1..86400000"),
])
def test_a_session_timeout_kafka_would_refuse_is_refused_first(argv, says):
    assert says in one_line("measure_rebalance.py", "--variant", "c", *argv)


def test_session_timeout_ms_keeps_to_what_librdkafka_and_the_broker_take():
    from lab import cli

    below_max_poll = cli.session_timeout_ms(most=cli.DEFAULT_MAX_POLL_INTERVAL_MS)
    assert below_max_poll("300000") == 300000
    with pytest.raises(argparse.ArgumentTypeError, match="max.poll.interval.ms"):
        below_max_poll("300001")
    with pytest.raises(argparse.ArgumentTypeError, match="outside 1000..1800000"):
        cli.session_timeout_ms()("999")


def test_measure_rebalance_offers_no_flag_it_refuses():
    shown = subprocess.run([sys.executable, str(ROOT / "measure_rebalance.py"), "--help"], capture_output=True,
                           text=True, timeout=60, cwd=ROOT).stdout
    assert "--command" in shown and "--effects" not in shown and "--schema" not in shown
    for flag, value in (("--effects", "SELECT 1"), ("--schema", "schema.sql")):
        for which in (["--command", "python consume.py"], ["--variant", "c"]):
            assert "--effects and --schema go with measure_kill.py" in one_line("measure_rebalance.py", *which,
                                                                                flag, value)


@pytest.mark.parametrize("argv, says", [
    (["--variant", "all,c"], "--variant all,c names c twice"),
    (["--variant", "c", "--session-timeout-ms", "400000"], "400000 is outside 1000..300000"),
    (["--variant", "c", "--session-timeout-ms", "500"], "500 is outside 1000..300000"),
])
def test_measure_kill_refuses_a_variant_twice_and_a_session_timeout_out_of_range(argv, says):
    assert says in one_line("measure_kill.py", *argv)
