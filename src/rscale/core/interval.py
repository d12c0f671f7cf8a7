"""Intervals of predicted metrics from stored hardness replicates: the one home of the
interval every command reports (``rscale query``, ``predict``, ``curve``, ``report``, and
benchmarks/accuracy.py through them).

Two targets, named on every row by ``ci_kind``:

- ``benchmark``: the realised metric of a gallery of N distractors on *these* queries. Its
  uncertainty is the estimate's: distractor sampling and tail-model parameters, carried by the R
  stored replicates, P = R / 2 disjoint half-sample pairs (:mod:`rscale.core.replicates`). With
  (m_a, m_b) the mean metric of pair i and v the point prediction,
  sd = sqrt(mean_i ((m_a - m_b) / 2)^2) and the interval is v +- t_{P, (1+level)/2} * sd: a t
  interval, since P is small (8) and each pair gives one independent variance estimate (a
  percentile interval of 16 values would have the extreme replicates as its ends). The realised
  value also varies from gallery to gallery around what the law predicts (K_j ~ Bin(N, x_j)),
  which no replicate carries: its sd g (:mod:`rscale.core.gallery_noise`, computed under the
  point hardness) adds in quadrature, half-width sqrt((t sd)^2 + (z g)^2).
- ``population``: the same for the population of queries the benchmark samples: the replicate
  term and the percentile query bootstrap (:func:`rscale.core.uncertainty.query_bootstrap`) are
  independent error sources and add in variance, each side: v - sqrt((t sd)^2 + (v - b_lo)^2).

The back-test (:mod:`rscale.core.backtest`) adds what the replicates cannot carry, the
estimator's error at the cell's extrapolation factor measured on the sample itself: per cell a
band [e_lo, e_hi] of the signed metric error (prediction minus truth) at f, the prediction
interval of the share errors' regression on log m carried to f
(:func:`rscale.core.backtest.carry`). It enters both kinds the same way, as the union of the
intervals around v - e for every e in the band and around v itself:
lo = min(v, v - e_hi) - half_lo, hi = max(v, v - e_lo) + half_hi. The interval reaches toward
where the back-test says the truth may lie, as far as its band says, and keeps the point v: with
one model the back-test does not move the point (a correction of a one-model point measured worse
on the simulator); with two edge models it places the point between them, no further (below). A
band of one value e (``backtest`` of shape (C,)) is the earlier union of v and v - e.

An estimate with two models of the hardness past the sample's edge (:mod:`rscale.core.edge_models`)
predicts a v between v_U and v_C, placed by the cell's back-test band
(:func:`rscale.core.prediction.edge_weight`; ``models``: (v_U, v_C)). The replicates and the
back-test's shares are model U's estimates, so the interval reaches past U on each side by two
measured amounts: the band's (U's own error at the cell's factor), a_up = max(-e_lo, 0) and
a_down = max(e_hi, 0), and the edge correction's (the distance to C on that side),
b_up = max(v_C - v_U, 0) and b_down = max(v_U - v_C, 0). They are joined as independent error
terms, as the replicate and gallery terms are: lo = min(v_U - sqrt(a_down^2 + b_down^2), v) - half,
hi = max(v_U + sqrt(a_up^2 + b_up^2), v) + half (v lies between the models, so it adds nothing
there; it keeps a paired difference's point inside its interval). Where only one reach points to a
side (one model, or a band and a C on different sides) that reach is the interval's, as before.
History, each measured once on held-out sets (docs/benchmarks.md): until 2026-12-07 the band moved
both models (the reaches added in full); then it moved U only (their maximum, "The back-test belongs
to model U", `cov5`, `realset5`), which the regenerated accuracy table found short on scale-mixture
and student cells where both reaches point the same way and the truth lies beyond both; the
root-sum-square since ("The two reaches past model U, joined in quadrature", `cov7`, `realset7`)
is never narrower than the maximum and never wider than the sum. For ``population`` the query
bootstrap resamples the per-query values of the point around those ends, close to, not exactly,
the two models' own population intervals joined. A paired difference pairs the models (A's U
with B's U, C with C): its models are (v_U,A - v_U,B, v_C,A - v_C,B), a side with one model being
its own U and C, and its point each side's own point (each placed by its own band) minus the
other's.

Bounds are clipped to [0, 1] (every metric rscale predicts lies there; a difference of two, to
[-1, 1]). A hardness without
replicates (a version-1 file) has no benchmark interval (NaN bounds); its population interval
is the query bootstrap alone, and callers say so.

A paired difference of two versions A - B (:func:`difference_intervals`) is the same interval of
the per-query differences (without the gallery-noise term: the two backbones rank the same
gallery, and how their realised noises correlate is not known from either's hardness): replicate r of A minus replicate r of B, point minus point, the band
carried from share i's error of A minus that of B (:func:`rscale.core.backtest.difference_error`).
Pairing is valid only when replicate r of both was made from the
same half of the same distractors (:func:`rscale.core.replicates.split_key`); then what the two
estimates share (the tail fit of the same top scores, the same sampled distractors) cancels in
each pair's difference, and the population term's query bootstrap resamples the per-query
differences, the same queries for both.

Example: ``metric_intervals(pq, reps, ci_kind="benchmark")`` for pq (C, Q) and reps (C, R, Q)
returns (values, lo, hi), each (C,).
"""

