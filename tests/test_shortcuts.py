"""M9: the post's shortcuts against a relay that publishes some events twice (each planted
crash between the broker's acknowledgement and the outbox mark republishes its batch),
on the real services; and the state checker on hand-made data."""
import pytest

from lab import registry
from measurements import measure_publish
from tests.seeds import shifted
from variants import shortcuts

STATE_TABLE = registry.setup_sql("upsert")  # what the harness makes for these variants
RELAY = {"events": 600, "partitions": 2, "seed": shifted(1), "rate": 2000.0, "kills": 1, "life": [0.5, 0.5],
         "planted": 2, "batch": 500}


def test_a_state_is_stale_when_it_is_not_the_accounts_newest_event():
    events = [("e1", {"account_id": 1, "seq": 1}), ("e2", {"account_id": 1, "seq": 2}),
              ("e3", {"account_id": 2, "seq": 3}), ("e4", {"account_id": 3, "seq": 4})]
    assert measure_publish.stale_states(events, {1: 2, 2: 3, 3: 4}) == {"stale_accounts": 0, "missing_accounts": 0}
    assert measure_publish.stale_states(events, {1: 1, 2: 3}) == {"stale_accounts": 1, "missing_accounts": 1}


@pytest.mark.parametrize("versioned, final_seq", [(False, 1), (True, 2)])
def test_a_late_copy_of_an_older_event_sets_an_upsert_back_and_not_a_versioned_one(versioned, final_seq, conn):
    # account 1's event 2 is applied, then a copy of its older event 1 arrives
    conn.execute(STATE_TABLE)
    handle = shortcuts.state_handler(versioned)
    assert handle(conn, "e2", {"account_id": 1, "seq": 2, "amount": 20}) is True
    assert handle(conn, "e1", {"account_id": 1, "seq": 1, "amount": 10}) is (not versioned)
    assert conn.execute("SELECT last_seq FROM account_state WHERE account_id = 1").fetchone()[0] == final_seq


@pytest.mark.slow
@pytest.mark.usefixtures("services")
@pytest.mark.parametrize("variant", ["offset-dedup", "upsert", "versioned"])
def test_the_relays_copies_meet_the_shortcuts(variant):
    record = measure_publish.run_once("relay", "on", variant, 1, RELAY)
    copies = record["log_copies"]
    assert copies >= 1 and record["lost"] == 0, record  # the planted crashes republished their batches
    if variant == "offset-dedup":  # each copy has an offset of its own: credited again, every one
        assert record["duplicates"] == copies and record["balances_exact"] is False, record
    elif variant == "upsert":  # applied again, and harmless: the same state written twice
        assert record["duplicates"] == copies and record["stale_accounts"] == 0, record
    else:  # versioned: a copy is not newer than the state it wrote, so it writes nothing
        assert record["duplicates"] == 0 and record["stale_accounts"] == 0, record
    if variant in measure_publish.STATEFUL:
        assert record["missing_accounts"] == 0, record
