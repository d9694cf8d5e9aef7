"""Which member M1 in a group kills (lab/kill_group.victim), on hand-made members: the draw, moved
round to the next member holding partitions; a lab worker that exited first; the wait for a
rebalance to hand partitions out; the drawn member when nothing says what anyone holds."""
from types import SimpleNamespace

from lab import kill_group


def member(held=(), exited=False, command=None):
    return SimpleNamespace(assignment=set(held), command=command,
                           proc=SimpleNamespace(poll=lambda: 0 if exited else None))


def test_the_drawn_member_when_it_holds_partitions_else_the_next_one_round_that_does():
    pool = [member([0, 1]), member(), member([2])]
    assert kill_group.victim(pool, 0, known=True)[:2] == (0, [0, 1])
    assert kill_group.victim(pool, 1, known=True)[:2] == (2, [2])
    assert kill_group.victim(pool, 2, known=True)[:2] == (2, [2])


def test_a_lab_worker_that_exited_by_itself_goes_first_a_command_does_not():
    pool = [member([0]), member([1], exited=True), member([2])]
    assert kill_group.victim(pool, 2, known=True)[0] == 1
    commands = [member([0], command="sh"), member([1], exited=True, command="sh")]  # its supervisor restarts it
    assert kill_group.victim(commands, 0, known=False)[0] == 0


class Rebalanced(SimpleNamespace):
    """A member that holds nothing the first time it is asked, and partitions 4 and 5 after."""
    asked = 0

    @property
    def assignment(self):
        self.asked += 1
        return set() if self.asked == 1 else {4, 5}


def test_while_nobody_holds_anything_the_kill_waits_for_the_rebalance():
    pool = [member(), Rebalanced(command=None, proc=SimpleNamespace(poll=lambda: None)), member()]
    slot, held, waited = kill_group.victim(pool, 2, known=True)
    assert (slot, held) == (1, [4, 5]) and pool[1].asked == 2
    assert waited >= 0.05  # one look found nobody holding any, and it slept before the next


def test_when_no_worker_says_what_it_holds_the_drawn_member_is_killed():
    pool = [member(), member(), member()]
    assert kill_group.victim(pool, 1, known=False)[:2] == (1, [])
