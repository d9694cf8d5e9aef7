"""The one argument parser every script uses, so that bad flags get one line that says what is wrong,
and what every measurement's command line shares: its common flags, and its line per run."""
import argparse
import json
import os
from pathlib import Path

from lab.settings import RESULTS
from variants.common import Parser, at_least  # noqa: F401  (one parser for variants and lab alike)

DRY_RUN = False  # set by a measurement's --dry-run, read by results.drive


class MeasurementParser(Parser):
    """A measurement's parser: --dry-run reaches results.drive, which then only compares configs
    (tests/test_reproduce.py runs every documented command so)."""

    def parse_args(self, *args, **kwargs):
        global DRY_RUN
        parsed = super().parse_args(*args, **kwargs)
        DRY_RUN = parsed.dry_run
        if getattr(parsed, "out", None):  # refused now, not after the first run, and not with a traceback
            try:
                results_document(Path(parsed.out))
            except NotResults as e:
                self.error(f"--out: {e}")
        return parsed


class NotResults(ValueError):
    """An --out path that a measurement can neither resume nor write; the message is one line
    that names the file and says what is wrong with it."""


def results_document(path: Path) -> dict | None:
    """What an --out path holds already: a results file's document (lab/results.py's shape, a
    JSON object with its "config" and its "runs"), or None when nothing is there yet and a file
    can be made there. NotResults when it is a directory, cannot be made or read, is not JSON,
    or is JSON of another shape: a measurement that went on would fail at its first write, or
    run over a file that is not its own."""
    try:
        if path.is_dir():
            raise NotResults(f"{path} is a directory; name a file in it, e.g. {path / 'results.json'}")
        there = path.exists()
    except OSError as e:
        raise NotResults(f"{path} cannot be looked at: {e.strerror}") from None
    if not there:
        folder = next(p for p in path.absolute().parents if p.exists())  # made, if need be, at the first write
        if not folder.is_dir():
            raise NotResults(f"{path} cannot be made: {folder} is a file, not a directory")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise NotResults(f"{path} cannot be made: {folder} is not writable")
        return None
    try:
        document = json.loads(path.read_text())
    except OSError as e:
        raise NotResults(f"{path} cannot be read: {e.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise NotResults(f"{path} is not JSON, so not a results file of this lab; name another --out") from None
    if not (isinstance(document, dict) and isinstance(document.get("config"), dict)
            and isinstance(document.get("runs"), list)):
        raise NotResults(f"{path} is JSON but not a results file of this lab (an object with its \"config\" and "
                         "\"runs\"); name another --out")
    return document


def measurement(description: str, out: str | None, *, events: int | None = None, partitions: int | None = 6,
                work_ms: float | None = None, seed: bool = True, keep: bool = False) -> Parser:
    """The parser every measure_*.py starts from: the flags they all share (--runs, --seed,
    --out, --force; --events, --partitions and --work-ms where the measurement has them).
    `out`, the default --out: a file name in results/ (e.g. "eos.json"), or a path taken as it is."""
    if out is not None and "/" not in out:
        out = str(RESULTS / out)
    parser = MeasurementParser(description=description)
    parser.add_argument("--runs", type=int, default=5)
    if events is not None:
        parser.add_argument("--events", type=int, default=events)
    if partitions is not None:
        parser.add_argument("--partitions", type=int, default=partitions)
    if work_ms is not None:
        parser.add_argument("--work-ms", type=float, default=work_ms, help="handler sleep per message")
    if seed:
        parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default=out, help=f"results JSON (default {out})" if out else "results JSON")
    parser.add_argument("--force", action="store_true", help="overwrite an --out file with another config")
    parser.add_argument("--dry-run", action="store_true",
                        help="run nothing: say whether this command's config matches its --out file's")
    if keep:
        parser.add_argument("--keep", action="store_true", help="keep each run's schema and topic")
    return parser


def verdict(template: str, **computed):
    """A measurement's line per run (results.drive's `verdict_line`): `template` filled in from
    the run's record, and from `computed`, each a function of the record, for what it does not hold."""
    def line(record: dict) -> str:
        return template.format_map({**record, **{name: value(record) for name, value in computed.items()}})
    return line


def fault_and_variants(parser, faults, variants) -> None:
    """The flags that open M6's and M10's command lines: the fault, the variants that meet it
    side by side, and how many times a run injects it."""
    parser.add_argument("--fault", required=True, choices=faults)
    parser.add_argument("--variant", required=True, type=names_of(variants),
                        help=f"one or more of {','.join(variants)}, run side by side")
    parser.add_argument("--faults", type=int, default=3, help="faults per run")


