"""The checker on tiny hand-made data: no Kafka, no Postgres."""
from lab import checker
from lab.checker import check

PUBLISHED = {"e1": {"account_id": 1, "amount": 10}, "e2": {"account_id": 1, "amount": 5},
             "e3": {"account_id": 2, "amount": 7}}


def test_exactly_once_is_clean():
    ledger = [("e1", 1, 10), ("e2", 1, 5), ("e3", 2, 7)]
    result = check(PUBLISHED, ledger, {1: 15, 2: 7})
    assert result == {"duplicates": 0, "lost": 0, "unexpected": 0, "ledger_rows": 3, "balance_total": 22,
                      "expected_balance": 22, "balances_exact": True}


def test_duplicates_count_rows_beyond_the_first_per_id():
    ledger = [("e1", 1, 10), ("e1", 1, 10), ("e1", 1, 10), ("e2", 1, 5), ("e3", 2, 7), ("e3", 2, 7)]
    result = check(PUBLISHED, ledger, {1: 35, 2: 14})
    assert (result["duplicates"], result["lost"], result["balances_exact"]) == (3, 0, False)
    assert result["balance_total"] - result["expected_balance"] == 27


def test_lost_counts_published_ids_without_a_row():
    result = check(PUBLISHED, [("e3", 2, 7)], {1: 0, 2: 7})
    assert (result["duplicates"], result["lost"], result["balances_exact"]) == (0, 2, False)


def test_a_duplicate_and_a_loss_can_hide_in_a_matching_total():
    # e2 lost (-5) and e3 doubled (+7) on another account: totals differ, per-account check catches it anyway.
    result = check(PUBLISHED, [("e1", 1, 10), ("e3", 2, 7), ("e3", 2, 7)], {1: 10, 2: 14})
    assert (result["duplicates"], result["lost"], result["balances_exact"]) == (1, 1, False)


def test_rows_for_ids_nobody_published_are_reported_not_counted_as_duplicates():
    result = check(PUBLISHED, [("e1", 1, 10), ("e2", 1, 5), ("e3", 2, 7), ("zz", 2, 1)], {1: 15, 2: 8})
    assert (result["duplicates"], result["unexpected"], result["balances_exact"]) == (0, 1, False)


def test_balances_exact_needs_every_account_not_just_the_total():
    # Same total (22), wrong split between accounts.
    ledger = [("e1", 1, 10), ("e2", 1, 5), ("e3", 2, 7)]
    assert check(PUBLISHED, ledger, {1: 22, 2: 0})["balances_exact"] is False


def test_credit_timeline_buckets_credits_and_marks_each_duplicate():
    from lab.checker import credit_timeline

    credits = [("e1", 100.1), ("e2", 100.2), ("e3", 100.7), ("e1", 101.6)]
    line = credit_timeline(credits, [[100.5, 101.0]], start=100.0)
    assert line == {"bucket_s": 0.5, "credits_per_s": [4.0, 2.0, 0.0, 2.0], "fault_windows": [[0.5, 1.0]],
                    "duplicates_at": [1.6]}


def test_stall_windows_pair_each_stall_with_its_waking():
    from lab.checker import stall_windows

    timeline = [(10.0, "w1", "stalling", "e7"), (12.0, "w2", "stalling", "e9"), (15.0, "w1", "stall over", "e7"),
                (20.0, "w2", "stall over", "e9"), (21.0, "w2", "stall over", "e4")]
    assert stall_windows(timeline) == [[10.0, 15.0], [12.0, 20.0]]


def test_order_violations_compare_each_account_with_the_producers_order():
    from lab.checker import order_violations

    published = {f"e{n}": {"account_id": 1 + n % 2, "amount": 1, "seq": n} for n in range(1, 7)}
    in_order = [("e1", 2, 1), ("e2", 1, 1), ("e3", 2, 1), ("e4", 1, 1), ("e5", 2, 1), ("e6", 1, 1)]
    assert order_violations(published, in_order) == 0
    # accounts interleave freely; within account 2, e5 before e3 is one violation
    assert order_violations(published, [("e2", 1, 1), ("e1", 2, 1), ("e5", 2, 1), ("e3", 2, 1)]) == 1
    # a duplicate of an older event, written later, is check()'s to count, not this
    assert order_violations(published, [("e1", 2, 1), ("e3", 2, 1), ("e1", 2, 1)]) == 0


def test_log_copies_counts_records_beyond_the_first_missing_and_strangers():
    from lab.checker import log_copies

    assert log_copies(["e1", "e2", "e3"], ["e1", "e1", "e1", "e3", "zz"]) == {"copies": 2, "missing": 1,
                                                                            "unexpected": 1}
    assert log_copies(["e1"], []) == {"copies": 0, "missing": 1, "unexpected": 0}


def test_longest_wait_is_per_account_so_a_stopped_partition_shows_beside_a_busy_one():
    published = {"a1": {"account_id": 1}, "a2": {"account_id": 1}, "b1": {"account_id": 2},
                 "b2": {"account_id": 2}, "b3": {"account_id": 2}}
    credits = [("a1", 0.0), ("b1", 0.5), ("b2", 1.0), ("b3", 1.5), ("a2", 9.0), ("stranger", 20.0)]
    assert checker.longest_wait(published, credits) == 9.0
    assert checker.longest_wait(published, [("a1", 3.0)]) == 0.0


def test_an_eviction_is_counted_however_the_client_names_itself():
    from lab import harness

    evicted = harness.COUNTED["evictions"]
    assert evicted.search("%4|1796230262.111|MAXPOLL|rdkafka#consumer-1| [thrd:main]: leaving group")
    # FastStream forwards librdkafka's lines to its logger, under its own client.id
    assert evicted.search("WARNING  - MAXPOLL [faststream-0.7.8#consumer-5] [thrd:main]: leaving group")
    assert not evicted.search("a handler mentioned MAXPOLL in passing")
