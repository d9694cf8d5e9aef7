"""The numbers that the hand-written prose of README.md and docs/ quotes, each made from results/.

Claim: no figure in the prose is typed by hand either. A number (or a short run of them, or a
verdict word) stands between markers that name it, <!-- fig:NAME -->VALUE<!-- /fig -->, and
FIGURES maps the name to the small function of the results that makes VALUE. `report` writes
the values; `report --check` fails when one differs from what the results give, or a marker
names a figure FIGURES does not know. A sentence that states an outcome ("b duplicates, c does
not") quotes its evidence as figures, so a re-measured file that says otherwise shows in the
sentence itself. A figure whose results file is missing is left as it is.
"""
import statistics

from lab import results, tables
from lab.tables import Missing, need, runs_of, total


def runs(name: str, **where) -> list[dict]:
    return runs_of(need(name), **where)


def tot(name: str, field: str, **where) -> int:
    return total(runs(name, **where), field)


def summary(name: str, *path: str):
    found = need(name)["summary"]
    for part in path:
        found = found[part]
    return found


def med(name: str, variant: str, field: str = "msgs_per_s") -> float:
    return summary(name, "variants", variant, field)["median"]


def ratio(name: str, pair: str) -> float:
    return summary(name, "ratios", pair)["median"]


def cpu(name: str, variant: str, kind: str = "total") -> float:
    return summary(name, "variants", variant, "cpu_us_per_msg", kind)["median"]


def cores(name: str, variant: str) -> str:
    return f"{results.cores_busy(summary(name, 'variants', variant)):.2f}"


def latency(name: str, case: str, field: str = "p50_ms") -> float:
    return summary(name, case, field)["median"]


def growth(variant: str, id_type: str, rows: int, field: str) -> float:
    return summary("throughput-inbox.json", "growth", variant, id_type, str(rows), field)["median"]


def growth_cpu(variant: str, id_type: str, rows: int) -> float:
    """The growing inbox's median Postgres backends' CPU per credit, from its runs (its summary has none)."""
    mine = runs("throughput-inbox.json", variant=variant, id_type=id_type, inbox_rows=rows)
    return statistics.median(r["cpu_us_per_msg"]["postgres_backends"] for r in mine)


def zombie(variant: str, protocol: str = "classic", stall: str = "") -> list[dict]:
    return runs(f"rebalance-{variant}-{protocol}{stall}.json")


def z(variant: str, field: str, protocol: str = "classic", stall: str = "") -> int:
    return total(zombie(variant, protocol, stall), field)


def failed(variant: str, protocol: str = "classic", stall: str = "") -> int:
    return sum(r["commit_failed"].get("UNKNOWN_MEMBER_ID", 0) for r in zombie(variant, protocol, stall))


def dup_lost(name: str, **where) -> str:
    return f"{tot(name, 'duplicates', **where):,} duplicates, {tot(name, 'lost', **where):,} lost"


def met(name: str, **where) -> str:
    """What a fault's runs came to: skipped, duplicates and lost, over the faults that landed."""
    return (f"{tot(name, 'skipped', **where):,} skipped, {dup_lost(name, **where)} in {tot(name, 'faults', **where):,} "
            "faults")


def per_run(name: str, field: str, **where) -> str:
    stat = results.stats(r[field] for r in runs(name, **where))
    return f"{stat['min']:,}–{stat['max']:,} a run"


def exact_of(name: str, **where) -> str:
    mine = runs(name, **where)
    return f"exact in {sum(bool(r['balances_exact']) for r in mine)} of {len(mine)} runs"


def pairs(values: dict, fmt: str = "{:.2f}") -> str:
    """"d 1.23, p 4.56": a few labelled figures in one breath."""
    return ", ".join(f"{label} {fmt.format(value)}" for label, value in values.items())


def profile_share(part: str) -> float:
    """profile_p's text file: the share of the wall (percent) that one part's CPU took."""
    if not (path := tables.RESULTS / "profile-p.txt").exists():
        raise Missing(path.name)
    for line in path.read_text().splitlines():
        if line.strip().startswith(part):
            return float(line.split()[-1].rstrip("%"))
    raise KeyError(part)


