"""The hand-written sentences of README.md and docs/ that state a measured outcome, each
with the check that keeps it true, by name.

Tables and their footers are generated (report.py). Prose that reads them ("every eviction
cost b a duplicate") is written by hand, so it can outlive the figures that bore it out:
a re-measured file may say otherwise. Each such sentence stands between markers that name
it, <!-- claim:NAME -->...<!-- /claim -->, and each entry here pairs that name with a
predicate over the results files. `report.py --check` (a test) fails when a predicate no
longer holds, when a name is not marked exactly once, or when a marked sentence has no
entry: a sentence may be reworded freely, and keeps its check as long as it keeps its marker.

A sentence whose results file is missing is not checked (the page says the file is
missing in the generated section beside it).
"""
import json
import re
import statistics

from lab import results
from lab.settings import RESULTS, ROOT


class Missing(Exception):
    """A claim's results file is not there: the claim is not checked."""


class Vacuous(Exception):
    """A claim would hold over nothing: no run matched, or no fault landed. It fails."""


def document(name: str) -> dict:
    """results/NAME; Missing if it is not there."""
    path = RESULTS / name
    if not path.exists():
        raise Missing(name)
    return json.loads(path.read_text())


def runs(name: str, **where) -> list[dict]:
    """The runs of results/NAME whose fields equal `where`; Vacuous if none does (a claim about
    "every run" of nothing would hold whatever happened)."""
    found = [r for r in document(name)["runs"] if all(r.get(k) == v for k, v in where.items())]
    if not found:
        raise Vacuous(f"no run of {name} has {where}")
    return found


def ratio(name: str, pair: str) -> dict:
    """A file's paired ratio (median, min, max), e.g. ratio("throughput.json", "c/b")."""
    return document(name)["summary"]["ratios"][pair]


def landed(name: str, **where) -> list[dict]:
    """runs(name, **where), each of which landed a fault; Vacuous if one landed none (a planted
    crash point the variant never passes records a run that proves nothing)."""
    found = runs(name, **where)
    idle = [r for r in found if not r.get("faults")]
    if idle:
        raise Vacuous(f"{len(idle)} run(s) of {name} with {where} landed no fault")
    return found


def nonempty(rows: list[dict]) -> list[dict]:
    """`rows`, or Vacuous if a filter left none."""
    if not rows:
        raise Vacuous("the filter left no run")
    return rows


def report_pair(top: str, bottom: str, field: str) -> dict:
    """throughput-bare.json's runs of `top` against `bottom`, paired by run ("cpu": all processes)."""
    value = (lambda r: (r.get("cpu_us_per_msg") or {}).get("total")) if field == "cpu" else (lambda r: r[field])
    paired = results.paired_by_run(document("throughput-bare.json"), top, bottom, value)
    if paired is None:
        raise Vacuous(f"no run of {top} pairs with one of {bottom}")
    return paired


def total(rows: list[dict], field: str) -> int:
    return sum(r[field] for r in rows)


def zombie(variant: str, protocol: str = "classic", stall: str = "") -> list[dict]:
    """M2's runs of one file; Vacuous if they evicted nobody (nothing to have cost anything)."""
    found = runs(f"rebalance-{variant}-{protocol}{stall}.json")
    if total(found, "evictions") == 0:
        raise Vacuous(f"rebalance-{variant}-{protocol}{stall}.json evicted nobody")
    return found


def median(name: str, variant: str, field: str = "msgs_per_s") -> float:
    """A throughput file's median for one variant; Vacuous if the variant or the field is not there."""
    return summarised(name, variant, field)[field]["median"]


def growth(variant: str, id_type: str, rows: int) -> dict:
    """One row of throughput-inbox.json's growth summary."""
    return document("throughput-inbox.json")["summary"]["growth"][variant][id_type][str(rows)]


def growth_cpu(variant: str, id_type: str, rows: int, kind: str = "postgres_backends") -> float:
    """The growing inbox's median CPU per credit of one kind, from its runs (its summary has none)."""
    mine = runs("throughput-inbox.json", variant=variant, id_type=id_type, inbox_rows=rows)
    if any(not r.get("cpu_us_per_msg") for r in mine):
        raise Vacuous(f"a run of {variant}/{id_type} at {rows:,} rows recorded no CPU")
    return statistics.median(r["cpu_us_per_msg"][kind] for r in mine)


def latency(case: str, field: str = "p50_ms") -> float:
    """measure_latency: a case's median, e.g. latency("c@200/s")."""
    return document("latency.json")["summary"][case][field]["median"]


def batch_case(case: str, field: str = "p50_ms") -> float:
    """measure_latency --sweep-batch: a case's median, e.g. batch_case("d@200/s batch 10")."""
    return document("latency-batch.json")["summary"][case][field]["median"]


def gain(pair: str) -> float:
    """--consumers: the median paired ratio of N processes against one, e.g. gain("c:2/c:1")."""
    return ratio("throughput-consumers.json", pair)["median"]


def spread_hurts(name: str, variants) -> bool:
    """--accounts: each variant's 10,000-account runs no faster than its 100-account runs (medians)."""
    return all(ratio(name, f"{v}, 10,000 accounts/{v}, 100 accounts")["median"] <= 1.0 for v in variants)


