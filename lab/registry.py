"""Every variant the lab can run, each declared once, in its own file.

Claim: adding a variant is adding one file. A module of variants/ (or of lab/, for the lab's
own workers: the ceilings and the publisher) declares what it runs in a module-level
VARIANTS literal, a dict from name to a dict of:

    label    the name tables give it ("c: inbox + commit after the DB")       required
    kind     consumer (in a consumer group: the default), share, external, relay, eos,
             self-timed (reports its own rate), producer
    reads    the worker flags it takes beyond those every variant takes (COMMON): batch,
             connections, lanes, window, every, policy, lease_s, provider_url, crash_after
             (a planted crash right after a DB commit: it commits by hand)
    needs    flags without which it cannot run (the worker refuses it in one line)
    crash_points  where --crash-point may plant a crash (lab/worker.py's CRASH_POINTS)
    groups   the sets a measurement may name (--variant all, frameworks, shortcuts)
    setup    SQL the schema's owner runs in the run's schema before its worker starts,
             or the string constant that holds it: NAME in the declaring module, or
             package.module:NAME in another (a variant on another's schema)
    venv     the environment it runs in, under the checkout, if not the lab's own
    run      the module's function the worker calls (default run_worker)

The literal is read without importing the module (ast.literal_eval), so a framework that is
installed only in its own venv can be declared, and a measurement's process loads no
variant it does not run: what a run loaded (lab.provenance) is what it ran, and a change to
another variant's file leaves its figures current. The reads themselves are not recorded as
loads: the declaration that shapes a run is in the module its worker imports.

Measurements ask for variants by kind, group or what they read, never by typed-in lists.
"""
import ast
import dataclasses
import functools
import hashlib
import importlib
import importlib.util
import os
import re
import sys
from pathlib import Path

from lab import provenance
from lab.settings import ROOT

FOLDERS = ("variants", "lab")  # where declaring modules live
EXTRA = "LAB_EXTRA_VARIANTS"  # more declaring files outside them (paths, os.pathsep between), as workers inherit it
# The flags every worker takes (harness config key -> worker flag): the handler's sleep and stall,
# the group's timeouts and protocol.
COMMON = ("work_ms", "session_timeout_ms", "heartbeat_interval_ms", "max_poll_interval_ms", "group_protocol",
          "slow_every", "slow_seconds")
# The flags a variant may read beyond COMMON (harness config keys, worker flags' names).
READS = ("batch", "connections", "lanes", "window", "every", "policy", "lease_s", "provider_url", "crash_after")
KINDS = ("consumer", "share", "external", "relay", "eos", "self-timed", "producer")
# What a command (add_command) is told beyond where to read and write: harness config key ->
# the environment variable it finds it in; a consumer that ignores them still runs, only slower
# to be evicted (docs/your-consumer.md).
COMMAND_ENV = {"session_timeout_ms": "KAFKA_SESSION_TIMEOUT_MS", "max_poll_interval_ms": "KAFKA_MAX_POLL_INTERVAL_MS",
               "heartbeat_interval_ms": "KAFKA_HEARTBEAT_INTERVAL_MS", "group_protocol": "KAFKA_GROUP_PROTOCOL"}
COMMANDS: dict[str, "Variant"] = {}  # the commands this process declared, by name (add_command)
FIELDS = ("label", "kind", "reads", "needs", "crash_points", "groups", "setup", "venv", "run")


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    label: str
    module: str
    kind: str = "consumer"
    reads: frozenset = frozenset()
    needs: frozenset = frozenset()
    crash_points: tuple = ()
    groups: tuple = ()
    setup: str | None = None
    venv: str | None = None
    run: str = "run_worker"
    path: str | None = None  # a declaring file outside the folders (EXTRA), imported by its path
    command: str | None = None  # a reader's own consumer, run by the shell (add_command)
    effects: str | None = None  # with a command: the query whose rows are its effects, one event_id each

    def takes(self, key: str) -> bool:
        """Whether the worker flag for harness config `key` means something to this variant
        (a command takes only what its environment can say: COMMAND_ENV)."""
        return key in COMMAND_ENV if self.command else key in COMMON or key in self.reads


class DeclarationError(Exception):
    """A VARIANTS literal that cannot be read, or says something the registry cannot use."""


