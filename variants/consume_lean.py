"""p, leaner (variant p-lean): the pipelined batched inbox with less CPU per message.

Claim: the same as consume_pipelined.py's, at a lower cost per message. Each change is
measured against p side by side (measure_throughput.py --variants p,p-lean); p itself is
left as it was, so its figures stay measured by the code the repository holds. This
module swaps parts of p while it runs (swapped()):

- Decoding. The common case, one `event_id` header and a well-formed credit, is read by a
  single pass over the headers and a msgspec decoder with the same bounds as
  consume.parse_event. Anything the fast path does not accept goes through consume.py's
  own checks, so a bad message is parked with exactly the reason p gives it, and a value
  msgspec refuses but json accepts (a UTF-8 byte-order mark) is still applied.
- The statement computes the claimed rows' join once (`fresh`) instead of three times,
  and returns a row only for what was not applied now (an unknown account, an ID seen
  before), not one per credit: a batch that is all new sends nothing back.
- Python's cycle collector runs less often (GC_THRESHOLDS), and never over what was built
  before the loop started.
- The ledger without its foreign key (LEDGER_WITHOUT_FOREIGN_KEY, run by the schema's
  owner). The statement already guarantees what the key checked: it inserts a ledger row
  only for an account it has just found (`known`) and locked FOR NO KEY UPDATE, a lock a
  DELETE of that account must wait for. The key's other job, refusing to delete an account
  that has ledger rows, moves to a trigger on accounts, paid on a delete rather than on
  every credit. A credit to an unknown account still goes to the DLQ (the statement never
  claims it), and p-lean is as safe on a ledger that keeps its key, only slower.

Assumptions: consume_pipelined.py's; of an event's fields only account_id and amount
matter (and the lab's seq, for its stall); the others are not kept.

    python -m variants.consume_lean --batch 500
"""
import contextlib
import functools
import gc
from typing import Annotated

import msgspec
from confluent_kafka import Message

from consume import MAX_EVENT_ID_BYTES, checked_event_id, parse_event
from variants import consume_pipelined

# What the lab runs of this file (lab/registry.py reads it without importing the module).
VARIANTS = {
    "p-lean-py": {"label": "p-lean-py: p, decoding by msgspec, fewer cycle collections", "groups": ["lean"],
                  "reads": ["batch", "crash_after"]},
    "p-lean-sql": {"label": "p-lean-sql: and the join once, rows back only for what was not applied",
                   "groups": ["lean"], "reads": ["batch", "crash_after"]},
    # the statement already guarantees what the ledger's foreign key checked
    "p-lean": {"label": "p-lean: and the ledger without its foreign key", "groups": ["lean"],
               "reads": ["batch", "connections", "crash_after"], "setup": "LEDGER_WITHOUT_FOREIGN_KEY"},
}

# Run once by the schema's owner (the consumer's role may not run DDL).
LEDGER_WITHOUT_FOREIGN_KEY = """
ALTER TABLE ledger DROP CONSTRAINT IF EXISTS ledger_account_id_fkey;
CREATE OR REPLACE FUNCTION refuse_deleting_credited_account() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM ledger WHERE account_id = OLD.id) THEN
        RAISE foreign_key_violation USING MESSAGE = format('account %s has ledger rows', OLD.id);
    END IF;
    RETURN OLD;
END $$;
CREATE OR REPLACE TRIGGER accounts_keep_credited BEFORE DELETE ON accounts
    FOR EACH ROW EXECUTE FUNCTION refuse_deleting_credited_account();
"""

# p's statement, in p's lock order (inbox rows by ID, then accounts by id, then the writes),
# with the claimed rows joined to their credits once. Rows come back only for the IDs not
# applied: false for an unknown account, true for an ID some earlier statement claimed.
# `checked` stands in for the ledger's foreign key: an account `known` found that a DELETE
# committed before `locked` reached it is not locked (READ COMMITTED skips it), and the
# ledger would get a row for it. Then the statement fails as a whole, with a value error the
# planner cannot see coming (it depends on the counts), so nothing is claimed, and p's
# one-event-at-a-time retry parks that event as an unknown account.
CLAIM_AND_CREDIT = consume_pipelined.INPUT_AND_KNOWN + consume_pipelined.CLAIMED + """, fresh AS MATERIALIZED (
    SELECT i.event_id, i.account_id, i.amount FROM input i JOIN claimed c ON c.message_id = i.event_id
), locked AS (
    SELECT id FROM accounts WHERE id IN (SELECT account_id FROM fresh) ORDER BY id FOR NO KEY UPDATE
), checked AS (
    SELECT CASE WHEN l.n = f.n THEN l.n
                ELSE ('an account was deleted during the statement: ' || (f.n - l.n))::int END AS n
    FROM (SELECT count(*) AS n FROM locked) AS l, (SELECT count(DISTINCT account_id) AS n FROM fresh) AS f
), ledgered AS (
    INSERT INTO ledger (event_id, account_id, amount)
    SELECT event_id, account_id, amount FROM fresh WHERE (SELECT n FROM checked) > 0
), credited AS (
    UPDATE accounts SET balance = balance + t.total
    FROM (SELECT account_id, sum(amount) AS total FROM fresh GROUP BY account_id) AS t
    WHERE accounts.id = t.account_id AND (SELECT n FROM checked) > 0
)
SELECT event_id, false FROM input WHERE account_id NOT IN (SELECT id FROM known)
UNION ALL
SELECT event_id, true FROM input
WHERE account_id IN (SELECT id FROM known) AND event_id NOT IN (SELECT message_id FROM claimed)
"""


