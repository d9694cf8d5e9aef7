"""The post's own commands after `make up`: `python publish.py N`, then `python consume.py`,
against the default database and topic, exactly as the post prints them (no flags, no env).

Run twice (or after a reader's own tries) the same demo IDs come again: the inbox skips them,
so the check holds however often the suite runs: each of evt-1..evt-N is credited exactly once."""
import subprocess
import sys

import psycopg
import pytest

from lab import harness
from lab.settings import ADMIN_DSN, ROOT

pytestmark = pytest.mark.xdist_group("shared")  # the default database, topic and group: one worker, in turn

COUNT = 60
TOPIC, GROUP = "consumer.deposits", "wallet-credits"  # consume.py's, as the post has them


def claimed(ids: list[str]) -> int:
    with psycopg.connect(ADMIN_DSN) as conn:
        return conn.execute("SELECT count(*) FROM processed_messages WHERE consumer = 'wallet-credits' "
                            "AND message_id = ANY(%s)", (ids,)).fetchone()[0]


@pytest.mark.usefixtures("services")
def test_publish_then_consume_as_the_post_prints_them():
    published = subprocess.run([sys.executable, "publish.py", str(COUNT)], cwd=ROOT, capture_output=True, text=True,
                               timeout=120)
    assert published.returncode == 0, published.stderr
    assert f"published {COUNT} of {COUNT} credits to consumer.deposits" in published.stdout

    ids = [f"evt-{n}" for n in range(1, COUNT + 1)]
    consumer = subprocess.Popen([sys.executable, "consume.py"], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
    try:
        # Caught up: its group committed past every record, the fresh copies included (a rerun's
        # copies are skipped, and their offsets committed all the same).
        harness.wait_until(lambda: consumer.poll() is not None or harness.lag(GROUP, TOPIC) == 0, 120,
                           "consume.py committing past every record of consumer.deposits")
        assert consumer.poll() is None, f"consume.py exited with {consumer.returncode}"
    finally:
        consumer.terminate()  # SIGTERM, like Ctrl-C: the loop ends after the message in hand
        output = consumer.communicate(timeout=60)[0]
    assert consumer.returncode == 0, f"consume.py did not stop cleanly on SIGTERM:\n{output[-3000:]}"
    assert claimed(ids) == COUNT, output[-3000:]
    with psycopg.connect(ADMIN_DSN) as conn:
        credited = conn.execute("SELECT count(*), count(DISTINCT event_id) FROM ledger WHERE event_id = ANY(%s)",
                                (ids,)).fetchone()
    assert credited == (COUNT, COUNT), "each demo credit once in the ledger, however often it was published"
