"""evt-2's crash for every variant that commits by hand: the worker exits (os._exit, no
finally, no offset commit) right after the database commit that applied a chosen event, a
second worker takes over, and the ledger is counted. The control runs the same schedule on
b, which has no inbox: it must credit the crashed event twice, or the crash never landed
between the two commits and the safe variants' zeros would prove nothing."""
import pytest

from lab import harness, worker
from tests.seeds import shifted

EVENTS, CRASH_AFTER = 60, "cp-20"
# A short session: the successor gets the dead worker's partitions seconds after the crash.
SESSION = ("--session-timeout-ms", 2000, "--heartbeat-interval-ms", 500)
OPTIONS = {"d": ("--batch", 10), "p": ("--batch", 10), "k": ("--lanes", 4)}


def crash_then_recover(variant, topic, group, dsn, admin, tmp_path) -> dict:
    events = harness.make_events(EVENTS, prefix="cp", seed=shifted(4))
    harness.produce_events(topic, events)
    crashing = harness.Worker(variant, topic, group, dsn, tmp_path / "crashing.log",
                              (*SESSION, *OPTIONS.get(variant, ()), "--crash-after", CRASH_AFTER))
    harness.wait_until(lambda: crashing.proc.poll() is not None, 60, f"{variant}'s planted crash")
    assert crashing.proc.returncode == worker.EXIT_CRASHED_AFTER_EFFECT, crashing.log_tail()
    successor = harness.Worker(variant, topic, group, dsn, tmp_path / "successor.log",
                               (*SESSION, *OPTIONS.get(variant, ())))
    try:
        recovery = harness.settle([successor], admin, EVENTS, 90, group, topic, still_s=1, loss_still_s=3)
    finally:
        successor.stop()
    assert recovery.settled, recovery.state
    return {**harness.verdict_of(events, admin), "skipped": successor.counts.get("skipped", 0)}


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["c", "d", "p", "k", "o", "offset-dedup"])
def test_a_crash_between_the_commits_applies_each_event_once(variant, topic, group, dsn, schema, tmp_path):
    verdict = crash_then_recover(variant, topic, group, dsn, harness.scoped_dsn(schema, harness.ADMIN_DSN),
                                 tmp_path)
    assert (verdict["duplicates"], verdict["lost"], verdict["balances_exact"]) == (0, 0, True), verdict
    # offset-dedup: the replay is the same record at the same offset, which its inbox remembers
    if variant != "o":  # o seeks past what committed (its offsets are in the same transaction): no replay
        assert verdict["skipped"] >= 1, "the replay met the inbox row of what had committed"


@pytest.mark.slow
def test_the_control_without_the_inbox_credits_the_crashed_event_twice(topic, group, dsn, schema, tmp_path):
    verdict = crash_then_recover("b", topic, group, dsn, harness.scoped_dsn(schema, harness.ADMIN_DSN), tmp_path)
    assert verdict["duplicates"] >= 1 and verdict["lost"] == 0, verdict
