"""FastStream's AckPolicy.ACK commits with commit(asynchronous=True), no offsets: librdkafka
gathers the stored offsets when it sends the request, after the next poll has stored the next
message's. Committing the message itself fixes the offset at the call (measure_async_commit)."""
import uuid

import pytest

from lab import harness
from measurements import measure_async_commit
from publish import make_producer


@pytest.fixture
def ten_records(kafka):
    topic = harness.create_topic(f"test.async-commit.{uuid.uuid4().hex[:8]}")
    producer = make_producer()
    for _ in range(10):
        producer.produce(topic, value=b"{}")
    assert producer.flush(30) == 0
    yield topic
    harness.delete_topics(topic)


def test_committing_the_message_never_goes_past_it(ten_records):
    assert [measure_async_commit.trial(ten_records, "the-message") for _ in range(10)] == [1] * 10


def test_committing_the_stored_offsets_then_polling_goes_past_the_message_in_hand(ten_records):
    # the control: the same schedule with FastStream's form of the commit
    offsets = [measure_async_commit.trial(ten_records, "stored-offsets") for _ in range(10)]
    assert 2 in offsets, offsets
