"""M5, external effects under hard kills: charges per event on the provider's side.

Claim: with the processing/done states and a lease, a provider that honours
Idempotency-Keys (keys) or answers a status lookup (lookup) shows exactly one
charge per event, however the consumer dies; so does inbox-then-outbox with a
keyed relay (outbox). With neither, there is no clever fix: retrying after an
expired lease risks a duplicate (retry), giving up risks a loss (skip).

Workload: `--events` credits published up front; the side effect is an HTTP
charge to provider.py (a real service on loopback, its own table in Postgres).
Fault: `--kills` lives of the consumer (and, for outbox, the relay), each
SIGKILLed `--life` seconds after its first call on M1's seeded schedule, a
random point; and two planted crashes, os._exit() right after the call of
every `--crash-every`-th event, before its mark-done (the call landed and
nothing records it), and right after the claim of every `--crash-before-every`-th,
before its call (nothing landed, and the lease says someone was on it). The
rates are sparse enough that most lives still end by the SIGKILL. Recovery: a
final consumer (and relay) runs until the lag is 0, no effect is left
`processing`, the outbox is empty and the charges are still. Checker:
harness.check on (published events, the provider's charges). Beside it, how
often a live handler gave up because its lease ran short (it does not call, or
stops waiting on a call, once 3/4 of the lease is gone) and how often a mark-done
found its lease taken over: both should be 0 on loopback, and if they are not,
they are where a lookup-policy duplicate would come from.

Assumptions: the stack is up and nothing else measures on it.

    python measure_external.py --policy all --runs 5
"""
import collections
import json
import sys
import time

import cli
import harness
import provider
from measure_kill import kill_schedule, life_range, progress

# policy: (provider mode, worker variant, worker --policy)
POLICIES = {
    "keys": ("keys", "ext", "keys"),
    "lookup": ("lookup", "ext", "lookup"),
    "retry": ("none", "ext", "retry"),
    "skip": ("none", "ext", "skip"),
    "outbox": ("keys", "outbox", "keys"),
}


