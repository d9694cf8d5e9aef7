"""Per-key parallel handlers inside a partition (variant k): consume.py's guarantee, many
handlers at once, the offset committed only up to the contiguous watermark.

Claim: `lanes` threads run handle_once, each in its own transaction on its own connection,
and one key's messages run one at a time, in the order they were read; keys need no order
between them. Each key with messages waiting has a queue of its own; a lane takes the next
key that has one and is not being handled, handles its oldest message, and hands the key
back. So a key never runs on two lanes at once, and no lane idles while some key waits:
the lanes are as busy as the keys allow, whatever the keys hash to (docs/lanes.md: why
not a queue per lane). A partition's committed offset is its contiguous watermark: the offset
after the highest one below which every message has a durable outcome (applied, skipped,
or dead-lettered and confirmed). It never moves past an unfinished message, so a crash
replays at most the window that was in flight, and the inbox skips whatever of it had
committed.

- Backpressure: a partition with `window` messages in flight is paused, and resumed once a
  quarter of them are done (what the client had already fetched may still arrive). Early,
  because a resumed partition waits for a fresh fetch, and its lanes should not run dry
  meanwhile.
- The lanes wake from the database and from their handlers all the time, and each then
  waits for the GIL: run_parallel shortens the interpreter's switch interval (0.5 ms, not
  5 ms) for its process; tried by hand on this machine, it helped at 16 lanes (no
  results file holds that comparison).
- librdkafka has kept a partition's pause across a rebalance (its maintainers say so; an
  application must resume): every partition assigned is resumed once its assignment is in
  place, and a paused one before it is let go, so that an old pause cannot leave a
  partition unread. Under the cooperative protocol a partition given up while paused and
  given back stayed paused without them (tests/test_parallel.py); under the eager one the
  pause did not survive here.
- A revoked partition: its messages not yet started are abandoned, those started finish
  (waited for up to a third of max.poll.interval.ms), the watermark is committed, and only
  then does the partition go. A lost one (the group fenced us) is abandoned without a
  commit: it is no longer ours to commit.
- A slow handler does not stall the poll loop, so it does not get the consumer evicted
  for missing max.poll.interval.ms (M2's zombie); it holds its partition's watermark, and
  a full window pauses the partition.
- Poison: process() dead-letters it, durably, before it counts as done.
- A lane whose transaction fails for good (variants/common.Database gave up) stops the consumer;
  no watermark passes its message.

Assumptions: consume.py's; the key is what order is kept for (publish.py keys by account).

    python -m variants.consume_parallel --lanes 16
"""
import collections
import functools
import queue
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from consume import DSN, credit_account, handle_once, process
from variants import common
from variants.common import log

# What the lab runs of this file (lab/registry.py reads it without importing the module).
VARIANTS = {
    "k": {"label": "k: per-key lanes, the contiguous watermark", "reads": ["lanes", "window", "crash_after"]},
}
REVOKE_WAIT_S = 30.0  # how long a revocation waits for started handlers, at most, before it commits what is done


class Window:
    """One partition's messages in flight, in offset order, and which of them are done."""

    def __init__(self, topic: str, partition: int):
        self.topic, self.partition = topic, partition
        self.offsets = collections.deque()  # dispatched, not yet below the watermark
        self.done: set[int] = set()
        self.in_flight = 0  # dispatched and neither done nor abandoned
        self.abandoned = threading.Event()  # set when the partition goes: lanes skip what they have not begun
        self.paused = False
        self.committed = None  # the last watermark committed

    def watermark(self) -> int | None:
        """Move past every done offset at the front; the next offset to read, or None if none moved."""
        moved = None
        while self.offsets and self.offsets[0] in self.done:
            offset = self.offsets.popleft()
            self.done.discard(offset)
            moved = offset + 1
        return moved


