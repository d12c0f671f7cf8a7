"""benchmarks/edge_placement.py: its rows rebuild the shipped point, and its bound is a bound."""

from __future__ import annotations

import numpy as np
import pytest

from benchmark_modules import load_benchmark


@pytest.fixture(scope="module")
def ep():
    return load_benchmark("edge_placement.py", "edge_placement")


@pytest.fixture(scope="module")
def rows(ep):
    return ep.load(ep.HERE / "edge_placement_rows")


def test_the_committed_rows_are_every_seen_cell_and_rebuild_the_shipped_point(ep, rows):
    """Every row's point is what rscale.core.prediction.edge_weight places between its two models
    (the rows were read through the shipped path): the analysis is of the point users get."""
    assert (sum(ep.group(r) == "sim" for r in rows), sum(ep.group(r) == "real" for r in rows)) == (196, 140)
    assert {r["set"] for r in rows if ep.group(r) == "real"} == {f"realset{i}" for i in ("", 2, 3, 4, 5, 6, 7)}
    assert max(abs(ep.shipped(r) - r["value"]) for r in rows) < 1e-12


def test_the_oracle_placement_is_no_worse_than_any_point_between_the_models(ep, rows):
    rng = np.random.default_rng(3)
    for r in rows:
        best = abs(ep.oracle(r) - r["truth"])
        for w in (0.0, 0.5, 1.0, ep.raw_weight(r) if 0 <= ep.raw_weight(r) <= 1 else 0.5, *rng.random(3)):
            assert best <= abs(ep.placed(r, w) - r["truth"]) + 1e-15


def test_the_rules_table_names_the_shipped_rule_twice_with_the_same_figures(ep, rows):
    """lam = 1 and the cap [0, 1] are the shipped rule; lam = 0 is the models' mean."""
    table = ep.mae_table(rows)
    assert table["shrink lam=1"] == pytest.approx(table["shipped"], abs=1e-15)
    assert table["w in [0, 1]"] == pytest.approx(table["shipped"], abs=1e-15)
    assert table["shrink lam=0"] == pytest.approx(table["mean of U and C"], abs=1e-15)
    assert all(table["oracle (bound)"][k] <= table["shipped"][k] for k in table["shipped"])
