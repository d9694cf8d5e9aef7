"""A small M2 on the real services: one handler outlives max.poll.interval.ms, is evicted,
and still writes. Without the inbox that is one duplicate; with it, none and one skip."""
import pytest

import measure_rebalance

CONFIG = {"events": 20, "consumers": 2, "partitions": 2, "slow_every": 15, "slow_seconds": 5,
          "max_poll_interval_ms": 3000, "session_timeout_ms": 2000, "work_ms": 5, "seed": 3, "batch": 10}


# d replays its whole batch after the eviction, so it skips every message of it, not just one.
@pytest.mark.parametrize("variant, duplicates, skipped", [("b", 1, 0), ("c", 0, 1), ("d", 0, None)])
def test_zombie_after_eviction(variant, duplicates, skipped, tmp_path):
    record = measure_rebalance.run_once(variant, 1, {**CONFIG, "group_protocol": "classic"}, tmp_path)
    assert (record["stalls"], record["evictions"]) == (1, 1), record["examples"]
    assert (record["duplicates"], record["lost"]) == (duplicates, 0), record
    if skipped is None:
        assert record["skipped"] >= 1
    else:
        assert record["skipped"] == skipped
    assert sum(record["commit_failed"].values()) >= 1  # the zombie's own commit
