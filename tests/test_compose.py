"""docker-compose.yml describes the same services as stack.py. No Docker engine runs
here, so this reads the file: versions, ports, credentials and broker settings. The
compose file serves the default settings, so those are compared, whatever the env says."""
import os
import re
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from lab import stack
from lab.settings import DEFAULT_BROKERS, DEFAULT_DSN, ROLES, ROOT, SUPERUSER

COMPOSE = (Path(__file__).resolve().parent.parent / "docker-compose.yml").read_text()
# Settings whose value depends on where the broker runs, so they differ by design.
PLACEMENT = {"controller.quorum.voters", "listeners", "advertised.listeners", "log.dirs"}


# The single-node services, apart from the replicated profile's (whose settings differ by design).
SINGLE = COMPOSE.split("\nservices:\n", 1)[1].split("\n  kafka-1:\n", 1)[0]


def compose_value(name: str) -> str:
    match = re.search(rf"^\s+{re.escape(name)}:\s*\"?([^\"\n]*)\"?\s*$", SINGLE, re.M)
    assert match, f"docker-compose.yml has no {name}"
    return match.group(1).strip()


def test_images_pin_the_same_versions():
    assert f"image: apache/kafka:{stack.KAFKA_VERSION}\n" in COMPOSE
    assert f"image: postgres:{stack.POSTGRES_VERSION}\n" in COMPOSE


def test_same_ports_and_credentials():
    _, kafka_port = stack.kafka_address(DEFAULT_BROKERS)
    pg = stack.postgres_params(make_conninfo(DEFAULT_DSN, user=SUPERUSER, password=SUPERUSER))
    # on the loopback alone: PLAINTEXT Kafka and a superuser named in this file, never on a network
    assert f'"127.0.0.1:{kafka_port}:{kafka_port}"' in COMPOSE
    assert f'"127.0.0.1:{pg["port"]}:5432"' in COMPOSE
    assert not re.search(r'"\d+:\d+"', COMPOSE), "a port published on every interface"
    assert compose_value("POSTGRES_USER") == pg["user"]
    assert compose_value("POSTGRES_PASSWORD") == pg["password"]
    assert compose_value("POSTGRES_DB") == pg["dbname"]
    assert f"max_connections={stack.MAX_CONNECTIONS}" in COMPOSE


def test_same_broker_settings():
    _, port = stack.kafka_address(DEFAULT_BROKERS)
    properties = dict(line.split("=", 1) for line in stack.kafka_properties(port, "localhost").splitlines()
                      if line and not line.startswith("#"))
    for key, value in properties.items():
        if key in PLACEMENT:
            continue
        assert compose_value("KAFKA_" + key.upper().replace(".", "_")) == value, key


def test_same_roles():
    """The compose file's Postgres runs roles.sql at its first start, as stack.py up does, and
    roles.sql makes every role the settings' defaults log in as."""
    assert "- ./lab/roles.sql:/docker-entrypoint-initdb.d/roles.sql:ro" in COMPOSE
    roles_sql = (ROOT / "lab" / "roles.sql").read_text()
    assert conninfo_to_dict(DEFAULT_DSN)["user"] == "inbox_consumer"
    # the post's files read their own defaults, as in the post: they must be the lab's
    import consume
    import publish
    assert consume.DSN == DEFAULT_DSN or "CONSUMER_DSN" in os.environ
    assert consume.BROKERS == publish.BROKERS == DEFAULT_BROKERS or "KAFKA_BROKERS" in os.environ
    for role in ROLES:
        assert f"'{role}'" in roles_sql, role


def test_the_replicated_profile_has_the_replicated_labs_broker_settings():
    """Its nodes share one block of settings: the replicated lab's, but for where each listens
    (and the listener names, which Docker's network needs)."""
    block = COMPOSE.split("x-kafka-node-env:", 1)[1].split("\nconfigs:", 1)[0]
    values = dict(re.findall(r"^\s+(KAFKA_\w+):\s*\"?([^\"\n]*?)\"?\s*$", block, re.M))
    ports = [stack.kafka_address(b)[1] for b in ("localhost:59192", "localhost:59194", "localhost:59196")]
    properties = dict(line.split("=", 1) for line in stack.kafka_properties(ports[0], "localhost", node=1, voters="x",
                                                                             replicas=3).splitlines()
                      if line and not line.startswith("#"))
    by_design = PLACEMENT | {"node.id", "inter.broker.listener.name", "listener.security.protocol.map"}
    for key, value in properties.items():
        if key not in by_design:
            assert values.get("KAFKA_" + key.upper().replace(".", "_")) == value, key
    for port in ports:
        assert f'["127.0.0.1:{port}:{port}"]' in COMPOSE
    assert '["127.0.0.1:55532:5432"]' in COMPOSE and '["127.0.0.1:55533:5432"]' in COMPOSE
