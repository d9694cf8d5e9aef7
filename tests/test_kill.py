"""A small M1 on the real services: the inbox consumer, SIGKILLed mid-stream a few
times, still applies every credit exactly once. The full run is measure_kill.py's."""
import pytest

import measure_kill


@pytest.mark.slow
@pytest.mark.usefixtures("services")
def test_inbox_survives_hard_kills():
    config = {"runs": 1, "kills": 3, "events": 400, "partitions": 3, "work_ms": 5, "life": [0.5, 1.5],
              "seed": 7, "session_timeout_ms": 2000, "heartbeat_interval_ms": 500}
    record = measure_kill.run_once("c", 1, config)
    assert record["kills"] == 3, record["kill_log"]
    assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0)
    assert record["balances_exact"] is True
    assert record["ledger_rows"] == 400
