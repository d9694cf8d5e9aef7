"""measure_throughput's run on a few hundred messages: it times real side effects and
checks them. No timing is asserted here; benchmarks live in the harness."""
import json
import os
import uuid

import psycopg
import pytest

import consume
import measure_throughput
from lab import against, harness, results
from measurements import measure_latency
from tests.seeds import shifted

pytestmark = pytest.mark.xdist_group("shared")  # the measurement lock, the kept inboxes: one worker, in turn


@pytest.mark.slow
@pytest.mark.usefixtures("services")
@pytest.mark.parametrize("variant", ["a2", "c", "p", "p-bare", "db", "raw"])
def test_throughput_run_times_every_credit_once(variant):
    # db: enough credits that its own threads' CPU (a few µs a credit), and not only its
    # backend's (~20 µs), spans many of /proc's 10 ms ticks: with 4,000 credits a loaded machine
    # once charged the drain threads no tick at all
    credits = 40_000 if variant == "db" else 300
    record = measure_throughput.run_once(variant, 1, {"events": credits, "partitions": 2})
    assert record["msgs_per_s"] > 0
    if variant == "db":  # no Kafka, no ledger to check: it times itself, and reads its own CPU
        assert set(record["cpu_us_per_msg"]) >= {"consumer_python", "postgres_backends", "broker", "total"}
        assert record["cpu_us_per_msg"]["postgres_backends"] > 0 and record["cpu_window_msgs"] == credits
        assert record["cpu_us_per_msg"]["consumer_python"] > 0, "the drain threads' CPU, read before they end"
        assert record["consumer_peak_rss_mib"] > 0
        return
    # CPU per message for each kind of process: recorded, never compared with a figure (a
    # batch variant may have applied all 300 by its first credit's report: nothing left to divide;
    # and the first credit may not be committed yet when the harness counts: a window of all 300)
    cost, window = record["cpu_us_per_msg"], record["cpu_window_msgs"]
    assert record["consumer_peak_rss_mib"] > 0 and 0 <= window <= 300
    if variant == "raw":  # it times itself from its first message: the 299 after it, no ledger
        # (a few ms of 10 ms ticks: no kind's figure need be above 0; none is read for its backends)
        assert window == 299 and cost["postgres_backends"] == 0 and set(cost) >= {"consumer_librdkafka", "total"}
        return
    if cost is None:
        assert window == 0
        return
    assert set(cost) == {"consumer_python", "consumer_librdkafka", "postgres_backends", "postgres_other", "broker",
                         "total"}
    assert all(v >= 0 for v in cost.values())
    assert (record["duplicates"], record["lost"], record["balances_exact"]) == (0, 0, True)
    assert 0 <= record["gap_p50_ms"] <= record["gap_p99_ms"]


def test_cpu_is_read_per_thread_from_proc():
    import threading

    from lab import cpu
    spin = threading.Thread(target=lambda: sum(range(3_000_000)), name="spin")
    before = cpu.threads(os.getpid())
    spin.start()
    spin.join()
    after = cpu.threads(os.getpid())
    assert cpu.cpu_seconds(os.getpid()) >= sum(seconds for _, seconds in after.values()) - 0.05
    assert set(before) & set(after) and all(after[t][1] >= before[t][1] for t in set(before) & set(after))
    assert cpu.peak_rss_mib(os.getpid()) > 0 and os.getpid() in cpu.children(os.getppid())


@pytest.mark.slow
@pytest.mark.usefixtures("services")
def test_latency_run_measures_every_credit_from_its_record_to_its_row():
    config = {"seconds": 1, "partitions": 2, "seed": shifted(1), "batch": 50}
    record = measure_latency.run_once("p", 1, config, rate=100.0)
    assert (record["events"], record["duplicates"], record["lost"], record["balances_exact"]) == (100, 0, 0, True)
    assert 0 < record["p50_ms"] <= record["p99_ms"] <= record["max_ms"]


@pytest.mark.slow
@pytest.mark.usefixtures("services")
def test_a_load_is_offered_as_a_fraction_of_the_capacity_measured_just_before():
    config = {"seconds": 1, "partitions": 2, "seed": shifted(1), "batch": 50, "capacity_events": 400,
              "capacity_events_of": {}}
    record = measure_latency.run_once("d", 1, config, load=0.25)
    assert record["capacity_per_s"] > 0 and abs(record["rate"] - 0.25 * record["capacity_per_s"]) <= 0.1
    assert abs(record["events"] - record["rate"]) <= 1 and (record["duplicates"], record["lost"]) == (0, 0)
    assert record["balances_exact"] is True, "the warm-up, the backlog and the offered credits, each applied once"


