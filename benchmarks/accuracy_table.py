"""The accuracy table of docs/benchmarks.md, regenerated through the shipped path (issue 14).

For each set (the simulator sets of benchmarks/accuracy.py ``SETS``, and the committed real-embedding
sets ``realset``, ``realset2`` and ``realset3``) x estimator x sample fraction x draw, one *cell*: the sample's
stats file goes through what a user runs, in process through :mod:`rscale.api`:

    api.estimate(sample, METHOD, out=H)            # rscale estimate (replicates and back-test stored)
    api.register(H, sample, registry=R, ...)       # rscale register
    api.query("mAP@1000 at N=... for b using METHOD", R, ci_kind=benchmark | population)

and the answer is compared with the exact truth (the simulator's realised mAP@1000 at N, or the
real set's full-pool mAP@1000 from its manifest). The curve baselines (naive, loguniform,
powerlaw) have no registry path (``rscale estimate`` refuses them): they are computed with
:func:`rscale.core.estimators.methods.estimate` as benchmarks/accuracy.py does, and have no
interval. One markdown table (per set, fraction and estimator: cells, MAE, mean signed error,
coverage and mean width of both intervals) is written between ``<!-- accuracy-table:begin -->``
and ``<!-- accuracy-table:end -->`` in docs/benchmarks.md with ``--write``, stamped with the code
commit and the command; a rerun replaces it.

Cache (under --cache, default ~/.cache/rscale/accuracy_table): a cell is three stages, each
cached on its own, so that an edit reruns only the stages that ran the edited code:

- sample (simulator sets): the generated sample-stats file and its truth, keyed by the draw's
  simulator parameters;
- fit: ``api.estimate``, keyed by the sample file's sha256 and the method; its output (hardness,
  tail and run-sidecar files) is kept content-addressed under hardness/<digest>/;
- answer: ``api.register`` + both ``api.query`` calls, keyed by the sample, the fit's output
  digest and the query. A refit that writes the same bytes (fits are deterministic) finds its
  answer cached; an edit to code only register/query ran reruns the answer, not the fit;
- curve (the curve baselines): one stage, keyed by the sample and the method.

Every key also holds CELL_VERSION and the numpy / scipy / pyarrow / Python versions. Each entry
holds the digests of the rscale source the stage depended on: each function that ran and the
module-level code of the files it used, as :func:`stage_deps` determines them from a trace of the
stage (what is and is not covered: its docstring); an entry whose digests all still hold is
reused, else the stage reruns and a new entry is written (older entries are never deleted; an
entry with whole-file digests, ``FILE`` rather than ``FILE::PART``, is checked the same way). Cells run in a pool of --workers spawned interpreters
reused across cells (single-threaded BLAS); each imports rscale and sets up MLflow's store once
(:func:`warm_up`), so a cell costs its fit and its register/query. Lineage stays on: each
estimate logs its MLflow run to <cache>/mlruns.db.

Run (the full table; ``--quick``: 5% only, draw 0, first two scenarios of each simulator set):

    PYTHONPATH=src .venv/bin/python benchmarks/accuracy_table.py --write
    PYTHONPATH=src .venv/bin/python benchmarks/accuracy_table.py --sets realset,design --estimators evt,evt-eb --write

``--budget-min M`` stops starting cells after M minutes (the table then lists the cells left out);
``--cached-only`` writes the table from the cache without computing anything.

Ledger (``--ledger``, default benchmarks/accuracy_table_cells.jsonl, committed): every cell's
result with the union of its stages' dependency digests. The cache is one machine's; the ledger
travels with the repository, so on a fresh clone a cell whose code (and numpy / scipy / pyarrow /
Python versions) is unchanged is taken from it without its files, and only changed or new cells
run: the table's compute accumulates across machines. Each run rewrites it (every 10 cells and at
the end) with the cells it computed or found cached; cells it did not plan are kept.
"""

from __future__ import annotations

import argparse
import fcntl
import functools
import importlib.util
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
import types
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
K_METRIC = 1000
CELL_VERSION = 2          # bump when what a cell computes changes outside src/rscale
REGISTRY_ESTIMATORS = ("evt", "evt-eb", "evt-paper", "count", "sdm")
CURVE_ESTIMATORS = ("naive", "loguniform", "powerlaw")
ESTIMATORS = REGISTRY_ESTIMATORS + CURVE_ESTIMATORS
REAL_SETS = ("realset", "realset2", "realset3", "realset4", "realset5", "realset6", "realset7")
SIM_FRACTIONS = (0.01, 0.02, 0.05, 0.10)
SIM_N = 1e8               # the web-scale pool of benchmarks/accuracy.py
SIM_DRAWS = 1
BEGIN, END = "<!-- accuracy-table:begin -->", "<!-- accuracy-table:end -->"
# The source files only one estimator runs (relative to src/rscale). Every estimator module is
# imported by rscale.core.estimators.methods, so imports alone do not tell them apart; a cell's
# digest leaves out the other estimators' own files (tests/test_accuracy_table.py checks that no
# shared module imports them).
OWN_FILES = {
    "evt": ("core/estimators/evt.py", "core/estimators/shape_pooling.py"),
    "evt-eb": ("core/estimators/evt_eb.py", "core/gpd_eb.py"),
    "count": ("core/estimators/count.py",),
    "sdm": ("core/estimators/sdm.py",),
    "curves": ("core/estimators/curves.py",),
}
OWN_GROUP = {"evt": "evt", "evt-paper": "evt", "evt-eb": "evt-eb", "count": "count", "sdm": "sdm",
             "naive": "curves", "loguniform": "curves", "powerlaw": "curves"}
ESTIMATOR_ORDER = ("evt-eb", "evt", "evt-paper", "count", "sdm", "naive", "loguniform", "powerlaw")
# The sets in the order their cells start: the real sets and the design set first.
SET_ORDER = ("realset", "realset2", "realset3", "realset4", "realset5", "realset6", "realset7", "design")
FRACTION_ORDER = {0.05: 0, 0.01: 1, 0.1: 2, 0.02: 3}


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def accuracy_module():
    return _load(HERE / "accuracy.py", "accuracy_benchmark")


@functools.lru_cache(maxsize=None)
def query_mode(method: str) -> str | None:
    """The prediction mode a query names for ``method``: as benchmarks/realset/check.py runs it."""
    return _load(HERE / "realset" / "check.py", "realset_check").MODE.get(method)


