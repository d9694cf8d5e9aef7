"""The checker: what was published against what was applied. Pure: no Kafka, no Postgres.

Claim: a run's verdict is a function of two lists alone, the events a harness
published and the effects it found (ledger rows, or a provider's charges), so it
is tested on tiny hand-made data (tests/test_checker.py) and trusted on big runs.
Beside it, the counts the workers' log lines add up to, and the rebalance
handover read from their timelines (parsed by harness.py, the one place that
reads log lines).

Assumptions: none. This module imports nothing that talks to a service.
"""
import collections


def check(published: dict[str, dict], effects: list[tuple], balances: dict[int, int]) -> dict:
    """Compare what was published with what was applied.

    published: event ID -> event ({"account_id", "amount"}); effects: (event_id,
    account_id, amount) rows; balances: account -> balance.
    duplicates counts effects beyond the first per event ID; lost counts
    published IDs with no effect; balances_exact says every account holds exactly
    the sum of its published credits.
    """
    per_id = collections.Counter(row[0] for row in effects)
    expected = collections.Counter()
    for event in published.values():
        expected[event["account_id"]] += event["amount"]
    accounts = set(expected) | set(balances)
    return {
        "duplicates": sum(n - 1 for event_id, n in per_id.items() if event_id in published),
        "lost": sum(1 for event_id in published if event_id not in per_id),
        "unexpected": sum(n for event_id, n in per_id.items() if event_id not in published),
        "ledger_rows": len(effects),
        "balance_total": sum(balances.values()),
        "expected_balance": sum(expected.values()),
        "balances_exact": all(balances.get(a, 0) == expected.get(a, 0) for a in accounts),
    }


def log_copies(published: list[str], seen: list[str]) -> dict:
    """What a topic holds against what was published: `copies` counts records beyond the
    first per published ID, `missing` the published IDs with no record, `unexpected` the
    records whose ID was never published (none, or the harness is reading the wrong topic)."""
    per_id = collections.Counter(seen)
    wanted = set(published)
    return {"copies": sum(n - 1 for event_id, n in per_id.items() if event_id in wanted),
            "missing": sum(1 for event_id in wanted if event_id not in per_id),
            "unexpected": sum(n for event_id, n in per_id.items() if event_id not in wanted)}


def balances_of(effects: list[tuple]) -> dict[int, int]:
    """What each account would hold from these effects alone: a provider has no balances table."""
    balances = collections.Counter()
    for _, account, amount in effects:
        balances[account] += amount
    return dict(balances)


def tally(workers) -> tuple[collections.Counter, dict]:
    """The workers' counted log lines, added up, and the first example line of each kind.
    A worker is anything with `counts` (a Counter) and `examples` (kind -> line)."""
    counts, examples = collections.Counter(), {}
    for worker in workers:
        counts.update(worker.counts)
        for kind, line in worker.examples.items():
            examples.setdefault(kind, line)
    return counts, examples


def failures(counts: collections.Counter, kind: str = "commit_failed") -> dict:
    """{code: how many} for a counted kind with a code, e.g. commit_failed:UNKNOWN_MEMBER_ID."""
    return {key.split(":", 1)[1]: n for key, n in counts.items() if key.startswith(f"{kind}:")}


def handovers(timeline: list[tuple]) -> list[dict]:
    """Per eviction: who was given one of the evicted worker's partitions next ("other", or
    "self" once the zombie rejoined; None if nobody was), how long after librdkafka's MAXPOLL
    line (handover_s), and how long the zombie took to finish its stalled message (zombie_s).
    Whoever owns the partition next starts at the last committed offset: if the zombie's own
    commit failed, that owner, even the zombie itself, handles the message again.

    timeline: (unix time, worker, what, detail) with what among "evicted", "stall over",
    "assigned", "revoked", "lost" (detail a frozenset of partitions for the last three);
    other kinds are passed over."""
    events = sorted(timeline, key=lambda e: e[:3])  # details (sets, IDs, None) do not compare
    owned = collections.defaultdict(frozenset)
    found = []
    for i, (at, worker, what, parts) in enumerate(events):
        if what == "assigned":
            owned[worker] |= parts
        elif what in ("revoked", "lost"):
            owned[worker] -= parts
        elif what == "evicted":
            mine = owned[worker]
            owner = handover = zombie = None
            for later, other, kind, moved in events[i + 1:]:
                if zombie is None and other == worker and kind == "stall over":
                    zombie = round(later - at, 2)
                if owner is None and kind == "assigned" and moved & mine:
                    owner, handover = ("self" if other == worker else "other"), round(later - at, 2)
                if zombie is not None and owner is not None:
                    break
            found.append({"worker": worker, "next_owner": owner, "handover_s": handover, "zombie_s": zombie})
    return found


def handover_fields(moves: list[dict]) -> dict:
    """A run record's handover fields: every handover's delay, and where the partitions went."""
    return {"handover_s": [m["handover_s"] for m in moves],
            "moved_to_other": sum(m["next_owner"] == "other" for m in moves),
            "back_to_zombie": sum(m["next_owner"] == "self" for m in moves)}


