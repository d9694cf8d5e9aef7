"""M1 in a group (`measure_kill.py --consumers N`): N workers share the run's group, and each
life ends with a SIGKILL of one of them while the others go on.

Claim: the kill lands on a group at work, not on a lone consumer. The group rebalances (under
librdkafka's default assignors, eager ones, which the lab's variants keep, every member gives
up its partitions until the rebalance completes, about when the killed member's session
expires), and a message the killed member applied without committing its offset is met again
by whichever member gets its partition next.

Schedule: the lives are the one-consumer schedule's (nemesis.kill_schedule), the first counted
from the group's first side effect and each next one from the kill before it. The victim is
drawn on its own stream of the run's seed (one draw a kill, so a seed gives the same draws
whatever the timing), and moved on round the group to the next member holding partitions: a
kill of a member that holds nothing (every member, while an eager rebalance waits out the last
victim's session) would test nothing, so when no member holds any at the end of a life, the
kill waits for the rebalance to hand them out (the entry's waited_s; the life counts without
it). The workers' own log lines say what each holds; where none of them prints any (a
command, or a1 and a2, which log no rebalances), the drawn member is killed and the log's
`held` is None. Imported only for N > 1, so M1's one-consumer runs do not load it
(lab.provenance: a change here leaves their figures fresh).
"""
import contextlib
import random
import time

from lab import harness


def group_working(pool: list, group: str, topic: str, timeout_s: float = 120.0) -> bool:
    """True once any member applied something; False if the group has nothing left to consume.
    Otherwise it fails as Worker.working() does, in one line a command's reader can act on."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if any(worker.first_effect.wait(0.5 / len(pool)) for worker in pool):
            return True
        if harness.lag(group, topic) == 0 or all(worker.proc.poll() is not None for worker in pool):
            # nothing left, or nobody left: the first member's verdict names which, and why
            return pool[0].working(group, topic, timeout_s=max(1.0, end - time.monotonic())) == "effect"
    message = (f"none of the {len(pool)} members applied anything within {timeout_s:g}s; the group's lag is "
               f"{harness.lag(group, topic)}")
    if pool[0].command:
        raise harness.CommandError(f"{message}: is your command reading {topic} as group {group} (KAFKA_TOPIC, "
                                   f"KAFKA_GROUP)?\n{pool[0].log_tail()}")
    raise RuntimeError(f"{message}:\n{pool[0].log_tail()}")


HOLDER_WAIT_S = 60.0  # well past a rebalance that waits out a killed member's session (M1's: 6 s)


def logs_ownership(paths) -> bool:
    """Whether the run's workers say what they hold: a line of an assignment in any member's log
    (a1, a2 and a command print none)."""
    return any(path and harness.OWNERSHIP.search(path.read_text(errors="replace")) for path in paths)


def victim(pool: list, draw: int, known: bool) -> tuple[int, list[int], float]:
    """The place of the member to kill, the partitions it held then, and the seconds waited for
    it. `draw` is this kill's place on the seed's stream: that member, or the next one round
    that holds partitions, waiting up to HOLDER_WAIT_S for one while a rebalance has handed out
    nothing. A lab worker that exited by itself goes first (nothing restarts it; its entry
    records the exit and a fresh worker takes its place). When `known` is False (the workers
    say nothing of what they hold), the member at `draw`."""
    start, order = time.monotonic(), [(draw + i) % len(pool) for i in range(len(pool))]
    while True:
        waited = round(time.monotonic() - start, 3)
        if exited := [slot for slot in order if not pool[slot].command and pool[slot].proc.poll() is not None]:
            return exited[0], sorted(pool[exited[0]].assignment), waited
        if not known:
            return draw, sorted(pool[draw].assignment), waited
        for slot in order:
            if held := pool[slot].assignment:  # one read: the reader thread replaces the set, never changes it
                return slot, sorted(held), waited
        if waited > HOLDER_WAIT_S:
            return draw, [], waited
        time.sleep(0.05)


def kill_in_a_group(schedule: list[float], consumers: int, seed: int, start, done, after_kill, group: str,
                    topic: str) -> tuple[list[dict], dict, list[int]]:
    """start(slot) makes the worker of place `slot` (1..N); after_kill(k, life, worker, exit_code)
    the log entry of a kill; done(entry) says nothing is left to apply (the loop then ends; no
    fresh worker follows the last kill). The members alive at the end leave the group cleanly
    (SIGTERM) before the recovery phase. Returns the kill log, the counts of the members never
    killed, and the exit codes of those that ended by themselves."""
    victims = random.Random(f"{seed}-victims")
    pool: list = [None] * consumers
    log, counts, exited, logs, known = [], {}, [], set(), False
    try:
        for slot in range(consumers):
            pool[slot] = start(slot + 1)
            logs.add(pool[slot].log_path)
        if group_working(pool, group, topic):
            began = time.monotonic()
            for k, life in enumerate(schedule, 1):
                time.sleep(max(0.0, began + life - time.monotonic()))  # the bookkeeping since counts in it
                known = known or any(worker.assignment for worker in pool) or logs_ownership(logs)
                slot, held, waited = victim(pool, victims.randrange(consumers), known)  # one draw a kill
                member, pool[slot] = pool[slot], None  # its counts go into its own entry, once
                exit_code = member.proc.poll()
                member.kill()
                began = time.monotonic()
                log.append({**after_kill(k, life, member, exit_code), "consumer": slot + 1, "held": held,
                            "waited_s": waited})
                if done(log[-1]) or k == len(schedule):
                    break
                pool[slot] = start(slot + 1)
                logs.add(pool[slot].log_path)
    finally:
        for worker in filter(None, pool):
            if (code := worker.proc.poll()) is not None:
                exited.append(code)
            with contextlib.suppress(Exception):  # one that will not stop must not keep the rest running
                worker.stop()
            for kind, n in worker.counts.items():
                counts[kind] = counts.get(kind, 0) + n
    if not logs_ownership(logs):
        for entry in log:  # nobody said what it held: not known, rather than nothing
            entry["held"] = None
    return log, counts, exited
