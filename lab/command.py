"""A reader's own consumer, measured like the lab's: the flags a harness takes for it, and
one line for a command that cannot be measured.

Claim: the harness needs to know how to start a consumer, not how it is written. A command
(any language) is started by the shell with the run's topic, group and database in its
environment (docs/your-consumer.md), killed with its whole process group, started again
whenever it exits, as a supervisor would, and judged on the rows its effects query returns.

    python measure_kill.py --command "python consume.py" --runs 1 --kills 5
"""
import argparse
import functools
import subprocess
import sys
from pathlib import Path

from lab import harness, registry

VERSION_TIMEOUT_S = 30.0


def not_blank(what: str):
    """An argparse type: the text as given, refused in one line when there is nothing in it."""
    def check(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"{what} is empty")
        return text
    return check


def command_flags(parser, which) -> None:
    """--command in the mutually exclusive group `which` (beside --variant), and its options."""
    which.add_argument("--command", metavar="CMD", type=not_blank("the command"),
                       help="your own consumer, started as `sh -c CMD` (docs/your-consumer.md)")
    parser.add_argument("--effects", metavar="SQL", type=not_blank("the effects query"),
                        help="with --command: a query whose rows' first column is the event ID of each effect "
                             "(default: schema.sql's ledger, and the balances are checked)")
    parser.add_argument("--schema", metavar="FILE", type=Path,
                        help="with --command: SQL run once in each run's schema before your command starts; "
                             "your command's role may read and write the tables it makes")
    parser.add_argument("--version-command", metavar="CMD", type=not_blank("the version command"),
                        help="with --command: prints your consumer's version, recorded with the results")


def declare_command(parser, args) -> None:
    """Checks the command's flags and declares it to the registry: args.variant names it."""
    if not args.command:
        if args.effects or args.schema or args.version_command:
            parser.error("--effects, --schema and --version-command go with --command")
        return
    setup = None
    if args.schema:
        try:
            setup = args.schema.read_text()
        except OSError as e:
            parser.error(f"--schema {args.schema}: {e.strerror}")
    if args.effects:  # it runs as a subquery, where a statement's closing semicolon is an error
        args.effects = args.effects.strip().rstrip(";").rstrip()
    args.variant = [registry.add_command(args.command, setup=setup, effects=args.effects)]


def version_of(command: str) -> str:
    """The first line the version command prints, or why there is none."""
    try:
        done = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, timeout=VERSION_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"(no version: `{command}` ran over {VERSION_TIMEOUT_S:g} s)"
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0] if done.returncode == 0 and lines else f"(no version: `{command}` exited {done.returncode})"


def command_config(args) -> dict:
    """What a results file records of a command: itself, its version, its effects query and schema."""
    if not args.command:
        return {}
    return {"command": args.command, "effects": args.effects or "SELECT event_id FROM ledger",
            **({"schema_file": str(args.schema)} if args.schema else {}),
            **({"command_version": version_of(args.version_command)} if args.version_command else {})}


def command_errors(main):
    """A measurement's main() that says in one line why a command cannot be measured (exit 1),
    with the command's last lines beneath, instead of a traceback."""
    @functools.wraps(main)
    def wrapped(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except harness.CommandError as e:
            first, _, rest = str(e).partition("\n")
            script = Path(getattr(sys.modules.get(main.__module__), "__file__", None) or sys.argv[0]).name
            print(f"{script}: {first}", file=sys.stderr)
            for line in rest.splitlines()[-15:]:
                print(f"  | {line}", file=sys.stderr)
            return 1
    return wrapped
