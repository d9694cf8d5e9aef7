"""Where the batched inbox's time goes: run_batched under cProfile, in this process.

Claim: once the per-message transaction and commit are gone, the loop's time is mostly the database
doing the set-based work, then decoding each message in Python; the client's own read is a small
share. Prints the top functions by own time, and writes them to --out.

Assumptions: the stack is up; a scratch schema and topic are made and dropped.

    python -m measurements.profile_d --events 50000 --batch 500
"""
import cProfile
import io
import pstats
import sys
import threading
import time
import uuid
from pathlib import Path

from lab import harness, profiling, results
from lab.settings import ADMIN_DSN
from variants import consume_batched


def main(args) -> int:
    schema = harness.unique("prof")
    dsn = harness.create_schema(schema)
    topic = harness.create_topic(f"prof.{uuid.uuid4().hex[:8]}", 6)
    try:
        harness.produce_events(topic, harness.make_events(args.events, "p"))
        stop = threading.Event()

        def stop_when_done():
            owner = harness.scoped_dsn(schema, ADMIN_DSN)  # a consumer may not read its ledger
            harness.wait_until(lambda: harness.ledger_count(owner) >= args.events, 600, "every credit applied", 0.2)
            stop.set()

        threading.Thread(target=stop_when_done, daemon=True).start()
        profile = cProfile.Profile()
        started = time.monotonic()
        profile.enable()
        consume_batched.run_batched(topic, harness.unique("prof"), dsn=dsn, stop=stop, batch=args.batch)
        profile.disable()
        wall = time.monotonic() - started
    finally:
        harness.drop_schema(schema)
        harness.delete_topics(topic, topic + ".dlq")
    text = io.StringIO()
    text.write(f"# python -m measurements.profile_d --events {args.events} --batch {args.batch}: "
               f"{wall:.1f} s wall under cProfile\n")
    text.write(f"# {results.provenance_line()}\n")
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(args.top)
    print(text.getvalue())
    if args.out:
        Path(args.out).write_text(text.getvalue())
    return 0


def parse_args(argv=None):
    return profiling.parse_args("Profile the batched inbox loop (variant d).", 50000, "profile-d.txt", argv, top=True)


if __name__ == "__main__":
    sys.exit(main(parse_args()))
