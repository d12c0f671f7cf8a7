"""From a hardness estimate to per-query metric predictions at any N (pure numpy).

An estimate with posterior ``draws`` (the ``evt-eb`` estimator) predicts the per-query metric as the
average over its draws, which integrates the hardness uncertainty through the metric; one without
draws plugs its point hardness into the law. An estimate with an ``edge_factor`` carries two models
of the hardness past the sample's edge (:mod:`rscale.core.edge_models`), U (as fitted) and C (times
the factor), each computed as above (:func:`edge_models_per_query` gives both). Its prediction lies
between them, where the cell's back-test band places it (:func:`edge_weight`: U corrected by the
band's centre, U's measured error at the cell's factor, kept between U and C); without a band, at
their mean.
"""

from __future__ import annotations

import numpy as np

from rscale.core import law
from rscale.core.edge_models import corrected
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
                      mode: str | None = None, in_pool_counts: np.ndarray | None = None,
                      band=None) -> np.ndarray:
    """Per-query predicted metric at gallery size ``n`` (the benchmark value is the mean).

    ``mode`` None picks :data:`DEFAULT_MODE` for the metric. ``in_pool_counts`` (the sampled
    counts, per positive) makes the prediction condition on the sample being part of the gallery
    (:func:`in_pool_hardness`; plug-in only). ``band``: the cell's back-test band (e_lo, e_hi) of
    model U's error (:class:`rscale.core.backtest.BacktestError`'s ``low``, ``high``), which places
    the prediction of an estimate with two edge models between them (:func:`edge_weight`); None:
    their mean. An estimate with one model ignores it.
    """
    mode = resolve_mode(metric, mode, None if in_pool_counts is not None else est.method)
    models = edge_models_per_query(est, metric, n, k, mode, in_pool_counts)
    if models is None:
        return _model_per_query(est, False, metric, n, k, mode, in_pool_counts)
    u, c = models
    w = edge_weight(float(u.mean()), float(c.mean()), band)
    return (1.0 - w) * u + w * c                # w = 1/2: (u + c) / 2 to the bit; w = 0 or 1: u or c


def edge_weight(v_u: float, v_c: float, band=None) -> float:
    """The weight w of model C in the point (1 - w) v_U + w v_C of an estimate with two edge models.

    The back-test band (e_lo, e_hi) is model U's error at the cell's extrapolation factor (the
    back-test's shares are model-U re-estimates, :mod:`rscale.core.backtest`): the point is U
    corrected by the band's centre, kept between the two models,
    v = clip(v_U - (e_lo + e_hi) / 2, min(v_U, v_C), max(v_U, v_C)), so
    w = clip(-(e_lo + e_hi) / 2 / (v_C - v_U), 0, 1): C where the band says U is off toward C's
    side by at least their distance, U where it says U is right or off the other way. 1/2 (their
    mean: no evidence between them) without a band (None or NaN) or where the models agree.
    Chosen on seen data and measured once on held-out sets before it was built (docs/benchmarks.md,
    "The back-test places the point between the edge models"). Example: ``edge_weight(0.50, 0.48,
    (0.01, 0.03))`` is 1.0 (U optimistic by 0.02 or more: the point is C)."""
    if band is None or v_c == v_u:
        return 0.5
    centre = (float(band[0]) + float(band[1])) / 2.0
    if not np.isfinite(centre):
        return 0.5
    return min(max(-centre / (v_c - v_u), 0.0), 1.0)


def edge_models_per_query(est: HardnessEstimate, metric: str, n: float, k: int | None = 1000,
                          mode: str | None = None, in_pool_counts: np.ndarray | None = None):
    """(U, C), each (Q,): the per-query predictions of the two edge models (the hardness as
    estimated, and times ``est.edge_factor``), or None for an estimate with one model."""
    if est.edge_factor is None:
        return None
    return (_model_per_query(est, False, metric, n, k, mode, in_pool_counts),
            _model_per_query(est, True, metric, n, k, mode, in_pool_counts))


