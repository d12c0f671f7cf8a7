"""Scoring engine: queries x a stream of distractor chunks -> sample stats, in bounded memory.

For every query it keeps the top-K distractor scores seen so far and, for every positive, the
number of distractors scoring at or above it; S is counted exactly. Memory is O(Q K + Q C) for
chunks of C distractors, never Q x S.

Partial results merge associatively and commutatively (:meth:`Partial.merge`: top-K of the union,
sums of counts), so shards can be scored anywhere, in any order, and combined; any split gives
exactly the result of one pass over the scores its chunks' GEMMs gave (tested). Those scores are
BLAS's: a float32 score's last bit can depend on the GEMM's shape and the CPU, so two splits of
one set agree up to that rounding (scores within ~1e-7, a count off where a distractor and a
positive score within an ulp), not byte for byte.

Per chunk: one GEMM (numpy/BLAS, or faiss when it is installed and asked for) gives the Q x C
scores. Instead of an argpartition over every row (which costs several times the GEMM), each row
keeps a running threshold (its K-th best score so far), and only scores at or above
min(threshold, lowest positive score) survive a vectorised comparison; those few feed the positive
counts and a per-row candidate buffer that is merged into the top-K only when it fills. In the
first chunks, while the K-th best is still low and most rows would collect more candidates than a
buffer holds, one partition of the whole block is cheaper and is used instead. Everything after
the GEMM is per row, so row blocks run on several threads.

OpenBLAS workers spin for ~0.1 s after each call unless ``OPENBLAS_THREAD_TIMEOUT`` is small;
that spin competes with the post-GEMM threads. The ``rscale`` command sets it to 4 before numpy
loads; library users who score large pools should export it themselves.

Optionally (``candidates=R``, off by default) the engine also keeps each query's R best sampled
distractors by identity, the candidates a reranker rescores (:mod:`rscale.score.candidates`);
they merge with the partials, exactly and in any order.

Optionally (``halves=True``, off by default) the engine records the half-sample membership by
distractor id (:mod:`rscale.core.halves`): each chunk comes with its rows' membership bytes; the
top-K is also kept by identity (a :class:`TopCandidates` of R = K whose "positions" are
256 x position + membership byte: the same total order as the candidates', so the result does not
depend on the chunking, and the byte is the low 8 bits), each positive gets per split the half-A survivors at or above it
(the same difference array as its count, weighted by the split's bit) and each query the half-A
sizes. Scoring callers add the sampled id set's sums (:func:`rscale.core.halves.id_set_sums`).

Tie rule: a distractor whose float32 score equals a positive's float32 score counts as above it.
Positive scores are computed by the same float32 GEMM routine as distractor scores.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

from rscale.core.sample_stats import SampleStats, validate
from rscale.errors import InvalidArgumentError
from rscale.score.candidates import TopCandidates

BUFFER = 2048  # candidates buffered per query before they are merged into its top-K


@dataclass
class Partial:
    """The engine's state for a set of distractors (one chunk, one shard or everything).

    ``top`` holds each query's K best scores *unsorted* (only its minimum, ``kth``, is used while
    scoring); new candidates above ``kth`` wait in ``buf`` and are merged when a row's buffer is
    full (amortised: a merge costs O(K + BUFFER) per row, not O(K) per chunk). ``kth`` only rises
    at merges, so it is a conservative threshold and nothing that belongs in the top-K is lost.
    """

    top: np.ndarray          # (Q, K) float32, unordered K best merged so far (-inf while < K seen)
    kth: np.ndarray          # (Q,) float32, min of top: the running K-th best
    buf: np.ndarray          # (Q, BUFFER) float32 pending candidates
    fill: np.ndarray         # (Q,) int64 used slots of buf
    n: np.ndarray            # (Q,) int64 distractors seen
    counts: np.ndarray       # (P,) int64 distractors at or above each positive
    cand: TopCandidates | None = None   # each query's R best by identity (rscale.score.candidates), if asked
    top_halves: TopCandidates | None = None   # recorded halves: the top-K by (score, membership byte)
    half_counts: np.ndarray | None = None     # (P, 8) int64 half-A distractors at or above each positive
    half_n: np.ndarray | None = None          # (Q, 8) int64 half-A distractors seen
    id_sums: np.ndarray | None = None         # (3,) uint64 sums of the sampled ids (rscale.core.halves)

    def flush(self, rows=None) -> "Partial":
        """Merge the buffered candidates of ``rows`` (default: all) into their top-K."""
        rows = np.flatnonzero(self.fill > 0) if rows is None else np.asarray(rows)
        if rows.size == 0:
            return self
        k = self.top.shape[1]
        # unused buffer slots hold -inf, so the buffer can be merged as it is
        both = np.concatenate([self.top[rows], self.buf[rows]], axis=1)
        part = np.partition(both, both.shape[1] - k, axis=1)[:, -k:]
        self.top[rows] = part
        self.kth[rows] = part.min(axis=1)
        self.buf[rows] = -np.inf
        self.fill[rows] = 0
        return self

    def merge(self, other: "Partial") -> "Partial":
        """Combine two partials of disjoint distractor sets (associative, commutative)."""
        self.flush()
        other.flush()
        k = self.top.shape[1]
        both = np.concatenate([self.top, other.top], axis=1)
        top = np.partition(both, both.shape[1] - k, axis=1)[:, -k:]
        cand = None if self.cand is None else self.cand.merge(other.cand)
        halves = {}
        if self.top_halves is not None:
            with np.errstate(over="ignore"):
                halves = dict(top_halves=self.top_halves.merge(other.top_halves), half_counts=self.half_counts + other.half_counts,
                              half_n=self.half_n + other.half_n, id_sums=self.id_sums + other.id_sums)
        return Partial(top, top.min(axis=1), np.full_like(self.buf, -np.inf), np.zeros_like(self.fill),
                       self.n + other.n, self.counts + other.counts, cand, **halves)

    def sorted_top(self) -> np.ndarray:
        self.flush()
        return -np.sort(-self.top, axis=1)

    def compact(self) -> "Partial":
        """The same partial, flushed, with an empty candidate buffer: what is sent between processes
        or kept on disk (the buffer is scratch space, Q x 2048 floats). It still merges; scoring
        more chunks into it needs a fresh buffer (:func:`empty_partial`)."""
        self.flush()
        q = self.top.shape[0]
        return Partial(self.top, self.kth, np.empty((q, 0), dtype=np.float32), np.zeros(q, dtype=np.int64),
                       self.n, self.counts, self.cand, self.top_halves, self.half_counts, self.half_n, self.id_sums)


@dataclass(frozen=True)
class Queries:
    """What the engine scores against: query vectors and each query's positive scores.

    ``pos_offsets`` delimits each query's positives in the flat ``pos_scores`` / ``pos_ids``.
    """

    vectors: np.ndarray      # (Q, d) float32
    ids: np.ndarray          # (Q,) str
    pos_offsets: np.ndarray  # (Q+1,) int64
    pos_ids: np.ndarray      # (P,) str
    pos_scores: np.ndarray   # (P,) float32

    @cached_property
    def pos_keys(self) -> np.ndarray:
        """Per positive a sortable key: query index first, then descending score (-s + 4 q)."""
        qpos = np.repeat(np.arange(self.pos_offsets.size - 1), np.diff(self.pos_offsets))
        return -(self.pos_scores.astype(np.float64)) + 4.0 * qpos

    @cached_property
    def pos_min(self) -> np.ndarray:
        """Each query's lowest positive score: scores below it never count for any positive."""
        return np.minimum.reduceat(self.pos_scores, self.pos_offsets[:-1])

    @classmethod
    def build(cls, query_vectors, query_ids, positive_vectors, positive_ids, positives_of,
              backend: str = "numpy") -> "Queries":
        """Score each query's positives with the routine that will score distractors (``backend``);
        ``positives_of(q)`` lists the indices into ``positive_vectors`` of query q's positives."""
        qv = np.ascontiguousarray(query_vectors, dtype=np.float32)
        pv = np.ascontiguousarray(positive_vectors, dtype=np.float32)
        groups = [np.asarray(positives_of(q), dtype=np.int64) for q in range(qv.shape[0])]
        sizes = np.array([g.size for g in groups])
        if np.any(sizes == 0):
            q = int(np.flatnonzero(sizes == 0)[0])
            raise InvalidArgumentError(f"query {query_ids[q]!r} has no positives; drop it or add its positives")
        flat = np.concatenate(groups)
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        scores = np.empty(flat.size, dtype=np.float32)
        for q in range(qv.shape[0]):  # same float32 routine as distractors: q @ D.T
            scores[offsets[q]:offsets[q + 1]] = _gemm(qv[q:q + 1], pv[groups[q]], backend)[0]
        order = np.lexsort((-scores, np.repeat(np.arange(qv.shape[0]), sizes)))
        return cls(qv, np.asarray(query_ids).astype(str), offsets,
                   np.asarray(positive_ids).astype(str)[flat][order], scores[order])


