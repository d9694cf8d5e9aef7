"""M6's faults that touch nothing but their own run, one fast case each: a network partition
cut in a namespace around one consumer (root: ip netns, netlab), and a share group's record lock
that runs out mid-handler. The inbox (c) keeps every credit once; its control (b) fails on the
same schedule. Unlike the restarts (test_faults.py) they leave the shared services alone, so
they run beside the other tests."""
import pytest

from measurements import measure_faults
from tests.test_faults import CONFIG, assert_the_inbox_survived, config_for

pytestmark = [pytest.mark.usefixtures("services"), pytest.mark.slow]

# The cut lands while the cut-off consumer stalls inside a handler (2 s on every 50th event it
# takes), before that credit's offset is committed, for c and for its control alike. A cut at a
# random moment (measure_faults' schedule) can land just after an offset commit reached the
# broker and meet no work in flight: it did in CI, for b once and for c once (ledger 770 of 800).
IN_HANDLER = {**CONFIG, "in_handler": 50, "in_handler_s": 2}


def schedule_for(fault: str) -> dict:
    return IN_HANDLER if fault.startswith("partition") else config_for(fault)


@pytest.mark.parametrize("fault", [pytest.param("partition-broker", marks=pytest.mark.root),
                                   pytest.param("partition-db", marks=pytest.mark.root), "share-lock"])
def test_the_inbox_survives(fault):
    record = measure_faults.run_once(fault, "c", 1, schedule_for(fault))
    assert_the_inbox_survived(fault, record, schedule_for(fault))


@pytest.mark.root
@pytest.mark.parametrize("fault", ["partition-broker", "partition-db"])
def test_without_the_inbox_a_partition_zombie_duplicates(fault):
    # The same schedule as c's: the message in the stalled handler is credited twice, by the
    # zombie once the link heals and by the consumer that took its partitions.
    record = measure_faults.run_once(fault, "b", 1, schedule_for(fault))
    assert record["faults"] == 1
    assert record["duplicates"] >= 1, record
    assert record["lost"] == 0


def test_without_the_inbox_a_lock_expiry_duplicates_its_record():
    record = measure_faults.run_once("share-lock", "b", 1, CONFIG)
    assert record["faults"] == 1
    assert (record["duplicates"], record["lost"]) == (1, 0), record
