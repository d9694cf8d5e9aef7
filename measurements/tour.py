"""The inbox consumer end to end, in about a minute, on the real services.

Claim: with 100 of 1,000 credits published twice and three poison messages mixed in, the consumer
applies every credit exactly once, skips the 100 copies, parks the poison on the dead-letter topic,
and every balance is exact.

Assumptions: the stack is up (`make up`). The tour makes its own schema and topic (random suffix),
so it can be run again and again; it drops the schema at the end unless --keep.

    python -m measurements.tour
"""
import collections
import logging
import sys
import uuid

import consume
from lab import checker, cli, harness
from lab.publishing import publish_acknowledged
from lab.settings import ADMIN_DSN
from publish import demo_event, make_producer

POISON = [
    ("no event_id header", b'{"account_id": 1, "amount": 5}', []),
    ("value is not JSON", b"credit 5 to 1", [("event_id", b"poison-json")]),
    ("unknown account", b'{"account_id": 4242, "amount": 5}', [("event_id", b"poison-account")]),
]


def main(argv=None) -> int:
    parser = cli.Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--credits", type=int, default=1000)
    parser.add_argument("--republish", type=int, default=100)
    parser.add_argument("--keep", action="store_true", help="keep the schema and topics for a look")
    args = parser.parse_args(argv)
    if args.credits < 1 or not 0 <= args.republish <= args.credits:
        parser.error("need --credits >= 1 and 0 <= --republish <= --credits")

    schema, topic, group = harness.unique("tour"), f"tour.deposits.{uuid.uuid4().hex[:8]}", consume.CONSUMER_NAME
    dsn = harness.create_schema(schema)
    harness.create_topic(topic, partitions=6)
    events = [demo_event(n) for n in range(1, args.credits + 1)]
    copies = events[:args.republish]
    producer = make_producer()
    acked = publish_acknowledged(producer, topic, events + copies)
    for _, value, headers in POISON:
        producer.produce(topic, key=b"1", value=value, headers=headers)
    producer.flush(30)
    print(f"published {len(events)} credits to {topic}, {len(copies)} of them twice, and {len(POISON)} poison "
          f"messages ({acked} credits acknowledged)")

    said = collections.Counter()  # the consumer's log lines by the format consume.py logs them with: no text matched

    def tally(record) -> bool:
        said[record.msg] += 1
        return True  # counted, and let through (to no handler: the tour prints its own summary)

    consumer_log = logging.getLogger("consume")
    consumer_log.addHandler(logging.NullHandler())
    consumer_log.addFilter(tally)
    consumer_log.setLevel(logging.INFO)
    harness.drained_in_thread(lambda stop: consume.run(topic, group, dsn=dsn, stop=stop), group, topic, 120,
                              interval_s=0.5)

    published = dict(events)
    result = harness.effects(harness.scoped_dsn(schema, ADMIN_DSN))  # a consumer may not read its ledger
    verdict = checker.check(published, result["ledger"], result["balances"])
    expected = collections.Counter()
    for event in published.values():
        expected[event["account_id"]] += event["amount"]

    print("\naccount  balance  expected")
    for account in sorted(result["balances"])[:10]:
        mark = "" if result["balances"][account] == expected[account] else "  <- wrong"
        print(f"{account:>7}  {result['balances'][account]:>7}  {expected[account]:>8}{mark}")
    exact = sum(1 for a, b in result["balances"].items() if b == expected[a])
    print(f"    ...  ({exact} of {len(result['balances'])} accounts exact)")
    print(f"\nledger rows {verdict['ledger_rows']}, duplicates {verdict['duplicates']}, lost {verdict['lost']}")
    print(f"skipped duplicates {said[consume.SKIPPED_LOG]}, dead-lettered {said[consume.DEAD_LETTERED_LOG]} "
          f"(messages on {topic}.dlq: {harness.topic_size(topic + '.dlq')})")
    if not args.keep:
        harness.drop_schema(schema)
        harness.delete_topics(topic, topic + ".dlq")
    ok = verdict["duplicates"] == verdict["lost"] == 0 and verdict["balances_exact"]
    print("verdict: every credit applied exactly once" if ok else "verdict: FAILED, see above")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
