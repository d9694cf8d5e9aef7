"""The pipelined batched inbox (variant p): d's guarantee, with the database and the
client working at the same time, and one round trip per batch.

Claim: the same as consume_batched.py's. A batch is claimed, credited and committed by
one statement (data-modifying CTEs, in autocommit: the statement is the transaction),
and the next offset of each of its partitions is committed to Kafka only after that
statement has returned. Meanwhile the main thread fetches, decodes and validates the
next batch, so Kafka, Python and Postgres overlap instead of taking turns.

- Database threads (`connections`, one by default) take the batches in the order they were
  read; whatever order their statements end in, batches are finished (dead letters, then
  offsets) strictly in that order, so each partition's offsets move forward only, and
  never past a batch whose statement has not returned.
- A finished batch's offsets are not committed at once: every COMMIT_EVERY_S one commit
  carries each partition's newest, as much as a commit a batch said, for less of the
  broker's CPU (a crash replays up to that much more, which the inbox skips).
- At most `connections` + 1 batches are read and not yet finished; with that many in
  flight the main thread waits for the oldest to finish.
- Poison: what fails validation, and events for unknown accounts (the statement claims
  no inbox row for them and reports them), are dead-lettered, durably, before their
  batch's offsets are committed.
- Revoked partitions: the main thread waits until every batch in flight has committed,
  commits every finished batch's offsets, and only then lets the partitions go. Lost
  ones: the same wait, and the offsets not yet committed are dropped, never tried again
  (they are no longer ours to commit).
- If the database gives up for good (variants/common.Database), the consumer stops, and no
  offset passes the batch that failed.
- Lock order: inbox rows in ID order, then accounts in id order FOR NO KEY UPDATE before
  the ledger insert and the balance update touch them, as in consume_batched.py; so a p
  beside a d, or two p's, wait for each other and never deadlock.

What a message costs (issue #46; each step was measured beside the p before it, as p-lean)
is cut where the comments below say: the usual message decoded in one pass, consume.py's
checks for the rest (decode_event_id, Credit); FewerCollections; Batch.copies; `fresh`, `totals`,
and no rows back for what was applied (CLAIM_AND_CREDIT); the batch's arrays as text
literals (text_array, int_array); the plain INSERT (CLAIM_NEW_AND_CREDIT);
`checked` (WRITES); the ledger without its foreign key (LEDGER_WITHOUT_FOREIGN_KEY); the header
read in one unpacking (decode_event_id); each batch's offsets without a TopicPartition
(offsets_after); no copy of the batch's events for a statement that applies them all
(run_statement).

Assumptions: consume.py's, whose validation, dead letters and client config this shares;
the side effect is the credit (the statement carries it, so it cannot be swapped);
synchronous_commit stays on; of an event's fields only account_id and amount matter (and
the lab's seq, for its stall).

    python -m variants.consume_pipelined --batch 500
"""
import functools
import gc
import queue
import threading
import time
import weakref
from typing import Annotated

import msgspec
import psycopg
from confluent_kafka import Message, TopicPartition

from consume import CONSUMER_NAME, DSN, MAX_EVENT_ID_BYTES, checked_event_id, first_line, parse_event
from variants import common

# What the lab runs of this file (lab/registry.py reads it without importing the module).
VARIANTS = {
    "p": {"label": "p: pipelined batched inbox, one statement per batch",
          "reads": ["batch", "connections", "crash_after"], "setup": "LEDGER_WITHOUT_FOREIGN_KEY"},
}

# The ledger's foreign key, replaced for p (run once by the schema's owner: the consumer's role
# may not run DDL). The key checked each ledger row's account with a lookup and a KEY SHARE
# lock, row by row; p's statement already writes a ledger row only for an account it has just
# locked FOR NO KEY UPDATE, which a DELETE must wait for, and fails whole when an account went
# before it was locked (`checked`). What the key did besides, refusing to delete or renumber an
# account that has ledger rows, a trigger does, paid on such a change instead of on every
# credit. Idempotent, and it takes no lock when there is nothing to change: every worker start
# runs it, beside workers already crediting.
LEDGER_WITHOUT_FOREIGN_KEY = """
CREATE OR REPLACE FUNCTION refuse_orphaning_ledger_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM ledger WHERE account_id = OLD.id) THEN
        RAISE foreign_key_violation USING MESSAGE = format('account %s has ledger rows', OLD.id);
    END IF;
    RETURN CASE TG_OP WHEN 'DELETE' THEN OLD ELSE NEW END;
END $$;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = 'ledger'::regclass
               AND conname = 'ledger_account_id_fkey') THEN
        ALTER TABLE ledger DROP CONSTRAINT ledger_account_id_fkey;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'accounts'::regclass
                   AND tgname = 'accounts_keep_their_ledger') THEN
        CREATE TRIGGER accounts_keep_their_ledger BEFORE DELETE OR UPDATE OF id ON accounts
            FOR EACH ROW EXECUTE FUNCTION refuse_orphaning_ledger_rows();
    END IF;
END $$;
"""

