"""The nemesis: every fault the lab injects, in one place.

Claim: each fault is bounded in time and healed before it returns, and the ones
drawn at random are drawn from a seed, so every variant meets the same schedule.

    kill schedule   SIGKILL a worker `life` seconds after its first effect, for
                    each life on a seeded schedule (M1, M5); no finally, no close()
    stall           --slow-every N --slow-seconds S: the first handling of every
                    N-th event (by seq) sleeps S inside its handler (worker.Stall),
                    past max.poll.interval.ms (M2) or a share lock (M6)
    pg-restart      PostgreSQL stopped in immediate mode and started again
    broker-restart  the Kafka broker SIGKILLed and started again
    partition-*     one consumer's link to the broker, or to Postgres, cut and
                    healed through netlab.py's bridge; every byte stays on loopback
    share-lock      a share group's record lock, set on the broker, that a stalled
                    handler outlives (share_lock_members)

On the replicated lab (stack.py up --replicated; inject_cluster):
    leader-kill     SIGKILL the node leading most of a topic's partitions, restart it
    leader-pause    SIGSTOP that node, then SIGCONT
    controller-kill SIGKILL the active KRaft controller, restart it
    isolate-leader  the leader moved into a network namespace, given its partitions back, and
                    every link of it cut, both ways, for a while (isolate_leader)
    pg-failover     SIGSTOP then SIGKILL every process of the Postgres primary at once,
                    promote the standby (its synchronous_standby_names cleared)
    pg-failover-stalled  the same, the primary's WAL sender paused first

fault_schedule() is M6's loop: a fault every --every-s, each healed, then a credit
awaited before the next.

Assumptions: the restarts need the embedded stack (stack.py) this checkout
started; the partitions need root (ip netns).
"""
import argparse
import collections
import contextlib
import os
import random
import re
import signal
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import psycopg
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from lab import harness, netlab, results, stack

FAULTS = ("pg-restart", "broker-restart", "partition-broker", "partition-db")


# --- the kill schedule -------------------------------------------------------------

def kill_schedule(seed: int, kills: int, life: tuple[float, float]) -> list[float]:
    """Seconds each worker lives after its first side effect; the same for every variant."""
    rng = random.Random(seed)
    return [round(rng.uniform(*life), 3) for _ in range(kills)]


def life_range(text: str) -> tuple[float, float]:
    """--life MIN,MAX, for argparse."""
    try:
        low, high = (float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MIN,MAX in seconds, got {text!r}") from None
    if not 0 < low <= high:
        raise argparse.ArgumentTypeError(f"need 0 < MIN <= MAX, got {text!r}")
    return low, high


def kill_loop(schedule: list[float], start, working, after_kill, on_progress=None) -> list[dict]:
    """The kill loop. For each life: start() a worker; working(worker) is True once it applied
    something and False when nothing is left to do (the loop then ends early); let it live
    `life` seconds, wherever that leaves it, and SIGKILL it. after_kill(k, life, worker,
    exit_code) makes the log entry (exit_code: None, or the code it crashed itself with)."""
    log = []
    for k, life in enumerate(schedule, 1):
        worker = start()
        if not working(worker):
            worker.kill()
            break
        time.sleep(life)  # the fault schedule itself: the kill lands wherever the worker happens to be
        exit_code = worker.proc.poll()
        worker.kill()
        log.append(after_kill(k, life, worker, exit_code))
        if on_progress:
            on_progress(f"kill {k} of {len(schedule)}")
    return log


# --- stalls --------------------------------------------------------------------------

def stall_count(events: int, slow_every: int) -> int:
    """How many handlers a run's --slow-every stalls: each N-th event, once."""
    return events // slow_every if slow_every else 0


# --- service restarts ----------------------------------------------------------------

def postgres_restart_immediate(deadline_s: float = 60.0) -> float:
    """Stop PostgreSQL in immediate mode (no checkpoint, every backend killed: crash recovery
    on start), start it again, and return how long until it answered."""
    _, home = stack.postgres_paths()
    started = time.monotonic()
    stopped = stack.pg_ctl("-m", "immediate", "-w", "-t", str(int(deadline_s)), "stop")
    if stopped.returncode != 0:
        raise stack.StackError(f"pg_ctl stop -m immediate failed: {stopped.stderr.strip()}")
    begun = stack.pg_ctl("-l", home / "postgres.log", "-w", "-t", str(int(deadline_s)), "start")
    if begun.returncode != 0:
        raise stack.StackError(f"PostgreSQL did not come back: {begun.stderr.strip()}\n"
                               f"{stack.tail(home / 'postgres.log')}")
    stack.wait_for(lambda: stack.postgres_connect("postgres"), deadline_s, "PostgreSQL answering after a restart")
    return time.monotonic() - started


def kafka_kill() -> None:
    """SIGKILL the broker this checkout started: no controlled shutdown, no log flush."""
    pid = stack.kafka_pid()
    if pid is None:
        raise stack.StackError("no broker started by stack.py is running")
    os.kill(pid, signal.SIGKILL)
    end = time.monotonic() + 30
    while stack.pid_alive(pid) and time.monotonic() < end:
        with contextlib.suppress(ChildProcessError):  # reap it if this process started it
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.1)
    stack.KAFKA_PID.unlink(missing_ok=True)


