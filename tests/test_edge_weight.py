"""benchmarks/edge_weight.py (docs/benchmarks.md, "The back-test places the point between the edge
models"): its candidate is the rule rscale.core.prediction ships since the held-out measurement,
the point always lies between the two models, and its held-out sets are spent."""

from __future__ import annotations

import numpy as np
import pytest

from benchmark_modules import load_benchmark

ew = load_benchmark("edge_weight.py", "edge_weight")


def test_the_candidate_is_the_shipped_rule_and_stays_between_the_models():
    from rscale.core.prediction import edge_weight
    rng = np.random.default_rng(1)
    for _ in range(2000):
        u, c = rng.uniform(0.05, 0.95, 2)
        band = np.sort(rng.normal(0, 0.05, 2))
        v, w = ew.weighted(u, c, band)
        assert min(u, c) - 1e-15 <= v <= max(u, c) + 1e-15 and 0.0 <= w <= 1.0
        assert w == pytest.approx(edge_weight(u, c, band), abs=1e-9)
        assert v == pytest.approx((1 - w) * u + w * c, abs=1e-12)
    assert ew.weighted(0.4, 0.3, np.array([np.nan, np.nan])) == (pytest.approx(0.35), 0.5)
    assert ew.weighted(0.4, 0.3, None) == (pytest.approx(0.35), 0.5)


def test_the_held_out_sets_are_spent_and_only_seen_sets_run():
    assert ew.HELD_OUT_SETS == ()
    for name in ("cov6", "realset6", "design", "realset"):
        ew.check_set(name, held_out=False)
    for unmeasured in ("cov8", "realset8"):          # held out for the next round: refused until it reserves them
        with pytest.raises(SystemExit, match=f"--set {unmeasured}: .*none is reserved"):
            ew.check_set(unmeasured, held_out=True)
