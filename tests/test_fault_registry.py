"""The fault registry (lab/faults/): every fault found once, by what it needs; a composed schedule
drawn from a seed; a fault module added from elsewhere found and landed like the others, by
hand and through M1's kill loop (that one test needs the services; the rest are pure: a fault
is landed only when it is a throwaway one)."""
import textwrap

import pytest

import measure_kill
from lab import faults
from lab.faults import schedule
from measurements import measure_cluster, measure_faults, measure_faults_more
from tests.seeds import shifted

NEEDS = {
    "pg-restart": {"stack"}, "broker-restart": {"stack"},
    "partition-broker": {"stack", "netns"}, "partition-db": {"stack", "netns"},
    "share-lock": {"stack"},
    "pause-consumer": {"stack", "pool"}, "pause-postgres": {"stack", "pool"}, "sigterm": {"stack", "pool"},
    "pg-max-connections": {"stack", "pool"}, "lost-commit-reply": {"stack", "pool"},
    "disk-full": {"stack", "pool", "root"}, "offsets-expired": {"stack", "pool"},
    "topic-recreated": {"stack", "pool"},
    "leader-kill": {"replicated"}, "leader-pause": {"replicated"}, "controller-kill": {"replicated"},
    "isolate-leader": {"replicated", "netns"},
    "pg-failover": {"replicated", "pg-standby"}, "pg-failover-stalled": {"replicated", "pg-standby"},
}


def test_every_fault_is_listed_once_with_what_it_needs():
    found = faults.registry()
    assert list(found) == list(NEEDS)  # each once, in their order
    assert {name: set(fault.needs) for name, fault in found.items()} == NEEDS
    for fault in found.values():
        assert fault.summary and "\n" not in fault.summary
        assert fault.module.startswith("lab.faults.")
        assert fault.inject is not None or fault.start is not None  # landed, or the workload itself


def test_each_measurement_takes_the_faults_it_can_land_in_their_order():
    assert measure_faults.FAULTS == ("pg-restart", "broker-restart", "partition-broker", "partition-db",
                                     "share-lock")
    assert measure_faults_more.FAULTS == ("pause-consumer", "pause-postgres", "sigterm", "pg-max-connections",
                                          "lost-commit-reply", "disk-full", "offsets-expired", "topic-recreated")
    assert measure_cluster.FAULTS == ("leader-kill", "leader-pause", "controller-kill", "isolate-leader",
                                      "pg-failover", "pg-failover-stalled")
    assert measure_kill.mixable_faults() == ("pg-restart", "broker-restart")  # mixed into M1's kills (--fault)


def test_a_fault_s_parameters_are_its_defaults_unless_the_config_has_them():
    stalled = faults.get("pg-failover-stalled")
    assert stalled.params({}) == {"stall_s": 4.0}
    assert stalled.params({"stall_s": 1.5, "down_s": 3}) == {"stall_s": 1.5}
    assert faults.get("leader-kill").params({}) == {"down_s": 10.0}
    with pytest.raises(KeyError, match="no fault 'meteor'"):
        faults.get("meteor")


def test_a_composed_schedule_is_the_same_for_the_same_seed_and_draws_only_from_its_faults():
    names = ["pg-restart", "partition-db", "sigterm"]
    first = list(schedule.composed(names, seed=shifted(7), count=40, every_s=2.0))
    assert first == list(schedule.composed(names, seed=shifted(7), count=40, every_s=2.0))
    assert first != list(schedule.composed(names, seed=shifted(8), count=40, every_s=2.0))
    assert len(first) == 40
    assert {name for _, name in first} == set(names)  # 40 draws from 3: each comes up
    times = [at for at, _ in first]
    assert all(1.0 <= b - a <= 3.0 + 1e-9 for a, b in zip([0.0, *times], times, strict=False))  # 0.5x to 1.5x
    assert list(schedule.composed(["sigterm"], seed=shifted(1), count=3, every_s=1.0))[-1][1] == "sigterm"


def test_a_composed_schedule_refuses_a_fault_there_is_not():
    with pytest.raises(ValueError, match="no fault meteor"):
        schedule.composed(["pg-restart", "meteor"], seed=shifted(1), count=3)
    with pytest.raises(ValueError):
        schedule.composed([], seed=shifted(1), count=3)


THROWAWAY = '''
    """Two faults that touch nothing: one that says what it did, one healed after its hold."""
    from lab.faults import Fault


    def poke(scene, times):
        scene.poked = scene.poked + times
        return {"poked": scene.poked}


    def unplug(scene, **_):
        scene.log.append("unplugged")


    def plug(scene, **_):
        scene.log.append("plugged")


    def look(scene):
        """What M1 hands a fault: the run's space and the consumer it is landed on, working."""
        return {"alive": scene.target.proc.poll() is None, "topic": scene.space.topic}


    FAULTS = (
        Fault("poke", "count one poke", needs={"stack"}, inject=poke, defaults={"times": 1}, order=5),
        Fault("unplug", "unplug, then plug again", needs={"stack", "pool"}, inject=unplug, heal=plug,
              hold="hold_s", defaults={"hold_s": 0.01}),
        Fault("look", "look at the consumer, touch nothing", needs={"stack"}, inject=look),
    )
'''


