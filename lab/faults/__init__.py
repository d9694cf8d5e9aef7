"""The faults: one module each (or one for a small family that shares its code), found by discovery.

Claim: a fault is one file. Each module of this package that declares `FAULTS` (a tuple of
Fault) is found by pkgutil the first time the registry is asked; a module that declares none
(schedule.py) is a helper. The measurements take their --fault choices and their
dispatch from here, by what a fault needs: measure_faults (M6) the ones on the single-node
stack that leave the consumers alone, measure_faults_more (M10) the ones that act on a
supervised pool of consumers, measure_cluster (M8) the ones on the replicated lab.

Adding a fault: a new file here with `FAULTS = (Fault(...),)`, its needs saying which
measurement lands it (and its `order`, where it goes among their --fault choices); nothing else.

Every fault is landed the same way, `get(name).land(scene)`: its inject (and, for one with a
heal, `hold` seconds later its heal, whatever happens meanwhile), given the scene the
measurement holds and the fault's parameters (its `defaults`, overridden by the run's config);
returned, what happened, as a dict.
"""
import contextlib
import dataclasses
import importlib
import pkgutil
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

# What a fault may need, and so which measurement can land it.
NEEDS = {
    "stack": "the single-node embedded stack this checkout started (its services, its superuser)",
    "replicated": "the replicated lab (stack.py up --replicated)",
    "pg-standby": "the replicated lab's Postgres standby: run once per replication mode",
    "netns": "a network namespace around a consumer or a node, cut at a bridge (root: ip netns)",
    "root": "root, for something else (a tmpfs mounted)",
    "pool": "the run's consumers, supervised (M10): the fault stops, replaces or pauses them",
}


class Scene(types.SimpleNamespace):
    """What a measurement hands a fault. `config`, the run's settings, always; the rest as the
    measurement has them: space (the run's schema, topic and group), topic, ns (the namespace
    the first consumer lives in), pool (M10's supervised consumers), role (the run's login role),
    events and later (the run's credits; topic-recreated's second lot), target (the consumer a
    fault is aimed at), at_work, and what a fault's own set-up put there (its proxy, its disk)."""


def _no_context(scene: Scene):
    return contextlib.nullcontext()


def _no_check(args) -> None:
    return None


@dataclasses.dataclass(frozen=True)
class Fault:
    """One fault, as its module declares it."""

    name: str
    summary: str  # one line
    needs: frozenset[str]  # of NEEDS
    # inject(scene, **params) -> dict of what it met (or None). None: the fault is no injection
    # but the workload itself (share-lock: a handler outliving a lock), and `start` runs it.
    inject: Callable[..., dict | None] | None
    # heal(scene, **params): with one, land() injects, holds params[hold] seconds, and heals
    heal: Callable[..., None] | None = None
    hold: str | None = None
    defaults: dict = dataclasses.field(default_factory=dict)  # its parameters, unless the config has them
    order: int = 1000  # its place in a listing (the --fault choices)
    consumers: int = 1  # consumers a run of it starts: two where one's partitions move to the other
    # with config["in_handler"], it lands while its target consumer is stalled inside a handler
    in_handler: bool = False
    once: bool = False  # it ends a run's first part (every credit applied first): once a run
    republishes: bool = False  # it publishes scene.later, as many credits again, which the run counts
    check: Callable = _no_check  # check(args) -> the error line for flags it cannot run with, or None
    # before(args) -> config to record with the runs; raises Refused when it cannot run here
    before: Callable | None = None
    # context managers the measurement enters for it: around_run before the run's schema is made
    # (left after it is dropped), around_consumers before its consumers start (left after they stop)
    around_run: Callable[[Scene], contextlib.AbstractContextManager] = _no_context
    around_consumers: Callable[[Scene], contextlib.AbstractContextManager] = _no_context
    start: Callable | None = None  # start(scene, variant, run) -> (workers, settle options), with no inject
    tally: Callable | None = None  # tally(workers) -> fields its run record adds
    # met(log, runs) -> what the faults met, in words, for the report's table (M10): `log`, every
    # fault_log entry of the runs of one variant under it; `runs`, those runs
    met: Callable[[list, list], str] | None = None
    title: str = ""  # how the report names it, a format over the run's config (M8: "leader paused {pause_s:g} s")
    module: str = ""

    def params(self, config: dict) -> dict:
        return {key: config.get(key, default) for key, default in self.defaults.items()}

    def land(self, scene: Scene) -> dict:
        """Inject it (and heal it) now; what happened."""
        params = self.params(scene.config)
        met = self.inject(scene, **params) or {}
        if self.heal is None:
            return met
        try:
            time.sleep(params[self.hold])
        finally:
            self.heal(scene, **params)
        return {"outage_s": params[self.hold], **met}


class Refused(Exception):
    """A fault that cannot run here, and why (one line)."""


_found: dict[str, Fault] = {}


def add_path(directory) -> None:
    """Look for fault modules in `directory` too (a reader's own, or a test's throwaway one)."""
    if str(directory) not in __path__:
        __path__.append(str(directory))
    importlib.invalidate_caches()  # a finder that listed the directory before would miss a new file
    _found.clear()


def remove_path(directory) -> None:
    """Stop looking in `directory`, and forget the modules found there."""
    with contextlib.suppress(ValueError):
        __path__.remove(str(directory))
    for name, module in list(sys.modules.items()):
        where = getattr(module, "__file__", None)
        if name.startswith(f"{__name__}.") and where and Path(where).parent == Path(directory):
            del sys.modules[name]
    _found.clear()


def registry() -> dict[str, Fault]:
    """Every fault, by name, in their order; discovered once."""
    if not _found:
        found = {}
        for info in pkgutil.iter_modules(__path__):
            module = importlib.import_module(f"{__name__}.{info.name}")
            for fault in getattr(module, "FAULTS", ()):
                if fault.name in found:
                    raise ValueError(f"fault {fault.name} declared twice: in {found[fault.name].module} "
                                     f"and {module.__name__}")
                unknown = set(fault.needs) - set(NEEDS)
                if unknown:
                    raise ValueError(f"fault {fault.name} needs {sorted(unknown)}: not among {sorted(NEEDS)}")
                found[fault.name] = dataclasses.replace(fault, needs=frozenset(fault.needs), module=module.__name__)
        _found.update(sorted(found.items(), key=lambda item: (item[1].order, item[0])))
    return _found


def get(name: str) -> Fault:
    try:
        return registry()[name]
    except KeyError:
        raise KeyError(f"no fault {name!r}; there are {', '.join(registry())}") from None


def select(*needed: str, without: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The names of the faults that need all of `needed` and none of `without`, in their order."""
    return tuple(name for name, fault in registry().items()
                 if set(needed) <= fault.needs and not fault.needs & set(without))