@pytest.mark.slow
@pytest.mark.usefixtures("services")
def test_a_swept_batch_reaches_the_consumer_and_names_its_own_case(tmp_path):
    out = tmp_path / "latency-batch.json"
    measure_latency.main(measure_latency.parse_args(
        ["--variants", "c,d", "--rates", "100", "--seconds", "1", "--partitions", "2", "--runs", "1",
         "--batch", "50", "--sweep-batch", "2", "--out", str(out)]))
    doc = json.loads(out.read_text())
    assert list(doc["summary"]) == ["c@100/s", "d@100/s", "d@100/s batch 2"]
    by_case = {measure_latency.key(r): r for r in doc["runs"]}
    assert by_case["c@100/s"]["largest_transaction"] == 1, "c: a transaction per credit"
    assert by_case["d@100/s batch 2"]["largest_transaction"] <= 2 and by_case["d@100/s batch 2"]["batch"] == 2
    assert by_case["d@100/s"]["batch"] == 50 and "swept" not in by_case["d@100/s"]
    assert all((r["duplicates"], r["lost"]) == (0, 0) for r in doc["runs"])


def test_ratios_pair_variants_within_a_run():
    runs = [{"variant": "b", "run": 1, "msgs_per_s": 200.0}, {"variant": "c", "run": 1, "msgs_per_s": 180.0},
            {"variant": "b", "run": 2, "msgs_per_s": 100.0}, {"variant": "c", "run": 2, "msgs_per_s": 95.0}]
    ratios = measure_throughput.summarise(runs)["ratios"]
    assert ratios["c/b"] == {"median": 0.925, "min": 0.9, "max": 0.95}


def test_event_ids_are_v4_or_time_ordered_v7():
    text, v7 = harness.event_ids(2000, "r1", "text"), harness.event_ids(5000, "r1", "uuid-v7")
    assert {uuid.UUID(i).version for i in text} == {4} and len(set(text)) == 2000
    assert {uuid.UUID(i).version for i in v7} == {7}
    assert v7 == sorted(v7) and len(set(v7)) == 5000  # as text too: the order the inbox's B-tree sees
    assert harness.event_ids(2, "r1") == ["r1-1", "r1-2"]


@pytest.mark.usefixtures("services")
def test_a_kept_inbox_is_lent_to_a_run_and_remembers_what_it_claimed():
    home = harness.unique("test_kept")
    try:
        assert harness.fill_inbox("uuid-v7", 3000, chunk=1000, schema=home) == 3000
        with psycopg.connect(harness.scoped_dsn(home, harness.ADMIN_DSN)) as conn:
            old_id = conn.execute("SELECT message_id FROM processed_messages LIMIT 1").fetchone()[0]
            assert conn.execute("SELECT count(*) FROM processed_messages").fetchone()[0] == 3000
        with harness.run_space("test", "kept", 1) as space:
            with harness.kept_inbox(space, "uuid-v7", schema=home) as held, psycopg.connect(space.dsn) as conn:
                assert held == 3000
                [new_id] = harness.event_ids(1, "r1", "uuid-v7")
                event = {"account_id": 1, "amount": 5}
                assert not consume.handle_once(conn, old_id, event)  # remembered from the fill
                assert consume.handle_once(conn, new_id, event)
            with psycopg.connect(space.admin) as conn:  # gone home with the run's ID in it
                assert conn.execute("SELECT to_regclass('processed_messages')").fetchone()[0] is None
        with psycopg.connect(harness.scoped_dsn(home, harness.ADMIN_DSN)) as conn:
            assert conn.execute("SELECT count(*), (SELECT rows FROM inbox_fill) FROM processed_messages "
                                "WHERE consumer = %s", (consume.CONSUMER_NAME,)).fetchone() == (3001, 3001)
        assert harness.fill_inbox("uuid-v7", 3000, schema=home) == 3001  # enough already: kept as it is
        # A run killed while it held the inbox never gave it back: the next fill fetches it home.
        stranded = harness.unique("test_stranded")
        try:
            with psycopg.connect(harness.ADMIN_DSN, autocommit=True) as conn:
                conn.execute(f"CREATE SCHEMA {stranded}")
                conn.execute(f"ALTER TABLE {home}.processed_messages SET SCHEMA {stranded}")
                conn.execute(f"INSERT INTO {stranded}.processed_messages (consumer, message_id) VALUES ('x', 'y')")
            assert harness.fill_inbox("uuid-v7", 3000, schema=home) == 3002  # recounted
            with psycopg.connect(harness.ADMIN_DSN) as conn:
                assert conn.execute("SELECT to_regclass(%s)", (f"{stranded}.processed_messages",)).fetchone()[0] is None
        finally:
            harness.drop_schema(stranded)
    finally:
        harness.drop_schema(home)