def config(name: str) -> dict:
    """results/NAME's config: the parameters its runs were given."""
    return document(name)["config"]


def summarised(name: str, variant: str, field: str) -> dict:
    """A throughput file's summary of one variant, which must hold `field`; Vacuous if the
    variant is not there or its runs did not record it (a run without CPU figures drops them
    from its variant's summary)."""
    stats = document(name)["summary"]["variants"].get(variant)
    if stats is None or field not in stats:
        raise Vacuous(f"{name} has no {field} for {variant}")
    return stats


def cpu(name: str, variant: str, kind: str = "total") -> float:
    """A throughput file's median CPU per message for one variant: all processes, or one kind
    (consumer_python, postgres_backends, ...)."""
    return summarised(name, variant, "cpu_us_per_msg")["cpu_us_per_msg"][kind]["median"]


def cores(name: str, variant: str) -> float:
    """The cores a variant's processes kept busy, as the report's CPU tables give it."""
    return round(results.cores_busy(summarised(name, variant, "cpu_us_per_msg")), 2)


def profile_share(name: str, part: str) -> float:
    """profile_p's text file: the share of the wall (percent) that one part's CPU took, e.g.
    profile_share("profile-p.txt", "Postgres backend"); Missing if the file is not there."""
    path = RESULTS / name
    if not path.exists():
        raise Missing(name)
    for line in path.read_text().splitlines():
        if line.strip().startswith(part):
            return float(line.split()[-1].rstrip("%"))
    raise Vacuous(f"{name} has no line for {part!r}")


def every_run(name: str, **where):
    """A test over each of `runs(name, **where)`: every_run(...)(lambda r: ...) holds if it holds for all."""
    return lambda test: all(test(r) for r in runs(name, **where))


