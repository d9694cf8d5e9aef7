"""The numbers the pages' prose quotes (<!-- fig:NAME -->VALUE<!-- /fig -->), so that a sentence stating an
outcome shows a re-measured file that says otherwise: FIGURES maps each NAME to a function of results/.
"""
import statistics
from collections.abc import Callable

from lab import results, tables
from lab.tables import Missing, need, runs_of, total


def runs(name: str, **where) -> list[dict]:
    return runs_of(need(name), **where)


def tot(name: str, field: str, **where) -> int:
    return total(runs(name, **where), field)


# fields a template may name beyond the runs' own: each run's share of it, added up over the runs
DERIVED = {"runs": lambda r: 1, "exact": lambda r: bool(r["balances_exact"]),
           "wrong": lambda r: not r["balances_exact"],
           "unknown_member": lambda r: r["commit_failed"].get("UNKNOWN_MEMBER_ID", 0)}


class Totals(dict):
    """A template's fields: c, the (first) file's config; any other name, that field added up over the runs."""
    def __init__(self, names: tuple, where: dict, keep: Callable):
        super().__init__(c=need(names[0]).get("config", {}))
        self.runs = [r for name in names for r in runs(name, **where) if keep(r)]

    def __missing__(self, field: str):
        return sum(DERIVED.get(field, lambda r: r[field])(r) for r in self.runs)


def says(name, template: str, keep: Callable = lambda r: True, **where):
    """A figure: `template` filled in from the runs of `name` (a file, or a tuple of them) `where` and `keep` pick."""
    return lambda: template.format_map(Totals(name if isinstance(name, tuple) else (name,), where, keep))


def cat(*parts):
    """A figure made of several, one after another."""
    return lambda: "".join(part() for part in parts)


DL = "{duplicates:,} duplicates, {lost:,} lost"
MET = "{skipped:,} skipped, " + DL + " in {faults:,} faults"  # what a fault's runs came to
EXACT = "exact in {exact} of {runs} runs"


def summary(name: str, *path: str):
    found = need(name)["summary"]
    for part in path:
        found = found[part]
    return found


def med(name: str, variant: str, field: str = "msgs_per_s") -> float:
    return summary(name, "variants", variant, field)["median"]


def against_all(name: str, variants) -> str:
    """An --against file's CPU per message and msgs/s, today's over the old code's, per variant."""
    return "; ".join(f"{v} {tables.spread(summary(name, 'against', v, 'cpu_us_per_msg', 'total'), 3)}, "
                     f"msgs/s {tables.spread(summary(name, 'against', v, 'msgs_per_s'), 3)}" for v in variants)


def p2_over_db2(name: str, old: str) -> str:
    """p@2/db@2 in an --against file, today's pair and the old code's."""
    return "{} today, {} for the old code's own pair".format(
        *(tables.spread(summary(name, "ratios", r), 3) for r in ("p@2/db@2", f"p@2~{old}/db@2~{old}")))


def ratio(name: str, pair: str) -> float:
    return summary(name, "ratios", pair)["median"]


def cpu(name: str, variant: str, kind: str = "total") -> float:
    return summary(name, "variants", variant, "cpu_us_per_msg", kind)["median"]


def cores(name: str, variant: str) -> str:
    return tables.cores_busy(summary(name, "variants", variant))


def latency(name: str, case: str, field: str = "p50_ms") -> float:
    return summary(name, case, field)["median"]


def batched(case: str, field: str = "p50_ms") -> float:
    return latency("latency-batch.json", case, field)


def growth(variant: str, id_type: str, rows: int, field: str) -> float:
    return summary("throughput-inbox.json", "growth", variant, id_type, str(rows), field)["median"]


def growth_cpu(variant: str, id_type: str, rows: int) -> float:
    """The growing inbox's median Postgres backends' CPU per credit, from its runs (its summary has none)."""
    mine = runs("throughput-inbox.json", variant=variant, id_type=id_type, inbox_rows=rows)
    return statistics.median(r["cpu_us_per_msg"]["postgres_backends"] for r in mine)


def p_over_bare(value) -> float:
    """p over p-bare in results/throughput-bare.json, the median of per-run ratios of value(run)."""
    return results.paired_by_run(need("throughput-bare.json"), "p", "p-bare", value)["median"]


def per_run(name: str, field: str, **where) -> str:
    stat = results.stats(r[field] for r in runs(name, **where))
    if stat["min"] == stat["max"]:  # every run the same: one figure, not a range of one
        return f"{stat['min']:,} in every run"
    return f"{stat['min']:,}–{stat['max']:,} a run"


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


