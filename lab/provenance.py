"""What a run loaded: the content hash of every file of this repository it read.

Claim: a figure can only have been moved by code that ran, so a run records every file of
the checkout that its processes opened (each module Python imported, every .sql it read),
with a hash of its content; a results section is stale exactly when one of those files
differs now. No analysis of what a change could reach: what was loaded is what counts.

How: an audit hook (sys.addaudithook) sees every file a process opens, including the
compiled module caches Python imports from (__pycache__/NAME.cpython-3XX.pyc, recorded as
NAME.py, the source it was compiled from). watch() installs it once and first records the
modules imported before it. A worker prints each new file as one LOADED_LOG line the moment
it is opened (so a SIGKILLed worker has told what it ran); the harness that reads its log
hands them to heard(), and the run's record is this process's files and the workers'.
"""
import contextlib
import functools
import hashlib
import importlib.metadata
import os
import re
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KINDS = (".py", ".sql")  # code and the SQL it runs; prose, results and caches are not code
NOT_CODE = ("results", "docs")  # folders of the checkout whose files never move a figure
LOADED_LOG = "provenance: loaded %s %s"  # path (from the checkout's root), content hash; or package:NAME, version
LOADED = re.compile(r"provenance: loaded (\S+) ([0-9a-f]{12}|gone)\s*$")
PACKAGE = "package:"  # the prefix of a third-party package's entry: package:quixstreams 3.28.1
PACKAGE_LOADED = re.compile(r"provenance: loaded package:(\S+) (\S+)\s*$")
SITE = re.compile(r"/site-packages/([A-Za-z_][A-Za-z0-9_]*)(?:/|\.py$|\.cpython|\.abi3)")
CACHED = re.compile(r"^(.*)/__pycache__/([^/.]+)\.[^/]+\.pyc$")

_mine: dict[str, str] = {}  # this process's files
_heard: dict[str, str] = {}  # the current run's workers' files
_my_packages: dict[str, str] = {}  # the third-party packages this process imported: name -> version
_heard_packages: dict[str, str] = {}  # the current run's workers' packages
_lock = threading.Lock()
_state = threading.local()  # set while the hook itself opens a file to hash it
_emit = None


def repo_path(path) -> str | None:
    """`path` as a file of the checkout (relative, the source for a module cache), or None
    for anything else: the venvs, caches and any hidden folder, results and prose."""
    try:
        text = str(Path(path).absolute()) if not isinstance(path, int) else None
    except (TypeError, ValueError):
        return None
    if text is None:
        return None
    if cached := CACHED.match(text):
        text = f"{cached.group(1)}/{cached.group(2)}.py"
    try:
        relative = Path(text).relative_to(ROOT)
    except ValueError:
        return None
    parts = relative.parts
    if not parts or any(part.startswith(".") for part in parts) or parts[0] in NOT_CODE:
        return None
    return relative.as_posix() if relative.suffix in KINDS else None


@contextlib.contextmanager
def unrecorded():
    """Open files inside the block without recording them: for reading what is not run (the
    registry reads every variant's declaration as text, lab/registry.py)."""
    before = getattr(_state, "busy", False)
    _state.busy = True
    try:
        yield
    finally:
        _state.busy = before


def digest(relative: str, root: Path = ROOT) -> str:
    """The first 12 hex digits of the file's SHA-256, or "gone" if it is not there. Hashing
    a file is not loading it: checking old runs against the tree records nothing."""
    try:
        with unrecorded():
            return hashlib.sha256((root / relative).read_bytes()).hexdigest()[:12]
    except OSError:
        return "gone"


def note(path) -> None:
    """Record a file this process loaded (and tell the harness, in a worker)."""
    relative = repo_path(path)
    if relative is None or relative in _mine:
        return
    hashed = digest(relative)
    with _lock:
        if relative in _mine:
            return
        _mine[relative] = hashed
    if _emit is not None:
        _emit(relative, hashed)


ROOT_TEXT = str(ROOT)


