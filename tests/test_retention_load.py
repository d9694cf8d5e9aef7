"""#31's retention beside a running p, small, on the real services: with retention.sql's
batched delete beside it, and with the expired days of a day-partitioned inbox dropped
(or detached, then dropped) beside it, p credits each event once and retention leaves no expired ID
behind. Timings are recorded by the measurement, never asserted here."""
import pytest

from measurements import measure_retention_load
from tests.seeds import shifted

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("services")]
CONFIG = {"events": 2000, "backlog": 20000, "partitions": 2, "batch": 100, "seed": shifted(4)}


@pytest.mark.parametrize("mode", ["delete", "drop", "detach"])
def test_retention_beside_p_forgets_the_backlog_and_p_credits_each_event_once(mode):
    record = measure_retention_load.run_once(mode, 1, CONFIG)
    assert (record["duplicates"], record["lost"], record["balances_exact"]) == (0, 0, True), record
    assert record["expired_left"] == 0, record
    if mode == "delete":
        assert record["forgotten_ids"] == CONFIG["backlog"], record
    else:  # the days 15 to 22 back; 9 if UTC midnight passed between making the partitions and dropping them
        assert record["dropped_days"] in (8, 9), record


def test_without_retention_the_backlog_stays():
    # the control: the expired IDs are there to forget, and nothing forgets them on its own
    record = measure_retention_load.run_once("partitioned", 1, CONFIG)
    assert record["expired_left"] == CONFIG["backlog"] and record["duplicates"] == 0, record