PIPELINED, CONNECTIONS = "throughput-pipelined.json", "throughput-connections.json"
CONSUMERS, LEAN, BARE = "throughput-consumers.json", "throughput-lean.json", "throughput-bare.json"
ACCOUNTS, CONSUMERS_ACCOUNTS = "throughput-accounts.json", "throughput-consumers-accounts.json"
LOAD = "retention-load.json"
BATCHED_ACCOUNTS = ("d", "p", "p@2")
SPREAD = [(ACCOUNTS, v) for v in BATCHED_ACCOUNTS] + [(CONSUMERS_ACCOUNTS, f"{v}:{n}") for v in "dp" for n in (1, 2, 3)]
FM, OFFSETS, FORGOTTEN = "faults-more.json", "faults-more-offsets.json", "faults-more-offsets-forgotten.json"
RB, RC, RD = (f"rebalance-{v}-classic.json" for v in "bcd")
RB_CONSUMER, (B20, C20) = "rebalance-b-consumer.json", (f"rebalance-{v}-consumer-stall20.json" for v in "bc")
EOS, PUB, EXT, F, KF = "eos.json", "publish.json", "external.json", "faults.json", "kill-frameworks.json"
BESIDE = {KF: "under the kills", "rebalance-frameworks-classic.json": "the zombie"}
LP = "lost-commit-reply"

