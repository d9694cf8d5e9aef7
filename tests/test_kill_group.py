"""M1 with a group: three consumers of one variant share a topic, and a seeded schedule
SIGKILLs one of them at a time while the other two go on; the killed one is started again
at once, as a supervisor would. Each kill moves its partitions to the survivors mid-batch,
so an event can be met by a second consumer while the first one's transaction stands or
after it committed. The inbox variants must still credit each event once, on seeds M1
does not use; the control, auto-commit (a1) on the same schedule, must not."""
import random
import time

import pytest

from lab import harness

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("services")]

CONSUMERS, KILLS, EVENTS, PARTITIONS = 3, 4, 2400, 6
# A short session, so a dead member's partitions move within seconds; a 10 ms handler, so the
# topic lasts the whole schedule.
CONFIG = {"work_ms": 10, "session_timeout_ms": 2000, "heartbeat_interval_ms": 500, "batch": 20}


def group_under_kills(variant: str, seed: int) -> tuple[int, dict]:
    """The kills that landed while events were left, and the checker's verdict after recovery."""
    rng = random.Random(seed)
    events = harness.make_events(EVENTS, prefix=f"g{seed}", seed=seed)
    args = harness.worker_args(variant, CONFIG)
    with harness.run_space("m1g", f"{variant}-s{seed}", PARTITIONS) as space:
        harness.produce_events(space.topic, events)

        def start() -> harness.Worker:
            return harness.Worker(variant, space.topic, space.group, space.dsn, None, args)

        members = [start() for _ in range(CONSUMERS)]
        landed = 0
        try:
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
            for member in members:
                member.stop()
        assert recovery.settled and recovery.crashed == [], recovery
        return landed, harness.verdict_of(events, space.admin)


@pytest.mark.parametrize("variant, seed", [("c", 21), ("d", 22), ("p", 23)])
def test_a_group_whose_members_are_killed_one_at_a_time_credits_each_event_once(variant, seed):
    landed, verdict = group_under_kills(variant, seed)
    assert landed >= 2, "the topic ran out before the kills: nothing was in flight"
    assert (verdict["duplicates"], verdict["lost"], verdict["unexpected"]) == (0, 0, 0), verdict
    assert verdict["balances_exact"] is True


def test_the_control_auto_commit_duplicates_under_the_same_group_kills():
    # a1 commits every 5 s on its own; a member killed between two of those commits hands its
    # partitions over with everything it credited since the last one still uncommitted
    landed, verdict = group_under_kills("a1", 21)
    assert landed >= 2 and verdict["duplicates"] >= 1, verdict