class Keys:
    """The work waiting, a queue per key, and which keys a lane holds. A key is ready when it
    has messages waiting and no lane holds it; lanes take ready keys oldest first."""

    def __init__(self):
        self.changed = threading.Condition()
        self.waiting: dict[bytes, collections.deque] = {}  # keys with messages not yet taken
        self.ready: collections.deque = collections.deque()  # waiting keys that no lane holds
        self.held: set[bytes] = set()
        self.closed = False

    def put(self, key: bytes, item) -> None:
        with self.changed:
            queued = self.waiting.setdefault(key, collections.deque())
            queued.append(item)
            if len(queued) == 1 and key not in self.held:
                self.ready.append(key)
                self.changed.notify()

    def take(self):
        """(key, its oldest message) for a lane, which holds the key until give_back(); None once closed."""
        with self.changed:
            while not self.ready and not self.closed:
                self.changed.wait()
            if self.closed:
                return None
            key = self.ready.popleft()
            self.held.add(key)
            queued = self.waiting[key]
            item = queued.popleft()
            if not queued:
                del self.waiting[key]
            return key, item

    def give_back(self, key: bytes) -> None:
        with self.changed:
            self.held.discard(key)
            if key in self.waiting:  # more of it came meanwhile: ready again, behind the others
                self.ready.append(key)
                self.changed.notify()

    def close(self) -> None:
        with self.changed:
            self.closed = True
            self.changed.notify_all()


def lane(db: common.Database, keys: Keys, finished: queue.Queue, after_db_commit, *handling) -> None:
    """One handler's thread: takes a key's oldest message, brings it to an outcome (consume.process,
    given `handling`: dead_letters, handle, apply), gives the key back."""
    try:
        while (taken := keys.take()) is not None:
            key, (window, msg) = taken
            if window.abandoned.is_set():
                finished.put(("abandoned", window, msg, None))
                keys.give_back(key)
                continue
            try:
                outcome = db.run(process, msg, *handling)
            except BaseException as e:  # noqa: BLE001 - the consumer stops on it, in the main thread
                finished.put(("failed", window, msg, e))
                return  # the key stays held: nothing more of it runs
            if after_db_commit is not None:
                after_db_commit(msg, outcome)
            finished.put(("done", window, msg, outcome))
            keys.give_back(key)
    finally:
        db.close()


class Parallel:
    """The main thread's side: dispatch by key, collect outcomes, commit watermarks, pause and resume."""

    def __init__(self, consumer: Consumer, keys: Keys, finished: queue.Queue, window: int,
                 revoke_wait_s: float = REVOKE_WAIT_S):
        self.consumer, self.keys, self.finished, self.window = consumer, keys, finished, window
        self.revoke_wait_s = revoke_wait_s
        self.windows: dict[tuple[str, int], Window] = {}

    def dispatch(self, msg: Message) -> None:
        key = (msg.topic(), msg.partition())
        window = self.windows.get(key) or self.windows.setdefault(key, Window(*key))
        window.offsets.append(msg.offset())
        window.in_flight += 1
        self.keys.put(msg.key() or b"", (window, msg))
        if window.in_flight >= self.window and not window.paused:
            self.consumer.pause([TopicPartition(*key)])
            window.paused = True

    def collect(self, wait_s: float = 0.0) -> None:
        """Take in what the lanes finished; raise if one failed for good."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                kind, window, msg, detail = self.finished.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return
            if kind == "failed":
                raise detail
            window.in_flight -= 1
            if kind == "done":
                window.done.add(msg.offset())
            deadline = time.monotonic()  # after the first, take only what is already there

    def commit(self, windows=None) -> None:
        """Commit each window's watermark if it moved; a failed commit is logged, never raised."""
        marks = [(w, w.watermark()) for w in (windows if windows is not None else list(self.windows.values()))]
        moved = [(window, mark) for window, mark in marks if mark is not None and mark != window.committed]
        if not moved or not common.commit_offsets(
                self.consumer, [TopicPartition(w.topic, w.partition, m) for w, m in moved]):
            return
        for window, mark in moved:
            window.committed = mark

    def resume(self, partitions: list) -> None:
        """Resume partitions, whatever librdkafka kept of an old pause; one it no longer holds is no matter."""
        if partitions:
            try:
                self.consumer.resume(partitions)
            except KafkaException as e:
                log.warning("could not resume %s: %s", ",".join(str(p.partition) for p in partitions), e)

    def resume_drained(self) -> None:
        for key, window in self.windows.items():
            if window.paused and window.in_flight <= self.window * 3 // 4:
                self.consumer.resume([TopicPartition(*key)])
                window.paused = False

    def let_go(self, partitions, commit: bool) -> None:
        """A revoked (commit) or lost (no commit) partition: abandon what has not begun, wait for
        what has, then commit the watermark, and forget the partition."""
        going = [self.windows.pop((tp.topic, tp.partition)) for tp in partitions
                 if (tp.topic, tp.partition) in self.windows]
        for window in going:
            window.abandoned.set()
        self.resume([TopicPartition(w.topic, w.partition) for w in going if w.paused])
        deadline = time.monotonic() + self.revoke_wait_s
        while any(w.in_flight for w in going) and time.monotonic() < deadline:
            self.collect(wait_s=0.1)
        if commit:
            self.commit(going)