FIGURES = {
    # the parameters README.md states in its prose
    "kill.runs": says("kill.json", "{c[runs]}"),
    "kill.kills": says("kill.json", "{c[kills]}"),
    "m2.max-poll": says(RB, "{c[max_poll_interval_ms]}"),
    "m2.slow-every": says(RB, "{c[slow_every]}"),
    "m2.stall": says(RB, "{c[slow_seconds]:g}"),
    "m2.session": lambda: f"{need(RB)['config']['session_timeout_ms'] / 1000:g}",
    "m2.heartbeat": lambda: f"{need(RB)['config']['session_timeout_ms'] / 3000:g}",
    "m2.consumer.stall": says(RB_CONSUMER, "{c[slow_seconds]:g}"),
    "m2.stall20.stall": says(B20, "{c[slow_seconds]:g}"),
    "growth.millions": lambda: max(need("throughput-inbox.json")["config"]["inbox_rows"]) // 1_000_000,
    # M1, M6's reconnect, M2 and M4b in README.md; M1 in docs/caveats.md
    "reconnect.dup-lost": says("faults-reconnect.json", DL),
    "reconnect.resume": lambda: "first credit {:.2f} s after a restart, c-reconnect's {:.2f} s (medians)".format(
        *(summary("faults-reconnect.json", f"pg-restart/{v}", "resume_s")["median"] for v in ("c", "c-reconnect"))),
    "m2.classic": cat(says(RB, "b {duplicates} duplicates in {evictions} evictions, c "),
                      says(RC, "{skipped} skipped in {evictions}")),
    "m2.unknown-member": says(RB, "{unknown_member} times in {evictions} evictions"),
    "m2.handed": says(RB, "{moved_to_other} to another member, {back_to_zombie} back to the zombie"),
    "m2.d": says(RD, "{skipped:,} skipped and {duplicates} duplicates in {evictions} evictions"),
    "m2.consumer.back": says(RB_CONSUMER, "{back_to_zombie} of {evictions} evictions"),
    "m2.consumer.dup": says(RB_CONSUMER, "duplicates: {duplicates} in {evictions} evictions"),
    "m2.stall20.handover": lambda: "median handover {:.1f} s for b, {:.1f} s for c; the session timeout {:g} s".format(
        *(statistics.median(h for r in runs(name) for h in r["handover_s"]) for name in (B20, C20)),
        need(B20)["config"]["session_timeout_ms"] / 1000),
    "m2.stall20.fenced": says((B20, C20), "{unknown_member} of {evictions} commits failed; {moved_to_other} handed to "
                                          "another member, {back_to_zombie} back"),
    "m2.stall20.dup": cat(says(B20, "b {duplicates} duplicates in {evictions} evictions; c "),
                          says(C20, "{duplicates} duplicates, {skipped} skipped")),
    "retention.equal": lambda: pairs({v: tot("retention.json", "duplicates", variant=v, window="equal")
                                      for v in "cdp"}, "{:,}") + " duplicates",
    "retention.alarm": says("retention.json", "{alarm} of {runs} runs",
                            keep=lambda r: r["variant"] != "v7" and r["window"] != "longer"),
    "retention.v7": cat(says("retention.json", "{duplicates} duplicates at the equal window; one day shorter, ",
                             variant="v7", window="equal"),
                        says("retention.json", "{dead_lettered:,} dead-lettered and {duplicates} duplicates",
                             variant="v7", window="shorter")),
    "throughput.d-over-c": lambda: f"{ratio('throughput.json', 'd/c'):.1f}×",
    "kill.c": says("kill.json", DL + " in {kills} kills", variant="c"),
    "kill.b-against-post": lambda: "{:g} duplicates a run, the post's {:g} (medians)".format(
        statistics.median(r["duplicates"] for r in runs("kill.json", variant="b")),
        need("post-figures.json")["kill"]["variants"]["b"]["duplicates"]["median"]),
    "kill.b-total": says("kill.json", "{duplicates} duplicates in {runs} runs", variant="b"),
    "kill.b-wrong": says("kill.json", "balances wrong in {wrong} of the {runs} runs with a duplicate", variant="b",
                         keep=lambda r: r["duplicates"]),
    # M8 (docs/cluster.md)
    "cluster.acks-all": cat(says("cluster.json", "{acked_missing} acknowledged records missing; ", acks="all"),
                            says("cluster.json", "c, d and o: {duplicates:,} duplicates, {lost:,} lost outside the "
                                 "Postgres faults",
                                 keep=lambda r: r["variant"] in "cdo" and not r["fault"].startswith("pg-"))),
    "cluster.acks1": says("cluster-acks1.json", "{acked_missing} missing", acks="1"),
    "cluster.sync": says("cluster.json", "{lost} lost", replication="sync"),
    "cluster.async": lambda: pairs({v: tot("cluster.json", "lost", fault="pg-failover-stalled", replication="async",
                                          variant=v) for v in "bcdo"}, "{:,}") + " lost",
    # M7 (docs/eos.md)
    "eos.topic": cat(says(EOS, "{topic_copies} copies and {topic_missing} missing; "),
                     says(EOS, "{aborted_copies:,} aborted copies under the kills", point="kill")),
    "eos.e-f": cat(says(EOS, "e: {duplicates:,} duplicates under the kills, ", variant="e", point="kill"),
                   says(EOS, "{duplicates:,} at the planted point; f: ", variant="e", point="pg-committed"),
                   says(EOS, DL + ", " + EXACT, variant="f")),
    "eos.e-aborted": lambda: "; ".join(says(EOS, "{duplicates:,} against {aborted_copies:,}", variant="e", point=p)()
                                       for p in ("kill", "pg-committed")),
    "eos.kafka-committed": says(EOS, DL + ", " + EXACT, point="kafka-committed"),
    "eos.sources": cat(says(PUB, "relay {log_copies:,}, ", source="relay"),
                       says(PUB, "restart {log_copies:,}, ", source="restart"),
                       says(PUB, "retries without idempotence {log_copies:,}, ", source="retries", idempotence="off"),
                       says(PUB, "with it {log_copies:,} copies", source="retries", idempotence="on")),
    "eos.b-c-d": cat(says(PUB, "b {duplicates:,} duplicates for {log_copies:,} copies; c and d ", variant="b"),
                     lambda: f"{sum(tot(PUB, 'duplicates', variant=v) for v in 'cd')}"),
    "eos.idempotence-on": says(PUB, "{log_copies} copies", source="retries", idempotence="on"),
    "eos.idempotence-off": lambda: per_run(PUB, "log_copies", source="retries", idempotence="off"),
    "eos.versioned": says(PUB, "{log_copies:,} copies, {duplicates} duplicates, {stale_accounts} accounts left behind",
                          variant="versioned"),
    "eos.offset-dedup": says(PUB, "{duplicates:,} duplicates for {log_copies:,} copies", variant="offset-dedup"),
    # M5 (docs/external.md)
    "external.retry.lost": says(EXT, "{lost} lost", variant="retry"),
    "external.skip.dup": says(EXT, "{duplicates} duplicates", variant="skip"),
    "external.retry.dup": says(EXT, "{duplicates} duplicates, {crashed_after_call} planted crashes", variant="retry"),
    "external.skip.lost": says(EXT, "{crashed_before_call} planted of {lost} lost", variant="skip"),
    "external.leases": says(EXT, "{lease_short} run short, {lease_taken_over} taken over"),
    # M10 (docs/faults-more.md)
    "fm.lost-reply.c": says(FM, MET, fault=LP, variant="c"),
    "fm.lost-reply.b": says(FM, "{duplicates} duplicates in {faults} lost replies", fault=LP, variant="b"),
    "fm.lost-reply.o": says(FM, MET, fault=LP, variant="o"),
    "fm.lost-reply.a2": says(FM, "{lost:,}", fault=LP, variant="a2"),
    "fm.lost-reply.p": says(FM, MET, fault=LP, variant="p"),
    "fm.pause.c": says(FM, MET, fault="pause-consumer", variant="c"),
    "fm.pause.b": lambda: "duplicated: " + per_run(FM, "duplicates", fault="pause-consumer", variant="b"),
    "fm.pause.p": says(FM, MET, fault="pause-consumer", variant="p"),
    "fm.pause-postgres": cat(says(FM, "c: " + MET + "; b: ", fault="pause-postgres", variant="c"),
                             says(FM, DL, fault="pause-postgres", variant="b")),
    "fm.disk-full": lambda: pairs({v: tot(FM, "duplicates", fault="disk-full", variant=v) + tot(
        FM, "lost", fault="disk-full", variant=v) for v in "bcdop"}, "{:,}") + " duplicated or lost",
    "fm.disk-full.a2": says(FM, "{lost:,}", fault="disk-full", variant="a2"),
    "fm.offsets-expired": lambda: "c, d and p: remembering all, {:,} of {:,} skipped and {:,} duplicates; with {:,} "
                                  "IDs forgotten, {:,} applied again".format(
        *(cdp(OFFSETS, f) for f in ("skipped", "events", "duplicates")),
        sum(f["forgotten"] for v in "cdp" for r in runs(FORGOTTEN, variant=v) for f in r["fault_log"]),
        cdp(FORGOTTEN, "duplicates")),
    "fm.offsets-expired.o": cat(says(OFFSETS, "remembering all, " + MET + "; ", fault="offsets-expired", variant="o"),
                                says(FORGOTTEN, "forgotten, " + MET, fault="offsets-expired", variant="o")),
    "fm.sigterm": says(FM, MET, fault="sigterm"),
    "fm.topic-recreated": says(FM, MET, fault="topic-recreated"),
    # M6 (docs/faults.md)
    "faults.c-d": cat(says(F, DL + " for c; ", variant="c"), says(F, DL + " for d", variant="d")),
    "faults.b": lambda: pairs({f: tot(F, "duplicates", fault=f, variant="b") for f in (
        "broker-restart", "partition-broker", "partition-db", "share-lock")}, "{:,}") + " duplicates",
    "faults.b.pg-restart": says(F, "duplicates: {duplicates} in {faults} restarts", fault="pg-restart", variant="b"),
    "faults.c.share-lock": says(F, "{skipped:,} skipped, {duplicates} duplicates", fault="share-lock", variant="c"),
    # M9 (docs/frameworks.md, docs/results.md)
    "fw.fs-default": lambda: per_run(KF, "duplicates", variant="fs-default"),
    "fw.fs-ack": lambda: per_run(KF, "duplicates", variant="fs-ack"),
    "fw.fs-inbox": says(KF, DL, variant="fs-inbox"),
    "fw.fs-inbox.dup": says(KF, "{duplicates} duplicates", variant="fs-inbox"),
    "fw.async-commit": cat(*(says("async-commit.json", f"{what}: past it in {{past_the_message}} of {{trials}} trials"
                                  + sep, variant=v) for v, what, sep in (
        ("the-message", "the message", "; "), ("stored-offsets", "the stored offsets", "")))),
    "fw.qx-eos": says(KF, "{duplicates} duplicates", variant="qx-eos"),
    "fw.qx-balances": cat(*(says(KF, f"{v}: balance total {{balance_total}}, " + EXACT + sep, variant=v)
                            for v, sep in (("qx-eos", "; "), ("qx-eos-keyed", "")))),
    "fw.keyed": lambda: "; ".join(f"{when}, " + says(f, DL, variant="qx-eos-keyed")() for f, when in BESIDE.items()),
    "fw.quix-exact": lambda: "; ".join(f"{when}, " + ", ".join(f"{v} " + says(f, EXACT, variant=v)() for v in (
        "qx-eos", "qx-eos-keyed")) for f, when in BESIDE.items()),
    # per-key lanes (docs/lanes.md)
    "lanes.c": lambda: f"{med('throughput-lanes.json', 'c'):,.1f}",
    "lanes.kills": cat(lambda: per_run("kill-k.json", "skipped"), says("kill-k.json", " skipped, " + DL)),
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
    "throughput.c-b": lambda: ("c/b {:.3f}; c {:,.1f} µs a message in its Python and {:,.1f} in Postgres's backends, "
                               "b {:,.1f} and {:,.1f}").format(ratio("throughput.json", "c/b"), *(
                                   cpu("throughput.json", v, k) for v in "cb"
                                   for k in ("consumer_python", "postgres_backends"))),
    "commits.broker": lambda: "; ".join(
        f"{v} {tables.spread(summary('throughput-commits.json', 'against', v, 'cpu_us_per_msg', 'broker'), 3)}"
        for v in ("p", "p@2")),
    "commits.all": lambda: against_all("throughput-commits.json", ("p", "p@2", "d")),
    "ahead.all": lambda: against_all("throughput-ahead.json", ("p", "p@2", "d", "db@2")),
    "ahead.p2-db2": lambda: p2_over_db2("throughput-ahead.json", "6686431"),
    "against.p2-db2": lambda: p2_over_db2("throughput-against.json", "1b663da"),
    "layout.shared": lambda: tables.spread(summary("throughput-cores.json", "shared", "ratio"), 3),
    "layout.apart": lambda: tables.spread(summary("throughput-cores.json", "apart", "ratio"), 3),
    "layout.niced": lambda: tables.spread(summary("throughput-cores.json", "niced", "ratio"), 3),
    "against.p2-db2-apart": lambda: tables.spread(summary("throughput-against-apart.json", "ratios", "p@2/db@2"), 3),
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
        f"{v} {batched(f'{v}@200/s', 'credits_per_transaction'):.1f} credits a transaction and "
        f"{batched(f'{v}@200/s'):.0f} ms, at 50 {batched(f'{v}@200/s batch 50', 'credits_per_transaction'):.1f} "
        f"and {batched(f'{v}@200/s batch 50'):.0f} ms" for v in "dp"),
    "latency.batch10": lambda: "; ".join(
        f"{v} {batched(f'{v}@200/s'):.0f} → {batched(f'{v}@200/s batch 10'):.0f} ms p50, "
        f"{batched(f'{v}@200/s', 'p99_ms'):.0f} → {batched(f'{v}@200/s batch 10', 'p99_ms'):.0f} ms p99" for v in "dp"),
    "latency.batch1": lambda: pairs({v: batched(f"{v}@200/s batch 1") for v in "dp"} | {"c": batched("c@200/s")},
                                    "{:.1f}") + " ms",
    "latency.5000.batch50": lambda: " and ".join(
        f"{v} {batched(f'{v}@5000/s'):,.0f} → {batched(f'{v}@5000/s batch 50'):,.0f} ms" for v in "dp"),
    "latency.5000.small": lambda: "; ".join(
        f"{v} " + ", ".join(f"at {n} {batched(f'{v}@5000/s batch {n}'):,.0f} ms" for n in (10, 1)) for v in "dp"),
    "latency.batch.faults": lambda: f"{sum(sum(s['totals'].values()) for s in summary('latency-batch.json').values())}",
    "bare.cost": lambda: "{:.0%} of the rate and {:.0%} of the CPU; the backends {:.1f} of the {:.1f} µs".format(
        1 - p_over_bare(lambda r: r["msgs_per_s"]), 1 - 1 / p_over_bare(lambda r: r["cpu_us_per_msg"]["total"]),
        cpu(BARE, "p", "postgres_backends") - cpu(BARE, "p-bare", "postgres_backends"),
        cpu(BARE, "p") - cpu(BARE, "p-bare")),
    "bare.wal": lambda: f"{p_over_bare(lambda r: r['wal_bytes_per_msg']):.2f}×",
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
    "growth.cpu": lambda: "; ".join(f"{v}: {growth_cpu(v, 'text', 0):.1f} → {growth_cpu(v, 'text', 50_000_000):.1f} µs "
                                    f"with v4, {growth_cpu(v, 'uuid-v7', 0):.1f} → "
                                    f"{growth_cpu(v, 'uuid-v7', 50_000_000):.1f} with v7" for v in "dp"),
    "growth.v7-empty": lambda: "; ".join(f"{v} " + " and ".join(f"{growth(v, 'uuid-v7', n, 'vs_empty'):.2f}"
                                                                 for n in (10_000_000, 50_000_000)) for v in "dp"),
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
    "accounts.p2": lambda: "{:.2f} on 10,000, {:.2f} on 100".format(*(results.stats(
        two["msgs_per_s"] / one["msgs_per_s"] for two in runs(ACCOUNTS, variant="p@2", accounts=n)
        for one in runs(ACCOUNTS, variant="p", accounts=n, run=two["run"]))["median"] for n in (10_000, 100))),
    "saturation.publisher": lambda: pairs({v: max(r["offered_per_s"] / r["capacity_per_s"] for r in runs(
        "latency-saturation.json", variant=v)) for v in "dp"}, "{:.0%}") + " of capacity at most",
}
