"""Two models of the hardness past the sample's edge (pure numpy; issue 14, docs/benchmarks.md
"Two edge models, averaged" and "The back-test places the point between the edge models").

A positive the sample counts no distractor above has its hardness from the estimator's tail model
alone. Two models of it fit a sample equally well:

- ``U``, the tail model as fitted (with evt-eb, its posterior draws carry the spread);
- ``C``, the same hardness times the tail model's mean error there as the complementary halves
  measure it: for the positives half A counts nothing above, half B's counts against their
  expectation under A's model (and B against A), pooled in three decades of model depth
  d = x S (:data:`BANDS`), each band's ratio (sum of counts + :data:`PRIOR_COUNTS`) / (sum of
  expectations + :data:`PRIOR_COUNTS`): a prior of one count that the model is right, so a band
  with little expectation stays near 1.

The halves identify that mean error, and the full pool confirms it on every real set measured;
they do not identify how widely the true hardness is spread at one model depth, which decides
whether correcting the mean helps a metric (it does where the spread is moderate, three real sets
of four and most simulator families; it does not on a set of icons or below near-duplicate
clusters). So the estimate carries both; the back-test, which measures U's error at each cell's
own extrapolation factor, places the prediction between them
(:func:`rscale.core.prediction.edge_weight`; their mean where a cell has no back-test), and the
interval holds both (:func:`rscale.core.interval.metric_intervals`, ``models``). Each step was
decided on design data and measured once on held-out sets before it was built (docs/benchmarks.md).

:func:`edge_factor` is what an estimate stores: per positive, the factor of ``C`` on its hardness
(1 for every positive the sample counts, or outside the bands).

Example: ``edge_factor(x, counts, s, halves_band_ratios(half_a, half_b))`` with each half a
``(x, counts, s)`` triple of per-positive arrays.
"""

from __future__ import annotations

import numpy as np

BANDS = ((1e-3, 1e-2), (1e-2, 1e-1), (1e-1, 1.0))       # model depths d = x S of the edge positives
PRIOR_COUNTS = 1.0


def band_ratios(obs, mu, depth, prior: float = PRIOR_COUNTS) -> np.ndarray:
    """(len(BANDS),): per band of ``depth``, (sum of ``obs`` + prior) / (sum of ``mu`` + prior)."""
    obs, mu, depth = (np.asarray(a, dtype=np.float64) for a in (obs, mu, depth))
    out = np.ones(len(BANDS))
    for b, (lo, hi) in enumerate(BANDS):
        sel = (depth >= lo) & (depth < hi)
        denom = float(mu[sel].sum()) + prior
        if denom > 0:
            out[b] = (float(obs[sel].sum()) + prior) / denom
    return out


def halves_band_ratios(half_a, half_b, prior: float = PRIOR_COUNTS) -> np.ndarray:
    """The tail model's mean error past the edge, per band, from two disjoint halves of a sample:
    each half a ``(x, counts, s)`` triple of per-positive arrays (its estimate's point hardness,
    its sampled counts, its query's sample size). For the positives one half counts nothing above
    with depth x S in a band, the other half's counts against x S_other, both directions pooled."""
    obs, mu, depth = [], [], []
    for (x, c, s), (_, c_other, s_other) in ((half_a, half_b), (half_b, half_a)):
        x, c, s, c_other, s_other = (np.asarray(a, dtype=np.float64) for a in (x, c, s, c_other, s_other))
        edge = c == 0
        obs.append(c_other[edge])
        mu.append(x[edge] * s_other[edge])
        depth.append(x[edge] * s[edge])
    return band_ratios(np.concatenate(obs), np.concatenate(mu), np.concatenate(depth), prior)


def edge_factor(x, counts, s, ratios) -> np.ndarray:
    """(P,) the factor of model ``C`` on each positive's hardness: its band's ratio where the
    sample counts nothing above it (``counts`` 0) and its depth ``x`` ``s`` lies in a band, else 1."""
    x, s = np.asarray(x, dtype=np.float64), np.asarray(s, dtype=np.float64)
    depth = x * s
    edge = np.asarray(counts) == 0
    f = np.ones(x.shape)
    for (lo, hi), r in zip(BANDS, np.asarray(ratios, dtype=np.float64)):
        f[edge & (depth >= lo) & (depth < hi)] = r
    return f


def corrected(x, factor) -> np.ndarray:
    """Model ``C``'s hardness: ``x`` (per positive, or (P, D) draws) times the factor, within [0, 1]."""
    x = np.asarray(x, dtype=np.float64)
    f = np.asarray(factor, dtype=np.float64)
    return np.minimum(x * (f if x.ndim == 1 else f[:, None]), 1.0)


__all__ = ["BANDS", "PRIOR_COUNTS", "band_ratios", "corrected", "edge_factor", "halves_band_ratios"]
