"""The hand-written sentences of README.md and docs/ that state a measured outcome, each
with the check that keeps it true.

Tables and their footers are generated (report.py). Prose that reads them ("every eviction
cost b a duplicate") is written by hand, so it can outlive the figures that bore it out:
a re-measured file may say otherwise. Each entry names a page, the sentence as it reads
there (whitespace aside), and a predicate over the results files. `report.py --check` (a
test) fails when a predicate no longer holds, or when its sentence has left the page, so
that a sentence is reworded, or its entry dropped, in the same change that moves it.

A sentence whose results file is missing is not checked (the page says the file is
missing in the generated section beside it).
"""
import json
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
    ("docs/caveats.md", "c's zeros do not depend on either",
     lambda: total(runs("kill.json", variant="c"), "duplicates") + total(runs("kill.json", variant="c"), "lost") == 0),
    ("docs/caveats.md", "it is not zero, and every b duplicate left a balance wrong",
     lambda: total(runs("kill.json", variant="b"), "duplicates") > 0
     and all(not r["balances_exact"] for r in runs("kill.json", variant="b") if r["duplicates"])),
    # how the machine was shared
    # M2
    ("README.md", "Every eviction cost b a duplicate and c a skip",
     lambda: all(r["duplicates"] == r["evictions"] for r in zombie("b"))
     and all(r["skipped"] >= r["evictions"] and r["duplicates"] == 0 for r in zombie("c"))),
    ("README.md", "so it skips hundreds of messages per eviction and duplicates none",
     lambda: total(zombie("d"), "duplicates") == 0 and total(zombie("d"), "skipped") >= 100 * total(zombie("d"),
                                                                                                     "evictions")),
    ("README.md", "Often that was another member; sometimes it was the zombie itself",
     lambda: total(zombie("b"), "moved_to_other") > total(zombie("b"), "back_to_zombie") > 0),
    ("README.md", "the zombie's commit was accepted and it got its partitions straight back",
     lambda: total(zombie("b", "consumer"), "back_to_zombie") >= 0.9 * total(zombie("b", "consumer"), "evictions")),
    ("README.md", "so b mostly did *not* duplicate",
     lambda: 2 * total(zombie("b", "consumer"), "duplicates") < total(zombie("b", "consumer"), "evictions")),
    ("README.md", "and b duplicates once per eviction again, while c skips",
     lambda: all(r["duplicates"] == r["evictions"] for r in zombie("b", "consumer", "-stall20"))
     and total(zombie("c", "consumer", "-stall20"), "duplicates") == 0
     and total(zombie("c", "consumer", "-stall20"), "skipped") > 0),
    # #31, the inbox's own cost at batch scale (docs/throughput.md)
    ("docs/throughput.md", "the claim took close to a fifth of p's rate and of its CPU per message (the medians), "
                           "nearly all of that in the Postgres backend",
     lambda: (lambda rate, cpu, s: 0.14 <= 1 - rate["median"] <= 0.25 and 0.14 <= 1 - 1 / cpu["median"] <= 0.25
              and s["p"]["cpu_us_per_msg"]["postgres_backends"]["median"]
              - s["p-bare"]["cpu_us_per_msg"]["postgres_backends"]["median"]
              > 0.75 * (s["p"]["cpu_us_per_msg"]["total"]["median"]
                        - s["p-bare"]["cpu_us_per_msg"]["total"]["median"]))(
         report_pair("p", "p-bare", "msgs_per_s"), report_pair("p", "p-bare", "cpu"),
         document("throughput-bare.json")["summary"]["variants"])),
    ("docs/throughput.md", "it nearly doubled the WAL written per credit",
     lambda: 1.6 <= report_pair("p", "p-bare", "wal_bytes_per_msg")["median"] <= 2.2),
    # #31, retention beside a running p (docs/throughput.md)
    ("docs/throughput.md", "The batched delete wrote three to four times the WAL p wrote alone",
     lambda: 3 <= document("retention-load.json")["summary"]["delete"]["wal_mb"]["median"]
     / document("retention-load.json")["summary"]["alone"]["wal_mb"]["median"] <= 4),
    ("docs/throughput.md", "and ran for seconds beside p; dropping the same days, or detaching them first, took "
                           "under a fifth of the delete's time and wrote no more WAL than p alone on that layout",
     lambda: all(r["retention_s"] >= 1 and r["retention_within_window"] for r in runs("retention-load.json",
                                                                                       mode="delete"))
     and all(r["retention_s"] < 0.2 * document("retention-load.json")["summary"]["delete"]["retention_s"]["median"]
             for m in ("drop", "detach") for r in runs("retention-load.json", mode=m))
     and all(document("retention-load.json")["summary"][m]["wal_mb"]["median"]
             <= 1.02 * document("retention-load.json")["summary"]["partitioned"]["wal_mb"]["median"]
             for m in ("drop", "detach"))),
    ("docs/throughput.md", "no mode's median longest stall reached a tenth of a second, and the drop's stayed within "
                           "the range of p alone on the partitioned inbox",
     lambda: all(s["longest_stall_ms"]["median"] < 100 for s in document("retention-load.json")["summary"].values())
     and document("retention-load.json")["summary"]["drop"]["longest_stall_ms"]["median"]
     <= document("retention-load.json")["summary"]["partitioned"]["longest_stall_ms"]["max"]),
    ("docs/throughput.md", "p was faster on the partitioned inbox alone than on the unpartitioned one",
     lambda: document("retention-load.json")["summary"]["partitioned"]["msgs_per_s"]["median"]
     > document("retention-load.json")["summary"]["alone"]["msgs_per_s"]["median"]),
    # M8 (docs/cluster.md)
    ("docs/cluster.md", "with acks=all no acknowledged record went missing from the log, c, d and o applied every "
                        "credit once through every leader and controller move",
     lambda: total(runs("cluster.json", acks="all"), "acked_missing") == 0
     and all(r["duplicates"] == r["lost"] == 0 for r in nonempty([
         r for r in runs("cluster.json") if r["variant"] in ("c", "d", "o") and not r["fault"].startswith("pg-")]))),
    ("docs/cluster.md", "every variant that keeps its offset in Kafka (b, c, d) then loses what the window held, "
                        "while o, whose offsets fail over with its credits, loses nothing",
     lambda: all(total(runs("cluster.json", fault="pg-failover-stalled", replication="async", variant=v), "lost") > 0
                 for v in "bcd")
     and total(runs("cluster.json", fault="pg-failover-stalled", variant="o"), "lost") == 0),
    ("docs/cluster.md", "With a synchronous standby a confirmed commit is on both servers, and the failover forgets "
                        "nothing",
     lambda: total(runs("cluster.json", replication="sync"), "lost") == 0),
    ("docs/cluster.md", "The acks=1 rows caught none",
     lambda: total(runs("cluster-acks1.json", acks="1"), "acked_missing") == 0),
    # M4b
    ("README.md", "The alarm said so first, every time",
     lambda: all(r["alarm"] for r in nonempty([r for r in runs("retention.json")
                                               if r["variant"] != "v7" and r["window"] != "longer"]))),
    ("README.md", "A window equal to the replay's reach is not enough",
     lambda: all(total(runs("retention.json", variant=v, window="equal"), "duplicates") > 0 for v in "cdp")),
    ("README.md", "so at the equal window it still held the old day; one day shorter, it refused the old IDs as too "
                  "old to check and dead-lettered them, instead of applying them blind",
     lambda: total(runs("retention.json", variant="v7", window="equal"), "duplicates") == 0
     and total(runs("retention.json", variant="v7", window="shorter"), "duplicates") == 0
     and total(runs("retention.json", variant="v7", window="shorter"), "dead_lettered") > 0),
    # M6, reconnect or exit
    ("README.md", "Neither duplicates nor loses; c starts crediting again a little later",
     lambda: all(r["duplicates"] == r["lost"] == 0 for r in runs("faults-reconnect.json"))
     and document("faults-reconnect.json")["summary"]["pg-restart/c"]["resume_s"]["median"]
     > document("faults-reconnect.json")["summary"]["pg-restart/c-reconnect"]["resume_s"]["median"]),
    # M6
    ("docs/faults.md", "No fault cost c or d a credit or a duplicate",
     lambda: all(r["duplicates"] == r["lost"] == 0 for r in runs("faults.json", variant="c") + runs("faults.json",
                                                                                                   variant="d"))),
    ("docs/faults.md", "duplicated under every fault that separates its database commit from its offset commit. A "
                       "database restart rarely does",
     lambda: all(total(runs("faults.json", fault=f, variant="b"), "duplicates") > 0
                 for f in ("broker-restart", "partition-broker", "partition-db", "share-lock"))
     and total(runs("faults.json", fault="pg-restart", variant="b"), "duplicates")
     <= total(runs("faults.json", fault="pg-restart", variant="b"), "faults") // 5),
    ("docs/faults.md", "c skipped them all",
     lambda: total(runs("faults.json", fault="share-lock", variant="c"), "duplicates") == 0
     and total(runs("faults.json", fault="share-lock", variant="c"), "skipped")
     >= total(runs("faults.json", fault="share-lock", variant="b"), "duplicates")),
    # M10
    ("docs/faults-more.md", "every lost reply is a second credit",
     lambda: (lambda b: total(b, "duplicates") == total(b, "faults") > 0)(
         runs("faults-more.json", fault="lost-commit-reply", variant="b"))),
    ("docs/faults-more.md", "reads the committed offset back from the database and does not read the message again "
                            "at all",
     lambda: (lambda o: total(o, "skipped") == total(o, "duplicates") == total(o, "lost") == 0 < total(o, "faults"))(
         runs("faults-more.json", fault="lost-commit-reply", variant="o"))),
    ("docs/faults-more.md", "the rest of that batch is never credited",
     lambda: total(runs("faults-more.json", fault="lost-commit-reply", variant="a2"), "lost") > 0),
    ("docs/faults-more.md", "Once the disk has room the message is read again and applied once",
     lambda: all(r["duplicates"] == r["lost"] == 0 for v in "bcdop" for r in runs("faults-more.json", fault="disk-full",
                                                                                 variant=v))),
    ("docs/faults-more.md", "commits the offsets of everything that poll handed over: the rest of it is lost",
     lambda: total(runs("faults-more.json", fault="disk-full", variant="a2"), "lost") > 0),
    # M5
    ("docs/external.md", "Retrying charges twice exactly when the first attempt had landed, and never loses one",
     lambda: total(runs("external.json", variant="retry"), "lost") == 0),
    ("docs/external.md", "and never charges twice",
     lambda: total(runs("external.json", variant="skip"), "duplicates") == 0),
    ("docs/external.md", "Retry's duplicates outnumber its planted crashes",
     lambda: total(runs("external.json", variant="retry"), "duplicates")
     > total(runs("external.json", variant="retry"), "crashed_after_call")),
    ("docs/external.md", "Skip's losses are mostly the planted ones",
     lambda: 0.5 * total(runs("external.json", variant="skip"), "lost")
     < total(runs("external.json", variant="skip"), "crashed_before_call")
     <= total(runs("external.json", variant="skip"), "lost")),
    ("docs/external.md", "The lease counts should stay at zero on loopback",
     lambda: all(r["lease_short"] == r["lease_taken_over"] == 0 for r in runs("external.json"))),
    # M7a
    ("docs/eos.md", "The output topic, read as a downstream consumer reads it, is where Kafka's",
     lambda: all(r["topic_copies"] == r["topic_missing"] == 0 for r in landed("eos.json"))
     and all(r["aborted_copies"] > 0 for r in landed("eos.json", point="kill"))),
    ("docs/eos.md", "e applies each one a second time. f's inbox rows were committed",
     lambda: all(r["duplicates"] > 0 for p in ("kill", "pg-committed")
                 for r in landed("eos.json", variant="e", point=p))
     and all(r["duplicates"] == r["lost"] == 0 and r["balances_exact"] for r in landed("eos.json", variant="f"))),
    ("docs/eos.md", "e's duplicates run a\nlittle above its aborted output copies",
     lambda: all(total(rows, "aborted_copies") <= total(rows, "duplicates") <= 1.1 * total(rows, "aborted_copies")
                 for rows in (landed("eos.json", variant="e", point=p) for p in ("kill", "pg-committed")))),
    ("docs/eos.md", "A crash right\nafter Kafka's commit left nothing owed, and both variants stayed exact there.",
     lambda: all(r["duplicates"] == r["lost"] == 0 and r["balances_exact"]
                 for r in landed("eos.json", point="kafka-committed"))),
    # M7b
    ("docs/eos.md", "in every row b applied each copy (its duplicates are the log's copies) while c and d applied none",
     lambda: all(r["duplicates"] == r["log_copies"] for r in runs("publish.json", variant="b"))
     and all(r["duplicates"] == 0 for r in runs("publish.json", variant="c") + runs("publish.json", variant="d"))),
    ("docs/eos.md", "A single producer session with idempotence on wrote no copy",
     lambda: total(runs("publish.json", source="retries", idempotence="on"), "log_copies") == 0),
    # M9
    ("docs/frameworks.md", "**fs-default** duplicates on every run",
     lambda: all(r["duplicates"] > 0 for r in runs("kill-frameworks.json", variant="fs-default"))),
    ("docs/frameworks.md", "**qx-eos** duplicates nothing under random kills",
     lambda: total(runs("kill-frameworks.json", variant="qx-eos"), "duplicates") == 0),
    ("docs/frameworks.md", "fs-inbox, with the inbox in its handler, duplicates nothing",
     lambda: total(runs("kill-frameworks.json", variant="fs-inbox"), "duplicates") == 0),
    # lanes
    ("docs/lanes.md", "thousands of skips a run, and no duplicate",
     lambda: all(r["skipped"] >= 1000 and r["duplicates"] == 0 for r in runs("kill-k.json"))),
    # M3's batch sweep
    ("docs/throughput.md", "each larger batch measured here was faster than the one before, the most from 1 to 100",
     lambda: (lambda m: all(a < b for a, b in zip(m, m[1:], strict=False))
              and m[2] / m[0] > max(m[3] / m[2], m[4] / m[3]))(
         [median("throughput-batch.json", f"d@{n}") for n in (1, 10, 100, 500, 1000)])),
    # lanes' CPU
    ("docs/lanes.md", "is below c's, and the more so the more lanes",
     lambda: (lambda cpu: all(a > b for a, b in zip(cpu, cpu[1:], strict=False)))(
         [document("throughput-lanes.json")["summary"]["variants"][v]["cpu_us_per_msg"]["total"]["median"]
          for v in ("c", "k@1", "k@4", "k@16")])),
    ("README.md", "the same guarantee at many times c's rate",
     lambda: ratio("throughput.json", "d/c")["median"] > 5),
    # M3 and #31
    ("docs/throughput.md", "on one connection p reaches most of its own statement's ceiling (p/db)",
     lambda: ratio("throughput-pipelined.json", "p/db")["median"] > 0.5),
    # latency at fixed loads
    ("docs/throughput.md", "At the low loads c applies a credit within a few milliseconds; d and p take tens of "
                           "milliseconds",
     lambda: all(latency(f"c@{r}/s") < 10 <= latency(f"{v}@{r}/s") < 100 for r in (200, 500) for v in "dp")),
    ("docs/throughput.md", "That price stays about flat as the load rises",
     lambda: all(latency(f"{v}@5000/s") < 1.5 * latency(f"{v}@200/s") for v in "dp")),
    # the batch wait's floor (--sweep-batch)
    ("docs/throughput.md", "At 200 a second a batch of 50 changed nothing: the wait, not the batch, closed",
     lambda: all(abs(batch_case(f"{v}@200/s batch 50", "credits_per_transaction")
                     / batch_case(f"{v}@200/s", "credits_per_transaction") - 1) < 0.2
                 and 15 <= batch_case(f"{v}@200/s", "credits_per_transaction") <= 25
                 and abs(batch_case(f"{v}@200/s batch 50") / batch_case(f"{v}@200/s") - 1) < 0.1 for v in "dp")),
    ("docs/throughput.md", "A batch of 10 halved p50 and p99, and a batch of 1 brought d and p",
     lambda: all(batch_case(f"{v}@200/s batch 10", f) < 0.6 * batch_case(f"{v}@200/s", f)
                 for v in "dp" for f in ("p50_ms", "p99_ms"))
     and all(batch_case(f"{v}@200/s batch 1") < 1.5 * batch_case("c@200/s") for v in "dp")),
    ("docs/throughput.md", "50 cut the median p50 to under a third of --batch's",
     lambda: all(batch_case(f"{v}@5000/s batch 50") < batch_case(f"{v}@5000/s") / 3 for v in "dp")),
    ("docs/throughput.md", "while batches of 10 and of 1 could not keep up",
     lambda: all(batch_case(f"{v}@5000/s batch {n}") > 1000 for v in "dp" for n in (10, 1))),
    ("docs/throughput.md", "No case lost or duplicated a credit. So the",
     lambda: all(sum(s["totals"].values()) == 0 for s in document("latency-batch.json")["summary"].values())),
    # more consumers
    ("docs/throughput.md", "c and d gain the most from a second process, and only c much from a third",
     lambda: min(gain("c:2/c:1"), gain("d:2/d:1")) > 1.3 * gain("p:2/p:1")
     and gain("c:3/c:1") > 1.15 * gain("c:2/c:1")
     and all(gain(f"{v}:3/{v}:1") < 1.15 * gain(f"{v}:2/{v}:1") for v in "dp")),
    ("docs/throughput.md", "one c keeps under one core busy, three\nas many as any count of any variant here",
     lambda: cores("throughput-consumers.json", "c:1") < 1
     and cores("throughput-consumers.json", "c:3") >= 0.95 * max(cores("throughput-consumers.json", f"{v}:{n}")
                                                                 for v in "cdp" for n in (1, 2, 3))),
    ("docs/throughput.md", "d gains about as much from a second\nprocess, and little from a third",
     lambda: gain("d:2/d:1") >= 0.9 * gain("c:2/c:1") and gain("d:3/d:1") < 1.15 * gain("d:2/d:1")),
    ("docs/throughput.md", "about 1.6 of them busy, for each variant at its most",
     lambda: all(1.45 <= max(cores("throughput-consumers.json", f"{v}:{n}") for n in (1, 2, 3)) <= 1.8
                 for v in "cdp")),
    ("docs/throughput.md", "So p gains least from more processes",
     lambda: gain("p:3/p:1") < min(gain("c:3/c:1"), gain("d:3/d:1"))),
    # fewer shared accounts
    ("docs/throughput.md", "spreading the credits does not make the batched variants faster here",
     lambda: spread_hurts("throughput-accounts.json", ("d", "p", "p@2", "p-lean", "p-lean@2"))
     and spread_hurts("throughput-consumers-accounts.json", (f"{v}:{n}" for v in "dp" for n in (1, 2, 3)))),
    ("docs/throughput.md", "c, which credits one account per transaction either way, hardly notices",
     lambda: all(0.9 <= ratio("throughput-consumers-accounts.json", f"c:{n}, 10,000 accounts/c:{n}, 100 accounts")[
         "median"] <= 1.1 for n in (1, 2, 3))),
    ("docs/throughput.md", "gain no more on 10,000 accounts than on 100 for p",
     lambda: median("throughput-accounts.json", "p@2, 10,000 accounts") / median("throughput-accounts.json",
                                                                                "p, 10,000 accounts")
     <= 1.1 * median("throughput-accounts.json", "p@2, 100 accounts") / median("throughput-accounts.json",
                                                                               "p, 100 accounts")),
    # a growing inbox
    ("docs/throughput.md", "v7 runs d and p faster than v4 once the inbox holds 10 million IDs, and",
     lambda: all(growth(v, "uuid-v7", n)["vs_text"]["median"] > 1 for v in "dp" for n in (10_000_000, 50_000_000))
     and growth("d", "uuid-v7", 50_000_000)["vs_text"]["median"] > growth("d", "uuid-v7", 10_000_000)["vs_text"][
         "median"]),
    ("docs/throughput.md", "v4 costs d and p a large share of their rate at 10 million and more at 50 million",
     lambda: all(growth(v, "text", 50_000_000)["vs_empty"]["median"] < growth(v, "text", 10_000_000)["vs_empty"][
         "median"] < 0.8 for v in "dp")),
    ("docs/throughput.md", "With v4 the WAL per credit grows many times over",
     lambda: all(growth(v, "text", 50_000_000)["wal_bytes_per_msg"]["median"]
                 > 5 * growth(v, "text", 0)["wal_bytes_per_msg"]["median"] for v in "dp")),
    ("docs/throughput.md", "c does not notice: at every size v7 ÷ v4 stays within its noise",
     lambda: all(0.8 <= growth("c", "uuid-v7", n)["vs_text"]["median"] <= 1.25
                 for n in (0, 10_000_000, 50_000_000))
     and all(0.85 <= growth("c", "text", n)["vs_empty"]["median"] for n in (10_000_000, 50_000_000))),
    ("docs/throughput.md", "with v4 the Postgres backends' CPU per credit of d and p more than doubled at 50 million "
                           "IDs, and with v7 it hardly moved",
     lambda: all(growth_cpu(v, "text", 50_000_000) > 2 * growth_cpu(v, "text", 0)
                 and growth_cpu(v, "uuid-v7", 50_000_000) < 1.2 * growth_cpu(v, "uuid-v7", 0) for v in "dp")),
    ("docs/throughput.md", "Its backends did work harder with v4 (about a seventh more CPU a credit at 50 million IDs "
                           "than on the empty inbox)",
     lambda: 1.08 < growth_cpu("c", "text", 50_000_000) / growth_cpu("c", "text", 0) < 1.25),
    # M1 against the post
    ("docs/caveats.md", "so b's count comes out lower than the post's",
     lambda: statistics.median(r["duplicates"] for r in runs("kill.json", variant="b"))
     < document("post-figures.json")["kill"]["variants"]["b"]["duplicates"]["median"]),
    # M2, the classic protocol and the 20 s stall under KIP-848
    ("README.md", "the zombie's offset commit fails with `UNKNOWN_MEMBER_ID`",
     lambda: all(r["commit_failed"].get("UNKNOWN_MEMBER_ID", 0) == r["evictions"] for r in zombie("b"))),
    ("README.md", "Nobody else was given those partitions until about a session timeout after the `MAXPOLL` line",
     lambda: all(0.75 <= statistics.median(nonempty([h for r in zombie(v, "consumer", "-stall20")
                                                     for h in r["handover_s"]]))
                 / (config(f"rebalance-{v}-consumer-stall20.json")["session_timeout_ms"] / 1000) <= 1.25
                 for v in "bc")),
    ("README.md", "is fenced: its commit fails, another member handles the message",
     lambda: all(r["commit_failed"].get("UNKNOWN_MEMBER_ID", 0) == r["evictions"]
                 for v in "bc" for r in zombie(v, "consumer", "-stall20"))
     and all(total(zombie(v, "consumer", "-stall20"), "moved_to_other")
             > total(zombie(v, "consumer", "-stall20"), "back_to_zombie") for v in "bc")),
    # M10, each fault
    ("docs/faults-more.md", "the message comes again and meets its inbox row, and is skipped",
     lambda: every_run("faults-more.json", fault="lost-commit-reply", variant="c")(
         lambda r: r["duplicates"] == r["lost"] == 0 < r["faults"] == r["skipped"])),
    ("docs/faults-more.md", "the replayed batch meets its inbox rows",
     lambda: every_run("faults-more.json", fault="lost-commit-reply", variant="p")(
         lambda r: r["duplicates"] == r["lost"] == 0 < r["skipped"])),
    ("docs/faults-more.md", "waits on that lock until the paused process resumes and commits (then it skips)",
     lambda: every_run("faults-more.json", fault="pause-consumer", variant="c")(
         lambda r: r["duplicates"] == r["lost"] == 0)
     and total(runs("faults-more.json", fault="pause-consumer", variant="c"), "skipped") > 0),
    ("docs/faults-more.md", "Without the inbox (b) the new owner credits at once, and the paused consumer's "
                            "transaction commits the same credit when it wakes",
     lambda: every_run("faults-more.json", fault="pause-consumer", variant="b")(lambda r: r["duplicates"] > 0)),
    ("docs/faults-more.md", "the new owner replays p's batch in hand and skips what had committed",
     lambda: every_run("faults-more.json", fault="pause-consumer", variant="p")(
         lambda r: r["duplicates"] == r["lost"] == 0 < r["skipped"])),
    ("docs/faults-more.md", "the new owner's INSERT finds the row and skips. Without the inbox (b) both credit",
     lambda: every_run("faults-more.json", fault="pause-postgres", variant="c")(
         lambda r: r["duplicates"] == r["lost"] == 0)
     and total(runs("faults-more.json", fault="pause-postgres", variant="c"), "skipped") > 0
     and every_run("faults-more.json", fault="pause-postgres", variant="b")(lambda r: r["duplicates"] > 0)),
    ("docs/faults-more.md", "c, d and p skip every ID the inbox still remembers, and apply again every ID retention "
                            "has already forgotten",
     lambda: all(r["duplicates"] == 0 and r["skipped"] == r["events"]
                 for v in "cdp" for r in runs("faults-more-offsets.json", fault="offsets-expired", variant=v))
     and (lambda share: share > 0 and all(
         r["duplicates"] == round(share * r["events"]) and r["skipped"] == r["events"] - r["duplicates"]
         for v in "cdp" for r in runs("faults-more-offsets-forgotten.json", fault="offsets-expired", variant=v)))(
         config("faults-more-offsets-forgotten.json")["forgotten"])),
    ("docs/faults-more.md", "starts where its database says: it reads nothing twice",
     lambda: all(r["duplicates"] == r["skipped"] == r["lost"] == 0
                 for f in ("faults-more-offsets.json", "faults-more-offsets-forgotten.json")
                 for r in runs(f, fault="offsets-expired", variant="o"))),
    ("docs/faults-more.md", "so the next one starts at once where it left off",
     lambda: every_run("faults-more.json", fault="sigterm")(
         lambda r: r["faults"] > 0 and r["duplicates"] == r["lost"] == r["skipped"] == 0)),
    ("docs/faults-more.md", "so c and the others read the new log from its beginning",
     lambda: every_run("faults-more.json", fault="topic-recreated")(
         lambda r: r["faults"] > 0 and r["duplicates"] == r["lost"] == 0)),
    # M9
    ("docs/frameworks.md", "**fs-ack** duplicates a few a run",
     lambda: every_run("kill-frameworks.json", variant="fs-ack")(lambda r: 0 < r["duplicates"] <= 10)),
    ("docs/frameworks.md", "Under FastStream, the inbox stops duplicates, not losses.",
     lambda: total(runs("kill-frameworks.json", variant="fs-inbox"), "duplicates") == 0
     < total(runs("kill-frameworks.json", variant="fs-inbox"), "lost")),
    ("docs/frameworks.md", "shows that committing the message itself (`commit(message=msg, asynchronous=True)`) "
                           "never goes past it",
     lambda: total(runs("async-commit.json", variant="the-message"), "past_the_message") == 0
     < total(runs("async-commit.json", variant="the-message"), "trials")
     and total(runs("async-commit.json", variant="stored-offsets"), "past_the_message") > 0),
    ("docs/frameworks.md", "the accounts' balances stay at 0: their \"exact balances\" column is 0 by construction",
     lambda: all(r["balance_total"] == 0 and not r["balances_exact"]
                 for v in ("qx-eos", "qx-eos-keyed") for r in runs("kill-frameworks.json", variant=v))),
    ("docs/frameworks.md", "The keyed sink makes the **rows** exactly-once",
     lambda: all(r["duplicates"] == r["lost"] == 0
                 for f in ("kill-frameworks.json", "rebalance-frameworks-classic.json")
                 for r in runs(f, variant="qx-eos-keyed"))),
    ("docs/results.md", "They write rows, not credits: their balances are never exact.",
     lambda: all(not r["balances_exact"] for f in ("kill-frameworks.json", "rebalance-frameworks-classic.json")
                 for v in ("qx-eos", "qx-eos-keyed") for r in runs(f, variant=v))),
    # M7b, and the post's shortcuts against the same copies
    ("docs/eos.md", "Every source but one put copies into the log",
     lambda: [name for name, where in (("relay", {"source": "relay"}), ("restart", {"source": "restart"}),
                                       ("retries off", {"source": "retries", "idempotence": "off"}),
                                       ("retries on", {"source": "retries", "idempotence": "on"}))
              if total(runs("publish.json", **where), "log_copies") == 0] == ["retries on"]),
    ("docs/eos.md", "With idempotence off, librdkafka's own resends made only a few copies a run.",
     lambda: (lambda rows: total(rows, "log_copies") > 0 and all(r["log_copies"] <= 0.01 * r["events"] for r in rows))(
         runs("publish.json", source="retries", idempotence="off"))),
    ("docs/eos.md", "a copy a publisher writes again has an offset of its own and is credited again, every time",
     lambda: (lambda rows: total(rows, "log_copies") > 0 and all(r["duplicates"] == r["log_copies"] for r in rows))(
         runs("publish.json", variant="offset-dedup"))),
    ("docs/eos.md", "A late copy writes nothing.",
     lambda: (lambda rows: total(rows, "log_copies") > 0
              and all(r["duplicates"] == r["stale_accounts"] == 0 for r in rows))(
         runs("publish.json", variant="versioned"))),
    # lanes
    ("docs/lanes.md", "caps it under a hundred messages a second however idle the database is (c's row below)",
     lambda: median("throughput-lanes.json", "c") < 100),
    ("docs/lanes.md", "lanes add rate nearly one for one; the share per lane falls",
     lambda: (lambda per: per[1] >= 0.9 and per[4] >= 0.85 and per[4] > per[16] > per[64])(
         {n: ratio("throughput-lanes.json", f"k@{n}/c")["median"] / n for n in (1, 4, 16, 64)})),
    # M3's batch sweep (d@1 against M3's own c), p and its profile
    ("docs/throughput.md", "At a batch of one, d is slower than c",
     lambda: median("throughput-batch.json", "d@1") < median("throughput.json", "c")),
    ("docs/throughput.md", "a second connection gives a second backend work for it, as far as the machine has CPU "
                           "left. p@2/db@2 says how far p@2 stays below the two-connection ceiling",
     lambda: cores("throughput-connections.json", "p@2") > cores("throughput-connections.json", "p")
     and ratio("throughput-connections.json", "p@2/db@2")["median"] < 1),
    ("docs/throughput.md", "the second backend kept little more than a tenth of a core more busy, and p@2's rate "
                           "stayed\nclose to p's",
     lambda: 0.05 < cores("throughput-connections.json", "p@2") - cores("throughput-connections.json", "p") < 0.25
     and abs(ratio("throughput-connections.json", "p@2/d")["median"]
             / ratio("throughput-connections.json", "p/d")["median"] - 1) < 0.1),
    # CPU per message, split by process, against the ceilings
    ("docs/throughput.md", "checks as every variant does, and nothing else) costs its process under 10 µs a message",
     lambda: all(cpu(name, "raw") < 10 for name in ("throughput.json", "throughput-pipelined.json"))),
    ("docs/throughput.md", "p's statement alone (db) costs the Postgres backends within a quarter of what they cost "
                           "under p",
     lambda: all(abs(cpu(name, "db", "postgres_backends") / cpu(name, "p", "postgres_backends") - 1) < 0.25
                 for name in ("throughput-pipelined.json", "throughput-connections.json"))),
    ("docs/throughput.md", "so nearly all of p's Postgres side is its statement",
     lambda: all(cpu(name, "db", "postgres_backends") >= 0.85 * cpu(name, "p", "postgres_backends")
                 for name in ("throughput-pipelined.json", "throughput-connections.json"))),
    ("docs/throughput.md", "raw's Python and the statement's own Python (db's, adapting a batch's arrays and reading "
                           "the reply) make up most of p's consumer Python",
     lambda: (lambda f: 0.5 < (f("raw") + f("db")) / f("p") < 1)(
         lambda v: cpu("throughput-pipelined.json", v, "consumer_python"))),
    ("docs/throughput.md", "d and its ceilings keep about one core busy",
     lambda: all(0.8 <= cores(name, v) <= 1.15 for name, vs in (("throughput-pipelined.json", ("d", "db", "db-d")),
                                                                ("throughput-connections.json", ("d", "db")))
                 for v in vs)),
    ("docs/throughput.md", "p overlaps the two and keeps 1.3 to 1.4 busy",
     lambda: all(1.25 <= cores(name, "p") < 1.45 for name in ("throughput-pipelined.json",
                                                              "throughput-connections.json"))),
    ("docs/throughput.md", "On two connections p and db alike reach about 1.6 of the machine's 2 cores",
     lambda: all(1.45 <= cores("throughput-connections.json", v) <= 1.8 for v in ("p@2", "db@2"))),
    ("docs/throughput.md", "The same code's p cost 36.5 µs a message at 37,027 msgs/s in `throughput-pipelined.json`, "
                           "and 22.1 µs at 59,898 msgs/s in `throughput-frameworks.json`, measured at another time",
     lambda: [f"{cpu(name, 'p'):.1f} {median(name, 'p'):,.0f}" for name in ("throughput-pipelined.json",
                                                                            "throughput-frameworks.json")]
     == ["36.5 37,027", "22.1 59,898"]
     and {document(name)["runs"][0]["commit"] for name in ("throughput-pipelined.json", "throughput-frameworks.json")}
     <= {"688fcff75260", "f8e0003de12e"}),
    ("docs/throughput.md", "both moved by about the same factor, and the cores busy stayed at 1.3 to 1.4",
     lambda: (lambda files: 0.85 < (cpu(files[0], "p") / cpu(files[1], "p"))
              / (median(files[1], "p") / median(files[0], "p")) < 1.15
              and all(1.25 <= cores(name, "p") < 1.45 for name in files))(
         ("throughput-pipelined.json", "throughput-frameworks.json"))),
    ("docs/throughput.md", "which is why the leaner p-lean goes further on two connections than p (below): the same "
                           "cores, fewer µs a message",
     lambda: median("throughput-lean.json", "p-lean@2") > median("throughput-lean.json", "p@2")
     and cpu("throughput-lean.json", "p-lean@2") < cpu("throughput-lean.json", "p@2")
     and abs(cores("throughput-lean.json", "p-lean@2") / cores("throughput-lean.json", "p@2") - 1) < 0.1),
    ("docs/throughput.md", "The Postgres backend serving the statements is the busiest part by far, on the CPU for "
                           "about three quarters of the wall time",
     lambda: (lambda parts: 65 <= parts["Postgres backend"] <= 85
              and parts["Postgres backend"] > 2 * max(v for k, v in parts.items() if k != "Postgres backend"))(
         {k: profile_share("profile-p.txt", k) for k in ("main thread", "database thread", "librdkafka threads",
                                                          "Postgres backend", "Kafka broker")})),
    ("docs/throughput.md", "the database thread's psycopg work and the broker together use about half of the other "
                           "core",
     lambda: 40 <= sum(profile_share("profile-p.txt", k) for k in ("main thread", "database thread",
                                                                    "librdkafka threads", "Kafka broker")) <= 60),
    ("docs/throughput.md", "the checker's order count is recorded for every run, and is not zero for either",
     lambda: all(r["order_violations"] > 0 for v in "dp" for r in runs("throughput-pipelined.json", variant=v))),
    # latency
    ("docs/throughput.md", "the 5 s of credits take tens of seconds to drain",
     lambda: latency("c@5000/s", "max_ms") >= 10_000 > 100 * latency("c@500/s", "max_ms")),
    ("docs/throughput.md", "For d and p the single paced publisher is itself the limit here, far below their capacity",
     lambda: all(r["offered_per_s"] < min(0.9 * r["load"], 0.5) * r["capacity_per_s"]
                 for v in "dp" for r in runs("latency-saturation.json", variant=v))),
    # fewer shared accounts
    ("docs/throughput.md", "their CPU per message rises with that, and their msgs/s falls, with two connections as "
                           "with one, and with two or three processes",
     lambda: all(cpu("throughput-accounts.json", f"{v}, 10,000 accounts") > cpu("throughput-accounts.json",
                                                                                 f"{v}, 100 accounts")
                 for v in ("d", "p", "p@2", "p-lean", "p-lean@2"))
     and all(cpu("throughput-consumers-accounts.json", f"{v}:{n}, 10,000 accounts")
             > cpu("throughput-consumers-accounts.json", f"{v}:{n}, 100 accounts") for v in "dp" for n in (1, 2, 3))
     and spread_hurts("throughput-accounts.json", ("d", "p", "p@2", "p-lean", "p-lean@2"))
     and spread_hurts("throughput-consumers-accounts.json", (f"{v}:{n}" for v in "dp" for n in (1, 2, 3)))),
    ("docs/throughput.md", "and not much more for p-lean",
     lambda: median("throughput-accounts.json", "p-lean@2, 10,000 accounts") / median("throughput-accounts.json",
                                                                                     "p-lean, 10,000 accounts")
     <= 1.15 * median("throughput-accounts.json", "p-lean@2, 100 accounts") / median("throughput-accounts.json",
                                                                                    "p-lean, 100 accounts")),
]


def flat(text: str) -> str:
    return " ".join(text.split())


def failing(claims=CLAIMS, unchecked: list | None = None) -> list[str]:
    """Each claim whose sentence has left its page, or whose results no longer bear it out, or
    bear it out only over nothing. `unchecked`, if given, gets the claims whose file is missing."""
    said = []
    for page, sentence, holds in claims:
        if flat(sentence) not in flat((ROOT / page).read_text()):
            said.append(f"{page}: a checked sentence is gone ({sentence!r}); reword or drop its entry in lab/claims.py")
            continue
        try:
            if not holds():
                said.append(f"{page}: the results no longer bear out {sentence!r} (lab/claims.py)")
        except Vacuous as nothing:
            said.append(f"{page}: {sentence!r} holds over nothing: {nothing} (lab/claims.py)")
        except Missing as gone:
            if unchecked is not None:
                unchecked.append(f"{page}: {sentence!r} not checked: results/{gone} is missing")
    return said


if __name__ == "__main__":
    missing: list[str] = []
    problems = failing(unchecked=missing)
    print("\n".join(problems + missing) or f"all {len(CLAIMS)} checked sentences hold")
    raise SystemExit(1 if problems else 0)
