"""The README's results tables are exactly what report.py makes of results/: no figure typed by hand."""
from lab import charts, claims, report


def test_readme_tables_match_results():
    assert report.main(["--check"]) == 0, "README.md or docs/ is stale: run `python -m lab.report` and commit"


def test_every_generated_section_has_its_markers_once():
    documents = [document.read_text() for document in report.DOCUMENTS]
    for name in report.SECTIONS:
        assert sum(text.count(f"<!-- report:{name} -->") for text in documents) == 1, name
        assert sum(text.count(f"<!-- /report:{name} -->") for text in documents) == 1, name


def test_an_empty_results_folder_gives_placeholders_not_a_crash(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "RESULTS", tmp_path)
    text = report.render(report.README.read_text())
    assert "_No `results/kill.json` yet: run `make measure`._" in text
    assert "_No `results/race.json` yet" in report.render((report.ROOT / "docs" / "race.md").read_text())


def test_every_chart_is_drawn_from_the_results_it_shows_and_shown():
    """A chart missing, or drawn from other results (or by other code) than those committed, fails
    here; so does one the README does not show."""
    assert charts.stale() == [], "run `python -m lab.report` and commit the charts"
    shown = report.README.read_text() + "".join(d.read_text().replace("](../results/", "](results/")
                                                  for d in report.DOCUMENTS[1:])
    for chart in charts.CHARTS:
        assert f"](results/{chart}.png)" in shown, chart


def test_a_chart_knows_when_its_results_changed(tmp_path, monkeypatch):
    monkeypatch.setattr(charts, "RESULTS", tmp_path)
    (tmp_path / "external.json").write_text((report.RESULTS / "external.json").read_text())
    monkeypatch.setattr(charts, "CHARTS", {"external": charts.CHARTS["external"]})
    assert charts.stale() == ["external.png (missing)"]
    charts.build()
    assert charts.stale() == []
    changed = (report.RESULTS / "external.json").read_text().replace('"runs": 5', '"runs": 6', 1)
    (tmp_path / "external.json").write_text(changed)
    assert charts.stale() == ["external.png (out of date)"]


def test_a_chart_is_out_of_date_when_a_helper_it_draws_with_changes():
    # saturation draws its panels with latency's code: a change there must redraw it too
    functions, constants = charts.drawn_by(charts.saturation)
    assert {"saturation", "latency", "tidy"} <= {f.__name__ for f in functions} and charts.kill not in functions
    assert "BLUE" in constants  # a colour changed is a chart changed


def test_a_section_names_the_code_its_runs_came_from_and_flags_what_changed_since():
    before_the_move = {"harness": "measure_kill", "runs": [{"commit": "98bf50c", "dirty": False}]}
    said = report.measured_by(before_the_move)
    assert said.startswith("code: commit 98bf50c; **changed since: ") and "consume.py" in said
    assert report.measured_by({"harness": "measure_kill", "runs": [{}]}).startswith("code: not recorded")
    assert "unknown here" in report.measured_by({"harness": "measure_kill", "runs": [{"commit": "0" * 12}]})


def test_a_section_is_checked_against_the_code_its_variants_run():
    # b's figures do not depend on the batched inbox; d's do. An unnamed variant: every file.
    assert report.code_of([{"variant": "b"}]).count("variants/consume_batched.py") == 0
    assert "variants/consume_batched.py" in report.code_of([{"variant": "b"}, {"variant": "d"}])
    assert "variants" in report.code_of([{"policy": "ext"}])
    assert {"consume.py", "lab/worker.py", "lab/harness.py"} <= set(report.code_of([{"variant": "c"}]))


def test_cpu_per_message_is_a_table_of_its_own_only_when_runs_recorded_it():
    stat = {"median": 2.0, "min": 1.0, "max": 3.0}
    cpu = {kind: stat for kind in (*report.CPU_KINDS, "total")}
    doc = {"summary": {"variants": {"c": {"runs": 5, "msgs_per_s": stat, "cpu_us_per_msg": cpu,
                                          "consumer_peak_rss_mib": stat},
                                    "raw": {"runs": 5, "msgs_per_s": stat}}}}
    table = report.cpu_table(doc)
    assert table.count("\n| ") == 1 and "| c: inbox + commit after the DB | 5 | 2.0 |" in table and "raw:" not in table
    assert report.cpu_table({"summary": {"variants": {"raw": {"runs": 5, "msgs_per_s": stat}}}}) == ""