def first_eviction(timeline: list[tuple], credits: list[tuple[str, float]]) -> dict | None:
    """The story of the run's first eviction, for M2's chart: seconds from the stall's start to
    each step, and who took it ("zombie", "other" or "db" for the ledger's own clock): the stall,
    librdkafka's MAXPOLL, the zombie's partition given to another member, the zombie's late credit
    and its failed commit, every ledger row written for the event, and any skip of it.
    timeline as handovers takes it (with "stalling"/"skipped" carrying event IDs); credits:
    (event ID, unix time) per ledger row. None if nobody was evicted."""
    events = sorted(timeline, key=lambda e: e[:3])
    evicted = next((e for e in events if e[2] == "evicted"), None)
    if evicted is None:
        return None
    zombie = evicted[1]
    stall = next((e for e in reversed(events) if e[1] == zombie and e[2] == "stalling" and e[0] <= evicted[0]), None)
    if stall is None:
        return None
    start, event_id, owned = stall[0], stall[3], frozenset()
    for at, worker, what, detail in events:  # what the zombie held when it stalled
        if worker == zombie and at <= start and what == "assigned":
            owned |= detail
        elif worker == zombie and at <= start and what in ("revoked", "lost"):
            owned -= detail
    steps = [(0.0, "zombie", "stall begins"), (evicted[0] - start, "zombie", "MAXPOLL: evicted")]
    # The handover: another member given one of those partitions while the zombie stalled. It
    # can come before the zombie's own MAXPOLL: members that join meanwhile rebalance the group
    # without the member that is not polling.
    handed = next((e for e in events if e[0] > start and e[1] != zombie and e[2] == "assigned" and e[3] & owned),
                  None)
    if handed is not None:
        steps.append((handed[0] - start, "other", "partition assigned"))
    over = next((e for e in events if e[1] == zombie and e[2] == "stall over" and e[0] >= start), None)
    if over is not None:
        steps.append((over[0] - start, "zombie", "stall over, writes"))
        failed = next((e for e in events if e[1] == zombie and e[2] == "commit failed" and e[0] >= over[0]), None)
        if failed is not None:
            steps.append((failed[0] - start, "zombie", f"offset commit failed: {failed[3]}"))
    steps += [(at - start, "db", "credit committed") for eid, at in credits if eid == event_id and at >= start - 1]
    steps += [(e[0] - start, "zombie" if e[1] == zombie else "other", "skipped duplicate")
              for e in events if e[2] == "skipped" and e[3] == event_id]
    return {"event_id": event_id, "steps": [[round(t, 3), who, what] for t, who, what in sorted(steps)]}


def stall_windows(timeline: list[tuple]) -> list[list[float]]:
    """[start, end] unix times of every stalled handler: from its stall to its waking."""
    began = {}
    windows = []
    for at, worker, what, detail in sorted(timeline, key=lambda e: e[:3]):
        if what == "stalling":
            began[(worker, detail)] = at
        elif what == "stall over" and (worker, detail) in began:
            windows.append([began.pop((worker, detail)), at])
    return windows


def credit_timeline(credits: list[tuple[str, float]], windows: list[list[float]], start: float,
                    bucket_s: float = 0.5) -> dict:
    """What M6's chart draws, relative to `start`: credits per second in `bucket_s` buckets, the
    faults' windows, and when each duplicate (a row beyond an event's first) was written."""
    seen, duplicates, buckets = set(), [], collections.Counter()
    for event_id, at in credits:
        buckets[int((at - start) // bucket_s)] += 1
        if event_id in seen:
            duplicates.append(round(at - start, 3))
        seen.add(event_id)
    last = max(buckets, default=-1)
    return {"bucket_s": bucket_s, "credits_per_s": [round(buckets.get(i, 0) / bucket_s, 1) for i in range(last + 1)],
            "fault_windows": [[round(a - start, 3), round(b - start, 3)] for a, b in windows],
            "duplicates_at": duplicates}


def order_violations(published: dict[str, dict], effects: list[tuple]) -> int:
    """Per account, each event's first effect against the producer's order: how many came
    after an effect of a later event of the same account. published: event ID -> event with
    its "seq" (the order it was published in; one account, one key, one partition); effects
    in the order they were written. An event's second and later effects are duplicates,
    counted by check(), and passed over here."""
    latest, seen, violations = {}, set(), 0
    for event_id, account, _ in effects:
        if event_id in seen or event_id not in published:
            continue
        seen.add(event_id)
        seq = published[event_id]["seq"]
        if seq < latest.get(account, seq):
            violations += 1
        else:
            latest[account] = seq
    return violations


def longest_wait(published: dict[str, dict], credits: list[tuple[str, float]]) -> float:
    """The longest time any account went without a credit between its first and its last,
    in seconds. An account is one key, so one partition: a partition that stopped shows here
    however busy the others kept the ledger. 0.0 with fewer than two credits of any account."""
    times: dict[int, list[float]] = collections.defaultdict(list)
    for event_id, at in credits:
        if event_id in published:
            times[published[event_id]["account_id"]].append(at)
    gaps = (b - a for ts in map(sorted, times.values()) for a, b in zip(ts, ts[1:], strict=False))
    return round(max(gaps, default=0.0), 3)
