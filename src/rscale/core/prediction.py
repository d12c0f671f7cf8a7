"""From a hardness estimate to per-query metric predictions at any N (pure numpy).

An estimate with posterior ``draws`` (the ``evt`` estimator) predicts the per-query metric as the
average over its draws, which integrates the hardness uncertainty through the metric; one without
draws plugs its point hardness into the law.
"""

from __future__ import annotations

import numpy as np

from rscale.core import law
from rscale.core.estimators.base import HardnessEstimate

# Per-metric default mode. AP and RR respond smoothly to N x, and the paper's plug-in predicts
# them well (measured in docs/benchmarks.md); R@k and Recall@k are step functions of the rank, so
# their plug-in is only meaningful on realised fractions and the Binomial expectation is used.
DEFAULT_MODE = {"AP": "plugin", "RR": "plugin", "R": "expected", "Recall": "expected"}
# Estimators whose default is one mode for every metric: evt-eb's draws average the realised
# metric's expectation (measured that way, docs/benchmarks.md; its plug-in is biased low)
METHOD_MODE = {"evt-eb": "expected"}


def resolve_mode(metric: str, mode: str | None, method: str | None = None) -> str:
    if mode is not None:
        return mode
    return METHOD_MODE.get(method) or DEFAULT_MODE.get(metric, "plugin")


def in_pool_hardness(x: np.ndarray, counts: np.ndarray, s: np.ndarray, n: float) -> np.ndarray:
    """Effective hardness when the gallery of size n *contains* the sample (a fixed pool).

    The positive's count in the pool is its observed sampled count c plus what the n - S unsampled
    distractors add, so the plug-in count is c + (n - S) x rather than n x:
    x_eff = (c + (n - S) x) / n. At n = S this is the sample's realised fraction (exact); for n >> S
    it tends to x. Use it for the small-pool target (the realised metric of the pool sampled from).
    """
    s = np.asarray(s, dtype=np.float64)
    if np.any(n < s):
        from rscale.errors import InvalidArgumentError
        raise InvalidArgumentError(f"an in-pool prediction needs N >= S; got N={n:g} < S={float(s.max()):g}")
    return np.clip((np.asarray(counts, dtype=np.float64) + (n - s) * x) / n, 0.0, 1.0)


def predict_per_query(est: HardnessEstimate, metric: str, n: float, k: int | None = 1000,
                      mode: str | None = None, in_pool_counts: np.ndarray | None = None) -> np.ndarray:
    """Per-query predicted metric at gallery size ``n`` (the benchmark value is the mean).

    ``mode`` None picks :data:`DEFAULT_MODE` for the metric. ``in_pool_counts`` (the sampled
    counts, per positive) makes the prediction condition on the sample being part of the gallery
    (:func:`in_pool_hardness`; plug-in only).
    """
    mode = resolve_mode(metric, mode, None if in_pool_counts is not None else est.method)
    if in_pool_counts is not None:
        if mode != "plugin":
            from rscale.errors import InvalidArgumentError
            raise InvalidArgumentError("in-pool predictions use the plug-in mode")
        s = np.repeat(est.n_sampled, np.diff(est.offsets))
        draws = est.x[None] if est.draws is None else est.draws.T           # (D, P): one stack
        h = law.Hardness.from_flat(in_pool_hardness(draws, in_pool_counts, s, float(n)), est.offsets)
        return np.mean(law.per_query(h, metric, n, k, mode), axis=0)
    if est.draws is None:
        return law.per_query(est.hardness(), metric, n, k, mode)
    return np.mean(law.per_query(_draws_hardness(est), metric, n, k, mode), axis=0)


def _draws_hardness(est: HardnessEstimate) -> law.Hardness:
    """The law's view of the posterior draws as one stack (D, P), sorted once and kept with a
    registry-cached (read-only) estimate, as :meth:`HardnessEstimate.replicate_hardness` does."""
    memo = est.__dict__.get("_draws_hardness")
    if memo is None:
        memo = law.Hardness.from_flat(est.draws.T, est.offsets)
        if not (est.draws.flags.writeable or est.offsets.flags.writeable):
            est.__dict__["_draws_hardness"] = memo
    return memo


def replicate_per_query(est: HardnessEstimate, metric: str, n: float, k: int | None = 1000,
                        mode: str | None = None, in_pool_counts: np.ndarray | None = None) -> np.ndarray:
    """Per-query predicted metric from each stored hardness replicate (a half-sample estimate), shape (R, Q)."""
    mode = resolve_mode(metric, mode, None if in_pool_counts is not None else est.method)
    if in_pool_counts is not None:
        if mode != "plugin":
            from rscale.errors import InvalidArgumentError
            raise InvalidArgumentError("in-pool predictions use the plug-in mode")
        s = np.repeat(est.n_sampled, np.diff(est.offsets))
        h = law.Hardness.from_flat(in_pool_hardness(est.replicates.T, in_pool_counts, s, float(n)), est.offsets)
        return law.per_query(h, metric, n, k, mode)
    return law.per_query(est.replicate_hardness(), metric, n, k, mode)     # (R, Q) in one array operation


def predict(est: HardnessEstimate, metric: str, n: float, k: int | None = 1000,
            mode: str | None = None) -> float:
    return float(predict_per_query(est, metric, n, k, mode).mean())