BACKENDS = ("numpy", "faiss", "torch", "auto")
AUTO_GPU_MIN_FLOPS = 1e12  # below this much GEMM work, a device's start-up costs more than it saves


def choose_backend(backend: str, n_queries: int, n_distractors: int, dim: int) -> str:
    """Resolve ``auto``: torch on a CUDA device for large jobs when one is visible, else numpy
    (on CPUs the numpy/BLAS GEMM beats faiss' here: benchmarks/scoring_speed.py)."""
    if backend not in BACKENDS:
        raise InvalidArgumentError(f"unknown scoring backend {backend!r}; use one of {', '.join(BACKENDS)}")
    if backend != "auto":
        return backend
    if 2.0 * n_queries * n_distractors * dim < AUTO_GPU_MIN_FLOPS:
        return "numpy"
    from rscale.score.torch_backend import cuda_available
    return "torch" if cuda_available() else "numpy"


def _gemm(q: np.ndarray, d: np.ndarray, backend: str) -> np.ndarray:
    if backend == "faiss":
        from rscale.score.faiss_backend import inner_products
        return inner_products(q, d)
    if backend == "torch":
        from rscale.score.torch_backend import inner_products
        return inner_products(q, d)
    return q @ d.T


def empty_partial(queries: Queries, k: int, candidates: int = 0, halves: bool = False) -> Partial:
    """A partial of no distractors; ``candidates`` R > 0 also keeps each query's R best by identity,
    ``halves`` records the half-sample membership (module docstring)."""
    from rscale.core.sample_stats import HALF_SPLITS
    q = queries.vectors.shape[0]
    extra = {}
    if halves:
        extra = dict(top_halves=TopCandidates.empty(q, k), half_counts=np.zeros((queries.pos_scores.size, HALF_SPLITS), np.int64),
                     half_n=np.zeros((q, HALF_SPLITS), np.int64), id_sums=np.zeros(3, np.uint64))
    if not 0 <= candidates <= k:
        raise InvalidArgumentError(f"candidates must lie in [0, K={k}] (the top sampled distractors kept by id), "
                                   f"got {candidates}")
    return Partial(np.full((q, k), -np.inf, dtype=np.float32), np.full(q, -np.inf, dtype=np.float32),
                   np.full((q, BUFFER), -np.inf, dtype=np.float32), np.zeros(q, dtype=np.int64),
                   np.zeros(q, dtype=np.int64), np.zeros(queries.pos_scores.size, dtype=np.int64),
                   TopCandidates.empty(q, candidates) if candidates else None, **extra)


