"""The README's results tables are exactly what report.py makes of results/: no figure typed by hand."""
import report


def test_readme_tables_match_results():
    assert report.main(["--check"]) == 0, "README.md is stale: run `python report.py` and commit"


def test_every_generated_section_has_its_markers():
    readme = report.README.read_text()
    for name in report.SECTIONS:
        assert readme.count(f"<!-- report:{name} -->") == 1
        assert readme.count(f"<!-- /report:{name} -->") == 1
