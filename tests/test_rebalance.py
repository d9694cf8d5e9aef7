"""A small M2 on the real services: one handler outlives max.poll.interval.ms, is evicted,
and still writes. Without the inbox that is one duplicate; with it, none and one skip."""
import datetime
import json

import pytest

import measure_rebalance
from lab import checker, harness
from tests.seeds import shifted

pytestmark = pytest.mark.xdist_group("shared")  # the measurement lock: one worker, in turn

CONFIG = {"events": 20, "consumers": 2, "partitions": 2, "slow_every": 15, "slow_seconds": 5,
          "max_poll_interval_ms": 3000, "session_timeout_ms": 2000, "work_ms": 5, "seed": shifted(3), "batch": 10}


# d replays its whole batch after the eviction, so it skips every message of it, not just one.
@pytest.mark.slow
@pytest.mark.usefixtures("services")
@pytest.mark.parametrize("variant, duplicates, skipped", [("b", 1, 0), ("d", 0, None)])
def test_zombie_after_eviction(variant, duplicates, skipped):
    record = measure_rebalance.run_once(variant, 1, {**CONFIG, "group_protocol": "classic"})
    assert (record["stalls"], record["evictions"]) == (1, 1), record["examples"]
    assert (record["duplicates"], record["lost"]) == (duplicates, 0), record
    if skipped is None:
        assert record["skipped"] >= 1
    else:
        assert record["skipped"] == skipped
    assert sum(record["commit_failed"].values()) >= 1  # the zombie's own commit


# KIP-848's protocol (README: "changes the timing, not the guarantee"): an evicted member's
# partitions move on the broker's say, a few seconds after the eviction, so the stall outlasts
# max.poll.interval.ms by 12 s here, where a handover that slow still lands inside it. serial: long
# and mostly waiting, so `make test` runs it on its second stack, beside the rest.
@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.usefixtures("services")
@pytest.mark.parametrize("variant, duplicates", [("b", 1), ("c", 0)])
def test_the_consumer_protocol_still_lets_a_zombie_write_and_only_the_inbox_skips(variant, duplicates):
    config = {**CONFIG, "group_protocol": "consumer", "slow_seconds": 15, "seed": shifted(4)}
    record = measure_rebalance.run_once(variant, 1, config)
    # c's new owner can wait on the zombie's inbox row past max.poll.interval.ms, be evicted too,
    # and skip once more when its own credit comes again
    assert record["stalls"] == 1 and record["evictions"] >= 1, record["examples"]
    assert (record["duplicates"], record["lost"]) == (duplicates, 0), record
    assert (record["skipped"] >= 1) == (variant == "c"), record
    assert record["balances_exact"] == (variant == "c"), record


@pytest.mark.slow
@pytest.mark.usefixtures("services")
def test_the_inbox_skips_the_zombies_credit_from_the_command_line(tmp_path):
    """c's case, through `python measure_rebalance.py`'s own flags, driver and closing tables."""
    out = tmp_path / "rebalance.json"
    flags = [f"--{key.replace('_', '-')}={value}" for key, value in CONFIG.items() if key != "batch"]  # c reads none
    assert measure_rebalance.main(measure_rebalance.parse_args(["--variant", "c", "--runs", "1", *flags,
                                                                "--out", str(out)])) == 0
    record = json.loads(out.read_text())["runs"][0]
    assert (record["stalls"], record["evictions"], record["duplicates"], record["lost"]) == (1, 1, 0, 0), record
    assert record["skipped"] == 1 and sum(record["commit_failed"].values()) >= 1


def _line(clock: str, text: str) -> str:
    return f"2026-12-01 10:00:{clock} b[1] consume {text}"


