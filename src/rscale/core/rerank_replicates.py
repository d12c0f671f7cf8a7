"""The reranked law's input from a sample, with half-sample replicates, and the interval of a
reranked metric (pure numpy; the interval itself is :func:`rscale.core.interval.metric_intervals`).

A reranked prediction needs, besides the first-stage hardness x, each positive's rerank score t
and its joint tail G_p(w) = P(U <= w, E >= t_p) (:mod:`rscale.core.rerank_law`), estimated from
the rerank scores of the sample's top first-stage candidates (:func:`~rscale.core.rerank_law.
joint_from_top_smoothed`). Its uncertainty comes the way the first stage's does
(:mod:`rscale.core.replicates`): the same disjoint half-sample splits (:func:`rscale.core.subsample.
split_halves`, the same seeds) give each half's joint tail, and half i is paired with the first
stage's hardness replicate i of the same half, so replicate i of the reranked metric is the whole
reranked prediction redone on half i. Computed once (at registration), stored, and read back by
every query; only the law's evaluation at N is left to query time.

A half keeps about half of the R reranked candidates (the smallest number kept over queries), so
it reaches a little less far into the first-stage law than the sample: a gallery's top K' at size N
is supported when every set (the sample and each half) holds at least K' S / N of its top, i.e.
K' <= min over sets and queries of (R_set / S_set) N (:func:`supported_depth`).

Example: ``inp = reranked_input(ss, splits=8, seed=2027)``; then
``reranked_intervals(inp, x, x_reps, [("AP", 1000, 1e8, None)], depth=1000)`` gives
[(per-query values, low, high)].
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rscale.errors import InvalidArgumentError


@dataclass(frozen=True)
class JointTails:
    """One set's joint tails: ``grid`` (Q, V) increasing from 0, ``joint`` (P, V), positives in
    the sample's order (not sorted by hardness: each replicate has its own first-stage order)."""

    grid: np.ndarray
    joint: np.ndarray

    @property
    def reach(self) -> np.ndarray:
        """(Q,) the share of the first-stage law each query's stored top covers (R / S)."""
        return self.grid[:, -1]


@dataclass(frozen=True)
class RerankedInput:
    """Rerank scores of the positives, their joint tails from the sample, and from each half of
    ``splits`` disjoint half-sample splits (``halves[2i]``, ``halves[2i + 1]``: split i, the order
    of the hardness replicates)."""

    pos_rerank: np.ndarray         # (P,)
    offsets: np.ndarray            # (Q+1,)
    sample: JointTails
    halves: tuple = ()

    @property
    def sets(self) -> tuple:
        return (self.sample, *self.halves)


def reranked_input(ss, *, splits: int, seed: int, tail: bool = True) -> RerankedInput:
    """The reranked input of sample stats with rerank scores: the sample's joint tails and, for
    ``splits`` > 0, those of the halves of split i that the hardness replicates used
    (:func:`rscale.core.replicates.replicate_halves`: recorded by id, else seeded ``seed + i``)."""
    from rscale.core.rerank_law import joint_from_top, joint_from_top_smoothed
    from rscale.core.replicates import replicate_halves

    if not ss.has_rerank:
        raise InvalidArgumentError("these sample stats hold no rerank scores (top_rerank_scores, positive_rerank_scores)")
    make = joint_from_top_smoothed if tail else joint_from_top

    def tails(part) -> JointTails:
        if not part.has_rerank:
            raise InvalidArgumentError("a half-sample keeps none of some query's reranked top candidates: rerank "
                                       "more of the sample's top (or register without replicates)")
        grid, joint = make(part.top_rerank, part.n_sampled, part.pos_rerank, part.pos_offsets)
        return JointTails(grid, joint)

    halves = [tails(h) for i in range(splits) for h in replicate_halves(ss, i, splits=splits, seed=seed)]
    return RerankedInput(np.asarray(ss.pos_rerank, np.float64), np.asarray(ss.pos_offsets, np.int64), tails(ss),
                         tuple(halves))


