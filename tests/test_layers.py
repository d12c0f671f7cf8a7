"""The layer map of docs/design.md, checked on the imports of every module (parsed, not run).

    cli -> api -> {distributed, producers, score, sim, query, store} -> core -> errors

Each package may import only packages of a lower rank; inside the middle tier only the edges
listed in MIDDLE_TIER. core imports nothing but core, errors, numpy, scipy and the standard
library; nothing outside cli imports cli; no cycle between packages; heavy dependencies are never
imported at module level (they are imported inside the functions that need them).
"""

import ast
import sys
from pathlib import Path

import pytest

import rscale

SRC = Path(rscale.__file__).resolve().parent
RANK = {"errors": 0, "__init__": 0, "core": 1,
        "store": 2, "query": 2, "sim": 2, "score": 2, "producers": 2,
        "distributed": 2, "api": 3, "cli": 4}
# imports allowed between packages of the middle tier (each a package -> what it may import)
MIDDLE_TIER = {"store": set(), "query": set(), "sim": set(), "score": {"store"},
               "producers": {"store", "score", "sim", "query"},
               "distributed": {"producers", "store", "score", "sim", "query"}}
CORE_MAY_IMPORT = {"numpy", "scipy"}
HEAVY = {"torch", "faiss", "mlflow", "transformers", "peft", "ray", "pybullet", "trimesh", "statsmodels",
         "matplotlib", "duckdb", "dvc", "PIL", "sklearn"}


def _modules(root=SRC):
    return sorted(p for p in root.rglob("*.py"))


def _package(path: Path, root=SRC) -> str:
    rel = path.relative_to(root).parts
    return rel[0].removesuffix(".py")


def _imports(path: Path, root=SRC):
    """(imported module name, line, at module level) for every import statement of a file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    rel = path.relative_to(root).with_suffix("").parts
    top = {id(n) for n in tree.body}
    top |= {id(n) for stmt in tree.body if isinstance(stmt, (ast.If, ast.Try)) for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, node.lineno, id(node) in top
        elif isinstance(node, ast.ImportFrom):
            if node.level:                                         # relative: resolve against the package
                here = list(rel[:-1])                              # the module's package
                base = ["rscale", *here[:len(here) - node.level + 1]]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod == "rscale":                                    # from rscale import api
                for a in node.names:
                    yield f"rscale.{a.name}", node.lineno, id(node) in top
            else:
                yield mod, node.lineno, id(node) in top


def _edges(root=SRC):
    """(from package, to package, file:line) for every import of one rscale package by another."""
    out = []
    for path in _modules(root):
        pkg = _package(path, root)
        for mod, line, _ in _imports(path, root):
            parts = mod.split(".")
            if parts[0] != "rscale" or len(parts) < 2:
                continue
            target = parts[1] if parts[1] in RANK else "__init__"
            if target != pkg:
                out.append((pkg, target, f"{path.relative_to(root)}:{line}"))
    return out


def test_every_package_has_a_rank():
    assert {_package(p) for p in _modules()} <= set(RANK)


def test_imports_flow_down_the_layers():
    bad = []
    for src, dst, where in _edges():
        if RANK[dst] < RANK[src]:
            continue
        if RANK[dst] == RANK[src] == 2 and dst in MIDDLE_TIER[src]:
            continue
        bad.append(f"{where}: {src} imports {dst}")
    assert not bad, "\n".join(bad)


def test_nothing_imports_cli():
    bad = [where for src, dst, where in _edges() if dst == "cli" and src != "cli"]
    assert not bad


def test_core_is_pure():
    stdlib = set(sys.stdlib_module_names)
    bad = []
    for path in _modules():
        if _package(path) != "core":
            continue
        for mod, line, _ in _imports(path):
            head = mod.split(".")[0]
            if head == "rscale":
                ok = mod.split(".")[1] in ("core", "errors")
            else:
                ok = head in stdlib or head in CORE_MAY_IMPORT or head == "__future__"
            if not ok:
                bad.append(f"{path.relative_to(SRC)}:{line}: {mod}")
    assert not bad, "\n".join(bad)


def test_no_cycles_between_packages():
    graph: dict = {}
    for src, dst, _ in _edges():
        graph.setdefault(src, set()).add(dst)
    state: dict = {}

    def visit(node, trail):
        if state.get(node) == "done":
            return
        if state.get(node) == "open":
            pytest.fail("import cycle: " + " -> ".join(trail[trail.index(node):] + [node]))
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            visit(nxt, trail + [node])
        state[node] = "done"

    for node in sorted(graph):
        visit(node, [])


def test_heavy_dependencies_are_imported_lazily():
    bad = []
    for path in _modules():
        for mod, line, at_top in _imports(path):
            if at_top and mod.split(".")[0] in HEAVY:
                bad.append(f"{path.relative_to(SRC)}:{line}: {mod}")
    assert not bad, "\n".join(bad)


def test_the_checker_sees_violations(tmp_path):
    # what the other tests rely on: a core module importing store (absolute), api (relative,
    # inside a function) and torch at module level must all be found
    probe = tmp_path / "rscale" / "core" / "estimators" / "probe.py"
    probe.parent.mkdir(parents=True)
    probe.write_text("import torch\nfrom rscale.store.registry import Registry\n\n\n"
                     "def f():\n    from ...api import query\n    from . import evt\n")
    root = tmp_path / "rscale"
    assert {(s, d) for s, d, _ in _edges(root)} == {("core", "store"), ("core", "api")}
    found = {(m, top) for m, _, top in _imports(probe, root)}
    assert found == {("torch", True), ("rscale.store.registry", True), ("rscale.api", False),
                     ("rscale.core.estimators", False)}