def score_chunk(queries: Queries, chunk: np.ndarray, state: Partial, backend: str = "numpy",
                threads: int | None = None, positions=None, halves=None) -> Partial:
    """Fold one chunk of distractor vectors (C, d) into ``state`` (returned, updated in place).

    ``positions`` (C,): the chunk's rows in the distractor set, needed when ``state`` keeps
    candidates by identity (default: the next rows after those seen, for a single stream).
    ``halves`` (C,) uint8: the chunk's membership bytes, needed when ``state`` records halves.

    After the GEMM, every row's work (threshold filter, top-K buffer, positive counts) touches
    only that row's state and that row's positives, so row blocks are folded on ``threads``
    threads (default: the CPUs this process may use, at most 8); numpy releases the GIL in the
    heavy steps.
    """
    chunk = np.ascontiguousarray(chunk, dtype=np.float32)
    if chunk.ndim != 2 or chunk.shape[1] != queries.vectors.shape[1]:
        raise InvalidArgumentError(f"distractor chunk has shape {chunk.shape}; expected (C, {queries.vectors.shape[1]})")
    if chunk.shape[0] == 0:
        return state
    if (state.cand is not None or state.top_halves is not None) and positions is None:
        positions = int(state.n[0]) + np.arange(chunk.shape[0], dtype=np.int64)
    if state.top_halves is not None:
        if halves is None or np.shape(halves) != (chunk.shape[0],):
            raise InvalidArgumentError("this partial records halves: pass the chunk's membership bytes (halves=)")
        halves = np.asarray(halves, dtype=np.uint8)
        state.half_n += _bits(halves).sum(axis=0)
    else:
        halves = None
    s = _gemm(queries.vectors, chunk, backend)                     # (Q, C) float32
    state.n += chunk.shape[0]
    blocks = _row_blocks(queries.vectors.shape[0], threads)
    if len(blocks) == 1:
        _fold(queries, s, state, 0, queries.vectors.shape[0], positions, halves)
    else:
        for f in [_pool(len(blocks)).submit(_fold, queries, s, state, a, b, positions, halves) for a, b in blocks]:
            f.result()
    return state


