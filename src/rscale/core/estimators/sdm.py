"""The score-distribution-modelling (SDM) baseline: a skew-normal law per query.

The SDM approach models each query's distractor scores with a parametric law (a skew-normal)
and reads a positive's hardness off its survival function. Reimplemented from that description
with what sample stats hold: only the top-K of the S sampled scores are stored, so the law is fitted
to those order statistics, whose survival levels are known (the i-th largest of S sits at
p_i = (i - 1/2) / S). For each shape alpha on a grid, location and scale follow in closed form by
least squares of s_i on the standard skew-normal quantile z_alpha(p_i); the alpha with the smallest
residual wins (vectorised over queries: one regression per grid point). The quantiles depend on
a query only through its S; queries with many different S (the half-samples of the replicates
and back-test, a real set's ragged S) read them off a cubic spline in logit(p) through exact
quantiles spaced 0.02 apart (absolute error below 1e-10; tests/test_estimators.py compares
it with the exact quantiles), since scipy's skew-normal quantile is a root search of several
microseconds a value and a replicate would need one per query, level and shape. Then

    x = P(D >= s) = skewnorm.sf((s - loc) / scale, alpha).

A light parametric tail: it cannot bend to a bounded endpoint or a near-duplicate cluster, which is
what the comparison in benchmarks/accuracy.py shows.
"""

from __future__ import annotations

import numpy as np

from rscale.core.estimators.base import HardnessEstimate
from rscale.core.sample_stats import SampleStats

ALPHAS = np.concatenate([[0.0], np.geomspace(0.25, 20.0, 23)])


def _fit_levels(k: int, points: int = 64) -> np.ndarray:
    """Indices (0-based) of the top scores used for the fit: log-spaced over 1..K."""
    return np.unique(np.round(np.geomspace(1, k, points)).astype(np.int64)) - 1


SPLINE_STEP = 0.02        # node spacing in logit(p) of the quantile spline


def skewnorm_quantiles(p: np.ndarray, alphas=ALPHAS):
    """``skewnorm.isf(p, a)`` for each a in ``alphas``, one ``p.shape`` array at a time (a generator:
    the caller's loop over shapes holds one of them, not all).

    Exact where there are fewer distinct p than spline nodes; otherwise a cubic spline in
    logit(p) through exact values ``SPLINE_STEP`` apart over the range of p."""
    from scipy import stats
    from scipy.interpolate import CubicSpline

    p = np.asarray(p, dtype=np.float64)
    t = np.log(p) - np.log1p(-p)
    lo, hi = float(t.min()), float(t.max())
    nodes = np.linspace(lo, hi, max(int(np.ceil((hi - lo) / SPLINE_STEP)) + 1, 4))
    uniq, inv = np.unique(p, return_inverse=True)
    exact = uniq.size <= nodes.size
    at = uniq if exact else 1.0 / (1.0 + np.exp(-nodes))
    for a in alphas:
        z = stats.skewnorm.isf(at, a)
        yield z[inv.reshape(p.shape)] if exact else CubicSpline(nodes, z)(t)


def estimate_sdm(ss: SampleStats, points: int = 64) -> HardnessEstimate:
    from scipy import stats  # lazy: estimators run off the query path

    idx = _fit_levels(ss.k, points)
    y = ss.top_scores[:, idx]                                     # (Q, L)
    best_sse = np.full(ss.n_queries, np.inf)
    loc = np.zeros(ss.n_queries)
    scale = np.ones(ss.n_queries)
    alpha = np.zeros(ss.n_queries)
    # quantiles depend on S only through p: evaluate once per distinct S (usually one)
    s_unique, s_inv = np.unique(ss.n_sampled, return_inverse=True)
    quantiles = skewnorm_quantiles((idx[None, :] + 0.5) / s_unique[:, None])  # (distinct S, L) per shape
    for a, z_s in zip(ALPHAS, quantiles):
        z = z_s[s_inv]                                                         # (Q, L)
        zm, ym = z.mean(axis=1, keepdims=True), y.mean(axis=1, keepdims=True)
        slope = ((z - zm) * (y - ym)).sum(axis=1) / np.maximum(((z - zm) ** 2).sum(axis=1), 1e-300)
        slope = np.maximum(slope, 1e-9)
        icpt = ym[:, 0] - slope * zm[:, 0]
        sse = ((y - icpt[:, None] - slope[:, None] * z) ** 2).sum(axis=1)
        better = sse < best_sse
        best_sse = np.where(better, sse, best_sse)
        loc = np.where(better, icpt, loc)
        scale = np.where(better, slope, scale)
        alpha = np.where(better, a, alpha)
    pq = ss.positive_query()
    x = stats.skewnorm.sf((ss.pos_scores - loc[pq]) / scale[pq], alpha[pq])
    return HardnessEstimate(method="sdm", x=np.clip(x, 0.0, 1.0), offsets=ss.pos_offsets,
                            rule=np.full(ss.n_positives, "skewnorm"), n_sampled=ss.n_sampled.copy(),
                            params={"points": points, "alphas": len(ALPHAS)},
                            tail={"loc": loc, "scale": scale, "alpha": alpha, "sse": best_sse})