@pytest.mark.usefixtures("services")
def test_the_driver_runs_each_outer_block_to_the_end_before_the_next(tmp_path):
    seen = []

    def run_once(variant, inbox_rows, run, config):
        seen.append((inbox_rows, variant, run))
        return {"variant": variant, "inbox_rows": inbox_rows, "run": run}

    plan = [{"variant": v, "inbox_rows": n} for n in (0, 10) for v in ("c", "d")]
    results.drive("test", tmp_path / "out.json", {"runs": 2}, plan, run_once, lambda runs: {}, lambda s: "",
                  lambda r: "", rotate=True, outer=("inbox_rows",))
    assert seen == [(0, "c", 1), (0, "d", 1), (0, "d", 2), (0, "c", 2),
                    (10, "c", 1), (10, "d", 1), (10, "d", 2), (10, "c", 2)]


@pytest.mark.usefixtures("services")
def test_a_file_whose_runs_are_all_done_gets_its_summary_written(tmp_path):
    def run_once(variant, run, config):
        raise AssertionError(f"{variant} run {run} is in the file already")

    out = tmp_path / "out.json"
    done = results.ResultsFile("test", out, {"runs": 1}).code  # the commit the runs must carry to resume
    out.write_text(json.dumps({"harness": "test", "config": {"runs": 1}, "machine": results.machine(),
                               "versions": results.versions(), "summary": {},
                               "runs": [{"variant": v, "run": 1, **done} for v in ("c", "d")]}))
    results.drive("test", out, {"runs": 1}, [{"variant": "c"}, {"variant": "d"}], run_once,
                  lambda runs: {"runs": len(runs)}, lambda s: "", lambda r: "")
    assert json.loads(out.read_text())["summary"] == {"runs": 2}


def test_growth_pairs_v7_with_text_and_each_size_with_the_empty_inbox():
    def run(id_type, rows, n, rate):
        return {"variant": "d", "id_type": id_type, "inbox_rows": rows, "run": n, "msgs_per_s": rate,
                "inbox_rows_held": rows, "wal_bytes_per_msg": 100, "inbox_index_reads_per_msg": 0.0}

    runs = [run("text", 0, 1, 100.0), run("uuid-v7", 0, 1, 100.0), run("text", 0, 2, 200.0),
            run("text", 10, 1, 50.0), run("uuid-v7", 10, 1, 90.0), run("text", 10, 2, 150.0)]
    growth = measure_throughput.summarise(runs)["growth"]["d"]
    assert growth["text"]["10"]["vs_empty"] == {"median": 0.625, "min": 0.5, "max": 0.75}
    assert growth["uuid-v7"]["10"]["vs_text"] == {"median": 1.8, "min": 1.8, "max": 1.8}
    assert "vs_empty" not in growth["text"]["0"] and "vs_text" not in growth["text"]["10"]


def test_id_types_without_an_inbox_size_are_rows_of_their_own():
    runs = [{"variant": "d", "id_type": "text", "run": 1, "msgs_per_s": 100.0},
            {"variant": "d", "id_type": "uuid-v7", "run": 1, "msgs_per_s": 150.0}]
    assert list(measure_throughput.summarise(runs)["variants"]) == ["d/text", "d/uuid-v7"]


def test_an_accounts_sweep_pairs_each_count_with_the_fewest_at_the_same_consumers():
    runs = [{"variant": v, "run": 1, "msgs_per_s": rate, "accounts": n}
            for v, n, rate in (("p:1", 100, 100.0), ("p:2", 100, 150.0), ("p:1", 10000, 120.0), ("p:2", 10000, 240.0))]
    ratios = measure_throughput.summarise(runs)["ratios"]
    assert ratios == {
        "p:2, 100 accounts/p:1, 100 accounts": {"median": 1.5, "min": 1.5, "max": 1.5},
        "p:1, 10,000 accounts/p:1, 100 accounts": {"median": 1.2, "min": 1.2, "max": 1.2},
        "p:2, 10,000 accounts/p:1, 10,000 accounts": {"median": 2.0, "min": 2.0, "max": 2.0},
        "p:2, 10,000 accounts/p:2, 100 accounts": {"median": 1.6, "min": 1.6, "max": 1.6}}


def test_accounts_refuse_the_self_timed_ceilings_in_one_line(capsys):
    with pytest.raises(SystemExit):
        measure_throughput.parse_args(["--variants", "p,db@2", "--accounts", "100,10000"])
    assert "--accounts takes no --inbox-rows, and none of raw, db, db-d" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.usefixtures("services")