def broker_restart() -> float:
    """SIGKILL the broker and start it again; how long it was out."""
    hit = time.monotonic()
    kafka_kill()
    stack.kafka_up()
    return time.monotonic() - hit


# --- network partitions --------------------------------------------------------------

def service_ports() -> tuple[int, int]:
    """(Kafka's port, Postgres's port): the links a namespace's bridge can cut."""
    return stack.kafka_address()[1], stack.postgres_params()["port"]


def isolated() -> netlab.Namespace:
    """A network namespace whose links to both services run through a bridge this process holds."""
    return netlab.Namespace(f"lab-{uuid.uuid4().hex[:6]}", list(service_ports()))


def cut(ns: netlab.Namespace, port: int, seconds: float) -> float:
    """Blackhole one link of `ns` for `seconds`, then heal it, whatever happens meanwhile."""
    ns.bridge.cut(port)
    try:
        time.sleep(seconds)
    finally:
        ns.bridge.heal(port)
    return seconds


def inject(fault: str, ns: netlab.Namespace | None = None, outage_s: float = 0) -> float:
    """One fault of FAULTS, healed before it returns; how long the service (or link) was out."""
    if fault == "pg-restart":
        return postgres_restart_immediate()
    if fault == "broker-restart":
        return broker_restart()
    kafka_port, pg_port = service_ports()
    return cut(ns, kafka_port if fault == "partition-broker" else pg_port, outage_s)


# --- the replicated lab (stack.py up --replicated) ------------------------------------

CLUSTER_FAULTS = ("leader-kill", "leader-pause", "controller-kill", "isolate-leader", "pg-failover",
                  "pg-failover-stalled")


def leaders(topic: str) -> dict[int, int]:
    """partition -> the node leading it now."""
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient({"bootstrap.servers": stack.CLUSTER_BROKERS}).list_topics(topic, timeout=10)
    return {p.id: p.leader for p in metadata.topics[topic].partitions.values()}


def leader_of(topic: str) -> int:
    """The node that leads most of `topic`'s partitions: the one whose loss moves the most."""
    counts = collections.Counter(leaders(topic).values())
    return counts.most_common(1)[0][0]


def node_kill(node: int) -> None:
    pid = stack.node_pid(node)
    if pid is None:
        raise stack.StackError(f"Kafka node {node} is not running")
    os.kill(pid, signal.SIGKILL)
    end = time.monotonic() + 30
    while stack.pid_alive(pid) and time.monotonic() < end:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.1)


def node_start(node: int, deadline_s: float = 120.0) -> None:
    """Start a killed node again and wait until it answers and sees the whole cluster."""
    stack.start_node(node)
    _, host, port = stack.cluster_nodes()[node - 1]
    stack.wait_for(lambda: stack.kafka_answers(brokers=f"{host}:{port}", expect=len(stack.cluster_nodes())),
                   deadline_s, f"Kafka node {node} back", stack.node_home(node) / "kafka.log")


def leader_kill(topic: str, down_s: float = 10.0) -> dict:
    """SIGKILL the leader of most of `topic`'s partitions; start it again after `down_s`."""
    node = leader_of(topic)
    node_kill(node)
    time.sleep(down_s)
    node_start(node)
    return {"node": node}


def leader_pause(topic: str, pause_s: float = 15.0) -> dict:
    """SIGSTOP the leader for `pause_s`, then SIGCONT: a node that is alive but says nothing."""
    node = leader_of(topic)
    pid = stack.node_pid(node)
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(pause_s)
    finally:
        os.kill(pid, signal.SIGCONT)
    return {"node": node}


