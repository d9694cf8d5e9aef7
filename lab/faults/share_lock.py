"""share-lock: a share group's record lock (KIP-932), set on the broker, that a stalled handler
outlives, so the broker hands the record (and whatever was acquired with it) to the other
member (M6). The fault is no injection: it is the workload itself, started by `start`.

Claim: every --slow-every-th event's first handling outlives the lock by --overrun-s; the
run counts each expiry (a stall) as a fault.

Assumptions: a broker with share groups (Kafka 4.x); the single-node stack.
"""
from lab import harness, nemesis
from lab.faults import Fault


def share_lock_members(space, variant: str, run: int, config: dict, events: list) -> list:
    """share-lock's set-up: the group's lock, the records, two members whose handlers outlive it."""
    slow_s = config["lock_ms"] / 1000 + config["overrun_s"]
    args = harness.worker_args(f"share-{variant}", {"work_ms": config["work_ms"], "slow_every": config["slow_every"],
                                                     "slow_seconds": slow_s})
    args += ("--max-poll-records", config.get("max_poll_records", 0))
    # A share group's lock and start position are group configs on the broker; `earliest`, or
    # the members would skip the backlog published up front.
    harness.set_group_configs(space.group, {"share.record.lock.duration.ms": config["lock_ms"],
                                            "share.auto.offset.reset": "earliest"})
    # A share group locks what it acquires, and it acquires whole producer batches: with
    # one record per batch (and per poll) an expiry hands over one record, not a batch of them.
    single = {"linger.ms": 0, "batch.num.messages": 1, "max.in.flight.requests.per.connection": 1}
    harness.produce_events(space.topic, events, **(single if config.get("one_record_batches") else {}))
    return harness.start_workers(f"share-{variant}", space, f"faults-share-lock-{variant}-r{run}", args, count=2)


def start(scene, variant: str, run: int) -> tuple[list, dict]:
    """The run's two members, and how the run settles: a share group has no lag to read, so on
    the ledger alone, with time for every stall."""
    config = scene.config
    workers = share_lock_members(scene.space, variant, run, config, scene.events)
    slow_s = config["lock_ms"] / 1000 + config["overrun_s"]
    return workers, {"deadline_s": 300.0 + nemesis.stall_count(config["events"], config["slow_every"]) * slow_s}


def check(args) -> str | None:
    if not set(args.variant) <= {"b", "c"}:
        return "share-lock runs b and c: there is no batched share-group consumer"
    if args.lock_ms < 1000 or args.slow_every < 1 or args.overrun_s <= 0:
        return "share-lock needs --lock-ms >= 1000 (the broker's minimum), --slow-every >= 1, --overrun-s > 0"
    return None


FAULTS = (
    Fault("share-lock", "a share group's record lock that every --slow-every-th handler outlives",
          needs={"stack"}, inject=None, start=start, check=check, order=30),
)