def _model_per_query(est: HardnessEstimate, edge: bool, metric: str, n: float, k: int | None,
                     mode: str | None, in_pool_counts: np.ndarray | None) -> np.ndarray:
    """Per-query predictions of one model: the hardness as estimated, or (``edge``) times the edge
    factor; over the posterior draws when there are any."""
    mode = resolve_mode(metric, mode, None if in_pool_counts is not None else est.method)
    if in_pool_counts is not None:
        if mode != "plugin":
            from rscale.errors import InvalidArgumentError
            raise InvalidArgumentError("in-pool predictions use the plug-in mode")
        s = np.repeat(est.n_sampled, np.diff(est.offsets))
        x = est.x if est.draws is None else est.draws                      # (P,) or (P, D)
        if edge:
            x = corrected(x, est.edge_factor)
        draws = x[None] if x.ndim == 1 else x.T                            # (D, P): one stack
        h = law.Hardness.from_flat(in_pool_hardness(draws, in_pool_counts, s, float(n)), est.offsets)
        return np.mean(law.per_query(h, metric, n, k, mode), axis=0)
    key = ("edge" if edge else "model", metric, n, k, mode)
    if est.draws is None:
        hardness = (lambda: law.Hardness.from_flat(corrected(est.x, est.edge_factor), est.offsets)) if edge \
            else est.hardness
        return _memoised(est, key, lambda: law.per_query(hardness(), metric, n, k, mode))
    return _memoised(est, key, lambda: np.mean(law.per_query(_draws_hardness(est, edge), metric, n, k, mode), axis=0))


# Per-query predictions of a registry-cached (read-only, so immutable) estimate are kept with it,
# keyed by (model, edge model or replicates, metric, N, k, mode): a repeated cell answers without evaluating
# the law again (with the interval: the point and R = 16 replicates, 17 evaluations of 60k
# positives, ~5 ms of CPU per cell, docs/benchmarks.md). At most this many bytes per estimate
# (a registry keeps 8 decoded tables); the oldest cell goes first. Kept arrays are read-only.
_MEMO_BYTES = 16 << 20


def _memoised(est: HardnessEstimate, key: tuple, make, cacheable: bool = True) -> np.ndarray:
    """``make()`` (an array), kept in the estimate under ``key`` when every array the law reads
    from it is read-only; a writable estimate (one being built or edited) is never memoised."""
    if not cacheable or any(a is not None and a.flags.writeable
                            for a in (est.x, est.offsets, est.draws, est.replicates, est.edge_factor)):
        return make()
    try:
        hash(key)
    except TypeError:                   # e.g. N given as an array: evaluate, do not keep
        return make()
    memo = est.__dict__.setdefault("_per_query_memo", {})     # insertion order: the oldest first
    hit = memo.get(key)
    if hit is not None:
        return hit
    value = make()
    value.flags.writeable = False
    memo[key] = value
    items = list(memo.items())          # a snapshot (one C call): another thread may add cells meanwhile
    total = sum(v.nbytes for _k, v in items)
    for old, v in items[:-1]:           # the newest stays
        if total <= _MEMO_BYTES:
            break
        memo.pop(old, None)
        total -= v.nbytes
    return value


def _draws_hardness(est: HardnessEstimate, edge: bool = False) -> law.Hardness:
    """The law's view of the posterior draws (``edge``: times the edge factor) as one stack (D, P),
    sorted once and kept with a registry-cached (read-only) estimate, as
    :meth:`HardnessEstimate.replicate_hardness` does."""
    name = "_edge_draws_hardness" if edge else "_draws_hardness"
    memo = est.__dict__.get(name)
    if memo is None:
        draws = corrected(est.draws, est.edge_factor) if edge else est.draws
        memo = law.Hardness.from_flat(draws.T, est.offsets)
        if not (est.draws.flags.writeable or est.offsets.flags.writeable
                or (edge and est.edge_factor.flags.writeable)):
            est.__dict__[name] = memo
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
    return _memoised(est, ("replicates", metric, n, k, mode),                # (R, Q) in one array operation
                     lambda: law.per_query(est.replicate_hardness(), metric, n, k, mode))


def gallery_sd(est: HardnessEstimate, metric: str, n: float, k: int | None = 1000,
               in_pool_counts: np.ndarray | None = None) -> float:
    """The sd over galleries of ``n`` distractors of the realised benchmark value under the
    estimate's point hardness (:func:`rscale.core.gallery_noise.realised_sd`, as many galleries
    as its precision needs; with ``in_pool_counts`` the gallery contains the sample and only its
    n - S unseen distractors vary). Kept with a registry-cached estimate like its predictions."""
    from rscale.core.gallery_noise import realised_sd
    if in_pool_counts is not None:
        return float(realised_sd(est.x, est.offsets, metric, n, k, base_counts=in_pool_counts,
                                 n_sampled=est.n_sampled))
    value = _memoised(est, ("gallery", metric, n, k),
                      lambda: np.array(realised_sd(est.x, est.offsets, metric, n, k)))
    return float(value)


def predict(est: HardnessEstimate, metric: str, n: float, k: int | None = 1000,
            mode: str | None = None) -> float:
    """The benchmark value without a back-test: :func:`predict_per_query`'s mean, which for an
    estimate with two edge models is their mean (the commands place that point by the cell's band,
    :func:`rscale.core.interval.predicted_intervals`; this serves in-process estimates of one model,
    such as the reranked law's first stage)."""
    return float(predict_per_query(est, metric, n, k, mode).mean())