class Credit(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A credit as consume.parse_event accepts it; read like p's dict (event["amount"]). Any
    other field sends the message down consume.py's path: msgspec takes some values json does
    not (invalid UTF-8 in a string, an integer of thousands of digits), and json is p's judge."""
    account_id: Annotated[int, msgspec.Meta(ge=1, le=2**31 - 1)]
    amount: Annotated[int, msgspec.Meta(ge=1, le=2**53)]
    # Not the credit's: the lab's publishers number their events, and M2's stall picks every
    # N-th by it, as it does from p's dict (a missing seq reads as 0 in both). A seq that is
    # not an integer sends the message down consume.py's path, which does not look at it.
    seq: int = 0

    def __getitem__(self, name: str) -> int:
        return getattr(self, name)

    def get(self, name: str, default=None):
        return getattr(self, name, default)


DECODE = msgspec.json.Decoder(Credit).decode

# Python's cycle collector, by default, runs after every 700 new container objects, and a
# batch in flight (messages, their headers, its dicts) outlives several of those runs, so it
# is scanned again and again, and promoted to be scanned by the full collections too. A
# batch's objects hold no cycles; they are freed by reference counting when it is finished.
# Collecting after 50,000 lets most of them die first. (Python 3.11's thresholds.)
GC_THRESHOLDS = (50_000, 20, 20)


def event_id_fast(msg: Message) -> str:
    """The one event_id header, in one pass; anything unusual gets consume.py's checks and reasons."""
    headers = msg.headers()
    if headers is not None and len(headers) == 1:
        key, raw = headers[0]
        if key == "event_id" and raw and len(raw) <= MAX_EVENT_ID_BYTES and b"\x00" not in raw:
            try:
                return raw.decode()
            except UnicodeDecodeError:
                pass
    return checked_event_id(msg)


def decode_fast(value: bytes | None):
    """A Credit, or consume.parse_event's verdict on anything msgspec did not take."""
    try:
        return DECODE(value)
    except Exception:  # noqa: BLE001 - refused, no value at all, or nested past its recursion limit
        return parse_event(value)


class Batch(consume_pipelined.Batch):
    """p's Batch, decoded by the fast path."""

    def __init__(self, messages: list[Message]):
        super().__init__(messages, event_id_fast, decode_fast)


def claim_and_credit(conn, events: dict, consumer: str = consume_pipelined.CONSUMER_NAME) -> tuple[set, set]:
    """p's contract: (IDs applied now, IDs for unknown accounts)."""
    if not events:
        return set(), set()
    rows = consume_pipelined.batch_statement(conn, CLAIM_AND_CREDIT, events, consumer=consumer)
    unknown = {i for i, seen in rows if not seen}
    return set(events).difference(i for i, _ in rows), unknown


# The steps, each measured against the one before (measure_throughput.py --variants
# p,p-lean-py,p-lean-sql,p-lean): what each swaps in. p-lean also runs on the ledger without
# its foreign key (its declaration's setup); the steps before it keep the key.
STEPS = {"p-lean-py": ("decoding",), "p-lean-sql": ("decoding", "statement"), "p-lean": ("decoding", "statement")}


@contextlib.contextmanager
def swapped(parts=("decoding", "statement")):
    """p's decoding and statement swapped for these while the block runs (consume_pipelined.swapped:
    one swap at a time). Kept apart from p until it pays, so that p's own figures stay measured by
    the code the repository holds; then it folds into p."""
    swaps = {"Batch": Batch} if "decoding" in parts else {}
    if "statement" in parts:
        swaps["claim_and_credit"] = claim_and_credit
    with consume_pipelined.swapped("p-lean", **swaps):
        thresholds = gc.get_threshold()
        if "decoding" in parts:
            gc.freeze()  # what the process built to get here (modules, clients) is never scanned again
            gc.set_threshold(*GC_THRESHOLDS)
        try:
            yield
        finally:
            gc.set_threshold(*thresholds)
            gc.unfreeze()


def run_lean(topic: str, group: str, parts=("decoding", "statement"), **options) -> None:
    """consume_pipelined.run_pipelined with the swaps: the same options, the same contract."""
    with swapped(parts):
        consume_pipelined.run_pipelined(topic, group, **options)


def run_worker(lab) -> None:
    """The lab's entry point: p's, with the swaps of the variant's step."""
    consume_pipelined.run_worker(lab, run=functools.partial(run_lean, parts=STEPS[lab.args.variant]))


def main() -> None:
    """p's command line (consume_pipelined.main: --topic, --group, --batch, --connections), run leaner."""
    with swapped():
        consume_pipelined.main()


if __name__ == "__main__":
    main()
