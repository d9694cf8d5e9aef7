"""M10's faults, each once on the real services, with its control: the same schedule on a
variant without the inbox (or with auto-commit) fails where the inbox holds. Each run uses a
login role of its own (nemesis.role_of_its_own), so refusing its connections, or pausing its
consumer, touches no other test on the same server."""
import pytest

from measurements import measure_faults_more

CONFIG = {"events": 400, "partitions": 6, "work_ms": 10, "faults": 1, "every_s": 2, "pause_s": 5, "outage_s": 3,
          "stop_deadline_s": 30, "idle_tx_timeout_ms": 0, "session_timeout_ms": 3000, "max_poll_interval_ms": 5000,
          "batch": 50, "seed": 1}
# pause-consumer lands while a consumer is stalled inside a credit's transaction (1 s on every
# 50th event's first handling), so that the pause holds the inbox row's lock: by construction
PAUSED_IN_A_TRANSACTION = {**CONFIG, "in_handler": 50, "in_handler_s": 1}


def run(fault: str, variant: str, config: dict = CONFIG) -> dict:
    record = measure_faults_more.run_once(fault, variant, 1, config)
    assert record["faults"] == config["faults"] and record["settled"], record
    return record


def test_a_commit_whose_reply_is_lost_is_not_applied_twice():
    record = run("lost-commit-reply", "c")
    assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0), record
    assert record["fault_log"][0]["dropped"].startswith("COMMIT"), record
    # the witness: the message whose reply was lost came again and met its inbox row
    assert record["skipped"] >= 1, record


def test_without_the_inbox_a_commit_whose_reply_is_lost_is_applied_twice():
    record = run("lost-commit-reply", "b")
    assert record["duplicates"] == record["faults"] and record["lost"] == 0, record


def test_a_paused_consumer_holds_its_row_and_the_new_owner_skips_it():
    record = run("pause-consumer", "c", PAUSED_IN_A_TRANSACTION)
    assert record["fault_log"][0]["in_transaction"] is True, record
    assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0), record
    assert record["skipped"] >= 1, record
    # with no idle_in_transaction_session_timeout, the new owner waits out the pause
    assert record["longest_wait_s"] >= CONFIG["pause_s"] - CONFIG["session_timeout_ms"] / 1000, record


def test_without_the_inbox_a_paused_consumer_and_its_successor_both_credit():
    record = run("pause-consumer", "b", PAUSED_IN_A_TRANSACTION)
    assert record["fault_log"][0]["in_transaction"] is True, record
    assert record["duplicates"] >= 1 and record["lost"] == 0, record


def test_an_idle_in_transaction_timeout_ends_the_paused_transaction_and_loses_nothing():
    record = run("pause-consumer", "c", {**PAUSED_IN_A_TRANSACTION, "idle_tx_timeout_ms": 2000})
    assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0), record
    # the server ended the paused session (IdleInTransactionSessionTimeout, an InternalError, not
    # an OperationalError): the paused consumer woke to a dead connection and stopped, its
    # supervisor started it again, and the message it held was applied once, by someone
    assert record["exits"] or record["restarted"], record


def test_a_graceful_stop_finishes_the_message_in_hand_and_exits_cleanly():
    record = run("sigterm", "c")
    stop = record["fault_log"][0]
    assert (stop["exit_code"], stop["sigkilled"]) == (0, False), record
    assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0), record


def test_even_with_auto_commit_a_graceful_stop_loses_nothing_here():
    # No consumer of the lab's abandons what it holds on SIGTERM: a2 handles the rest of the
    # 100 messages its last poll handed over before close() commits their offsets. A loop that
    # left its batch at the signal would lose the rest of it, and this test would say so.
    record = run("sigterm", "a2")
    assert (record["fault_log"][0]["exit_code"], record["fault_log"][0]["sigkilled"]) == (0, False), record
    assert record["lost"] == 0, record


def test_a_consumer_started_while_postgres_refuses_it_waits_and_then_consumes():
    record = run("pg-max-connections", "c")
    assert record["connect_refused"] >= 1 and record["exits"] == [], record
    assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0), record


@pytest.mark.parametrize("variant", ["c", "o"])
def test_a_topic_deleted_and_created_again_is_read_whole(variant):
    # o keyed its offsets by the topic's name and sought the new log to the old one's offsets,
    # skipping its first records (tests/test_offsets.py shows that on the old code); now by its ID
    record = run("topic-recreated", variant, {**CONFIG, "events": 200})
    assert record["fault_log"][0]["republished"] == 200
    assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0), record