def cdp(name: str, field: str) -> int:
    """offsets-expired's total of `field` over the variants with an inbox."""
    return sum(tot(name, field, fault="offsets-expired", variant=v) for v in "cdp")


def retention(variant: str, window: str, field: str) -> int:
    return tot("retention.json", field, variant=variant, window=window)


PIPELINED, CONNECTIONS = "throughput-pipelined.json", "throughput-connections.json"
CONSUMERS, LEAN, BARE = "throughput-consumers.json", "throughput-lean.json", "throughput-bare.json"
ACCOUNTS, CONSUMERS_ACCOUNTS = "throughput-accounts.json", "throughput-consumers-accounts.json"
LOAD = "retention-load.json"
BATCHED_ACCOUNTS = ("d", "p", "p@2", "p-lean", "p-lean@2")
SPREAD = [(ACCOUNTS, v) for v in BATCHED_ACCOUNTS] + [(CONSUMERS_ACCOUNTS, f"{v}:{n}") for v in "dp" for n in (1, 2, 3)]
FM, OFFSETS, FORGOTTEN = "faults-more.json", "faults-more-offsets.json", "faults-more-offsets-forgotten.json"
BESIDE = {"kill-frameworks.json": "under the kills", "rebalance-frameworks-classic.json": "the zombie"}

