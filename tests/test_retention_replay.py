"""M4b small, on the real services: a replay from 15 days back into an inbox that keeps 14
applies the old credits again, and the alarm fired first; one that keeps 30 skips them
all; the v7 inbox, its old day dropped, dead-letters them instead. The time passes by
moving the inbox rows back (as the owner), not by waiting."""
import pytest

from measurements import measure_retention
from tests.seeds import shifted

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("services")]
CONFIG = {"old": 60, "recent": 20, "age_days": 15, "partitions": 2, "batch": 25, "seed": shifted(3)}


@pytest.mark.parametrize("variant, window, duplicates, parked, alarm", [
    ("c", "shorter", 60, 0, True), ("c", "longer", 0, 0, False), ("v7", "shorter", 0, 60, True)])
def test_a_replay_past_the_window(variant, window, duplicates, parked, alarm):
    record = measure_retention.run_once(variant, window, 1, CONFIG)
    assert (record["duplicates"], record["lost"], record["dead_lettered"]) == (duplicates, 0, parked), record
    assert record["alarm"] is alarm, record["alarm_line"]