def wait_for_effect_or_exit(worker: harness.Worker, group: str, topic: str, timeout_s: float) -> str:
    """'effect' once the worker made its first call (or outbox write), 'crashed' if it os._exit()ed
    on purpose first, 'idle' as soon as the group has nothing left to consume."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if worker.first_effect.wait(1.0):
            return "effect"
        if worker.proc.poll() is not None:
            # 3 and 4: it crashed itself on purpose; a lease that ran short ends a worker too (safely).
            if worker.proc.returncode in (3, 4) or worker.counts["lease_short"]:
                return "crashed"
            raise RuntimeError(f"worker exited with {worker.proc.returncode}:\n{worker.log_tail()}")
        if harness.lag(group, topic) == 0:
            return "idle"
    raise RuntimeError(f"worker made no call within {timeout_s:g}s:\n{worker.log_tail()}")


def run_once(policy: str, run: int, config: dict, log_dir, keep: bool) -> dict:
    mode, variant, worker_policy = POLICIES[policy]
    log_path = log_dir / f"external-{policy}-r{run}.log"
    log_path.unlink(missing_ok=True)
    started = time.monotonic()
    session = ("--session-timeout-ms", config["session_timeout_ms"],
               "--heartbeat-interval-ms", config["session_timeout_ms"] // 3)
    crashy = ("--crash-after-call-every", config["crash_every"])
    if variant == "ext":
        crashy += ("--crash-before-call-every", config["crash_before_every"])
    events = harness.make_events(config["events"], prefix=f"r{run}", seed=config["seed"] + run)
    with harness.run_space("m5", f"{policy}-r{run}", config["partitions"], keep=keep) as space:
        topic, group, dsn = space.topic, space.group, space.dsn
        running = provider.Running(mode, dsn)
        common = ("--provider-url", running.url, "--policy", worker_policy, "--lease-s", config["lease_s"],
                  "--work-ms", config["work_ms"], *session)
        relay = None

        workers = []  # every process of the run, relays included, for the lease counts

        def start(variant_, args):
            workers.append(harness.Worker(variant_, topic, group, dsn, log_path, args))
            return workers[-1]

        def start_relay(args):
            return start("relay", ("--provider-url", running.url, *args))

        try:
            harness.produce_events(topic, events)
            if variant == "outbox":
                relay = start_relay(crashy)
            kill_log = []
            for k, life in enumerate(kill_schedule(config["seed"] + run, config["kills"], config["life"]), 1):
                worker = start(variant, (*common, *crashy))
                outcome = wait_for_effect_or_exit(worker, group, topic, 120)
                if outcome == "idle" and harness.external_pending(dsn) == 0:
                    worker.kill()
                    break
                # The kill schedule; the worker (or, once the topic is read, the relay) may crash itself meanwhile.
                time.sleep(life)
                crashed_itself = {3: "after call", 4: "before call"}.get(worker.proc.poll())
                worker.kill()
                relay_crashed = None
                if relay is not None:  # the relay dies with the consumer, and comes back with it
                    relay_crashed = {3: "after call"}.get(relay.proc.poll())
                    relay.kill()
                    relay = start_relay(crashy)
                kill_log.append({"kill": k, "life_s": life, "crashed_itself": crashed_itself,
                                 "relay_crashed_itself": relay_crashed,
                                 "charges": len(harness.provider_charges(dsn)), "counts": dict(worker.counts)})
                progress(f"{policy} run {run}: kill {k} of {config['kills']}, charges {kill_log[-1]['charges']}")
            if relay is not None:
                relay.kill()
                relay = start_relay(())
            final = start(variant, common)
            last, still_since, deadline = -1, time.monotonic(), time.monotonic() + 300
            while time.monotonic() < deadline:
                time.sleep(0.5)
                count = len(harness.provider_charges(dsn))
                if count != last:
                    last, still_since = count, time.monotonic()
                settled = harness.lag(group, topic) == 0 and harness.external_pending(dsn) == 0
                if settled and time.monotonic() - still_since > 3:
                    break
            else:
                raise RuntimeError(f"{policy} run {run} did not settle: lag {harness.lag(group, topic)}, "
                                   f"pending {harness.external_pending(dsn)}\n{final.log_tail()}")
            final.stop()
            verdict = harness.provider_verdict(events, dsn)
            counted = sum((w.counts for w in workers), collections.Counter())
        finally:
            if relay is not None:
                relay.stop()
            running.stop()
    return {"variant": policy, "run": run, "provider_mode": mode, "seed": config["seed"] + run,
            "events": config["events"], "kills": len(kill_log),
            # The outbox consumer makes no call; its relay crashes after a call, before marking the row sent.
            "crashed_after_call": sum("after call" in (k["crashed_itself"], k["relay_crashed_itself"])
                                      for k in kill_log),
            "crashed_before_call": sum(k["crashed_itself"] == "before call" for k in kill_log),
            "killed_at_random": sum(k["crashed_itself"] is None for k in kill_log), **verdict,
            "charges": verdict["ledger_rows"],
            **{name: counted[name] for name in ("lease_short", "lease_taken_over", "provider_failed")},
            "wall_s": round(time.monotonic() - started, 1), "kill_log": kill_log}


def summarise(runs: list[dict]) -> dict:
    summary = {}
    for policy in POLICIES:
        mine = [r for r in runs if r["variant"] == policy]
        if mine:
            summary[policy] = {"runs": len(mine), "balances_exact_runs": sum(r["balances_exact"] for r in mine),
                               "totals": {f: sum(r[f] for r in mine) for f in (
                                   "duplicates", "lost", "kills", "killed_at_random", "crashed_after_call",
                                   "crashed_before_call", "lease_short", "lease_taken_over", "provider_failed")},
                               **{f: harness.stats(r[f] for r in mine) for f in ("duplicates", "lost")}}
    return summary


def table(summary: dict) -> str:
    lines = ["policy   runs  kills  random  crashes before/after call  duplicate charges  lost charges  "
             "leases short/taken  exact",
             "-------  ----  -----  ------  -------------------------  -----------------  ------------  "
             "------------------  -----"]
    for policy, s in summary.items():
        t = s["totals"]
        crashes = f"{t['crashed_before_call']}/{t['crashed_after_call']}"
        leases = f"{t['lease_short']}/{t['lease_taken_over']}"
        lines.append(f"{policy:<7}  {s['runs']:>4}  {t['kills']:>5}  {t['killed_at_random']:>6}  {crashes:>25}  "
                     f"{t['duplicates']:>17}  {t['lost']:>12}  {leases:>18}  {s['balances_exact_runs']}/{s['runs']}")
    return "\n".join(lines) + "\n(totals over all runs)"


def main(args) -> int:
    policies = list(POLICIES) if args.policy == "all" else [args.policy]
    config = {"runs": args.runs, "kills": args.kills, "events": args.events, "partitions": args.partitions,
              "work_ms": args.work_ms, "life": list(args.life), "seed": args.seed, "lease_s": args.lease_s,
              "crash_every": args.crash_every, "crash_before_every": args.crash_before_every,
              "session_timeout_ms": args.session_timeout_ms}
    results = harness.ResultsFile("measure_external", args.out, config, args.force)
    log_dir = harness.log_dir()
    with harness.measurement_lock("measure_external"):
        for run in range(1, args.runs + 1):
            for policy in policies:
                if results.done(variant=policy, run=run):
                    continue
                progress(f"{policy} run {run} of {args.runs}: {args.events} events, {args.kills} kills")
                record = run_once(policy, run, config, log_dir, args.keep)
                results.add(record, summarise)
                print(f"{policy} run {run}: {record['duplicates']} duplicate charges, {record['lost']} lost, "
                      f"{record['kills']} kills ({record['crashed_after_call']} right after a call)")
                print(json.dumps({k: v for k, v in record.items() if k != "kill_log"}), flush=True)
    results.close(table)
    return 0


def parse_args(argv=None):
    parser = cli.Parser(description="M5: hard-kill consumers whose effect is an HTTP call; count charges.")
    parser.add_argument("--policy", required=True, choices=(*POLICIES, "all"))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--events", type=int, default=3000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--work-ms", type=float, default=0)
    parser.add_argument("--life", type=life_range, default=(0.5, 3.0), metavar="MIN,MAX")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--lease-s", type=float, default=2.0)
    parser.add_argument("--crash-every", type=int, default=500, help="crash after the call of every N-th event")
    parser.add_argument("--crash-before-every", type=int, default=450,
                        help="crash between the claim and the call of every N-th event (ext only)")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--out", default=str(harness.RESULTS / "external.json"))
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--force", action="store_true")
    args = parser.parse_args(argv)
    if min(args.runs, args.kills, args.events, args.partitions, args.crash_every, args.crash_before_every) < 1:
        parser.error("--runs, --kills, --events, --partitions and the --crash-* rates must be at least 1")
    return args


if __name__ == "__main__":
    sys.exit(main(parse_args()))