def node_stop(node: int, deadline_s: float = 60.0) -> None:
    """SIGTERM: a controlled shutdown, which hands the node's leaderships over first."""
    pid = stack.node_pid(node)
    if pid is None:
        return
    os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + deadline_s
    while stack.pid_alive(pid) and time.monotonic() < end:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.2)
    if stack.pid_alive(pid):
        node_kill(node)


def in_sync(topic: str, node: int) -> bool:
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient({"bootstrap.servers": stack.CLUSTER_BROKERS}).list_topics(topic, timeout=10)
    return all(node in p.isrs for p in metadata.topics[topic].partitions.values())


def prefer_leaders(topic: str) -> None:
    """A preferred-leader election for `topic`: each partition back to the first of its replicas."""
    from confluent_kafka import ElectionType
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": stack.CLUSTER_BROKERS})
    partitions = [TopicPartition(topic, p) for p in leaders(topic)]
    with contextlib.suppress(KafkaException):  # ELECTION_NOT_NEEDED where it leads already
        admin.elect_leaders(ElectionType.PREFERRED, partitions).result(timeout=30)


def isolate_leader(topic: str, isolate_s: float = 15.0) -> dict:
    """Cut every link of the node leading most of `topic`'s partitions, for `isolate_s`, and heal it.

    A node's links can be cut only if it runs in a network namespace whose bridge this
    process holds, so first it moves there: a controlled shutdown, a start inside, and a
    preferred-leader election that gives it its partitions back. Then every byte to and
    from it (clients, the other brokers, the controllers) stops at the bridge, both ways,
    until the heal. Afterwards it moves back the same way (the bridge ends with this process)."""
    node = leader_of(topic)
    nodes = stack.cluster_nodes()
    port = nodes[node - 1][2]
    others = [q for n, _, p in nodes if n != node for q in (p, p + 1)]
    node_stop(node)
    ns = netlab.Namespace(f"kafka{node}-{uuid.uuid4().hex[:6]}", others, served=[port, port + 1])
    try:
        stack.start_node(node, prefix=ns.prefix)
        stack.wait_for(lambda: stack.kafka_answers(brokers=f"localhost:{port}", expect=len(nodes)), 120,
                       f"node {node} up inside its namespace", stack.node_home(node) / "kafka.log")
        harness.wait_until(lambda: in_sync(topic, node), 120, f"node {node} back in sync", interval_s=0.5)
        prefer_leaders(topic)
        harness.wait_until(lambda: node in leaders(topic).values(), 60, f"node {node} leading again")
        led = sum(1 for leader in leaders(topic).values() if leader == node)
        ns.bridge.cut_all()
        try:
            time.sleep(isolate_s)
        finally:
            ns.bridge.heal_all()
        harness.wait_until(lambda: in_sync(topic, node), 120, f"node {node} in sync after the heal", interval_s=0.5)
    finally:
        node_stop(node)
        ns.close()
        node_start(node)
    return {"node": node, "partitions_led": led}


def controller_kill(down_s: float = 10.0) -> dict:
    """SIGKILL the active KRaft controller; start it again after `down_s`."""
    node = stack.active_controller()
    if node is None:
        raise stack.StackError("no active controller found in the nodes' logs")
    node_kill(node)
    time.sleep(down_s)
    node_start(node)
    return {"node": node}