# The statement in pieces, so that p-bare (consume_bare.py) is p's statement less the claim.
# The batch as rows, and which of its accounts exist. The arrays come as text (%t, array
# literals: text_array, int_array), which the server reads as fast as the binary form, and the
# client builds with a join instead of psycopg's dump of each element.
INPUT_AND_KNOWN = """
WITH input AS (
    SELECT * FROM unnest(%(ids)t::text[], %(accounts)t::int[], %(amounts)t::bigint[]) AS i(event_id, account_id, amount)
), known AS (
    SELECT id FROM accounts WHERE id = ANY(%(wanted)t::int[])
)"""
# The inbox rows for the known accounts' IDs, in ID order (the lock order starts here), and
# the credits they claimed, joined once: `fresh`, what the writes below apply. {skip_claimed}
# is ON CONFLICT DO NOTHING, or nothing (see claim_and_credit).
CLAIMED = """, claimed AS (
    INSERT INTO processed_messages (consumer, message_id)
    SELECT %(consumer)s, event_id FROM input WHERE account_id IN (SELECT id FROM known) ORDER BY event_id
    {skip_claimed}RETURNING message_id
), fresh AS MATERIALIZED (
    SELECT i.event_id, i.account_id, i.amount FROM input i JOIN claimed c ON c.message_id = i.event_id
)"""
# Why each CTE reads the one before it: Postgres runs a plain SELECT ... FOR UPDATE in WITH
# only when something reads it, and runs CTEs in the order their data is needed. `locked`
# needs all of `totals` (each account's sum, taken once), so all of `fresh`, so all of
# `claimed` (its sort reads every row before it locks any),
# and `checked` counts all of `locked`, which `ledgered` reads before it inserts a row, as
# does `credited` before it updates one: inbox rows, then accounts, then the writes.
# (Nothing reads the ledger back: the consumer's role may insert into it, not read it, and
# RETURNING would be a read.)
# `checked`: an account that `known` found and a DELETE removed before `locked` reached it
# is not locked (READ COMMITTED skips it), and p's ledger has no foreign key to refuse a row
# for it (LEDGER_WITHOUT_FOREIGN_KEY; a key would not catch it either when every account of
# the batch went so); so the statement fails whole when the counts differ, with a value error
# the planner cannot see coming, and p's one-event-at-a-time retry parks that event as an
# unknown account. The writes end with the first rows back:
# the unknown accounts' IDs, which the statement never claims.
WRITES = """, totals AS MATERIALIZED (
    SELECT account_id, sum(amount) AS total FROM fresh GROUP BY account_id
), locked AS (
    SELECT id FROM accounts WHERE id IN (SELECT account_id FROM totals) ORDER BY id FOR NO KEY UPDATE
), checked AS (
    SELECT CASE WHEN l.n = f.n THEN l.n
                ELSE ('an account was deleted during the statement: ' || (f.n - l.n))::int END AS n
    FROM (SELECT count(*) AS n FROM locked) AS l, (SELECT count(*) AS n FROM totals) AS f
), ledgered AS (
    INSERT INTO ledger (event_id, account_id, amount)
    SELECT event_id, account_id, amount FROM fresh WHERE (SELECT n FROM checked) > 0
), credited AS (
    UPDATE accounts SET balance = balance + t.total FROM totals AS t
    WHERE accounts.id = t.account_id AND (SELECT n FROM checked) > 0
)
SELECT event_id, false FROM input WHERE account_id NOT IN (SELECT id FROM known)
"""
# Rows come back only for the IDs not applied: false for an unknown account, true for an ID
# some earlier statement claimed.
CLAIM_AND_CREDIT = INPUT_AND_KNOWN + CLAIMED.format(skip_claimed="ON CONFLICT DO NOTHING ") + WRITES + """UNION ALL
SELECT event_id, true FROM input
WHERE account_id IN (SELECT id FROM known) AND event_id NOT IN (SELECT message_id FROM claimed)
"""
# The same statement for a batch of IDs none claimed before, as nearly every batch is: a plain
# INSERT, which fails whole, claiming and crediting nothing, on the first ID that was (a
# unique_violation of the inbox's key, from a row committed before, or one whose transaction
# this statement waited for). It spares each row what ON CONFLICT pays to insert it
# speculatively: a probe of the key before the insert, and a second WAL record to confirm it.
CLAIM_NEW_AND_CREDIT = INPUT_AND_KNOWN + CLAIMED.format(skip_claimed="") + WRITES


