"""Uncertainty and diagnostics for predicted metrics (pure numpy).

- :func:`query_bootstrap`: resample queries with replacement (vectorised: B index rows at once);
  the percentile interval of the mean is the query CI the paper reports.
- :func:`paired_difference`: the same resampled queries for two backbones; a difference whose CI
  contains 0 is *not resolved*.
- :func:`sufficient_budget`: predictions from nested sub-samples S/8, S/4, S/2, S; the budget is
  sufficient for N when the last doubling changes the prediction by no more than query-sampling
  noise (the half-width of the full-sample prediction's 95% query CI, 1.96 sd / sqrt(Q)), the
  paper's criterion (appendix D).
- :func:`distractor_spread`: the spread of predictions over disjoint half-samples, the
  distractor-sampling-plus-fit term (the paper's nested bootstrap, sigma ~ 0.003 at 5%).
- :func:`reported_interval`: the interval rscale reports: the query CI, widened in quadrature by
  the distractor term and then by the convergence term, CONVERGENCE_FACTOR times how far the
  prediction moves between half-samples and the whole sample (a bias bound, see its docstring),
  and stretched to the predictions of other tail models the data do not rule out (rejected tails
  at their count bound, per-query and shared tail shapes, heavy tails, one threshold for all
  queries: see :func:`rscale.api.estimation.tail_check`).
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
    """Compare per-query predictions from nested sub-samples (rows, ascending fractions)."""
    pq = np.asarray(per_query_by_fraction, dtype=np.float64)
    fr = np.asarray(fractions, dtype=np.float64)
    if pq.ndim != 2 or pq.shape[0] != fr.size or fr.size < 2:
        raise InvalidArgumentError("need per-query predictions for at least two nested fractions")
    last = paired_difference(pq[-1], pq[-2], b, seed)
    noise = 1.96 * pq[-1].std(ddof=1) / np.sqrt(pq.shape[1])
    return BudgetCheck(fr, pq.mean(axis=1), last, float(noise))


def distractor_spread(predictions) -> float:
    """Standard deviation of a full-sample prediction implied by disjoint half-sample predictions.

    Two disjoint halves give independent predictions at S/2; their difference has variance
    2 var(S/2), and a prediction from S (twice the data) has about half var(S/2). So the spread at S
    is |a - b| / 2 for one pair, pooled as a root mean square over pairs.
    """
    p = np.asarray(predictions, dtype=np.float64).reshape(-1, 2)
    return float(np.sqrt(np.mean(((p[:, 0] - p[:, 1]) / 2.0) ** 2)))


# Remaining estimator bias at S is bounded by this multiple of the S/2 -> S step: if the bias decays
# like S^-beta, b(S) = step / (2^beta - 1), and a factor of 2 holds for beta >= log2(1.5) = 0.58.
# Tail-estimation bias decays slowly (beta around 0.5-1 on the simulator families); the accuracy
# benchmark reports the coverage of the whole interval (docs/benchmarks.md: design, held-out and
# fresh scenario sets) rather than tuning the factor.
CONVERGENCE_FACTOR = 2.0


def convergence_step(half_predictions, full_prediction: float) -> float:
    """Mean prediction from disjoint half-samples minus the whole sample's: how far the estimate
    still moves when its data doubles (positive: predictions fall as the sample grows)."""
    return float(np.mean(np.asarray(half_predictions, dtype=np.float64)) - full_prediction)


def reported_interval(value: float, lo: float, hi: float, distractor_sd: float = 0.0, step: float = 0.0,
                      factor: float = CONVERGENCE_FACTOR, z: float = 1.96, alternatives=()):
    """Query CI (lo, hi) around ``value``, widened by the distractor-sampling term (in quadrature,
    each side) and by ``factor * |step|`` (added, both sides: the direction of the remaining bias
    is not reliably that of the last step), then stretched to include each of ``alternatives``
    (predictions under other tail models the data do not rule out: rejected tails at their count
    bound, one tail shape shared across queries); non-finite or missing ones are skipped."""
    bias = factor * abs(step)
    lo_, hi_ = (value - float(np.hypot(value - lo, z * distractor_sd)) - bias,
                value + float(np.hypot(hi - value, z * distractor_sd)) + bias)
    for alt in alternatives:
        if alt is not None and np.isfinite(alt):
            lo_, hi_ = min(lo_, float(alt)), max(hi_, float(alt))
    return max(lo_, 0.0), min(hi_, 1.0)          # every metric rscale predicts lies in [0, 1]
