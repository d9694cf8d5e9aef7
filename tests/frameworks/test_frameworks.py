"""M9: the frameworks readers use, on the real services, at a deterministic crash point:
the worker exits right after the database committed a chosen event (FastStream's handler
returned; Quix's sink wrote its rows), before the framework committed anything to Kafka.
What each variant guarantees is asserted, and the unsafe ones must fail, not by luck:

    fs-default  auto-commit every 5 s; the crash comes within the first second: replayed
    fs-ack      the commit after the handler never went out: the crashed event replayed
    fs-inbox    replayed too, and the inbox skips it
    qx-eos      the sink's rows committed, Kafka's transaction not: the checkpoint replayed
    qx-eos-keyed  the same replay meets ON CONFLICT DO NOTHING

Quix's sink writes ledger rows and cannot credit a balance, so its balances are never
exact; that is asserted too, as the post's point about increments."""
import pytest
from test_crash_points import crash_then_recover

import measure_kill
from lab import harness
from tests.seeds import shifted

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("variant, duplicates", [("fs-default", True), ("fs-ack", True), ("fs-inbox", False),
                                                 ("qx-eos", True), ("qx-eos-keyed", False)])
def test_a_crash_after_the_database_before_the_framework_commits(variant, duplicates, topic, group, dsn, schema,
                                                                 tmp_path):
    verdict = crash_then_recover(variant, topic, group, dsn, harness.scoped_dsn(schema, harness.ADMIN_DSN), tmp_path)
    assert verdict["lost"] == 0, verdict
    assert (verdict["duplicates"] >= 1) is duplicates, verdict
    if variant.startswith("qx"):
        assert verdict["balances_exact"] is False  # rows only: no credit reached an account
    else:
        assert verdict["balances_exact"] is not duplicates, verdict


@pytest.mark.usefixtures("services")
@pytest.mark.parametrize("variant", ["fs-inbox", "qx-eos-keyed"])
def test_the_safe_ones_under_a_short_kill_schedule(variant):
    # Quix's first effect is its first checkpoint (every 5 s), so a life there writes one
    # checkpoint and is killed inside the next: the topic may drain before the third kill.
    config = {"events": 1500, "partitions": 3, "work_ms": 5, "kills": 3, "life": (1.0, 2.5), "seed": shifted(11),
              "session_timeout_ms": 6000}
    record = measure_kill.run_once(variant, 1, config)
    assert record["kills"] >= 1 and record["crashes"] == [], record["kill_log"]
    assert (record["duplicates"], record["unexpected"]) == (0, 0), record
    if variant == "qx-eos-keyed":
        assert record["lost"] == 0, record
    # fs-inbox: FastStream's ACK commits librdkafka's stored offsets, which the next poll may
    # already have moved past a message whose handler has not finished (pinned in
    # test_faststream_commit.py): a kill then loses it, and the inbox cannot repair a loss, so none
    # is promised here; fs-inbox-fixed is the fix. Its duplicates are the inbox's to stop, and it does.
