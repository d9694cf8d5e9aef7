"""measure_cores's summary, on hand-made runs: each layout's ratio, and each variant's rate with
Postgres on a core of its own over the same round's on shared cores. No services needed."""
import pytest

from measurements import measure_cores


def run(layout: str, n: int, p2: float, db2: float) -> dict:
    figures = {"p@2": {"msgs_per_s": p2}, "db@2": {"msgs_per_s": db2}}
    return {"layout": layout, "run": n, "figures": figures, "ratio": round(p2 / db2, 3)}


def test_the_summary_pairs_each_round_and_keeps_the_layouts_apart():
    runs = [run("shared", 1, 80, 100), run("apart", 1, 100, 100),
            run("apart", 2, 90, 100), run("shared", 2, 90, 120), run("apart", 3, 50, 50)]
    summary = measure_cores.summarise(runs)
    assert summary["shared"]["runs"] == 2 and summary["apart"]["runs"] == 3
    assert summary["shared"]["ratio"] == {"median": 0.775, "min": 0.75, "max": 0.8}
    assert summary["apart"]["msgs_per_s"]["db@2"]["min"] == 50
    # round 3 has no shared run, so it pairs with nothing: 100/80 and 90/90 for p@2, 100/100 and 100/120 for db@2
    assert summary["apart/shared"]["p@2"] == {"median": 1.125, "min": 1.0, "max": 1.25}
    assert summary["apart/shared"]["db@2"] == {"median": pytest.approx(0.9165), "min": 0.833, "max": 1.0}
    assert "0.775 (0.750-0.800)" in measure_cores.table(summary)


def test_one_layout_alone_has_no_pairs_and_each_layout_pairs_with_shared_only():
    assert set(measure_cores.summarise([run("apart", 1, 100, 100)])) == {"apart"}
    summary = measure_cores.summarise([run("niced", 1, 90, 100), run("shared", 1, 60, 100), run("apart", 2, 1, 1)])
    assert set(summary) == {"niced", "shared", "apart", "niced/shared"}
    assert summary["niced/shared"]["p@2"]["median"] == 1.5
