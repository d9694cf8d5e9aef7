"""M9b: Quix Streams with a sink that claims each event in the inbox (variants/consume_quix_inbox.py)
credits each event once, under Quix's exactly-once and under its default at-least-once.

- The deterministic crash: the worker exits right after the sink's database commit of a chosen
  event, before Quix commits anything to Kafka; the successor replays the checkpoint, and the
  replay meets the inbox. That the crash lands where a replay happens is shown twice: by the
  successor's own "skipped duplicate" lines here, and by qx-eos, the stock sink's plain INSERT,
  which writes the whole checkpoint twice at the same point (test_frameworks.py).
- Hard kills in small, through measure_kill's harness: no duplicate, no loss, balances exact.
- Poison (issue #28's battery, tests/helpers.py) is parked on the DLQ with its reason, and the
  partition goes on to the good credit after it.
"""
import pytest
from helpers import every_kind_of_poison_is_parked, worker_run
from test_crash_points import crash_then_recover

import measure_kill
from lab import harness
from tests.seeds import shifted

pytestmark = pytest.mark.slow

VARIANTS = ["qx-eos-inbox", "qx-alo-inbox"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_crash_after_the_sinks_commit_credits_each_event_once(variant, topic, group, dsn, schema, tmp_path):
    verdict = crash_then_recover(variant, topic, group, dsn, harness.scoped_dsn(schema, harness.ADMIN_DSN), tmp_path)
    assert (verdict["duplicates"], verdict["lost"], verdict["unexpected"]) == (0, 0, 0), verdict
    assert verdict["balances_exact"] is True, verdict
    assert verdict["skipped"] >= 1, "the replayed checkpoint met the inbox rows of what had committed"


@pytest.mark.usefixtures("services")
@pytest.mark.parametrize("variant", VARIANTS)
def test_hard_kills_leave_no_duplicate_no_loss_and_exact_balances(variant):
    # Quix's first effect is its first checkpoint (every 5 s), so each life writes one checkpoint
    # and is killed inside the next; 20 ms a message keeps the topic from draining in one.
    config = {"events": 600, "partitions": 3, "work_ms": 20, "kills": 3, "life": (1.0, 2.5), "seed": shifted(11),
              "session_timeout_ms": 6000}
    record = measure_kill.run_once(variant, 1, config)
    assert record["kills"] >= 1 and record["crashes"] == [], record["kill_log"]
    assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0), record
    assert record["balances_exact"] is True, record


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_kind_of_poison_is_parked_and_the_partition_goes_on(variant, topic, group, dsn, conn, tmp_path):
    every_kind_of_poison_is_parked(topic, group, dsn, conn, worker_run(variant, tmp_path / "worker.log"))