@pytest.fixture
def elsewhere(tmp_path):
    """A fault module in a directory of its own, added to the registry for the test."""
    (tmp_path / "throwaway_faults.py").write_text(textwrap.dedent(THROWAWAY))
    faults.add_path(tmp_path)
    yield tmp_path
    faults.remove_path(tmp_path)


def test_a_fault_module_added_from_elsewhere_is_found_and_landed_like_the_others(elsewhere):
    found = faults.registry()
    assert found["poke"].module == "lab.faults.throwaway_faults"
    assert list(found)[0] == "poke"  # by its order
    assert list(found)[-1] == "unplug"  # no order: after the others
    assert faults.select("stack", without=("pool",))[0] == "poke"
    assert "unplug" in faults.select("pool")
    scene = faults.Scene(config={"times": 2}, poked=0)
    assert faults.get("poke").land(scene) == {"poked": 2}
    assert faults.get("poke").land(faults.Scene(config={}, poked=0)) == {"poked": 1}  # its default
    scene = faults.Scene(config={}, log=[])
    assert faults.get("unplug").land(scene) == {"outage_s": 0.01}
    assert scene.log == ["unplugged", "plugged"]
    assert [name for _, name in schedule.composed(["poke", "pg-restart"], seed=shifted(3), count=30)].count("poke") > 0


def test_a_module_gone_from_the_registry_takes_its_faults_along(tmp_path):
    (tmp_path / "throwaway_faults.py").write_text(textwrap.dedent(THROWAWAY))
    faults.add_path(tmp_path)
    assert "poke" in faults.registry()
    faults.remove_path(tmp_path)
    assert "poke" not in faults.registry() and list(faults.registry()) == list(NEEDS)


def test_a_fault_declared_twice_or_with_an_unknown_need_is_refused(tmp_path):
    (tmp_path / "throwaway_twice.py").write_text(textwrap.dedent('''
        from lab.faults import Fault

        FAULTS = (Fault("sigterm", "again", needs={"stack"}, inject=lambda scene: {}),)
    '''))
    faults.add_path(tmp_path)
    try:
        with pytest.raises(ValueError, match="sigterm declared twice"):
            faults.registry()
    finally:
        faults.remove_path(tmp_path)
    (tmp_path / "throwaway_twice.py").unlink()
    (tmp_path / "throwaway_unknown_need.py").write_text(textwrap.dedent('''
        from lab.faults import Fault

        FAULTS = (Fault("gremlin", "a need nobody provides", needs={"luck"}, inject=lambda scene: {}),)
    '''))
    faults.add_path(tmp_path)
    try:
        with pytest.raises(ValueError, match="gremlin needs"):
            faults.registry()
    finally:
        faults.remove_path(tmp_path)
    assert list(faults.registry()) == list(NEEDS)


@pytest.mark.slow
@pytest.mark.usefixtures("services")
def test_a_throwaway_fault_from_elsewhere_is_landed_through_m1s_kill_loop(elsewhere):
    """measure_kill's --fault: halfway through each life, a drawn fault is landed on the working
    consumer; here the throwaway `look`, so the run's verdict is the kills' alone (c: 0/0)."""
    config = {"events": 400, "partitions": 3, "work_ms": 5, "kills": 2, "life": (0.5, 1.5), "seed": shifted(7),
              "session_timeout_ms": 2000, "faults": ["look"]}
    record = measure_kill.run_once("c", 1, config)
    assert [entry["fault"] for entry in record["kill_log"]] == ["look", "look"], record["kill_log"]
    assert all(entry["met"]["alive"] and entry["met"]["topic"].startswith("m1.c-r1.") for entry in record["kill_log"])
    assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0)


def test_a_cluster_run_left_stuck_by_its_fault_is_counted_not_timed_nor_raised_away():
    """M8 records a run whose consumer got no credit within its wait after the fault (the acks=1 leader kill
    left c so once): resume_s None, stuck, and what never came counted lost; the summary times the others."""
    def run(n, **fields):
        return {"fault": "leader-kill", "variant": "c", "replication": "async", "acks": "1", "run": n,
                "duplicates": 0, "lost": 0, "acked_missing": 0, "resume_s": 0.5, "stuck": False,
                "longest_stall_s": 1.0, "wall_s": 30.0, "balances_exact": True, **fields}

    runs = [run(1), run(2, lost=700, resume_s=None, stuck=True, balances_exact=False)]
    summary = measure_cluster.summarise(runs)["leader-kill c async 1"]
    assert summary["stuck"] == 1 and summary["totals"]["lost"] == 700
    assert summary["resume_s"] == {"median": 0.5, "min": 0.5, "max": 0.5}
    assert "stuck: no credit" in measure_cluster.verdict_line(runs[1])
    assert measure_cluster.summarise([runs[1]])["leader-kill c async 1"]["resume_s"] is None