def _maxpoll(clock: str) -> str:
    at = datetime.datetime.strptime(f"2026-12-01 10:00:{clock}", "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return f"%4|{at:.3f}|MAXPOLL|rdkafka#consumer-2| [thrd:main]: Application maximum poll interval exceeded"


def handovers(logs: dict) -> list[dict]:
    return checker.handovers([event for name, lines in logs.items() for event in harness.timeline(name, lines)])


def test_handovers_from_hand_made_logs():
    """No Kafka: the analysis is a pure function of log lines (parsed by harness.timeline)."""
    moved = {"w1": [_line("00,000", "partitions assigned: 0,1"), _maxpoll("10,000"),
                    _line("12,000", "stall over r1-500, writing its effect")],
             "w2": [_line("00,000", "partitions assigned: 2,3"), _line("10,500", "partitions assigned: 1")]}
    assert handovers(moved) == [
        {"worker": "w1", "next_owner": "other", "handover_s": 0.5, "zombie_s": 2.0}]
    back = {"w1": [_line("00,000", "partitions assigned: 0,1"), _maxpoll("10,000"),
                   _line("12,000", "stall over r1-500, writing its effect"),
                   _line("12,100", "partitions lost: 0,1"), _line("12,200", "partitions assigned: 0,1")],
            "w2": [_line("00,000", "partitions assigned: 2,3"), _line("30,000", "partitions assigned: 0")]}
    assert handovers(back) == [
        {"worker": "w1", "next_owner": "self", "handover_s": 2.2, "zombie_s": 2.0}]


def test_the_first_eviction_told_step_by_step_from_hand_made_logs():
    """No Kafka: what M2's chart draws, from log lines and the ledger's clock alone."""
    logs = {"w1": [_line("00,000", "partitions assigned: 0,1"), _line("01,000", "stalling r1-500 for 12s"),
                   _maxpoll("11,000"), _line("13,000", "stall over r1-500, writing its effect"),
                   _line("13,050", "offset commit failed: UNKNOWN_MEMBER_ID")],
            "w2": [_line("00,000", "partitions assigned: 2,3"), _line("11,500", "partitions assigned: 1"),
                   _line("13,100", "skipped duplicate r1-500")]}
    timeline = [event for name, lines in logs.items() for event in harness.timeline(name, lines)]
    at = datetime.datetime.strptime("2026-12-01 10:00:13,020", "%Y-%m-%d %H:%M:%S,%f").timestamp()
    story = checker.first_eviction(timeline, [("r1-499", at - 5), ("r1-500", at)])
    assert story == {"event_id": "r1-500", "steps": [
        [0.0, "zombie", "stall begins"], [10.0, "zombie", "MAXPOLL: evicted"], [10.5, "other", "partition assigned"],
        [12.0, "zombie", "stall over, writes"], [12.02, "db", "credit committed"],
        [12.05, "zombie", "offset commit failed: UNKNOWN_MEMBER_ID"], [12.1, "other", "skipped duplicate"]]}
    assert checker.first_eviction([e for e in timeline if e[2] != "evicted"], []) is None


def test_a_handover_before_the_zombies_own_maxpoll_is_told_too():
    """Members that join while one stalls rebalance without it: its partition can move, and be
    credited by the new owner, seconds before the stalled member's own MAXPOLL."""
    logs = {"w1": [_line("00,000", "partitions assigned: 0,1"), _line("01,000", "stalling r1-500 for 12s"),
                   _maxpoll("11,000"), _line("13,000", "stall over r1-500, writing its effect")],
            "w2": [_line("05,000", "partitions assigned: 1")]}
    timeline = [event for name, lines in logs.items() for event in harness.timeline(name, lines)]
    at = datetime.datetime.strptime("2026-12-01 10:00:05,100", "%Y-%m-%d %H:%M:%S,%f").timestamp()
    steps = checker.first_eviction(timeline, [("r1-500", at), ("r1-500", at + 8)])["steps"]
    assert steps[:3] == [[0.0, "zombie", "stall begins"], [4.0, "other", "partition assigned"],
                         [4.1, "db", "credit committed"]]
    assert [what for _, _, what in steps].count("credit committed") == 2