class Credit(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A credit as consume.parse_event accepts it, read as p reads its dict (event["amount"]).
    Any other field sends the message down consume.py's path: msgspec takes some values json
    does not (invalid UTF-8 in a string, an integer of thousands of digits), and json judges."""
    account_id: Annotated[int, msgspec.Meta(ge=1, le=2**31 - 1)]
    amount: Annotated[int, msgspec.Meta(ge=1, le=2**53)]
    # Not the credit's: the lab's publishers number their events, and its stall picks every
    # N-th by event.get("seq", 0), as from consume.py's dict (a missing seq reads as 0 in
    # both). A seq that is not an integer sends the message down consume.py's path.
    seq: int = 0

    def __getitem__(self, name: str) -> int:
        return getattr(self, name)

    def get(self, name: str, default=None):
        return getattr(self, name, default)


CREDIT = msgspec.json.Decoder(Credit)


def decode_event_id(msg: Message) -> str:
    """The one event_id header, in one pass; anything unusual gets consume.py's checks and reasons.
    The usual header costs one unpacking and one test: no headers, or more than one, or a value
    of None fails the unpacking or len() (TypeError, ValueError), as bad UTF-8 fails decode()."""
    try:
        ((key, raw),) = msg.headers()
        if key == "event_id" and 0 < len(raw) <= MAX_EVENT_ID_BYTES and 0 not in raw:
            return raw.decode()
    except (TypeError, ValueError):
        pass
    return checked_event_id(msg)


def decode_credit(value: bytes | None):
    """A Credit, or consume.parse_event's verdict on anything msgspec did not take."""
    try:
        return CREDIT.decode(value)
    except Exception:  # noqa: BLE001 - refused, no value at all, or nested past its recursion limit
        return parse_event(value)


class FewerCollections:
    """Python's cycle collector, by default, runs after every 700 new container objects, and a
    batch in flight (messages, their headers, its events) outlives several of those runs, so it
    is scanned again and again, and promoted to be scanned by the full collections too. A
    batch's objects hold no cycles; reference counting frees them once it is finished. While
    any p runs in the process, collections come after 50,000 (Python 3.11's counters), and
    what was built before (modules, clients) is never scanned again (gc.freeze)."""

    THRESHOLDS = (50_000, 20, 20)

    def __init__(self):
        self.lock, self.running, self.saved = threading.Lock(), 0, gc.get_threshold()

    def __enter__(self):
        with self.lock:
            if not self.running:
                self.saved = gc.get_threshold()
                gc.freeze()
                gc.set_threshold(*self.THRESHOLDS)
            self.running += 1

    def __exit__(self, *_):
        with self.lock:
            self.running -= 1
            if not self.running:  # the last p out puts the collector back
                gc.set_threshold(*self.saved)
                gc.unfreeze()


FEWER_COLLECTIONS = FewerCollections()


class Batch:
    """Messages read together, decoded (with the verdicts of consume.py's checks): the events to
    claim (first copy of each ID), and the poison."""

    def __init__(self, messages: list[Message]):
        self.messages = messages
        # each valid message, its ID and event, in order; (message, reason) for the poison
        self.ids_of, self.poison = common.decoded(messages, decode_event_id, decode_credit)
        self.events: dict[str, Credit | dict] = {}
        for _, event_id, event in self.ids_of:
            self.events.setdefault(event_id, event)
        self.applied: set[str] = set()
        self.bad: dict[int, str] = {}  # id() of a copy the statement could not apply -> why

    @functools.cached_property
    def copies(self) -> dict[str, list]:
        """Every copy of each ID, in order: needed only when a copy could not be applied, so
        built then, not for every batch."""
        copies: dict[str, list] = {}
        for _, event_id, event in self.ids_of:
            copies.setdefault(event_id, []).append(event)
        return copies


def text_array(values: list[str]) -> str:
    """A text[] literal: every element quoted, and a quote or backslash in one escaped (an
    event ID may hold any character but NUL)."""
    if '"' in (joined := "".join(values)) or "\\" in joined:
        values = [v.replace("\\", "\\\\").replace('"', '\\"') for v in values]
    return '{"' + '","'.join(values) + '"}'


def int_array(values: list[int]) -> str:
    """An int[] or bigint[] literal (the values are ints: Credit's, or consume.parse_event's)."""
    return "{" + ",".join(map(str, values)) + "}"


def batch_statement(conn: psycopg.Connection, statement: str, events: dict, **params) -> tuple[set[str], set[str]]:
    """One of the batch statements (p's, p-bare's), given the events by ID; they answer only for
    what they did not apply, true for an ID claimed before, false for an unknown account:
    (IDs applied now, IDs for unknown accounts)."""
    if not events:
        return set(), set()
    ids, accounts, amounts = sorted(events), [], []
    for event_id in ids:
        event = events[event_id]
        if type(event) is Credit:  # the usual case: attributes, without Credit.__getitem__'s call
            accounts.append(event.account_id)
            amounts.append(event.amount)
        else:
            accounts.append(event["account_id"])
            amounts.append(event["amount"])
    rows = conn.execute(statement, {"ids": text_array(ids), "accounts": int_array(accounts),
                                    "amounts": int_array(amounts), "wanted": int_array(sorted(set(accounts))),
                                    **params}, binary=True).fetchall()
    return set(events).difference(i for i, _ in rows), {i for i, seen in rows if not seen}


# The connections whose last batch held an ID claimed before: a replay (after a crash, a
# rebalance, a reset of offsets) comes in runs of such batches, each of which would fail as
# CLAIM_NEW_AND_CREDIT first, so they go straight to CLAIM_AND_CREDIT until one holds none.
REPLAYING: "weakref.WeakSet[psycopg.Connection]" = weakref.WeakSet()


def claim_and_credit(conn: psycopg.Connection, events: dict, consumer: str = CONSUMER_NAME) -> tuple[set, set]:
    """The whole batch in one statement (`conn` in autocommit: it is the transaction): (IDs
    applied now, IDs for unknown accounts). CLAIM_NEW_AND_CREDIT, then CLAIM_AND_CREDIT if it
    failed; CLAIM_AND_CREDIT alone while the connection is replaying.

    Any unique violation sends the batch to CLAIM_AND_CREDIT, whatever the index is called (a
    partitioned inbox names its partitions' keys): ON CONFLICT DO NOTHING, with no target,
    covers every unique index of the inbox, and a violation anywhere else (a unique index
    someone put on the ledger) is raised again by that second run, as the database refusing
    the batch's values."""
    if conn not in REPLAYING:
        try:
            return batch_statement(conn, CLAIM_NEW_AND_CREDIT, events, consumer=consumer)
        except psycopg.errors.UniqueViolation:
            REPLAYING.add(conn)
    applied, unknown = batch_statement(conn, CLAIM_AND_CREDIT, events, consumer=consumer)
    if len(applied) + len(unknown) == len(events):  # nothing in it was claimed before
        REPLAYING.discard(conn)
    return applied, unknown


def claim_and_credit_each(conn: psycopg.Connection, events: dict, claim=claim_and_credit) -> tuple[set, set, dict]:
    """claim(conn, events) (p's claim_and_credit, or p-bare's), and if the server refused the batch's
    values, each event in a statement of its own: (applied, unknown accounts' IDs, {refused ID: why})."""
    try:
        return (*claim(conn, events), {})
    except common.REFUSED:
        applied, rejected, refused = set(), set(), {}
        for event_id, event in events.items():
            try:
                one_applied, one_rejected = claim(conn, {event_id: event})
            except common.REFUSED as e:
                refused[event_id] = f"the database refused it: {first_line(e)}"
                continue
            applied |= one_applied
            rejected |= one_rejected
        return applied, rejected, refused


def run_statement(conn: psycopg.Connection, batch: Batch, work=None, claim=claim_and_credit) -> Batch:
    """The batch's statement. A copy that could not be applied (an unknown account, a value the
    server refused) is marked bad, and the next copy of its ID, if any, gets a statement of its own."""
    if work is not None:
        work(batch.events)  # the lab's handler time (a sleep, a stall), outside the statement
    batch.applied, batch.bad = set(), {}
    pending, tried = batch.events, None  # the usual batch: one statement applies all it holds
    while pending:
        applied, rejected, refused = claim_and_credit_each(conn, pending, claim)
        batch.applied = batch.applied | applied if batch.applied else applied
        if not rejected and not refused:
            break
        tried = tried or dict.fromkeys(batch.events, 0)
        bad = {**{i: f"unknown account {pending[i]['account_id']}" for i in rejected}, **refused}
        for event_id, reason in bad.items():
            batch.bad[id(pending[event_id])] = reason
            tried[event_id] += 1
        pending = {i: batch.copies[i][tried[i]] for i in bad if tried[i] < len(batch.copies[i])}
    return batch


def finish(batch: Batch, dead_letters) -> None:
    """After the statement: log skips and dead-letter the poison durably; then the batch's
    offsets may be committed."""
    common.settle(batch.ids_of, batch.applied, batch.bad, batch.poison, dead_letters)


def offsets_after(messages: list[Message]) -> dict[tuple[str, int], int]:
    """common.next_offsets' offsets, as {(topic, partition): offset}, for less per message: the
    last message of a partition in the batch is taken, not the highest. They are the same
    message, since a partition's messages come in offset order; were a partition ever read
    again from an earlier offset within one batch, the later, lower offset is the one to
    commit: it replays more, which the inbox skips, and skips nothing."""
    last = {}
    for msg in messages:
        last[msg.topic(), msg.partition()] = msg.offset()
    return {key: offset + 1 for key, offset in last.items()}


# How long a finished batch's offsets may wait for the commit that carries them, with every
# batch's finished since. One commit a batch cost the broker more CPU per message than serving
# p's reads did (docs/throughput.md); Kafka's own auto-commit waits 5 s.
COMMIT_EVERY_S = 0.2


class Pipeline:
    """The database threads, one connection each, and the main thread's view of what is in flight.

    Batches go to whichever thread is free, so with two connections one batch's statement
    can run while the last one's commit waits for its WAL flush; they come back finished in
    the order they were read, whatever order the statements ended in."""

    def __init__(self, dbs: list, work=None, after_db_commit=None, claim=claim_and_credit):
        self.dbs, self.work, self.after_db_commit = dbs, work, after_db_commit
        self.db = dbs[0]  # consuming()'s; it and self.thread are what measurements/profile_p.py watches
        self.statement = functools.partial(run_statement, claim=claim)
        self.to_db: queue.Queue = queue.Queue()
        self.done: queue.Queue = queue.Queue()
        self.in_flight = 0
        self.sent = self.finished = 0  # sequence numbers: batches read, batches finished in order
        self.early: dict[int, Batch] = {}  # committed, waiting for an earlier batch to finish
        self.unsent: dict[tuple[str, int], int] = {}  # (topic, partition): the next offset, finished, not committed
        self.committed_at = time.monotonic()
        # What a database thread failed with. After it nothing more is finished or committed: the
        # batches still in flight replay, and a revocation on the way out must not wait for them.
        self.failed: BaseException | None = None
        self.threads = [threading.Thread(target=self._run, args=(db,), daemon=True) for db in dbs]
        self.thread = self.threads[0]
        for thread in self.threads:
            thread.start()

    def _run(self, db) -> None:
        while (item := self.to_db.get()) is not None:
            seq, batch = item
            try:
                db.run(self.statement, batch, self.work)
            except BaseException as e:  # noqa: BLE001 - the main thread stops on it
                self.done.put((seq, e))
                return
            if self.after_db_commit is not None:
                self.after_db_commit(batch.messages, {"applied": batch.applied})
            self.done.put((seq, batch))

    def submit(self, batch: Batch) -> None:
        self.in_flight += 1
        self.to_db.put((self.sent, batch))
        self.sent += 1

    def collect(self, dead_letters, wait_s: float = 0.0) -> None:
        """Finish, in the order they were read, the batches whose statements have returned, and
        keep their offsets for the next commit; raise what a database thread failed with."""
        deadline = time.monotonic() + wait_s
        while self.in_flight and self.failed is None:
            try:
                seq, item = self.done.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return
            if isinstance(item, BaseException):
                self.failed = item
                raise item
            self.early[seq] = item
            while self.finished in self.early:  # never an offset past a batch still in a statement
                self.in_flight -= 1
                batch = self.early.pop(self.finished)
                finish(batch, dead_letters)
                self.unsent.update(offsets_after(batch.messages))
                self.finished += 1
            deadline = time.monotonic()  # after the first, take only what is already there

    def commit(self, consumer) -> bool:
        """Commit every finished batch's offsets in one request; a refusal keeps them for the next try."""
        self.committed_at = time.monotonic()
        if common.commit_offsets(consumer, [TopicPartition(t, p, o) for (t, p), o in self.unsent.items()]):
            self.unsent.clear()
            return True
        return False

    def commit_due(self, consumer) -> None:
        if self.unsent and time.monotonic() - self.committed_at >= COMMIT_EVERY_S:
            self.commit(consumer)

    def drain(self, dead_letters, consumer, commit: bool) -> None:
        """Wait until nothing is in flight (a rebalance, the end), or a database thread has failed;
        then commit what finished (`commit`), or drop it: the partitions are going, and an
        offset not committed now is for their next owner to replay, never for this one to try later."""
        try:
            while self.in_flight and self.failed is None:
                self.collect(dead_letters, wait_s=1.0)
        finally:  # what finished is durable, whatever a later batch failed with
            if commit and self.unsent:
                self.commit(consumer)
            self.unsent.clear()

    def close(self) -> None:
        self.failed = self.failed or RuntimeError("the pipeline is closed")  # nothing more to wait for
        for _ in self.threads:
            self.to_db.put(None)
        for db in self.dbs[1:]:  # the first is consuming()'s, which closes it
            db.close()


def run_pipelined(topic: str, group: str, *, batch: int = 500, connections: int = 1, work=None, dsn: str = DSN,
                  stop: threading.Event | None = None, after_db_commit=None, claim=claim_and_credit,
                  **overrides) -> None:
    """Consume `topic` as `group`, a batch at a time, the next batch read while the last commits;
    `connections` statements at once at most.
    `work(events)` runs before each batch's statement (the lab's handler time);
    `after_db_commit(messages, outcome)` runs between the statement and the offset commit
    (outcome["applied"]: the IDs the statement applied);
    `claim(conn, events)`: the statement's function (p-bare's, in consume_bare.py)."""
    flow = None

    def let_go(commit: bool, consumer, partitions) -> None:  # a revoked partition commits, a lost one cannot
        if flow is not None:
            flow.drain(dead_letters, consumer, commit)

    with FEWER_COLLECTIONS, common.consuming(topic, group, dsn, overrides, on_revoke=functools.partial(let_go, True),
                                             on_lost=functools.partial(let_go, False)) as (consumer, dead_letters, db):
        flow = Pipeline([db, *(common.Database(dsn) for _ in range(connections - 1))], work, after_db_commit, claim)
        try:
            while stop is None or not stop.is_set():
                flow.collect(dead_letters)
                flow.commit_due(consumer)
                if flow.in_flight >= connections + 1:
                    # No poll() here to serve callbacks: it could hand over a message, and one read
                    # past and not handled is one a later commit would skip. librdkafka heartbeats
                    # on its own thread; the statement in flight is the longest this waits.
                    flow.collect(dead_letters, wait_s=0.05)
                    continue
                if messages := common.fetched(consumer, batch):
                    flow.submit(Batch(messages))
            flow.drain(dead_letters, consumer, commit=True)
        finally:
            flow.close()


def run_worker(lab, claim=claim_and_credit) -> None:
    """p, as the lab runs it: the handler's work for each batch before its statement; a
    statement that applied something is the planted crash point. `claim`: the statement's
    function (p-bare's, in consume_bare.py)."""
    args = lab.args

    def after_statement(msgs, outcome) -> None:
        if applied := outcome["applied"]:  # the IDs the batch applied, not every message's header read again
            applied = list(applied)
            lab.first_effect(applied[0])
            lab.committed(applied)

    run_pipelined(args.topic, args.group, batch=args.batch, connections=args.connections,
                  work=lambda events: lab.work(events.items()), stop=lab.stop, after_db_commit=after_statement,
                  claim=claim, **lab.overrides)


if __name__ == "__main__":
    common.run_command(run_pipelined, "Consume credits through the pipelined batched inbox.",
                       batch="messages per statement", connections="statements at once, one connection each")