# ---------------------------------------------------------------- draws and cells

@dataclass(frozen=True)
class Draw:
    """One sample with its truth: a simulator scenario's draw, or a committed real-set draw."""
    set: str
    scenario: str
    fraction: float
    draw: int
    n: float                      # the gallery size predicted
    sim: dict | None = None       # simulator: {"spec": SimSpec repr fields, "s", "k", "seed"}
    sample: str | None = None     # real set: the committed sample-stats file
    truth: float | None = None    # real set: the manifest's truth
    identity: str = field(default="", compare=False)

    @property
    def label(self) -> str:
        return f"{self.set}/{self.scenario}/{self.fraction:.0%}/d{self.draw}"


def sim_draws(set_name: str, fractions, draws: int, scenarios_max: int | None = None) -> list[Draw]:
    acc = accuracy_module()
    scenarios, seed_offset = acc.SETS[set_name]
    out = []
    for name, family, hl, nq in scenarios[:scenarios_max]:
        spec = {"name": name, "family": family, "n_queries": nq, "hardness": dict(vars(hl))}
        for f in fractions:
            for d in range(draws):
                s = int(f * SIM_N)
                sim = {"spec": spec, "s": s, "k": min(4000, s), "seed": 1000 * d + 7 + seed_offset}
                out.append(Draw(set_name, name, f, d, SIM_N, sim=sim,
                                identity=json.dumps(sim, sort_keys=True, default=str)))
    return out


def real_draws(set_name: str, fractions, draws: int | None, data: Path | None = None) -> list[Draw]:
    from rscale.store.hashing import sha256_file
    data = data or HERE / set_name / "data"
    man = json.loads((data / "manifest.json").read_text())
    out = []
    for key in sorted(k for k in man["sizes"] if k.startswith("draw-")):
        _, pct, d = key.split("-")
        f = int(pct.removesuffix("pct")) / 100
        if (fractions is not None and not any(abs(f - g) < 1e-9 for g in fractions)) or \
                (draws is not None and int(d) >= draws):
            continue
        path = data / f"{key}.sample_stats.parquet"
        out.append(Draw(set_name, set_name, f, int(d), float(man["pool"]), sample=str(path),
                        truth=float(man["truth_map_at_1000"]), identity=sha256_file(path)))
    return out


def cell_key(draw: Draw, method: str) -> str:
    from rscale.store.hashing import canonical_digest
    return canonical_digest({"v": CELL_VERSION, "set": draw.set, "scenario": draw.scenario, "fraction": draw.fraction,
                             "draw": draw.draw, "n": draw.n, "sample": draw.identity, "method": method,
                             "mode": query_mode(method)}).split(":")[-1][:32]


# ---------------------------------------------------------------- what a stage ran

def _src_root() -> Path:
    import rscale
    return Path(rscale.__file__).resolve().parent


CO_OPTIMIZED = 0x1        # set on function code; unset on module and class bodies


class Trace:
    """What ran inside a :func:`traced` block: the code objects of the Python functions executed
    (a C-level profiler, :class:`cProfile.Profile` with builtins off: about 5% on an evt-eb fit)
    and the import statements executed (``builtins.__import__`` wrapped), as (module, names)."""

    def __init__(self):
        self.codes: set = set()
        self.imports: set = set()


@contextmanager
def traced(package: str = "rscale"):
    import builtins
    import cProfile
    import importlib.util
    trace = Trace()
    real_import = builtins.__import__

    def recording_import(name, globals=None, locals=None, fromlist=(), level=0):
        mod = real_import(name, globals, locals, fromlist, level)
        try:
            absolute = importlib.util.resolve_name("." * level + name, (globals or {}).get("__package__")) \
                if level else name
        except (ImportError, ValueError):
            absolute = name
        if absolute == package or absolute.startswith(package + "."):
            trace.imports.add((absolute, tuple(fromlist or ())))
        return mod

    prof = cProfile.Profile(builtins=False)
    builtins.__import__ = recording_import
    prof.enable()
    try:
        yield trace
    finally:
        prof.disable()
        builtins.__import__ = real_import
        trace.codes = {e.code for e in prof.getstats() if not isinstance(e.code, str)}


def _module_file(name: str, root: Path) -> str | None:
    mod = sys.modules.get(name)
    path = getattr(mod, "__file__", None)
    if not path:
        return None
    p = Path(path).resolve()
    return p.relative_to(root).as_posix() if root in p.parents and p.suffix == ".py" else None


def _module_name(rel: str, package: str) -> str:
    parts = [package, *rel.removesuffix(".py").split("/")]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level_imports(path: str, module: str, is_package: bool) -> tuple:
    st = Path(path).stat()
    return _top_level_imports_of(path, module, is_package, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=1024)
