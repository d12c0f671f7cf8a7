"""The sample-stats value: what a sampled evaluation hands to the estimators.

Per query: S (how many distractors were sampled and scored) and the top-K sampled distractor
scores, descending. Per positive: its id, its score and its sampled exceedance count c (sampled
distractors scoring at or above it). Plus free-form metadata (backbone, benchmark, distractor
source, sampler, seed, K). Optionally (schema version 3) the recorded half-sample membership
(:mod:`rscale.core.halves`): per top-K entry the 8-bit mask of the halves it is in, per positive
and per query the half-A counts of each of the 8 splits. The on-disk form is documented in docs/formats.md; reading and
writing live in :mod:`rscale.store.sample_stats_file`. This module only holds the value and its
validation, so that errors can name the column and the first bad row.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rscale.core import ragged
from rscale.errors import FormatError

SCHEMA_VERSION = 3          # the newest this rscale reads; files are written with the lowest version that holds them
HALF_SPLITS = 8             # splits a recorded membership mask holds (one bit each)


@dataclass(frozen=True)
class SampleStats:
    query_ids: np.ndarray      # (Q,) str
    n_sampled: np.ndarray      # (Q,) int64, S per query
    top_scores: np.ndarray     # (Q, K) float64, descending per row
    pos_offsets: np.ndarray    # (Q+1,) int64
    pos_ids: np.ndarray        # (P,) str
    pos_scores: np.ndarray     # (P,) float64
    pos_counts: np.ndarray     # (P,) int64, sampled distractors at or above the positive
    meta: dict = field(default_factory=dict)
    top_rerank: np.ndarray | None = None   # (Q, R) rerank scores of the top R <= K, first-stage order
    pos_rerank: np.ndarray | None = None   # (P,) rerank scores of the positives
    top_halves: np.ndarray | None = None   # (Q, K) uint8: bit i set = the top entry is in half A of split i
    pos_halves: np.ndarray | None = None   # (P, 8) int64: half-A sampled distractors at or above, per split
    n_halves: np.ndarray | None = None     # (Q, 8) int64: half-A size of each split

    @property
    def has_halves(self) -> bool:
        return self.top_halves is not None

    @property
    def has_rerank(self) -> bool:
        return self.top_rerank is not None

    @property
    def schema_version(self) -> int:
        """1 for first-stage stats alone, 2 when rerank scores travel with them, 3 with recorded halves."""
        return 3 if self.has_halves else 2 if self.has_rerank else 1

    @property
    def n_queries(self) -> int:
        return int(self.query_ids.size)

    @property
    def k(self) -> int:
        return int(self.top_scores.shape[1])

    @property
    def n_positives(self) -> int:
        return int(self.pos_ids.size)

    def positive_query(self) -> np.ndarray:
        """Query index of every positive."""
        return ragged.group_index(self.pos_offsets)


def validate(ss: SampleStats, path: str | None = None) -> SampleStats:
    """Check every documented invariant; raise FormatError naming column and first bad row.

    Rows are 0-based query rows of the file, as pandas/pyarrow number them.
    """
    q = ss.n_queries

    def fail(column, row, problem, hint=None):
        qid = f" (query_id {str(ss.query_ids[row])!r})" if row is not None and row < q else ""
        raise FormatError(problem + qid, path=path, column=column, row=row, hint=hint)

    if q == 0:
        raise FormatError("no queries", path=path, hint="a sample-stats file needs at least one query")
    ids = ss.query_ids.astype(str)
    empty = np.flatnonzero(np.char.str_len(ids) == 0)
    if empty.size:
        fail("query_id", int(empty[0]), "empty query id")
    _, first_idx, counts = np.unique(ids, return_index=True, return_counts=True)
    if np.any(counts > 1):
        dup = ids[first_idx[counts > 1][0]]
        rows = np.flatnonzero(ids == dup)
        fail("query_id", int(rows[1]), f"duplicate query_id {str(dup)!r}, first at row {int(rows[0])}")

    if ss.top_scores.ndim != 2:
        raise FormatError("top_scores must be one list per query", path=path, column="top_scores")
    k = ss.k
    if k < 1:
        raise FormatError("top_scores lists are empty", path=path, column="top_scores",
                          hint="store at least the top 1 sampled distractor score per query")
    s = ss.n_sampled
    bad = np.flatnonzero(s < k)
    if bad.size:
        r = int(bad[0])
        fail("n_sampled", r, f"S = {int(s[r])} sampled distractors is fewer than K = {k} top scores",
             "S counts every sampled distractor, so it is at least the length of top_scores")
    top = ss.top_scores
    finite = np.isfinite(top)
    if not finite.all():
        r = int(np.flatnonzero(~finite.all(axis=1))[0])
        fail("top_scores", r, "NaN or infinite score")
    unsorted = np.flatnonzero(np.any(np.diff(top, axis=1) > 0, axis=1))
    if unsorted.size:
        fail("top_scores", int(unsorted[0]), "scores are not sorted in descending order")

    sizes = np.diff(ss.pos_offsets)
    none = np.flatnonzero(sizes == 0)
    if none.size:
        fail("positive_ids", int(none[0]), "query has no positives",
             "drop queries without positives; no metric is defined for them")
    pq = ragged.group_index(ss.pos_offsets)
    if not np.all(np.isfinite(ss.pos_scores)):
        fail("positive_scores", int(pq[np.flatnonzero(~np.isfinite(ss.pos_scores))[0]]),
             "NaN or infinite score")
    pids = ss.pos_ids.astype(str)
    order = np.lexsort((pids, pq))
    same = (pq[order][1:] == pq[order][:-1]) & (pids[order][1:] == pids[order][:-1])
    if same.any():
        i = order[int(np.flatnonzero(same)[0]) + 1]
        fail("positive_ids", int(pq[i]), f"duplicate positive id {str(pids[i])!r} within the query")

    if (ss.top_rerank is None) != (ss.pos_rerank is None):
        raise FormatError("rerank scores need both top_rerank_scores and positive_rerank_scores", path=path,
                          column="top_rerank_scores" if ss.top_rerank is None else "positive_rerank_scores")
    if ss.top_rerank is not None:
        tr, pr = ss.top_rerank, ss.pos_rerank
        if tr.ndim != 2 or tr.shape[0] != q or not 1 <= tr.shape[1] <= k:
            raise FormatError(f"top_rerank_scores must hold the same number R (1 <= R <= K = {k}) of scores per query",
                              path=path, column="top_rerank_scores")
        if not np.all(np.isfinite(tr)):
            fail("top_rerank_scores", int(np.flatnonzero(~np.isfinite(tr).all(axis=1))[0]), "NaN or infinite score")
        if pr.shape != ss.pos_scores.shape:
            raise FormatError("positive_rerank_scores must be parallel to positive_ids", path=path,
                              column="positive_rerank_scores")
        if not np.all(np.isfinite(pr)):
            fail("positive_rerank_scores", int(pq[np.flatnonzero(~np.isfinite(pr))[0]]), "NaN or infinite score")

    c = ss.pos_counts
    if ss.has_halves or ss.pos_halves is not None or ss.n_halves is not None:
        _validate_halves(ss, fail, path)
    neg = np.flatnonzero((c < 0) | (c > s[pq]))
    if neg.size:
        i = int(neg[0])
        fail("positive_counts", int(pq[i]),
             f"count {int(c[i])} is outside [0, S = {int(s[pq[i]])}]")
    # Consistency with the top list: t = #{top >= score}; if t < K the count must equal t,
    # otherwise every stored top score beats the positive and the count is at least K.
    t = count_at_or_above(top, ss.pos_offsets, ss.pos_scores)
    inconsistent = np.flatnonzero(np.where(t < k, c != t, c < k))
    if inconsistent.size:
        i = int(inconsistent[0])
        fail("positive_counts", int(pq[i]),
             f"count {int(c[i])} for positive {str(pids[i])!r} disagrees with top_scores "
             f"({int(t[i])} of the top {k} are >= its score {ss.pos_scores[i]:.6g})",
             "the count must be the number of sampled distractors scoring at or above the positive")
    return ss


def _validate_halves(ss: SampleStats, fail, path) -> None:
    """The recorded halves (schema version 3): all three columns, shapes, ranges, and per positive
    inside the top list its half-A counts equal the masks of the top entries at or above it."""
    cols = {"top_halves": ss.top_halves, "positive_halves": ss.pos_halves, "n_halves": ss.n_halves}
    absent = [name for name, v in cols.items() if v is None]
    if absent:
        raise FormatError("recorded halves need all of top_halves, positive_halves and n_halves", path=path,
                          column=absent[0], hint="write the file with rscale score, or drop all three columns")
    q, k, h = ss.n_queries, ss.k, HALF_SPLITS
    for name, v, shape in (("top_halves", ss.top_halves, (q, k)), ("positive_halves", ss.pos_halves, (ss.n_positives, h)),
                           ("n_halves", ss.n_halves, (q, h))):
        if v.shape != shape:
            raise FormatError(f"{name} has shape {v.shape}, expected {shape} ({h} splits)", path=path, column=name)
    pq = ragged.group_index(ss.pos_offsets)
    bad = np.flatnonzero(((ss.n_halves < 0) | (ss.n_halves > ss.n_sampled[:, None])).any(axis=1))
    if bad.size:
        fail("n_halves", int(bad[0]), "half size outside [0, S]")
    bad = np.flatnonzero(((ss.pos_halves < 0) | (ss.pos_halves > ss.pos_counts[:, None])).any(axis=1))
    if bad.size:
        fail("positive_halves", int(pq[bad[0]]), "half count outside [0, positive_counts]")
    inside = ss.pos_counts < k
    if inside.any():
        bits = (ss.top_halves[:, :, None] >> np.arange(h, dtype=np.uint8)) & 1            # (Q, K, 8)
        cum = np.concatenate([np.zeros((q, 1, h), np.int64), np.cumsum(bits, axis=1, dtype=np.int64)], axis=1)
        want = cum[pq[inside], ss.pos_counts[inside]]                                       # (P_in, 8)
        off = np.flatnonzero((want != ss.pos_halves[inside]).any(axis=1))
        if off.size:
            fail("positive_halves", int(pq[np.flatnonzero(inside)[off[0]]]),
                 "half counts disagree with the top_halves masks of the top entries at or above the positive")


def count_at_or_above(top: np.ndarray, offsets: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """#{top[q] >= score} for every positive of every query (top rows descending)."""
    out = np.empty(scores.size, dtype=np.int64)
    neg = -top  # ascending rows
    for q in range(top.shape[0]):
        a, b = offsets[q], offsets[q + 1]
        if b > a:
            out[a:b] = np.searchsorted(neg[q], -scores[a:b], side="right")
    return out