CLAIMS = [
    # M1
    ("caveats.c-zeros-do-not-depend",
     lambda: total(runs("kill.json", variant="c"), "duplicates") + total(runs("kill.json", variant="c"), "lost") == 0),
    ("caveats.not-zero-every-b-duplicate",
     lambda: total(runs("kill.json", variant="b"), "duplicates") > 0
     and all(not r["balances_exact"] for r in runs("kill.json", variant="b") if r["duplicates"])),
    # how the machine was shared
    # M2
    ("readme.every-eviction-cost-b-duplicate",
     lambda: all(r["duplicates"] == r["evictions"] for r in zombie("b"))
     and all(r["skipped"] >= r["evictions"] and r["duplicates"] == 0 for r in zombie("c"))),
    ("readme.skips-hundreds-messages-per-eviction",
     lambda: total(zombie("d"), "duplicates") == 0 and total(zombie("d"), "skipped") >= 100 * total(zombie("d"),
                                                                                                     "evictions")),
    ("readme.often-another-member-sometimes-zombie",
     lambda: total(zombie("b"), "moved_to_other") > total(zombie("b"), "back_to_zombie") > 0),
    ("readme.zombie-commit-accepted-got-partitions",
     lambda: total(zombie("b", "consumer"), "back_to_zombie") >= 0.9 * total(zombie("b", "consumer"), "evictions")),
    ("readme.b-mostly-did-not-duplicate",
     lambda: 2 * total(zombie("b", "consumer"), "duplicates") < total(zombie("b", "consumer"), "evictions")),
    ("readme.b-duplicates-once-per-eviction",
     lambda: all(r["duplicates"] == r["evictions"] for r in zombie("b", "consumer", "-stall20"))
     and total(zombie("c", "consumer", "-stall20"), "duplicates") == 0
     and total(zombie("c", "consumer", "-stall20"), "skipped") > 0),
    # #31, the inbox's own cost at batch scale (docs/throughput.md)
    ("throughput.claim-took-close-fifth-p",
     lambda: (lambda rate, cpu, s: 0.14 <= 1 - rate["median"] <= 0.25 and 0.14 <= 1 - 1 / cpu["median"] <= 0.25
              and s["p"]["cpu_us_per_msg"]["postgres_backends"]["median"]
              - s["p-bare"]["cpu_us_per_msg"]["postgres_backends"]["median"]
              > 0.75 * (s["p"]["cpu_us_per_msg"]["total"]["median"]
                        - s["p-bare"]["cpu_us_per_msg"]["total"]["median"]))(
         report_pair("p", "p-bare", "msgs_per_s"), report_pair("p", "p-bare", "cpu"),
         document("throughput-bare.json")["summary"]["variants"])),
    ("throughput.nearly-doubled-wal-written-per",
     lambda: 1.6 <= report_pair("p", "p-bare", "wal_bytes_per_msg")["median"] <= 2.2),
    # #31, retention beside a running p (docs/throughput.md)
    ("throughput.batched-delete-wrote-three-four",
     lambda: 3 <= document("retention-load.json")["summary"]["delete"]["wal_mb"]["median"]
     / document("retention-load.json")["summary"]["alone"]["wal_mb"]["median"] <= 4),
    ("throughput.ran-seconds-beside-p-dropping",
     lambda: all(r["retention_s"] >= 1 and r["retention_within_window"] for r in runs("retention-load.json",
                                                                                       mode="delete"))
     and all(r["retention_s"] < 0.2 * document("retention-load.json")["summary"]["delete"]["retention_s"]["median"]
             for m in ("drop", "detach") for r in runs("retention-load.json", mode=m))
     and all(document("retention-load.json")["summary"][m]["wal_mb"]["median"]
             <= 1.02 * document("retention-load.json")["summary"]["partitioned"]["wal_mb"]["median"]
             for m in ("drop", "detach"))),
    ("throughput.no-mode-median-longest-stall",
     lambda: all(s["longest_stall_ms"]["median"] < 100 for s in document("retention-load.json")["summary"].values())
     and document("retention-load.json")["summary"]["drop"]["longest_stall_ms"]["median"]
     <= document("retention-load.json")["summary"]["partitioned"]["longest_stall_ms"]["max"]),
    ("throughput.p-faster-partitioned-inbox-alone",
     lambda: document("retention-load.json")["summary"]["partitioned"]["msgs_per_s"]["median"]
     > document("retention-load.json")["summary"]["alone"]["msgs_per_s"]["median"]),
    # M8 (docs/cluster.md)
    ("cluster.acks-all-no-acknowledged-record",
     lambda: total(runs("cluster.json", acks="all"), "acked_missing") == 0
     and all(r["duplicates"] == r["lost"] == 0 for r in nonempty([
         r for r in runs("cluster.json") if r["variant"] in ("c", "d", "o") and not r["fault"].startswith("pg-")]))),
    ("cluster.every-variant-keeps-offset-kafka",
     lambda: all(total(runs("cluster.json", fault="pg-failover-stalled", replication="async", variant=v), "lost") > 0
                 for v in "bcd")
     and total(runs("cluster.json", fault="pg-failover-stalled", variant="o"), "lost") == 0),
    ("cluster.synchronous-standby-confirmed-commit-both",
     lambda: total(runs("cluster.json", replication="sync"), "lost") == 0),
    ("cluster.acks-1-rows-caught-none",
     lambda: total(runs("cluster-acks1.json", acks="1"), "acked_missing") == 0),
    # M4b
    ("readme.alarm-said-first-every-time",
     lambda: all(r["alarm"] for r in nonempty([r for r in runs("retention.json")
                                               if r["variant"] != "v7" and r["window"] != "longer"]))),
    ("readme.window-equal-replay-reach-not",
     lambda: all(total(runs("retention.json", variant=v, window="equal"), "duplicates") > 0 for v in "cdp")),
    ("readme.equal-window-still-held-old",
     lambda: total(runs("retention.json", variant="v7", window="equal"), "duplicates") == 0
     and total(runs("retention.json", variant="v7", window="shorter"), "duplicates") == 0
     and total(runs("retention.json", variant="v7", window="shorter"), "dead_lettered") > 0),
    # M6, reconnect or exit
    ("readme.neither-duplicates-nor-loses-c",
     lambda: all(r["duplicates"] == r["lost"] == 0 for r in runs("faults-reconnect.json"))
     and document("faults-reconnect.json")["summary"]["pg-restart/c"]["resume_s"]["median"]
     > document("faults-reconnect.json")["summary"]["pg-restart/c-reconnect"]["resume_s"]["median"]),
    # M6
    ("faults.no-fault-cost-c-or",
     lambda: all(r["duplicates"] == r["lost"] == 0 for r in runs("faults.json", variant="c") + runs("faults.json",
                                                                                                   variant="d"))),
    ("faults.duplicated-under-every-fault-separates",
     lambda: all(total(runs("faults.json", fault=f, variant="b"), "duplicates") > 0
                 for f in ("broker-restart", "partition-broker", "partition-db", "share-lock"))
     and total(runs("faults.json", fault="pg-restart", variant="b"), "duplicates")
     <= total(runs("faults.json", fault="pg-restart", variant="b"), "faults") // 5),
    ("faults.c-skipped-them-all",
     lambda: total(runs("faults.json", fault="share-lock", variant="c"), "duplicates") == 0
     and total(runs("faults.json", fault="share-lock", variant="c"), "skipped")
     >= total(runs("faults.json", fault="share-lock", variant="b"), "duplicates")),
    # M10
    ("faults-more.every-lost-reply-second-credit",
     lambda: (lambda b: total(b, "duplicates") == total(b, "faults") > 0)(
         runs("faults-more.json", fault="lost-commit-reply", variant="b"))),
    ("faults-more.reads-committed-offset-back-from",
     lambda: (lambda o: total(o, "skipped") == total(o, "duplicates") == total(o, "lost") == 0 < total(o, "faults"))(
         runs("faults-more.json", fault="lost-commit-reply", variant="o"))),
    ("faults-more.rest-batch-never-credited",
     lambda: total(runs("faults-more.json", fault="lost-commit-reply", variant="a2"), "lost") > 0),
    ("faults-more.once-disk-has-room-message",
     lambda: all(r["duplicates"] == r["lost"] == 0 for v in "bcdop" for r in runs("faults-more.json", fault="disk-full",
                                                                                 variant=v))),
    ("faults-more.commits-offsets-everything-poll-handed",
     lambda: total(runs("faults-more.json", fault="disk-full", variant="a2"), "lost") > 0),
    # M5
    ("external.retrying-charges-twice-exactly-when",
     lambda: total(runs("external.json", variant="retry"), "lost") == 0),
    ("external.never-charges-twice",
     lambda: total(runs("external.json", variant="skip"), "duplicates") == 0),
    ("external.retry-duplicates-outnumber-planted-crashes",
     lambda: total(runs("external.json", variant="retry"), "duplicates")
     > total(runs("external.json", variant="retry"), "crashed_after_call")),
    ("external.skip-losses-are-mostly-planted",
     lambda: 0.5 * total(runs("external.json", variant="skip"), "lost")
     < total(runs("external.json", variant="skip"), "crashed_before_call")
     <= total(runs("external.json", variant="skip"), "lost")),
    ("external.lease-counts-should-stay-zero",
     lambda: all(r["lease_short"] == r["lease_taken_over"] == 0 for r in runs("external.json"))),
    # M7a
    ("eos.output-topic-read-downstream-consumer",
     lambda: all(r["topic_copies"] == r["topic_missing"] == 0 for r in landed("eos.json"))
     and all(r["aborted_copies"] > 0 for r in landed("eos.json", point="kill"))),
    ("eos.e-applies-each-one-second",
     lambda: all(r["duplicates"] > 0 for p in ("kill", "pg-committed")
                 for r in landed("eos.json", variant="e", point=p))
     and all(r["duplicates"] == r["lost"] == 0 and r["balances_exact"] for r in landed("eos.json", variant="f"))),
    ("eos.e-duplicates-run-little-above",
     lambda: all(total(rows, "aborted_copies") <= total(rows, "duplicates") <= 1.1 * total(rows, "aborted_copies")
                 for rows in (landed("eos.json", variant="e", point=p) for p in ("kill", "pg-committed")))),
    ("eos.crash-right-after-kafka-commit",
     lambda: all(r["duplicates"] == r["lost"] == 0 and r["balances_exact"]
                 for r in landed("eos.json", point="kafka-committed"))),
    # M7b
    ("eos.every-row-b-applied-each",
     lambda: all(r["duplicates"] == r["log_copies"] for r in runs("publish.json", variant="b"))
     and all(r["duplicates"] == 0 for r in runs("publish.json", variant="c") + runs("publish.json", variant="d"))),
    ("eos.single-producer-session-idempotence-wrote",
     lambda: total(runs("publish.json", source="retries", idempotence="on"), "log_copies") == 0),
    # M9
    ("frameworks.fs-default-duplicates-every-run",
     lambda: all(r["duplicates"] > 0 for r in runs("kill-frameworks.json", variant="fs-default"))),
    ("frameworks.qx-eos-duplicates-nothing-under",
     lambda: total(runs("kill-frameworks.json", variant="qx-eos"), "duplicates") == 0),
    ("frameworks.fs-inbox-inbox-handler-duplicates",
     lambda: total(runs("kill-frameworks.json", variant="fs-inbox"), "duplicates") == 0),
    # lanes
    ("lanes.thousands-skips-run-no-duplicate",
     lambda: all(r["skipped"] >= 1000 and r["duplicates"] == 0 for r in runs("kill-k.json"))),
    # M3's batch sweep
    ("throughput.each-larger-batch-measured-here",
     lambda: (lambda m: all(a < b for a, b in zip(m, m[1:], strict=False))
              and m[2] / m[0] > max(m[3] / m[2], m[4] / m[3]))(
         [median("throughput-batch.json", f"d@{n}") for n in (1, 10, 100, 500, 1000)])),
    # lanes' CPU
    ("lanes.below-c-more-more-lanes",
     lambda: (lambda cpu: all(a > b for a, b in zip(cpu, cpu[1:], strict=False)))(
         [document("throughput-lanes.json")["summary"]["variants"][v]["cpu_us_per_msg"]["total"]["median"]
          for v in ("c", "k@1", "k@4", "k@16")])),
    ("readme.same-guarantee-many-times-c",
     lambda: ratio("throughput.json", "d/c")["median"] > 5),
    # M3 and #31
    ("throughput.one-connection-p-reaches-most",
     lambda: ratio("throughput-pipelined.json", "p/db")["median"] > 0.5),
    # latency at fixed loads
    ("throughput.low-loads-c-applies-credit",
     lambda: all(latency(f"c@{r}/s") < 10 <= latency(f"{v}@{r}/s") < 100 for r in (200, 500) for v in "dp")),
    ("throughput.price-stays-about-flat-load",
     lambda: all(latency(f"{v}@5000/s") < 1.5 * latency(f"{v}@200/s") for v in "dp")),
    # the batch wait's floor (--sweep-batch)
    ("throughput.200-second-batch-50-changed",
     lambda: all(abs(batch_case(f"{v}@200/s batch 50", "credits_per_transaction")
                     / batch_case(f"{v}@200/s", "credits_per_transaction") - 1) < 0.2
                 and 15 <= batch_case(f"{v}@200/s", "credits_per_transaction") <= 25
                 and abs(batch_case(f"{v}@200/s batch 50") / batch_case(f"{v}@200/s") - 1) < 0.1 for v in "dp")),
    ("throughput.batch-10-halved-p50-p99",
     lambda: all(batch_case(f"{v}@200/s batch 10", f) < 0.6 * batch_case(f"{v}@200/s", f)
                 for v in "dp" for f in ("p50_ms", "p99_ms"))
     and all(batch_case(f"{v}@200/s batch 1") < 1.5 * batch_case("c@200/s") for v in "dp")),
    ("throughput.50-cut-median-p50-under",
     lambda: all(batch_case(f"{v}@5000/s batch 50") < batch_case(f"{v}@5000/s") / 3 for v in "dp")),
    ("throughput.while-batches-10-1-could",
     lambda: all(batch_case(f"{v}@5000/s batch {n}") > 1000 for v in "dp" for n in (10, 1))),
    ("throughput.no-case-lost-or-duplicated",
     lambda: all(sum(s["totals"].values()) == 0 for s in document("latency-batch.json")["summary"].values())),
    # more consumers
    ("throughput.c-d-gain-most-from",
     lambda: min(gain("c:2/c:1"), gain("d:2/d:1")) > 1.3 * gain("p:2/p:1")
     and gain("c:3/c:1") > 1.15 * gain("c:2/c:1")
     and all(gain(f"{v}:3/{v}:1") < 1.15 * gain(f"{v}:2/{v}:1") for v in "dp")),
    ("throughput.one-c-keeps-under-one",
     lambda: cores("throughput-consumers.json", "c:1") < 1
     and cores("throughput-consumers.json", "c:3") >= 0.95 * max(cores("throughput-consumers.json", f"{v}:{n}")
                                                                 for v in "cdp" for n in (1, 2, 3))),
    ("throughput.d-gains-about-much-from",
     lambda: gain("d:2/d:1") >= 0.9 * gain("c:2/c:1") and gain("d:3/d:1") < 1.15 * gain("d:2/d:1")),
    ("throughput.about-1-6-them-busy",
     lambda: all(1.45 <= max(cores("throughput-consumers.json", f"{v}:{n}") for n in (1, 2, 3)) <= 1.8
                 for v in "cdp")),
    ("throughput.p-gains-least-from-more",
     lambda: gain("p:3/p:1") < min(gain("c:3/c:1"), gain("d:3/d:1"))),
    # fewer shared accounts
    ("throughput.spreading-credits-does-not-make",
     lambda: spread_hurts("throughput-accounts.json", ("d", "p", "p@2", "p-lean", "p-lean@2"))
     and spread_hurts("throughput-consumers-accounts.json", (f"{v}:{n}" for v in "dp" for n in (1, 2, 3)))),
    ("throughput.c-which-credits-one-account",
     lambda: all(0.9 <= ratio("throughput-consumers-accounts.json", f"c:{n}, 10,000 accounts/c:{n}, 100 accounts")[
         "median"] <= 1.1 for n in (1, 2, 3))),
    ("throughput.gain-no-more-10-000",
     lambda: median("throughput-accounts.json", "p@2, 10,000 accounts") / median("throughput-accounts.json",
                                                                                "p, 10,000 accounts")
     <= 1.1 * median("throughput-accounts.json", "p@2, 100 accounts") / median("throughput-accounts.json",
                                                                               "p, 100 accounts")),
    # a growing inbox
    ("throughput.v7-runs-d-p-faster",
     lambda: all(growth(v, "uuid-v7", n)["vs_text"]["median"] > 1 for v in "dp" for n in (10_000_000, 50_000_000))
     and growth("d", "uuid-v7", 50_000_000)["vs_text"]["median"] > growth("d", "uuid-v7", 10_000_000)["vs_text"][
         "median"]),
    ("throughput.v4-costs-d-p-large",
     lambda: all(growth(v, "text", 50_000_000)["vs_empty"]["median"] < growth(v, "text", 10_000_000)["vs_empty"][
         "median"] < 0.8 for v in "dp")),
    ("throughput.v4-wal-per-credit-grows",
     lambda: all(growth(v, "text", 50_000_000)["wal_bytes_per_msg"]["median"]
                 > 5 * growth(v, "text", 0)["wal_bytes_per_msg"]["median"] for v in "dp")),
    ("throughput.c-does-not-notice-every",
     lambda: all(0.8 <= growth("c", "uuid-v7", n)["vs_text"]["median"] <= 1.25
                 for n in (0, 10_000_000, 50_000_000))
     and all(0.85 <= growth("c", "text", n)["vs_empty"]["median"] for n in (10_000_000, 50_000_000))),
    ("throughput.v4-postgres-backends-cpu-per",
     lambda: all(growth_cpu(v, "text", 50_000_000) > 2 * growth_cpu(v, "text", 0)
                 and growth_cpu(v, "uuid-v7", 50_000_000) < 1.2 * growth_cpu(v, "uuid-v7", 0) for v in "dp")),
    ("throughput.backends-did-work-harder-v4",
     lambda: 1.08 < growth_cpu("c", "text", 50_000_000) / growth_cpu("c", "text", 0) < 1.25),
    # M1 against the post
    ("caveats.b-count-comes-out-lower",
     lambda: statistics.median(r["duplicates"] for r in runs("kill.json", variant="b"))
     < document("post-figures.json")["kill"]["variants"]["b"]["duplicates"]["median"]),
    # M2, the classic protocol and the 20 s stall under KIP-848
    ("readme.zombie-offset-commit-fails-unknown",
     lambda: all(r["commit_failed"].get("UNKNOWN_MEMBER_ID", 0) == r["evictions"] for r in zombie("b"))),
    ("readme.nobody-else-given-those-partitions",
     lambda: all(0.75 <= statistics.median(nonempty([h for r in zombie(v, "consumer", "-stall20")
                                                     for h in r["handover_s"]]))
                 / (config(f"rebalance-{v}-consumer-stall20.json")["session_timeout_ms"] / 1000) <= 1.25
                 for v in "bc")),
    ("readme.fenced-commit-fails-another-member",
     lambda: all(r["commit_failed"].get("UNKNOWN_MEMBER_ID", 0) == r["evictions"]
                 for v in "bc" for r in zombie(v, "consumer", "-stall20"))
     and all(total(zombie(v, "consumer", "-stall20"), "moved_to_other")
             > total(zombie(v, "consumer", "-stall20"), "back_to_zombie") for v in "bc")),
    # M10, each fault
    ("faults-more.message-comes-again-meets-inbox",
     lambda: every_run("faults-more.json", fault="lost-commit-reply", variant="c")(
         lambda r: r["duplicates"] == r["lost"] == 0 < r["faults"] == r["skipped"])),
    ("faults-more.replayed-batch-meets-inbox-rows",
     lambda: every_run("faults-more.json", fault="lost-commit-reply", variant="p")(
         lambda r: r["duplicates"] == r["lost"] == 0 < r["skipped"])),
    ("faults-more.waits-lock-until-paused-process",
     lambda: every_run("faults-more.json", fault="pause-consumer", variant="c")(
         lambda r: r["duplicates"] == r["lost"] == 0)
     and total(runs("faults-more.json", fault="pause-consumer", variant="c"), "skipped") > 0),
    ("faults-more.without-inbox-b-new-owner",
     lambda: every_run("faults-more.json", fault="pause-consumer", variant="b")(lambda r: r["duplicates"] > 0)),
    ("faults-more.new-owner-replays-p-batch",
     lambda: every_run("faults-more.json", fault="pause-consumer", variant="p")(
         lambda r: r["duplicates"] == r["lost"] == 0 < r["skipped"])),
    ("faults-more.new-owner-insert-finds-row",
     lambda: every_run("faults-more.json", fault="pause-postgres", variant="c")(
         lambda r: r["duplicates"] == r["lost"] == 0)
     and total(runs("faults-more.json", fault="pause-postgres", variant="c"), "skipped") > 0
     and every_run("faults-more.json", fault="pause-postgres", variant="b")(lambda r: r["duplicates"] > 0)),
    ("faults-more.c-d-p-skip-every",
     lambda: all(r["duplicates"] == 0 and r["skipped"] == r["events"]
                 for v in "cdp" for r in runs("faults-more-offsets.json", fault="offsets-expired", variant=v))
     and (lambda share: share > 0 and all(
         r["duplicates"] == round(share * r["events"]) and r["skipped"] == r["events"] - r["duplicates"]
         for v in "cdp" for r in runs("faults-more-offsets-forgotten.json", fault="offsets-expired", variant=v)))(
         config("faults-more-offsets-forgotten.json")["forgotten"])),
    ("faults-more.starts-where-database-says-reads",
     lambda: all(r["duplicates"] == r["skipped"] == r["lost"] == 0
                 for f in ("faults-more-offsets.json", "faults-more-offsets-forgotten.json")
                 for r in runs(f, fault="offsets-expired", variant="o"))),
    ("faults-more.next-one-starts-once-where",
     lambda: every_run("faults-more.json", fault="sigterm")(
         lambda r: r["faults"] > 0 and r["duplicates"] == r["lost"] == r["skipped"] == 0)),
    ("faults-more.c-others-read-new-log",
     lambda: every_run("faults-more.json", fault="topic-recreated")(
         lambda r: r["faults"] > 0 and r["duplicates"] == r["lost"] == 0)),
    # M9
    ("frameworks.fs-ack-duplicates-few-run",
     lambda: every_run("kill-frameworks.json", variant="fs-ack")(lambda r: 0 < r["duplicates"] <= 10)),
    ("frameworks.under-faststream-inbox-stops-duplicates",
     lambda: total(runs("kill-frameworks.json", variant="fs-inbox"), "duplicates") == 0
     < total(runs("kill-frameworks.json", variant="fs-inbox"), "lost")),
    ("frameworks.shows-committing-message-itself-commit",
     lambda: total(runs("async-commit.json", variant="the-message"), "past_the_message") == 0
     < total(runs("async-commit.json", variant="the-message"), "trials")
     and total(runs("async-commit.json", variant="stored-offsets"), "past_the_message") > 0),
    ("frameworks.accounts-balances-stay-0-their",
     lambda: all(r["balance_total"] == 0 and not r["balances_exact"]
                 for v in ("qx-eos", "qx-eos-keyed") for r in runs("kill-frameworks.json", variant=v))),
    ("frameworks.keyed-sink-makes-rows-exactly",
     lambda: all(r["duplicates"] == r["lost"] == 0
                 for f in ("kill-frameworks.json", "rebalance-frameworks-classic.json")
                 for r in runs(f, variant="qx-eos-keyed"))),
    ("results.they-write-rows-not-credits",
     lambda: all(not r["balances_exact"] for f in ("kill-frameworks.json", "rebalance-frameworks-classic.json")
                 for v in ("qx-eos", "qx-eos-keyed") for r in runs(f, variant=v))),
    # M7b, and the post's shortcuts against the same copies
    ("eos.every-source-but-one-put",
     lambda: [name for name, where in (("relay", {"source": "relay"}), ("restart", {"source": "restart"}),
                                       ("retries off", {"source": "retries", "idempotence": "off"}),
                                       ("retries on", {"source": "retries", "idempotence": "on"}))
              if total(runs("publish.json", **where), "log_copies") == 0] == ["retries on"]),
    ("eos.idempotence-off-librdkafka-own-resends",
     lambda: (lambda rows: total(rows, "log_copies") > 0 and all(r["log_copies"] <= 0.01 * r["events"] for r in rows))(
         runs("publish.json", source="retries", idempotence="off"))),
    ("eos.copy-publisher-writes-again-has",
     lambda: (lambda rows: total(rows, "log_copies") > 0 and all(r["duplicates"] == r["log_copies"] for r in rows))(
         runs("publish.json", variant="offset-dedup"))),
    ("eos.late-copy-writes-nothing",
     lambda: (lambda rows: total(rows, "log_copies") > 0
              and all(r["duplicates"] == r["stale_accounts"] == 0 for r in rows))(
         runs("publish.json", variant="versioned"))),
    # lanes
    ("lanes.caps-under-hundred-messages-second",
     lambda: median("throughput-lanes.json", "c") < 100),
    ("lanes.lanes-add-rate-nearly-one",
     lambda: (lambda per: per[1] >= 0.9 and per[4] >= 0.85 and per[4] > per[16] > per[64])(
         {n: ratio("throughput-lanes.json", f"k@{n}/c")["median"] / n for n in (1, 4, 16, 64)})),
    # M3's batch sweep (d@1 against M3's own c), p and its profile
    ("throughput.batch-one-d-slower-than",
     lambda: median("throughput-batch.json", "d@1") < median("throughput.json", "c")),
    ("throughput.second-connection-gives-second-backend",
     lambda: cores("throughput-connections.json", "p@2") > cores("throughput-connections.json", "p")
     and ratio("throughput-connections.json", "p@2/db@2")["median"] < 1),
    ("throughput.second-backend-kept-little-more",
     lambda: 0.05 < cores("throughput-connections.json", "p@2") - cores("throughput-connections.json", "p") < 0.25
     and abs(ratio("throughput-connections.json", "p@2/d")["median"]
             / ratio("throughput-connections.json", "p/d")["median"] - 1) < 0.1),
    # CPU per message, split by process, against the ceilings
    ("throughput.checks-every-variant-does-nothing",
     lambda: all(cpu(name, "raw") < 10 for name in ("throughput.json", "throughput-pipelined.json"))),
    ("throughput.p-statement-alone-db-costs",
     lambda: all(abs(cpu(name, "db", "postgres_backends") / cpu(name, "p", "postgres_backends") - 1) < 0.25
                 for name in ("throughput-pipelined.json", "throughput-connections.json"))),
    ("throughput.nearly-all-p-postgres-side",
     lambda: all(cpu(name, "db", "postgres_backends") >= 0.85 * cpu(name, "p", "postgres_backends")
                 for name in ("throughput-pipelined.json", "throughput-connections.json"))),
    ("throughput.raw-python-statement-own-python",
     lambda: (lambda f: 0.5 < (f("raw") + f("db")) / f("p") < 1)(
         lambda v: cpu("throughput-pipelined.json", v, "consumer_python"))),
    ("throughput.d-ceilings-keep-about-one",
     lambda: all(0.8 <= cores(name, v) <= 1.15 for name, vs in (("throughput-pipelined.json", ("d", "db", "db-d")),
                                                                ("throughput-connections.json", ("d", "db")))
                 for v in vs)),
    ("throughput.p-overlaps-two-keeps-1",
     lambda: all(1.25 <= cores(name, "p") < 1.45 for name in ("throughput-pipelined.json",
                                                              "throughput-connections.json"))),
    ("throughput.two-connections-p-db-alike",
     lambda: all(1.45 <= cores("throughput-connections.json", v) <= 1.8 for v in ("p@2", "db@2"))),
    ("throughput.same-code-p-cost-36",
     lambda: [f"{cpu(name, 'p'):.1f} {median(name, 'p'):,.0f}" for name in ("throughput-pipelined.json",
                                                                            "throughput-frameworks.json")]
     == ["36.5 37,027", "22.1 59,898"]
     and {document(name)["runs"][0]["commit"] for name in ("throughput-pipelined.json", "throughput-frameworks.json")}
     <= {"688fcff75260", "f8e0003de12e"}),
    ("throughput.both-moved-about-same-factor",
     lambda: (lambda files: 0.85 < (cpu(files[0], "p") / cpu(files[1], "p"))
              / (median(files[1], "p") / median(files[0], "p")) < 1.15
              and all(1.25 <= cores(name, "p") < 1.45 for name in files))(
         ("throughput-pipelined.json", "throughput-frameworks.json"))),
    ("throughput.which-why-leaner-p-lean",
     lambda: median("throughput-lean.json", "p-lean@2") > median("throughput-lean.json", "p@2")
     and cpu("throughput-lean.json", "p-lean@2") < cpu("throughput-lean.json", "p@2")
     and abs(cores("throughput-lean.json", "p-lean@2") / cores("throughput-lean.json", "p@2") - 1) < 0.1),
    ("throughput.postgres-backend-serving-statements-busiest",
     lambda: (lambda parts: 65 <= parts["Postgres backend"] <= 85
              and parts["Postgres backend"] > 2 * max(v for k, v in parts.items() if k != "Postgres backend"))(
         {k: profile_share("profile-p.txt", k) for k in ("main thread", "database thread", "librdkafka threads",
                                                          "Postgres backend", "Kafka broker")})),
    ("throughput.database-thread-psycopg-work-broker",
     lambda: 40 <= sum(profile_share("profile-p.txt", k) for k in ("main thread", "database thread",
                                                                    "librdkafka threads", "Kafka broker")) <= 60),
    ("throughput.checker-order-count-recorded-every",
     lambda: all(r["order_violations"] > 0 for v in "dp" for r in runs("throughput-pipelined.json", variant=v))),
    # latency
    ("throughput.5-credits-take-tens-seconds",
     lambda: latency("c@5000/s", "max_ms") >= 10_000 > 100 * latency("c@500/s", "max_ms")),
    ("throughput.d-p-single-paced-publisher",
     lambda: all(r["offered_per_s"] < min(0.9 * r["load"], 0.5) * r["capacity_per_s"]
                 for v in "dp" for r in runs("latency-saturation.json", variant=v))),
    # fewer shared accounts
    ("throughput.their-cpu-per-message-rises",
     lambda: all(cpu("throughput-accounts.json", f"{v}, 10,000 accounts") > cpu("throughput-accounts.json",
                                                                                 f"{v}, 100 accounts")
                 for v in ("d", "p", "p@2", "p-lean", "p-lean@2"))
     and all(cpu("throughput-consumers-accounts.json", f"{v}:{n}, 10,000 accounts")
             > cpu("throughput-consumers-accounts.json", f"{v}:{n}, 100 accounts") for v in "dp" for n in (1, 2, 3))
     and spread_hurts("throughput-accounts.json", ("d", "p", "p@2", "p-lean", "p-lean@2"))
     and spread_hurts("throughput-consumers-accounts.json", (f"{v}:{n}" for v in "dp" for n in (1, 2, 3)))),
    ("throughput.not-much-more-p-lean",
     lambda: median("throughput-accounts.json", "p-lean@2, 10,000 accounts") / median("throughput-accounts.json",
                                                                                     "p-lean, 10,000 accounts")
     <= 1.15 * median("throughput-accounts.json", "p-lean@2, 100 accounts") / median("throughput-accounts.json",
                                                                                    "p-lean, 100 accounts")),
]


MARKED = re.compile(r"<!-- claim:([a-z0-9][a-z0-9.-]*) -->(.*?)<!-- /claim -->", re.S)  # names: lowercase
PAGES = ("README.md", "docs")  # where a claim may be marked


def marked() -> dict[str, list[tuple[str, str]]]:
    """name -> [(page, sentence)] for every claim marker in README.md and docs/."""
    found: dict[str, list[tuple[str, str]]] = {}
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for m in MARKED.finditer(path.read_text()):
            found.setdefault(m.group(1), []).append((str(path.relative_to(ROOT)), " ".join(m.group(2).split())))
    return found


def failing(claims=CLAIMS, unchecked: list | None = None) -> list[str]:
    """Each claim not marked exactly once in the pages, or whose results no longer bear it
    out, or bear it out only over nothing; and each marked sentence with no claim to check it.
    `unchecked`, if given, gets the claims whose file is missing."""
    said, found = [], marked()
    for name, holds in claims:
        places = found.get(name, [])
        if len(places) != 1:
            said.append(f"claim {name} is marked {len(places)} times in README.md and docs/ (once, around its "
                        "sentence: <!-- claim:NAME -->...<!-- /claim -->); mark it, or drop it from lab/claims.py")
            continue
        (page, sentence), = places
        try:
            if not holds():
                said.append(f"{page}: the results no longer bear out {sentence!r} (claim {name}, lab/claims.py)")
        except Vacuous as nothing:
            said.append(f"{page}: {sentence!r} holds over nothing: {nothing} (claim {name}, lab/claims.py)")
        except Missing as gone:
            if unchecked is not None:
                unchecked.append(f"{page}: {sentence!r} not checked: results/{gone} is missing")
    checked = {name for name, _ in claims}
    said += [f"{places[0][0]}: a sentence is marked as claim {name}, which lab/claims.py does not check"
             for name, places in found.items() if name not in checked and claims is CLAIMS]
    return said


if __name__ == "__main__":
    missing: list[str] = []
    problems = failing(unchecked=missing)
    print("\n".join(problems + missing) or f"all {len(CLAIMS)} claims hold")
    raise SystemExit(1 if problems else 0)