def fault_pacing(parser, every_s: float, outage_s: float, outage: str,
                 every: str = "seconds between faults (seeded, 0.5x to 1.5x)") -> None:
    """--every-s and --outage-s, as each fault measurement takes them, with its own defaults
    and its own word on what the outage is."""
    parser.add_argument("--every-s", type=float, default=every_s, help=every)
    parser.add_argument("--outage-s", type=float, default=outage_s, help=outage)


def positive(parser, args, *names: str) -> None:
    """One line naming the first of `names` (seconds, say) that is not above zero."""
    for name in names:
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive")


def whole_numbers(text: str, least: int, what: str) -> list[int]:
    """A comma-separated list of whole numbers of at least `least`, or one line naming what is wrong."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what} like {least},10,100, got {text!r}") from None
    if not values or min(values) < least:
        raise argparse.ArgumentTypeError(f"{what} must be at least {least}, got {text!r}")
    return values


def sizes(text: str) -> list[int]:
    """A flag like --sweep-batch 1,10,100: whole numbers of at least 1."""
    return whole_numbers(text, 1, "sizes")


def counts(text: str) -> list[int]:
    """A flag like --inbox-rows 0,10000000: whole numbers of at least 0."""
    return whole_numbers(text, 0, "counts")


def per_name(text: str) -> dict:
    """A flag like --events-of c=5000,d=100000: names, each with a whole number of at least 2."""
    pairs = [part.partition("=") for part in text.split(",") if part.strip()]
    if not pairs or any(not n.isdigit() or int(n) < 2 for _, _, n in pairs):
        raise argparse.ArgumentTypeError(f"expected NAME=N,... with N >= 2, got {text!r}")
    return {name.strip(): int(n) for name, _, n in pairs}


def names_of(choices, what: str = "variant"):
    """A flag type for a comma-separated list of names, each one of `choices` (`what` names them),
    each once: a name given twice would be run twice and named twice in the results file's name."""
    def parse(text: str) -> list[str]:
        names = [part.strip() for part in text.split(",") if part.strip()]
        unknown = [n for n in names if n not in choices]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"unknown {what}(s) {','.join(unknown) or text!r}; "
                                             f"choose from {','.join(choices)}")
        twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
        if twice:
            raise argparse.ArgumentTypeError(f"{twice} is named twice in {text!r}")
        return names
    return parse


def between(least: int, most: int, why: str = ""):
    """A flag type for a whole number from `least` to `most`, both included; any other is refused
    in one line that gives the range, and `why` it is that range."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if not least <= value <= most:
            raise argparse.ArgumentTypeError(f"{value} is outside {least}..{most}" + (f": {why}" if why else ""))
        return value
    return parse


# The session timeouts the lab's broker lets a classic group have: group.min.session.timeout.ms, as
# lab/stack sets it, to group.max.session.timeout.ms, Kafka's default. librdkafka's own range
# (1..3600000) holds both.
BROKER_SESSION_TIMEOUT_MS = (1000, 1_800_000)
# librdkafka's max.poll.interval.ms when a consumer leaves it alone; it refuses a session timeout above it.
DEFAULT_MAX_POLL_INTERVAL_MS = 300_000


def session_timeout_ms(most: int = BROKER_SESSION_TIMEOUT_MS[1]):
    """--session-timeout-ms's type: milliseconds the lab's broker accepts of a classic group, from
    1000 to `most`, refused in one line otherwise (librdkafka would raise, or the broker refuse the
    member, and the run wait out its deadline). `most`, the broker's maximum by default, for a
    measurement with its own --max-poll-interval-ms (checked against it after parsing); for one
    whose consumers keep librdkafka's default, DEFAULT_MAX_POLL_INTERVAL_MS, which librdkafka
    requires the session timeout not to exceed."""
    least, broker_most = BROKER_SESSION_TIMEOUT_MS
    why = ("what the lab's broker accepts (its group.min.session.timeout.ms and group.max.session.timeout.ms)"
           if most >= broker_most else "the lab's broker accepts no less (group.min.session.timeout.ms), and "
           f"librdkafka no more than the consumers' max.poll.interval.ms ({most})")
    return between(least, min(most, broker_most), why)


def unoffered(parser, *flags: str) -> None:
    """Flags a shared helper added that this command always refuses: still parsed, so that the
    refusal is one line naming them, but not offered in --help."""
    for flag in flags:
        parser._option_string_actions[flag].help = argparse.SUPPRESS  # argparse keeps no public handle on them