def constant(path: Path, name: str):
    """The value of a module's top-level `name = <literal>` (the last one, as Python binds it),
    read from its source without running it; None if it binds none. DeclarationError if the
    value is no literal, or the source does not parse."""
    try:
        with provenance.unrecorded():  # reading a declaration runs nothing (see the docstring)
            source = Path(path).read_text()
    except OSError as e:
        raise DeclarationError(f"{path}: cannot be read ({e.strerror})") from None
    if name not in source:
        return None
    try:
        body = ast.parse(source).body
    except SyntaxError as e:
        raise DeclarationError(f"{path}:{e.lineno}: {e.msg}") from None
    found = None
    for node in body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) \
            else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            if node.value is None:
                continue  # an annotation alone binds nothing
            try:
                found = ast.literal_eval(node.value)
            except ValueError as e:
                raise DeclarationError(f"{path}: {name} must be a literal ({e})") from None
    return found


def declared_in(path: Path) -> dict | None:
    """The VARIANTS literal of one module's source, or None if it declares none."""
    declared = constant(path, "VARIANTS")
    if declared is not None and not (isinstance(declared, dict) and all(isinstance(v, dict)
                                                                         for v in declared.values())):
        raise DeclarationError(f"{path}: VARIANTS must be a dict from each variant's name to a dict of its fields")
    return declared


def variant_of(name: str, fields: dict, module: str, path: Path | None = None) -> Variant:
    unknown = set(fields) - set(FIELDS)
    if unknown or "label" not in fields:
        raise DeclarationError(f"{module}: variant {name!r} " + (f"has unknown fields {sorted(unknown)}" if unknown
                                                                 else "needs a label"))
    if fields.get("kind", "consumer") not in KINDS:
        raise DeclarationError(f"{module}: variant {name!r} has kind {fields['kind']!r}; one of {', '.join(KINDS)}")
    for listed in ("reads", "needs", "crash_points", "groups"):
        value = fields.get(listed, [])
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise DeclarationError(f"{module}: variant {name!r}: {listed} must be a list of names, not {value!r}")
    if set(fields.get("reads", ())) - set(READS):
        raise DeclarationError(f"{module}: variant {name!r} reads {sorted(set(fields['reads']) - set(READS))}; "
                               f"a variant may read {', '.join(READS)}")
    return Variant(name=name, module=module, label=fields["label"], kind=fields.get("kind", "consumer"),
                   reads=frozenset(fields.get("reads", ())), needs=frozenset(fields.get("needs", ())),
                   crash_points=tuple(fields.get("crash_points", ())),
                   groups=tuple(fields.get("groups", ())), setup=fields.get("setup"), venv=fields.get("venv"),
                   run=fields.get("run", "run_worker"), path=str(path) if path else None)


def extra_paths() -> list[Path]:
    return [Path(p) for p in os.environ.get(EXTRA, "").split(os.pathsep) if p]


def add_file(path) -> None:
    """Declare the variants of a file outside the folders, for this process and the workers it
    starts (a test's throwaway variant, or one of a reader's own)."""
    os.environ[EXTRA] = os.pathsep.join(str(p) for p in [*extra_paths(), Path(path).resolve()])
    everything.cache_clear()


@functools.cache
def everything() -> dict[str, Variant]:
    """name -> Variant, in the order the modules (by file name) and their literals give them."""
    found: dict[str, Variant] = {}
    paths = [(f"{folder}.{p.stem}", p) for folder in FOLDERS for p in sorted((ROOT / folder).glob("*.py"))
             if p.stem != "__init__"]
    for module, path, outside in [*((m, p, False) for m, p in paths), *((p.stem, p, True) for p in extra_paths())]:
        for name, fields in (declared_in(path) or {}).items():
            if name in found:
                raise DeclarationError(f"variant {name!r} is declared twice: {found[name].module} and {module}")
            found[name] = variant_of(name, fields, module, path if outside else None)
    return found


def add_command(command: str, setup: str | None = None, effects: str | None = None) -> str:
    """Declare a reader's own consumer, started as `sh -c COMMAND`, as a variant of this process
    (its workers are the command itself, so nothing needs to be inherited); returns its name,
    cmd-<the command's words>. `setup`: SQL run in each run's schema before it starts (--schema);
    `effects`: the query whose rows' first column is the event ID of each effect it applied
    (None: schema.sql's ledger, and the balances are checked too)."""
    # short and plain, it names the run's schema, topic, group and logs (Postgres cuts names at
    # 63 bytes): the command's last words, where commands differ most, and a hash of all of it
    words = re.findall(r"[a-z0-9]+", command.lower())
    last = next((i for i in range(len(words)) if len("-".join(words[i:])) <= 24), len(words) - 1)
    slug = f"{'-'.join(words[last:])[:24]}-{hashlib.sha1(command.encode()).hexdigest()[:4]}"
    COMMANDS[f"cmd-{slug}"] = Variant(name=f"cmd-{slug}", label=command, module="", setup=setup, command=command,
                                      effects=effects)
    return f"cmd-{slug}"


