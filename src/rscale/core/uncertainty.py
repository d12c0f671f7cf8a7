"""Uncertainty and diagnostics for predicted metrics (pure numpy).

- :func:`query_bootstrap`: resample queries with replacement (vectorised: B index rows at once);
  the percentile interval of the mean is the query CI the paper reports.
- :func:`paired_difference`: the same resampled queries for two backbones; a difference whose CI
  contains 0 is *not resolved*.
- :func:`sufficient_budget`: per-query predictions from growing samples ending at S (the budget
  check, :mod:`rscale.core.budget`, passes S/2 as the average of the stored halves, then S); the
  budget is sufficient for N when the last doubling changes the prediction by no more than
  query-sampling noise (the half-width of the full-sample prediction's 95% query CI,
  1.96 sd / sqrt(Q)), the paper's criterion (appendix D).

The interval every command reports is built from these and the stored replicates in
:mod:`rscale.core.interval`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rscale.errors import InvalidArgumentError

BOOTSTRAP_BLOCK = 64   # resamples drawn and reduced together: small, cache-resident blocks


def _index_blocks(n_queries: int, b: int, seed: int):
    """The resample index stream, block by block (the same stream however it is consumed)."""
    dtype = np.int32 if n_queries < 2**31 else np.int64
    rng = np.random.default_rng([seed, 23])
    for a in range(0, b, BOOTSTRAP_BLOCK):
        yield rng.integers(0, n_queries, (min(BOOTSTRAP_BLOCK, b - a), n_queries), dtype=dtype)


def bootstrap_indices(n_queries: int, b: int = 1000, seed: int = 0) -> np.ndarray:
    """B rows of query indices drawn with replacement (int32: half the memory traffic of int64)."""
    return np.concatenate(list(_index_blocks(n_queries, b, seed)))


def query_bootstrap(per_query, b: int = 1000, seed: int = 0, idx=None) -> np.ndarray:
    """Bootstrap means of per-query values: shape (B,) for (Q,), (R, B) for (R, Q).

    Without ``idx`` the resamples are drawn and reduced in blocks (4x faster from a cold start
    at Q = 10k, B = 1000 than materialising all of them); the result equals passing
    ``bootstrap_indices(Q, b, seed)``.
    """
    v = np.asarray(per_query, dtype=np.float64)
    if v.shape[-1] < 2:
        raise InvalidArgumentError("a bootstrap needs at least 2 queries")
    if idx is not None:
        return v[..., idx].mean(axis=-1)
    return np.concatenate([v[..., blk].mean(axis=-1) for blk in _index_blocks(v.shape[-1], b, seed)], axis=-1)


def percentile_ci(samples, level: float = 0.95):
    a = (1.0 - level) / 2.0
    lo, hi = np.quantile(samples, [a, 1.0 - a], axis=-1)
    return lo, hi


@dataclass(frozen=True)
class Difference:
    value: float
    lo: float
    hi: float

    @property
    def resolved(self) -> bool:
        return self.lo > 0 or self.hi < 0


def paired_difference(per_query_a, per_query_b, b: int = 1000, seed: int = 0,
                      level: float = 0.95) -> Difference:
    """CI of mean(a) - mean(b) over the same queries (paired query bootstrap)."""
    a = np.asarray(per_query_a, dtype=np.float64)
    bb = np.asarray(per_query_b, dtype=np.float64)
    if a.shape != bb.shape:
        raise InvalidArgumentError("a paired comparison needs the same queries on both sides")
    boot = query_bootstrap(a - bb, b, seed)
    lo, hi = percentile_ci(boot, level)
    return Difference(float((a - bb).mean()), float(lo), float(hi))


@dataclass(frozen=True)
class BudgetCheck:
    fractions: np.ndarray        # (L,) sub-sample shares, ascending, ending at 1
    predictions: np.ndarray      # (L,) predicted metric from each
    last_step: Difference        # prediction(S) - prediction(S/2), with its paired CI
    noise: float                 # half-width of the full-sample prediction's 95% query CI

    @property
    def sufficient(self) -> bool:
        return abs(self.last_step.value) <= self.noise


def sufficient_budget(per_query_by_fraction, fractions, b: int = 1000, seed: int = 0) -> BudgetCheck:
    """Compare per-query predictions from growing samples (rows, ascending fractions, the last S)."""
    pq = np.asarray(per_query_by_fraction, dtype=np.float64)
    fr = np.asarray(fractions, dtype=np.float64)
    if pq.ndim != 2 or pq.shape[0] != fr.size or fr.size < 2:
        raise InvalidArgumentError("need per-query predictions for at least two nested fractions")
    last = paired_difference(pq[-1], pq[-2], b, seed)
    noise = 1.96 * pq[-1].std(ddof=1) / np.sqrt(pq.shape[1])
    return BudgetCheck(fr, pq.mean(axis=1), last, float(noise))