def test_a_sweep_name_reads_as_words():
    assert report.named("p:3").endswith("one statement per batch, 3 consumers")
    assert report.named("p@2, 10,000 accounts").endswith(", 2 connections, 10,000 accounts")
    assert report.named("d@50").endswith(", 50 messages a batch") and report.named("k@16").endswith(", 16 lanes")
    assert report.named("d@1").endswith(", 1 message a batch") and report.named("c:1").endswith(", 1 consumer")


def test_the_growing_inbox_shows_cpu_from_its_runs_or_dashes():
    run = {"cpu_us_per_msg": {"consumer_python": 10.0, "consumer_librdkafka": 1.0, "postgres_backends": 20.0,
                              "total": 33.0}, "consumer_peak_rss_mib": 90.4}
    assert report.cpu_of_runs([run, dict(run, consumer_peak_rss_mib=90.0)]) == ("11.0", "20.0", "33.0", "90")
    assert report.cpu_of_runs([run, {}]) == ("–",) * 4


def test_cores_busy_is_cpu_per_message_times_the_rate():
    # 25 µs a message at 40,000 a second keeps one core busy
    stats = {"cpu_us_per_msg": {"total": {"median": 25.0}}, "msgs_per_s": {"median": 40_000.0}}
    assert report.cores_busy(stats) == "1.00"


def test_a_figure_depends_on_the_measuring_modules_its_script_imports():
    # throughput's figures move with the CPU sampler, not with the nemesis; the kill harness's the other way
    # (and with the publisher the harness imports: the workload)
    assert report.script_code("measure_throughput.py") == ("measure_throughput.py", "lab/cpu.py", "lab/publishing.py")
    assert "lab/nemesis.py" in report.script_code("measure_kill.py")
    assert "lab/netlab.py" in report.script_code("measure_kill.py")  # through the nemesis
    assert "lab/nemesis.py" not in report.code_of([{"variant": "c"}])


def test_the_ledger_stands_still_between_busy_buckets_only():
    timeline = {"bucket_s": 0.5, "credits_per_s": [0, 4, 0, 0, 0, 2, 2, 0]}
    assert report.longest_still(timeline) == 1.5  # three empty buckets between the first and last busy ones
    assert report.longest_still({"bucket_s": 0.5, "credits_per_s": [0, 0]}) == 0


def test_a_change_to_a_fault_flags_only_the_measurements_that_use_it():
    # nemesis.pause (and its CommitReplyDropper) serve M10, not M1: a change to them moves M10's
    # figures alone. Read from today's files, so no commit of the history is needed.
    kill = (*report.code_of([{"variant": "c"}]), *report.script_code("measure_kill.py"))
    faults = (*report.code_of([{"variant": "c"}]), *report.script_code("measurements/measure_faults_more.py"))
    changed = {"pause", "CommitReplyDropper", "_continue"}
    assert "pause" not in changed & report.used_names("lab/nemesis.py", kill)
    # what a used function calls in its own module counts too: pause calls _continue
    assert changed <= report.used_names("lab/nemesis.py", faults)
    # and what changed is read by name from the two versions of a module
    before = "import os\n\ndef pause(pid):\n    return _continue(pid)\n\ndef _continue(pid):\n    os.kill(pid, 18)\n"
    assert report.names_changed(before, before.replace("os.kill(pid, 18)", "os.kill(pid, 19)")) == {"_continue"}


def test_a_module_is_split_into_named_parts_and_the_rest():
    defs, rest = report.top_level('"""doc"""\nimport os\nLIMIT = 3\n\ndef f():\n    # a comment\n    return LIMIT\n')
    assert set(defs) == {"LIMIT", "f"} and len(rest) == 1  # the import; the docstring moves nothing
    again, _ = report.top_level('"""other doc"""\nimport os\nLIMIT = 3\n\n\ndef f():\n    return LIMIT\n')
    assert again == defs  # comments and layout aside