def supported_depth(inp: RerankedInput, n: float) -> int:
    """The largest K' whose gallery top at size ``n`` every set's stored top covers, for every query."""
    reach = min(float(s.reach.min()) for s in inp.sets)
    return int(np.floor(reach * float(n) * (1 + 1e-12) + 1e-9))


def reranked_sets(inp: RerankedInput, x, x_replicates=None):
    """(the point RerankedHardness, [replicate RerankedHardness ...]) from first-stage hardness
    ``x`` (P,) and its replicates (P, R) (None: no replicates)."""
    from rscale.core.rerank_law import RerankedHardness

    x = np.asarray(x, np.float64)
    point = RerankedHardness.build(x, inp.pos_rerank, inp.offsets, inp.sample.grid, inp.sample.joint)
    if x_replicates is None or not inp.halves:
        return point, []
    reps = np.asarray(x_replicates, np.float64)
    if reps.shape != (x.size, len(inp.halves)):
        raise InvalidArgumentError(f"{reps.shape[1] if reps.ndim == 2 else '?'} hardness replicates for "
                                   f"{len(inp.halves)} reranked half-samples: they must come from the same splits")
    return point, [RerankedHardness.build(reps[:, r], inp.pos_rerank, inp.offsets, h.grid, h.joint)
                   for r, h in enumerate(inp.halves)]


