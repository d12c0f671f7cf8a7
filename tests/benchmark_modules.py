"""A benchmark script as a module, for the tests: ``benchmarks/`` is not a package, so its scripts
are loaded by file (they import their siblings by name, e.g. ``accuracy_table``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"


def load_benchmark(rel: str, name: str | None = None):
    """``benchmarks/REL`` (``"edge_transfer.py"``, ``"realset3/build.py"``) as a module named
    ``name`` (default: its path with ``/`` and ``.py`` turned into ``_``), registered in
    ``sys.modules`` (a dataclass needs its module there), with ``benchmarks/`` on ``sys.path``
    for the scripts' own imports of their siblings."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    name = name or "bench_" + rel.removesuffix(".py").replace("/", "_")
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / rel)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
