"""The producer's side: a transactional outbox, and the relay that publishes it to Kafka.

Claim: an event is never lost between the database and the topic, and may be
published twice. The application writes the event into `events_outbox` in the
same transaction as the change it announces (write_event), so the event exists
if and only if the change does. The relay claims unpublished rows with FOR UPDATE
SKIP LOCKED, produces them, waits for the broker's acknowledgement of every one,
and only then marks them published in the same transaction. A relay that dies
after the acknowledgement and before that commit leaves the rows unpublished,
and the next relay publishes them again: a copy with the same `event_id`, at a
new offset. Idempotence in the producer cannot help, because the copy comes from
a new producer session. The consumer's inbox is what makes the copy harmless.

Several relays may run at once: SKIP LOCKED hands each its own rows, and none
waits on another. They may then publish two events of one key out of row order;
a single relay (or one per key range) keeps the order.

Assumptions: schema.sql's events_outbox, in the schema first on PUBLISHER_DSN's
search path (settings.py), and grants.sql's grants for inbox_publisher.

    python -m variants.relay --batch 100
"""
import json
import logging
import threading

import psycopg
from psycopg.types.json import Jsonb

from consume import connect
from publish import make_producer
from variants import common

PUBLISHER_DSN = common.role_dsn("inbox_publisher", "PUBLISHER_DSN")

log = logging.getLogger("relay")

# What the lab runs of this file (lab/registry.py reads it without importing the module).
VARIANTS = {
    "kafka-relay": {"label": "kafka-relay: the outbox relay to Kafka, at least once", "kind": "producer",
                    "crash_points": ["acked"]},
}
ACK_TIMEOUT_S = 30.0
PUBLISHED_LOG = "published %d events, through %s"  # the batch's size, its last event ID


class RelayFailed(Exception):
    """The broker did not acknowledge every row of a batch: none of them is marked published."""


def write_event(conn: psycopg.Connection, event_id: str, topic: str, key: str, event: dict) -> None:
    """The application's half, inside its own transaction: the event beside the change."""
    conn.execute("INSERT INTO events_outbox (event_id, topic, key, payload) VALUES (%s, %s, %s, %s)",
                 (event_id, topic, key, Jsonb(event)))


def relay_once(conn: psycopg.Connection, producer, batch: int, after_ack=None) -> int:
    """Publish up to `batch` unpublished rows, in id order; how many were published.

    The rows stay locked (and unpublished) until every acknowledgement is in; a failure
    rolls the claim back, and the rows are tried again, some of them perhaps a second time.
    `after_ack(event_ids)` runs between the acknowledgements and the mark: the lab's crash point.
    """
    with conn.transaction():
        rows = conn.execute("SELECT id, event_id, topic, key, payload FROM events_outbox "
                            "WHERE published_at IS NULL ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED",
                            (batch,)).fetchall()
        if not rows:
            return 0
        outcomes = []
        for _, event_id, topic, key, payload in rows:
            producer.produce(topic, key=key.encode(), value=json.dumps(payload).encode(),
                             headers=[("event_id", event_id.encode())],
                             on_delivery=lambda err, _msg: outcomes.append(err))
        producer.flush(ACK_TIMEOUT_S)
        failed = [err for err in outcomes if err is not None]
        if len(outcomes) < len(rows) or failed:
            raise RelayFailed(f"{len(rows) - len(outcomes) + len(failed)} of {len(rows)} sends not acknowledged"
                              + (f", first: {failed[0]}" if failed else f" within {ACK_TIMEOUT_S:g}s"))
        if after_ack is not None:
            after_ack([row[1] for row in rows])
        conn.execute("UPDATE events_outbox SET published_at = clock_timestamp() WHERE id = ANY(%s)",
                     ([row[0] for row in rows],))
    log.info(PUBLISHED_LOG, len(rows), rows[-1][1])
    return len(rows)


def run(dsn: str = PUBLISHER_DSN, stop: threading.Event | None = None, batch: int = 100, idle_s: float = 0.2,
        after_ack=None, **producer_overrides) -> None:
    """Relay until `stop` is set, resting `idle_s` whenever the outbox is empty; a batch the
    broker did not acknowledge is logged and tried again after the rest."""
    producer = make_producer(**producer_overrides)
    stop = stop or threading.Event()
    with connect(dsn) as conn:
        while not stop.is_set():
            try:
                if relay_once(conn, producer, batch, after_ack) == 0:
                    stop.wait(idle_s)
            except RelayFailed as e:
                log.warning("relay: %s; trying again", e)
                stop.wait(idle_s)


def run_worker(lab) -> None:
    """kafka-relay, as the lab runs it: a planted crash after the broker acknowledged an
    event and before the relay marked it published, once for every --crash-every-th event."""
    chosen = lab.once_every(lab.args.crash_every, "planted_crashes")

    def after_ack(event_ids):
        lab.first_effect(event_ids[0])
        for event_id in event_ids:
            if chosen(event_id):
                lab.crash_at("acked", event_id)

    import consume  # CONSUMER_DSN, which for this worker is the publisher's (harness)

    run(consume.DSN, lab.stop, batch=lab.args.batch, after_ack=after_ack, **lab.producer_overrides)


def main() -> None:
    parser = common.Parser(description="Publish events_outbox to Kafka, at least once.")
    parser.add_argument("--batch", type=int, default=100, help="rows per claim")
    args = parser.parse_args()
    common.at_least(parser, args, 1, "batch")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    run(batch=args.batch)


if __name__ == "__main__":
    main()
