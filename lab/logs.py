"""The log protocol: every line the harnesses count, parsed in one place (each line's format is
defined by the module that prints it, and read from there, so a format and its parser cannot
drift apart). lab/harness.py re-exports these names: measurements read `harness.COUNTED`.
"""
import datetime
import re
from pathlib import Path

import consume
from lab import registry
from lab import worker as worker_script
from lab.settings import ROOT
from variants import common, provider


def _starts(text: str) -> str:
    """A format's fixed start, as a regex: where its first conversion (%s, %d, ...) begins."""
    return re.escape(text.split("%", 1)[0])


def said_by(path: str, name: str) -> str:
    """A line's format as the variant that prints it defines it, read from its source and not
    imported: every run counts these lines, and only a run of that variant loads its code."""
    return registry.constant(ROOT / path, name)


LEASE_RUNNING_OUT = "LeaseRunningOut"  # consume_external's exception, as a traceback's last line names it


# kind -> pattern; a pattern with a group counts kind:group (e.g. commit_failed:UNKNOWN_MEMBER_ID).
COUNTED = {
    "skipped": re.compile(_starts(consume.SKIPPED_LOG)),
    "dead_lettered": re.compile(_starts(consume.DEAD_LETTERED_LOG)),
    "commit_failed": re.compile(_starts(consume.COMMIT_FAILED_LOG) + r"(\S+)"),
    "retried": re.compile(_starts(common.RETRIED_LOG) + r"(\S+)"),  # a deadlock or serialization failure
    "restarted": re.compile(_starts(worker_script.RESTARTED_LOG)),  # c, b: stopped on a lost database, restarted
    "reconnected": re.compile(_starts(common.RECONNECTED_LOG)),  # the variants that keep their connection
    "connect_refused": re.compile(_starts(consume.CONNECT_RETRY_LOG)),  # a first connection, waited for
    "aborted": re.compile(_starts(said_by("variants/consume_eos.py", "ABORTED_LOG"))),  # e, f: a transaction aborted
    "planted_crashes": re.compile(_starts(worker_script.CRASHING_LOG)),
    "crashed_after_commit": re.compile(_starts(worker_script.CRASH_AFTER_COMMIT_LOG) + r"(\S+?),"),  # the event
    # librdkafka's own line (the app's error event repeats it), or as a framework's logger prints
    # it: "MAXPOLL [<client name>#consumer-N]" (rdkafka, or FastStream's own client.id)
    "evictions": re.compile(r"\|MAXPOLL\||\bMAXPOLL \[[^\]#]+#consumer-"),
    "stalls": re.compile(_starts(worker_script.STALLING_LOG)),
    "stalls_over": re.compile(_starts(worker_script.STALL_OVER_LOG)),
    "ack_failed": re.compile(_starts(worker_script.ACK_FAILED_LOG) + r"(\S+)"),
    # External effects: a lease that ran short (the exception's last line), or was taken over.
    "lease_short": re.compile(LEASE_RUNNING_OUT + ": "),
    "lease_taken_over": re.compile(_starts(said_by("variants/consume_external.py", "LEASE_TAKEN_OVER_LOG"))),
    "provider_failed": re.compile(provider.ProviderError.__name__ + ": "),
    "died_of_deadlock": re.compile(r"DeadlockDetected: "),  # a traceback's last line: what #13 fixed
    # a framework's handler that raised, before its ack policy decides (M9: ACK acks past it)
    "handler_raised": re.compile(_starts(said_by("variants/consume_faststream.py", "HANDLER_FAILED_LOG"))),
}
FIRST_EFFECT = re.compile(_starts(worker_script.FIRST_EFFECT_LOG))
REPORT = re.compile(_starts(worker_script.REPORT_LOG) + r"(\{.*\})$")
OWNERSHIP = re.compile(_starts(common.PARTITIONS_LOG) + r"(assigned|revoked|lost): (\S+)")
# worker.LOG_FORMAT: the time, "variant[pid]", the logger, the message.
APP_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \S+ \S+ (.*)$")
MAXPOLL_LINE = re.compile(r"^%\d\|(\d+\.\d+)\|MAXPOLL\|")  # librdkafka's, with its own unix time


def partitions_in(listed: str) -> frozenset:
    return frozenset() if listed == "none" else frozenset(int(p) for p in listed.split(","))


STALLING = re.compile(_starts(worker_script.STALLING_LOG) + r"(\S+)")
SKIPPED_ID = re.compile(_starts(consume.SKIPPED_LOG) + r"(\S+)")
STALL_OVER_ID = re.compile(_starts(worker_script.STALL_OVER_LOG) + r"([^\s,]+)")


def timeline(worker: str, lines) -> list[tuple]:
    """(unix time, worker, what, detail) for each line the checker's timelines read:
    'evicted' (librdkafka's MAXPOLL line), 'assigned'/'revoked'/'lost' (detail: a frozenset
    of partitions), 'stalling', 'stall over' and 'skipped' (detail: the event ID), and
    'commit failed' (detail: the error code)."""
    events = []
    for line in lines:
        if m := MAXPOLL_LINE.match(line):
            events.append((float(m.group(1)), worker, "evicted", None))
        elif m := APP_LINE.match(line):
            at, text = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp(), m.group(2)
            if owned := OWNERSHIP.match(text):
                events.append((at, worker, owned.group(1), partitions_in(owned.group(2))))
            elif found := STALL_OVER_ID.match(text):
                events.append((at, worker, "stall over", found.group(1)))
            elif found := STALLING.match(text):
                events.append((at, worker, "stalling", found.group(1)))
            elif found := SKIPPED_ID.match(text):
                events.append((at, worker, "skipped", found.group(1)))
            elif found := COUNTED["commit_failed"].match(text):
                events.append((at, worker, "commit failed", found.group(1)))
    return events


def timeline_of(log_paths) -> list[tuple]:
    """Every worker's timeline from its log file, the file's stem naming the worker."""
    return [event for path in log_paths for event in timeline(Path(path).stem, Path(path).read_text().splitlines())]
