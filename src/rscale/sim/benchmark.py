"""A simulated benchmark with exact truth at any gallery size, without materialising scores.

A benchmark is a set of queries, each with its own distractor score law F_q (see
:mod:`rscale.sim.score_laws`) and positives whose hardness x (share of F_q at or above the
positive) follows a configurable law; a positive's score is F_q's inverse survival at x.

``sample(bench, S, K, seed)``
    What a scoring engine would report for a uniform sample of S distractors: per query the top-K
    sampled scores and each positive's sampled exceedance count c_j. The top-K are drawn directly
    as order statistics of S uniforms (exponential spacings: V_(i) = G_i / (G_K + Gamma(S+1-K)),
    G the cumulative sum of K unit exponentials) mapped through the inverse survival, so the cost is
    O(K) per query for any S. A count beyond the top K is K plus a Binomial draw over the other
    S - K sampled distractors, conditioned on V_(K) and nested across the query's positives.

``truth(bench, sample, N, seed)``
    The realised counts K_j of a gallery of N distractors that *contains* the sample: the sample's
    c_j plus nested Binomial increments over the other N - S distractors (multinomial over the
    intervals between the positives' hardness values, so counts are jointly consistent). Returns the
    exact realised metric at N up to 1e9 and beyond. The same mechanism is the finite-pool case: a
    pool of P distractors with the sample drawn from it is a gallery of N = P that contains the
    sample, and its realised metric is the target there.

Targets. ``truth`` is a *realised* benchmark value (what indexing the full gallery would print).
The law's ``plugin`` mode on the true hardness predicts it; its ``expected`` mode targets the
average over galleries of size N, which is higher because AP is convex in the count. When N is
close to S (a small pool sampled heavily) the unseen N - S distractors add little and a
prediction should condition on the observed counts instead of using N x alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from rscale.core import ragged
from rscale.core.law import Hardness
from rscale.core.sample_stats import SampleStats, count_at_or_above
from rscale.errors import InvalidArgumentError
from rscale.sim import score_laws


@dataclass(frozen=True)
class HardnessLaw:
    """How positives' hardness is drawn.

    ``kind``: ``power`` (density proportional to x^-alpha on [x_min, x_max], alpha ~ 1.2 as
    measured in the paper) or ``loguniform`` (alpha = 1). A share ``immune`` of positives get a
    hardness log-uniform in [1e-15, 1e-12] (never outranked at any practical N). ``rho`` correlates
    the hardness of one query's positives (Gaussian copula): some queries are hard throughout.
    """

    kind: str = "power"
    alpha: float = 1.2
    x_min: float = 1e-10
    x_max: float = 1e-2
    immune: float = 0.1
    rho: float = 0.5

    def draw(self, n_pos: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        from scipy.special import ndtr
        if not 0 < self.x_min < self.x_max <= 1:
            raise InvalidArgumentError("hardness law needs 0 < x_min < x_max <= 1")
        qidx = np.repeat(np.arange(n_pos.size), n_pos)
        z = (np.sqrt(self.rho) * rng.standard_normal(n_pos.size)[qidx]
             + np.sqrt(1 - self.rho) * rng.standard_normal(qidx.size))
        u = ndtr(z)
        lo, hi = np.log(self.x_min), np.log(self.x_max)
        if self.kind == "loguniform" or (self.kind == "power" and abs(self.alpha - 1) < 1e-12):
            x = np.exp(lo + u * (hi - lo))
        elif self.kind == "power":
            e = 1.0 - self.alpha
            x = (self.x_min ** e + u * (self.x_max ** e - self.x_min ** e)) ** (1.0 / e)
        else:
            raise InvalidArgumentError(f"unknown hardness law {self.kind!r}; expected power or loguniform")
        immune = rng.random(x.size) < self.immune
        x[immune] = np.exp(rng.uniform(np.log(1e-15), np.log(1e-12), int(immune.sum())))
        return x


@dataclass(frozen=True)
class SimSpec:
    """Everything that defines a simulated benchmark (a named, clearly simulated backbone)."""

    name: str = "sim"
    family: str = "bounded"
    n_queries: int = 1000
    mean_positives: float = 5.0
    hardness: HardnessLaw = field(default_factory=HardnessLaw)
    benchmark: str = "sim-ilias"


@dataclass(frozen=True)
class SimBenchmark:
    spec: SimSpec
    law: object                 # a score law from rscale.sim.score_laws
    query_ids: np.ndarray
    pos_offsets: np.ndarray
    pos_ids: np.ndarray
    pos_x: np.ndarray           # true hardness, sorted ascending within each query
    pos_scores: np.ndarray      # F_q^{-1}(1 - x), descending within each query

    @property
    def hardness(self) -> Hardness:
        return Hardness.from_flat(self.pos_x, self.pos_offsets)


def simulate(spec: SimSpec, seed: int = 0) -> SimBenchmark:
    """Draw queries, their score laws and their positives."""
    if spec.n_queries < 1:
        raise InvalidArgumentError("a simulated benchmark needs at least one query")
    rng = np.random.default_rng([seed, 1])
    law = score_laws.draw_laws(spec.family, spec.n_queries, rng)
    n_pos = 1 + rng.poisson(max(spec.mean_positives - 1.0, 0.0), spec.n_queries)
    offsets = np.concatenate([[0], np.cumsum(n_pos)]).astype(np.int64)
    x = spec.hardness.draw(n_pos, rng)
    x = x[ragged.sort_within_groups(x, offsets)]
    qidx = ragged.group_index(offsets)
    scores = law.isf(x, qidx)
    query_ids = np.array([f"q{i:05d}" for i in range(spec.n_queries)])
    pos_ids = np.char.add(np.char.add(query_ids[qidx], "/p"),
                          ragged.position_in_group(offsets).astype(str))
    return SimBenchmark(spec, law, query_ids, offsets, pos_ids, x, scores)


def _nested_binomial(total: np.ndarray, lower: np.ndarray, x: np.ndarray, offsets: np.ndarray,
                     rng: np.random.Generator) -> np.ndarray:
    """Counts of ``total[q]`` iid Uniform(lower[q], 1) values at or below each x (sorted per query).

    Jointly consistent: the counts in successive intervals are a multinomial draw, made as a chain
    of conditional Binomials, one position-in-query at a time (vectorised over queries).
    """
    n_pos = np.diff(offsets)
    out = np.zeros(x.size, dtype=np.int64)
    remaining = total.astype(np.int64).copy()
    prev_edge = lower.astype(np.float64).copy()
    acc = np.zeros(n_pos.size, dtype=np.int64)
    for j in range(int(n_pos.max(initial=0))):
        qs = np.flatnonzero(n_pos > j)
        idx = offsets[qs] + j
        edge = np.maximum(x[idx], prev_edge[qs])
        with np.errstate(divide="ignore", invalid="ignore"):
            p = (edge - prev_edge[qs]) / (1.0 - prev_edge[qs])
        p = np.clip(np.nan_to_num(p, nan=1.0), 0.0, 1.0)
        inc = rng.binomial(remaining[qs], p)
        remaining[qs] -= inc
        acc[qs] += inc
        prev_edge[qs] = edge
        out[idx] = acc[qs]
    return out


def sample(bench: SimBenchmark, s: int, k: int = 4000, seed: int = 0, *, halves: bool = False) -> SampleStats:
    """Sample stats of a uniform sample of ``s`` distractors (see the module docstring).
    ``halves``: also record half-sample membership as ``rscale score --halves`` does
    (:func:`simulated_halves`), so that backbones sampled with the same ``seed``, ``s`` and ``k``
    pair in ``for A vs B``."""
    s, k = int(s), int(k)
    if k < 1 or s < k:
        raise InvalidArgumentError(f"need 1 <= K <= S; got K={k}, S={s}")
    rng = np.random.default_rng([seed, 2])
    q = bench.query_ids.size
    n = np.full(q, s, dtype=np.int64)
    law = bench.law
    if hasattr(law, "sample_top"):
        top = law.sample_top(n, k, rng)
    else:
        top = score_laws.top_scores_by_inversion(law, n, k, rng)
    # Survival at the K-th sampled score: the other S - K sampled distractors are iid from the
    # law truncated below it, i.e. their survival values are Uniform(v_k, 1).
    v_k = law.sf(top[:, -1], np.arange(q))
    off = bench.pos_offsets
    counts = count_at_or_above(top, off, bench.pos_scores)
    # Positives below the K-th sampled score: K plus the others of the S - K distractors above them.
    beyond = counts >= k
    extra = _nested_binomial(np.full(q, s - k), v_k, np.where(beyond, bench.pos_x, 0.0), off, rng)
    counts = np.where(beyond, k + extra, counts)
    meta = {"backbone": bench.spec.name, "benchmark": bench.spec.benchmark,
            "distractor_source": f"sim:{bench.spec.family}", "sampler": "sim-order-statistics",
            "seed": str(seed), "k": str(k)}
    ss = SampleStats(query_ids=bench.query_ids.copy(), n_sampled=np.full(q, s, dtype=np.int64),
                     top_scores=top, pos_offsets=off.copy(), pos_ids=bench.pos_ids.copy(),
                     pos_scores=bench.pos_scores.copy(), pos_counts=counts.astype(np.int64),
                     meta=meta)
    return simulated_halves(ss, seed) if halves else ss


def simulated_halves(ss: SampleStats, seed: int) -> SampleStats:
    """``ss`` with recorded half-sample membership (sample stats schema version 3,
    :mod:`rscale.core.halves`) for the simulator's distractors, which have no ids of their own.

    The simulator draws each query's sampled distractors by their survival order (the top-K
    scores are the K smallest survival values), so its stable distractor identity is (sample
    seed, query, rank in survival order), shared by every backbone simulated with that seed, S and
    K. Membership is a property of that identity: bit i of a byte drawn from a generator seeded by
    (seed, S, K) alone, never by the backbone, so the top entries' bytes and the half sizes
    (top-K part plus Binomial(S - K, 1/2) for the rest) are the same for every such backbone and
    their replicates pair. A positive's half-A counts are read off the top bytes inside the list;
    beyond it (c > K) the c - K distractors above it add nested hypergeometric draws from the rest. ``meta['sample_ids']`` names the
    sampled set (``sim seed=... S=... K=...``) in place of the scoring engine's id digest.
    Example: ``sample(a, 1e5, 400, seed=2, halves=True)`` and the same for another preset ``b``
    have one split key."""
    from dataclasses import replace

    from rscale.core.halves import RULE
    from rscale.core.sample_stats import HALF_SPLITS

    q, k = ss.top_scores.shape
    s = int(ss.n_sampled.max())
    if np.any(ss.n_sampled != s):
        raise InvalidArgumentError("simulated halves need one S for every query")
    rng = np.random.default_rng([seed, 29, s, k])
    top_halves = rng.integers(0, 256, (q, k), dtype=np.uint8)
    bits = (top_halves[:, :, None] >> np.arange(HALF_SPLITS, dtype=np.uint8)) & 1            # (Q, K, 8)
    cum = np.concatenate([np.zeros((q, 1, HALF_SPLITS), np.int64), np.cumsum(bits, axis=1, dtype=np.int64)], axis=1)
    rest_a = rng.binomial(s - k, 0.5, (q, HALF_SPLITS)).astype(np.int64)                    # half A beyond the list
    n_halves = cum[:, -1] + rest_a
    pq = ss.positive_query()
    c = ss.pos_counts
    pos_halves = cum[pq, np.minimum(c, k)]                                                   # (P, 8)
    beyond = np.flatnonzero(c > k)
    if beyond.size:
        # nested draws per query, positives by ascending count: half A among the next (c - prev) of the rest
        prng = np.random.default_rng([seed, 31, s, k])
        prev_q, prev_c, taken = -1, k, np.zeros(HALF_SPLITS, np.int64)
        for i in beyond[np.lexsort((c[beyond], pq[beyond]))]:
            if pq[i] != prev_q:
                prev_q, prev_c, taken = pq[i], k, np.zeros(HALF_SPLITS, np.int64)
            m, good = int(c[i] - prev_c), rest_a[pq[i]] - taken     # half A left among the s - prev_c not counted
            if m:
                taken = taken + prng.hypergeometric(good, s - prev_c - good, m)
            pos_halves[i] = cum[pq[i], k] + taken
            prev_c = int(c[i])
    meta = {**ss.meta, "halves_rule": RULE, "sample_ids": f"sim seed={seed} S={s} K={k}"}
    return replace(ss, top_halves=top_halves, pos_halves=pos_halves.astype(np.int64), n_halves=n_halves, meta=meta)


def truth_counts(bench: SimBenchmark, ss: SampleStats, n: float, seed: int = 0) -> np.ndarray:
    """Realised counts K_j in a gallery of ``n`` distractors containing the sample ``ss``."""
    n = int(round(float(n)))
    s = ss.n_sampled
    if np.any(n < s):
        raise InvalidArgumentError(f"gallery size N={n} is smaller than the sample S={int(s.max())}")
    rng = np.random.default_rng([seed, 3, n])
    q = bench.query_ids.size
    extra = _nested_binomial(n - s, np.zeros(q), bench.pos_x, bench.pos_offsets, rng)
    return ss.pos_counts + extra


def truth(bench: SimBenchmark, ss: SampleStats, n: float, metric: str = "AP",
          k: int | None = 1000, seed: int = 0) -> np.ndarray:
    """Exact realised per-query metric at gallery size ``n`` (ranks j + K_j)."""
    return _metric_of_counts(truth_counts(bench, ss, n, seed), bench.pos_offsets, metric, k)


def _metric_of_counts(counts, off, metric: str, k):
    from rscale.core import metrics
    ranks = metrics.ranks_from_counts(counts, off)
    if metric == "AP":
        return metrics.ap_at_k(ranks, off, k)
    if metric == "R":
        return metrics.hit_at_k(ranks, off, 1 if k is None else k)
    if metric == "Recall":
        return metrics.recall_at_k(ranks, off, k)
    if metric == "RR":
        return metrics.reciprocal_rank(ranks, off, k)
    raise InvalidArgumentError(f"unknown metric {metric!r}")


def with_positives(bench: SimBenchmark, x: np.ndarray, name: str) -> SimBenchmark:
    """``bench`` with its positives' hardness replaced by ``x`` (same order as ``bench.pos_x``; kept
    sorted within each query): the same queries and score laws, so a sample drawn with the same
    seed holds the same distractors with the same top-K scores. A version that differs from
    ``bench`` in its positives alone (what two versions need for a paired difference,
    :func:`rscale.core.replicates.split_key`). Example: ``with_positives(b, b.pos_x * 1.6, "b2")``."""
    x = np.clip(np.asarray(x, dtype=np.float64), 0.0, 1.0)
    if x.shape != bench.pos_x.shape or np.any(np.diff(x)[np.diff(ragged.group_index(bench.pos_offsets)) == 0] < 0):
        raise InvalidArgumentError("with_positives needs one hardness per positive, ascending within each query")
    qidx = ragged.group_index(bench.pos_offsets)
    return SimBenchmark(replace(bench.spec, name=name), bench.law, bench.query_ids, bench.pos_offsets,
                        bench.pos_ids, x, bench.law.isf(x, qidx))


def truth_shared(benches, samples, n: float, metric: str = "AP", k: int | None = 1000, seed: int = 0) -> list:
    """Exact realised per-query metric of several versions (``benches`` from :func:`with_positives`
    of one benchmark, ``samples`` drawn with one seed) in ONE gallery of ``n`` distractors that
    contains the sample: the n - S unsampled distractors are the same for all, one multinomial
    over the intervals between every version's hardness values (each version alone is distributed
    as :func:`truth`). The difference of two is the difference on the same benchmark."""
    n = int(round(float(n)))
    off = benches[0].pos_offsets
    x = np.concatenate([b.pos_x for b in benches])
    q = np.tile(ragged.group_index(off), len(benches))
    order = np.lexsort((x, q))
    joint = np.concatenate([[0], np.cumsum(len(benches) * np.diff(off))])
    extra = np.empty(x.size, dtype=np.int64)
    extra[order] = _nested_binomial(n - samples[0].n_sampled, np.zeros(off.size - 1), x[order], joint,
                                    np.random.default_rng([seed, 3, n]))
    p = off[-1]
    return [_metric_of_counts(ss.pos_counts + extra[i * p:(i + 1) * p], off, metric, k)
            for i, ss in enumerate(samples)]