from __future__ import annotations

import numpy as np

from rscale.errors import InvalidArgumentError

CI_KINDS = ("benchmark", "population")


def check_ci_kind(ci_kind: str) -> str:
    if ci_kind not in CI_KINDS:
        raise InvalidArgumentError(f"ci_kind must be one of {', '.join(CI_KINDS)}, got {ci_kind!r}")
    return ci_kind


def t_quantile(p: float, df: float) -> float:
    """The p-quantile (p in (1/2, 1)) of Student's t with ``df`` degrees of freedom, without
    scipy (its import would cost the cold ``rscale query`` ~0.3 s): bisection on the CDF, the
    density integrated by Simpson's rule from 0 (tests compare with scipy.stats.t.ppf).
    Example: ``t_quantile(0.975, 8)`` is 2.306."""
    import math
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def cdf(x: float) -> float:
        grid = np.linspace(0.0, x, 2001)
        f = np.exp(log_c - (df + 1) / 2 * np.log1p(grid * grid / df))
        h = x / 2000
        return 0.5 + h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())

    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        lo, hi = hi, hi * 2
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


def _t_quantile(level: float, df: float) -> float:
    return _T_CACHE.get((level, df)) or _T_CACHE.setdefault((level, df), t_quantile(0.5 + level / 2.0, df))


_T_CACHE: dict = {}


