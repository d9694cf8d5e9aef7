"""The producer's outbox and its relay, against the real broker and Postgres: nothing is
marked published before the broker has it, a relay that dies between the two publishes
again (same IDs, new offsets), two relays never wait on each other, and the application's
own retry resends only what it had no acknowledgement for."""
import psycopg
import pytest

import publish
from lab import harness, publishing
from lab.checker import log_copies
from lab.settings import PUBLISHER_DSN
from tests.seeds import shifted
from variants import relay


class Died(Exception):
    pass


def fill(conn, topic, events):
    with conn.transaction():
        for event_id, event in events:
            relay.write_event(conn, event_id, topic, str(event["account_id"]), event)


@pytest.fixture
def publisher(schema):
    with psycopg.connect(harness.scoped_dsn(schema, PUBLISHER_DSN), autocommit=True) as c:
        yield c


def test_a_relay_dying_after_the_acks_publishes_again_and_loses_nothing(topic, publisher, conn):
    events = harness.make_events(25, prefix="out", seed=shifted(7))
    fill(publisher, topic, events)
    producer = publish.make_producer()

    def die(_event_ids):
        raise Died()

    with pytest.raises(Died):
        relay.relay_once(publisher, producer, 10, after_ack=die)
    # The broker has the first ten, the outbox still calls them unpublished.
    assert conn.execute("SELECT count(*) FROM events_outbox WHERE published_at IS NULL").fetchone()[0] == 25
    while relay.relay_once(publisher, producer, 10):
        pass
    assert conn.execute("SELECT count(*) FROM events_outbox WHERE published_at IS NULL").fetchone()[0] == 0
    seen = harness.record_ids(topic, "read_uncommitted")
    assert log_copies([e for e, _ in events], seen) == {"copies": 10, "missing": 0, "unexpected": 0}


def test_two_relays_claim_disjoint_rows_without_waiting(topic, publisher, conn, schema):
    fill(publisher, topic, harness.make_events(20, prefix="two", seed=shifted(8)))
    with psycopg.connect(harness.scoped_dsn(schema, PUBLISHER_DSN)) as other:
        held = other.execute("SELECT id FROM events_outbox ORDER BY id LIMIT 5 FOR UPDATE").fetchall()
        # lock_timeout: a wait on the other relay's rows would fail this instead of hanging it.
        publisher.execute("SET lock_timeout = '2s'")
        assert relay.relay_once(publisher, publish.make_producer(), 100) == 15
        other.rollback()
    unpublished = {row[0] for row in conn.execute("SELECT id FROM events_outbox WHERE published_at IS NULL")}
    assert unpublished == {row[0] for row in held}


def test_the_applications_retry_resends_only_what_has_no_acknowledgement(topic, tmp_path):
    events = harness.make_events(12, prefix="jr", seed=shifted(9))
    journal = tmp_path / "acked"
    journal.write_text("".join(f"{event_id}\n" for event_id, _ in events[:8]))
    acked = publishing.publish_journaled(publish.make_producer(), topic, events, journal)
    assert acked == 4
    assert sorted(harness.record_ids(topic, "read_uncommitted")) == sorted(e for e, _ in events[8:])
    assert journal.read_text().split() == [e for e, _ in events]


def test_measure_publish_relay_run_counts_copies_and_c_applies_each_once(services):
    from measurements import measure_publish

    config = {"events": 600, "partitions": 2, "seed": shifted(1), "rate": 2000.0, "kills": 1, "life": [0.5, 0.5],
              "planted": 2, "batch": 500}
    record = measure_publish.run_once("relay", "on", "c", 1, config)
    assert record["log_copies"] >= 1  # each planted crash republishes its batch
    assert (record["duplicates"], record["lost"], record["balances_exact"]) == (0, 0, True)
    assert record["skipped"] == record["log_copies"]