def _top_level_imports_of(path: str, module: str, is_package: bool, size: int, mtime_ns: int) -> tuple:
    """(module, names) of the import statements of a file outside its functions (module level,
    class bodies, ``if``/``try`` blocks), relative imports resolved."""
    import ast
    import importlib.util
    package = module if is_package else module.rpartition(".")[0]
    out = []

    def visit(nodes):
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(node, ast.Import):
                out.extend((a.name, ()) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                name = importlib.util.resolve_name("." * node.level + (node.module or ""), package) \
                    if node.level else node.module
                out.append((name, tuple(a.name for a in node.names)))
            else:
                visit(ast.iter_child_nodes(node))

    visit(ast.parse(Path(path).read_text()).body)
    return tuple(out)


def _imported_values(module: str, names: tuple, root: Path, package: str = "rscale") -> set[str]:
    """The files whose module-level values an import statement makes available: ``import X``
    -> X; ``from X import n`` -> n's file when n is a module, nothing when n is a plain function
    (its file counts when it runs), else X (a constant, a class, an instance, a wrapped function)."""
    if not (module == package or module.startswith(package + ".")):
        return set()
    if not names:
        f = _module_file(module, root)
        return {f} if f else set()
    out = set()
    mod = sys.modules.get(module)
    for n in names:
        obj = getattr(mod, n, None) if mod is not None else None
        if isinstance(obj, types.ModuleType):
            f = _module_file(obj.__name__, root)
        elif isinstance(obj, types.FunctionType):
            f = None
        else:
            f = _module_file(module, root)
        if f:
            out.add(f)
    return out


SKELETON = "<module>"      # a file's code outside its functions (see source_parts)


@functools.lru_cache(maxsize=1024)
def _source_parts(path: str, size: int, mtime_ns: int) -> dict:
    """The digests of a file's parts: each top-level function and each method (``Class.name``;
    a function nested in another is part of it) by its syntax tree (``ast.dump``: comments,
    layout and docstrings do not count; rscale reads no ``__doc__``), and ``<module>``, everything
    else: imports, constants, class bodies, the functions' signatures, defaults and decorators
    (their bodies replaced by ``...``), plus the body of every function of the file a
    module-level statement calls by name (a value computed at import)."""
    import ast
    import copy
    import hashlib

    def digest(text: str) -> str:
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()

    tree = ast.parse(Path(path).read_text())
    for node in ast.walk(tree):        # a docstring is the first statement, a str constant (ast.get_docstring)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
                and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
                and isinstance(node.body[0].value.value, str)):
            node.body = node.body[1:]
    dumps: dict[str, list[str]] = {}

    def collect(nodes, prefix):
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                dumps.setdefault(prefix + node.name, []).append(ast.dump(node))
            elif isinstance(node, ast.ClassDef):
                collect(node.body, prefix + node.name + ".")
            elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
                collect([n for f in ("body", "orelse", "finalbody") for n in getattr(node, f, [])]
                        + [n for h in getattr(node, "handlers", []) for n in h.body], prefix)

    collect(tree.body, "")
    skeleton = copy.deepcopy(tree)
    called = set()
    for node in ast.walk(skeleton):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.body = [ast.Expr(ast.Constant(...))]
    for node in ast.walk(skeleton):       # module-level calls (function bodies are gone)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in dumps:
            called.add(node.func.id)
    parts = {q: digest("\n".join(d)) for q, d in dumps.items()}
    parts[SKELETON] = digest(ast.dump(skeleton) + "".join(parts[q] for q in sorted(called)))
    return parts


def source_parts(path: Path) -> dict:
    st = path.stat()
    return _source_parts(str(path), st.st_size, st.st_mtime_ns)


def _part_of(code) -> str:
    """The part of its file a code object belongs to: the function or method it is (or is nested
    in), or the skeleton for module- and class-level lambdas and comprehensions."""
    outer = code.co_qualname.split(".<locals>", 1)[0]
    return SKELETON if "<" in outer else outer


def stage_deps(trace: Trace, group: str | None, *, package: str = "rscale") -> dict:
    """The digests of the rscale source a stage depended on (``group``: the cell's estimator
    group, None for a sample), as ``FILE::PART`` -> digest (:func:`source_parts`; a part a file
    no longer has, or a code object that is in no part, counts as the whole file, ``FILE``).
    Covered:

    1. every function (method, generator; with what is nested in it) that ran in the stage
       (:func:`traced`), and the skeleton of its file (its imports, constants, class bodies,
       signatures, defaults, decorators);
    2. the module-level values those functions could read: for each file of 1 (and, repeatedly,
       of 2), its import statements outside functions, and the import statements executed during
       the stage (lazy imports inside functions), by :func:`_imported_values`: a constant,
       class or instance imported from module X makes X's skeleton a dependency, and X's own
       module-level imports are followed the same way (a constant re-exported along a chain
       reaches the file that defines it); a module imported as a whole is one; an imported plain
       function is one only if it ran (1). A value computed at import by a function of the file
       is covered by the skeleton (:func:`source_parts` includes the body of a function that
       module-level code calls by name).

    So an edit to a function that did not run in a stage (api/estimation.py's ``predict`` for a
    fit) leaves the stage's entry valid; an edit to one that ran, or to any module-level code of
    a file the stage used, invalidates it. Other estimators' own files (``OWN_FILES``) are left
    out of 2, never out of 1: an estimator whose fit calls into another's file depends on it. Not
    covered: module-level code of a file none of whose functions ran and whose values are not
    imported as in 2 (e.g. one that registers itself into another module's table at import
    time), a value read through a chain of attribute lookups on a module that no covered file
    imports, a module-level value computed by calling a function of another file (its body is
    covered only if it runs during a stage), code run in other threads (the stages run none),
    non-Python files, and the installed libraries (numpy, scipy and pyarrow versions are part
    of each key instead)."""
    root = _src_root() if package == "rscale" else Path(sys.modules[package].__file__).resolve().parent
    others = {f for g, files in OWN_FILES.items() if g != group for f in files} if package == "rscale" else set()
    ran: dict[str, set] = {}
    for c in trace.codes:
        if not c.co_flags & CO_OPTIMIZED:
            continue
        p = Path(c.co_filename).resolve()
        if root in p.parents and p.suffix == ".py":
            ran.setdefault(p.relative_to(root).as_posix(), set()).add(_part_of(c))
    values = set()
    for module, names in trace.imports:
        values |= _imported_values(module, names, root, package)
    queue, seen = [*ran, *values], set()
    while queue:
        rel = queue.pop()
        if rel in seen:
            continue
        seen.add(rel)
        module = _module_name(rel, package)
        for imported, names in _top_level_imports(str(root / rel), module, rel.endswith("__init__.py")):
            for f in _imported_values(imported, names, root, package):
                if f not in others and f not in seen:
                    values.add(f)
                    queue.append(f)
    deps = {}
    for rel in sorted(set(ran) | {f for f in values if f not in others}):
        parts = source_parts(root / rel)
        wanted = {SKELETON} | ran.get(rel, set())
        if not wanted <= set(parts):
            from rscale.store.hashing import sha256_file
            deps[rel] = sha256_file(root / rel)
            continue
        deps.update({f"{rel}::{q}": parts[q] for q in sorted(wanted)})
    return deps


def dep_files(deps: dict) -> set[str]:
    """The files a stage's dependencies are in."""
    return {k.split("::")[0] for k in deps}


