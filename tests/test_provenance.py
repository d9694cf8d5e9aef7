"""A run records the files of the checkout it loaded, with their hashes (lab.provenance): its
workers' as well as its own, a worker's said as it loads them, so a SIGKILL cannot hide one."""
from lab import harness, provenance
from lab.settings import ROOT


def test_a_module_cache_counts_as_its_source_and_only_the_checkouts_code_counts():
    cached = ROOT / "lab" / "__pycache__" / "harness.cpython-311.pyc"
    assert provenance.repo_path(cached) == "lab/harness.py"
    assert provenance.repo_path(ROOT / "schema.sql") == "schema.sql"
    for elsewhere in (ROOT / ".venv" / "lib" / "x.py", ROOT / "results" / "kill.json", ROOT / "README.md",
                      ROOT / "docs" / "x.py", "/usr/lib/python3/os.py", ROOT / ".cache" / "serial" / "a.sql"):
        assert provenance.repo_path(elsewhere) is None, elsewhere


def test_a_file_read_after_watching_is_recorded_with_its_hash():
    provenance.watch()
    (ROOT / "retention.sql").read_text()
    assert provenance.loaded()["retention.sql"] == provenance.digest("retention.sql")
    assert "lab/provenance.py" in provenance.loaded()  # imported before the watch began: from sys.modules
    assert provenance.digest("no/such/file.py") == "gone"


def test_checking_a_file_against_a_run_is_not_loading_it():
    provenance.watch()
    never_imported_here = "variants/consume_quix.py"  # it runs in .venv-quix alone
    assert provenance.changed_since({never_imported_here: "0" * 12}) == [never_imported_here]
    assert never_imported_here not in provenance.loaded()


def test_a_package_under_site_packages_is_recorded_by_its_name_and_version():
    import psycopg

    provenance.watch()
    assert provenance.packages()["psycopg"] == psycopg.__version__
    assert provenance.SITE.search("/x/lib/python3.11/site-packages/quixstreams/app.py").group(1) == "quixstreams"
    assert provenance.SITE.search("/x/site-packages/_cffi_backend.cpython-311-x86_64-linux-gnu.so").group(1) == \
        "_cffi_backend"


def test_the_changed_files_are_those_whose_content_differs_now(tmp_path):
    (tmp_path / "a.py").write_text("A = 1\n")
    (tmp_path / "b.sql").write_text("SELECT 1;\n")
    recorded = {"a.py": provenance.digest("a.py", tmp_path), "b.sql": provenance.digest("b.sql", tmp_path)}
    assert provenance.changed_since(recorded, tmp_path) == []
    (tmp_path / "a.py").write_text("A = 2\n")
    (tmp_path / "b.sql").unlink()
    assert provenance.changed_since(recorded, tmp_path) == ["a.py", "b.sql"]


def test_a_worker_says_what_it_loaded_and_the_harness_hears_it(dsn, topic, group, tmp_path):
    provenance.begin_run()
    worker = harness.Worker("c", topic, group, dsn, tmp_path / "w.log")
    try:
        heard = harness.wait_until(lambda: "lab/worker.py" in provenance.workers_loaded()
                                   and "consume.py" in provenance.workers_loaded(), 60, "the worker's loaded lines")
        assert heard
        assert provenance.workers_loaded()["consume.py"] == provenance.digest("consume.py")
        # and the third-party packages it imported, with the versions its own environment has
        import confluent_kafka

        harness.wait_until(lambda: "confluent_kafka" in provenance.workers_packages(), 30, "the worker's packages")
        assert provenance.workers_packages()["confluent_kafka"] == confluent_kafka.__version__
        assert "provenance: loaded" not in worker.log_tail()  # heard, not shown as the worker's news
        # what report.CODE leaves out of a run that did not record its files: the report's own
        assert not {"lab/report.py", "lab/claims.py", "lab/charts.py"} & set(provenance.workers_loaded())
    finally:
        worker.stop()
    provenance.begin_run()
    assert provenance.workers_loaded() == {}


def test_a_measurement_resumes_beside_runs_whose_loaded_files_are_unchanged_whatever_was_committed():
    from lab import results

    now = {"consume.py": provenance.digest("consume.py"), "lab/harness.py": provenance.digest("lab/harness.py")}
    current = {"commit": "new", "dirty": False}
    assert results.ran_this_code({"commit": "old", "loaded": now}, current)
    assert not results.ran_this_code({"commit": "new", "loaded": {**now, "consume.py": "0" * 12}}, current)
    # a run from before runs recorded their files: only at the same commit, unedited
    assert results.ran_this_code({"commit": "new", "dirty": False}, current)
    assert not results.ran_this_code({"commit": "old", "dirty": False}, current)