def get(name: str) -> Variant:
    if name in COMMANDS:
        return COMMANDS[name]
    try:
        return everything()[name]
    except KeyError:
        raise KeyError(f"no variant {name!r}; declared: {', '.join(everything())}") from None


def names(*, kind: str | tuple | None = None, group: str | None = None, reads: str | None = None) -> tuple[str, ...]:
    """The declared variants that fit, in declaration order."""
    kinds = (kind,) if isinstance(kind, str) else kind
    return tuple(v.name for v in everything().values() if (kinds is None or v.kind in kinds)
                 and (group is None or group in v.groups) and (reads is None or reads in v.reads))


def only_some_read(parser, args, variants, choices, **defaults) -> set[str]:
    """Flags that only some variants read (--batch, --lanes, --connections), added to `parser` with
    default None: one given when none of `variants` reads it is refused in one line, rather than
    silently doing nothing; unset ones get `defaults`. `choices`: the variants the command
    offers, for the line's hint. Returns the flags some of `variants` read, the ones a results
    file records."""
    for key, default in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, default)
        elif not any(get(v).takes(key) for v in variants):
            deaf = [("your command" if get(v).command else v) for v in variants]
            readers = [v for v in names(reads=key) if v in choices]
            hint = f"; {', '.join(readers)} {'does' if len(readers) == 1 else 'do'}" if readers else ""
            said = f"{deaf[0]} does not read it" if len(deaf) == 1 else f"none of {', '.join(deaf)} reads it"
            parser.error(f"--{key.replace('_', '-')}: {said}{hint}")
    return {key for key in defaults for v in variants if key in get(v).reads}


def labels() -> dict[str, str]:
    return {name: v.label for name, v in everything().items()}


def python_for(name: str) -> str:
    """The interpreter a variant's worker runs under."""
    venv = get(name).venv
    if venv is None:
        return sys.executable
    python = ROOT / venv / "bin" / "python"
    if not python.exists():
        raise RuntimeError(f"variant {name} runs in {venv}, which is not set up: run `make setup-frameworks`")
    return str(python)


def setup_sql(name: str) -> str | None:
    """The SQL a variant needs in its run's schema, if any: its declaration's setup, or the
    literal constant of its module that the setup names (read, not run: the worker that runs
    the variant loads the module, and records it)."""
    variant = get(name)
    if not (variant.setup and re.fullmatch(r"([\w.]+:)?[A-Za-z_]\w*", variant.setup)):
        return variant.setup  # SQL itself
    where, _, constant_name = variant.setup.rpartition(":")
    path = (ROOT / (where.replace(".", "/") + ".py") if where else Path(variant.path) if variant.path
            else ROOT / (variant.module.replace(".", "/") + ".py"))
    sql = constant(path, constant_name) if path.exists() else None
    if not isinstance(sql, str):
        raise DeclarationError(f"{variant.module}: variant {name!r}'s setup names {variant.setup}, which is not a "
                               f"string literal of {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return sql


def prepare(name: str, dsn: str) -> None:
    """Run the variant's setup SQL, if any, as the schema's owner, on the search path `dsn` names."""
    setup = setup_sql(name)
    if not setup:
        return
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from lab.settings import ADMIN_DSN
    options = conninfo_to_dict(dsn).get("options")  # the run's search_path
    with psycopg.connect(make_conninfo(ADMIN_DSN, **({"options": options} if options else {})),
                         autocommit=True) as conn:
        conn.execute(setup)


def runner(name: str):
    """The function a worker calls to run the variant: its module imported, here."""
    return getattr(module_of(name), get(name).run)


def module_of(name: str):
    variant = get(name)
    if variant.path is None:
        return importlib.import_module(variant.module)
    spec = importlib.util.spec_from_file_location(variant.module, variant.path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":  # python -m lab.registry: what is declared, where, as the files say today
    for variant in everything().values():
        where = variant.path or (ROOT / variant.module.replace(".", "/")).with_suffix(".py")
        print(f"{variant.name:16} {Path(where).relative_to(ROOT) if Path(where).is_relative_to(ROOT) else where}"
              f"  {variant.label}")
