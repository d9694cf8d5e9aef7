"""`python -m lab.stack VERB`: start, stop and inspect the embedded services (lab/stack's
docstring), and the replicated lab with --replicated (lab/stack/cluster.py)."""
import sys

from lab import cli, stack
from lab.settings import BROKERS, ROOT
from lab.stack import cluster


def up() -> None:
    stack.CACHE.mkdir(parents=True, exist_ok=True)
    stack.KAFKA_HOME.mkdir(exist_ok=True)
    stack.reserve_ports([stack.kafka_address()[1], stack.kafka_address()[1] + 1, stack.postgres_params()["port"]])
    stack.postgres_up()
    stack.kafka_up()


def down() -> None:
    stack.kafka_down()
    stack.postgres_down()


def status() -> int:
    """Print each service's state and self-reported version; 0 only if both are up."""
    healthy = 0
    host, port = stack.kafka_address()
    try:
        answering = stack.kafka_answers()
    except Exception:
        answering = False
    pid = stack.kafka_pid()
    if answering:
        healthy += 1
        version = stack.kafka_version() if pid else "unknown (not started by stack.py)"
        print(f"kafka     up    Kafka {version} on {host}:{port}" + (f" (pid {pid})" if pid else ""))
    else:
        print(f"kafka     down  nothing answers on {host}:{port}")
    p = stack.postgres_params()
    try:
        version = stack.postgres_version()
        healthy += 1
        print(f"postgres  up    PostgreSQL {version} on {p['host']}:{p['port']} database {p['dbname']}")
    except Exception as e:
        print(f"postgres  down  {p['host']}:{p['port']}: {str(e).strip().splitlines()[0]}")
    return 0 if healthy == 2 else 1


def main() -> int:
    parser = cli.Parser(description="Start, stop and inspect the embedded Kafka and PostgreSQL.")
    parser.add_argument("verb", choices=["up", "down", "status", "fetch", "env", "tables"],
                        help="tables: the demo's tables in the default database (up makes them too; for Docker)")
    parser.add_argument("--replicated", action="store_true",
                        help="the replicated lab: three Kafka nodes, a Postgres primary and a standby")
    parser.add_argument("--pg-replication", choices=cluster.REPLICATION_MODES,
                        help="with --replicated: the standby's streaming, async or sync (default: as it was, "
                             "or async)")
    args = parser.parse_args()
    if args.pg_replication and not args.replicated:
        parser.error("--pg-replication goes with --replicated")
    try:
        if args.verb == "env":
            print(cluster.cluster_env() if args.replicated else f"export KAFKA_BROKERS='{BROKERS}'")
        elif args.verb == "up" and args.replicated:
            cluster.cluster_up(args.pg_replication)
        elif args.verb == "status" and args.replicated:
            return cluster.cluster_status()
        elif args.verb == "down" and args.replicated:
            cluster.cluster_down()
        elif args.verb == "up":
            up()
        elif args.verb == "down":
            down()
            cluster.cluster_down()
        elif args.verb == "tables":
            with stack.postgres_connect() as conn:
                conn.execute((ROOT / "lab" / "roles.sql").read_text())
                stack.demo_tables(conn)
            print("postgres: the demo's tables are in the default database")
        elif args.verb == "fetch":
            stack.require_java()
            stack.fetch_kafka()
            print(f"kafka: jars in {stack.KAFKA_LIBS}")
        else:
            return status()
    except stack.StackError as e:
        print(f"stack.py {args.verb}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
