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


def nonempty(rows: list[dict]) -> list[dict]:
    """`rows`, or Vacuous if a filter left none."""
    if not rows:
        raise Vacuous("the filter left no run")
    return rows


def total(rows: list[dict], field: str) -> int:
    return sum(r[field] for r in rows)


def zombie(variant: str, protocol: str = "classic", stall: str = "") -> list[dict]:
    """M2's runs of one file; Vacuous if they evicted nobody (nothing to have cost anything)."""
    found = runs(f"rebalance-{variant}-{protocol}{stall}.json")
    if total(found, "evictions") == 0:
        raise Vacuous(f"rebalance-{variant}-{protocol}{stall}.json evicted nobody")
    return found


def median(name: str, variant: str, field: str = "msgs_per_s") -> float:
    """A throughput file's median for one variant."""
    return document(name)["summary"]["variants"][variant][field]["median"]


def growth(variant: str, id_type: str, rows: int) -> dict:
    """One row of throughput-inbox.json's growth summary."""
    return document("throughput-inbox.json")["summary"]["growth"][variant][id_type][str(rows)]


def latency(case: str, field: str = "p50_ms") -> float:
    """measure_latency: a case's median, e.g. latency("c@200/s")."""
    return document("latency.json")["summary"][case][field]["median"]


def gain(pair: str) -> float:
    """--consumers: the median paired ratio of N processes against one, e.g. gain("c:2/c:1")."""
    return ratio("throughput-consumers.json", pair)["median"]


def spread_hurts(name: str, variants) -> bool:
    """--accounts: each variant's 10,000-account runs no faster than its 100-account runs (medians)."""
    return all(ratio(name, f"{v}, 10,000 accounts/{v}, 100 accounts")["median"] <= 1.0 for v in variants)


CLAIMS = [
    # M1
    ("docs/caveats.md", "c's zeros do not depend on either",
     lambda: total(runs("kill.json", variant="c"), "duplicates") + total(runs("kill.json", variant="c"), "lost") == 0),
    ("docs/caveats.md", "it is not zero, and every b duplicate left a balance wrong",
     lambda: total(runs("kill.json", variant="b"), "duplicates") > 0
     and all(not r["balances_exact"] for r in runs("kill.json", variant="b") if r["duplicates"])),
    # how the machine was shared
    ("docs/caveats.md", "d's rate, and its CPU per message, in that `results/throughput.json` sit well off the "
                        "rates of d in the files measured beside lighter counting work",
     lambda: median("throughput.json", "d") < 0.85 * median("throughput-connections.json", "d")),
    ("docs/caveats.md", "d with two processes ran from below one process's rate to well above it",
     lambda: ratio("throughput-consumers.json", "d:2/d:1")["min"] < 1 < 1.5 < ratio("throughput-consumers.json",
                                                                                     "d:2/d:1")["max"]),
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
     lambda: all(r["duplicates"] == r["lost"] == 0 for r in runs("faults-reconnect.json"))),
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
     lambda: (lambda m: all(a < b for a, b in zip(m, m[1:])) and m[2] / m[0] > max(m[3] / m[2], m[4] / m[3]))(
         [median("throughput-batch.json", f"d@{n}") for n in (1, 10, 100, 500, 1000)])),
    # lanes' CPU
    ("docs/lanes.md", "is below c's, and the more so the more lanes",
     lambda: (lambda cpu: all(a > b for a, b in zip(cpu, cpu[1:])))(
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
    # more consumers
    ("docs/throughput.md", "A second process helps c the most, and a third still adds to it",
     lambda: gain("c:2/c:1") > max(gain("d:2/d:1"), gain("p:2/p:1")) and gain("c:3/c:1") > gain("c:2/c:1")),
    ("docs/throughput.md", "d gains from each process added",
     lambda: 1.05 < gain("d:2/d:1") < gain("d:3/d:1")),
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
    ("docs/throughput.md", "v7 runs d and p faster than v4, and the more so the more IDs the inbox holds",
     lambda: all(1 < growth(v, "uuid-v7", 10_000_000)["vs_text"]["median"]
                 < growth(v, "uuid-v7", 50_000_000)["vs_text"]["median"] for v in "dp")),
    ("docs/throughput.md", "v4 costs d and p a large share of their rate at 10 million and more at 50 million",
     lambda: all(growth(v, "text", 50_000_000)["vs_empty"]["median"] < growth(v, "text", 10_000_000)["vs_empty"][
         "median"] < 0.8 for v in "dp")),
    ("docs/throughput.md", "With v4 the WAL per credit grows many times over",
     lambda: all(growth(v, "text", 50_000_000)["wal_bytes_per_msg"]["median"]
                 > 5 * growth(v, "text", 0)["wal_bytes_per_msg"]["median"] for v in "dp")),
    ("docs/throughput.md", "c barely notices (v7 ÷ v4 within its noise)",
     lambda: all(0.8 <= growth("c", "uuid-v7", n)["vs_text"]["median"] <= 1.25 for n in (0, 10_000_000, 50_000_000))),
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
