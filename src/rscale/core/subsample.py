"""Uniform sub-samples of a sample, derived from its sample stats alone (pure numpy).

Keeping each of the S sampled distractors independently with probability p gives a uniform
sample of the pool of size S' ~ Binomial(S, p). Its top scores are exactly the kept entries of
the original top-K list (anything kept that beat the original K-th score was in that list), and a
positive's count is the number of kept distractors at or above it: read off the kept top list
when the original count was inside the list, else the kept part of the list plus a thinning of
the c - K distractors beyond it. Increments between successive positives (and up to S) are
thinned independently, so all counts of a query stay nested and consistent. Sub-samples of
sub-samples are nested samples: what the sufficient-budget diagnostic needs.

Rerank scores (schema version 2) travel with the kept candidates
(:func:`rscale.core.sample_stats.kept_rerank_scores`).
"""

from __future__ import annotations

import numpy as np

from rscale.core.sample_stats import SampleStats, count_at_or_above, kept_rerank_scores
from rscale.errors import InvalidArgumentError


def subsample(ss: SampleStats, p: float, seed: int = 0, k: int | None = None,
              complement: bool = False) -> SampleStats:
    """Sample stats of a uniform p-thinning of the sample; the top lists keep ``k`` scores
    (default: the smallest number of kept top scores over queries, which must be at least 1).
    ``k=0`` keeps no top score: the counts and S alone, still exact (what the curve baselines
    read; a chain of default sub-samples cuts every query's list to the fewest kept, so K shrinks
    faster than S and runs out on short lists).

    ``complement=True`` returns the distractors the same ``seed`` would *not* keep: with p = 1/2
    the two calls give disjoint halves of the sample.
    """
    if not 0.0 < p <= 1.0:
        raise InvalidArgumentError(f"sub-sample share must lie in (0, 1], got {p}")
    if p == 1.0 and not complement:
        return ss
    rng = np.random.default_rng([seed, 17])
    q, kk = ss.top_scores.shape
    keep = rng.random((q, kk)) < p
    if complement:
        keep = ~keep
    n_kept = keep.sum(axis=1)
    k_new = int(n_kept.min()) if k is None else int(k)
    need = max(k_new, 1 if k is None else 0)
    if k_new < 0 or np.any(n_kept < need):
        worst = int(np.argmin(n_kept))
        raise InvalidArgumentError(
            f"a {p:g} sub-sample of query {ss.query_ids[worst]} keeps {int(n_kept[worst])} of its {kk} top scores "
            f"(S={int(ss.n_sampled[worst])}); it needs {need} per query: a longer top list (K) or a larger sample")
    # kept scores stay in descending order when we sort keep-first, stable by position
    order = np.argsort(~keep, axis=1, kind="stable")
    top = np.take_along_axis(ss.top_scores, order, axis=1)[:, :k_new]

    # counts: nested thinning of the parts beyond the original top-K, with S as the last level
    pq = ss.positive_query()
    off = ss.pos_offsets
    order_p = np.lexsort((ss.pos_counts, pq))
    c_sorted = ss.pos_counts[order_p]
    beyond = np.maximum(c_sorted - kk, 0)
    # append S per query as a final level so that S' is thinned consistently with the counts
    sizes = np.diff(off) + 1
    ext_off = np.concatenate([[0], np.cumsum(sizes)])
    levels = np.empty(ext_off[-1], dtype=np.int64)
    last = ext_off[1:] - 1
    mask = np.ones(levels.size, dtype=bool)
    mask[last] = False
    levels[mask] = beyond
    levels[last] = ss.n_sampled - kk
    same = np.ones(levels.size, dtype=bool)
    same[ext_off[:-1]] = False
    inc = np.where(same, np.diff(levels, prepend=0), levels)
    thinned = rng.binomial(inc, p)
    if complement:
        thinned = inc - thinned
    total = np.cumsum(thinned)
    base = np.repeat(total[ext_off[:-1]] - thinned[ext_off[:-1]], sizes)
    kept_beyond = total - base
    n_sampled = n_kept + kept_beyond[last]
    kept_beyond_pos = np.empty(ss.n_positives, dtype=np.int64)
    kept_beyond_pos[order_p] = kept_beyond[mask]

    # inside the original list: count kept tops at or above the positive
    kept_scores = np.where(keep, ss.top_scores, -np.inf)
    kept_sorted = -np.sort(-kept_scores, axis=1)
    inside = count_at_or_above(kept_sorted, off, ss.pos_scores)
    counts = np.where(ss.pos_counts >= kk, n_kept[pq] + kept_beyond_pos, inside)
    meta = {**ss.meta, "subsample": f"{1 - p if complement else p:g}", "subsample_seed": str(seed)}
    return SampleStats(query_ids=ss.query_ids, n_sampled=n_sampled.astype(np.int64), top_scores=top,
                       pos_offsets=off, pos_ids=ss.pos_ids, pos_scores=ss.pos_scores,
                       pos_counts=counts.astype(np.int64), meta=meta, **kept_rerank_scores(ss, keep, k_new))


def split_halves(ss: SampleStats, seed: int = 0) -> tuple[SampleStats, SampleStats]:
    """Two disjoint uniform halves of the sample (same K for both)."""
    a = subsample(ss, 0.5, seed)
    b = subsample(ss, 0.5, seed, complement=True)
    k = min(a.k, b.k)
    return subsample_k(a, k), subsample_k(b, k)


def subsample_k(ss: SampleStats, k: int) -> SampleStats:
    """The same sample stats with only the top ``k`` scores kept (counts stay valid)."""
    if k == ss.k:
        return ss
    from dataclasses import replace
    rerank = {} if not ss.has_rerank else {"top_rerank": ss.top_rerank[:, :k]}
    halves = {} if not ss.has_halves else {"top_halves": ss.top_halves[:, :k]}
    return replace(ss, top_scores=ss.top_scores[:, :k], **rerank, **halves)


__all__ = ["split_halves", "subsample", "subsample_k"]