def metric_intervals(point, replicates=None, *, ci_kind: str = "benchmark", level: float = 0.95,
                     bootstrap: int = 1000, seed: int = 0, backtest=None, bounds=(0.0, 1.0), gallery_sd=None,
                     models=None):
    """(values, lo, hi), each (C,), for per-query point predictions ``point`` (C, Q) and their
    per-query replicate predictions ``replicates`` (C, R, Q) or None. ``bootstrap`` resamples
    (population only; 0 gives NaN bounds for population). ``backtest`` (C,): each cell's
    back-test error e(f) (NaN: none); the interval is the union of those around v and v - e.
    ``bounds``: where the bounds are clipped ((-1, 1) for a difference of two metrics).
    ``gallery_sd`` (C,): the sd over galleries of the realised value itself, a source the
    replicates do not carry (the reranked metric's outranking noise,
    :func:`rscale.core.rerank_replicates.gallery_sd`); computed, not estimated from pairs, so it
    adds as z * gallery_sd in quadrature to the replicate half-width t * sd. ``models`` (C, 2): the
    two edge models' values (v_U, v_C) of each cell (module docstring): the interval reaches past
    v_U by the band's reach and the distance to v_C joined in quadrature, and holds the point."""
    from rscale.core.uncertainty import percentile_ci, query_bootstrap

    check_ci_kind(ci_kind)
    if not 0.0 < level < 1.0:
        raise InvalidArgumentError(f"level must lie in (0, 1), got {level}")
    pq = np.atleast_2d(np.asarray(point, dtype=np.float64))
    value = pq.mean(axis=1)
    if replicates is not None:
        reps = np.asarray(replicates, dtype=np.float64)
        m = reps.mean(axis=2)                                           # (C, R)
        if m.shape[1] < 4 or m.shape[1] % 2:
            raise InvalidArgumentError(f"replicates come in half-sample pairs, at least 2; got {m.shape[1]}")
        pairs = m.reshape(m.shape[0], -1, 2)
        sd = np.sqrt(np.mean(((pairs[..., 0] - pairs[..., 1]) / 2.0) ** 2, axis=1))
        half = _t_quantile(level, pairs.shape[1]) * sd
        if gallery_sd is not None:
            from statistics import NormalDist
            half = np.hypot(half, NormalDist().inv_cdf(0.5 + level / 2.0) * np.asarray(gallery_sd, dtype=np.float64))
    else:
        half = np.full(value.shape, np.nan)
    band = np.zeros(value.shape + (2,)) if backtest is None else np.nan_to_num(np.asarray(backtest, dtype=np.float64))
    if band.ndim == 1:
        band = np.stack([band, band], axis=-1)
    if models is None:
        v_u = v_c = value                                           # one model: both are v
    else:
        pair = np.asarray(models, dtype=np.float64).reshape(-1, 2)
        v_u, v_c = pair[:, 0], pair[:, 1]
    # past v_U on each side: the band's reach and the distance to v_C, joined in quadrature; and v
    low_end = np.minimum(v_u - np.hypot(np.maximum(band[:, 1], 0.0), np.maximum(v_u - v_c, 0.0)), value)
    high_end = np.maximum(v_u + np.hypot(np.maximum(-band[:, 0], 0.0), np.maximum(v_c - v_u, 0.0)), value)
    if ci_kind == "benchmark":
        lo, hi = low_end - half, high_end + half
    else:
        if not bootstrap:
            lo = hi = np.full(value.shape, np.nan)
        else:
            b_lo, b_hi = percentile_ci(query_bootstrap(pq, bootstrap, seed), level)
            rep = np.nan_to_num(half)
            lo = low_end - np.hypot(value - b_lo, rep)
            hi = high_end + np.hypot(b_hi - value, rep)
    return value, np.clip(lo, *bounds), np.clip(hi, *bounds)


def predicted_intervals(est, cells, *, mode=None, ci_kind: str = "benchmark", level: float = 0.95,
                        bootstrap: int = 1000, seed: int = 0, in_pool_counts=None, backtest=None):
    """Per (metric, k, N) cell of one hardness estimate: (per-query values, low, high, back-test)
    of the interval of kind ``ci_kind``, every cell in one pass over the bootstrap. ``backtest``:
    the file's :class:`rscale.core.backtest.Backtest` (None: no back-test term); the fourth item
    is the cell's :class:`rscale.core.backtest.BacktestError` or None (f <= 1, in-pool, nothing
    stored)."""
    pqs, reps, bts = _cell_predictions(est, cells, mode, ci_kind, bootstrap, in_pool_counts, backtest, level)
    gsd = None
    if reps is not None:
        from rscale.core.prediction import gallery_sd
        gsd = np.array([gallery_sd(est, metric, n, k, in_pool_counts=in_pool_counts) for metric, k, n in cells])
    _, lo, hi = metric_intervals(pqs, reps, ci_kind=ci_kind, level=level, bootstrap=bootstrap, seed=seed,
                                 backtest=_bands(bts), gallery_sd=gsd,
                                 models=_edge_values(est, cells, mode, in_pool_counts))
    return [(pqs[i], float(lo[i]), float(hi[i]), bts[i]) for i in range(len(cells))]


