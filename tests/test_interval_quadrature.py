"""benchmarks/interval_quadrature.py: its two joins of the reaches past model U, the shipped one
(`metric_intervals`) among them, and its held-out guard."""

from __future__ import annotations

import numpy as np
import pytest

from benchmark_modules import load_benchmark

iq = load_benchmark("interval_quadrature.py", "interval_quadrature")


@pytest.mark.parametrize("u, c, band", [(0.40, 0.37, (0.01, 0.03)), (0.40, 0.43, (0.01, 0.03)),
                                        (0.40, 0.43, (-0.03, -0.01)), (0.40, 0.37, (-0.02, 0.02)),
                                        (0.02, 0.01, (0.02, 0.05)), (0.40, 0.37, None), (0.98, 0.99, (-0.05, 0.0))])
def test_the_root_sum_square_join_is_what_metric_intervals_ships(u, c, band):
    from rscale.core.interval import _t_quantile, metric_intervals
    rng = np.random.default_rng(3)
    point = rng.uniform(0.2, 0.6, (1, 50))
    point += 0.3 * u + 0.7 * c - point.mean()                  # a point between the models, not their mean
    reps = point[:, None, :] + rng.normal(0, 0.01, (1, 16, 1))
    v, lo, hi = metric_intervals(point, reps, backtest=None if band is None else np.array([band]),
                                 models=np.array([[u, c]]))
    m = reps.mean(axis=2)[0].reshape(-1, 2)
    half = _t_quantile(0.95, 8) * np.sqrt(np.mean(((m[:, 0] - m[:, 1]) / 2) ** 2))
    assert iq.joined(u, c, float(v[0]), band, half, "rss") == pytest.approx((lo[0], hi[0]), abs=1e-12)


def test_the_root_sum_square_lies_between_the_maximum_and_the_sum_and_differs_only_where_both_reach():
    rng = np.random.default_rng(0)
    for _ in range(2000):
        u, c = rng.uniform(0.05, 0.95, 2)
        band = np.sort(rng.normal(0, 0.03, 2))
        h = rng.uniform(0, 0.02)
        v = u + rng.uniform(0, 1) * (c - u)
        lo_m, hi_m = iq.joined(u, c, v, band, h, "max")
        lo_r, hi_r = iq.joined(u, c, v, band, h, "rss")
        a_up, b_up, a_dn, b_dn = iq.reaches(u, c, band)
        assert lo_r <= lo_m + 1e-12 and hi_r >= hi_m - 1e-12
        assert hi_r <= min(1.0, u + a_up + b_up + h) + 1e-12 and lo_r >= max(0.0, u - a_dn - b_dn - h) - 1e-12
        if a_up == 0 or b_up == 0:
            assert hi_r == pytest.approx(hi_m, abs=1e-12)
        if a_dn == 0 or b_dn == 0:
            assert lo_r == pytest.approx(lo_m, abs=1e-12)


@pytest.mark.parametrize("which", ["cov7", "realset7"])
def test_the_rounds_held_out_sets_are_spent_and_drawn_as_seen_sets(which):
    iq.check_set(which, held_out=False)                        # measured once (2026-12-07), seen since
    with pytest.raises(SystemExit, match="measured once"):
        iq.check_set("cov1", held_out=True)                    # nothing is reserved now
    draws = iq.edge_average.draws_of(which, [0.05])
    assert len(draws) == (5 if which == "realset7" else 8) and {d.fraction for d in draws} == {0.05}