def run_parallel(topic: str, group: str, apply=credit_account, *, lanes: int = 16, window: int = 500,
                 handle=None, dsn: str = DSN, stop: threading.Event | None = None, after_db_commit=None,
                 switch_interval_s: float | None = 0.0005, **overrides) -> None:
    """Consume `topic` as `group` until `stop` is set (or forever), `lanes` handlers at once.
    `after_db_commit(msg, outcome)` runs in the lane between the database commit and the
    message counting as done, where a crash hurts most. `switch_interval_s` is set for the
    whole process (sys.setswitchinterval); None leaves the interpreter's as it is."""
    if switch_interval_s is not None:
        sys.setswitchinterval(switch_interval_s)
    finished: queue.Queue = queue.Queue()
    parallel = None
    assigned: list[TopicPartition] = []  # resumed by the main loop, once the assignment is in place

    def let_go(commit: bool, consumer, partitions) -> None:  # revoked: commit the watermark; lost: not ours
        if parallel is not None:
            parallel.let_go(partitions, commit)

    with common.consuming(topic, group, dsn, overrides, on_revoke=functools.partial(let_go, True),
                          on_lost=functools.partial(let_go, False),
                          on_assign=lambda consumer, partitions: assigned.extend(partitions)) as (
            consumer, dead_letters, db):
        db.close()  # each lane has its own connection
        keys = Keys()
        for lane_db in [common.Database(dsn) for _ in range(lanes)]:  # every connection first, then the threads
            threading.Thread(target=lane, args=(lane_db, keys, finished, after_db_commit, dead_letters,
                                                handle or handle_once, apply), daemon=True).start()
        # The revocation waits inside poll(): a third of max.poll.interval.ms at most, or the wait
        # itself would get this member thrown out of the group.
        max_poll_s = int(overrides.get("max.poll.interval.ms", 300000)) / 1000
        parallel = Parallel(consumer, keys, finished, window, min(REVOKE_WAIT_S, max_poll_s / 3))
        last_commit = time.monotonic()
        try:
            while stop is None or not stop.is_set():
                if assigned:
                    parallel.resume([TopicPartition(tp.topic, tp.partition) for tp in assigned])
                    assigned.clear()
                parallel.collect()
                if time.monotonic() - last_commit >= 0.1:  # a commit a tenth of a second, not one a message
                    parallel.commit()
                    last_commit = time.monotonic()
                parallel.resume_drained()
                paused = any(w.paused for w in parallel.windows.values())
                # With a partition paused, what unblocks it is a lane finishing, not a fetch: poll
                # without waiting (callbacks, what was fetched already), then wait on the lanes.
                if (msg := common.polled(consumer, 0.0 if paused else 0.05)) is not None:
                    parallel.dispatch(msg)
                elif paused:
                    parallel.collect(wait_s=0.05)
            parallel.let_go([TopicPartition(t, p) for t, p in list(parallel.windows)], commit=True)
        finally:
            keys.close()


def run_worker(lab) -> None:
    run_parallel(lab.args.topic, lab.args.group, lab.apply, lanes=lab.args.lanes, window=lab.args.window,
                 stop=lab.stop, after_db_commit=lab.after_db_commit, **lab.overrides)


if __name__ == "__main__":
    common.run_command(run_parallel, "Consume credits with per-key parallel handlers.",
                       lanes="handlers at once (one key: one lane)", window="messages in flight per partition at most")