def _hook(event: str, args: tuple) -> None:
    if event != "open" or not args or getattr(_state, "busy", False) or isinstance(args[0], int):
        return
    try:
        text = os.fsdecode(args[0])  # str, bytes or a path-like
    except TypeError:
        return
    if "/site-packages/" in text:
        note_package(text)
    elif text.startswith(ROOT_TEXT) or not text.startswith("/"):  # most opens are elsewhere: decided cheaply
        note(text)


@functools.cache
def distributions() -> dict[str, list[str]]:
    with unrecorded():
        return importlib.metadata.packages_distributions()


def note_package(path: str) -> None:
    """Record the version of the third-party package a file under site-packages belongs to,
    once (and tell the harness, in a worker): a framework in a venv of its own says its own."""
    found = SITE.search(path)
    if found is None or found.group(1) in _my_packages:
        return
    name = found.group(1)
    with unrecorded():
        try:
            version = importlib.metadata.version(distributions().get(name, [name])[0])
        except (importlib.metadata.PackageNotFoundError, IndexError):
            version = "unknown"
    with _lock:
        if name in _my_packages:
            return
        _my_packages[name] = version
    if _emit is not None:
        _emit(PACKAGE + name, version)


def print_line(relative: str, hashed: str) -> None:
    # one write, so that no other thread's line (nor librdkafka's) lands inside this one
    sys.stderr.write(LOADED_LOG % (relative, hashed) + "\n")
    sys.stderr.flush()


def watch(emit=None) -> None:
    """Start recording (once a process; later calls only set `emit`): the modules already
    imported now, every file opened from here on. `emit(path, hash)` hears each new file."""
    global _emit
    first = not getattr(watch, "installed", False)
    if first:
        watch.installed = True
        sys.addaudithook(_hook)
    for module in list(sys.modules.values()):
        where = getattr(module, "__file__", None) or ""
        note_package(where) if "/site-packages/" in where else note(where)
    if emit is not None and _emit is None:
        _emit = emit
        for relative, hashed in sorted(loaded().items()):
            emit(relative, hashed)  # what it loaded before it was told where to say so
        for name, version in sorted(_my_packages.items()):
            emit(PACKAGE + name, version)


def heard(line: str) -> bool:
    """Take one line of a worker's log: if it says the worker loaded a file (or a package),
    add it to the run's record and return True."""
    if package := PACKAGE_LOADED.search(line):
        with _lock:
            _heard_packages[package.group(1)] = package.group(2)
        return True
    found = LOADED.search(line)
    if found is None:
        return False
    with _lock:
        previous = _heard.setdefault(found.group(1), found.group(2))
        if previous != found.group(2):  # edited while the run ran: neither version alone made it
            _heard[found.group(1)] = "mixed"
    return True


def begin_run() -> None:
    """A new run: forget what the last run's workers loaded (this process's files stay)."""
    with _lock:
        _heard.clear()
        _heard_packages.clear()


def workers_loaded() -> dict[str, str]:
    """What the current run's workers said they loaded."""
    with _lock:
        return dict(sorted(_heard.items()))


def loaded() -> dict[str, str]:
    """This process's files and the current run's workers', path -> hash, sorted by path."""
    with _lock:
        merged = dict(_heard)
        for relative, hashed in _mine.items():
            merged[relative] = hashed if merged.get(relative, hashed) == hashed else "mixed"
    return dict(sorted(merged.items()))


def workers_packages() -> dict[str, str]:
    with _lock:
        return dict(sorted(_heard_packages.items()))


def packages() -> dict[str, str]:
    """The third-party packages this process and the current run's workers imported, with their
    versions (a worker in a venv of its own may differ: "qx 3.28.1 / 2.12.0" is not merged)."""
    with _lock:
        merged = dict(_heard_packages)
        for name, version in _my_packages.items():
            merged[name] = version if merged.get(name, version) == version else f"{version}, {merged[name]}"
    return dict(sorted(merged.items()))


def changed_since(recorded: dict[str, str], root: Path = ROOT) -> list[str]:
    """The recorded files whose content differs now (or that are gone), sorted."""
    return sorted(path for path, hashed in recorded.items() if digest(path, root) != hashed)