def test_a_sentence_the_results_no_longer_bear_out_fails_the_check():
    page = "docs/frameworks.md"
    sentence = "**fs-default** duplicates on every run"
    assert claims.failing([(page, sentence, lambda: True)]) == []
    [said] = claims.failing([(page, sentence, lambda: False)])
    assert "no longer bear out" in said
    [gone] = claims.failing([(page, "a sentence no page holds", lambda: True)])
    assert "is gone" in gone
    # a claim whose file is not there yet is not checked, and says nothing but that
    unchecked = []
    assert claims.failing([(page, sentence, lambda: claims.runs("no-such-file.json"))], unchecked) == []
    assert "no-such-file.json is missing" in unchecked[0]
    # a claim over no run at all fails: "every run" of nothing would hold whatever happened
    [vacuous] = claims.failing([(page, sentence, lambda: all(r["duplicates"] > 0 for r in claims.runs(
        "kill-frameworks.json", variant="no-such-variant")))])
    assert "holds over nothing" in vacuous


def test_a_claim_over_runs_that_landed_no_fault_holds_over_nothing(monkeypatch):
    # M7a's first file planted crashes at a point e and f never pass: ten runs, no fault, all "exact"
    doc = {"runs": [{"variant": "f", "point": "acked", "faults": 0, "duplicates": 0},
                    {"variant": "f", "point": "kill", "faults": 20, "duplicates": 0}]}
    monkeypatch.setattr(claims, "document", lambda name: doc)
    assert len(claims.landed("eos.json", point="kill")) == 1
    [vacuous] = claims.failing([("docs/eos.md", "A crash right", lambda: all(
        r["duplicates"] == 0 for r in claims.landed("eos.json", point="acked")))])
    assert "holds over nothing" in vacuous


def test_every_checked_sentence_holds_against_the_committed_results():
    assert claims.failing() == []


def test_a_stricter_flag_check_flags_no_figure_but_any_other_change_does():
    before = "import sys\n\ndef run_once(x):\n    return x\n\ndef parse_args(argv):\n    return argv\n"
    stricter = before.replace("    return argv\n", "    if not argv:\n        raise SystemExit(2)\n    return argv\n")
    assert report.names_changed(before, stricter) == {"parse_args"} <= report.FLAGS_ONLY
    assert report.names_changed(before, before.replace("return x", "return x + 1")) == {"run_once"}
    assert report.names_changed(before, before.replace("import sys", "import os")) == {"module"}


def test_a_changed_flag_default_is_a_figure_change():
    before = ("def parse_args(argv):\n    parser = argparse.ArgumentParser()\n"
              "    parser.add_argument('--batch', type=int, default=500)\n    args = parser.parse_args(argv)\n"
              "    return args\n")
    checked = before.replace("    return args",
                             "    if args.batch < 1:\n        parser.error('--batch must be at least 1')\n"
                             "    cli.positive(parser, args, 'batch')\n    return args")
    assert report.flag_setup(before) == report.flag_setup(checked)  # checks only
    assert report.flag_setup(before) != report.flag_setup(before.replace("default=500", "default=100"))
    assert report.flag_setup(before) != report.flag_setup(before.replace("    return args", "    args.batch = 100\n"
                                                                                          "    return args"))
    added = before.replace("    args =", "    parser.add_argument('--x')\n    args =")
    assert report.flag_setup(before) != report.flag_setup(added)


def test_a_module_imported_under_another_name_is_still_followed():
    # measure_retention.py says `from lab import retention as inbox_retention`
    used = report.used_names("lab/retention.py", ["measurements/measure_retention.py"])
    assert "forget" in used and "main" not in used, used
    module = "A = 1\n\ndef f():\n    return A\n\ndef g():\n    return 2\n"
    users = {"lab/mod.py": module,
             "by_name.py": "from lab import mod as m\nm.f()\n",
             "dotted.py": "import lab.mod\nlab.mod.g()\n",
             "as_value.py": "from lab import mod\nmod.f()\nrun(mod)\n",
             "unnamed.py": "from lab import mod\n"}
    assert report.used_names("lab/mod.py", ["by_name.py"], users) == {"f", "A"}
    assert report.used_names("lab/mod.py", ["dotted.py"], users) == {"g"}
    # a file that passes the module on, or names none of it, uses all of it, whatever the others name
    assert report.used_names("lab/mod.py", ["by_name.py", "as_value.py"], users) == {"A", "f", "g"}
    assert report.used_names("lab/mod.py", ["unnamed.py", "by_name.py"], users) == {"A", "f", "g"}