def test_against_runs_each_variant_from_both_codes_and_pairs_them_by_run(tmp_path):
    # HEAD against itself: the old code is this commit's, from its own worktree. No ratio is
    # asserted to any value: only that both codes ran, where, and were paired.
    commit = against.resolve("HEAD")
    made_here = not (against.WORKTREES / commit[:12]).exists()
    out = tmp_path / "against.json"
    try:
        measure_throughput.main(measure_throughput.parse_args(
            ["--against", "HEAD", "--variants", "c", "--runs", "1", "--events", "2000", "--partitions", "2",
             "--out", str(out)]))
        doc = json.loads(out.read_text())
    finally:
        if made_here:
            against.git("worktree", "remove", "--force", str(against.WORKTREES / commit[:12]))
    assert doc["config"]["against"] == {"rev": "HEAD", "commit": commit}
    runs = {r["variant"]: r for r in doc["runs"]}
    old_name = f"c~{commit[:7]}"
    assert set(runs) == {"c", old_name}
    new, old = runs["c"], runs[old_name]
    assert (new["code"], new["worker_cwd"]) == ("now", ".")
    worktree = f".cache/against/{commit[:12]}"
    assert (old["code"], old["worker_commit"], old["worker_root"], old["worker_cwd"]) == (
        commit[:7], commit, worktree, worktree), "the old code's worker ran in its worktree"
    assert "lab/worker.py" in old["worker_loaded"], "this commit's worker says what it loaded, kept apart"
    assert all((r["duplicates"], r["lost"], r["balances_exact"]) == (0, 0, True) for r in (new, old))
    paired = doc["summary"]["against"]["c"]
    assert paired["old"] == old_name and paired["runs"] == 1 and [r["run"] for r in paired["per_run"]] == [1]
    assert paired["msgs_per_s"]["median"] > 0 and paired["wal_bytes_per_msg"]["median"] > 0
    assert set(paired["cpu_us_per_msg"]) >= {"consumer_python", "postgres_backends", "broker", "total"}


def test_against_pairs_each_run_of_todays_code_with_the_old_codes_of_the_same_number():
    def run(variant, n, rate, wal, python):
        return {"variant": variant, "run": n, "msgs_per_s": rate, "wal_bytes_per_msg": wal,
                "cpu_us_per_msg": {"consumer_python": python, "total": 2 * python}, "consumer_peak_rss_mib": 50.0}

    runs = [run("p", 1, 100.0, 500, 10.0), run("p~abc1234", 1, 50.0, 500, 20.0),
            run("p~abc1234", 2, 100.0, 250, 10.0), run("p", 2, 100.0, 500, 0.0)]
    summary = measure_throughput.summarise(runs)
    paired = summary["against"]["p"]
    assert paired["old"] == "p~abc1234" and paired["runs"] == 2
    assert [r["msgs_per_s"] for r in paired["per_run"]] == [2.0, 1.0]
    assert paired["msgs_per_s"] == {"median": 1.5, "min": 1.0, "max": 2.0}
    assert paired["wal_bytes_per_msg"] == {"median": 1.5, "min": 1.0, "max": 2.0}
    # run 2's consumer read no CPU tick today: that run has no CPU ratio, run 1 alone does
    assert paired["cpu_us_per_msg"]["consumer_python"] == {"median": 0.5, "min": 0.5, "max": 0.5}
    assert "new/old" in measure_throughput.table(summary)


def test_against_refuses_a_variant_or_flag_the_old_worker_lacks_in_one_line(tmp_path):
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "__init__.py").write_text("")
    (tmp_path / "lab" / "worker.py").write_text(
        "import argparse\n"
        "parser = argparse.ArgumentParser()\n"
        "parser.add_argument('--variant', required=True, choices=('c', 'p'))\n"
        "parser.add_argument('--batch', type=int)\n"
        "parser.parse_args()\n")
    old = against.OldCode("old", "0" * 40, tmp_path)
    assert old.refusal("p", ("--batch", 500)) is None
    lacks_variant = old.refusal("d", ("--batch", 500))
    assert lacks_variant == "--against old: its worker has no variant d (it has c, p)"
    assert old.refusal("p", ("--batch", 500, "--connections", 2)) == (
        "--against old: its worker takes no --connections, which p is run with today")


def test_against_refuses_an_unknown_rev_in_one_line(capsys):
    with pytest.raises(SystemExit):
        measure_throughput.parse_args(["--against", "no-such-rev-anywhere", "--variants", "c"])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--against no-such-rev-anywhere: no such commit" in err[0]
