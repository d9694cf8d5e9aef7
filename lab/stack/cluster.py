"""The replicated lab, beside the single-node stack on ports of its own (settings.CLUSTER_*):
three Kafka nodes in combined mode with static voters, and a Postgres primary with one
standby cloned by pg_basebackup, streaming async or sync. Faults on it are lab/faults/'s.

Claim: `python -m lab.stack up --replicated` brings the five processes up and answers only
once the Kafka quorum has a leader and the standby streams; the primary's name is recorded,
since a failover moves it. Built on lab/stack's single-node primitives (the same Kafka launch,
initdb and server settings).
"""
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

from lab import stack
from lab.settings import CLUSTER_BROKERS, CLUSTER_DSN, ROOT

# --- the replicated lab: three Kafka nodes, a Postgres primary and its standby -----

CLUSTER_HOME = stack.CLUSTER_HOME
PG_NODES = ("a", "b")  # the two Postgres servers; which one is the primary is recorded, and moves on failover
REPLICATION_MODES = ("async", "sync")


def cluster_nodes() -> list[tuple[int, str, int]]:
    """(node id, host, client port) of each Kafka node in CLUSTER_BROKERS; its controller
    listens on the port after its client port."""
    return [(n, *stack.kafka_address(address)) for n, address in enumerate(CLUSTER_BROKERS.split(","), 1)]


def node_pid(node: int) -> int | None:
    home = stack.node_home(node)
    return stack.running_pid(home / "kafka.pid", home / "server.properties")


def start_node(node: int, prefix: tuple = ()) -> subprocess.Popen:
    """Start one Kafka node of the lab (a fault's restart uses this too; `prefix`, a namespace)."""
    nodes = cluster_nodes()
    _, host, port = nodes[node - 1]
    voters = ",".join(f"{n}@127.0.0.1:{p + 1}" for n, _, p in nodes)
    id_file = CLUSTER_HOME / "cluster.id"
    if not id_file.exists():
        id_file.write_text(stack.new_cluster_id() + "\n")
    home = stack.node_home(node)
    return stack.launch_kafka(home, stack.kafka_properties(port, host, home / "data", node=node, voters=voters,
                                                           replicas=len(nodes)),
                              id_file.read_text().strip(), heap=("512m", "512m"), prefix=prefix)


# KRaft's own line for a node taking a role: "[RaftManager id=2] Completed transition to Leader(... epoch=3"
RAFT_TRANSITION = re.compile(r"\[RaftManager id=(\d+)\] Completed transition to (Leader|FollowerState)\(.*?"
                             r"epoch=(\d+)(?:, leader=(\d+))?")


def active_controller() -> int | None:
    """The KRaft leader (the active controller), from the nodes' logs: the newest epoch's leader."""
    newest = (-1, None)
    for node, _, _ in cluster_nodes():
        for m in RAFT_TRANSITION.finditer(stack.tail(stack.node_home(node) / "kafka.log", 20000)):
            leader = int(m.group(1)) if m.group(2) == "Leader" else int(m.group(4) or 0) or None
            newest = max(newest, (int(m.group(3)), leader), key=lambda pair: pair[0])
    return newest[1]


def cluster_kafka_up(deadline_s: float = 180.0) -> None:
    nodes = cluster_nodes()
    for node, _, port in nodes:
        if node_pid(node) is None:
            for p in (port, port + 1):
                if stack.port_open(p):
                    raise stack.StackError(f"port {p} is taken by a process stack.py did not start: stop it, or set "
                                     "CLUSTER_KAFKA_BROKERS to free ports")
            start_node(node)
    # Each node answers, and sees the other two: the cluster has formed.
    for node, host, port in nodes:
        stack.wait_for(lambda h=host, p=port: stack.kafka_answers(brokers=f"{h}:{p}", expect=len(nodes)), deadline_s,
                 f"Kafka node {node} on {host}:{port} answering with {len(nodes)} brokers",
                 stack.node_home(node) / "kafka.log")
    print(f"kafka: {len(nodes)} nodes up on " + ", ".join(f"{h}:{p} (node {n}, pid {node_pid(n)})"
                                                        for n, h, p in nodes))


def pg_cluster_ports() -> dict[str, int]:
    """Each Postgres server's port, in CLUSTER_DSN's order: a, then b."""
    from psycopg.conninfo import conninfo_to_dict

    ports = [int(p) for p in str(conninfo_to_dict(CLUSTER_DSN).get("port", "")).split(",") if p]
    if len(ports) != len(PG_NODES):
        raise stack.StackError(f"CLUSTER_CONSUMER_DSN must list {len(PG_NODES)} servers (host1:port1,host2:port2)")
    return dict(zip(PG_NODES, ports, strict=True))


def pg_node_data(name: str) -> Path:
    _, home = stack.postgres_paths()
    return home.parent / "cluster-postgres" / name / "data"


