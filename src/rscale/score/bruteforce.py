"""Dense reference scoring: descriptors -> sample stats, for small sets (tests, validation).

Materialises the Q x D score matrix, so it is only for small galleries; the streaming engine
must agree with it exactly.
"""

from __future__ import annotations

import numpy as np

from rscale.core.sample_stats import SampleStats, validate
from rscale.errors import InvalidArgumentError


def sample_stats_dense(queries, query_ids, positives_of, positives, positive_ids, distractors,
                       k: int, meta: dict | None = None) -> SampleStats:
    """Top-k distractor scores and at-or-above counts for every query against ``distractors``.

    ``positives_of(q)`` returns the indices (into ``positives``) of query q's positives.
    Scores are inner products computed in float64 from the stored vectors.
    """
    q_count, s = len(queries), len(distractors)
    if k < 1 or s < k:
        raise InvalidArgumentError(f"need 1 <= k <= number of distractors; got k={k}, S={s}")
    qv = np.asarray(queries, dtype=np.float64)
    scores = qv @ np.asarray(distractors, dtype=np.float64).T           # (Q, S)
    top = -np.sort(-scores, axis=1)[:, :k]
    sorted_asc = np.sort(scores, axis=1)
    pos_idx = [np.asarray(positives_of(q), dtype=np.int64) for q in range(q_count)]
    sizes = np.array([p.size for p in pos_idx])
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    flat = np.concatenate(pos_idx) if pos_idx else np.zeros(0, np.int64)
    pq = np.repeat(np.arange(q_count), sizes)
    pscore = np.einsum("ij,ij->i", qv[pq], np.asarray(positives, dtype=np.float64)[flat])
    counts = np.array([s - np.searchsorted(sorted_asc[q], v, side="left") for q, v in zip(pq, pscore)],
                      dtype=np.int64)
    ss = SampleStats(query_ids=np.asarray(query_ids).astype(str), n_sampled=np.full(q_count, s, np.int64),
                     top_scores=top, pos_offsets=offsets, pos_ids=np.asarray(positive_ids).astype(str)[flat],
                     pos_scores=pscore, pos_counts=counts, meta={**(meta or {}), "k": str(k)})
    return validate(ss)