def processes_of(pid: int) -> list[int]:
    """A postmaster and its children (the backends, the WAL sender, ...)."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                children.append(int(stat.parent.name))
    return [pid, *children]


def pg_failover(stall_s: float = 0.0) -> dict:
    """The primary dies at once, as its machine would, and the standby is promoted.

    With `stall_s`, the primary's WAL sender is paused first for that long, while the
    consumers go on committing: under async replication those commits exist on the
    primary alone when it dies. The promoted node gets synchronous_standby_names = '':
    it has no standby of its own, and under sync its commits would wait for one forever."""
    primary = stack.pg_primary()
    standby = next(n for n in stack.PG_NODES if n != primary)
    senders = []
    if stall_s:
        with stack.pg_node_connect(primary) as conn:
            senders = [row[0] for row in conn.execute("SELECT pid FROM pg_stat_replication")]
        for pid in senders:
            os.kill(pid, signal.SIGSTOP)
        time.sleep(stall_s)
    postmaster = stack.pg_node_pid(primary)
    doomed = processes_of(postmaster)
    for pid in doomed:  # all of them stop at the same instant; then none of them runs another line
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    hit = time.monotonic()
    for pid in doomed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    promoted = stack.pg_node_ctl(standby, "promote", "-w", "-t", "60")
    if promoted.returncode != 0:
        raise stack.StackError(f"pg_ctl promote of {standby} failed: {promoted.stderr.strip()}")
    with stack.pg_node_connect(standby) as conn:
        conn.execute("ALTER SYSTEM SET synchronous_standby_names = ''")
        conn.execute("SELECT pg_reload_conf()")
    stack.record_pg_primary(standby)
    return {"killed": primary, "promoted": standby, "stalled_senders": len(senders),
            "promoted_after_s": round(time.monotonic() - hit, 2)}


def inject_cluster(fault: str, topic: str, config: dict) -> dict:
    """One fault of CLUSTER_FAULTS, healed (or failed over) before it returns."""
    if fault == "leader-kill":
        return leader_kill(topic, config.get("down_s", 10.0))
    if fault == "leader-pause":
        return leader_pause(topic, config.get("pause_s", 15.0))
    if fault == "controller-kill":
        return controller_kill(config.get("down_s", 10.0))
    if fault == "isolate-leader":
        return isolate_leader(topic, config.get("isolate_s", 15.0))
    return pg_failover(config.get("stall_s", 4.0) if fault == "pg-failover-stalled" else 0.0)


# --- M6's schedules ------------------------------------------------------------------

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


def fault_schedule(fault: str, space, ns, config: dict, label: str, in_handler=None, alive=lambda: True) -> list[dict]:
    """The fault schedule: --faults of them, --every-s apart, each healed and followed by a credit,
    unless `alive()` turns False first (every worker has exited: the schedule ends there, and
    the recovery phase counts what is missing as lost; resume_s is then None).
    `in_handler` (a Worker): each fault lands instead while that worker is inside a handler,
    stalled (--slow-every), i.e. before the credit it is handling is written and its offset
    committed: a zombie by construction rather than by chance, as long as the stall outlasts
    the harness's reaction (a log line read, polled every 0.1 s)."""
    fault_log = []
    for k in range(1, config["faults"] + 1):
        if in_handler is None:
            time.sleep(config["every_s"])  # the schedule: faults land wherever the consumers are
        else:
            seen = in_handler.counts.get("stalls", 0)
            harness.wait_until(lambda seen=seen: in_handler.counts.get("stalls", 0) > seen, 120,
                               f"{label}: the cut-off consumer to stall in a handler")
        hit = time.time()
        outage = inject(fault, ns, config["outage_s"])
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


# --- M10: pauses, graceful stops, refused connections, commits the client never hears of ----

MORE_FAULTS = ("pause-consumer", "pause-postgres", "sigterm", "pg-max-connections", "lost-commit-reply",
               "disk-full", "offsets-expired", "topic-recreated")


def pause(pid: int, seconds: float, watch: dict | None = None) -> dict:
    """SIGSTOP `pid` (a long GC pause, a frozen VM) for `seconds`, then SIGCONT, whatever happens.
    `watch`: name -> a function asked every quarter second from half a second into the pause;
    returned: name -> whether it ever answered True while the process stood still."""
    seen = {name: False for name in watch or {}}
    end = time.monotonic() + seconds
    # Signals go through a pidfd: if the process dies while it stands still (a harness kills
    # it, Postgres reaps a backend), its pid may be reused, and a SIGCONT by number would then
    # reach a stranger. A pidfd names this process only.
    pidfd = os.pidfd_open(pid)
    # The SIGCONT is a timer's, not the loop's: a look that blocks on the stopped process (a
    # query that waits on its locks) must not stretch the pause past `seconds`.
    resume = threading.Timer(seconds, _continue, (pidfd,))
    try:
        signal.pidfd_send_signal(pidfd, signal.SIGSTOP)
        resume.start()
        time.sleep(min(0.5, seconds))
        while time.monotonic() < end and resume.is_alive():
            for name, look in (watch or {}).items():
                seen[name] = seen[name] or bool(look())
            time.sleep(max(0.0, min(0.25, end - time.monotonic())))
    finally:
        resume.cancel()
        resume.join()  # a timer already running has sent its SIGCONT before the pidfd closes
        _continue(pidfd)
        os.close(pidfd)
    return seen