def pg_node_ctl(name: str, *args) -> subprocess.CompletedProcess:
    install, _ = stack.postgres_paths()
    return stack.as_server_user([install / "bin" / "pg_ctl", "-D", pg_node_data(name), *args])


def pg_node_pid(name: str) -> int | None:
    return stack.running_pid(pg_node_data(name) / "postmaster.pid", pg_node_data(name))


def pg_node_connect(name: str, dbname: str = "postgres", timeout_s: int = 3):
    import psycopg

    p = stack.postgres_params()
    return psycopg.connect(host="127.0.0.1", port=pg_cluster_ports()[name], user=p["user"], password=p["password"],
                           dbname=dbname, connect_timeout=timeout_s, autocommit=True)


def pg_primary() -> str:
    """Which server is the primary now: recorded at set-up, and moved by a failover."""
    recorded = CLUSTER_HOME / "pg-primary"
    return recorded.read_text().strip() if recorded.exists() else PG_NODES[0]


def record_pg_primary(name: str) -> None:
    CLUSTER_HOME.mkdir(parents=True, exist_ok=True)
    (CLUSTER_HOME / "pg-primary").write_text(name + "\n")


def pg_replication_mode() -> str:
    recorded = CLUSTER_HOME / "pg-replication"
    return recorded.read_text().strip() if recorded.exists() else "async"


def standby_names(mode: str) -> str:
    """synchronous_standby_names for a primary in `mode`; always '' on a standby (a promoted
    clone would otherwise wait for a standby it does not have, and every commit would hang)."""
    return "*" if mode == "sync" else ""


def pg_node_conf(name: str, primary: str, mode: str) -> str:
    ports = pg_cluster_ports()
    conf = ("wal_level = replica\n"
            "wal_keep_size = '512MB'\n"  # a standby that falls behind for a while can still catch up
            "hot_standby = on\n")
    if name == primary:
        return conf + f"synchronous_standby_names = '{standby_names(mode)}'\n"
    p = stack.postgres_params()
    return conf + ("synchronous_standby_names = ''\n"
                   f"primary_conninfo = 'host=127.0.0.1 port={ports[primary]} user={p['user']} "
                   f"password={p['password']} application_name=standby_{name}'\n")


def start_pg_node(name: str, primary: str, mode: str, deadline_s: float = 60.0) -> None:
    data = pg_node_data(name)
    stack.write_server_conf(data, pg_cluster_ports()[name], pg_node_conf(name, primary, mode), shared_buffers="128MB")
    started = pg_node_ctl(name, "-l", data.parent / "postgres.log", "-w", "-t", str(int(deadline_s)), "start")
    if started.returncode != 0:
        log = data.parent / "postgres.log"
        raise stack.StackError(f"PostgreSQL {name} did not start: {started.stderr.strip()}\n"
                               f"--- last lines of {log} ---\n{stack.tail(log)}")


