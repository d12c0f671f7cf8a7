"""Each query's top-R sampled distractors *by identity*: the candidates a reranker rescores.

The scoring engine keeps only scores (the top-K and the positives' counts). With ``candidates=R``
(1 <= R <= K, off by default) it also keeps, per query, the R best sampled distractors as
(score, position) pairs, where the position is the distractor's row in its descriptor set (shard
offset + row in the shard), so partials of different shards name distinct rows.

Order: score descending, then position ascending. That is a total order, so "the R best" of the
scores computed is one set whatever the chunking, the shard split or the merge order (tested
against a full sort of the same chunks' scores); a tie at the R-th score keeps the earlier row.
The scores themselves are BLAS's: their last bit can depend on the GEMM's shape and the CPU, so
two chunkings of one set may differ where two scores are within an ulp (two copies of a vector
in different chunks need not tie).

Per chunk only scores at or above the row's running R-th best survive a vectorised comparison;
while that threshold is still low (the first chunks) the chunk's own R-th best (one partition)
raises it first, so the survivors stay about R per row. Survivors and the kept R are merged by one
sort over (row, -score, position): a stable sort of one float key, verified, else a lexsort.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class TopCandidates:
    """Rows of (Q, R): ``scores`` descending, ``positions`` (-1 while fewer than R were seen)."""

    scores: np.ndarray       # (Q, R) float32, best first (-inf where empty)
    positions: np.ndarray    # (Q, R) int64 rows of the descriptor set (-1 where empty)

    @classmethod
    def empty(cls, q: int, r: int) -> "TopCandidates":
        return cls(np.full((q, r), -np.inf, np.float32), np.full((q, r), -1, np.int64))

    @property
    def r(self) -> int:
        return int(self.scores.shape[1])

    def rows(self, a: int, b: int) -> "TopCandidates":
        """A view of rows [a, b) (updates write through)."""
        return TopCandidates(self.scores[a:b], self.positions[a:b])

    def fold(self, s: np.ndarray, positions: np.ndarray) -> None:
        """Fold a score block ``s`` (Q, C) of the distractors at ``positions`` (C,) in place."""
        r = self.r
        cut = self.scores[:, -1]
        c = s.shape[1]
        if c > r and np.count_nonzero(s[::8] >= cut[::8, None]) > 4 * r * s[::8].shape[0]:
            # early chunks: the chunk's own R-th best is a higher cut for most rows
            cut = np.maximum(cut, np.partition(s, c - r, axis=1)[:, c - r])
        flat = np.flatnonzero(s >= cut[:, None])
        if flat.size:
            self._merge(flat // c, s.ravel()[flat], np.asarray(positions, np.int64)[flat % c])

    def merge(self, other: "TopCandidates") -> "TopCandidates":
        """The R best of two disjoint distractor sets (associative, commutative)."""
        out = TopCandidates(self.scores.copy(), self.positions.copy())
        q, r = other.scores.shape
        out._merge(np.repeat(np.arange(q), r), other.scores.ravel(), other.positions.ravel())
        return out

    def _merge(self, rows: np.ndarray, vals: np.ndarray, pos: np.ndarray) -> None:
        r = self.r
        touched = np.unique(rows)
        slot = np.empty(self.scores.shape[0], np.int64)
        slot[touched] = np.arange(touched.size)
        g = np.concatenate([np.repeat(np.arange(touched.size), r), slot[rows]])
        v = np.concatenate([self.scores[touched].ravel(), vals.astype(np.float32)])
        p = np.concatenate([self.positions[touched].ravel(), pos])
        real = p >= 0                                   # empty slots (-inf, -1) drop out
        g, v, p = g[real], v[real], p[real]
        order = _ordered(g, v, p)
        g, v, p = g[order], v[order], p[order]
        rank = np.arange(g.size) - np.searchsorted(g, g, side="left")
        keep = rank < r
        scores = np.full((touched.size, r), -np.inf, np.float32)
        positions = np.full((touched.size, r), -1, np.int64)
        scores[g[keep], rank[keep]] = v[keep]
        positions[g[keep], rank[keep]] = p[keep]
        self.scores[touched] = scores
        self.positions[touched] = positions


def _ordered(g: np.ndarray, v: np.ndarray, p: np.ndarray) -> np.ndarray:
    """The permutation sorting by (g, -v, p). Fast path: one stable sort of a float64 key
    g * span + (v_max - v), which keeps the input order among equal scores; the input (the kept
    lists, each already in order, then a chunk's survivors by column) is then right whenever a
    stream's positions ascend. The result is verified in one pass and, if a tie or a key collision
    broke it, replaced by the exact lexsort (several times slower)."""
    if g.size == 0:
        return np.zeros(0, np.int64)
    hi, lo = float(v.max()), float(v.min())
    order = np.argsort(g * (hi - lo + 1.0) + (hi - v.astype(np.float64)), kind="stable")
    gs, vs, ps = g[order], v[order], p[order]
    same = gs[1:] == gs[:-1]
    if np.all(~same | (vs[1:] < vs[:-1]) | ((vs[1:] == vs[:-1]) & (ps[1:] > ps[:-1]))):
        return order
    return np.lexsort((p, -v, g))


def candidate_count(depth: int, fraction: float, margin: float = 1.25) -> int:
    """R for reranking the top ``depth`` (K') of the scored pool from a ``fraction`` of it: the
    pool's top K' is about the sample's top K' f, kept with a ``margin`` (and at least 10).
    Example: K' = 1000, f = 0.05 -> 63."""
    return max(10, int(np.ceil(margin * depth * fraction)))