def test_a_name_bound_twice_changes_when_either_binding_does():
    before = "LIMIT = 1\nLIMIT = 2\n"
    assert report.names_changed(before, "LIMIT = 3\nLIMIT = 2\n") == {"LIMIT"}


def test_a_registry_entry_for_another_variant_moves_no_figure():
    before = 'REG = {**{v: ("m.a", None) for v in ("a1", "a2")}, "b": ("m.b", None)}\n'
    assert report.registry(before, "REG") == {"a1": ("m.a", None), "a2": ("m.a", None), "b": ("m.b", None)}
    added = before.replace('"b": ("m.b", None)', '"b": ("m.b", None), "c": ("m.c", None)')
    assert report.same_registry_entries(before, added, ("REG",), {"a1", "b"}) == {"REG"}
    assert report.same_registry_entries(before, added, ("REG",), {"c"}) == set()  # c's own figures: new code
    changed = before.replace('"m.b"', '"m.b2"')
    assert report.same_registry_entries(before, changed, ("REG",), {"a1", "b"}) == set()
    # anything but literals is not read, and counts as changed
    assert report.registry("REG = dict(load())\n", "REG") is None
    assert report.registry(before + 'REG = {**REG, "b": ("m.x", None)}\n', "REG") is None  # bound twice
    assert report.same_registry_entries("REG = dict(load())\n", "REG = dict(load())\n", ("REG",), {"a1"}) == set()


def test_a_choice_added_to_a_measurement_moves_no_figure_of_runs_that_never_made_it():
    before = 'VARIANTS = ("a", "b", *(f"{v}@{n}" for v in ("p",) for n in (1, 2)), *other.X)\n'
    added = before.replace('"a", "b"', '"a", "new", "b"')
    assert report.choices_added(before, added, "VARIANTS", {"a", "b", "p"})
    assert not report.choices_added(before, added, "VARIANTS", {"new"})  # its own runs: new code
    assert not report.choices_added(before, before.replace('"b", ', ""), "VARIANTS", {"a"})  # taken out
    assert not report.choices_added(before, before.replace("(1, 2)", "(1, 3)"), "VARIANTS", {"a"})
    assert not report.choices_added(before, added.replace('"new"', "NEW"), "VARIANTS", {"a"})  # not a literal


def test_ratios_pair_runs_by_their_number():
    doc = {"runs": [{"variant": "p", "run": 1, "x": 6}, {"variant": "p-bare", "run": 1, "x": 3},
                    {"variant": "p", "run": 2, "x": 4}, {"variant": "p-bare", "run": 2, "x": 4},
                    {"variant": "p", "run": 3, "x": 9}]}  # run 3 of p-bare missing: no pair
    assert report.paired_by_run(doc, "p", "p-bare", lambda r: r["x"]) == {"median": 1.5, "min": 1.0, "max": 2.0}
    assert report.paired_by_run(doc, "p", "q", lambda r: r["x"]) is None


