"""M1 with a group: three consumers of one variant share a topic, and a seeded schedule SIGKILLs
one of them at a time while the other two go on; the killed one is started again at once, as a
supervisor would. Before the group forms, a first consumer crashes itself right after the
database commit of a chosen event, before its offset commit: the window the inbox exists for,
landed on purpose, so that every run reaches it whatever the random kills hit. Each kill moves
its partitions to the survivors mid-batch, so an event can be met by a second consumer while
the first one's transaction stands or after it committed. The inbox variants must still credit
each event once, on seeds M1 does not use, and their inbox must be seen skipping a copy; the
control on the same schedule, b (no inbox), must not credit each event once. Last, the same
through the harness (`measure_kill.py --consumers 3`), for c and its control b."""
import random
import time

import pytest

import measure_kill
from lab import checker, harness, worker
from tests.seeds import shifted

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("services")]

CONSUMERS, KILLS, EVENTS, PARTITIONS = 3, 4, 2400, 6
# A short session, so a dead member's partitions move within seconds; a 10 ms handler, so the
# topic lasts the whole schedule.
CONFIG = {"work_ms": 10, "session_timeout_ms": 2000, "heartbeat_interval_ms": 500, "batch": 20}
CHOSEN_SEQ = 60
CHOSEN = f"g{{seed}}-{CHOSEN_SEQ}"  # the event after whose database commit a first member crashes


def group_under_kills(variant: str, seed: int) -> tuple[int, dict, int]:
    """The kills that landed while events were left, the checker's verdict after recovery, and
    the copies skipped on their inbox row (over every life, the killed ones too)."""
    rng = random.Random(seed)
    events = harness.make_events(EVENTS, prefix=f"g{seed}", seed=seed)
    args = harness.worker_args(variant, CONFIG)
    with harness.run_space("m1g", f"{variant}-s{seed}", PARTITIONS) as space:
        # the events up to the chosen one first, so that the lone consumer with the planted crash
        # reaches it at once; the rest once it has crashed, for the group
        harness.produce_events(space.topic, events[:CHOSEN_SEQ])

        lives: list[harness.Worker] = []

        def start(*extra: str) -> harness.Worker:
            lives.append(harness.Worker(variant, space.topic, space.group, space.dsn, None, args + extra))
            return lives[-1]

        # The planted crash first, in a member alone in the group, so that it is the one to apply
        # the chosen event (a batched variant crashes when the chosen event's batch applied
        # anything, so a second member with the flag would crash again on the redelivery).
        # The group then forms without the flag, and the redelivery goes to one of its members.
        members = []
        landed = 0
        try:
            planted = start("--crash-after", CHOSEN.format(seed=seed))
            harness.wait_until(lambda: planted.proc.poll() is not None, 60, f"{variant}'s planted crash")
            assert planted.proc.returncode == worker.EXIT_CRASHED_AFTER_EFFECT, planted.log_tail()
            harness.produce_events(space.topic, events[CHOSEN_SEQ:])
            members += [start() for _ in range(CONSUMERS)]
            harness.wait_until(lambda: any(m.first_effect.is_set() for m in members), 60, f"{variant}'s first credit")
            for _ in range(KILLS):
                time.sleep(rng.uniform(0.5, 1.5))  # the schedule: the kill lands wherever the members are
                if harness.distinct_applied(space.admin) >= EVENTS:
                    break
                victim = rng.randrange(CONSUMERS)
                assert members[victim].proc.poll() is None, members[victim].log_tail()  # killed, not crashed
                members[victim].kill()
                members[victim] = start()
                landed += 1
            recovery = harness.settle(members, space.admin, EVENTS, 120, space.group, space.topic,
                                      still_s=1, loss_still_s=5)
        finally:
            for life in lives:  # the planted one too, if it never crashed
                life.stop()
        assert recovery.settled and recovery.crashed == [], recovery
        counts, _ = checker.tally(lives)
        return landed, harness.verdict_of(events, space.admin), counts.get("skipped", 0)


@pytest.mark.parametrize("variant, seed", [("c", shifted(21)), ("d", shifted(22)), ("p", shifted(23))])
def test_a_group_whose_members_are_killed_one_at_a_time_credits_each_event_once(variant, seed):
    landed, verdict, skipped = group_under_kills(variant, seed)
    assert landed >= 2, "the topic ran out before the kills: nothing was in flight"
    assert (verdict["duplicates"], verdict["lost"], verdict["unexpected"]) == (0, 0, 0), verdict
    assert verdict["balances_exact"] is True
    # the witness: a copy of something already credited came again and met its inbox row, so
    # the schedule reached the window the inbox exists for; without the inbox that is a duplicate
    assert skipped >= 1, (landed, verdict)


def test_the_control_without_the_inbox_duplicates_under_the_same_group_kills():
    # b commits the offset after the credit, as c does, with no inbox: the planted crash alone
    # hands the chosen event to a member that credits it again
    landed, verdict, _ = group_under_kills("b", shifted(21))
    assert landed >= 2 and verdict["duplicates"] >= 1, verdict


@pytest.mark.parametrize("variant", ["c", "b"])
def test_measure_kill_kills_one_member_of_three_at_a_time(variant):
    """measure_kill.py --consumers 3 (lab/kill_group.py), after its planted crash: the first
    consumer, alone, exits right after the database commit of the 40th credit, before its offset
    commit; then three members share the group and each life ends with a SIGKILL of one of them.
    c credits the planted event once and every event once; b, the control on the same schedule,
    credits the planted event again. Every victim held partitions when it was killed, and some
    only part of the topic: the kills landed on members of a group sharing the work, not on a
    lone consumer, nor on one the rebalance had left with nothing."""
    config = {"events": 3000, "partitions": 3, "work_ms": 5, "kills": 3, "life": (0.5, 1.5), "seed": shifted(7),
              "session_timeout_ms": 2000, "heartbeat_interval_ms": 500, "consumers": 3, "planted_crash": 40}
    record = measure_kill.run_once(variant, 2, config)  # run 2: its logs are not test_kill.py's run 1's
    assert record["mid_stream_kills"] == 3, record["kill_log"]
    assert {entry["consumer"] for entry in record["kill_log"]} <= {1, 2, 3}, record["kill_log"]
    assert all(entry["held"] for entry in record["kill_log"] if entry["exit_code"] is None), record["kill_log"]
    assert any(0 < len(entry["held"]) < 3 for entry in record["kill_log"]), record["kill_log"]
    if variant == "c":
        assert record["planted"]["ledger_rows"] == 1 and record["skipped"] >= 1, record
        assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0), record
        assert record["balances_exact"] is True
    else:
        assert record["planted"]["ledger_rows"] >= 2 and record["duplicates"] >= 1, record
