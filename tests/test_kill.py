"""A small M1 on the real services, from measure_kill.py's own command line: the inbox
consumer, SIGKILLed mid-stream a few times, still applies every credit exactly once."""
import json

import pytest

import measure_kill
from tests.seeds import shifted

pytestmark = pytest.mark.xdist_group("shared")  # the measurement lock: one worker, in turn


def kill_schedule(variant: str, out) -> dict:
    """Three SIGKILLs 0.5-1.5 s into each life, seed 7, from measure_kill.py's command line. 700
    events: at 5 ms a credit, two lives of at most 1.5 s cannot drain them, on any seed or host."""
    args = measure_kill.parse_args(["--variant", variant, "--runs", "1", "--kills", "3", "--events", "700",
                                    "--partitions", "3", "--work-ms", "5", "--life", "0.5,1.5",
                                    "--seed", str(shifted(7)), "--session-timeout-ms", "2000", "--out", str(out)])
    assert measure_kill.main(args) == 0
    record = json.loads(out.read_text())["runs"][0]
    assert record["kills"] == 3, record["kill_log"]
    return record


@pytest.mark.slow
@pytest.mark.usefixtures("services")
def test_inbox_survives_hard_kills(tmp_path):
    record = kill_schedule("c", tmp_path / "kill.json")
    assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0)
    assert record["balances_exact"] is True
    assert record["ledger_rows"] == 700


@pytest.mark.slow
@pytest.mark.usefixtures("services")
def test_the_control_auto_commit_duplicates_under_the_same_kills(tmp_path):
    """a1 on the same schedule: it commits every 5 s on its own, and no life lasts that long, so
    every kill replays what that life handled. c's zeros above are worth something only if this
    fails them."""
    record = kill_schedule("a1", tmp_path / "kill.json")
    assert record["duplicates"] >= 3 and record["lost"] == 0, record
    # the run names what it counted: the first duplicated IDs, each with where its record sits
    evidence = record["evidence"]
    assert evidence["duplicated_ids"] >= 1 and evidence["lost"] == [], evidence
    assert all(e["applied"] >= 2 and e["records"] for e in evidence["duplicated"]), evidence


@pytest.mark.slow
@pytest.mark.usefixtures("services")
@pytest.mark.parametrize("variant", ["c", "b"])
def test_the_posts_planted_crash_credits_once_with_the_inbox_and_twice_without(variant):
    """--planted-crash (make demo): the first life exits right after the DB commit of its 40th
    credit, before its offset commit; the next life gets that message again. c skips it; b, the
    control, credits it a second time, or the crash never landed between the two commits."""
    config = {"events": 300, "partitions": 3, "work_ms": 5, "kills": 1, "life": (0.5, 1.0), "seed": shifted(7),
              "session_timeout_ms": 2000, "planted_crash": 40}
    record = measure_kill.run_once(variant, 1, config)
    assert record["planted"]["exit_code"] == 3, record
    if variant == "c":
        assert record["planted"]["ledger_rows"] == 1 and record["skipped"] >= 1
        assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0)
    else:
        assert record["planted"]["ledger_rows"] >= 2 and record["duplicates"] >= 1
    assert "the post's test" in measure_kill.explain({"config": config, "runs": [record]})


@pytest.mark.slow
@pytest.mark.usefixtures("services")
def test_a_worker_that_exits_by_itself_is_a_crash_not_a_kill():
    # One partition, so event r1-40 comes about 0.4 s into the first life, long before its
    # kill at 3 s: that worker exits by itself (a planted crash right after the DB commit),
    # and the run must say so instead of counting a kill that never landed.
    config = {"events": 300, "partitions": 1, "work_ms": 10, "kills": 2, "life": (3.0, 3.0), "seed": shifted(7),
              "session_timeout_ms": 2000, "crash_after": "r1-40"}
    record = measure_kill.run_once("c", 1, config)
    assert record["crashes"] == [3], record["kill_log"]
    assert record["kill_log"][0]["exit_code"] == 3
    assert record["kills"] == len(record["kill_log"]) - 1
    assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0)
