"""The schedules both pairs of examples are held to, from outside their language: M1's kills and
M2 with the stall made in the database, each run once through the harness a reader would use."""
import json

import measure_kill
import measure_rebalance
from tests.seeds import shifted


def kill_schedule(command: str, out, version: str) -> dict:
    """Three SIGKILLs 1-2 s into each life (a JVM takes a moment to start), seed 7; the first line
    the command's --version printed must start with `version`. 12,000 events: enough that the first
    two lives end mid-stream on a fast idle machine (Go credited 4,000 in under 4 s on CI's)."""
    args = measure_kill.parse_args(["--command", command, "--version-command", f"{command} --version",
                                    "--runs", "1", "--kills", "3", "--events", "12000", "--partitions", "3",
                                    "--life", "1,2", "--seed", str(shifted(7)), "--session-timeout-ms", "3000",
                                    "--out", str(out)])
    assert measure_kill.main(args) == 0
    document = json.loads(out.read_text())
    assert document["config"]["command_version"].startswith(version), document["config"]
    return document["runs"][0]


def held_to_kills(record: dict, inbox: bool) -> None:
    """The inbox credits each event once under the kills; the control duplicates (the kills land
    up to a second after its last automatic commit)."""
    if inbox:
        # the third life may find the stream drained when the host is fast: two mid-stream kills are
        # the floor the control is held to, and what a duplicate or a loss needs to show
        assert record["mid_stream_kills"] >= 2, record["kill_log"]
        assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0)
        assert record["balances_exact"] is True
    else:
        assert record["mid_stream_kills"] >= 2, record["kill_log"]
        assert record["duplicates"] >= 1 and record["balances_exact"] is False, record


def stalled_in_the_database(command: str, out, inbox: bool) -> dict:
    """M2 with the stall in the database (lab/faults/db_stall.py), two consumers, two stalls: the
    evicted zombie finishes its credit; the next owner of its partition meets the inbox row and
    skips, or, without the inbox, credits again."""
    args = measure_rebalance.parse_args(["--command", command, "--runs", "1", "--events", "1000",
                                         "--slow-every", "500", "--consumers", "2", "--seed", str(shifted(1)),
                                         "--out", str(out)])
    assert measure_rebalance.main(args) == 0
    [record] = json.loads(out.read_text())["runs"]
    assert record["stalls"] == 2 and record["lost"] == 0, record
    if inbox:
        assert record["duplicates"] == 0 and record["skipped"] >= 1 and record["balances_exact"], record
    else:
        assert record["duplicates"] >= 1 and not record["balances_exact"], record
    return record
