"""stack.py against the running services: versions as the services report them, and an
idempotent `up`. (The services themselves were started by `make test` through stack.py.)"""
import socket
import subprocess
import sys

import pytest

import harness
import stack

pytestmark = pytest.mark.usefixtures("services")


def run_stack(*args, timeout=120):
    return subprocess.run([sys.executable, str(harness.ROOT / "stack.py"), *args], capture_output=True, text=True,
                          timeout=timeout)


def test_status_reports_the_versions_the_services_give():
    result = run_stack("status")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"PostgreSQL {stack.POSTGRES_VERSION}" in result.stdout
    if stack.kafka_pid():
        assert f"Kafka {stack.KAFKA_VERSION}" in result.stdout
    else:  # a broker this checkout did not start (docker compose, another checkout): no log to read
        assert "Kafka unknown (not started by stack.py)" in result.stdout


def test_up_twice_is_harmless():
    result = run_stack("up")
    if stack.kafka_pid():
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
