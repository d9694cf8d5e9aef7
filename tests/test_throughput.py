"""measure_throughput's run on a few hundred messages: it times real side effects and
checks them. No timing is asserted here; benchmarks live in the harness."""
import pytest

import measure_latency
import measure_throughput


@pytest.mark.slow
@pytest.mark.usefixtures("services")
@pytest.mark.parametrize("variant", ["a2", "c", "p", "db"])
def test_throughput_run_times_every_credit_once(variant):
    record = measure_throughput.run_once(variant, 1, {"events": 300, "partitions": 2})
    assert record["msgs_per_s"] > 0
    if variant == "db":  # no Kafka, no ledger to check: it times itself
        return
    assert (record["duplicates"], record["lost"], record["balances_exact"]) == (0, 0, True)
    assert 0 <= record["gap_p50_ms"] <= record["gap_p99_ms"]


@pytest.mark.slow
@pytest.mark.usefixtures("services")
def test_latency_run_measures_every_credit_from_its_record_to_its_row():
    record = measure_latency.run_once("p", 100.0, 1, {"seconds": 1, "partitions": 2, "seed": 1, "batch": 50})
    assert (record["events"], record["duplicates"], record["lost"], record["balances_exact"]) == (100, 0, 0, True)
    assert 0 < record["p50_ms"] <= record["p99_ms"] <= record["max_ms"]


def test_ratios_pair_variants_within_a_run():
    runs = [{"variant": "b", "run": 1, "msgs_per_s": 200.0}, {"variant": "c", "run": 1, "msgs_per_s": 180.0},
            {"variant": "b", "run": 2, "msgs_per_s": 100.0}, {"variant": "c", "run": 2, "msgs_per_s": 95.0}]
    ratios = measure_throughput.summarise(runs)["ratios"]
    assert ratios["c/b"] == {"median": 0.925, "min": 0.9, "max": 0.95}