def gallery_sd(h, metric: str, n: float, k: int | None, *, depth: int, draws: int | None = None, seed: int = 0) -> float:
    """The standard deviation, over galleries of ``n`` distractors, of the realised benchmark value
    (the mean over queries) of a reranked metric under the law ``h``
    (:class:`rscale.core.rerank_law.RerankedHardness`): the gallery's own outranking noise, which
    no replicate of the estimate carries.

    A realised gallery's top K' holds m = K' - l distractors, and survivor p is outranked by
    M_p ~ Bin(m, rho_p(w)) of them (:mod:`rscale.core.rerank_law`, step 3); with m rho_p of a few
    that count, and the metric with it, varies from gallery to gallery by as much as the estimate
    does (measured: docs/benchmarks.md, "Reranked interval coverage"). The counts of one query are
    nested (a distractor that reranks above a positive with a higher rerank score also beats one
    with a lower): drawn as M_(1) ~ Bin(m, rho_(1)), M_(i) = M_(i-1) + Bin(m - M_(i-1),
    (rho_(i) - rho_(i-1)) / (1 - rho_(i-1))) in increasing rho. Survivors l and the slice w are
    the plug-in's (the first stage's own Binomial noise, which the first-stage interval
    carries (:mod:`rscale.core.gallery_noise`), is left out here). Queries are independent:
    sd = sqrt(sum_q Var_q) / Q, each Var_q from ``draws`` Monte Carlo galleries (seeded: the same
    input gives the same sd); None (the default): as many as the term's own precision needs, the
    rule of the first-stage term (:func:`rscale.core.gallery_noise.draws_needed`): a first pass of
    :data:`~rscale.core.gallery_noise.FIRST_DRAWS` galleries says how many queries carry the noise,
    and a second pass draws the number that asks for, if larger.

    Example: one query, one positive with rho = 0.001 at w, m = 999: M ~ Bin(999, 0.001) and
    AP = 1 / (1 + M) has sd ~0.36 over galleries."""
    from rscale.core.gallery_noise import FIRST_DRAWS, draws_needed
    from rscale.core.rerank_law import SurvivorGrid, _check

    k, depth, n = _check(metric, k, depth, n, "plugin")
    if draws is not None and draws < 2:
        raise InvalidArgumentError(f"draws must be >= 2, got {draws}")
    rng = np.random.default_rng([seed, 17])
    grid = SurvivorGrid.build(h, n, depth)
    sizes, alive, survivors, m, jp = grid.sizes, grid.alive, grid.survivors, grid.m, grid.jp
    rho = np.where(alive, grid.rho, 2.0)                    # the dead sort last and are never counted
    qn, g = rho.shape
    order = np.argsort(rho, axis=1, kind="stable")

    def per_query_var(d: int) -> np.ndarray:
        var = np.zeros(qn)
        block = max(1, 2_000_000 // (d * g))                 # bounded memory: queries in blocks
        for lo in range(0, qn, block):
            sl = slice(lo, min(lo + block, qn))
            var[sl] = _outranking_variance(rho[sl], order[sl], jp[sl], alive[sl], m[sl], sizes[sl], survivors[sl],
                                           metric, k, d, rng)
        return var

    var = per_query_var(draws if draws is not None else FIRST_DRAWS)
    if draws is None and (need := draws_needed(var, FIRST_DRAWS)) > FIRST_DRAWS:
        var = per_query_var(need)          # a fresh pass: the variances of one pass only (no pooling)
    return float(np.sqrt(var.sum()) / qn)


def _outranking_variance(rho, order, jp, alive, m, sizes, survivors, metric, k, draws, rng) -> np.ndarray:
    """Per query, the variance over ``draws`` galleries of the metric with nested outranking counts."""
    from rscale.core.law import _within
    qn, g = rho.shape
    idx = np.arange(qn)
    counts = np.zeros((draws, qn, g))
    prev_rho, prev = np.zeros(qn), np.zeros((draws, qn))
    for i in range(g):                                       # nested Binomial increments, increasing rho
        r_i = rho[idx, order[:, i]]
        live = r_i <= 1.0
        step = np.where(live & (r_i > prev_rho), (r_i - prev_rho) / np.maximum(1.0 - prev_rho, 1e-300), 0.0)
        prev = prev + rng.binomial(np.maximum(m[None, :] - prev, 0).astype(np.int64), np.clip(step, 0.0, 1.0)[None, :])
        counts[:, idx, order[:, i]] = prev
        prev_rho = np.where(live, np.maximum(prev_rho, r_i), prev_rho)
    r = jp[None] + counts
    hit = _within(r, k) & alive[None]
    if metric in ("R", "RR"):
        best = np.argmin(np.where(alive, jp, np.inf), axis=1)
        rb, hb = r[:, idx, best], hit[:, idx, best]
        v = np.where(hb, 1.0 / rb if metric == "RR" else 1.0, 0.0)
    elif metric == "AP":
        v = np.where(hit, jp[None] / r, 0.0).sum(axis=2) / np.minimum(k, sizes)[None]
    else:
        v = hit.sum(axis=2) / sizes[None]
    v = np.where(survivors[None] > 0, v, 0.0)
    return v.var(axis=0, ddof=1)


_MEMOS: list = []          # [(inp, x, x_replicates, memo)], most recent last
_MEMO_VERSIONS = 8


def _memo(inp, x, x_replicates) -> dict:
    """The in-process memo of :func:`reranked_intervals` for one (reranked input, hardness,
    replicates): its tables and each evaluated cell, so a version queried again (another cell set,
    the same N) re-evaluates nothing. Kept only for inputs that cannot change under it: the same
    objects, with read-only arrays (as the registry decodes them: ``rscale.store.registry``);
    anything else gets a fresh dict. The last ``_MEMO_VERSIONS`` inputs are kept."""
    frozen = all(isinstance(a, np.ndarray) and not a.flags.writeable for a in (x, x_replicates) if a is not None)
    frozen = frozen and all(not a.flags.writeable for a in (inp.pos_rerank, inp.offsets, *(a for s in inp.sets
                                                                                          for a in (s.grid, s.joint))))
    if not frozen:
        return {}
    for i, (a, b, c, memo) in enumerate(_MEMOS):
        if a is inp and b is x and c is x_replicates:
            _MEMOS.append(_MEMOS.pop(i))
            return memo
    memo = {}
    _MEMOS.append((inp, x, x_replicates, memo))
    del _MEMOS[:-_MEMO_VERSIONS]
    return memo


# The law metrics whose reranked point is half-sample corrected by default (rscale query, rscale
# predict-rerank): decided by the rule and cells written down before measuring, docs/benchmarks.md
# "Half-sample correction in rscale query ... reranked@K'" (every mode), and, by the same rule on the
# same cells in the expected mode, "Half-sample correction of reranked mAP and MRR in the expected
# mode" (the plug-in mode is biased low by itself, and the correction overshot it).
CORRECTED_METRICS: tuple = ("R",)
CORRECTED_IN_EXPECTED_MODE: tuple = ("AP", "RR")


def reranked_intervals(inp: RerankedInput, x, x_replicates, cells, *, depth: int, ci_kind: str = "benchmark",
                       level: float = 0.95, bootstrap: int = 1000, seed: int = 0, gallery_noise: bool = True,
                       corrected=None):
    """Per (metric, k, N, mode) cell: (per-query reranked values, low, high) of the interval of
    kind ``ci_kind`` (:func:`rscale.core.interval.metric_intervals`: replicate i is the
    prediction redone on half-sample i; with ``gallery_noise``, plus the realised gallery's own
    outranking noise, :func:`gallery_sd` of the point prediction). Without replicates the
    benchmark bounds are NaN.

    For a metric in ``corrected`` (None: :data:`CORRECTED_METRICS` in any mode and
    :data:`CORRECTED_IN_EXPECTED_MODE` in the expected mode) the per-query values are
    half-sample corrected (:func:`rscale.core.rerank_law.half_sample_corrected`, 2 v_S - mean of
    the replicates: the joint tail's Jensen bias removed to first order) whenever the replicates
    are computed; the interval is then centred on the corrected values with the replicates'
    spread unchanged (the pair half-differences do not move with the point) and the population
    bootstrap resamples the corrected values."""
    from rscale.core.interval import metric_intervals
    from rscale.core.rerank_law import half_sample_corrected, reranked_per_query_stacked

    if corrected is None:
        corrected, in_expected = tuple(CORRECTED_METRICS), tuple(CORRECTED_IN_EXPECTED_MODE)
    else:
        corrected, in_expected = tuple(corrected), ()
    memo = _memo(inp, x, x_replicates)
    if "sets" not in memo:
        memo["sets"] = reranked_sets(inp, x, x_replicates)
    point, reps = memo["sets"]
    with_reps = bool(reps) and not (ci_kind == "population" and not bootstrap)
    tables = [point, *reps] if with_reps else [point]

    def evaluated(metric, k, n, mode):
        key = ("values", metric, k, float(n), mode, depth, len(tables))
        if key not in memo:
            memo[key] = reranked_per_query_stacked(tables, metric, n, k, depth=depth, mode=mode)
        return memo[key]

    values = [evaluated(*cell) for cell in cells]
    pqs = np.stack([v[0] for v in values])                  # (C, Q); the point and the replicates in one pass
    rep_values = np.stack([v[1:] for v in values]) if with_reps else None
    gsd = None
    if gallery_noise and rep_values is not None:
        def noise(metric, k, n):
            key = ("gallery", metric, k, float(n), depth, seed)
            if key not in memo:
                memo[key] = gallery_sd(point, metric, n, k, depth=depth, seed=seed)
            return memo[key]
        gsd = np.array([noise(metric, k, n) for metric, k, n, _mode in cells])
    if rep_values is not None:
        for i, (metric, _k, _n, mode) in enumerate(cells):
            if metric in corrected or (mode == "expected" and metric in in_expected):
                pqs[i] = half_sample_corrected(pqs[i], rep_values[i])
    _, lo, hi = metric_intervals(pqs, rep_values, ci_kind=ci_kind, level=level, bootstrap=bootstrap, seed=seed,
                                 gallery_sd=gsd)
    return [(pqs[i], float(lo[i]), float(hi[i])) for i in range(len(cells))]


__all__ = ["CORRECTED_IN_EXPECTED_MODE", "CORRECTED_METRICS", "JointTails", "RerankedInput", "gallery_sd", "reranked_input", "reranked_intervals",
           "reranked_sets", "supported_depth"]
