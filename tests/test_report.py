"""The README's results tables are exactly what report.py makes of results/: no figure typed by hand."""
import report


def test_readme_tables_match_results():
    assert report.main(["--check"]) == 0, "README.md or docs/ is stale: run `python report.py` and commit"


def test_every_generated_section_has_its_markers_once():
    documents = [document.read_text() for document in report.DOCUMENTS]
    for name in report.SECTIONS:
        assert sum(text.count(f"<!-- report:{name} -->") for text in documents) == 1, name
        assert sum(text.count(f"<!-- /report:{name} -->") for text in documents) == 1, name
