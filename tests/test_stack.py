"""stack.py against the running services: versions as the services report them, and an
idempotent `up`. (The services themselves were started by `make test` through stack.py.)"""
import os
import socket
import subprocess
import sys

import pytest

from lab import harness, stack

pytestmark = pytest.mark.usefixtures("services")


def run_stack(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "lab.stack", *args], capture_output=True, text=True, cwd=harness.ROOT,
                          timeout=timeout)


def ours() -> bool:
    """Whether this checkout started the broker. `make test` starts the services where the
    default addresses point, so there it must have; a reader's own services (docker compose,
    KAFKA_BROKERS elsewhere) take the other branches below."""
    started = stack.kafka_pid() is not None
    if "KAFKA_BROKERS" not in os.environ and os.environ.get("CI") == "true":
        assert started, "make test started the broker, yet this checkout has no pid for it"
    return started


def test_status_reports_the_versions_the_services_give():
    result = run_stack("status")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"PostgreSQL {stack.POSTGRES_VERSION}" in result.stdout
    if ours():
        assert f"Kafka {stack.KAFKA_VERSION}" in result.stdout
    else:  # a broker this checkout did not start (docker compose, another checkout): no log to read
        assert "Kafka unknown (not started by stack.py)" in result.stdout


def test_up_twice_is_harmless():
    result = run_stack("up")
    if ours():
        assert result.returncode == 0, result.stderr
        assert "kafka: already up" in result.stdout
    else:  # it must refuse to start a second broker over the one that is there
        assert result.returncode == 1
        assert "is taken by a process stack.py did not start" in result.stderr


def test_a_port_taken_by_someone_else_is_named_in_one_line(monkeypatch):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        monkeypatch.setattr(stack, "kafka_address", lambda brokers=None: ("localhost", port))
        monkeypatch.setattr(stack, "kafka_pid", lambda: None)
        with pytest.raises(stack.StackError, match=f"port {port} is taken by a process stack.py did not start"):
            stack.kafka_up(deadline_s=5)


def test_the_postgres_port_taken_by_someone_else_is_named_in_one_line(monkeypatch):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        real = stack.postgres_params()
        monkeypatch.setattr(stack, "postgres_params", lambda dsn=None: {**real, "port": port})
        monkeypatch.setattr(stack, "postgres_pid", lambda: None)
        with pytest.raises(stack.StackError, match=f"port {port} is taken by a process stack.py did not start"):
            stack.postgres_up(deadline_s=5)


def test_a_data_directory_from_another_postgres_says_what_to_do(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "PG_VERSION").write_text("17\n")
    with pytest.raises(stack.StackError, match=r"made by PostgreSQL 17, and this is 18\.6: .*delete .*make up"):
        stack.check_data_version(tmp_path / "data")
    (tmp_path / "data" / "PG_VERSION").write_text(stack.POSTGRES_VERSION.split(".")[0] + "\n")
    stack.check_data_version(tmp_path / "data")  # its own major version: fine


@pytest.mark.parametrize("tool, needed", [("java", "install a JDK 17"), ("mvn", "install Maven")])
def test_a_missing_tool_is_named_with_how_to_get_it(tool, needed, monkeypatch, tmp_path):
    real_which = stack.shutil.which
    monkeypatch.setattr(stack.shutil, "which", lambda name: None if name == tool else real_which(name))
    monkeypatch.setattr(stack, "KAFKA_LIBS", tmp_path / "libs")  # no jars yet: a fetch is needed
    with pytest.raises(stack.StackError, match=needed) as raised:
        stack.require_java() if tool == "java" else stack.fetch_kafka()
    assert "\n" not in str(raised.value)


def test_a_failed_jar_fetch_is_one_line_with_the_log_named(monkeypatch, tmp_path):
    monkeypatch.setattr(stack, "KAFKA_HOME", tmp_path)
    monkeypatch.setattr(stack, "KAFKA_LIBS", tmp_path / "libs")
    monkeypatch.setattr(stack, "ROOT", tmp_path)  # no lab/pom.xml here: mvn fails as it would offline
    with pytest.raises(stack.StackError) as raised:
        stack.fetch_kafka()
    assert "\n" not in str(raised.value) and "Maven Central" in str(raised.value)
    assert str(tmp_path / "mvn.log") in str(raised.value) and (tmp_path / "mvn.log").read_text()


def test_the_lab_ports_are_added_to_the_reserved_ones_as_ranges():
    assert stack.merged_port_ranges("", [59193, 59192, 55432]) == "55432,59192-59193"
    assert stack.merged_port_ranges("8080,59192-59193\n", [59194, 59092]) == "8080,59092,59192-59194"
    assert stack.merged_port_ranges("59192-59197", [59194]) == "59192-59197"


def test_a_pid_file_names_a_server_only_when_that_process_is_ours(tmp_path):
    """A pid file left behind (a node stopped hours ago, a crash) may name a pid the system has
    since given to another stack's broker: `make down` once stopped two measurements' brokers
    that way. A pid counts only when its process names our config file or data directory."""
    ours, theirs = tmp_path / "ours" / "server.properties", tmp_path / "theirs" / "server.properties"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(theirs)])
    try:
        pid_file = tmp_path / "kafka.pid"
        pid_file.write_text(f"{sleeper.pid}\n")
        # until it has exec'd, the child is a copy of this process, with this command line
        harness.wait_until(lambda: str(theirs) in stack.cmdline_of(sleeper.pid), 30, "the sleeper's command line")
        assert stack.running_pid(pid_file, ours) is None  # alive, but another stack's
        assert stack.running_pid(pid_file, theirs) == sleeper.pid
    finally:
        sleeper.kill()
        sleeper.wait()
    assert stack.running_pid(pid_file, theirs) is None  # gone
    assert stack.running_pid(tmp_path / "no.pid", theirs) is None