def kept_rerank_scores(ss: SampleStats, keep: np.ndarray, k: int) -> dict:
    """The rerank scores of a sample that keeps only part of each query's top list: ``keep``
    (Q, K) bool marks the kept top entries (a sub-sample, :func:`rscale.core.subsample.subsample`,
    or a recorded half, :func:`rscale.core.halves.recorded_halves`) and ``k`` the top list the
    result keeps. Its top R' are the kept entries of the original top R, in first-stage order, cut
    to R' = min(k, the fewest kept over queries) so that R stays one number per sample; positives
    keep theirs. As SampleStats fields (``top_rerank``, ``pos_rerank``); {} when the sample has no
    rerank scores or some query keeps none of its reranked top.
    Example: R = 3, keep rows [T, F, T, ...] and [F, T, T, ...], k = 5: each row keeps 2, R' = 2."""
    if not ss.has_rerank:
        return {}
    kept = keep[:, :ss.top_rerank.shape[1]]
    r_new = min(k, int(kept.sum(axis=1).min()))
    if r_new < 1:
        return {}
    order = np.argsort(~kept, axis=1, kind="stable")
    return {"top_rerank": np.take_along_axis(ss.top_rerank, order, axis=1)[:, :r_new], "pos_rerank": ss.pos_rerank}
