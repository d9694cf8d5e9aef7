"""Variants whose workers live outside worker.py: the frameworks readers use instead of a
bare consumer loop (M9), and the post's shortcuts. worker.py hands each variant named in
VARIANTS to its module's `run_worker`; harness.Worker starts it with python_for(variant),
because a framework may need an environment of its own (Quix Streams pins a confluent-kafka
older than the lab's).

Kept apart so that adding one touches neither worker.py nor the harness: the figures of
every other variant stay measured by the code the repository holds (report.measured_by).

prepare(variant, dsn) runs what the variant needs of the schema first (harness.Worker
calls it). A module's contract: run_worker(args, stop, *, apply, after_db_commit, overrides, stall)
runs until `stop` is set, where `args` is worker.py's parsed command line (topic, group,
work_ms, ...), `apply(conn, event_id, event)` is the lab's credit (handler sleep, stalls,
first-effect line included), `after_db_commit(msg, outcome)` is the crash point,
`overrides` are the librdkafka settings the harness chose, `stall.maybe(conn,
event_id, event)` is M2's stall, for a variant that does not credit through `apply`, and
`first_effect(event_id)` prints worker.py's first-effect line once, for the same kind.
"""
import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# variant -> (module, the venv under ROOT it runs in, or None for the lab's own)
VARIANTS: dict[str, tuple[str, str | None]] = {
    **{v: ("variants.consume_faststream", None) for v in ("fs-default", "fs-ack", "fs-inbox")},
    **{v: ("variants.consume_quix", ".venv-quix") for v in ("qx-eos", "qx-eos-keyed")},
    **{v: ("variants.shortcuts", None) for v in ("upsert", "versioned", "offset-dedup")},
    # #31: p at a lower CPU cost, measured beside p, step by step (consume_lean.STEPS)
    **{v: ("variants.consume_lean", None) for v in ("p-lean-py", "p-lean-sql", "p-lean")},
    # #31: p without its inbox, to measure what the claim costs beside p (never a consumer to run)
    "p-bare": ("variants.consume_bare", None),
}


# The frameworks (M9): M1 and M2 run them side by side with `--variant frameworks`. The
# post's shortcuts (upsert, versioned, offset-dedup) meet the publishers' copies in M7b.
FRAMEWORKS = ("fs-default", "fs-ack", "fs-inbox", "qx-eos", "qx-eos-keyed")

# variant -> SQL its worker needs beyond schema.sql (a sink's unique key, a shortcut's own
# table), run by the schema's owner in the run's schema before the worker starts: the
# consumer's role may not run DDL.
SETUP: dict[str, str] = {
    # the key the sink's ON CONFLICT DO NOTHING needs: one ledger row per event ID
    "qx-eos-keyed": "CREATE UNIQUE INDEX IF NOT EXISTS ledger_event_id_key ON ledger (event_id)",
    # upsert and versioned set a state by business key; last_seq is versioned's version
    **{v: "CREATE TABLE IF NOT EXISTS account_state (account_id integer PRIMARY KEY, last_event text NOT NULL, "
          "last_seq bigint NOT NULL, last_amount bigint NOT NULL); "
          "GRANT SELECT, INSERT, UPDATE ON account_state TO inbox_consumer" for v in ("upsert", "versioned")},
    # the statement already guarantees what the ledger's foreign key checked (variants/consume_lean.py)
    "p-lean": "LEDGER_WITHOUT_FOREIGN_KEY",
}


def prepare(variant: str, dsn: str) -> None:
    """Run SETUP[variant], if any, as the owner, on the search path `dsn` names."""
    if not SETUP.get(variant):
        return
    setup = SETUP[variant]
    if setup.isidentifier():  # the name of a constant in the variant's own module
        setup = getattr(importlib.import_module(VARIANTS[variant][0]), setup)
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from lab.settings import ADMIN_DSN
    options = conninfo_to_dict(dsn).get("options")  # the run's search_path
    with psycopg.connect(make_conninfo(ADMIN_DSN, **({"options": options} if options else {})),
                         autocommit=True) as conn:
        conn.execute(setup)


def python_for(variant: str) -> str:
    """The interpreter a variant's worker runs under."""
    venv = VARIANTS.get(variant, (None, None))[1]
    if venv is None:
        return sys.executable
    python = ROOT / venv / "bin" / "python"
    if not python.exists():
        raise RuntimeError(f"variant {variant} runs in {venv}, which is not set up: run `make setup-frameworks`")
    return str(python)


def run(args, stop, **hooks) -> None:
    """The variant's run_worker, with worker.py's hooks (first_effect among them)."""
    importlib.import_module(VARIANTS[args.variant][0]).run_worker(args, stop, **hooks)
