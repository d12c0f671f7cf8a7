"""Exact reference metrics from rankings, counts or score lists (no model, no estimation).

These are the ground truth the law and the estimators are checked against.

Ranks are 1-based positions of a query's positives in its ranked gallery. Tie rule (the same as
the law's): a distractor scoring exactly a positive's score ranks *above* it (pessimistic), and
positives tied with each other keep any order (AP does not depend on it). From per-positive
distractor counts K_j (distractors at or above positive j), the ranks are r_j = j + K_j with
positives sorted by K ascending.

- :func:`ap_at_k`: ILIAS mAP@k. AP = (1 / min(k, |G|)) sum_{i<=k} P(i) rel(i); positives beyond
  rank k contribute 0. GLDv2's official mAP@100 is this formula with k = 100 (normaliser
  min(|G|, 100)). k=None gives the classic full AP (normaliser |G|).
- :func:`revisited_ap`: revisited Oxford/Paris AP (Radenovic et al. 2018): junk images are removed
  from the ranking first, then precision is averaged trapezoidally between recall steps:
  AP = sum_i (1/|G|) (p_{i-1}' + p_i) / 2 with p_{i-1}' = (i-1)/r_i (or 1 when r_i = 0) and
  p_i = i / (r_i + 1), r_i the 0-based rank of the i-th positive.

Example: positives at ranks [1, 3] with |G| = 2 give AP@1000 = (1/1 + 2/3) / 2 = 0.8333.
"""

from __future__ import annotations

import numpy as np

from rscale.core import ragged
from rscale.errors import InvalidArgumentError


def ranks_from_counts(counts, offsets) -> np.ndarray:
    """Ranks r_j = j + K_j (flat, sorted ascending inside each query) from distractor counts."""
    counts = np.asarray(counts, dtype=np.int64)
    off = ragged.check_offsets(offsets, counts.size)
    if np.any(counts < 0):
        raise InvalidArgumentError("distractor counts must be >= 0")
    order = ragged.sort_within_groups(counts, off)
    return counts[order] + ragged.position_in_group(off)


def _sorted_ranks(ranks, offsets):
    ranks = np.asarray(ranks, dtype=np.int64)
    off = ragged.check_offsets(offsets, ranks.size)
    order = ragged.sort_within_groups(ranks, off)
    r = ranks[order]
    j = ragged.position_in_group(off)
    same_query = np.diff(ragged.group_index(off)) == 0
    if np.any(r < 1) or np.any((np.diff(r) <= 0) & same_query):
        raise InvalidArgumentError("ranks must be distinct 1-based positions (r_j >= j)")
    return r, j, off


def ap_at_k(ranks, offsets, k: int | None = 1000, n_relevant=None) -> np.ndarray:
    """Per-query ILIAS AP@k from the 1-based ranks of each query's positives.

    ``n_relevant`` (per query) defaults to the number of ranks given; pass it when some positives
    are not in the list at all (they count in the normaliser and contribute 0).
    """
    r, j, off = _sorted_ranks(ranks, offsets)
    n_rel = np.diff(off) if n_relevant is None else np.asarray(n_relevant, dtype=np.int64)
    if np.any(n_rel < np.diff(off)):
        raise InvalidArgumentError("n_relevant must be at least the number of ranked positives")
    if np.any(n_rel == 0):
        raise InvalidArgumentError("every query needs at least one relevant item")
    contrib = j / r
    if k is not None:
        if k < 1:
            raise InvalidArgumentError(f"cut-off k must be >= 1, got {k}")
        contrib = np.where(r <= k, contrib, 0.0)
    norm = n_rel if k is None else np.minimum(n_rel, k)
    return ragged.group_sum(contrib, off) / norm


def ap_at_k_from_counts(counts, offsets, k: int | None = 1000) -> np.ndarray:
    """Per-query ILIAS AP@k from per-positive distractor counts (ranks j + K_j)."""
    off = ragged.check_offsets(offsets, np.asarray(counts).size)
    return ap_at_k(ranks_from_counts(counts, off), off, k)


def hit_at_k(ranks, offsets, k: int = 1) -> np.ndarray:
    """Per-query R@k hit rate: 1 if the best positive's rank is <= k."""
    r, _, off = _sorted_ranks(ranks, offsets)
    return (r[off[:-1]] <= k).astype(np.float64)


def recall_at_k(ranks, offsets, k: int = 100) -> np.ndarray:
    """Per-query fraction of positives ranked <= k."""
    r, _, off = _sorted_ranks(ranks, offsets)
    return ragged.group_sum((r <= k).astype(np.float64), off) / np.diff(off)


def reciprocal_rank(ranks, offsets, k: int | None = None) -> np.ndarray:
    """Per-query 1 / rank of the best positive (0 beyond cut-off k)."""
    r, _, off = _sorted_ranks(ranks, offsets)
    r1 = r[off[:-1]].astype(np.float64)
    rr = 1.0 / r1
    return rr if k is None else np.where(r1 <= k, rr, 0.0)


def revisited_ap(ranks0, offsets, n_relevant=None) -> np.ndarray:
    """Per-query revisited Oxford/Paris AP from 0-based ranks with junk already removed."""
    ranks0 = np.asarray(ranks0, dtype=np.int64)
    off = ragged.check_offsets(offsets, ranks0.size)
    r = ranks0[ragged.sort_within_groups(ranks0, off)].astype(np.float64)
    i = ragged.position_in_group(off).astype(np.float64)  # 1-based index of the positive
    n_rel = np.diff(off) if n_relevant is None else np.asarray(n_relevant, dtype=np.int64)
    if np.any(n_rel == 0):
        raise InvalidArgumentError("every query needs at least one relevant item")
    with np.errstate(divide="ignore", invalid="ignore"):
        p0 = np.where(r == 0, 1.0, (i - 1.0) / r)
    p1 = i / (r + 1.0)
    per_pos = (p0 + p1) / 2.0 / np.repeat(n_rel, np.diff(off))
    return ragged.group_sum(per_pos, off)


def ranks_from_scores(scores, labels):
    """Brute-force ranking of one dense score matrix, queries in rows.

    ``labels``: 1 positive, 0 distractor, -1 junk (ignored: removed from the ranking).
    Returns ``(ranks, offsets)`` with the pessimistic tie rule: positive j's rank is
    j + #{distractors with score >= s_j} among its query's positives sorted by score.
    """
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels)
    if scores.shape != labels.shape or scores.ndim != 2:
        raise InvalidArgumentError("scores and labels must be 2-D arrays of the same shape")
    ranks, sizes = [], []
    for s, lab in zip(scores, labels):
        pos = np.sort(s[lab == 1])[::-1]
        dist = np.sort(s[lab == 0])
        above = dist.size - np.searchsorted(dist, pos, side="left")
        ranks.append(np.arange(1, pos.size + 1) + above)
        sizes.append(pos.size)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    flat = np.concatenate(ranks).astype(np.int64) if ranks else np.zeros(0, np.int64)
    return flat, offsets
