"""Bad flags get one line on stderr that says what is wrong, and exit status 2. No services needed."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

BAD = [
    ("measure_kill.py", ["--variant", "z"], "invalid choice"),
    ("measure_kill.py", ["--variant", "c", "--life", "8,1"], "MIN <= MAX"),
    ("measure_kill.py", ["--variant", "c", "--kills", "0"], "--kills must be at least 1"),
    ("measure_throughput.py", ["--variants", "c,x"], "unknown variant"),
    ("worker.py", ["--variant", "a1", "--topic", "t", "--group", "g", "--crash-after", "e"], "--crash-after"),
    ("publish.py", ["0"], "count must be at least 1"),
    ("publish.py", ["many"], "invalid int value"),
    ("stack.py", ["sideways"], "invalid choice"),
    ("tour.py", ["--republish", "5000"], "--republish"),
    ("measure_rebalance.py", ["--variant", "c", "--slow-seconds", "5"], "--slow-seconds must outlast"),
    ("measure_rebalance.py", ["--variant", "a1"], "invalid choice"),
    ("measure_storage.py", ["--rows", "10"], "--rows must be at least 10000"),
    ("retention.py", ["--window", "14x"], "invalid window value"),
    ("profile_d.py", ["--batch", "0"], "must be at least 1"),
    ("measure_throughput.py", ["--sweep-batch", "10,0"], "sizes must be at least 1"),
    ("measure_throughput.py", ["--inbox-rows", "10", "--id-type", "seq"], "--inbox-rows takes --id-type text"),
    ("consume.py", ["--nope"], "unrecognized arguments"),
    ("report.py", ["--nope"], "unrecognized arguments"),
    ("measure_race.py", ["--variant", "d", "--copies", "7"], "needs at least as many --partitions"),
    ("measure_race.py", ["--variant", "d", "--consumers", "0"], "--consumers must be at least 1"),
    ("measure_faults.py", ["--fault", "flood", "--variant", "c"], "invalid choice"),
    ("measure_external.py", ["--policy", "all", "--crash-every", "0"], "--crash-every must be at least 1"),
    ("consume_batched.py", ["--batch", "0"], "--batch must be at least 1"),
    ("worker.py", ["--variant", "c", "--topic", "t", "--group", "g", "--crash-point", "pg-committed",
                   "--crash-every", "5"], "--crash-point and --crash-every go together"),
    ("worker.py", ["--variant", "publisher", "--topic", "t", "--group", "g"], "needs --events-file"),
    ("measure_eos.py", ["--variant", "f", "--planted", "0"], "--planted must be at least 1"),
    ("measure_eos.py", ["--variant", "c"], "invalid choice"),
    ("measure_publish.py", ["--source", "relay", "--variant", "c", "--rate", "0"], "must be positive"),
    ("measure_publish.py", ["--source", "carrier-pigeon", "--variant", "c"], "invalid choice"),
    ("consume_eos.py", ["--every", "0"], "--every must be at least 1"),
    ("relay.py", ["--batch", "0"], "--batch must be at least 1"),
    ("measure_cluster.py", ["--fault", "leader-kill", "--variant", "c"], "must point at the replicated lab"),
    ("measure_cluster.py", ["--fault", "meteor", "--variant", "c"], "invalid choice"),
    ("measure_cluster.py", ["--fault", "pg-failover", "--variant", "c,z"], "unknown variant"),
    ("stack.py", ["up", "--pg-replication", "sync"], "--pg-replication goes with --replicated"),
]


@pytest.mark.parametrize("script, argv, says", BAD, ids=[f"{s} {' '.join(a)}" for s, a, _ in BAD])
def test_bad_flags_get_one_line(script, argv, says):
    result = subprocess.run([sys.executable, str(ROOT / script), *argv], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert says in lines[0]