MIN_ROWS_PER_THREAD = 64


def _row_blocks(q: int, threads: int | None) -> list[tuple[int, int]]:
    if threads is None:
        usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        threads = min(usable, 8)
    n = threads
    n = max(1, min(n, q // MIN_ROWS_PER_THREAD))
    edges = np.linspace(0, q, n + 1).astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


@lru_cache(maxsize=4)
def _pool(n: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=n, thread_name_prefix="rscale-score")


def _bits(masks: np.ndarray) -> np.ndarray:
    """(n, 8) int64: bit i of each membership byte."""
    return ((masks[:, None] >> np.arange(8, dtype=np.uint8)) & 1).astype(np.int64)


def _fold(queries: Queries, s_all: np.ndarray, full: Partial, a: int, b: int, positions=None, halves=None) -> None:
    """Fold the score rows [a, b) into the matching rows of ``full`` (in place, through views)."""
    p0, p1 = int(queries.pos_offsets[a]), int(queries.pos_offsets[b])
    state = Partial(full.top[a:b], full.kth[a:b], full.buf[a:b], full.fill[a:b], full.n[a:b], full.counts[p0:p1])
    keys = queries.pos_keys[p0:p1] - 4.0 * a                      # row index relative to the block
    pos_min = queries.pos_min[a:b]
    s = s_all[a:b]
    if full.cand is not None:
        full.cand.rows(a, b).fold(s, positions)
    if halves is not None:
        full.top_halves.rows(a, b).fold(s, np.asarray(positions, np.int64) * 256 + halves)
    # early chunks (K-th best still low, many candidates per row, estimated on every 8th row):
    # one partition of the whole block is cheaper than collecting and buffering candidates
    if np.count_nonzero(s[::8] > state.kth[::8, None]) > s[::8].shape[0] * BUFFER // 2:
        rows, vals, cols = _survivors(s, pos_min)
        _dense_merge(state, s)
    else:
        cut = np.minimum(state.kth, pos_min)                        # keep what can matter
        rows, vals, cols = _survivors(s, cut)                       # row-major: rows ascending
        cand = vals > state.kth[rows]
        if cand.any():
            _buffer(state, rows[cand], vals[cand], state.top.shape[1])
        keep = vals >= pos_min[rows]
        rows, vals, cols = rows[keep], vals[keep], cols[keep]
    if rows.size:
        # a surviving score reaches the positives of its row with score <= it: a suffix of the
        # row's positives in key order; add 1 over [first, end of row) with a difference array
        kv = -(vals.astype(np.float64)) + 4.0 * rows
        first = np.searchsorted(keys, kv, side="left")
        end = np.searchsorted(keys, 4.0 * rows + 2.0, side="left")
        inc = np.bincount(first, minlength=keys.size + 1) - np.bincount(end, minlength=keys.size + 1)
        state.counts += np.cumsum(inc)[:-1]
        if halves is not None:
            # the same difference array, once per split, weighted by the survivor's bit of that split
            n_pos, h = keys.size + 1, full.half_counts.shape[1]
            bits = _bits(halves[cols])
            lanes = np.arange(h)
            inc_h = np.bincount((first[:, None] * h + lanes).ravel(), weights=bits.ravel(), minlength=n_pos * h) \
                - np.bincount((end[:, None] * h + lanes).ravel(), weights=bits.ravel(), minlength=n_pos * h)
            full.half_counts[p0:p1] += np.cumsum(inc_h.reshape(n_pos, h), axis=0)[:-1].round().astype(np.int64)


def _dense_merge(state: Partial, s: np.ndarray) -> None:
    """Top-K of (top-K so far, buffer, every score of the block), one partition per row."""
    k = state.top.shape[1]
    state.flush()
    both = np.concatenate([state.top, s], axis=1)
    both.partition(both.shape[1] - k, axis=1)                      # in place: no extra copy
    state.top[:] = both[:, -k:]
    state.kth[:] = state.top.min(axis=1)


def _survivors(s: np.ndarray, cut: np.ndarray):
    """(row, value) of every score >= its row's cut, rows ascending. The flat index search is
    several times faster than a 2-D nonzero on a Q x C matrix."""
    flat = np.flatnonzero(s >= cut[:, None])
    return flat // s.shape[1], s.ravel()[flat], flat % s.shape[1]


def _buffer(state: Partial, r: np.ndarray, v: np.ndarray, k: int) -> None:
    """Append candidates (rows ascending) to the row buffers, merging rows whose buffer fills."""
    q = state.top.shape[0]
    cnt = np.bincount(r, minlength=q)
    over = np.flatnonzero(state.fill + cnt > BUFFER)
    if over.size:
        state.flush(over)
    starts = np.cumsum(cnt) - cnt
    big = cnt > BUFFER
    if big.any():
        # more candidates than a buffer holds (early chunks): merge those rows at once, padded
        rows_big = np.flatnonzero(big)
        sel = big[r]
        rb, vb = r[sel], v[sel]
        slot = np.empty(q, dtype=np.int64)
        slot[rows_big] = np.arange(rows_big.size)
        pad = np.full((rows_big.size, int(cnt[rows_big].max())), -np.inf, dtype=np.float32)
        cnt_big = np.where(big, cnt, 0)
        starts_big = np.cumsum(cnt_big) - cnt_big          # row starts inside the big-only subset
        pad[slot[rb], np.arange(rb.size) - starts_big[rb]] = vb
        both = np.concatenate([state.top[rows_big], pad], axis=1)
        part = np.partition(both, both.shape[1] - k, axis=1)[:, -k:]
        state.top[rows_big] = part
        state.kth[rows_big] = part.min(axis=1)
        r, v = r[~sel], v[~sel]
        cnt = np.where(big, 0, cnt)
        starts = np.cumsum(cnt) - cnt
    if r.size:
        pos = state.fill[r] + (np.arange(r.size) - starts[r])
        state.buf[r, pos] = v
        state.fill += cnt


def to_sample_stats(queries: Queries, state: Partial, meta: dict | None = None) -> SampleStats:
    k = state.top.shape[1]
    if np.any(state.n < k):
        raise InvalidArgumentError(f"only {int(state.n.min())} distractors were scored, fewer than K={k}; "
                                   "lower K or score more distractors")
    top = state.sorted_top()
    halves = {}
    meta = {**(meta or {}), "k": str(k)}
    if state.top_halves is not None:
        if not np.array_equal(state.top_halves.scores, top):
            raise RuntimeError("the top-K kept with membership bytes differs from the top-K scores (engine bug)")
        from rscale.core.halves import RULE, id_set_digest
        halves = dict(top_halves=(state.top_halves.positions & 255).astype(np.uint8), pos_halves=state.half_counts.copy(),
                      n_halves=state.half_n.copy())
        meta.update(halves_rule=RULE, **({"sample_ids": id_set_digest(state.id_sums)} if state.id_sums[0] else {}))
    ss = SampleStats(query_ids=queries.ids, n_sampled=state.n.copy(), top_scores=top.astype(np.float64),
                     pos_offsets=queries.pos_offsets, pos_ids=queries.pos_ids,
                     pos_scores=queries.pos_scores.astype(np.float64), pos_counts=state.counts.copy(),
                     meta=meta, **halves)
    return validate(ss)


def score_stream(queries: Queries, chunks, k: int = 4000, backend: str = "numpy",
                 meta: dict | None = None) -> SampleStats:
    """Score an iterable of distractor chunks (arrays (C, d)) into sample stats."""
    state = empty_partial(queries, k)
    for chunk in chunks:
        score_chunk(queries, chunk, state, backend)
    return to_sample_stats(queries, state, meta)


def score_shards(queries: Queries, shards, k: int = 4000, backend: str = "numpy", meta: dict | None = None):
    """Score each shard (an iterable of chunks) separately, merge, and check drift across shards.

    Returns (sample stats, DriftReport or None when there is a single shard).
    """
    partials = []
    for chunks in shards:
        state = empty_partial(queries, k)
        for chunk in chunks:
            score_chunk(queries, chunk, state, backend)
        partials.append(state)
    merged, report = merge_shard_partials(partials)
    return to_sample_stats(queries, merged, meta), report


def merge_shard_partials(partials):
    """Merge per-shard partials (a sequence, or a callable returning a fresh iterator over them
    for the second pass the drift check needs) -> (merged, DriftReport or None for one shard).

    The merge is exact whatever the order (top-K of the union, sums of counts); the drift check
    counts, per shard, its top-K scores at or above the merged K-th best."""
    from rscale.score.drift import drift_report

    again = partials if callable(partials) else (lambda: iter(partials))
    merged, sizes = None, []
    for p in again():
        merged = p.compact() if merged is None else merged.merge(p)
        sizes.append(p.n.copy())
    report = None
    if len(sizes) > 1:
        thr = merged.sorted_top()[:, -1][:, None]
        observed = [int(np.sum(p.top >= thr)) for p in again()]
        report = drift_report(observed, sizes)
    return merged, report
