"""M6's restarts, one fast case each, on the real services: the inbox (c) keeps every credit once,
and its control fails on the same schedule. The restarts go through stack.py; they stop the
services every other test uses, so these run alone (serial). The faults that touch nothing
but their own run (partitions, a share lock's expiry) are in test_faults_cut.py."""
import pytest

from measurements import measure_faults
from tests.seeds import shifted

# serial: a Postgres or broker restart would fail whatever else runs on the stack meanwhile
pytestmark = [pytest.mark.usefixtures("services"), pytest.mark.slow, pytest.mark.serial]

CONFIG = {"events": 800, "partitions": 6, "work_ms": 10, "faults": 1, "every_s": 2, "outage_s": 8,
          "session_timeout_ms": 3000, "max_poll_interval_ms": 5000, "batch": 50, "seed": shifted(1),
          # share-lock: one handler (event 500) outlives a 2 s lock by 2 s
          "lock_ms": 2000, "overrun_s": 2, "slow_every": 500, "max_poll_records": 1, "one_record_batches": True}
# A broker restart meets a commit in flight only when the group moves the partition before a
# later commit covers the failed one, which one restart did not always arrange (CI saw b
# with no duplicate once, and three restarts none on a machine loaded with other stacks):
# the broker restarts four times, for c and for its control alike. These run beside the
# rest of the suite (make test), so the extra restart costs the suite no time. Work goes on
# only in the 2 s before each restart (a commit waits out the outage), up to 100 credits a
# second at 10 ms: 1,200 credits last past the fourth on an idle host (800 might not).
BROKER_RESTARTS, BROKER_RESTART_EVENTS = 4, 1200


def config_for(fault: str) -> dict:
    return ({**CONFIG, "faults": BROKER_RESTARTS, "events": BROKER_RESTART_EVENTS} if fault == "broker-restart"
            else CONFIG)


RESTARTS = ("pg-restart", "broker-restart")


def assert_the_inbox_survived(fault: str, record: dict, config: dict) -> None:
    """c under `fault`: every credit once, balances exact, and the fault met work in flight."""
    assert record["faults"] == config["faults"] and record["settled"] and record["crashed"] == []
    assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0), record
    assert record["balances_exact"] is True
    # The fault met work in flight, or c's zeros would prove nothing: a Postgres restart stops
    # the consumer (it starts again); a broker restart or a partition evicts it, fails the
    # offset commit in hand, and its redelivery meets the inbox row; an expired share lock
    # fails the acknowledgement, and the record's second delivery is skipped.
    witnesses = {"pg-restart": record["restarted"] + record["reconnected"],
                 "share-lock": record["commit_failed"].get("INVALID_RECORD_STATE", 0) * record["skipped"]}
    met = witnesses.get(fault, sum(record["commit_failed"].values()) * record["skipped"])
    assert met >= 1, record


@pytest.mark.parametrize("fault", RESTARTS)
def test_the_inbox_survives(fault):
    record = measure_faults.run_once(fault, "c", 1, config_for(fault))
    assert_the_inbox_survived(fault, record, config_for(fault))


def test_a_batch_that_keeps_its_connection_survives_a_postgres_restart():
    """d retries its batch in place on a new connection (variants/common.Database) rather than
    exiting as c does: the batch in hand when Postgres went down is applied once, not skipped and
    not twice. The control is a2's below, on the same schedule."""
    record = measure_faults.run_once("pg-restart", "d", 1, CONFIG)
    assert_the_inbox_survived("pg-restart", record, CONFIG)


def test_without_the_inbox_a_broker_restart_duplicates_the_message_in_hand():
    # The schedule the inbox survives above: b's offset commit after the database meets the
    # dead broker, fails once the group has moved on, and that credit is applied again.
    record = measure_faults.run_once("broker-restart", "b", 1, config_for("broker-restart"))
    assert record["faults"] == BROKER_RESTARTS and record["settled"]
    assert record["duplicates"] >= 1 and record["lost"] == 0, record
    assert sum(record["commit_failed"].values()) >= 1, record


def test_with_auto_commit_a_postgres_restart_loses_the_rest_of_the_batch():
    # a2 takes 100 messages at a time with auto-commit on: the restart fails a handler
    # mid-batch, the consumer closes (committing what it was handed) and exits, and the
    # worker started again (as a supervisor would) begins after the batch. The run is
    # recorded with its losses and the crash, not raised away as a time-out.
    record = measure_faults.run_once("pg-restart", "a2", 1, CONFIG)
    assert record["faults"] == 1 and record["crashed"] == [1], record
    assert record["settled"] and record["drained_after_crash_s"] is not None, record
    assert record["lost"] >= 1 and record["duplicates"] == 0, record
    assert record["balances_exact"] is False