def clone_standby(name: str, primary: str, mode: str) -> None:
    """Make `name` a fresh streaming standby of `primary`: its old data (a dead primary's,
    perhaps, on another timeline) is thrown away and copied again with pg_basebackup."""
    install, _ = stack.postgres_paths()
    data = pg_node_data(name)
    shutil.rmtree(data, ignore_errors=True)
    data.parent.mkdir(parents=True, exist_ok=True)
    user = stack.server_user()
    if user is not None:
        os.chown(data.parent, user.pw_uid, user.pw_gid)
    p = stack.postgres_params()
    copied = subprocess.run(
        [str(install / "bin" / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(pg_cluster_ports()[primary]), "-U",
         p["user"], "-D", str(data), "-X", "stream", "-c", "fast"], capture_output=True, text=True, cwd="/",
        env={"PATH": "/usr/bin:/bin", "PGPASSWORD": p["password"]},
        **({"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []} if user else {}))
    if copied.returncode != 0:
        raise stack.StackError(f"pg_basebackup of {name} from {primary} failed: {copied.stderr.strip()}")
    (data / "standby.signal").touch()
    if user is not None:
        os.chown(data / "standby.signal", user.pw_uid, user.pw_gid)
    start_pg_node(name, primary, mode)


def streaming(primary: str) -> list[tuple]:
    """pg_stat_replication on the primary: (standby, state, sync_state, replay lag in bytes)."""
    with pg_node_connect(primary) as conn:
        return conn.execute("SELECT application_name, state, sync_state, "
                            "pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)::bigint FROM pg_stat_replication"
                            ).fetchall()


def set_replication(mode: str) -> None:
    """Switch the running primary between async and sync streaming, and record it."""
    with pg_node_connect(pg_primary()) as conn:
        conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{standby_names(mode)}'")
        conn.execute("SELECT pg_reload_conf()")
    (CLUSTER_HOME / "pg-replication").write_text(mode + "\n")


def cluster_postgres_up(mode: str | None, deadline_s: float = 60.0) -> None:
    install, home = stack.postgres_paths()
    mode = mode or pg_replication_mode()
    primary = pg_primary()
    standby = next(n for n in PG_NODES if n != primary)
    CLUSTER_HOME.mkdir(parents=True, exist_ok=True)
    if pg_node_pid(primary) is None:
        data = pg_node_data(primary)
        if not (data / "PG_VERSION").exists():
            data.parent.mkdir(parents=True, exist_ok=True)
            user = stack.server_user()
            if user is not None:
                os.chown(data.parent, user.pw_uid, user.pw_gid)
            stack.initdb(install, data.parent, data, stack.postgres_params())
        # Async until its standby streams: a sync primary with no standby waits on every commit.
        start_pg_node(primary, primary, "async")
    stack.wait_for(lambda: pg_node_connect(primary), deadline_s, f"PostgreSQL {primary} (primary) answering")
    # Async until the standby streams: a sync primary without one makes every commit wait, and
    # nothing below may wait on a standby that is not there yet (it is set to `mode` at the end).
    set_replication("async")
    with pg_node_connect(primary) as conn:
        dbname = stack.postgres_params()["dbname"]
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (dbname,)).fetchone():
            conn.execute(f'CREATE DATABASE "{dbname}"')
    with pg_node_connect(primary, stack.postgres_params()["dbname"]) as conn:
        conn.execute((ROOT / "lab" / "roles.sql").read_text())
        stack.demo_tables(conn)
    if pg_node_pid(standby) is None:
        clone_standby(standby, primary, mode)
    stack.wait_for(lambda: any(row[1] == "streaming" for row in streaming(primary)), deadline_s,
             f"PostgreSQL {standby} streaming from {primary}")
    set_replication(mode)
    ports = pg_cluster_ports()
    print(f"postgres: primary {primary} on port {ports[primary]}, standby {standby} on port {ports[standby]} "
          f"({mode} replication)")


def cluster_up(mode: str | None) -> None:
    CLUSTER_HOME.mkdir(parents=True, exist_ok=True)
    stack.reserve_ports([q for _, _, port in cluster_nodes() for q in (port, port + 1)]
                        + list(pg_cluster_ports().values()))
    stack.fetch_kafka()
    cluster_postgres_up(mode)
    cluster_kafka_up()


def cluster_down() -> None:
    for node, _, _ in cluster_nodes():
        if (pid := node_pid(node)) is not None:
            os.kill(pid, signal.SIGCONT)  # a paused node (a fault) cannot stop
            stack.stop_pid(pid, f"kafka node {node}")
    for name in PG_NODES:
        if (pid := pg_node_pid(name)) is not None:
            os.kill(pid, signal.SIGCONT)
            pg_node_ctl(name, "-m", "fast", "-w", "-t", "60", "stop")
            print(f"postgres {name}: stopped (pid {pid})")


def cluster_status() -> int:
    """Each node's role and the partition leaders; each Postgres server's role, and the
    standby's replication state and lag. 0 only if all of it is up."""
    from confluent_kafka.admin import AdminClient

    healthy = True
    controller = active_controller()
    for node, host, port in cluster_nodes():
        pid = node_pid(node)
        print(f"kafka node {node}  {'up  ' if pid else 'down'}  broker+controller on {host}:{port}"
              + (f" (pid {pid})" if pid else "") + (", the active controller" if node == controller else ""))
        healthy &= pid is not None
    try:
        topics = AdminClient({"bootstrap.servers": CLUSTER_BROKERS}).list_topics(timeout=5).topics
        led = {}
        for name, topic in topics.items():
            for partition in topic.partitions.values():
                key = "internal" if name.startswith("__") else "topics"
                led.setdefault((partition.leader, key), 0)
                led[(partition.leader, key)] += 1
        for (leader, key), count in sorted(led.items()):
            print(f"  partitions led by node {leader}: {count} ({key})")
    except Exception as e:
        healthy = False
        print(f"  no metadata: {e}")
    primary = pg_primary()
    for name in PG_NODES:
        pid = pg_node_pid(name)
        role = "primary" if name == primary else "standby"
        print(f"postgres {name}  {'up  ' if pid else 'down'}  {role} on port {pg_cluster_ports()[name]}"
              + (f" (pid {pid})" if pid else ""))
        healthy &= pid is not None
    try:
        rows = streaming(primary)
        for standby, state, sync_state, lag in rows:
            print(f"  {standby}: {state}, {sync_state}, {lag} bytes behind")
        healthy &= bool(rows)
        if not rows:
            print("  no standby is streaming")
    except Exception as e:
        healthy = False
        print(f"  replication unknown: {str(e).strip().splitlines()[0]}")
    return 0 if healthy else 1


def cluster_env() -> str:
    """The two variables that point every script at the replicated lab, for a shell's eval."""
    return f"export KAFKA_BROKERS='{CLUSTER_BROKERS}'\nexport CONSUMER_DSN='{CLUSTER_DSN}'"
