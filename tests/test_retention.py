"""retention.sql against a real PostgreSQL: the batched delete removes only IDs past the window."""
import re
from pathlib import Path

import pytest

RETENTION = Path(__file__).resolve().parent.parent / "retention.sql"


def retention_statements() -> list[str]:
    text = "\n".join(line for line in RETENTION.read_text().splitlines() if not line.lstrip().startswith("--"))
    return [s.strip() for s in re.split(r";\s*(?:\n|$)", text) if s.strip()]


@pytest.mark.post
def test_retention_deletes_only_expired_rows_in_batches(conn):
    create_index, delete_batch = retention_statements()
    conn.execute(create_index)
    conn.execute("INSERT INTO processed_messages (consumer, message_id, processed_at) "
                 "SELECT 'wallet-credits', 'old-' || n, now() - interval '15 days' FROM generate_series(1, 25000) n")
    conn.execute("INSERT INTO processed_messages (consumer, message_id, processed_at) "
                 "SELECT 'wallet-credits', 'recent-' || n, now() - interval '13 days' FROM generate_series(1, 100) n")
    batches = []
    for _ in range(10):  # bounded: the loop must reach 0 long before this
        deleted = conn.execute(delete_batch).rowcount
        batches.append(deleted)
        if deleted == 0:
            break
    assert batches == [10000, 10000, 5000, 0]
    left = conn.execute("SELECT count(*), count(*) FILTER (WHERE message_id LIKE 'recent-%') "
                        "FROM processed_messages").fetchone()
    assert left == (100, 100)
