"""p-bare, p's statement without the claim: measured beside p to price the inbox at batch
scale, never run as a consumer. It must be p in everything but the inbox, so its cost is the
claim's and no more: the same dead letters, and without the claim a batch read twice is
credited twice, where p credits it once."""
import pytest
from helpers import every_kind_of_poison_is_parked

from variants import consume_bare, consume_pipelined

pytestmark = pytest.mark.usefixtures("services", "on_p_schema")  # p-bare runs on p's schema


def credits(ids, account=1, amount=10) -> dict:
    return {i: {"account_id": account, "amount": amount} for i in ids}


def ledger(conn) -> list[tuple]:
    return conn.execute("SELECT event_id, count(*) FROM ledger GROUP BY event_id ORDER BY 1").fetchall()


def test_without_the_claim_a_batch_read_twice_is_credited_twice(conn):
    batch = {**credits(["e1", "e2"]), "e3": {"account_id": 4242, "amount": 5}}
    for _ in range(2):
        assert consume_bare.credit_only(conn, batch) == ({"e1", "e2"}, {"e3"})
    assert ledger(conn) == [("e1", 2), ("e2", 2)]
    assert conn.execute("SELECT balance FROM accounts WHERE id = 1").fetchone()[0] == 40
    # the control: p's own statement, on the same batch twice, credits it once
    conn.execute("TRUNCATE ledger")
    for _ in range(2):
        consume_pipelined.claim_and_credit(conn, batch)
    assert ledger(conn) == [("e1", 1), ("e2", 1)]


def test_every_kind_of_poison_is_parked_with_p_s_reasons(topic, group, dsn, conn):
    every_kind_of_poison_is_parked(topic, group, dsn, conn, consume_bare.run_bare, inbox=False, batch=10)