def difference_intervals(est_a, est_b, cells, *, mode=None, ci_kind: str = "benchmark", level: float = 0.95,
                         bootstrap: int = 1000, seed: int = 0, backtest_a=None, backtest_b=None):
    """Per (metric, k, N) cell: (per-query values of A, of B, low, high, back-test of A, of B) of
    the paired interval of kind ``ci_kind`` (module docstring): replicate r of A minus replicate r
    of B, the query bootstrap on the per-query differences, and the back-test band carried from the
    differences of the two sides' share errors under the same union rule (none unless both sides
    have the same shares: one side's error alone is not the difference's). The fifth and sixth
    items are A's and B's own :class:`rscale.core.backtest.BacktestError`; the difference's is
    ``difference_error(A's, B's, N / S)``. The caller checks that the two
    estimates' replicates pair (the same split key) and that their queries are the same, in the
    same order; here they must have the same shape."""
    if est_a.offsets.size != est_b.offsets.size:
        raise InvalidArgumentError(f"a paired difference needs the same queries on both sides, got "
                                   f"{est_a.offsets.size - 1} and {est_b.offsets.size - 1}")
    from rscale.core.backtest import difference_error
    pa, ra, ba = _cell_predictions(est_a, cells, mode, ci_kind, bootstrap, None, backtest_a, level)
    pb, rb, bb = _cell_predictions(est_b, cells, mode, ci_kind, bootstrap, None, backtest_b, level)
    reps = None
    if ra is not None and rb is not None:
        if ra.shape != rb.shape:
            raise InvalidArgumentError(f"paired replicates need as many on both sides, got {ra.shape[1]} and "
                                       f"{rb.shape[1]}")
        reps = ra - rb
    s_ref = float(np.max(est_a.n_sampled))
    bd = [difference_error(a, b, n / s_ref, level=level) for a, b, (_, _, n) in zip(ba, bb, cells)]
    ma, mb = _edge_values(est_a, cells, mode, None), _edge_values(est_b, cells, mode, None)
    models = None
    if ma is not None or mb is not None:                  # a side with one model is its own U and C
        models = (np.repeat(pa.mean(axis=1)[:, None], 2, axis=1) if ma is None else ma) - \
            (np.repeat(pb.mean(axis=1)[:, None], 2, axis=1) if mb is None else mb)
    _, lo, hi = metric_intervals(pa - pb, reps, ci_kind=ci_kind, level=level, bootstrap=bootstrap, seed=seed,
                                 backtest=_bands(bd), bounds=(-1.0, 1.0), models=models)
    return [(pa[i], pb[i], float(lo[i]), float(hi[i]), ba[i], bb[i]) for i in range(len(cells))]


def _edge_values(est, cells, mode, in_pool_counts):
    """(C, 2): each cell's (v_U, v_C) for an estimate with two edge models, else None."""
    from rscale.core.prediction import edge_models_per_query
    out = []
    for metric, k, n in cells:
        models = edge_models_per_query(est, metric, n, k, mode, in_pool_counts)
        if models is None:
            return None
        out.append([float(models[0].mean()), float(models[1].mean())])
    return np.array(out)


def _bands(bts) -> np.ndarray:
    """(C, 2) back-test bands (e_lo, e_hi) of the cells' BacktestError (NaN: none)."""
    return np.array([[np.nan, np.nan] if b is None else [b.low, b.high] for b in bts]).reshape(-1, 2)


def _cell_predictions(est, cells, mode, ci_kind, bootstrap, in_pool_counts, backtest, level=0.95):
    """(per-query points (C, Q), per-query replicates (C, R, Q) or None, back-test errors (C,) of
    BacktestError or None) of one estimate's cells."""
    from rscale.core.backtest import backtest_error
    from rscale.core.prediction import predict_per_query, replicate_per_query

    s_ref = float(np.max(est.n_sampled))
    cache: dict = {}
    bts = [None if in_pool_counts is not None else backtest_error(est, backtest, metric, k, mode, factor=n / s_ref,
                                                                  cache=cache, level=level)
           for metric, k, n in cells]
    # the band places the point between two edge models (rscale.core.prediction.edge_weight)
    pqs = np.stack([predict_per_query(est, metric, n, k, mode, in_pool_counts=in_pool_counts,
                                      band=None if bt is None else (bt.low, bt.high))
                    for (metric, k, n), bt in zip(cells, bts)])
    reps = None
    if est.replicates is not None and not (ci_kind == "population" and not bootstrap):   # else NaN bounds anyway
        reps = np.stack([replicate_per_query(est, metric, n, k, mode, in_pool_counts=in_pool_counts)
                         for metric, k, n in cells])
    return pqs, reps, bts