@functools.lru_cache(maxsize=None)
def warm_up() -> None:
    """Import, before any stage is traced, every module a stage could import lazily (so that no
    module body runs inside a stage, and a reused worker traces what a fresh one would), and set
    up MLflow's tracking store once per process (its import and SQLite store take 3-5 s)."""
    import importlib
    import pkgutil

    import rscale
    for pkg in ("rscale.core", "rscale.store", "rscale.query", "rscale.sim"):
        mod = importlib.import_module(pkg)
        for info in pkgutil.walk_packages(mod.__path__, pkg + "."):
            importlib.import_module(info.name)
    for name in ("rscale.api", "rscale.api.estimation", "rscale.api.registry", "rscale.api.querying",
                 "rscale.producers.lineage", "rscale.store.run_sidecar"):
        importlib.import_module(name)
    from rscale import api
    assert api.estimate and api.register and api.query       # rscale.api binds its names on first use
    from rscale.producers import lineage
    mlflow = lineage._mlflow()
    if mlflow is not None:          # the store's import and schema check, not a run
        # producer_run's own set-up (a file lock around a fresh SQLite store's first touch), so
        # that workers starting at once on a fresh cache do not race
        lineage.experiment_id(mlflow)
    assert rscale.__file__


def library_versions() -> dict:
    import numpy
    import pyarrow
    import scipy
    return {"numpy": numpy.__version__, "scipy": scipy.__version__, "pyarrow": pyarrow.__version__,
            "python": platform.python_version()}


# ---------------------------------------------------------------- the cache

def still_valid(deps: dict, root: Path | None = None, *, short: bool = False) -> bool:
    """Whether every dependency still has its digest: ``FILE::PART`` the part's
    (:func:`source_parts`), ``FILE`` the whole file's sha256 (``short``: the digests recorded as
    their first :data:`LEDGER_DIGEST` hex digits, as the ledger keeps them)."""
    from rscale.store.hashing import sha256_file
    root = root or _src_root()
    for key, digest in deps.items():
        rel, _, part = key.partition("::")
        path = root / rel
        if not path.is_file():
            return False
        try:
            got = source_parts(path).get(part) if part else sha256_file(path)
        except SyntaxError:
            return False
        if (_short(got) != digest) if short else (got != digest):
            return False
    return True


def _short(digest: str | None) -> str | None:
    return None if digest is None else digest.split(":")[-1][:LEDGER_DIGEST]


def stage_key(**fields) -> str:
    from rscale.store.hashing import canonical_digest
    return canonical_digest({"v": CELL_VERSION, **fields, "libraries": library_versions()}).split(":")[-1][:32]


def cache_lookup(cache: Path, kind: str, key: str):
    """The cached entry of ``key`` whose source files are unchanged, or None."""
    for path in sorted((cache / kind).glob(f"{key}-*.json")):
        try:
            entry = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if still_valid(entry["deps"]):
            return entry
    return None


def cache_store(cache: Path, kind: str, key: str, entry: dict) -> Path:
    from rscale.store.atomic import write_text_atomic
    from rscale.store.hashing import canonical_digest
    tag = canonical_digest(entry["deps"]).split(":")[-1][:16]
    path = cache / kind / f"{key}-{tag}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(entry, indent=1, sort_keys=True), durable=False)
    return path


# ---------------------------------------------------------------- the ledger (committed)
#
# The cache lives on one machine; the ledger travels with the repository. It keeps, per cell key,
# the cell's result and what the cell depended on (the union of its stages' digests, shortened),
# so a fresh clone takes every cell whose code is unchanged from the ledger instead of recomputing
# it: the table's compute accumulates across machines and sessions. One JSON record per line,
# the dependency sets first (shared by many cells, each stored once), then the cells, sorted.

LEDGER_DIGEST = 16          # hex digits kept of each dependency's sha256 (change detection, not trust)
LEDGER_VOLATILE = ("deps", "computed", "cached", "kept", "sample_secs")


