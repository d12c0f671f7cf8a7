"""Benchmark scripts call rscale's public api the way its signatures allow.

The scripts under benchmarks/ are run by hand, rarely, and mostly not by the suite, so a change
to an api signature (keyword-only arguments past the second, tests/test_api_shape.py) can break
them silently: benchmarks/realset/build.py passed ``score()`` five positional arguments for months
after ``score`` became keyword-only. This binds every call of an ``rscale.api`` function found in
the scripts' source against the function's signature, without running the script."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import rscale.api as api

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _api_names(tree: ast.Module) -> tuple[dict[str, str], set[str]]:
    """Names bound to api functions (local name -> api attribute) and names bound to the api module."""
    funcs, modules = {}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rscale.api"):
            for alias in node.names:
                funcs[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module == "rscale":
            for alias in node.names:
                if alias.name == "api":
                    modules.add(alias.asname or "api")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "rscale.api" and alias.asname:
                    modules.add(alias.asname)
    return funcs, modules


def _calls(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    funcs, modules = _api_names(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = None
        if isinstance(f, ast.Name) and f.id in funcs:
            name = funcs[f.id]
        elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in modules:
            name = f.attr
        if name is None or not callable(getattr(api, name, None)) or inspect.isclass(getattr(api, name)):
            continue
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            continue        # *args / **kwargs: not checkable statically
        yield name, node


SCRIPTS = sorted(BENCHMARKS.rglob("*.py"))


@pytest.mark.parametrize("path", SCRIPTS, ids=[str(p.relative_to(BENCHMARKS)) for p in SCRIPTS])
def test_benchmark_calls_bind_to_the_api_signatures(path):
    bad = []
    for name, call in _calls(path):
        sig = inspect.signature(getattr(api, name))
        try:
            sig.bind(*[None] * len(call.args), **{k.arg: None for k in call.keywords})
        except TypeError as exc:
            bad.append(f"{path.name}:{call.lineno}: api.{name}: {exc}")
    assert not bad, "\n".join(bad)


def test_the_check_sees_api_calls():
    """The walk finds the calls it is meant to check (a guard against a check that checks nothing)."""
    found = {name for p in SCRIPTS for name, _ in _calls(p)}
    assert "score" in found
