"""A small M1 on the real services, from measure_kill.py's own command line: the inbox
consumer, SIGKILLed mid-stream a few times, still applies every credit exactly once."""
import json

import pytest

import measure_kill


@pytest.mark.slow
@pytest.mark.usefixtures("services")
def test_inbox_survives_hard_kills(tmp_path):
    out = tmp_path / "kill.json"
    args = measure_kill.parse_args(["--variant", "c", "--runs", "1", "--kills", "3", "--events", "400",
                                    "--partitions", "3", "--work-ms", "5", "--life", "0.5,1.5", "--seed", "7",
                                    "--session-timeout-ms", "2000", "--out", str(out)])
    assert measure_kill.main(args) == 0
    record = json.loads(out.read_text())["runs"][0]
    assert record["kills"] == 3, record["kill_log"]
    assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0)
    assert record["balances_exact"] is True
    assert record["ledger_rows"] == 400