def stopped_until(pid: int, resume_when, deadline_s: float) -> threading.Thread:
    """SIGSTOP `pid` now; a thread sends SIGCONT once `resume_when()` answers True (asked every
    0.2 s) or `deadline_s` has passed, whichever comes first. Returned: that thread, to join."""
    pidfd = os.pidfd_open(pid)
    signal.pidfd_send_signal(pidfd, signal.SIGSTOP)

    def hold():
        try:
            end = time.monotonic() + deadline_s
            while time.monotonic() < end and not resume_when():
                time.sleep(0.2)
        finally:
            _continue(pidfd)
            os.close(pidfd)

    thread = threading.Thread(target=hold, name=f"stopped-{pid}", daemon=True)
    thread.start()
    return thread


def _continue(pidfd: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # it may have been killed while it stood still
        signal.pidfd_send_signal(pidfd, signal.SIGCONT)


def idle_in_transaction(application_name: str) -> bool:
    """Whether the backend of the client that named itself `application_name` sits idle inside
    an open transaction (its client stopped mid-way)."""
    with psycopg.connect(stack.SUPERUSER_DSN, autocommit=True) as su:
        return su.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                          "AND state = 'idle in transaction'", (application_name,)).fetchone()[0] > 0


def backend_of(application_name: str) -> dict | None:
    """The server process serving the client that named itself `application_name`: its pid,
    state and the statement it runs or ran last; None if it has none."""
    with psycopg.connect(stack.SUPERUSER_DSN, autocommit=True) as su:
        row = su.execute("SELECT pid, state, left(query, 60) FROM pg_stat_activity WHERE application_name = %s "
                         "AND backend_type = 'client backend' ORDER BY backend_start DESC LIMIT 1",
                         (application_name,)).fetchone()
    return {"pid": row[0], "state": row[1], "query": row[2]} if row else None


def waiting_on_a_lock(role: str) -> bool:
    """Whether any backend of `role` waits on a heavyweight lock (a row another transaction holds)."""
    with psycopg.connect(stack.SUPERUSER_DSN, autocommit=True) as su:
        return su.execute("SELECT count(*) FROM pg_stat_activity WHERE usename = %s AND wait_event_type = 'Lock'",
                          (role,)).fetchone()[0] > 0


def graceful_stop(worker, deadline_s: float) -> dict:
    """SIGTERM, as systemd or Kubernetes stops a consumer; how long it took to exit, with what
    code, and whether it had to be SIGKILLed at the deadline (a hang is reported, not hidden)."""
    started = time.monotonic()
    worker.proc.send_signal(signal.SIGTERM)
    try:
        worker.proc.wait(deadline_s)
        killed = False
    except subprocess.TimeoutExpired:
        worker.proc.kill()
        killed = True
    worker.stop()  # reaps it and closes its log
    return {"exit_s": round(time.monotonic() - started, 2), "exit_code": worker.proc.returncode,
            "sigkilled": killed}


@contextlib.contextmanager
def role_of_its_own(dsn: str):
    """`dsn` as a fresh login role with the consumer's rights (a member of its role), dropped on
    the way out: a fault that refuses a role its connections refuses this one, and no other
    run or test on the same server notices."""
    params = conninfo_to_dict(dsn)
    role = f"lab_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(stack.SUPERUSER_DSN, autocommit=True) as su:
        su.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {} IN ROLE {}").format(
            sql.Identifier(role), sql.Literal(role), sql.Identifier(params["user"])))
        try:
            yield make_conninfo(dsn, user=role, password=role)
        finally:
            su.execute(sql.SQL("ALTER ROLE {} CONNECTION LIMIT 0").format(sql.Identifier(role)))
            su.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
            su.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@contextlib.contextmanager
def connections_refused(role: str):
    """While inside, the server refuses every new connection of `role` ("too many connections
    for role", the FATAL a role at its limit, or a server at max_connections, answers); the
    connections it already has stay. Lifted on the way out, whatever happens."""
    with psycopg.connect(stack.SUPERUSER_DSN, autocommit=True) as su:
        su.execute(sql.SQL("ALTER ROLE {} CONNECTION LIMIT 0").format(sql.Identifier(role)))
        try:
            yield
        finally:
            su.execute(sql.SQL("ALTER ROLE {} CONNECTION LIMIT -1").format(sql.Identifier(role)))


