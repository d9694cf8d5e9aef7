"""A variant is one file that declares itself (lab/registry.py): every declared variant has
its run function, a bad declaration says what is wrong, the harness passes a variant only
the flags it reads, and a throwaway variant declared in a file of its own, outside the tree,
runs through M1's harness like any other."""
import ast
import json
import textwrap

import pytest

import measure_kill
from lab import harness, registry
from lab.settings import ROOT
from tests.seeds import shifted


def test_every_declared_variant_names_a_function_its_module_defines():
    for name, variant in registry.everything().items():
        path = ROOT / (variant.module.replace(".", "/") + ".py")
        defined = {node.name for node in ast.parse(path.read_text()).body if isinstance(node, ast.FunctionDef)}
        assert variant.run in defined, f"{name}: {variant.module} has no {variant.run}()"
        assert variant.kind in registry.KINDS and variant.label.startswith(name + ":"), name


def test_a_declaration_that_is_not_a_literal_or_has_an_unknown_field_is_refused(tmp_path, monkeypatch):
    bad = tmp_path / "bad_variant.py"
    bad.write_text("LABEL = 'x'\nVARIANTS = {'x': {'label': LABEL}}\n")
    (tmp_path / "plain.py").write_text("X = 1\n")
    assert registry.declared_in(tmp_path / "plain.py") is None
    with pytest.raises(registry.DeclarationError, match="must be a literal"):
        registry.declared_in(bad)
    with pytest.raises(registry.DeclarationError, match="unknown fields"):
        registry.variant_of("x", {"label": "x: y", "batch": True}, "bad_variant")
    with pytest.raises(registry.DeclarationError, match="kind"):
        registry.variant_of("x", {"label": "x: y", "kind": "daemon"}, "bad_variant")


def test_a_declaration_reads_as_python_would_bind_it_or_says_what_is_wrong(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("VARIANTS = {'x': {'label': 'x: one'}}\nVARIANTS = {'y': {'label': 'y: two'}}\n")
    assert registry.declared_in(module) == {"y": {"label": "y: two"}}  # the last binding, as import would
    for source, says in (("VARIANTS = ('x',)\n", "must be a dict"), ("VARIANTS = {\n", "never closed"),
                         ("VARIANTS: dict\n", None)):
        module.write_text(source)
        if says is None:
            assert registry.declared_in(module) is None
        else:
            with pytest.raises(registry.DeclarationError, match=says):
                registry.declared_in(module)
    with pytest.raises(registry.DeclarationError, match="list of names"):
        registry.variant_of("x", {"label": "x: y", "reads": "batch"}, "m")
    with pytest.raises(registry.DeclarationError, match="a variant may read"):
        registry.variant_of("x", {"label": "x: y", "reads": ["bacth"]}, "m")


def test_what_the_harness_reads_of_a_variant_without_loading_it_is_what_the_variant_says():
    from variants import consume_eos, consume_external, shortcuts

    assert harness.said_by("variants/consume_eos.py", "ABORTED_LOG") == consume_eos.ABORTED_LOG
    assert harness.said_by("variants/consume_external.py", "LEASE_TAKEN_OVER_LOG") == \
        consume_external.LEASE_TAKEN_OVER_LOG
    assert harness.LEASE_RUNNING_OUT == consume_external.LeaseRunningOut.__name__
    assert registry.setup_sql("qx-eos-keyed").startswith("CREATE UNIQUE INDEX IF NOT EXISTS ledger_event_id_key")
    assert registry.setup_sql("upsert") == registry.setup_sql("versioned") == shortcuts.STATE_TABLE
    assert registry.setup_sql("c") is None
    # another module's constant, by package.module:NAME: p's schema, for what is measured beside p
    from variants import consume_pipelined
    assert registry.setup_sql("p") == registry.setup_sql("db") == registry.setup_sql("p-bare") == \
        consume_pipelined.LEDGER_WITHOUT_FOREIGN_KEY


def test_a_setup_that_names_no_string_constant_is_refused_in_one_line(tmp_path, monkeypatch):
    try:
        for setup, says in (("variants.consume_pipelined:NO_SUCH_CONSTANT", "variants/consume_pipelined.py"),
                            ("variants.no_such_module:SQL", "variants/no_such_module.py")):
            declared = tmp_path / f"ref_{abs(hash(setup))}.py"
            declared.write_text(f"VARIANTS = {{'ref-x': {{'label': 'ref-x: y', 'setup': {setup!r}}}}}\n")
            monkeypatch.setenv(registry.EXTRA, str(declared))
            registry.everything.cache_clear()
            with pytest.raises(registry.DeclarationError,
                               match=f"names {setup}, which is not a string literal of {says}"):
                registry.setup_sql("ref-x")
    finally:  # the registry as the other tests know it, whatever happened
        monkeypatch.undo()
        registry.everything.cache_clear()


def test_a_variant_gets_only_the_flags_it_reads():
    config = {"work_ms": 5, "batch": 50, "connections": 2, "lanes": 4, "crash_after": "r1-7", "policy": "keys"}
    assert harness.worker_args("c", config) == ("--work-ms", 5, "--crash-after", "r1-7")
    assert harness.worker_args("p", config) == ("--work-ms", 5, "--batch", 50, "--connections", 2,
                                                "--crash-after", "r1-7")
    assert harness.worker_args("a1", config) == ("--work-ms", 5)  # auto-commit: no crash point of its own
    assert harness.worker_args("ext", config, "http://x") == ("--work-ms", 5, "--policy", "keys",
                                                              "--provider-url", "http://x")
    assert registry.names(group="post") == ("a1", "a2", "b", "c")


THROWAWAY = '''
"""A variant of the test's own, outside the tree: c's loop, declared here and nowhere else."""
VARIANTS = {"throwaway-c": {"label": "throwaway-c: consume.run, declared outside the tree",
                            "reads": ["crash_after"]}}


def run_worker(lab):
    import consume

    lab.supervised(lambda: consume.run(lab.args.topic, lab.args.group, lab.apply, stop=lab.stop,
                                       after_db_commit=lab.after_db_commit, **lab.overrides))
'''


@pytest.mark.slow
@pytest.mark.usefixtures("services")
def test_a_throwaway_variant_in_a_file_of_its_own_runs_through_m1(tmp_path, monkeypatch):
    path = tmp_path / "throwaway_variant.py"
    path.write_text(textwrap.dedent(THROWAWAY))
    monkeypatch.setenv(registry.EXTRA, "")
    registry.add_file(path)
    try:
        assert registry.get("throwaway-c").path == str(path.resolve())
        config = {"events": 400, "partitions": 3, "work_ms": 5, "kills": 2, "life": (0.5, 1.5), "seed": shifted(7),
                  "session_timeout_ms": 2000}
        record = measure_kill.run_once("throwaway-c", 1, config)
        assert record["kills"] == 2, record["kill_log"]
        assert (record["duplicates"], record["lost"], record["unexpected"]) == (0, 0, 0), json.dumps(record)[:500]
        assert record["ledger_rows"] == 400
    finally:
        monkeypatch.delenv(registry.EXTRA)
        registry.everything.cache_clear()
