"""Side effects outside the database: the post's plan, built.

Claim: when the effect is a call to another service, no transaction covers the
call and its record together, so the inbox row goes through two states. It is
inserted as `processing` with a lease (`locked_until`), the provider is called,
and the row is marked `done`; only then is the offset committed. A redelivery
then finds one of four things:

    done            the call landed and was recorded: skip it
    a live lease    another handler is on it: wait, bounded, and look again
    expired lease   a handler died between its claim and its mark-done, so
                    nobody knows whether the call landed. The policy decides:
      keys            call again with the same Idempotency-Key; the provider's
                      dedup makes the second call a replay
      lookup          ask the provider whether a charge for this event landed;
                      call only if none did
      retry           neither keys nor lookup: call again, and risk a duplicate
      skip            neither: mark it done unseen, and risk a loss

Or, inbox then outbox: the inbox transaction also writes an outbox row, and a
relay (FOR UPDATE SKIP LOCKED, safe on several workers) makes the call with the
same key and marks the row sent.

Locks, reviewed as the batched inbox's were (a wait in a cycle is a deadlock): a claim
and a mark-done each lock one external_effects row, in a statement of its own; the
outbox path locks the inbox row, then the outbox row of the same event, one of each;
the relay locks its rows with SKIP LOCKED and so never waits on another relay. No
transaction here holds one lock while it waits for a second that another could hold
first, and measure_race.py runs both paths with three consumers (and three relays).

A charge the provider refuses (a 4xx: it will refuse it every time) is poison: the
consumer dead-letters its message with the provider's answer, the relay marks its
outbox row sent with the refusal in its payload. No answer, or a 5xx, is retried.

Assumptions: schema.sql's external_effects and outbox tables; a provider that
takes an Idempotency-Key for the keys policy and the outbox (provider.py).
"""
import logging
import time

import psycopg
from psycopg.types.json import Jsonb

from consume import CONSUMER_NAME, PoisonMessage, connect, handle_once
from variants.provider import Client, ProviderError

log = logging.getLogger("consume_external")

# What the lab runs of this file (lab/registry.py reads it without importing the module).
VARIANTS = {
    "ext": {"label": "ext: an HTTP charge under a lease, then the inbox", "kind": "external",
            "reads": ["policy", "lease_s", "provider_url"], "needs": ["provider_url"]},
    "outbox": {"label": "outbox: the inbox transaction writes an outbox row; a relay makes the call",
               "kind": "external", "reads": ["provider_url"]},
    "relay": {"label": "relay: the outbox relay, calling provider.py with each row's key", "kind": "relay",
              "reads": ["provider_url"], "needs": ["provider_url"]},
}
LEASE_TAKEN_OVER_LOG = "lease taken over before its mark-done: %s"  # counted by the harnesses
REFUSED_LOG = "the provider refused the outbox row of %s: %s"  # the relay's dead letter


class LeaseHeld(Exception):
    """Another live handler holds this event's lease past our patience."""


class LeaseRunningOut(Exception):
    """Too little of our lease is left to call and record the call before another handler may take over."""


# The part of a lease kept back for the mark-done: a call must be answered (or given up) before it.
MARK_DONE_SHARE = 0.25


def effect_key(event_id: str, consumer: str = CONSUMER_NAME) -> str:
    """The Idempotency-Key: the same on every redelivery of the event, different per consumer."""
    return f"{consumer}:{event_id}"


def claim(conn: psycopg.Connection, event_id: str, lease_s: float, consumer: str = CONSUMER_NAME) -> tuple[str, int]:
    """Take the event's lease: ("fresh" | "expired" | "done" | "held", attempts).

    "expired" means an earlier attempt died holding the lease; `attempts` numbers
    this claim, so that mark_done can tell whether the lease is still ours.
    """
    with conn.transaction():
        row = conn.execute(
            "INSERT INTO external_effects AS e (consumer, message_id, state, locked_until) "
            "VALUES (%s, %s, 'processing', now() + %s * interval '1 second') "
            "ON CONFLICT (consumer, message_id) DO UPDATE "
            "SET locked_until = EXCLUDED.locked_until, attempts = e.attempts + 1, updated_at = now() "
            "WHERE e.state = 'processing' AND e.locked_until < now() RETURNING attempts",
            (consumer, event_id, lease_s)).fetchone()
        if row is not None:
            return ("fresh" if row[0] == 1 else "expired"), row[0]
        state, attempts = conn.execute("SELECT state, attempts FROM external_effects "
                                       "WHERE consumer = %s AND message_id = %s", (consumer, event_id)).fetchone()
    return ("done" if state == "done" else "held"), attempts