class CommitReplyDropper:
    """A TCP proxy in front of Postgres that, once armed, lets the next transaction that wrote
    reach the server and commit there, and cuts the client's connection before the reply
    reaches it: the indeterminate commit, landed on purpose rather than by luck.

    It reads the server's side of the wire protocol (v3: a type byte, then a length that
    counts itself). Each exchange (the messages up to and including a ReadyForQuery) that
    begins while the proxy is armed is held back until its ReadyForQuery, then forwarded,
    unless it is the one to drop: it ended with status 'I' (idle: no transaction open any
    more) and the transaction it ended changed a row (a COMMIT after an INSERT that inserted,
    or a write outside a transaction, as p's one statement is). A transaction that changed
    nothing (an inbox hit) is not dropped: its lost reply could not duplicate anything. The
    first of the connections to finish such an exchange claims the drop; the others forward
    theirs. The start of a session (authentication, up to its first ReadyForQuery) is never
    held. The client must not ask for TLS (sslmode=disable)."""

    ROW_COUNTED = ("INSERT", "UPDATE", "DELETE", "MERGE")  # tags that end in the rows they changed
    # A SELECT wrote only if its statement did (a data-modifying WITH, as p's one statement is):
    # the client's side of the wire says which, statement by statement
    # ("FOR UPDATE" is a lock, not a write: it is cut out before the search.) A function that
    # writes, called from a plain SELECT, is not seen; no consumer here does that, or COPY.
    WRITES = re.compile(rb"\b(INSERT|UPDATE|DELETE|MERGE)\b", re.IGNORECASE)
    ROW_LOCKS = re.compile(rb"\bFOR\s+(NO\s+KEY\s+UPDATE|UPDATE|KEY\s+SHARE|SHARE)\b", re.IGNORECASE)

    @classmethod
    def writes(cls, statement: bytes) -> bool:
        """Whether a statement's text asks to change rows (a data-modifying WITH included)."""
        return bool(cls.WRITES.search(cls.ROW_LOCKS.sub(b" ", statement)))

    @classmethod
    def wrote_rows(cls, tag: str, asked_to_write: bool) -> bool:
        """Whether a command changed a row: "INSERT 0 0" (an inbox hit, ON CONFLICT DO NOTHING)
        did not, so the COMMIT of a skip is not the indeterminate commit this fault is about. A
        data-modifying SELECT's rows are not counted on the wire: it counts as a write."""
        words = tag.split(" ")
        first, last = words[0], words[-1]
        if first in cls.ROW_COUNTED:
            return last.isdigit() and int(last) > 0
        return first == "SELECT" and bool(asked_to_write)

    def __init__(self, upstream: tuple[str, int]):
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.armed = threading.Event()
        self.fired = threading.Event()
        self._claim = threading.Lock()
        self.dropped: list[str] = []  # the tags of each exchange whose reply never reached its client
        threading.Thread(target=self._accept, daemon=True).start()

    def dsn(self, dsn: str) -> str:
        return make_conninfo(dsn, host="127.0.0.1", hostaddr="127.0.0.1", port=self.port, sslmode="disable",
                             gssencmode="disable")

    def arm(self) -> None:
        with self._claim:
            self.fired.clear()
            self.armed.set()

    def disarm(self) -> None:
        with self._claim:
            self.armed.clear()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() blocked in its thread
        self.listener.close()

    def _claim_drop(self, tags: list[str]) -> bool:
        """Whether this exchange is the armed one's to drop; only one is, across connections."""
        with self._claim:
            if not self.armed.is_set():
                return False
            self.armed.clear()
            self.dropped.append(" / ".join(tags))
            self.fired.set()
            return True

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            try:
                server = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            for sock in (client, server):  # small messages one at a time: Nagle would hold each ~40 ms
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            writes: collections.deque[bool] = collections.deque()  # per exchange the client asked for, in order
            threading.Thread(target=self._upstream, args=(client, server, writes), daemon=True).start()
            threading.Thread(target=self._downstream, args=(server, client, writes), daemon=True).start()

    def _upstream(self, client: socket.socket, server: socket.socket, writes: collections.deque) -> None:
        """Forward the client's bytes; note, for each exchange it asks for (a Query, or the
        messages up to a Sync), whether one of its statements writes. Prepared statements are
        remembered by name, since a Bind may name one parsed exchanges ago."""
        buffer, started = bytearray(), False
        prepared: dict[bytes, bool] = {}
        current = False  # the extended-protocol exchange in hand writes
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                buffer += data
                start = 0
                while True:
                    if not started:  # the startup message: a length, no type byte
                        if len(buffer) - start < 4:
                            break
                        length = int.from_bytes(buffer[start:start + 4], "big")
                        if len(buffer) - start < length:
                            break
                        start, started = start + length, True
                        continue
                    if len(buffer) - start < 5:
                        break
                    length = int.from_bytes(buffer[start + 1:start + 5], "big")
                    if len(buffer) - start < 1 + length:
                        break
                    kind, body = buffer[start:start + 1], bytes(buffer[start + 5:start + 1 + length])
                    start += 1 + length
                    if kind == b"Q":
                        writes.append(self.writes(body))
                    elif kind == b"P":  # Parse: statement name, query text
                        name, _, rest = body.partition(b"\0")
                        prepared[name] = self.writes(rest.split(b"\0", 1)[0])
                        current = current or prepared[name]
                    elif kind == b"B":  # Bind: portal name, statement name
                        statement = body.split(b"\0", 2)[1]
                        current = current or prepared.get(statement, False)
                    elif kind == b"S":
                        writes.append(current)
                        current = False
                # appended before the bytes go on: the server's ReadyForQuery can only follow them
                server.sendall(bytes(buffer[:start]))
                del buffer[:start]
        with contextlib.suppress(OSError):
            server.shutdown(socket.SHUT_WR)

    def _downstream(self, server: socket.socket, client: socket.socket, writes: collections.deque) -> None:
        buffer = bytearray()
        held: bytearray | None = None  # the exchange in hand, if it began while armed
        tags: list[str] = []
        # between: the last message was a ReadyForQuery, so the next one begins an exchange; False at
        # first, since the start of a session (its authentication) is never held
        between = session_started = False
        wrote_rows = False  # the open transaction (or the exchange in hand) changed a row
        failed = False  # the exchange in hand has had an ErrorResponse
        try:
            while data := server.recv(65536):
                buffer += data
                start = 0
                while len(buffer) - start >= 5:
                    length = int.from_bytes(buffer[start + 1:start + 5], "big")
                    if len(buffer) - start < 1 + length:
                        break
                    message = bytes(buffer[start:start + 1 + length])
                    start += 1 + length
                    kind, body = message[:1], message[5:]
                    if between:
                        between = False
                        held = bytearray() if self.armed.is_set() else None  # decided once per exchange
                    if held is not None:
                        held += message
                    else:
                        client.sendall(message)
                    if kind == b"C":  # CommandComplete: its tag, e.g. b"INSERT 0 1\0"
                        tags.append(body.rstrip(b"\0").decode(errors="replace"))
                    if kind == b"E":  # ErrorResponse: this exchange's transaction did not commit
                        failed = True
                    if kind != b"Z":
                        continue
                    # the session's first ReadyForQuery answers its start-up, not an exchange
                    asked_to_write = writes.popleft() if session_started and writes else False
                    wrote_rows = wrote_rows or any(self.wrote_rows(tag, asked_to_write) for tag in tags)
                    # 'E': the transaction failed, nothing it did will commit; an error with 'I'
                    # (a COMMIT the server refused, a failed statement outside a transaction)
                    # ended it rolled back: either way there is no commit whose reply to drop
                    if body == b"E" or failed:
                        wrote_rows = False
                    if held is not None and body == b"I" and wrote_rows and self._claim_drop(tags):
                        return  # the server has committed; the client never hears of it
                    if held is not None:
                        client.sendall(held)
                    if body == b"I":  # no transaction open any more: the next one starts clean
                        wrote_rows = False
                    held, tags, between, session_started, failed = None, [], True, True, False
                del buffer[:start]
        except OSError:
            pass
        finally:
            for sock in (client, server):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()


