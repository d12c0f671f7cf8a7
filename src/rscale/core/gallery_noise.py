"""The realised benchmark value's own noise over galleries: the part of the benchmark interval
that no replicate of the estimate carries.

A benchmark value is the metric of one gallery of N distractors. Given the hardness, positive j
of a query is outranked by K_j ~ Binomial(N, x_j) of them, so the realised value varies from
gallery to gallery around what the law predicts (the expected mode predicts its mean). The
stored replicates carry the estimate's uncertainty (which distractors were sampled, the tail
model's parameters), never this; :func:`realised_sd` computes it, and the interval
(:func:`rscale.core.interval.metric_intervals`, ``gallery_sd``) adds it in quadrature, as the
reranked metric's outranking noise already was (:func:`rscale.core.rerank_replicates.gallery_sd`).

How: ``draws`` Monte Carlo galleries under the point hardness. The counts of one query are
nested (a distractor that outranks a positive outranks every harder one too): in order of
increasing x, K_(1) ~ Bin(N, x_(1)), K_(i) = K_(i-1) + Bin(N - K_(i-1), (x_(i) - x_(i-1)) /
(1 - x_(i-1))), exactly the joint law of the counts. Each draw's per-query metric is the law's
plug-in on K / N (exact for realised counts, :meth:`rscale.core.law.Hardness.from_counts`).
Queries are independent, so sd = sqrt(sum_q Var_q) / Q, each Var_q over the draws (seeded:
the same hardness gives the same sd in every command). When the gallery contains the sample
(``rscale predict --in-pool``) the sampled counts c are fixed and only the N - S unseen
distractors vary: K_j = c_j + their nested counts.

Measured against the simulator's realised truth (tests/test_gallery_noise.py): the sd over
sim.truth galleries of one benchmark. Size on the simulator sets: about 0.001-0.003 of mAP@1000
for ~1,000 queries at N = 1e8 (docs/benchmarks.md, "The realised value's gallery noise").

Example: one query, one positive with x = 1e-8 at N = 1e8: K ~ Bin(1e8, 1e-8) ~ Poisson(1) and
AP@1000 = 1 / (1 + K) has sd ~0.30 over galleries.
"""

from __future__ import annotations

import numpy as np

from rscale.core import law, ragged
from rscale.errors import InvalidArgumentError

DRAWS = 32          # galleries per cell: the sd to ~13% (a term added in quadrature to the rest)
SEED = 4111


def nested_counts(x_sorted: np.ndarray, offsets: np.ndarray, total, draws: int,
                  rng: np.random.Generator) -> np.ndarray:
    """(draws, P) counts of ``total`` (scalar or per query) iid distractors at or above each
    positive, for hardness ``x_sorted`` ascending within each query: the nested Binomial chain of
    the module docstring, vectorised over queries one position at a time."""
    off = np.asarray(offsets, dtype=np.int64)
    q = off.size - 1
    n_pos = np.diff(off)
    remaining = np.broadcast_to(np.asarray(total, dtype=np.int64), (q,))[None, :].repeat(draws, axis=0)
    if np.any(remaining < 0):
        raise InvalidArgumentError("a gallery needs at least as many distractors as the sample it contains")
    acc = np.zeros((draws, q), dtype=np.int64)
    prev = np.zeros(q)
    out = np.empty((draws, x_sorted.size), dtype=np.int64)
    for p in range(int(n_pos.max(initial=0))):
        qs = np.flatnonzero(n_pos > p)
        idx = off[qs] + p
        edge = np.maximum(x_sorted[idx], prev[qs])
        room = 1.0 - prev[qs]
        step = np.clip(np.divide(edge - prev[qs], room, out=np.zeros_like(room), where=room > 0), 0.0, 1.0)
        inc = rng.binomial(remaining[:, qs], step[None, :])
        remaining[:, qs] -= inc
        acc[:, qs] += inc
        prev[qs] = edge
        out[:, idx] = acc[:, qs]
    return out


def realised_sd(x: np.ndarray, offsets: np.ndarray, metric: str, n: float, k: int | None, *,
                base_counts: np.ndarray | None = None, n_sampled: np.ndarray | None = None,
                draws: int = DRAWS, seed: int = SEED) -> float:
    """The sd over galleries of ``n`` distractors of the realised benchmark value (the mean over
    queries of ``metric`` at cut-off ``k``) under the hardness ``x`` (P,), any order within a
    query. ``base_counts`` (P,) with ``n_sampled`` (Q,): the gallery contains the sample, whose
    counts are fixed; the n - S_q unseen distractors vary."""
    if draws < 2:
        raise InvalidArgumentError(f"draws must be >= 2, got {draws}")
    x = np.asarray(x, dtype=np.float64)
    off = ragged.check_offsets(offsets, x.size)
    ni = int(round(float(n)))
    order = ragged.sort_within_groups(x, off)
    total = ni
    if base_counts is not None:
        total = ni - np.asarray(n_sampled, dtype=np.int64)
    counts = nested_counts(x[order], off, total, draws, np.random.default_rng([seed, 5]))
    if base_counts is not None:
        counts += np.asarray(base_counts, dtype=np.int64)[order][None, :]
    h = law.Hardness.from_counts(counts, off, float(ni))
    v = law.per_query(h, metric, float(ni), k, "plugin")            # (draws, Q)
    return float(np.sqrt(np.var(v, axis=0, ddof=1).sum()) / v.shape[1])
