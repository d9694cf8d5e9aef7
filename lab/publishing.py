"""Publishing for the lab: a producer that is ready before its first timed send, a batch
published and counted by acknowledgement, and a journaled publisher that resends across restarts.

Built on publish.py's make_producer and publish, so every record the lab sends is the post's.
"""
import itertools
import json
import sys
import time
from pathlib import Path

from confluent_kafka import Producer

from publish import make_producer, publish


def ready_producer(topic: str, timeout_s: float = 30.0, **overrides) -> Producer:
    """make_producer(), returned once its first send can leave at once: connected, with
    `topic`'s metadata, and (if idempotent) holding its producer ID. librdkafka asks for the
    ID in the background; here, in about half the starts, it got one only on a retry ~0.5 s
    after start (its statistics: idemp_state WaitTransport, then Assigned), and a paced
    publisher's first records waited that long in the client, latency no consumer caused."""
    assigned = []

    def statistics(text: str) -> None:
        if not assigned and json.loads(text).get("eos", {}).get("idemp_state") == "Assigned":
            assigned.append(True)

    producer = make_producer(**{"statistics.interval.ms": 50, "stats_cb": statistics, **overrides})
    producer.list_topics(topic, timeout=timeout_s)
    idempotent = str(overrides.get("enable.idempotence", True)).lower() not in ("false", "0")
    end = time.monotonic() + timeout_s
    while idempotent and not assigned:
        if time.monotonic() > end:
            raise RuntimeError(f"the producer had no producer ID from the broker within {timeout_s:g}s")
        producer.poll(0.01)
    return producer



def publish_acknowledged(producer: Producer, topic: str, events, timeout_s: float = 60.0, partitions=None) -> int:
    """Publish (event_id, event) pairs; return how many the broker acknowledged within the deadline.
    `partitions`, if given, names each pair's partition, in the same order."""
    acked = 0
    failures = []

    def delivered(err, _msg):
        nonlocal acked
        if err is None:
            acked += 1
        else:
            failures.append(err)

    sent = 0
    for (event_id, event), partition in zip(events, partitions or itertools.repeat(None), strict=False):
        for _ in range(120):
            try:
                publish(producer, topic, event_id, event, on_delivery=delivered, partition=partition)
                break
            except BufferError:  # local queue full: let deliveries drain it
                producer.poll(0.5)
        else:
            raise RuntimeError("the producer's local queue stayed full for 60 s: is the broker up?")
        sent += 1
        producer.poll(0)
    remaining = producer.flush(timeout_s)
    if failures:
        print(f"publish: {len(failures)} sends failed, first: {failures[0]}", file=sys.stderr)
    if remaining:
        print(f"publish: {remaining} sends still unacknowledged after {timeout_s:g}s", file=sys.stderr)
    return acked



def publish_journaled(producer: Producer, topic: str, events, journal: Path, rate: float = 0,
                      on_first_ack=None) -> int:
    """The application's own retry, across restarts: publish each (event_id, event) not yet
    in `journal` (one acknowledged ID per line), appending each ID as its acknowledgement
    arrives, at most `rate` sends a second (0: as fast as it goes). Whatever was sent but
    not yet journaled when the process died is sent again by the next one: same ID, new
    offset, and a new producer session that idempotence cannot match to the old one.
    Returns how many were acknowledged in this session."""
    done = set(journal.read_text().split()) if journal.exists() else set()
    acked = 0
    with open(journal, "a") as log:
        def delivered(err, event_id):
            nonlocal acked
            if err is None:
                log.write(event_id + "\n")
                log.flush()  # into the kernel: it survives a SIGKILL of this process
                acked += 1
                if acked == 1 and on_first_ack:
                    on_first_ack()

        started, sent = time.monotonic(), 0
        for event_id, event in events:
            if event_id in done:
                continue
            if rate:
                time.sleep(max(0.0, started + sent / rate - time.monotonic()))
            while True:
                try:
                    publish(producer, topic, event_id, event,
                            on_delivery=lambda err, _msg, event_id=event_id: delivered(err, event_id))
                    break
                except BufferError:
                    producer.poll(0.1)
            sent += 1
            producer.poll(0)
        while producer.flush(1.0):  # librdkafka's message.timeout.ms bounds this
            pass
    return acked
