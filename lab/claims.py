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


def runs(name: str, **where) -> list[dict]:
    """The runs of results/NAME whose fields equal `where`; Missing if the file is not there."""
    path = RESULTS / name
    if not path.exists():
        raise Missing(name)
    return [r for r in json.loads(path.read_text())["runs"] if all(r.get(k) == v for k, v in where.items())]


def ratio(name: str, pair: str) -> dict:
    """A file's paired ratio (median, min, max), e.g. ratio("throughput.json", "c/b")."""
    path = RESULTS / name
    if not path.exists():
        raise Missing(name)
    return json.loads(path.read_text())["summary"]["ratios"][pair]


class Missing(Exception):
    """A claim's results file is not there: the claim is not checked."""


def total(rows: list[dict], field: str) -> int:
    return sum(r[field] for r in rows)


def zombie(variant: str, protocol: str = "classic", stall: str = "") -> list[dict]:
    return runs(f"rebalance-{variant}-{protocol}{stall}.json")


CLAIMS = [
    # M1
    ("docs/caveats.md", "c's zeros do not depend on either",
     lambda: total(runs("kill.json", variant="c"), "duplicates") + total(runs("kill.json", variant="c"), "lost") == 0),
    ("docs/caveats.md", "it is not zero, and every b duplicate left a balance wrong",
     lambda: total(runs("kill.json", variant="b"), "duplicates") > 0
     and all(not r["balances_exact"] for r in runs("kill.json", variant="b") if r["duplicates"])),
    # M2
    ("README.md", "Every eviction cost b a duplicate and c a skip",
     lambda: all(r["duplicates"] == r["evictions"] for r in zombie("b"))
     and all(r["skipped"] >= r["evictions"] and r["duplicates"] == 0 for r in zombie("c"))),
    ("README.md", "so it skips hundreds of messages per eviction and duplicates none",
     lambda: total(zombie("d"), "duplicates") == 0 and total(zombie("d"), "skipped") >= 100 * total(zombie("d"),
                                                                                                     "evictions")),
    ("README.md", "so b mostly did *not* duplicate",
     lambda: 2 * total(zombie("b", "consumer"), "duplicates") < total(zombie("b", "consumer"), "evictions")),
    ("README.md", "and b duplicates once per eviction again, while c skips",
     lambda: all(r["duplicates"] == r["evictions"] for r in zombie("b", "consumer", "-stall20"))
     and total(zombie("c", "consumer", "-stall20"), "duplicates") == 0),
    # M4b
    ("README.md", "The alarm said so first, every time",
     lambda: all(r["alarm"] for r in runs("retention.json") if r["variant"] != "v7" and r["window"] != "longer")),
    # M6, reconnect or exit
    ("README.md", "Neither duplicates nor loses; c starts crediting again a little later",
     lambda: all(r["duplicates"] == r["lost"] == 0 for r in runs("faults-reconnect.json"))),
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
    # M3 and #31
    ("docs/throughput.md", "on one connection p reaches most of its own statement's ceiling (p/db)",
     lambda: ratio("throughput-pipelined.json", "p/db")["median"] > 0.5),
]


def flat(text: str) -> str:
    return " ".join(text.split())


def failing(claims=CLAIMS) -> list[str]:
    """Each claim whose sentence has left its page, or whose results no longer bear it out."""
    said = []
    for page, sentence, holds in claims:
        if flat(sentence) not in flat((ROOT / page).read_text()):
            said.append(f"{page}: a checked sentence is gone ({sentence!r}); reword or drop its entry in lab/claims.py")
            continue
        try:
            if not holds():
                said.append(f"{page}: the results no longer bear out {sentence!r} (lab/claims.py)")
        except Missing:
            pass
    return said


if __name__ == "__main__":
    problems = failing()
    print("\n".join(problems) or f"all {len(CLAIMS)} checked sentences hold")
    raise SystemExit(1 if problems else 0)