class SmallDisk:
    """A filesystem of `size_mb` (a tmpfs the harness mounts, as root) holding a tablespace, to
    which a run moves its tables and their indexes; `fill()` takes every byte left, as a log or
    another table would, and `free()` gives the room back. The server then fails to extend a
    table with DiskFull (53100) on the consumer's live connection. The WAL stays where it was."""

    def __init__(self, size_mb: int = 64):
        if os.geteuid() != 0:
            raise RuntimeError("disk-full mounts a tmpfs, which needs root")
        self.name = f"lab_small_{uuid.uuid4().hex[:8]}"
        self.path = Path("/tmp") / self.name
        self.path.mkdir(mode=0o700)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=700", "tmpfs", str(self.path)],
                       check=True, capture_output=True, text=True)
        user = stack.server_user()
        if user is not None:  # the server's user must own its tablespace's directory
            os.chown(self.path, user.pw_uid, user.pw_gid)
        self.filler = self.path / "filler"
        with psycopg.connect(stack.SUPERUSER_DSN, autocommit=True) as su:
            su.execute(sql.SQL("CREATE TABLESPACE {} LOCATION {}").format(sql.Identifier(self.name),
                                                                          sql.Literal(str(self.path))))

    def take(self, schema: str) -> None:
        """Move `schema`'s tables and indexes onto the small disk."""
        with psycopg.connect(stack.SUPERUSER_DSN, autocommit=True) as su:
            relations = su.execute("SELECT c.relkind, c.relname FROM pg_class c JOIN pg_namespace n "
                                   "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind IN ('r', 'i')",
                                   (schema,)).fetchall()
            for kind, name in relations:
                su.execute(sql.SQL("ALTER {} {} SET TABLESPACE {}").format(
                    sql.SQL("TABLE" if kind == "r" else "INDEX"), sql.Identifier(schema, name),
                    sql.Identifier(self.name)))

    def fill(self) -> int:
        """Write until the filesystem is full; the bytes written."""
        written, chunk = 0, b"\0" * (1 << 20)
        with open(self.filler, "wb", buffering=0) as f:
            while True:
                try:
                    written += f.write(chunk)
                except OSError:  # ENOSPC: full; what fits of a last chunk is written
                    return written

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def close(self) -> None:
        """Drop the tablespace (whatever was in it must be dropped first) and unmount."""
        self.free()
        with psycopg.connect(stack.SUPERUSER_DSN, autocommit=True) as su:
            su.execute(sql.SQL("DROP TABLESPACE IF EXISTS {}").format(sql.Identifier(self.name)))
        subprocess.run(["umount", str(self.path)], check=True, capture_output=True, text=True)
        self.path.rmdir()


