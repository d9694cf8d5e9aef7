"""M5, external effects under hard kills: charges per event on the provider's side.

Claim: with the processing/done states and a lease, a provider that honours Idempotency-Keys (keys)
or answers a status lookup (lookup) shows exactly one charge per event, however the consumer dies;
so does inbox-then-outbox with a keyed relay (outbox). With neither, there is no clever fix:
retrying after an expired lease risks a duplicate (retry), giving up risks a loss (skip).

Workload: `--events` credits published up front; the side effect is an HTTP charge to provider.py (a
real service on loopback, its own table in Postgres). Fault: `--kills` lives of the consumer (and,
for outbox, the relay), each SIGKILLed `--life` seconds after its first call on M1's seeded
schedule; and two planted crashes, os._exit() right after the call of every `--crash-every`-th
event (the call landed and nothing records it), and right after the claim of every
`--crash-before-every`-th, before its call (nothing landed, and the lease says someone was on it).
Recovery: a final consumer (and relay) runs until the lag is 0, no effect is left `processing`, the
outbox is empty and the charges are still. Checker: checker.check on (published events, the
provider's charges); beside it, how often a handler gave up because its lease ran short and how
often a mark-done found its lease taken over: both should be 0 on loopback, else they are where a
lookup-policy duplicate would come from.

Assumptions: the stack is up and nothing else measures on it.

    python -m measurements.measure_external --policy all --runs 5
"""
import sys
import time

from lab import checker, cli, harness, nemesis, results
from lab.worker import EXIT_CRASHED_AFTER_EFFECT, EXIT_CRASHED_BEFORE_CALL
from variants import provider

# policy: (provider mode, worker variant, worker --policy)
POLICIES = {
    "keys": ("keys", "ext", "keys"),
    "lookup": ("lookup", "ext", "lookup"),
    "retry": ("none", "ext", "retry"),
    "skip": ("none", "ext", "skip"),
    "outbox": ("keys", "outbox", "keys"),
}
CRASHES = {EXIT_CRASHED_AFTER_EFFECT: "after call", EXIT_CRASHED_BEFORE_CALL: "before call"}


def crashed_on_purpose(worker) -> bool:
    """A planted crash, or a live handler that gave up because its lease ran short (safely)."""
    return worker.proc.returncode in CRASHES or worker.counts["lease_short"] > 0


