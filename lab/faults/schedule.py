"""Schedules that land faults: M6's (one fault, --faults times), and one composed of several.

Claim: every fault a schedule lands is healed before the next; a composed schedule is drawn
from a seed, so the same seed gives every variant the same sequence.
"""
import random
import time
from collections.abc import Iterator, Sequence

from lab import faults, harness, results


def fault_schedule(fault: str, scene: faults.Scene, label: str, in_handler=None, alive=lambda: True) -> list[dict]:
    """The fault schedule: --faults of them, --every-s apart, each healed and followed by a credit,
    unless `alive()` turns False first (every worker has exited: the schedule ends there, and
    the recovery phase counts what is missing as lost; resume_s is then None).
    `in_handler` (a Worker): each fault lands instead while that worker is inside a handler,
    stalled (--slow-every), i.e. before the credit it is handling is written and its offset
    committed: a zombie by construction rather than by chance, as long as the stall outlasts
    the harness's reaction (a log line read, polled every 0.1 s)."""
    config, space, landing = scene.config, scene.space, faults.get(fault)
    fault_log = []
    for k in range(1, config["faults"] + 1):
        if in_handler is None:
            time.sleep(config["every_s"])  # the schedule: faults land wherever the consumers are
        else:
            seen = in_handler.counts.get("stalls", 0)
            harness.wait_until(lambda seen=seen: in_handler.counts.get("stalls", 0) > seen, 120,
                               f"{label}: the cut-off consumer to stall in a handler")
        hit = time.time()
        outage = landing.land(scene)["outage_s"]
        healed, rows_before = time.monotonic(), harness.ledger_count(space.admin)
        window = [hit, time.time()]
        harness.wait_until(lambda before=rows_before: harness.ledger_count(space.admin) > before or
                           harness.distinct_applied(space.admin) >= config["events"] or not alive(), 300,
                           f"a credit after {fault} {k}", interval_s=0.1)
        resumed = (harness.ledger_count(space.admin) > rows_before
                   or harness.distinct_applied(space.admin) >= config["events"])
        # resume_s: from the end of the outage (healed, or the service back) to the next credit
        fault_log.append({"fault": k, "outage_s": round(outage, 2),
                          "resume_s": round(time.monotonic() - healed, 2) if resumed else None, "window": window})
        results.progress(f"{label}: fault {k} of {config['faults']}, ledger rows {harness.ledger_count(space.admin)}"
                         + ("" if resumed else ", and every worker has exited"))
        if not resumed:
            break
    return fault_log


def composed(names: Sequence[str], seed: int, count: int, every_s: float = 5.0) -> Iterator[tuple[float, str]]:
    """A mixed schedule: `count` faults drawn from `names` (each a registered fault), each
    `every_s` (0.5x to 1.5x, drawn) after the one before; yields (seconds from the start, name).
    The same names and seed give the same sequence."""
    unknown = [name for name in names if name not in faults.registry()]
    if unknown or not names:
        raise ValueError(f"no fault {', '.join(unknown)}" if unknown else "a composed schedule needs a fault")
    return _drawn(list(names), random.Random(seed), count, every_s)


def _drawn(names: list[str], rng: random.Random, count: int, every_s: float) -> Iterator[tuple[float, str]]:
    at = 0.0
    for _ in range(count):
        at += rng.uniform(0.5, 1.5) * every_s
        yield round(at, 3), rng.choice(names)