def mark_done(conn: psycopg.Connection, event_id: str, attempt: int, consumer: str = CONSUMER_NAME) -> bool:
    """Record the call; False if another handler took the lease over meanwhile (the call is made either way)."""
    done = conn.execute("UPDATE external_effects SET state = 'done', locked_until = NULL, updated_at = now() "
                        "WHERE consumer = %s AND message_id = %s AND state = 'processing' AND attempts = %s",
                        (consumer, event_id, attempt)).rowcount == 1
    if not done:
        log.warning(LEASE_TAKEN_OVER_LOG, event_id)
    return done


def handle_external(conn: psycopg.Connection, event_id: str, event: dict, apply=None, *, client: Client,
                    policy: str, lease_s: float = 10.0, before_call=None, after_call=None,
                    consumer: str = CONSUMER_NAME) -> bool:
    """handle_once for an effect behind an HTTP call; True if this call charged (or replayed a charge).

    Fits consume.run's `handle` slot (`apply` is unused: the call is the effect).
    `before_call(event_id)` runs between the claim and the call, `after_call(event_id)` between
    the provider's answer and the mark-done: the two places a crash hurts.

    The provider's calls get only what is left of the lease (less MARK_DONE_SHARE of it)
    as their timeout, so a handler that is alive never calls, or waits on a call, while
    another handler may have taken its lease; it raises LeaseRunningOut instead, and the
    message comes again.
    """
    patience = time.monotonic() + 2 * lease_s + 1
    # Read before the claim, whose now() is later: our lease ends no sooner than claimed_at + lease_s.
    claimed_at = time.monotonic()
    state, attempt = claim(conn, event_id, lease_s, consumer)
    while state == "held":
        if time.monotonic() > patience:
            raise LeaseHeld(f"{event_id} is still leased by another handler after {2 * lease_s + 1:g}s")
        time.sleep(0.2)
        claimed_at = time.monotonic()
        state, attempt = claim(conn, event_id, lease_s, consumer)
    if state == "done":
        return False  # consume.process logs the skip
    call_by = claimed_at + lease_s * (1 - MARK_DONE_SHARE)

    def time_left() -> float:
        left = call_by - time.monotonic()
        if left <= 0:
            raise LeaseRunningOut(f"{event_id}: the lease of {lease_s:g}s ran short before the call")
        return left

    if state == "expired":
        if policy == "lookup" and client.find(event_id, timeout_s=time_left()):
            log.info("found the earlier charge for %s: marking it done without calling", event_id)
            mark_done(conn, event_id, attempt, consumer)
            return False
        if policy == "skip":
            log.warning("gave up on %s: its earlier attempt may or may not have charged", event_id)
            mark_done(conn, event_id, attempt, consumer)
            return False
        log.info("retrying %s after an expired lease (%s)", event_id, policy)
    key = effect_key(event_id, consumer) if policy == "keys" else None
    if before_call is not None:
        before_call(event_id)
    try:
        client.charge(event_id, event["account_id"], event["amount"], key=key, timeout_s=time_left())
    except ProviderError as e:
        if not e.refused:
            raise  # no answer, or a 5xx: the message comes again, and so does the call
        # Refused: nothing was charged. Free the lease, so a replay from the DLQ starts at once.
        conn.execute("UPDATE external_effects SET locked_until = now(), updated_at = now() "
                     "WHERE consumer = %s AND message_id = %s AND attempts = %s", (consumer, event_id, attempt))
        raise PoisonMessage(f"the provider refused it: {e}") from None
    if after_call is not None:
        after_call(event_id)
    mark_done(conn, event_id, attempt, consumer)
    return True


