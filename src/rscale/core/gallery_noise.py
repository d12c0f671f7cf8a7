"""The realised benchmark value's own noise over galleries: the part of the benchmark interval
that no replicate of the estimate carries.

A benchmark value is the metric of one gallery of N distractors. Given the hardness, positive j
of a query is outranked by K_j ~ Binomial(N, x_j) of them, so the realised value varies from
gallery to gallery around what the law predicts (the expected mode predicts its mean). The
stored replicates carry the estimate's uncertainty (which distractors were sampled, the tail
model's parameters), never this; :func:`realised_sd` computes it, and the interval
(:func:`rscale.core.interval.metric_intervals`, ``gallery_sd``) adds it in quadrature, as the
reranked metric's outranking noise already was (:func:`rscale.core.rerank_replicates.gallery_sd`).

How: Monte Carlo galleries under the point hardness. The counts of one query are
nested (a distractor that outranks a positive outranks every harder one too): in order of
increasing x, K_(1) ~ Bin(N, x_(1)), K_(i) = K_(i-1) + Bin(N - K_(i-1), (x_(i) - x_(i-1)) /
(1 - x_(i-1))), exactly the joint law of the counts. Each draw's per-query metric is the law's
plug-in on K / N (exact for realised counts, :meth:`rscale.core.law.Hardness.from_counts`).
Queries are independent, so sd = sqrt(sum_q Var_q) / Q, each Var_q over the draws (seeded:
the same hardness gives the same sd in every command). When the gallery contains the sample
(``rscale predict --in-pool``) the sampled counts c are fixed and only the N - S unseen
distractors vary: K_j = c_j + their nested counts.

How many galleries: as many as the term's own precision needs, not a fixed budget. The sum of
Q per-query variances, each estimated from D draws, has a relative sd of about
sqrt(2 / ((D - 1) Q_eff)), Q_eff = (sum_q Var_q)^2 / sum_q Var_q^2 (the number of queries that
carry the noise). :data:`FIRST_DRAWS` galleries are drawn; if Q_eff estimated from them asks for
more to reach :data:`PRECISION`, the rest are drawn from the same seeded stream, up to
:data:`MAX_DRAWS`. So a table of thousands of queries stops at 8 galleries (the term to ~1-2%,
measured), a table of a few dozen queries about a hundred. The earlier fixed budget (about 1M
positive-draws, 16-256 galleries) spent ~85 ms of a 500-query real table's ~210 ms new-cell query
on a term already known to 0.2-1.8% (docs/benchmarks.md, "The realised value's gallery noise").

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

FIRST_DRAWS = 8     # galleries always drawn
MAX_DRAWS = 256     # the most a cell draws (a handful of queries)
PRECISION = 0.05    # the term's own Monte Carlo sd, relative: it adds in quadrature to the rest
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


def draws_needed(per_query_var: np.ndarray, drawn: int, precision: float = PRECISION) -> int:
    """How many galleries the sum of ``per_query_var`` (each estimated from ``drawn`` draws) needs
    for a relative sd of ``precision``: 1 + 2 / (precision^2 Q_eff), at least ``drawn``, at most
    :data:`MAX_DRAWS` (module docstring)."""
    v = np.asarray(per_query_var, dtype=np.float64)
    total = float(v.sum())
    if total <= 0.0:                           # no query varies: the term is 0, exactly
        return drawn
    q_eff = total * total / float(np.dot(v, v))
    return int(np.clip(np.ceil(1.0 + 2.0 / (precision * precision * q_eff)), drawn, MAX_DRAWS))


def realised_sd(x: np.ndarray, offsets: np.ndarray, metric: str, n: float, k: int | None, *,
                base_counts: np.ndarray | None = None, n_sampled: np.ndarray | None = None,
                draws: int | None = None, seed: int = SEED) -> float:
    """The sd over galleries of ``n`` distractors of the realised benchmark value (the mean over
    queries of ``metric`` at cut-off ``k``) under the hardness ``x`` (P,), any order within a
    query. ``base_counts`` (P,) with ``n_sampled`` (Q,): the gallery contains the sample, whose
    counts are fixed; the n - S_q unseen distractors vary. ``draws``: that many galleries; None
    (the default, what every command uses): as many as :data:`PRECISION` needs (module docstring)."""
    if draws is not None and draws < 2:
        raise InvalidArgumentError(f"draws must be >= 2, got {draws}")
    x = np.asarray(x, dtype=np.float64)
    off = ragged.check_offsets(offsets, x.size)
    ni = int(round(float(n)))
    order = ragged.sort_within_groups(x, off)
    x_sorted = x[order]
    total = ni
    base = None
    if base_counts is not None:
        total = ni - np.asarray(n_sampled, dtype=np.int64)
        base = np.asarray(base_counts, dtype=np.int64)[order][None, :]
    rng = np.random.default_rng([seed, 5])

    def metric_draws(d: int) -> np.ndarray:                                # (d, Q)
        counts = nested_counts(x_sorted, off, total, d, rng)
        if base is not None:
            counts += base
        return law.per_query(law.Hardness.from_counts(counts, off, float(ni)), metric, float(ni), k, "plugin")

    v = metric_draws(draws if draws is not None else FIRST_DRAWS)
    if draws is None:
        more = draws_needed(np.var(v, axis=0, ddof=1), v.shape[0]) - v.shape[0]
        if more > 0:
            v = np.concatenate([v, metric_draws(more)])
    return float(np.sqrt(np.var(v, axis=0, ddof=1).sum()) / v.shape[1])
