"""The README's results tables are exactly what report.py makes of results/: no figure typed by hand."""
from lab import charts, claims, report, results
from lab.provenance import digest


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


def test_a_section_names_the_code_its_runs_came_from_and_flags_what_changed_since():
    # runs that recorded what they loaded: stale exactly when one of those files differs now
    consume_now = digest("consume.py")
    fresh = {"harness": "measure_kill", "runs": [{"commit": "abc", "loaded": {"consume.py": consume_now}}]}
    assert report.measured_by(fresh) == "code: commit abc"
    edited = {"harness": "measure_kill", "runs": [{"commit": "abc", "loaded": {"consume.py": consume_now}},
                                                  {"commit": "abc", "loaded": {"consume.py": "0" * 12,
                                                                               "lab/gone.py": "1" * 12}}]}
    assert report.measured_by(edited) == "code: commit abc; **changed since: consume.py, lab/gone.py**"
    # runs from before: any code file changed since their commit counts
    before_the_move = {"harness": "measure_kill", "runs": [{"commit": "98bf50c", "dirty": False}]}
    said = report.measured_by(before_the_move)
    assert said.startswith("code: commit 98bf50c (files loaded not recorded") and "consume.py" in said
    assert report.measured_by({"harness": "measure_kill", "runs": [{}]}).startswith("code: not recorded")
    assert "unknown here" in report.measured_by({"harness": "measure_kill", "runs": [{"commit": "0" * 12}]})



def test_a_footer_names_the_frameworks_its_runs_imported_and_their_own_client():
    doc = {"machine": {"cores": 2, "memory_gib": 23.5}, "runs": [
        {"commit": "abc", "packages": {"quixstreams": "3.28.1", "confluent_kafka": "2.15.1, 2.12.2"}},
        {"commit": "abc", "packages": {"faststream": "0.7.8", "confluent_kafka": "2.15.1"}}],
        "versions": {"kafka": "4.3.1", "postgresql": "18.6", "confluent_kafka": "2.15.1", "librdkafka": "2.15.1"}}
    assert report.frameworks_ran(doc) == ("; the workers ran FastStream 0.7.8, Quix Streams 3.28.1, "
                                          "confluent-kafka 2.12.2 in a framework's own environment")
    assert report.frameworks_ran({**doc, "runs": [{"packages": {"psycopg": "3.3.9"}}, {}]}) == ""


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



def test_the_ledger_stands_still_between_busy_buckets_only():
    timeline = {"bucket_s": 0.5, "credits_per_s": [0, 4, 0, 0, 0, 2, 2, 0]}
    assert report.longest_still(timeline) == 1.5  # three empty buckets between the first and last busy ones
    assert report.longest_still({"bucket_s": 0.5, "credits_per_s": [0, 0]}) == 0




def test_a_sentence_the_results_no_longer_bear_out_fails_the_check():
    name = "frameworks.fs-default-duplicates-every-run"  # marked once in docs/frameworks.md
    assert claims.failing([(name, lambda: True)]) == []
    [said] = claims.failing([(name, lambda: False)])
    assert "no longer bear out" in said and "**fs-default** duplicates on every run" in said
    [gone] = claims.failing([("frameworks.no-page-marks-this", lambda: True)])
    assert "marked 0 times" in gone
    # a claim whose file is not there yet is not checked, and says nothing but that
    unchecked = []
    assert claims.failing([(name, lambda: claims.runs("no-such-file.json"))], unchecked) == []
    assert "no-such-file.json is missing" in unchecked[0]
    # a claim over no run at all fails: "every run" of nothing would hold whatever happened
    [vacuous] = claims.failing([(name, lambda: all(r["duplicates"] > 0 for r in claims.runs(
        "kill-frameworks.json", variant="no-such-variant")))])
    assert "holds over nothing" in vacuous


def test_a_marked_sentence_without_a_check_fails_and_a_reworded_one_keeps_its_check(monkeypatch):
    found = claims.marked()
    assert found["frameworks.fs-default-duplicates-every-run"][0][0] == "docs/frameworks.md"
    # the marker, not the words, ties a sentence to its check: other words, the same name
    reworded = {**found, "frameworks.fs-default-duplicates-every-run": [("docs/frameworks.md", "fs-default doubles")]}
    monkeypatch.setattr(claims, "marked", lambda: {**reworded, "readme.no-check": [("README.md", "An outcome")]})
    said = claims.failing()
    assert said == ["README.md: a sentence is marked as claim readme.no-check, which lab/claims.py does not check"]


def test_a_claim_over_runs_that_landed_no_fault_holds_over_nothing(monkeypatch):
    # M7a's first file planted crashes at a point e and f never pass: ten runs, no fault, all "exact"
    doc = {"runs": [{"variant": "f", "point": "acked", "faults": 0, "duplicates": 0},
                    {"variant": "f", "point": "kill", "faults": 20, "duplicates": 0}]}
    monkeypatch.setattr(claims, "document", lambda name: doc)
    assert len(claims.landed("eos.json", point="kill")) == 1
    [vacuous] = claims.failing([("eos.e-applies-each-one-second", lambda: all(
        r["duplicates"] == 0 for r in claims.landed("eos.json", point="acked")))])
    assert "holds over nothing" in vacuous


def test_every_checked_sentence_holds_against_the_committed_results():
    assert claims.failing() == []








def test_ratios_pair_runs_by_their_number():
    doc = {"runs": [{"variant": "p", "run": 1, "x": 6}, {"variant": "p-bare", "run": 1, "x": 3},
                    {"variant": "p", "run": 2, "x": 4}, {"variant": "p-bare", "run": 2, "x": 4},
                    {"variant": "p", "run": 3, "x": 9}]}  # run 3 of p-bare missing: no pair
    assert results.paired_by_run(doc, "p", "p-bare", lambda r: r["x"]) == {"median": 1.5, "min": 1.0, "max": 2.0}
    assert results.paired_by_run(doc, "p", "q", lambda r: r["x"]) is None