def ledger_read(path: Path) -> dict[str, dict]:
    """cell key -> {"result", "deps" (part -> short digest), "libraries"}; {} if absent."""
    if not path.is_file():
        return {}
    sets, cells = {}, {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        try:
            rec = json.loads(line)
            if "deps_id" in rec:
                sets[rec["deps_id"]] = rec["deps"]
            else:
                cells[rec["cell"]] = rec
        except (ValueError, KeyError, TypeError):
            sys.exit(f"{path}:{n}: not a ledger record; restore it with `git checkout -- {path.name}` or delete it")
    for key, rec in cells.items():
        if rec.get("deps") not in sets:
            sys.exit(f"{path}: cell {key} names dependency set {rec.get('deps')!r}, which the file lacks; "
                     f"restore it with `git checkout -- {path.name}` or delete it")
        rec["deps"] = sets[rec["deps"]]
    return cells


def ledger_record(result: dict) -> dict:
    """A computed or cached cell's ledger record (its result without the run's own fields)."""
    return {"result": {k: v for k, v in result.items() if k not in LEDGER_VOLATILE},
            "deps": {k: _short(v) for k, v in result["deps"].items()}, "libraries": library_versions()}


def ledger_hit(rec: dict | None) -> dict | None:
    """The ledger's result of a cell if its code and libraries are unchanged, else None."""
    if rec is None or rec.get("libraries") != library_versions() or not still_valid(rec["deps"], short=True):
        return None
    return {**rec["result"], "sample_secs": 0.0, "computed": [], "cached": True}


def ledger_write(path: Path, cells: dict[str, dict]) -> None:
    from rscale.store.atomic import write_text_atomic
    from rscale.store.hashing import canonical_digest
    sets, lines = {}, []
    for key in sorted(cells):
        rec = cells[key]
        deps = dict(sorted(rec["deps"].items()))
        deps_id = canonical_digest(deps).split(":")[-1][:16]
        sets[deps_id] = deps
        lines.append(json.dumps({"cell": key, "deps": deps_id, "libraries": rec["libraries"],
                                 "result": rec["result"]}, sort_keys=True))
    head = [json.dumps({"deps_id": i, "deps": d}, sort_keys=True) for i, d in sorted(sets.items())]
    write_text_atomic(path, "\n".join(head + lines) + "\n", durable=False)


# ---------------------------------------------------------------- one cell (runs in a worker)

def _sample_key(draw: Draw) -> str:
    return stage_key(stage="sample", n=draw.n, **draw.sim)


def cached_sample(draw: Draw, cache: Path) -> tuple[Path, float] | None:
    """(sample-stats file, truth) of a draw if it is at hand: a real set's file, or a simulated
    draw's cached file whose simulator code is unchanged."""
    if draw.sample is not None:
        return Path(draw.sample), draw.truth
    entry = cache_lookup(cache, "samples", _sample_key(draw))
    if entry is not None and Path(entry["sample"]).is_file():
        return Path(entry["sample"]), entry["truth"]
    return None


def sample_deps(draw: Draw, cache: Path) -> dict:
    """What a draw's sample depended on: nothing for a real set's committed file (its digest is
    part of the cell key), the simulator code that generated it for a simulated draw."""
    if draw.sample is not None:
        return {}
    entry = cache_lookup(cache, "samples", _sample_key(draw))
    return {} if entry is None else entry["deps"]


def prepared_sample(draw: Draw, cache: Path) -> tuple[Path, float]:
    """(sample-stats file, truth) of a draw; a simulated one is generated once and cached."""
    got = cached_sample(draw, cache)
    if got is not None:
        return got
    (cache / "samples").mkdir(parents=True, exist_ok=True)
    with open(cache / "samples" / f"{_sample_key(draw)}.lock", "w") as lock:   # two workers on one draw make it once
        fcntl.flock(lock, fcntl.LOCK_EX)
        return cached_sample(draw, cache) or _simulated_sample(draw, cache, _sample_key(draw))


def _simulated_sample(draw: Draw, cache: Path, key: str) -> tuple[Path, float]:
    from rscale import sim
    from rscale.sim.benchmark import HardnessLaw, SimSpec
    from rscale.store.hashing import canonical_digest
    from rscale.store.sample_stats_file import write_sample_stats
    warm_up()
    spec = dict(draw.sim["spec"])
    seed = draw.sim["seed"]
    tmp = cache / "samples" / f"{key}.{os.getpid()}.tmp.parquet"
    with traced() as trace:
        spec = SimSpec(name=spec["name"], family=spec["family"], n_queries=spec["n_queries"],
                       hardness=HardnessLaw(**spec["hardness"]))
        bench = sim.simulate(spec, seed=seed)
        ss = sim.sample(bench, draw.sim["s"], k=draw.sim["k"], seed=seed)
        truth = float(sim.truth(bench, ss, draw.n, "AP", K_METRIC, seed=seed).mean())
        write_sample_stats(ss, tmp)
    deps = stage_deps(trace, None)
    tag = canonical_digest(deps).split(":")[-1][:16]
    path = cache / "samples" / f"{key}-{tag}.sample_stats.parquet"
    os.replace(tmp, path)
    cache_store(cache, "samples", key, {"deps": deps, "sample": str(path), "truth": truth, "draw": draw.label})
    return path, truth


@functools.lru_cache(maxsize=4096)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    from rscale.store.hashing import sha256_file
    return sha256_file(path)


def file_digest(path: Path) -> str:
    st = Path(path).stat()
    return _file_digest(str(path), st.st_size, st.st_mtime_ns)


def fit_key(sample: Path, method: str) -> str:
    """The fit stage's key: what ``api.estimate`` reads (the sample's bytes, the method)."""
    return stage_key(stage="fit", method=method, sample=file_digest(sample))


def answer_key(sample: Path, method: str, n: float, hardness: str) -> str:
    """The register+query stage's key: the fit's output (``hardness``, the digest of the files
    api.estimate wrote), the sample register checks it against, and the query."""
    return stage_key(stage="answer", method=method, sample=file_digest(sample), hardness=hardness, n=n,
                     query=query_text(method, n))


def curve_key(sample: Path, method: str, n: float) -> str:
    return stage_key(stage="curve", method=method, sample=file_digest(sample), n=n)


def query_text(method: str, n: float) -> str:
    from rscale.query.grammar import format_size
    mode = query_mode(method)
    return f"mAP@{K_METRIC} at N={format_size(int(n))} for b using {method}" + (f" {mode}" if mode else "")


def _failure(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"


def _stage(cache: Path, kind: str, key: str, method: str, body) -> dict:
    """Run ``body`` (returning the entry's fields) traced; cache the entry under the files it
    depended on. A failure is an entry too (``failed``: the message), cached like an answer: the
    same code on the same input fails the same way."""
    warm_up()
    t = time.perf_counter()
    with traced() as trace:
        try:
            fields = body()
        except Exception as exc:
            fields = {"failed": _failure(exc)}
    entry = {"deps": stage_deps(trace, OWN_GROUP[method]), **fields, "secs": time.perf_counter() - t}
    cache_store(cache, kind, key, entry)
    return entry


def fit_stage(sample: Path, method: str, cache: Path) -> dict:
    """rscale estimate, in process: the files it writes (hardness, tail, run sidecar) are kept
    under cache/hardness/<digest>/, content-addressed; returns the fit's cache entry."""
    from rscale import api
    from rscale.store.hashing import canonical_digest
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="accuracy-table-fit-", dir=cache) as tmp:
        def body():
            summary = api.estimate(sample, method, out=Path(tmp) / "h.parquet")
            digest = canonical_digest({Path(p).name: file_digest(Path(p)) for p in summary["written"]}).split(":")[-1]
            home = cache / "hardness" / digest[:32]
            if not home.is_dir():
                staging = Path(tmp) / "kept"
                staging.mkdir()
                for p in list(Path(tmp).iterdir()):
                    if p.is_file():
                        os.replace(p, staging / p.name)
                home.parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.replace(staging, home)
                except OSError:                         # another worker kept the same bytes first
                    pass
            return {"hardness": digest, "dir": str(home), "file": "h.parquet", "fits": summary.get("fits"),
                    "fit_seconds": summary.get("seconds")}
        return _stage(cache, "fits", fit_key(sample, method), method, body)


def answer_stage(sample: Path, method: str, n: float, fit: dict, cache: Path, workdir: Path) -> dict:
    """rscale register, then rscale query with both interval kinds, in process, on a copy of the
    fit's files; returns the answer's cache entry."""
    import shutil

    from rscale import api
    for p in Path(fit["dir"]).iterdir():
        shutil.copy2(p, workdir / p.name)
    text = query_text(method, n)

    def body():
        api.register(workdir / fit["file"], sample, registry=workdir / "reg", backbone="b", benchmark="accuracy")
        out = {"query": text}
        for kind, pre in (("benchmark", ""), ("population", "pop_")):
            row = api.query(text, workdir / "reg", ci_kind=kind)["rows"][0]
            out.update({"value": row["value"], pre + "lo": row["ci_low"], pre + "hi": row["ci_high"],
                        pre + "ci_kind": row.get("ci_kind")})
        return {"answer": out}
    return _stage(cache, "answers", answer_key(sample, method, n, fit["hardness"]), method, body)


def curve_stage(sample: Path, method: str, n: float, cache: Path) -> dict:
    """A curve baseline (no registry path): its extrapolated value at n, no interval."""
    from rscale.core.estimators.methods import estimate
    from rscale.store.sample_stats_file import read_sample_stats

    def body():
        return {"answer": {"value": float(estimate(read_sample_stats(sample), method, metric="AP",
                                                   k=K_METRIC).value(n))}}
    return _stage(cache, "curves", curve_key(sample, method, n), method, body)


def _result(draw: Draw, method: str, truth: float, *entries, **secs) -> dict:
    """A cell's row from its stages' entries (the last one's answer, or the first failure)."""
    failed = next((e["failed"] for e in entries if "failed" in e), None)
    answer = {"value": None, "failed": failed} if failed else entries[-1]["answer"]
    return {"set": draw.set, "scenario": draw.scenario, "fraction": draw.fraction, "draw": draw.draw,
            "method": method, "n": draw.n, "truth": truth, **secs, "secs": sum(secs.values()), **answer}


def merged_deps(sample: dict, *entries) -> dict:
    """The union of a cell's dependencies: its sample's and its stages' entries'. All were valid
    against the same source when merged, so a part recorded twice has one digest."""
    out = dict(sample)
    for e in entries:
        out.update(e["deps"])
    return out


def _valid_fit(cache: Path, sample: Path, method: str):
    fit = cache_lookup(cache, "fits", fit_key(sample, method))
    return fit if fit is not None and ("failed" in fit or Path(fit["dir"]).is_dir()) else None


def _answer_lookup(cache: Path, sample: Path, method: str, n: float, fit: dict):
    return fit if "failed" in fit else cache_lookup(cache, "answers", answer_key(sample, method, n, fit["hardness"]))


def cached_cell(draw: Draw, method: str, cache: Path) -> dict | None:
    """A cell's result from the cache alone (sample, fit and answer all valid), or None."""
    got = cached_sample(draw, cache)
    if got is None:
        return None
    sample, truth = got
    if method not in REGISTRY_ESTIMATORS:
        hit = cache_lookup(cache, "curves", curve_key(sample, method, draw.n))
        return None if hit is None else {**_result(draw, method, truth, hit, fit_secs=hit["secs"]),
                                         "deps": merged_deps(sample_deps(draw, cache), hit)}
    fit = _valid_fit(cache, sample, method)
    ans = None if fit is None else _answer_lookup(cache, sample, method, draw.n, fit)
    if ans is None:
        return None
    return {**_result(draw, method, truth, fit, ans, fit_secs=fit["secs"], answer_secs=0.0 if ans is fit else ans["secs"]),
            "deps": merged_deps(sample_deps(draw, cache), fit, ans)}


def fitted_here(draw: Draw, method: str, cache: Path) -> bool:
    """Whether the cache holds the cell's sample and a valid fit (or, for a curve baseline, its
    sample): what ``--answers-only`` runs."""
    got = cached_sample(draw, cache)
    return got is not None and (method not in REGISTRY_ESTIMATORS or _valid_fit(cache, got[0], method) is not None)


def run_cell(draw: Draw, method: str, cache: str, keep: str | None = None) -> dict:
    """One cell: its answer against the truth, each stage taken from the cache when what it
    depends on is unchanged (``keep``: a folder to keep each registry cell's files in, under its
    cell key). ``computed`` lists the stages that ran."""
    cache = Path(cache)
    computed = []
    t = time.perf_counter()
    got = cached_sample(draw, cache)
    if got is None:
        computed.append("sample")
        got = prepared_sample(draw, cache)
    sample, truth = got
    sample_secs = time.perf_counter() - t if computed else 0.0
    if method in REGISTRY_ESTIMATORS:
        fit = _valid_fit(cache, sample, method)
        if fit is None:
            computed.append("fit")
            fit = fit_stage(sample, method, cache)
        ans = _answer_lookup(cache, sample, method, draw.n, fit)
        if ans is None:
            computed.append("answer")
            if keep is not None:
                work = Path(keep) / cell_key(draw, method)
                work.mkdir(parents=True, exist_ok=True)
                ans = answer_stage(sample, method, draw.n, fit, cache, work)
            else:
                with tempfile.TemporaryDirectory(prefix="accuracy-table-") as tmp:
                    ans = answer_stage(sample, method, draw.n, fit, cache, Path(tmp))
        result = _result(draw, method, truth, fit, ans, fit_secs=fit["secs"],
                         answer_secs=0.0 if ans is fit else ans["secs"])
        result["deps"] = merged_deps(sample_deps(draw, cache), fit, ans)
        if keep is not None:
            result["kept"] = str(Path(keep) / cell_key(draw, method))
    else:
        hit = cache_lookup(cache, "curves", curve_key(sample, method, draw.n))
        if hit is None:
            computed.append("curve")
            hit = curve_stage(sample, method, draw.n, cache)
        result = {**_result(draw, method, truth, hit, fit_secs=hit["secs"]),
                  "deps": merged_deps(sample_deps(draw, cache), hit)}
    return {**result, "sample_secs": sample_secs, "computed": computed, "cached": not computed}


# ---------------------------------------------------------------- the table

def _fmt_cov(rows, lo, hi):
    rs = [r for r in rows if r.get(lo) is not None]
    if not rs:
        return "n/a", "n/a"
    cov = sum(r[lo] <= r["truth"] <= r[hi] for r in rs)
    width = sum(r[hi] - r[lo] for r in rs) / len(rs)
    return f"{cov}/{len(rs)} ({cov / len(rs):.0%})", f"{width:.4f}"


def table(results: list[dict], *, sets, estimators, missing: list, seconds: dict, stamp: str) -> str:
    import numpy as np
    lines = [stamp, "",
             "| set | fraction | estimator | cells | MAE | mean signed error | benchmark interval: covered | width "
             "| population interval: covered | width |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    failed = {}          # (set, fraction, estimator, message) -> the draws that failed with it
    for s in sets:
        for f in sorted({r["fraction"] for r in results if r["set"] == s}):
            for m in estimators:
                rows = [r for r in results if r["set"] == s and r["fraction"] == f and r["method"] == m]
                if not rows:
                    continue
                ok = [r for r in rows if r.get("value") is not None]
                for r in rows:
                    if r.get("value") is None:
                        failed.setdefault((s, f"{f:.0%}", m, r["failed"]), []).append(f"{r['scenario']}/d{r['draw']}")
                err = np.array([r["value"] - r["truth"] for r in ok])
                label = m if m in REGISTRY_ESTIMATORS else f"{m} (curve, no registry path)"
                if query_mode(m):
                    label += f" ({query_mode(m)})"
                b_cov, b_w = _fmt_cov(ok, "lo", "hi")
                p_cov, p_w = _fmt_cov(ok, "pop_lo", "pop_hi")
                mae = f"{np.abs(err).mean():.4f}" if err.size else "-"
                mse = f"{err.mean():+.4f}" if err.size else "-"
                n_text = f"{len(ok)}" + (f" ({len(rows) - len(ok)} failed)" if len(ok) < len(rows) else "")
                lines.append(f"| {s} | {f:.0%} | {label} | {n_text} | {mae} | {mse} | {b_cov} | {b_w} | {p_cov} | {p_w} |")
    lines += ["", "Compute per set (sum of the cells' own seconds, sample generation included; a cached "
              "cell counts the seconds it took when it ran): " +
              "; ".join(f"{s} {seconds.get(s, 0.0) / 60:.1f} min" for s in sets) + "."]
    if failed:
        lines += ["", "Failed cells: " + "; ".join(f"{s} {f} {m}, {len(ds)} cells ({', '.join(ds)}): {msg}"
                                            for (s, f, m, msg), ds in failed.items()) + "."]
    lines += ["", "Cells not run: " + (missing_text(missing) if missing else "none") + "."]
    return "\n".join(lines)


def missing_text(missing: list[tuple[Draw, str, str]]) -> str:
    """Cells not run, counted per set, estimator and reason (fractions named)."""
    per_method = {}
    for d, m, why in missing:
        per_method.setdefault((d.set, m, why), []).append(d.fraction)
    groups = {}          # estimators missing the same cells of a set, named together
    for (s, m, why), fs in per_method.items():
        groups.setdefault((s, why, len(fs), tuple(sorted(set(fs)))), []).append(m)
    return "; ".join(f"{s}: {n} cells each of {', '.join(ms)} ({', '.join(f'{f:.0%}' for f in fs)}; {why})"
                     for (s, why, n, fs), ms in sorted(groups.items(), key=lambda g: g[0][0]))


def write_block(path: Path, block: str) -> None:
    """Replace the text between the markers (append a section with them if absent)."""
    text = path.read_text()
    body = f"{BEGIN}\n{block}\n{END}"
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + body + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n## Accuracy table, generated (`benchmarks/accuracy_table.py`)\n\n" + body + "\n"
    path.write_text(text)


def code_commit() -> str:
    """The checkout's commit and the last commit that changed src/ (the code the cells ran), with
    ``+dirty`` for uncommitted changes under src/."""
    def git(*a):
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = "+dirty" if git("status", "--porcelain", "--", "src") else ""
    return f"{git('rev-parse', '--short', 'HEAD') or 'unknown'} (src/ last changed in {git('log', '-1', '--format=%h', '--', 'src') or 'unknown'}{dirty})"


# ---------------------------------------------------------------- main

def plan(args) -> tuple[list[Draw], list[str]]:
    acc_sets = list(accuracy_module().SETS)
    folders = {name: HERE / name / "data" for name in REAL_SETS}
    for item in args.data:
        name, sep, folder = item.partition("=")
        if not sep or not (Path(folder) / "manifest.json").is_file():
            sys.exit(f"--data {item}: expected NAME=FOLDER, a folder with manifest.json like benchmarks/realset/data")
        folders[name] = Path(folder)
    sets = args.sets.split(",") if args.sets else [*SET_ORDER, *[s for s in acc_sets if s not in SET_ORDER],
                                                   *[s for s in folders if s not in SET_ORDER]]
    unknown = [s for s in sets if s not in acc_sets and s not in folders]
    if unknown:
        sys.exit(f"unknown set {', '.join(unknown)} (known: {', '.join([*folders, *acc_sets])})")
    fractions = [float(f) for f in args.fractions.split(",")] if args.fractions else None
    if args.quick:
        fractions = [0.05]
    draws = []
    for s in sets:
        if s in folders:
            draws += real_draws(s, fractions, 1 if args.quick else args.draws, folders[s])
        else:
            draws += sim_draws(s, fractions or SIM_FRACTIONS, 1 if args.quick else (args.draws or SIM_DRAWS),
                               2 if args.quick else None)
    return draws, sets


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", default=None, help="comma-separated sets (default: realset, realset2, realset3 and every "
                    "simulator set of benchmarks/accuracy.py)")
    ap.add_argument("--estimators", default=",".join(ESTIMATORS), help="comma-separated (default: all)")
    ap.add_argument("--fractions", default=None, help="comma-separated sample fractions (default 0.01,0.02,0.05,0.1)")
    ap.add_argument("--draws", type=int, default=None, help="draws per cell (default: simulator 1, real sets all 5)")
    ap.add_argument("--quick", action="store_true", help="5%% only, draw 0, two scenarios per simulator set")
    ap.add_argument("--data", action="append", default=[], metavar="NAME=FOLDER",
                    help="one more real set: a folder of the layout of benchmarks/realset/data")
    ap.add_argument("--workers", type=int, default=2, help="worker processes (0: in this process)")
    ap.add_argument("--cache", default=os.path.expanduser("~/.cache/rscale/accuracy_table"))
    ap.add_argument("--ledger", default=str(HERE / "accuracy_table_cells.jsonl"),
                    help="the committed record of computed cells, read and updated (default: %(default)s)")
    ap.add_argument("--keep-registries", default=None, metavar="DIR",
                    help="keep each registry cell's hardness file and registry under DIR/<cell key>")
    ap.add_argument("--budget-min", type=float, default=None, help="start no cell after this many minutes")
    ap.add_argument("--cached-only", action="store_true", help="compute nothing: the table from the cache")
    ap.add_argument("--answers-only", action="store_true",
                    help="run only the cells whose sample and fit this machine's cache holds (after an edit to "
                         "the query path: re-answer what was fitted here, no new fits)")
    ap.add_argument("--write", action="store_true", help="write the table into --doc")
    ap.add_argument("--doc", default=str(ROOT / "docs" / "benchmarks.md"))
    args = ap.parse_args(argv)
    estimators = args.estimators.split(",")
    bad = [m for m in estimators if m not in ESTIMATORS]
    if bad:
        sys.exit(f"unknown estimator {', '.join(bad)} (known: {', '.join(ESTIMATORS)})")
    cache = Path(args.cache)
    os.environ.setdefault("MLFLOW_TRACKING_URI", "sqlite:///" + str(cache / "mlruns.db"))
    cache.mkdir(parents=True, exist_ok=True)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    draws, sets = plan(args)
    # the real sets first (every estimator and fraction: their cells are the cheap ones), then the
    # simulator sets one fraction at a time (5%, then 1%, 10%, 2%), every estimator on a draw
    # before the next draw (evt-eb first): a run cut short leaves whole comparisons on the same
    # draws (the "beat the baselines on the same draws"), not the default alone everywhere
    cells = [(d, m) for d in draws for m in estimators]
    cells.sort(key=lambda c: (c[0].sim is not None, FRACTION_ORDER.get(round(c[0].fraction, 4), 9),
                              sets.index(c[0].set), c[0].scenario, c[0].draw, ESTIMATOR_ORDER.index(c[1])))
    t0 = time.time()
    ledger_path = Path(args.ledger)
    ledger = ledger_read(ledger_path)
    keys = {(d.label, m): cell_key(d, m) for d, m in cells}      # a Draw holds dicts: not hashable
    results, missing = [], []
    todo = []

    def record(d, m, r):
        if "deps" in r:
            ledger[keys[(d.label, m)]] = ledger_record(r)

    for d, m in cells:
        hit = cached_cell(d, m, cache)
        if hit is not None:
            results.append({**hit, "sample_secs": 0.0, "computed": [], "cached": True})
            record(d, m, hit)
        elif (hit := ledger_hit(ledger.get(keys[(d.label, m)]))) is not None:
            results.append(hit)
        elif args.cached_only or (args.answers_only and not fitted_here(d, m, cache)):
            missing.append((d, m, "not computed yet"))
        else:
            todo.append((d, m))
    print(f"{len(cells)} cells: {len(results)} cached, {len(todo)} to run", file=sys.stderr, flush=True)
    if todo and args.workers == 0:
        for d, m in todo:
            if args.budget_min is not None and time.time() - t0 > 60 * args.budget_min:
                missing.append((d, m, "time budget"))
                continue
            results.append(run_cell(d, m, str(cache), args.keep_registries))
            r = results[-1]
            record(d, m, r)
            print(f"[{time.time() - t0:6.0f}s] {d.label} {m}: ran {'+'.join(r['computed']) or 'nothing'}", file=sys.stderr,
                  flush=True)
    elif todo:
        import multiprocessing
        # workers are reused across cells: imports and MLflow's store set-up happen once per worker
        # (warm_up), and each stage's dependencies are traced, so a reused worker caches as a fresh one
        with ProcessPoolExecutor(args.workers, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=warm_up) as pool:
            pending, queue = {}, list(todo)
            while queue or pending:
                while queue and len(pending) < args.workers:
                    d, m = queue.pop(0)
                    if args.budget_min is not None and time.time() - t0 > 60 * args.budget_min:
                        missing.append((d, m, "time budget"))
                        continue
                    pending[pool.submit(run_cell, d, m, str(cache), args.keep_registries)] = (d, m)
                if not pending:
                    break
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    d, m = pending.pop(fut)
                    r = fut.result()
                    results.append(r)
                    record(d, m, r)
                    if len(results) % 10 == 0:           # a run cut short keeps what it computed
                        ledger_write(ledger_path, ledger)
                    err = "failed" if r.get("value") is None else f"{r['value'] - r['truth']:+.4f}"
                    print(f"[{time.time() - t0:6.0f}s] {d.label} {m}: {err} (ran {'+'.join(r['computed']) or 'nothing'}: "
                          f"{r['secs']:.1f}s)", file=sys.stderr, flush=True)
    ledger_write(ledger_path, ledger)
    n_computed = sum(bool(r.get("computed")) for r in results)
    seconds = {}
    for r in results:
        seconds[r["set"]] = seconds.get(r["set"], 0.0) + r["secs"] + r.get("sample_secs", 0.0)
    cmd = "PYTHONPATH=src .venv/bin/python benchmarks/accuracy_table.py " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    stamp = (f"Generated by `{cmd.strip()}` at code commit {code_commit()} ({time.strftime('%Y-%m-%d')}, "
             f"{platform.machine()}, Python {platform.python_version()}; {n_computed} cells computed by this "
             f"invocation with {args.workers} workers in {(time.time() - t0) / 60:.1f} min wall, "
             f"{len(results) - n_computed} from the cache or the committed ledger; lineage on: each estimate logged its "
             f"MLflow run to the cache's mlruns.db). mAP@{K_METRIC}; simulator sets at N = 1e8 "
             f"({SIM_DRAWS if args.draws is None else args.draws} draw(s) per scenario and fraction), real sets at "
             "their full pool (5 disjoint draws per fraction); error = prediction - exact truth. Intervals: "
             "what `rscale query --ci benchmark|population` reports after `rscale estimate` and `rscale "
             "register`; both are scored against the same truth (the realised value on these queries). Cells "
             f"present: {len(results)} of {len(cells)} (" + ", ".join(
                 f"{m} {sum(r['method'] == m for r in results)}/{sum(c[1] == m for c in cells)}" for m in estimators)
             + "); the ones missing are named under the table.")
    out = table(results, sets=[s for s in sets if any(r["set"] == s for r in results)] or sets,
                estimators=estimators, missing=missing, seconds=seconds, stamp=stamp)
    print(out)
    if args.write:
        write_block(Path(args.doc), out)
    return results


if __name__ == "__main__":
    main()
