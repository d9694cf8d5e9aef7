"""Why FastStream's AckPolicy.ACK can lose a message on a kill (M9): an asynchronous commit
of the *stored* offsets covers whatever the next poll hands out before the commit is sent.

Claim: `consumer.commit(asynchronous=True)` with no offsets (what FastStream's ack calls) does not
capture the offsets at the call: librdkafka's thread gathers the stored offsets when it builds the
request, and a poll() in between has already stored the next message's offset, so the commit lands
past a message whose handler has not run, and a kill during that handler loses it.
`commit(message=msg, asynchronous=True)` names the offset at the call and cannot.

Workload: a one-partition topic of 10 records; per trial a fresh group, one poll, the commit, at
once the next poll (FastStream's loop: ack, then getone), a second for the commit to land, and the
group's committed offset read back. Checker: how many trials committed offset 2, past the second
message, which no handler had seen.

Assumptions: the Kafka of the stack (stack.py) is up. No Postgres.

    python -m measurements.measure_async_commit --runs 5
"""
import sys
import time
import uuid

from confluent_kafka import Consumer, TopicPartition

from lab import cli, harness, results
from lab.settings import BROKERS
from publish import make_producer

VARIANTS = ("stored-offsets", "the-message")  # commit(asynchronous=True) / commit(message=msg, asynchronous=True)


def trial(topic: str, variant: str) -> int:
    """The committed offset after: poll one, commit, poll the next at once."""
    consumer = Consumer({"bootstrap.servers": BROKERS, "group.id": f"async-commit-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        first = harness.wait_until(lambda: consumer.poll(0.5), 30, "the first record")
        if variant == "stored-offsets":
            consumer.commit(asynchronous=True)  # FastStream's ack: every offset stored so far
        else:
            consumer.commit(message=first, asynchronous=True)  # this message's, fixed at the call
        consumer.poll(1.0)  # the next message, handed out while the commit is on its way
        time.sleep(1.0)
        return consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
    finally:
        consumer.close()


def run_once(variant: str, run: int, config: dict) -> dict:
    topic = harness.create_topic(f"async-commit.{uuid.uuid4().hex[:8]}")
    try:
        producer = make_producer()
        for _ in range(10):
            producer.produce(topic, value=b"{}")
        assert producer.flush(30) == 0
        offsets = [trial(topic, variant) for _ in range(config["trials"])]
    finally:
        harness.delete_topics(topic)
    return {"variant": variant, "run": run, "trials": len(offsets), "past_the_message": sum(o > 1 for o in offsets),
            "balances_exact": None,  # no balances: nothing is credited
            "offsets": offsets}


def summarise(runs: list[dict]) -> dict:
    return results.summarise_runs(runs, VARIANTS, totals=("trials", "past_the_message"))


def table(summary: dict) -> str:
    return results.text_table(["commit", "runs", "trials", "committed past the message in hand"],
                              [[v, s["runs"], s["totals"]["trials"], s["totals"]["past_the_message"]]
                               for v, s in summary.items()])


verdict_line = cli.verdict("{variant} run {run}: {past_the_message} of {trials} commits past the message in hand")


def main(argv=None) -> int:
    parser = cli.measurement("M9: an asynchronous commit of the stored offsets, then a poll.", None,
                             partitions=None, seed=False)
    parser.add_argument("--trials", type=int, default=20, help="trials per run, a fresh group each")
    args = parser.parse_args(argv)
    results.reader_paths(args, "async-commit.json")  # a reader's own file, unless --out names one
    cli.at_least(parser, args, 1, "runs", "trials")
    config = results.config_of(args, "out", "force")
    results.drive("measure_async_commit", args.out, config, [{"variant": v} for v in VARIANTS], run_once,
                  summarise, table, verdict_line, args.force, rotate=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