# --- inbox, then outbox -------------------------------------------------------------

def enqueue_call(conn: psycopg.Connection, event_id: str, event: dict) -> None:
    """The `apply` for handle_once: the call becomes an outbox row, in the inbox's transaction."""
    conn.execute("INSERT INTO outbox (idempotency_key, payload) VALUES (%s, %s)",
                 (effect_key(event_id), Jsonb({"reference": event_id, "account_id": event["account_id"],
                                               "amount": event["amount"]})))


def handle_with_outbox(conn: psycopg.Connection, event_id: str, event: dict, apply=None) -> bool:
    return handle_once(conn, event_id, event, apply=enqueue_call)


def relay_once(conn: psycopg.Connection, client: Client, batch: int = 10, after_call=None) -> int:
    """Send up to `batch` unsent outbox rows; rows another relay holds are skipped, not waited for.

    A relay that dies between a call and its commit leaves the row unsent and
    unlocked, so the next relay calls again with the same key: the provider
    must honour keys for this to charge once.
    """
    with conn.transaction():
        rows = conn.execute("SELECT id, idempotency_key, payload FROM outbox WHERE sent_at IS NULL "
                            "ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED", (batch,)).fetchall()
        for row_id, key, payload in rows:
            try:
                client.charge(payload["reference"], payload["account_id"], payload["amount"], key=key)
            except ProviderError as e:
                if not e.refused:
                    raise  # the row stays unsent, for the next pass
                # Refused for good: the row leaves the queue with the reason, or it would block
                # every row behind it (the outbox's dead letter).
                log.warning(REFUSED_LOG, payload["reference"], e)
                conn.execute("UPDATE outbox SET sent_at = clock_timestamp(), payload = payload || %s WHERE id = %s",
                             (Jsonb({"refused": str(e)}), row_id))
                continue
            if after_call is not None:
                after_call(payload["reference"])
            conn.execute("UPDATE outbox SET sent_at = clock_timestamp() WHERE id = %s", (row_id,))
    return len(rows)


def run_relay(client: Client, dsn: str, stop, batch: int = 10, idle_s: float = 0.2, after_call=None) -> None:
    """Relay until `stop` is set, resting `idle_s` whenever the outbox is empty."""
    with connect(dsn) as conn:
        while not stop.is_set():
            if relay_once(conn, client, batch, after_call) == 0:
                stop.wait(idle_s)


def run_worker(lab) -> None:
    """ext, outbox and relay, as the lab runs them: the effect is a call to provider.py at
    --provider-url, with planted crashes between the claim and the call and between the call
    and the mark-done, once for every N-th event."""
    import consume
    from variants import common

    args = lab.args
    client = Client(args.provider_url) if args.provider_url else None
    crash_after_call = lab.once_every(args.crash_after_call_every, "call_crashes")
    crash_before_call = lab.once_every(args.crash_before_call_every, "precall_crashes")

    def after_call(event_id):
        lab.first_effect(event_id)
        if crash_after_call(event_id):
            lab.crash("crashing after the call for %s, before its mark-done", event_id)

    def before_call(event_id):
        if crash_before_call(event_id):
            lab.crash("crashing after the claim of %s, before its call", event_id, before_effect=True)

    if args.variant == "relay":
        run_relay(client, consume.DSN, lab.stop, batch=10, after_call=after_call)
        return
    if args.variant == "outbox":
        handle = handle_with_outbox
    else:
        def handle(conn, event_id, event, _apply=None):
            return handle_external(conn, event_id, event, client=client, policy=args.policy, lease_s=args.lease_s,
                                   before_call=before_call, after_call=after_call)

    def after_db_commit(msg, outcome):
        if args.variant == "outbox" and outcome == "applied":
            lab.first_effect(consume.event_id_of(msg))

    lab.supervised(lambda: consume.run(args.topic, args.group, handle=handle, stop=lab.stop,
                                       rebalance_callbacks=common.partition_logging(),
                                       after_db_commit=after_db_commit, **lab.overrides))