def offsets_retention_minutes() -> int:
    """The broker's offsets.retention.minutes: how long a group with no member keeps its offsets."""
    admin = AdminClient({"bootstrap.servers": harness.BROKERS})
    broker = next(iter(admin.list_topics(timeout=30).brokers))
    resource = ConfigResource(ConfigResource.Type.BROKER, str(broker))
    configs = admin.describe_configs([resource])[resource].result(timeout=30)
    return int(configs["offsets.retention.minutes"].value)


def group_offsets(group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offset per partition of `topic` (none if it has none)."""
    admin = AdminClient({"bootstrap.servers": harness.BROKERS})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    answer = admin.list_consumer_group_offsets([request])[group].result(timeout=30)
    return {tp.partition: tp.offset for tp in answer.topic_partitions if tp.offset >= 0}


def offsets_expire(group: str, topic: str, partitions: int, deadline_s: float, delete: bool = False) -> float:
    """Wait, with the group empty, until the broker has expired its committed offsets
    (offsets.retention.minutes after its last member left, at its next check); or, with
    `delete`, delete the group at once, which leaves the state an expiry leaves: no offsets.
    Returns the seconds it took."""
    started = time.monotonic()
    if delete:
        admin = AdminClient({"bootstrap.servers": harness.BROKERS})
        admin.delete_consumer_groups([group], request_timeout=30)[group].result(timeout=30)
    while group_offsets(group, topic, partitions):
        if time.monotonic() - started > deadline_s:
            raise RuntimeError(f"group {group}'s offsets did not expire within {deadline_s:g} s")
        time.sleep(2)
    return round(time.monotonic() - started, 1)


def recreate_topic(topic: str, timeout_s: float = 60.0) -> None:
    """Delete `topic` and create it again under the same name with as many partitions, as an
    operator resetting a topic would: a new log, its offsets from 0, and a new topic ID."""
    admin = AdminClient({"bootstrap.servers": harness.BROKERS})
    old = admin.list_topics(topic, timeout=timeout_s).topics[topic].partitions
    partitions, replicas = len(old), len(old[0].replicas)  # as it was: a cluster's topic keeps its replication
    harness.delete_topics(topic, timeout_s=timeout_s)
    end = time.monotonic() + timeout_s
    while True:  # the deletion completes in the background; until it has, a create is refused
        futures = admin.create_topics([NewTopic(topic, partitions, replicas)], operation_timeout=timeout_s)
        try:
            futures[topic].result(timeout=timeout_s)
            return
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS or time.monotonic() > end:
                raise
            time.sleep(0.5)
