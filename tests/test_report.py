"""The pages' tables and the figures their prose quotes are exactly what the report makes of results/."""
import pytest

from lab import charts, claims, figures, report, results, sections, tables
from lab.provenance import digest
from lab.settings import RESULTS


def test_readme_tables_match_results():
    assert report.main(["--check"]) == 0, "README.md or docs/ is stale: run `python -m lab.report` and commit"


def test_every_generated_section_has_its_markers_once():
    documents = [document.read_text() for document in report.DOCUMENTS]
    for name in report.SECTIONS:
        assert sum(text.count(f"<!-- report:{name} -->") for text in documents) == 1, name
        assert sum(text.count(f"<!-- /report:{name} -->") for text in documents) == 1, name


def test_an_empty_results_folder_gives_placeholders_not_a_crash(tmp_path, monkeypatch):
    monkeypatch.setattr(tables, "RESULTS", tmp_path)
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
    (tmp_path / "external.json").write_text((RESULTS / "external.json").read_text())
    monkeypatch.setattr(charts, "CHARTS", {"external": charts.CHARTS["external"]})
    assert charts.stale() == ["external.png (missing)"]
    charts.build()
    assert charts.stale() == []
    changed = (RESULTS / "external.json").read_text().replace('"runs": 5', '"runs": 6', 1)
    (tmp_path / "external.json").write_text(changed)
    assert charts.stale() == ["external.png (out of date)"]


def test_a_section_names_the_code_its_runs_came_from_and_flags_what_changed_since():
    # runs that recorded what they loaded: stale exactly when one of those files differs now
    consume_now = digest("consume.py")
    fresh = {"harness": "measure_kill", "runs": [{"commit": "abc", "loaded": {"consume.py": consume_now}}]}
    assert tables.measured_by(fresh) == "code: commit abc"
    edited = {"harness": "measure_kill", "runs": [{"commit": "abc", "loaded": {"consume.py": consume_now}},
                                                  {"commit": "abc", "loaded": {"consume.py": "0" * 12,
                                                                               "lab/gone.py": "1" * 12}}]}
    assert tables.measured_by(edited) == "code: commit abc; **changed since: consume.py, lab/gone.py**"
    # runs from before: any code file changed since their commit counts
    before_the_move = {"harness": "measure_kill", "runs": [{"commit": "98bf50c", "dirty": False}]}
    said = tables.measured_by(before_the_move)
    assert said.startswith("code: commit 98bf50c (files loaded not recorded") and "consume.py" in said
    assert tables.measured_by({"harness": "measure_kill", "runs": [{}]}).startswith("code: not recorded")
    assert "unknown here" in tables.measured_by({"harness": "measure_kill", "runs": [{"commit": "0" * 12}]})


def test_a_footer_names_the_frameworks_its_runs_imported_and_their_own_client():
    doc = {"machine": {"cores": 2, "memory_gib": 23.5}, "runs": [
        {"commit": "abc", "packages": {"quixstreams": "3.28.1", "confluent_kafka": "2.15.1, 2.12.2"}},
        {"commit": "abc", "packages": {"faststream": "0.7.8", "confluent_kafka": "2.15.1"}}],
        "versions": {"kafka": "4.3.1", "postgresql": "18.6", "confluent_kafka": "2.15.1", "librdkafka": "2.15.1"}}
    assert tables.frameworks_ran(doc) == ("; the workers ran FastStream 0.7.8, Quix Streams 3.28.1, "
                                          "confluent-kafka 2.12.2 in a framework's own environment")
    assert tables.frameworks_ran({**doc, "runs": [{"packages": {"psycopg": "3.3.9"}}, {}]}) == ""


def test_cpu_per_message_is_a_table_of_its_own_only_when_runs_recorded_it():
    stat = {"median": 2.0, "min": 1.0, "max": 3.0}
    cpu = {kind: stat for kind in (*tables.CPU_KINDS, "total")}
    doc = {"summary": {"variants": {"c": {"runs": 5, "msgs_per_s": stat, "cpu_us_per_msg": cpu,
                                          "consumer_peak_rss_mib": stat},
                                    "raw": {"runs": 5, "msgs_per_s": stat}}}}
    table = tables.cpu_table(doc)
    assert table.count("\n| ") == 1 and "| c: inbox + commit after the DB | 5 | 2.0 |" in table and "raw:" not in table
    assert tables.cpu_table({"summary": {"variants": {"raw": {"runs": 5, "msgs_per_s": stat}}}}) == ""


def test_a_sweep_name_reads_as_words():
    assert tables.named("p:3").endswith("one statement per batch, 3 consumers")
    assert tables.named("p@2, 10,000 accounts").endswith(", 2 connections, 10,000 accounts")
    assert tables.named("d@50").endswith(", 50 messages a batch") and tables.named("k@16").endswith(", 16 lanes")
    assert tables.named("d@1").endswith(", 1 message a batch") and tables.named("c:1").endswith(", 1 consumer")


def test_the_growing_inbox_shows_cpu_from_its_runs_or_dashes():
    run = {"cpu_us_per_msg": {"consumer_python": 10.0, "consumer_librdkafka": 1.0, "postgres_backends": 20.0,
                              "total": 33.0}, "consumer_peak_rss_mib": 90.4}
    assert tables.cpu_of_runs([run, dict(run, consumer_peak_rss_mib=90.0)]) == ("11.0", "20.0", "33.0", "90")
    assert tables.cpu_of_runs([run, {}]) == ("–",) * 4


