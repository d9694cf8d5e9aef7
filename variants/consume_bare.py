"""p without its inbox (variant p-bare): what the claim costs at batch scale.

Claim: none about safety. p-bare is p with one thing taken out, the INSERT into
processed_messages and the join of every write to what it claimed; it credits whatever
it reads, so a batch read twice (after a crash, a rebalance, a lost commit reply) is
credited twice. It exists to be measured beside p in one invocation (measure_throughput.py
--variants p,p-bare), as the post's "about 7%" (c against b) is, one message at a time.
Never run it as a consumer.

Everything else is p's: the batch, its decoding and dead letters, the writes (accounts
locked by id and checked, then the ledger and the balances), one statement per batch in
autocommit, offsets committed after it.

Assumptions: consume_pipelined.py's.
"""
from variants import consume_pipelined

# What the lab runs of this file (lab/registry.py reads it without importing the module).
VARIANTS = {
    # never a consumer to run: the inbox's cost at batch scale, measured beside p
    "p-bare": {"label": "p-bare: p's statement without the claim (no inbox)",
               "reads": ["batch", "connections", "crash_after"],
               "setup": "variants.consume_pipelined:LEDGER_WITHOUT_FOREIGN_KEY"},  # p's schema
}

# p's statement, its claim replaced by every credit for a known account: the same writes.
CREDIT_ONLY = consume_pipelined.INPUT_AND_KNOWN + """, fresh AS MATERIALIZED (
    SELECT event_id, account_id, amount FROM input WHERE account_id IN (SELECT id FROM known)
)""" + consume_pipelined.WRITES


def credit_only(conn, events: dict) -> tuple[set, set]:
    """p's contract, (IDs applied now, IDs for unknown accounts), with nothing remembered."""
    return consume_pipelined.batch_statement(conn, CREDIT_ONLY, events)


def run_bare(topic: str, group: str, **options) -> None:
    consume_pipelined.run_pipelined(topic, group, claim=credit_only, **options)


def run_worker(lab) -> None:
    consume_pipelined.run_worker(lab, claim=credit_only)
