"""Shard-to-shard drift check: is the distractor pool exchangeable across shards?

After scoring, each query has a global threshold t_q (its K-th best sampled score). Under
exchangeability a shard holding n_j of the S sampled distractors contributes, over all queries, an
expected E_j = sum_q K * n_j / S of the scores at or above t_q; the observed O_j are read off each
shard's own top-K list (which holds all of that shard's scores >= t_q). A Pearson chi-square test
over shards (J - 1 degrees of freedom) flags a pool whose shards differ, e.g. one crawl batch
full of near-duplicates: the paper's caveat that a convenience sample biases hardness.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DriftReport:
    observed: np.ndarray     # (J,) top-K exceedances per shard
    expected: np.ndarray     # (J,)
    chi2: float
    p_value: float

    @property
    def drifting(self) -> bool:
        return self.p_value < 1e-3

    def message(self) -> str:
        worst = int(np.argmax(np.abs(self.observed - self.expected) / np.sqrt(np.maximum(self.expected, 1e-12))))
        return (f"shards are {'NOT ' if self.drifting else ''}exchangeable (chi2 = {self.chi2:.1f}, "
                f"p = {self.p_value:.2g}); most different: shard {worst} with {int(self.observed[worst])} "
                f"top-K scores against {self.expected[worst]:.0f} expected")


def drift_check(shard_tops, shard_sizes, merged_top) -> DriftReport:
    """``shard_tops``: per shard (Q, K) top lists (any order); ``shard_sizes``: (J,) or (J, Q) counts."""
    thr = merged_top[:, -1][:, None]
    return drift_report([np.sum(t >= thr) for t in shard_tops], shard_sizes)


def drift_report(observed, shard_sizes) -> DriftReport:
    """The test from each shard's count of top-K scores at or above the merged threshold."""
    from scipy.stats import chi2  # lazy: off the query path

    observed = np.asarray(observed, dtype=np.float64)
    n = np.asarray(shard_sizes, dtype=np.float64)
    share = n.sum(axis=1) / n.sum() if n.ndim == 2 else n / n.sum()
    expected = observed.sum() * share
    ok = expected > 0
    stat = float(np.sum((observed[ok] - expected[ok]) ** 2 / expected[ok]))
    dof = max(int(ok.sum()) - 1, 1)
    return DriftReport(observed, expected, stat, float(chi2.sf(stat, dof)))