FIGURES = {
    # the parameters README.md states in its prose
    "kill.runs": lambda: need("kill.json")["config"]["runs"],
    "kill.kills": lambda: need("kill.json")["config"]["kills"],
    "m2.max-poll": lambda: need("rebalance-b-classic.json")["config"]["max_poll_interval_ms"],
    "m2.slow-every": lambda: need("rebalance-b-classic.json")["config"]["slow_every"],
    "m2.stall": lambda: f"{need('rebalance-b-classic.json')['config']['slow_seconds']:g}",
    "m2.session": lambda: f"{need('rebalance-b-classic.json')['config']['session_timeout_ms'] / 1000:g}",
    "m2.heartbeat": lambda: f"{need('rebalance-b-classic.json')['config']['session_timeout_ms'] / 3000:g}",
    "m2.consumer.stall": lambda: f"{need('rebalance-b-consumer.json')['config']['slow_seconds']:g}",
    "m2.stall20.stall": lambda: f"{need('rebalance-b-consumer-stall20.json')['config']['slow_seconds']:g}",
    "growth.millions": lambda: max(need("throughput-inbox.json")["config"]["inbox_rows"]) // 1_000_000,
    # M1, M6's reconnect, M2 and M4b in README.md; M1 in docs/caveats.md
    "reconnect.dup-lost": lambda: dup_lost("faults-reconnect.json"),
    "reconnect.resume": lambda: "first credit {:.2f} s after a restart, c-reconnect's {:.2f} s (medians)".format(
        *(summary("faults-reconnect.json", f"pg-restart/{v}", "resume_s")["median"] for v in ("c", "c-reconnect"))),
    "m2.classic": lambda: f"b {z('b', 'duplicates')} duplicates in {z('b', 'evictions')} evictions, c "
                          f"{z('c', 'skipped')} skipped in {z('c', 'evictions')}",
    "m2.unknown-member": lambda: f"{failed('b')} times in {z('b', 'evictions')} evictions",
    "m2.handed": lambda: f"{z('b', 'moved_to_other')} to another member, {z('b', 'back_to_zombie')} back to the zombie",
    "m2.d": lambda: f"{z('d', 'skipped'):,} skipped and {z('d', 'duplicates')} duplicates in {z('d', 'evictions')} "
                    "evictions",
    "m2.consumer.back": lambda: f"{z('b', 'back_to_zombie', 'consumer')} of {z('b', 'evictions', 'consumer')} "
                                "evictions",
    "m2.consumer.dup": lambda: f"{z('b', 'duplicates', 'consumer')} duplicates in {z('b', 'evictions', 'consumer')}",
    "m2.stall20.handover": lambda: "median handover {:.1f} s for b, {:.1f} s for c; the session timeout {:g} s".format(
        *(statistics.median(h for r in zombie(v, "consumer", "-stall20") for h in r["handover_s"]) for v in "bc"),
        need("rebalance-b-consumer-stall20.json")["config"]["session_timeout_ms"] / 1000),
    "m2.stall20.fenced": lambda: "{} of {} commits failed; {} handed to another member, {} back".format(*(
        sum(f(v, "consumer", "-stall20") for v in "bc") for f in (
            failed, lambda *a: z(a[0], "evictions", *a[1:]), lambda *a: z(a[0], "moved_to_other", *a[1:]),
            lambda *a: z(a[0], "back_to_zombie", *a[1:])))),
    "m2.stall20.dup": lambda: f"b {z('b', 'duplicates', 'consumer', '-stall20')} duplicates in "
                              f"{z('b', 'evictions', 'consumer', '-stall20')} evictions; c "
                              f"{z('c', 'duplicates', 'consumer', '-stall20')} duplicates, "
                              f"{z('c', 'skipped', 'consumer', '-stall20')} skipped",
    "retention.equal": lambda: pairs({v: retention(v, "equal", "duplicates") for v in "cdp"}, "{:,}") + " duplicates",
    "retention.alarm": lambda: "{} of {} runs".format(*(lambda mine: (total(mine, "alarm"), len(mine)))(
        [r for r in runs("retention.json") if r["variant"] != "v7" and r["window"] != "longer"])),
    "retention.v7": lambda: f"{retention('v7', 'equal', 'duplicates')} duplicates at the equal window; one day "
                            f"shorter, {retention('v7', 'shorter', 'dead_lettered'):,} dead-lettered and "
                            f"{retention('v7', 'shorter', 'duplicates')} duplicates",
    "throughput.d-over-c": lambda: f"{ratio('throughput.json', 'd/c'):.1f}×",
    "kill.c": lambda: f"{dup_lost('kill.json', variant='c')} in {tot('kill.json', 'kills', variant='c')} kills",
    "kill.b-against-post": lambda: "{:g} duplicates a run, the post's {:g} (medians)".format(
        statistics.median(r["duplicates"] for r in runs("kill.json", variant="b")),
        need("post-figures.json")["kill"]["variants"]["b"]["duplicates"]["median"]),
    "kill.b-wrong": lambda: "balances wrong in {} of the {} runs with a duplicate".format(*(lambda mine: (
        sum(not r["balances_exact"] for r in mine), len(mine)))([r for r in runs("kill.json", variant="b")
                                                               if r["duplicates"]])),
    # M8 (docs/cluster.md)
    "cluster.acks-all": lambda: f"{tot('cluster.json', 'acked_missing', acks='all')} acknowledged records missing; "
                                "c, d and o: {:,} duplicates, {:,} lost outside the Postgres faults".format(*(
        sum(r[f] for r in runs("cluster.json") if r["variant"] in "cdo" and not r["fault"].startswith("pg-"))
        for f in ("duplicates", "lost"))),
    "cluster.acks1": lambda: f"{tot('cluster-acks1.json', 'acked_missing', acks='1')} missing",
    "cluster.sync": lambda: f"{tot('cluster.json', 'lost', replication='sync')} lost",
    "cluster.async": lambda: pairs({v: tot("cluster.json", "lost", fault="pg-failover-stalled", replication="async",
                                          variant=v) for v in "bcdo"}, "{:,}") + " lost",
    # M7 (docs/eos.md)
    "eos.topic": lambda: "{} copies and {} missing; {:,} aborted copies under the kills".format(
        tot("eos.json", "topic_copies"), tot("eos.json", "topic_missing"),
        tot("eos.json", "aborted_copies", point="kill")),
    "eos.e-f": lambda: f"e: {tot('eos.json', 'duplicates', variant='e', point='kill'):,} duplicates under the kills, "
                       f"{tot('eos.json', 'duplicates', variant='e', point='pg-committed'):,} at the planted point; f: "
                       f"{dup_lost('eos.json', variant='f')}, {exact_of('eos.json', variant='f')}",
    "eos.e-aborted": lambda: "; ".join(f"{tot('eos.json', 'duplicates', variant='e', point=p):,} against "
                                       f"{tot('eos.json', 'aborted_copies', variant='e', point=p):,}"
                                       for p in ("kill", "pg-committed")),
    "eos.kafka-committed": lambda: f"{dup_lost('eos.json', point='kafka-committed')}, "
                                   + exact_of("eos.json", point="kafka-committed"),
    "eos.sources": lambda: pairs({"relay": tot("publish.json", "log_copies", source="relay"),
                                  "restart": tot("publish.json", "log_copies", source="restart"),
                                  "retries without idempotence": tot("publish.json", "log_copies", source="retries",
                                                                     idempotence="off"),
                                  "with it": tot("publish.json", "log_copies", source="retries", idempotence="on")},
                                 "{:,}") + " copies",
    "eos.b-c-d": lambda: f"b {tot('publish.json', 'duplicates', variant='b'):,} duplicates for "
                         f"{tot('publish.json', 'log_copies', variant='b'):,} copies; c and d "
                         f"{sum(tot('publish.json', 'duplicates', variant=v) for v in 'cd')}",
    "eos.idempotence-on": lambda: f"{tot('publish.json', 'log_copies', source='retries', idempotence='on')} copies",
    "eos.idempotence-off": lambda: per_run("publish.json", "log_copies", source="retries", idempotence="off"),
    "eos.versioned": lambda: f"{tot('publish.json', 'log_copies', variant='versioned'):,} copies, "
                             f"{tot('publish.json', 'duplicates', variant='versioned')} duplicates, "
                             f"{tot('publish.json', 'stale_accounts', variant='versioned')} accounts left behind",
    "eos.offset-dedup": lambda: f"{tot('publish.json', 'duplicates', variant='offset-dedup'):,} duplicates for "
                                f"{tot('publish.json', 'log_copies', variant='offset-dedup'):,} copies",
    # M5 (docs/external.md)
    "external.retry.lost": lambda: f"{tot('external.json', 'lost', variant='retry')} lost",
    "external.skip.dup": lambda: f"{tot('external.json', 'duplicates', variant='skip')} duplicates",
    "external.retry.dup": lambda: f"{tot('external.json', 'duplicates', variant='retry')} duplicates, "
                                  f"{tot('external.json', 'crashed_after_call', variant='retry')} planted crashes",
    "external.skip.lost": lambda: f"{tot('external.json', 'crashed_before_call', variant='skip')} planted of "
                                  f"{tot('external.json', 'lost', variant='skip')} lost",
    "external.leases": lambda: f"{tot('external.json', 'lease_short')} run short, "
                               f"{tot('external.json', 'lease_taken_over')} taken over",
    # M10 (docs/faults-more.md)
    "fm.lost-reply.c": lambda: met(FM, fault="lost-commit-reply", variant="c"),
    "fm.lost-reply.b": lambda: f"{tot(FM, 'duplicates', fault='lost-commit-reply', variant='b')} duplicates in "
                               f"{tot(FM, 'faults', fault='lost-commit-reply', variant='b')} lost replies",
    "fm.lost-reply.o": lambda: met(FM, fault="lost-commit-reply", variant="o"),
    "fm.lost-reply.a2": lambda: f"{tot(FM, 'lost', fault='lost-commit-reply', variant='a2'):,}",
    "fm.lost-reply.p": lambda: met(FM, fault="lost-commit-reply", variant="p"),
    "fm.pause.c": lambda: met(FM, fault="pause-consumer", variant="c"),
    "fm.pause.b": lambda: per_run(FM, "duplicates", fault="pause-consumer", variant="b") + " duplicated",
    "fm.pause.p": lambda: met(FM, fault="pause-consumer", variant="p"),
    "fm.pause-postgres": lambda: f"c: {met(FM, fault='pause-postgres', variant='c')}; b: "
                                 + dup_lost(FM, fault="pause-postgres", variant="b"),
    "fm.disk-full": lambda: pairs({v: tot(FM, "duplicates", fault="disk-full", variant=v) + tot(
        FM, "lost", fault="disk-full", variant=v) for v in "bcdop"}, "{:,}") + " duplicated or lost",
    "fm.disk-full.a2": lambda: f"{tot(FM, 'lost', fault='disk-full', variant='a2'):,}",
    "fm.offsets-expired": lambda: "c, d and p: remembering all, {:,} of {:,} skipped and {:,} duplicates; with {:,} "
                                  "IDs forgotten, {:,} applied again".format(
        *(cdp(OFFSETS, f) for f in ("skipped", "events", "duplicates")),
        sum(f["forgotten"] for v in "cdp" for r in runs(FORGOTTEN, variant=v) for f in r["fault_log"]),
        cdp(FORGOTTEN, "duplicates")),
    "fm.offsets-expired.o": lambda: f"remembering all, {met(OFFSETS, fault='offsets-expired', variant='o')}; "
                                    f"forgotten, {met(FORGOTTEN, fault='offsets-expired', variant='o')}",
    "fm.sigterm": lambda: met(FM, fault="sigterm"),
    "fm.topic-recreated": lambda: met(FM, fault="topic-recreated"),
    # M6 (docs/faults.md)
    "faults.c-d": lambda: "; ".join(f"{dup_lost('faults.json', variant=v)} for {v}" for v in "cd"),
    "faults.b": lambda: pairs({f: tot("faults.json", "duplicates", fault=f, variant="b") for f in (
        "broker-restart", "partition-broker", "partition-db", "share-lock")}, "{:,}") + " duplicates",
    "faults.b.pg-restart": lambda: f"{tot('faults.json', 'duplicates', fault='pg-restart', variant='b')} duplicates in "
                                   f"{tot('faults.json', 'faults', fault='pg-restart', variant='b')} restarts",
    "faults.c.share-lock": lambda: f"{tot('faults.json', 'skipped', fault='share-lock', variant='c'):,} skipped, "
                                   f"{tot('faults.json', 'duplicates', fault='share-lock', variant='c')} duplicates",
    # M9 (docs/frameworks.md, docs/results.md)
    "fw.fs-default": lambda: per_run("kill-frameworks.json", "duplicates", variant="fs-default"),
    "fw.fs-ack": lambda: per_run("kill-frameworks.json", "duplicates", variant="fs-ack"),
    "fw.fs-inbox": lambda: dup_lost("kill-frameworks.json", variant="fs-inbox"),
    "fw.fs-inbox.dup": lambda: f"{tot('kill-frameworks.json', 'duplicates', variant='fs-inbox')} duplicates",
    "fw.async-commit": lambda: "; ".join(
        f"{what}: past it in {tot('async-commit.json', 'past_the_message', variant=v)} of "
        f"{tot('async-commit.json', 'trials', variant=v)} trials" for v, what in (
            ("the-message", "the message"), ("stored-offsets", "the stored offsets"))),
    "fw.qx-eos": lambda: f"{tot('kill-frameworks.json', 'duplicates', variant='qx-eos')} duplicates",
    "fw.qx-balances": lambda: "; ".join(
        f"{v}: balance total {tot('kill-frameworks.json', 'balance_total', variant=v)}, "
        + exact_of("kill-frameworks.json", variant=v) for v in ("qx-eos", "qx-eos-keyed")),
    "fw.keyed": lambda: "; ".join(f"{when}, {dup_lost(f, variant='qx-eos-keyed')}" for f, when in BESIDE.items()),
    "fw.quix-exact": lambda: "; ".join(f"{when}, " + ", ".join(f"{v} {exact_of(f, variant=v)}" for v in (
        "qx-eos", "qx-eos-keyed")) for f, when in BESIDE.items()),
    # per-key lanes (docs/lanes.md)
    "lanes.c": lambda: f"{med('throughput-lanes.json', 'c'):,.1f}",
    "lanes.kills": lambda: per_run("kill-k.json", "skipped") + " skipped, " + dup_lost("kill-k.json"),
    "lanes.cpu": lambda: pairs({v: cpu("throughput-lanes.json", v) for v in ("c", "k@1", "k@4", "k@16")}, "{:,.1f}")
    + " µs",
    "lanes.per-lane": lambda: pairs({f"k@{n}": ratio("throughput-lanes.json", f"k@{n}/c") / n for n in (1, 4, 16, 64)}),
    # M3 and issue #31 (docs/throughput.md)
    "batch.d1-against-c": lambda: f"{med('throughput-batch.json', 'd@1'):,.0f} msgs/s against c's "
                                  f"{med('throughput.json', 'c'):,.0f}",
    "batch.sizes": lambda: pairs({n: med("throughput-batch.json", f"d@{n}") for n in (1, 10, 100, 500, 1000)},
                                 "{:,.0f}") + " msgs/s",
    "pipelined.p-db": lambda: f"{ratio(PIPELINED, 'p/db'):.2f}",
    "connections.p2": lambda: f"p@2 keeps {cores(CONNECTIONS, 'p@2')} cores busy, p {cores(CONNECTIONS, 'p')}; "
                              f"p@2/db@2 {ratio(CONNECTIONS, 'p@2/db@2'):.2f}",
    "connections.second": lambda: f"{float(cores(CONNECTIONS, 'p@2')) - float(cores(CONNECTIONS, 'p')):.2f} cores; "
                                  f"p@2/d {ratio(CONNECTIONS, 'p@2/d'):.2f} beside p/d {ratio(CONNECTIONS, 'p/d'):.2f}",
    "cpu.raw": lambda: " and ".join(f"{cpu(f, 'raw'):.1f}" for f in ("throughput.json", PIPELINED)) + " µs",
    "cpu.db-backends": lambda: "; ".join(f"db {cpu(f, 'db', 'postgres_backends'):.1f} µs against p's "
                                         f"{cpu(f, 'p', 'postgres_backends'):.1f}" for f in (PIPELINED, CONNECTIONS)),
    "cpu.db-share": lambda: " and ".join(f"{cpu(f, 'db', 'postgres_backends') / cpu(f, 'p', 'postgres_backends'):.0%}"
                                         for f in (PIPELINED, CONNECTIONS)),
    "cpu.python": lambda: "raw {:.1f} and db {:.1f} of p's {:.1f} µs".format(
        *(cpu(PIPELINED, v, "consumer_python") for v in ("raw", "db", "p"))),
    "cores.d": lambda: pairs({v: cores(PIPELINED, v) for v in ("d", "db", "db-d")}, "{}") + "; with two connections' "
                       "file, " + pairs({v: cores(CONNECTIONS, v) for v in ("d", "db")}, "{}"),
    "cores.p": lambda: " and ".join(cores(f, "p") for f in (PIPELINED, CONNECTIONS)),
    "cores.two": lambda: pairs({v: cores(CONNECTIONS, v) for v in ("p@2", "db@2")}, "{}"),
    "lean.p2": lambda: f"p-lean@2 {med(LEAN, 'p-lean@2'):,.0f} msgs/s at {cpu(LEAN, 'p-lean@2'):.1f} µs on "
                       f"{cores(LEAN, 'p-lean@2')} cores, p@2 {med(LEAN, 'p@2'):,.0f} at {cpu(LEAN, 'p@2'):.1f} µs on "
                       f"{cores(LEAN, 'p@2')}",
    "pipelined.p.cpu": lambda: f"{cpu(PIPELINED, 'p'):.1f}",
    "pipelined.p.rate": lambda: f"{med(PIPELINED, 'p'):,.0f}",
    "frameworks.p.cpu": lambda: f"{cpu('throughput-frameworks.json', 'p'):.1f}",
    "frameworks.p.rate": lambda: f"{med('throughput-frameworks.json', 'p'):,.0f}",
    "frameworks.p.cores": lambda: " and ".join(cores(f, "p") for f in (PIPELINED, "throughput-frameworks.json")),
    "profile.backend": lambda: f"{profile_share('Postgres backend'):g}%",
    "profile.rest": lambda: "{:g}% of the wall".format(sum(map(profile_share, (
        "main thread", "database thread", "librdkafka threads", "Kafka broker")))),
    "pipelined.order": lambda: "; ".join(f"{v} {per_run(PIPELINED, 'order_violations', variant=v)}" for v in "dp"),
    "latency.low": lambda: f"c {latency('latency.json', 'c@200/s'):.1f} ms, d {latency('latency.json', 'd@200/s'):.0f} "
                           f"and p {latency('latency.json', 'p@200/s'):.0f} at 200 a second (p50)",
    "latency.flat": lambda: " and ".join(f"{v} {latency('latency.json', f'{v}@200/s'):.0f} → "
                                         f"{latency('latency.json', f'{v}@5000/s'):.0f} ms" for v in "dp"),
    "latency.drain": lambda: f"c's largest {latency('latency.json', 'c@5000/s', 'max_ms') / 1000:.0f} s",
    "latency.batch50": lambda: "; ".join(
        f"{v} {latency('latency-batch.json', f'{v}@200/s', 'credits_per_transaction'):.1f} credits a transaction and "
        f"{latency('latency-batch.json', f'{v}@200/s'):.0f} ms, at 50 "
        f"{latency('latency-batch.json', f'{v}@200/s batch 50', 'credits_per_transaction'):.1f} and "
        f"{latency('latency-batch.json', f'{v}@200/s batch 50'):.0f} ms" for v in "dp"),
    "latency.batch10": lambda: "; ".join(
        f"{v} {latency('latency-batch.json', f'{v}@200/s'):.0f} → "
        f"{latency('latency-batch.json', f'{v}@200/s batch 10'):.0f} ms p50, "
        f"{latency('latency-batch.json', f'{v}@200/s', 'p99_ms'):.0f} → "
        f"{latency('latency-batch.json', f'{v}@200/s batch 10', 'p99_ms'):.0f} ms p99" for v in "dp"),
    "latency.batch1": lambda: pairs({v: latency("latency-batch.json", f"{v}@200/s batch 1") for v in "dp"}
                                    | {"c": latency("latency-batch.json", "c@200/s")}, "{:.1f}") + " ms",
    "latency.5000.batch50": lambda: " and ".join(f"{v} {latency('latency-batch.json', f'{v}@5000/s'):,.0f} → "
                                                 f"{latency('latency-batch.json', f'{v}@5000/s batch 50'):,.0f} ms"
                                                 for v in "dp"),
    "latency.5000.small": lambda: "{:,.0f} ms".format(min(latency("latency-batch.json", f"{v}@5000/s batch {n}")
                                                          for v in "dp" for n in (10, 1))),
    "latency.batch.faults": lambda: f"{sum(sum(s['totals'].values()) for s in summary('latency-batch.json').values())}",
    "bare.cost": lambda: "{:.0%} of the rate and {:.0%} of the CPU; the backends {:.1f} of the {:.1f} µs".format(
        1 - results.paired_by_run(need("throughput-bare.json"), "p", "p-bare", lambda r: r["msgs_per_s"])["median"],
        1 - 1 / results.paired_by_run(need("throughput-bare.json"), "p", "p-bare",
                                      lambda r: r["cpu_us_per_msg"]["total"])["median"],
        cpu(BARE, "p", "postgres_backends") - cpu(BARE, "p-bare", "postgres_backends"),
        cpu(BARE, "p") - cpu(BARE, "p-bare")),
    "bare.wal": lambda: "{:.2f}×".format(results.paired_by_run(need(BARE), "p", "p-bare",
                                                              lambda r: r["wal_bytes_per_msg"])["median"]),
    "load.delete-wal": lambda: "{:.1f}×".format(summary(LOAD, "delete", "wal_mb")["median"]
                                                / summary(LOAD, "alone", "wal_mb")["median"]),
    "load.times": lambda: pairs({m: summary(LOAD, m, "retention_s")["median"] for m in ("delete", "drop", "detach")},
                                "{:.2f} s") + "; WAL " + pairs({m: summary(LOAD, m, "wal_mb")["median"] for m in (
                                    "partitioned", "drop", "detach")}, "{:.0f} MB"),
    "load.stalls": lambda: pairs({m: s["longest_stall_ms"]["median"] for m, s in summary(LOAD).items()}, "{:.0f}")
    + " ms",
    "load.partitioned": lambda: f"{summary(LOAD, 'partitioned', 'msgs_per_s')['median']:,.0f} msgs/s against "
                                f"{summary(LOAD, 'alone', 'msgs_per_s')['median']:,.0f}",
    "growth.v7": lambda: "; ".join(f"{v} " + " and ".join(f"{growth(v, 'uuid-v7', n, 'vs_text'):.2f}" for n in (
        10_000_000, 50_000_000)) for v in "dp"),
    "growth.v4": lambda: "; ".join(f"{v} " + " and ".join(f"{growth(v, 'text', n, 'vs_empty'):.2f}" for n in (
        10_000_000, 50_000_000)) for v in "dp"),
    "growth.wal": lambda: " and ".join("{} {:,.0f} → {:,.0f} bytes".format(v, *(growth(
        v, "text", n, "wal_bytes_per_msg") for n in (0, 50_000_000))) for v in "dp"),
    "growth.cpu": lambda: "; ".join(f"{v}: {growth_cpu(v, 'text', 0):.1f} → {growth_cpu(v, 'text', 50_000_000):.1f} "
                                    "µs "
                                    f"with v4, {growth_cpu(v, 'uuid-v7', 0):.1f} → "
                                    f"{growth_cpu(v, 'uuid-v7', 50_000_000):.1f} with v7" for v in "dp"),
    "growth.c": lambda: ", ".join(f"{growth('c', 'uuid-v7', n, 'vs_text'):.2f}" for n in (0, 10_000_000, 50_000_000)),
    "growth.c-cpu": lambda: f"{growth_cpu('c', 'text', 50_000_000) / growth_cpu('c', 'text', 0) - 1:.0%}",
    "consumers.second": lambda: pairs({v: ratio(CONSUMERS, f"{v}:2/{v}:1") for v in "cdp"}, "×{:.2f}"),
    "consumers.third": lambda: pairs({v: ratio(CONSUMERS, f"{v}:3/{v}:1") for v in "cdp"}, "×{:.2f}"),
    "consumers.c-cores": lambda: f"{cores(CONSUMERS, 'c:1')}; three {cores(CONSUMERS, 'c:3')}",
    "consumers.most": lambda: pairs({v: max(float(cores(CONSUMERS, f"{v}:{n}")) for n in (1, 2, 3)) for v in "cdp"}),
    "accounts.faster": lambda: "{} of {}".format(sum(ratio(f, f"{v}, 10,000 accounts/{v}, 100 accounts") <= 1
                                                     for f, v in SPREAD), len(SPREAD)),
    "accounts.cpu": lambda: "{} of {}".format(sum(cpu(f, f"{v}, 10,000 accounts") > cpu(f, f"{v}, 100 accounts")
                                                  for f, v in SPREAD), len(SPREAD)),
    "accounts.c": lambda: ", ".join(f"{ratio(CONSUMERS_ACCOUNTS, f'c:{n}, 10,000 accounts/c:{n}, 100 accounts'):.2f}"
                                    for n in (1, 2, 3)),
    "accounts.p2": lambda: "{:.2f} on 10,000, {:.2f} on 100".format(
        *(med(ACCOUNTS, f"p@2, {n} accounts") / med(ACCOUNTS, f"p, {n} accounts") for n in ("10,000", "100"))),
    "accounts.p-lean2": lambda: "{:.2f} and {:.2f}".format(
        *(med(ACCOUNTS, f"p-lean@2, {n} accounts") / med(ACCOUNTS, f"p-lean, {n} accounts")
          for n in ("10,000", "100"))),
    "saturation.publisher": lambda: pairs({v: max(r["offered_per_s"] / r["capacity_per_s"] for r in runs(
        "latency-saturation.json", variant=v)) for v in "dp"}, "{:.0%}") + " of capacity at most",
}
