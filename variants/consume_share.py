"""b and c as members of a share group (KIP-932) instead of a consumer group: share-b, share-c.

Claim: in a share group each polled record is locked for the group's
share.record.lock.duration.ms; a handler that outlives the lock loses the record to another
member, which handles it too. The inbox (share-c) skips that second copy; share-b credits it
twice. Records are acknowledged one by one (explicit mode), after the DB commit, with the same
outcomes as the consumer-group loop: applied, skipped, or dead-lettered (durably) first.
"""
import consume
from publish import ensure_topic, make_producer
from variants import common

VARIANTS = {
    "share-b": {"label": "share-b: b in a share group (KIP-932)", "kind": "share"},
    "share-c": {"label": "share-c: c in a share group (KIP-932)", "kind": "share"},
}


def run_worker(lab) -> None:
    from confluent_kafka import ShareConsumer

    args = lab.args
    handle = consume.handle_once if args.variant == "share-c" else common.apply_without_inbox
    config = {"bootstrap.servers": consume.BROKERS, "group.id": args.group,
              # Each record is acknowledged by hand, after its transaction: none is settled unhandled.
              "share.acknowledgement.mode": "explicit"}
    if args.max_poll_records:
        # Fewer records per poll; the broker may still lock a whole producer batch at once.
        config["max.poll.records"] = args.max_poll_records
    consumer = ShareConsumer(config)
    ensure_topic(consume.dead_letter_topic(args.topic))
    dead_letters = make_producer()
    try:
        with consume.connect(consume.DSN) as conn:  # before joining the group: no records locked while it waits
            consumer.subscribe([args.topic])
            while not lab.stop.is_set():
                for msg in consumer.poll(0.5):
                    if msg.error():
                        lab.log.warning("consumer error: %s", msg.error())
                        continue
                    consume.process(conn, msg, dead_letters, handle=handle, apply=lab.apply)
                    consumer.acknowledge(msg)
                for tp, error in (consumer.commit_sync(30) or {}).items():
                    if error is not None:
                        lab.log.warning(lab.ACK_FAILED_LOG, error.args[0].name(), tp.topic, tp.partition)
    finally:
        consumer.close()