def test_cores_busy_is_cpu_per_message_times_the_rate():
    # 25 µs a message at 40,000 a second keeps one core busy
    stats = {"cpu_us_per_msg": {"total": {"median": 25.0}}, "msgs_per_s": {"median": 40_000.0}}
    assert tables.cores_busy(stats) == "1.00"


def test_the_ledger_stands_still_between_busy_buckets_only():
    timeline = {"bucket_s": 0.5, "credits_per_s": [0, 4, 0, 0, 0, 2, 2, 0]}
    assert sections.longest_still(timeline) == 1.5  # three empty buckets between the first and last busy ones
    assert sections.longest_still({"bucket_s": 0.5, "credits_per_s": [0, 0]}) == 0



def test_a_failed_conformance_check_names_every_reason_it_failed():
    passed = {"passed": True, "duplicates": 0, "lost": 0, "details": {"balances_exact": True}}
    assert sections.conformance_cell(passed) == "passed"
    # no duplicate and nothing lost, yet failed: the cell must say why
    torn = {**passed, "passed": False, "details": {"balances_exact": False}}
    assert sections.conformance_cell(torn) == "**failed**: 0 dup., 0 lost, balances wrong"
    poisoned = {**passed, "passed": False, "evidence": {"poison_applied": ["poison-array"]},
                "details": {"balances_exact": True, "unexpected": 2, "running": False, "restarts": 0}}
    assert sections.conformance_cell(poisoned) == ("**failed**: 0 dup., 0 lost, 1 poison applied, 2 unexpected, "
                                                   "stopped consuming")
    assert sections.conformance_cell({"error": "CannotRun: no ledger: the zombie needs it"}) == "**error**: CannotRun"


@pytest.fixture
def page(tmp_path, monkeypatch):
    """A page of its own for report.main to read: the real pages stay as they are."""
    path = tmp_path / "page.md"
    monkeypatch.setattr(report, "DOCUMENTS", [path])
    return path


def test_a_stale_figure_fails_the_check_and_the_report_writes_it_afresh(page):
    runs = int(figures.FIGURES["kill.runs"]())
    page.write_text(f"of <!-- fig:kill.runs -->{runs + 1}<!-- /fig --> runs")
    assert report.main(["--check"]) == 1
    assert report.main([]) == 0
    assert page.read_text() == f"of <!-- fig:kill.runs -->{runs}<!-- /fig --> runs"
    assert report.main(["--check"]) == 0


def test_a_stale_table_fails_the_check(page):
    page.write_text("<!-- report:ratios -->\n| typed by hand |\n<!-- /report:ratios -->\n")
    assert report.main(["--check"]) == 1
    report.main([])
    assert "| c/b |" in page.read_text() and report.main(["--check"]) == 0


def test_a_figure_nobody_makes_fails_the_check(page, capsys):
    page.write_text("<!-- fig:kill.no-such-figure -->3<!-- /fig -->")
    assert report.main(["--check"]) == 1
    assert "kill.no-such-figure, which lab/figures.py does not make" in capsys.readouterr().err
    assert report.main([]) == 1 and page.read_text() == "<!-- fig:kill.no-such-figure -->3<!-- /fig -->"


def test_a_figure_whose_results_file_is_missing_is_left_as_it_stands(tmp_path, monkeypatch):
    monkeypatch.setattr(tables, "RESULTS", tmp_path)
    text = "<!-- fig:kill.runs -->5<!-- /fig --> and <!-- fig:kill.b-wrong -->words<!-- /fig -->"
    assert report.render(text) == text


def test_every_figure_is_quoted_in_a_page_and_every_quoted_figure_is_made():
    quoted = {name for document in report.DOCUMENTS for name, _ in report.FIG.findall(document.read_text())}
    assert quoted == set(figures.FIGURES)


def test_a_claim_row_is_its_text_then_each_function_s_figures():
    assert claims.row(("says", "the post", lambda: ("ours", "holds"))) == ["says", "the post", "ours", "holds"]
    assert claims.row((lambda: ("says", "the post", "ours", "differs"),)) == ["says", "the post", "ours", "differs"]


def test_every_section_footer_template_is_used_and_fills_in():
    assert all(name.partition(".")[0] in report.SECTIONS or name.startswith("cpu") for name in tables.FOOTERS)
    declared = [s for s in report.SECTIONS.values() if isinstance(s, tables.Table)]
    assert all(table.name in tables.FOOTERS for table in declared)  # a declared table's footer is its own name's
    assert tables.say("sizing", z={"per_day": 1000, "days": 7}).startswith("1,000 IDs a day kept for 7 days")


def test_ratios_pair_runs_by_their_number():
    doc = {"runs": [{"variant": "p", "run": 1, "x": 6}, {"variant": "p-bare", "run": 1, "x": 3},
                    {"variant": "p", "run": 2, "x": 4}, {"variant": "p-bare", "run": 2, "x": 4},
                    {"variant": "p", "run": 3, "x": 9}]}  # run 3 of p-bare missing: no pair
    assert results.paired_by_run(doc, "p", "p-bare", lambda r: r["x"]) == {"median": 1.5, "min": 1.0, "max": 2.0}
    assert results.paired_by_run(doc, "p", "q", lambda r: r["x"]) is None