def run_once(variant: str, run: int, config: dict) -> dict:
    policy = variant  # a results record's "variant" is the policy
    mode, worker_variant, worker_policy = POLICIES[policy]
    log_path = harness.fresh_log(f"external-{policy}-r{run}")
    started = time.monotonic()
    crashy = ("--crash-after-call-every", config["crash_every"])
    if worker_variant == "ext":
        crashy += ("--crash-before-call-every", config["crash_before_every"])
    events = harness.make_events(config["events"], prefix=f"r{run}", seed=config["seed"] + run)
    with harness.run_space("m5", f"{policy}-r{run}", config["partitions"], keep=config.get("keep", False)) as space:
        running = provider.Running(mode, space.provider)
        common = harness.worker_args(worker_variant, {**config, "policy": worker_policy, "heartbeat_interval_ms":
                                                      config["session_timeout_ms"] // 3}, provider_url=running.url)
        workers, relay = [], []  # every process of the run, relays included, for the lease counts; the live relay

        def start(variant_, args):
            workers.append(harness.Worker(variant_, space.topic, space.group, space.dsn, log_path, args))
            return workers[-1]

        def start_relay(args):
            relay[:] = [start("relay", ("--provider-url", running.url, *args))]

        def after_kill(k, life, worker, exit_code):
            relay_crashed = None
            if relay:  # the relay dies with the consumer, and comes back with it
                relay_crashed = {EXIT_CRASHED_AFTER_EFFECT: "after call"}.get(relay[0].proc.poll())
                relay[0].kill()
                start_relay(crashy)
            charges = len(harness.provider_charges(space.admin))
            results.progress(f"{policy} run {run}: kill {k} of {config['kills']}, charges {charges}")
            return {"kill": k, "life_s": life, "crashed_itself": CRASHES.get(exit_code),
                    "relay_crashed_itself": relay_crashed, "charges": charges, "counts": dict(worker.counts)}

        try:
            harness.produce_events(space.topic, events)
            if worker_variant == "outbox":
                start_relay(crashy)
            # nemesis: M1's kill schedule; the worker (or the relay) may crash itself first, on purpose
            kill_log = nemesis.kill_loop(
                nemesis.kill_schedule(config["seed"] + run, config["kills"], config["life"]),
                start=lambda: start(worker_variant, (*common, *crashy)),
                working=lambda w: w.working(space.group, space.topic, crashed=crashed_on_purpose) != "idle"
                or harness.external_pending(space.admin) > 0, after_kill=after_kill)
            # recovery: a final consumer (and relay) until the lag is 0, nothing is pending, the charges still
            if relay:
                relay[0].kill()
                start_relay(())
            # A consumer that exits on its own here (an unanswered call raises, by design) is started
            # again, as its supervisor would, until the phase settles or its deadline passes: what
            # stays uncharged then is lost, not what one unanswered call left behind.
            deadline, restarts, first = time.monotonic() + 300.0, 0, len(workers)
            # the tests: the provider stands still until the first final consumer has exited
            held = nemesis.stopped_until(running.proc.pid, lambda: len(workers) > first and
                                         workers[first].proc.poll() is not None, 120.0) \
                if config.get("hold_provider_in_recovery") else None
            while True:
                final = start(worker_variant, common)
                recovery = harness.settle([final], space.admin, None, deadline - time.monotonic(), space.group,
                                          space.topic, still_s=3.0, applied=harness.provider_applied,
                                          pending=harness.external_pending)
                exited = final.proc.poll()  # before the stop: None unless it ended on its own
                final.stop()
                if recovery.settled or exited is None or time.monotonic() > deadline - 5:
                    break
                restarts += 1
            if held is not None:
                held.join()
            verdict = harness.verdict_of(events, space.admin, on_provider=True)
            counted, _ = checker.tally(workers)
        finally:
            if relay:
                relay[0].stop()
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
            "recovery_restarts": restarts, "recovery_settled": recovery.settled,
            "wall_s": round(time.monotonic() - started, 1), "kill_log": kill_log}


def summarise(runs: list[dict]) -> dict:
    return results.summarise_runs(runs, POLICIES, spreads=("duplicates", "lost"), totals=(
        "duplicates", "lost", "kills", "killed_at_random", "crashed_after_call", "crashed_before_call",
        "lease_short", "lease_taken_over", "provider_failed"))


def table(summary: dict) -> str:
    def pair(t, a, b):
        return f"{t[a]}/{t[b]}"

    return results.text_table(
        ["policy", "runs", "kills", "random", "crashes before/after call", "duplicate charges", "lost charges",
         "leases short/taken", "exact"],
        [[policy, s["runs"], s["totals"]["kills"], s["totals"]["killed_at_random"],
          pair(s["totals"], "crashed_before_call", "crashed_after_call"), s["totals"]["duplicates"],
          s["totals"]["lost"], pair(s["totals"], "lease_short", "lease_taken_over"),
          f"{s['balances_exact_runs']}/{s['runs']}"] for policy, s in summary.items()], "(totals over all runs)")


verdict_line = cli.verdict("{variant} run {run}: {duplicates} duplicate charges, {lost} lost, {kills} kills "
                           "({crashed_after_call} right after a call)")


def parse_args(argv=None):
    parser = cli.measurement("M5: hard-kill consumers whose effect is an HTTP call; count charges.", None,
                             events=3000, work_ms=0, keep=True)
    parser.add_argument("--policy", required=True, choices=(*POLICIES, "all"))
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--life", type=nemesis.life_range, default=(0.5, 3.0), metavar="MIN,MAX")
    parser.add_argument("--lease-s", type=float, default=2.0)
    parser.add_argument("--crash-every", type=int, default=500, help="crash after the call of every N-th event")
    parser.add_argument("--crash-before-every", type=int, default=450,
                        help="crash between the claim and the call of every N-th event (ext only)")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    args = parser.parse_args(argv)
    results.reader_paths(args, "external.json")  # a reader's own file, unless --out names one
    cli.at_least(parser, args, 1, "runs", "kills", "events", "partitions", "crash_every", "crash_before_every",
                 "session_timeout_ms")
    cli.at_least(parser, args, 0, "work_ms")
    cli.positive(parser, args, "lease_s")
    return args


def main(args) -> int:
    policies = list(POLICIES) if args.policy == "all" else [args.policy]
    config = results.config_of(args, "policy", "out", "keep", "force", life=list(args.life))
    results.drive("measure_external", args.out, config, [{"variant": p} for p in policies], run_once, summarise,
                  table, verdict_line, args.force, options={"keep": args.keep})
    return 0


if __name__ == "__main__":
    sys.exit(main(parse_args()))
