"""The settings every script, harness and test reads, from one place: the environment.

    KAFKA_BROKERS=localhost:59092
    CONSUMER_DSN=postgresql://inbox_consumer:inbox_consumer@localhost:55432/consumer

CONSUMER_DSN is the consumer's role (roles.sql). The other roles' DSNs default to
the same server and database with their own role and password, so pointing
CONSUMER_DSN at another server moves them all; set one to override it alone:

    ADMIN_DSN       inbox_owner: schema set-up and DDL; the harnesses and tests read as it
    RETENTION_DSN   inbox_retention: retention.py
    PROVIDER_DSN    inbox_provider: provider.py
    PUBLISHER_DSN   inbox_publisher: relay.py
    SUPERUSER_DSN   the superuser initdb makes (patterns); stack.py alone uses it

The replicated lab's addresses, which `stack.py env --replicated` turns into
KAFKA_BROKERS and CONSUMER_DSN for a shell:

    CLUSTER_KAFKA_BROKERS   localhost:59192,localhost:59194,localhost:59196
    CLUSTER_CONSUMER_DSN    ...@localhost:55532,localhost:55533/consumer?target_session_attrs=read-write
"""
import os
from pathlib import Path

from psycopg.conninfo import make_conninfo

import consume
from variants.common import role_dsn

DEFAULT_DSN = "postgresql://inbox_consumer:inbox_consumer@localhost:55432/consumer"
DEFAULT_BROKERS = "localhost:59092"
DSN = consume.DSN  # read from the environment by consume.py and publish.py themselves, as in the post
BROKERS = consume.BROKERS
as_role = role_dsn  # each role's DSN on CONSUMER_DSN's server, unless its own variable is set


ADMIN_DSN = as_role("inbox_owner", "ADMIN_DSN")
RETENTION_DSN = as_role("inbox_retention", "RETENTION_DSN")
PROVIDER_DSN = as_role("inbox_provider", "PROVIDER_DSN")
PUBLISHER_DSN = as_role("inbox_publisher", "PUBLISHER_DSN")
# The replicated lab (stack.py up --replicated): three Kafka nodes, and a Postgres primary with one
# streaming standby, on ports of their own, so it can run beside the single-node stack. Its DSN
# lists both servers; target_session_attrs=read-write finds whichever is the primary.
CLUSTER_BROKERS = os.environ.get("CLUSTER_KAFKA_BROKERS", "localhost:59192,localhost:59194,localhost:59196")
CLUSTER_DSN = os.environ.get(
    "CLUSTER_CONSUMER_DSN",
    "postgresql://inbox_consumer:inbox_consumer@localhost:55532,localhost:55533/consumer"
    "?target_session_attrs=read-write")

# roles.sql makes them
ROLES = ("inbox_owner", "inbox_consumer", "inbox_retention", "inbox_provider", "inbox_publisher")
SUPERUSER = "patterns"  # initdb's, and docker-compose's POSTGRES_USER; its password is its name too
SUPERUSER_DSN = os.environ.get("SUPERUSER_DSN") or make_conninfo(DSN, user=SUPERUSER, password=SUPERUSER)

# Not settings but places, named once: the checkout, and where results are written.
ROOT = Path(__file__).resolve().parent.parent
LAB = ROOT / "lab"
RESULTS = ROOT / "results"
