"""benchmarks/accuracy_table.py (the generated accuracy table) and benchmarks/accuracy.py's row
selection: the table's cells run the shipped path (estimate -> register -> query) and agree with
a direct computation from the registry; the markers are replaced idempotently; the cache skips
unchanged cells and recomputes changed ones."""

from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def accuracy():
    return _load("accuracy")


@pytest.mark.parametrize("which", ["holdout", "fresh4", "fresh5"])
def test_core_on_a_non_design_set_runs_count_and_sdm(accuracy, which):
    """Regression: --core on a non-design set silently dropped count and sdm (the set filter ran
    first and kept only the evt variants)."""
    rows, _ = accuracy.selected_estimators(which, core=True)
    labels = [r[0] for r in rows]
    for label in accuracy.CORE_ROWS:
        assert label in labels


def test_every_row_a_run_leaves_out_is_named(accuracy):
    """No estimator row is dropped silently: whatever a selection leaves out, its note names."""
    for which in accuracy.SETS:
        for core in (False, True):
            for shipped in (False, True):
                rows, note = accuracy.selected_estimators(which, core=core, shipped_only=shipped)
                left = [e[0] for e in accuracy.ESTIMATORS if e not in rows]
                if left:
                    assert note is not None and all(label in note for label in left), (which, core, shipped)
                    assert "\n" not in note
                else:
                    assert note is None
