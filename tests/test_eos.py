"""Kafka's exactly-once loop against the real broker and Postgres: the output topic stays
exact when a worker dies between its Postgres commits and its Kafka commit; the ledger
stays exact only through the inbox (f), while e applies the dead pass's credits again."""
import collections

import pytest

from lab import harness, worker
from lab.checker import log_copies
from tests.seeds import shifted
from variants import consume_eos

EVENTS = 20
ARGS = ("--every", 10, "--session-timeout-ms", 6000)


@pytest.mark.parametrize("variant", ["e", "f"])
def test_a_worker_dying_after_postgres_before_kafka(variant, topic, group, dsn, conn, tmp_path):
    events = harness.make_events(EVENTS, prefix="eos", seed=shifted(5))
    harness.produce_events(topic, events)
    out = consume_eos.output_topic(topic)
    harness.create_topic(out)
    try:
        # The 15th event is in the second pass of ten (or a later one): the first has committed
        # to Kafka. The worker exits right after its Postgres commit: os._exit, no finally.
        dying = harness.Worker(variant, topic, group, dsn, tmp_path / "dying.log",
                               ARGS + ("--crash-point", "pg-committed", "--crash-every", 15))
        harness.wait_until(lambda: dying.proc.poll() is not None, 60, "the planted crash")
        dying.kill()
        assert dying.proc.returncode == worker.EXIT_CRASHED_AFTER_EFFECT
        assert conn.execute("SELECT count(*) FROM ledger WHERE event_id = 'eos-15'").fetchone()[0] == 1

        # The next worker, with the same transactional.id, fences the dead one's transaction.
        rest = harness.Worker(variant, topic, group, dsn, tmp_path / "rest.log", ARGS)
        try:
            harness.wait_until(lambda: harness.lag(group, topic) == 0, 60, "the topic drained")
        finally:
            rest.stop()

        rows, distinct = conn.execute("SELECT count(*), count(DISTINCT event_id) FROM ledger").fetchone()
        published = [event_id for event_id, _ in events]
        assert log_copies(published, harness.record_ids(out, "read_committed")) == {
            "copies": 0, "missing": 0, "unexpected": 0}
        # The dead pass's output records (all but the 15th's: it died before producing it) were
        # aborted with it; only read_uncommitted sees them. How many there were depends on where
        # the pass began (a quiet moment ends a pass early), so the test counts them, not assumes.
        everything = collections.Counter(harness.record_ids(out, "read_uncommitted"))
        aborted_copies = everything - collections.Counter(published)
        aborted = sum(aborted_copies.values())
        # The planted crash came after eos-15's Postgres commit and before its record was produced:
        # what was aborted are records of the events before it in the same pass, never eos-15's.
        assert set(aborted_copies) <= {f"eos-{n}" for n in range(1, 15)}, aborted_copies
        assert distinct == EVENTS
        # f skipped the dead pass's credits on their second delivery; e applied each of them again,
        # the 15th included: at least every one whose record reached the broker (and was aborted),
        # and those whose records were still in the client's queue when it died.
        if variant == "f":
            assert rows == EVENTS
        else:
            assert rows >= EVENTS + aborted + 1
    finally:
        harness.delete_topics(out)


def test_a_pass_cut_short_by_an_error_commits_no_offset_past_what_it_handled(topic, group, dsn):
    """An error mid-pass ends run_eos; closing the consumer revokes its partitions, and the
    revoke commits the open transaction. Its offsets must stop at the last handled message,
    not at the consumer's position (everything fetched)."""
    import consume

    events = harness.make_events(EVENTS, prefix="cut", seed=shifted(6))
    harness.produce_events(topic, events)

    def apply(conn, event_id, event):
        if event_id == "cut-15":
            raise RuntimeError("the handler failed")
        consume.credit_account(conn, event_id, event)

    with pytest.raises(RuntimeError, match="the handler failed"):
        consume_eos.run_eos(topic, group, apply, every=10, dsn=dsn)
    # cut-15 sits at offset 14: it and everything after it is still owed.
    assert harness.lag(group, topic) == EVENTS - 14
    harness.delete_topics(consume_eos.output_topic(topic))
