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


def reranked_intervals(inp: RerankedInput, x, x_replicates, cells, *, depth: int, ci_kind: str = "benchmark",
                       level: float = 0.95, bootstrap: int = 1000, seed: int = 0):
    """Per (metric, k, N, mode) cell: (per-query reranked values, low, high) of the interval of
    kind ``ci_kind`` (:func:`rscale.core.interval.metric_intervals`: replicate i is the
    prediction redone on half-sample i). Without replicates the benchmark bounds are NaN."""
    from rscale.core.interval import metric_intervals
    from rscale.core.rerank_law import reranked_per_query

    point, reps = reranked_sets(inp, x, x_replicates)
    pqs = np.stack([reranked_per_query(point, metric, n, k, depth=depth, mode=mode) for metric, k, n, mode in cells])
    rep_values = None
    if reps and not (ci_kind == "population" and not bootstrap):
        rep_values = np.stack([np.stack([reranked_per_query(h, metric, n, k, depth=depth, mode=mode) for h in reps])
                               for metric, k, n, mode in cells])
    _, lo, hi = metric_intervals(pqs, rep_values, ci_kind=ci_kind, level=level, bootstrap=bootstrap, seed=seed)
    return [(pqs[i], float(lo[i]), float(hi[i])) for i in range(len(cells))]


__all__ = ["JointTails", "RerankedInput", "reranked_input", "reranked_intervals", "reranked_sets", "supported_depth"]