def test_each_variant_is_checked_against_its_module_and_what_that_imports():
    import ast

    from lab import more_variants

    def variant_imports(path: str) -> set[str]:
        """variants/*.py files that `path` imports, directly or in turn."""
        found, todo = set(), [path]
        while todo:
            tree = ast.parse((report.ROOT / todo.pop()).read_text())
            for node in ast.walk(tree):
                names = []
                if isinstance(node, ast.ImportFrom) and node.module == "variants":
                    names = [f"variants/{alias.name}.py" for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("variants."):
                    names = [node.module.replace(".", "/") + ".py"]
                for name in names:
                    if name not in found and (report.ROOT / name).exists():
                        found.add(name)
                        todo.append(name)
        return found

    for variant, (module, _) in more_variants.VARIANTS.items():
        assert variant in report.VARIANT_CODE, f"{variant}: not in report.VARIANT_CODE"
        code = set(report.VARIANT_CODE[variant])
        assert {module.replace(".", "/") + ".py", "lab/more_variants.py"} <= code, variant
    for variant, files in report.VARIANT_CODE.items():
        for path in [f for f in files if f.startswith("variants/") and f.endswith(".py")]:
            missing = variant_imports(path) - set(files) - set(report.CONSUMER_AND_HARNESS)
            assert not missing, f"{variant}: {path} imports {sorted(missing)}, which VARIANT_CODE leaves out"


WORKER_BEFORE = '''
import json
REPORT = "report: %s"
def helper(): return 1
def raw_only(): return 2
def run_raw(): return raw_only() and REPORT
def run_db_ceiling(): return helper()
def serve(): return helper()
def main(args):
    if args.variant == "raw":
        return run_raw()
    if args.variant in ("db",):
        return run_db_ceiling()
    return serve()
'''
ENTRIES = {"raw": ("run_raw",), "db": ("run_db_ceiling",)}


def test_a_worker_change_behind_one_variants_entry_moves_only_that_variants_figures():
    def reaches(after: str, variants: set[str], used_elsewhere=frozenset()) -> bool:
        return report.worker_change_reaches(WORKER_BEFORE, after, variants, set(used_elsewhere), ENTRIES)

    raw_helper = WORKER_BEFORE.replace("return 2", "return 3")
    assert not reaches(raw_helper, {"c", "d", "db"}) and reaches(raw_helper, {"c", "raw"})
    assert not reaches(WORKER_BEFORE.replace("raw_only() and", "raw_only() or"), {"p"})
    new_helper = WORKER_BEFORE.replace("def run_db_ceiling(): return helper()",
                                       "def cost(): return 0\ndef run_db_ceiling(): return helper() + cost()")
    assert not reaches(new_helper, {"raw", "c"}) and reaches(new_helper, {"db"})
    # what others reach as well: every figure
    assert reaches(WORKER_BEFORE.replace("return 1", "return 5"), {"c"})  # helper: serve's too
    assert reaches(WORKER_BEFORE.replace("return serve()", "return serve() or 0"), {"c"})  # main itself
    assert reaches(WORKER_BEFORE.replace("import json", "import json, os"), {"c"})  # not a named part
    assert reaches(WORKER_BEFORE.replace('"report: %s"', '"report %s"'), {"c"})  # a constant runs at import
    assert reaches(WORKER_BEFORE.replace("def raw_only(): return 2", "raw_only = len"), {"c"})  # no longer a def
    called_elsewhere = WORKER_BEFORE.replace("def serve(): return helper()", "def serve(): return run_raw()")
    assert reaches(called_elsewhere.replace("return 2", "return 3"), {"c"}, set())
    # what runs at import, or a dispatch that is not one variant's, or a lookup by string: every figure
    assert reaches(WORKER_BEFORE.replace("def raw_only():", "@functools.cache\ndef raw_only():"), {"c"})
    assert reaches(WORKER_BEFORE.replace("def raw_only():", "def raw_only(n=os.nice(1)):"), {"c"})
    def changed_within(source: str, variants: set[str]) -> bool:  # raw_only's body changed in `source`
        return report.worker_change_reaches(source, source.replace("return 2", "return 3"), variants, set(), ENTRIES)

    assert not changed_within(WORKER_BEFORE, {"c"})
    warmed = WORKER_BEFORE.replace("    return serve()", "    run_raw()\n    return serve()")  # c runs it too
    too_wide = WORKER_BEFORE.replace('args.variant == "raw"', 'args.variant in ("raw", "c")')
    looked_up = WORKER_BEFORE.replace("return serve()", 'return globals()["serve"]()')
    passed_on = WORKER_BEFORE.replace("return serve()", "return serve(run_raw)").replace("def serve():",
                                                                                       "def serve(f=0):")
    assert all(changed_within(source, {"c"}) for source in (warmed, too_wide, looked_up, passed_on))
    # against the worker as it is: a change inside run_raw's body
    worker = (report.ROOT / report.WORKER).read_text()
    changed = worker.replace("                    consume.parse_event(msg.value())\n",
                             "                    consume.parse_event(bytes(msg.value()))\n", 1)
    assert changed != worker
    used = report.used_names(report.WORKER, ["lab/harness.py", "measure_throughput.py"])
    assert not report.worker_change_reaches(worker, changed, {"c", "d", "p", "db"}, used)
    assert report.worker_change_reaches(worker, changed, {"c", "raw"}, used)
