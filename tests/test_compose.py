"""docker-compose.yml describes the same services as stack.py. No Docker engine runs
here, so this reads the file: versions, ports, credentials and broker settings. The
compose file serves the default settings, so those are compared, whatever the env says."""
import re
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict, make_conninfo

import stack
from settings import DEFAULT_BROKERS, DEFAULT_DSN, ROLES, ROOT, SUPERUSER

COMPOSE = (Path(__file__).resolve().parent.parent / "docker-compose.yml").read_text()
# Settings whose value depends on where the broker runs, so they differ by design.
PLACEMENT = {"controller.quorum.voters", "listeners", "advertised.listeners", "log.dirs"}


def compose_value(name: str) -> str:
    match = re.search(rf"^\s+{re.escape(name)}:\s*\"?([^\"\n]*)\"?\s*$", COMPOSE, re.M)
    assert match, f"docker-compose.yml has no {name}"
    return match.group(1).strip()


def test_images_pin_the_same_versions():
    assert f"image: apache/kafka:{stack.KAFKA_VERSION}\n" in COMPOSE
    assert f"image: postgres:{stack.POSTGRES_VERSION}\n" in COMPOSE


def test_same_ports_and_credentials():
    _, kafka_port = stack.kafka_address(DEFAULT_BROKERS)
    pg = stack.postgres_params(make_conninfo(DEFAULT_DSN, user=SUPERUSER, password=SUPERUSER))
    assert f'"{kafka_port}:{kafka_port}"' in COMPOSE
    assert f'"{pg["port"]}:5432"' in COMPOSE
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
    assert "- ./roles.sql:/docker-entrypoint-initdb.d/roles.sql:ro" in COMPOSE
    roles_sql = (ROOT / "roles.sql").read_text()
    assert conninfo_to_dict(DEFAULT_DSN)["user"] == "inbox_consumer"
    for role in ROLES:
        assert f"'{role}'" in roles_sql, role
