"""The scaling law: per-positive hardness -> retrieval metric at any gallery size N.

Model (tail-aware evaluation paper, section 3 and appendix A). A query q has positives
with scores s_1 >= s_2 >= ... (best first). Its distractor score law F_q gives each positive a
*hardness* x_j = P(D >= s_j), the share of the law at or above the positive. In a gallery of N
iid distractors the number of distractors at or above positive j is K_j ~ Binomial(N, x_j), and
because positives are sorted, its rank is r_j = j + K_j (ties with distractors are pessimistic:
a distractor scoring exactly s_j ranks above the positive).

Two ways to turn hardness into a metric, offered as ``mode``:

``plugin`` (the paper's default)
    Replace K_j by N x_j: r_j = j + N x_j, then evaluate the metric on those ranks.
    Fed the *realised* fractions x_j = K_j / N of a gallery it reproduces that gallery's exact
    metric (this is how the paper's "population hardness" matched realised mAP@100M to 0.001: it
    was read off the full gallery). Fed true population hardness it is biased low, per positive,
    by Jensen's inequality (j/(j + E K) <= E[j/(j + K)]), by up to ~18% when N x ~ 1.

``expected``
    The exact expectation of the metric over Binomial(N, x_j) counts. Every metric here is a sum
    over positives of a function of one positive's count (or of the best positive's count), so only
    the marginals are needed: E[1{K <= k-j} j/(j+K)] is a short sum over the Binomial pmf, restricted
    to a window of +-10 standard deviations around N x (for a large input at a cut-off k, read off a
    table of those sums at nodes, within 2e-11: :mod:`rscale.core.window_table`). With true
    population hardness this *is* the
    mean realised value over galleries of size N (linearity of expectation), so it is the unbiased
    target for a realised benchmark value; fed realised fractions it overshoots the realised value
    (the paper's +0.004..+0.006 at 1e8).

Metrics (per query; the benchmark value is the mean over queries):

- ``AP`` at cut-off k (ILIAS mAP@k): sum over positives with r_j <= k of j / r_j, divided by
  min(k, |G|), where |G| is the query's number of positives. k=None means no cut-off (divide by |G|).
  GLDv2's official mAP@100 is the same formula with k=100.
- ``R`` at k (image-retrieval recall@k, a *hit rate*): 1 if at least one positive is in the top k,
  i.e. K_1 <= k - 1. Its expectation is the Binomial CDF; R@1 = P(rank 1) = (1 - x_1)^N.
- ``Recall`` at k (IR recall): the fraction of the query's positives in the top k.
- ``RR`` (reciprocal rank of the first positive; MRR is its mean): 1 / (1 + K_1); E[1/(1+K)]
  has the closed form (1 - (1-x)^(N+1)) / ((N+1) x). With a cut-off k, RR is 0 beyond rank k.

Example: one query with hardness [0, 1e-8] at N = 1e8 has plug-in ranks [1, 3], so
AP@1000 = (1/1 + 2/3) / 2 = 0.8333.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

from rscale.core import ragged, window_table
from rscale.errors import InvalidArgumentError

MODES = ("plugin", "expected")
METRICS = ("AP", "R", "Recall", "RR")

# Window half-width, in standard deviations (plus the same number of counts), of the Binomial
# pmf sums. Mass outside +-10 sd (Poisson-skewed tails included) is below 1e-15.
_WINDOW_SD = 10.0
# Largest number of pmf terms evaluated at once (bounds memory of the expected mode).
_CHUNK_TERMS = 1 << 22
# Terms per padded block of :func:`_window_sums`: its temporaries stay in a core's cache (4M-term
# blocks, 32 MB each, cost ~25% more CPU on the shared 2-core machine, most of it page faults).
_BLOCK_TERMS = 1 << 16


# Queries with at most this many positives are summed position by position (:class:`_ByPosition`);
# beyond it the loop over positions would outgrow the per-query segment sum it replaces.
_MAX_BY_POSITION = 64

# The table of window sums (:func:`_tabulated`): used for cut-offs up to _TABLE_MAX_K, inputs of
# at least _TABLE_MIN elements (below, summing costs less than building a table: ~20 ms of one
# core at k = 1000, ~55 ms at 4096), positions up to _TABLE_ROWS (a query's later positives are
# summed), nodes computed _TABLE_NODE_BLOCK at a time; the cache holds 8 tables (~11 MB each
# at k = 4096, ~3 MB at 1000).
_TABLE_MAX_K = 4096
_TABLE_MIN = 1 << 15
_TABLE_ROWS = 32
_TABLE_NODE_BLOCK = 128


@dataclass(frozen=True)
class _ByPosition:
    """A position-major layout of per-positive values: block p holds the p-th positive (sorted
    order) of every query with more than p positives, queries largest first, so that a per-query
    sum is L - 1 vectorised adds of blocks (L = most positives of a query) instead of one
    segment per query (``np.add.reduceat``: ~40% of a cached 17-row evaluation). Each query's
    values are still added in order of position."""

    perm: np.ndarray        # (P,) query-major index of each position-major slot
    starts: tuple           # L + 1 slot offsets: block p is slots starts[p]:starts[p + 1]
    rank: np.ndarray        # (Q,) column of query q within block 0
    jf: np.ndarray          # (P,) float64 1-based position of each slot

    @classmethod
    def of(cls, offsets: np.ndarray, n_pos: np.ndarray) -> "_ByPosition":
        order = np.argsort(-n_pos, kind="stable")
        sizes = n_pos[order]
        most = int(sizes[0]) if sizes.size else 0
        counts = np.searchsorted(-sizes, -np.arange(most), side="left")       # queries with > p positives
        starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        block = np.repeat(np.arange(most, dtype=np.int64), counts)
        perm = offsets[order[np.arange(starts[-1]) - starts[block]]] + block
        rank = np.empty(order.size, dtype=np.int64)
        rank[order] = np.arange(order.size)
        return cls(perm=perm, starts=tuple(int(v) for v in starts), rank=rank, jf=(block + 1).astype(np.float64))

    def sums(self, v: np.ndarray) -> np.ndarray:
        """Per-query sums (..., Q), in query order, of values ``v`` (..., P) in this layout."""
        s = self.starts
        out = v[..., s[0]:s[1]].copy()
        for a, b in zip(s[1:-1], s[2:]):
            out[..., :b - a] += v[..., a:b]
        return out[..., self.rank]


@dataclass(frozen=True)
class Hardness:
    """Per-positive hardness of a benchmark, sorted easiest-first inside each query.

    Build with :meth:`from_flat`; ``x[offsets[q]:offsets[q+1]]`` are query q's positives.
    ``query`` (query index), ``j`` (1-based position) and ``n_pos`` (positives per query)
    are derived once so that evaluating many metrics and sizes costs no re-sorting.

    ``x`` may also be a stack (B, P) of B hardness vectors over the same positives (a point
    estimate and its replicates, say), each row sorted on its own: every metric function then
    returns (B, Q), the same values as B separate evaluations, in one array operation (in the
    expected mode with a cut-off, within 2e-11: a stack of at least :data:`_TABLE_MIN` elements
    is read off the table of window sums where its rows alone might be summed).
    """

    x: np.ndarray
    offsets: np.ndarray
    query: np.ndarray
    j: np.ndarray
    n_pos: np.ndarray

    @classmethod
    def from_flat(cls, x, offsets, like: "Hardness | None" = None) -> "Hardness":
        """``x``: (P,) per-positive hardness, or (B, P) for a stack; any order within a query.
        ``like``: a hardness over the same ``offsets`` whose index arrays (and position-major
        layout) to share instead of making them again; ``x`` is checked and sorted all the same."""
        given = x
        x = np.asarray(x, dtype=np.float64)
        if x.ndim not in (1, 2):
            raise InvalidArgumentError("hardness must be a flat 1-D array of per-positive values "
                                       "(or a 2-D stack of such arrays, one per row)")
        x = np.ascontiguousarray(x)                         # rows contiguous: a stack is read row by row
        off = ragged.check_offsets(offsets, x.shape[-1])
        if not np.all(np.isfinite(x)):
            bad = np.argwhere(~np.isfinite(x))[0]
            raise InvalidArgumentError(f"hardness must be finite; positive {int(bad[-1])} is {x[tuple(bad)]}")
        if np.any((x < 0) | (x > 1)):
            bad = np.argwhere((x < 0) | (x > 1))[0]
            raise InvalidArgumentError(f"hardness must lie in [0, 1]; positive {int(bad[-1])} is {x[tuple(bad)]}")
        n_pos = np.diff(off)
        if np.any(n_pos == 0):
            q = int(np.flatnonzero(n_pos == 0)[0])
            raise InvalidArgumentError(
                f"query {q} has no positives; a metric is undefined for it. "
                "Drop queries without positives before evaluating.")
        xs = ragged.sorted_within_groups(x, off)
        if xs.flags.writeable and isinstance(given, np.ndarray) and np.may_share_memory(xs, given):
            xs = xs.copy()          # an already-sorted input: never alias a caller's writable array
        if like is not None and (like.offsets is off or np.array_equal(like.offsets, off)):
            return cls.presorted(xs, like)
        return cls(x=xs, offsets=off, query=ragged.group_index(off), j=ragged.position_in_group(off), n_pos=n_pos)

    @classmethod
    def presorted(cls, x, like: "Hardness") -> "Hardness":
        """A hardness over the same positives as ``like`` whose ``x`` ((P,) or (B, P)) is already
        sorted within each query (an order-preserving map of a sorted hardness: clip(x * scale_q)
        with scale_q >= 0 per query): shares ``like``'s index arrays, no re-sort, no re-check."""
        h = cls(x=x, offsets=like.offsets, query=like.query, j=like.j, n_pos=like.n_pos)
        like.by_position                               # made once per family of views, then shared
        for name in ("jf", "by_position"):            # index arrays only: they do not depend on x
            if name in like.__dict__:
                h.__dict__[name] = like.__dict__[name]
        return h

    def rows(self, which) -> "Hardness":
        """Rows ``which`` (a slice or index array) of a stack, sharing the index arrays and, once
        made, the position-major values. Consecutive indices are taken as a slice: a view, not a
        copy of the rows (the back-test's shares of one factor are such a run)."""
        if isinstance(which, np.ndarray) and which.ndim == 1 and which.size and which.dtype.kind in "iu":
            lo = int(which[0])
            if lo >= 0 and np.array_equal(which, np.arange(lo, lo + which.size)):
                which = slice(lo, lo + which.size)
        h = Hardness.presorted(self.x[which], self)
        if "x_by_position" in self.__dict__:
            h.__dict__["x_by_position"] = self.__dict__["x_by_position"][which]
        return h

    def scaled(self, scale: np.ndarray) -> "Hardness":
        """clip(x * scale, 0, 1) for a per-positive ``scale`` >= 0 that is constant within each
        query (an order-preserving map, so no re-sort); the position-major values follow."""
        h = Hardness.presorted(np.clip(self.x * scale, 0.0, 1.0), self)
        bp = self.by_position
        if bp is not None and "x_by_position" in self.__dict__:
            h.__dict__["x_by_position"] = np.clip(self.x_by_position * scale[bp.perm], 0.0, 1.0)
        return h

    @classmethod
    def from_counts(cls, counts, offsets, n: float) -> "Hardness":
        """Realised fractions K_j / N of a gallery of N distractors (exact input for ``plugin``)."""
        counts = np.asarray(counts, dtype=np.float64)
        if np.any(counts < 0) or np.any(counts > n):
            raise InvalidArgumentError(f"counts must lie in [0, N={n:g}]")
        return cls.from_flat(counts / float(n), offsets)

    @cached_property
    def by_position(self) -> "_ByPosition | None":
        """The position-major layout of these positives (None beyond :data:`_MAX_BY_POSITION`
        positives in a query); memoised, like :attr:`x_by_position`, with the object."""
        return _ByPosition.of(self.offsets, self.n_pos) if self.n_pos.max(initial=0) <= _MAX_BY_POSITION else None

    @cached_property
    def x_by_position(self) -> np.ndarray:
        """``x`` in the :attr:`by_position` layout (one gather, kept with the object)."""
        return np.take(self.x, self.by_position.perm, axis=-1)     # C order (x[..., perm] is strided: 4x slower)

    @cached_property
    def jf(self) -> np.ndarray:
        """``j`` as float64 (mixing int64 into float array operations costs a cast per element)."""
        return self.j.astype(np.float64)

    @property
    def n_queries(self) -> int:
        return int(self.n_pos.size)

    @property
    def first(self) -> np.ndarray:
        """Hardness of each query's easiest (best-scoring) positive: (Q,), or (B, Q) for a stack."""
        return self.x[..., self.offsets[:-1]]


def check_n(n) -> float:
    """Validate a gallery size: finite and >= 1."""
    try:
        n = float(n)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"gallery size N must be a number, got {n!r}") from None
    if not math.isfinite(n) or n < 1:
        raise InvalidArgumentError(f"gallery size N must be >= 1, got {n:g}")
    return n


def check_k(k) -> int | None:
    """Validate a cut-off: None (no cut-off) or an integer >= 1."""
    if k is None:
        return None
    if isinstance(k, float) and not k.is_integer():
        raise InvalidArgumentError(f"cut-off k must be a whole number >= 1, got {k}")
    k = int(k)
    if k < 1:
        raise InvalidArgumentError(f"cut-off k must be >= 1, got {k}")
    return k


def _check_mode(mode: str) -> str:
    if mode not in MODES:
        raise InvalidArgumentError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
    return mode


def _integer_n(n: float) -> int:
    """The expected mode needs an integer number of Binomial trials."""
    return int(round(n))


def _within(r: np.ndarray, k: int) -> np.ndarray:
    # Plug-in ranks fed realised fractions are integers up to rounding (j + N*(K/N)).
    return r <= k * (1.0 + 1e-12) + 1e-9


# Stirling's error delta(k) = log k! - (k + 1/2) log k + k - log(2 pi) / 2 for k = 0..15 (k = 0: unused,
# log C(n, 0) = 0), exact to 20 digits (mpmath); beyond 15 its asymptotic series, 5 terms, error
# below 1e-16 (Loader 2000, "Fast and accurate computation of binomial probabilities", as in R's dbinom).
_STIRLING_ERROR = np.array([
    0.0, 0.08106146679532725822, 0.041340695955409294094, 0.027677925684998339149, 0.020790672103765093112,
    0.016644691189821192163, 0.013876128823070747999, 0.011896709945891770095, 0.010411265261972096497,
    0.0092554621827127329177, 0.0083305634333628712565, 0.007573675487951840795, 0.0069428401072095298657,
    0.0064089941880042070684, 0.0059513701127588477356, 0.005554733551962801371])
_LOG_2PI = math.log(2.0 * math.pi)


def _stirling_error(k: np.ndarray) -> np.ndarray:
    """delta(k) for whole numbers k >= 1 (float array): the table below 16, else
    1/(12k) - 1/(360k^3) + 1/(1260k^5) - 1/(1680k^7) + 1/(1188k^9)."""
    k = np.asarray(k, dtype=np.float64)
    r = 1.0 / k
    r2 = r * r
    out = r * (1 / 12 - r2 * (1 / 360 - r2 * (1 / 1260 - r2 * (1 / 1680 - r2 / 1188))))
    small = k < _STIRLING_ERROR.size
    if small.any():
        out[small] = _STIRLING_ERROR[k[small].astype(np.int64)]
    return out


def log_choose(n: int, m: np.ndarray) -> np.ndarray:
    """log C(n, m) for whole numbers 0 <= m <= n (``m`` a float array), to ~1e-15 relative to its
    largest term, at any n. The difference of log-gamma values (``-log1p(n) - betaln(n - m + 1,
    m + 1)``, which this replaced) cancels terms of size n log n: an absolute error of 5e-8 at
    n = 1e8, m = 100 and 1e-5 at n = 1e10, m = 1e4, which the Binomial pmf inherits as a relative
    error. Here (Stirling with its error term, k = min(m, n - m) >= 1, t = log1p(-k/n)):
    log C = k log(n/k) - (n - k) t + (log(n/k) - log n - t - log 2 pi) / 2
            + delta(n) - delta(k) - delta(n - k),
    every term computed without cancellation."""
    m = np.asarray(m, dtype=np.float64)
    nf = float(n)
    if nf < 2:                                              # n = 0 or 1: C(n, m) = 1 for every valid m
        return np.zeros(m.shape)
    k = np.minimum(m, nf - m)
    inner = k >= 1
    kk = np.where(inner, k, 1.0)                            # log C = 0 at k = 0 (m = 0 or m = n)
    rest = nf - kk
    with np.errstate(divide="ignore", invalid="ignore"):        # n = 1: rest = 0 where k = 0, discarded
        ln_ratio = np.log(nf / kk)
        t = np.log1p(-kk / nf)
        out = kk * ln_ratio - rest * t + 0.5 * (ln_ratio - t - (math.log(nf) + _LOG_2PI))
        out += float(_stirling_error(np.array([nf]))[0]) - _stirling_error(kk) - _stirling_error(rest)
    return np.where(inner, out, 0.0)


def _binomial_window_sum(x, j, n: int, m_max, precision: bool, cut: int | None = None) -> np.ndarray:
    """sum_{m=0}^{m_max} P(K = m) * w(m) for K ~ Binomial(n, x), elementwise.

    w(m) = j / (j + m) when ``precision`` else 1 (a CDF). Terms outside +-10 sd of the mean are
    below 1e-15 of the total and skipped; m_max < 0 gives 0.

    ``cut``: the caller's cut-off k where m_max = k - j for whole j >= 1 (AP@k, Recall@k, R@k,
    RR@k). A large enough input at a large enough n is then read off a table of the sums at nodes
    (:func:`_tabulated`, within 2e-11 of summing them: :mod:`rscale.core.window_table`); otherwise,
    and without ``cut``, every element is summed (:func:`_summed`).
    """
    if (cut is not None and cut <= _TABLE_MAX_K and np.size(x) >= _TABLE_MIN
            and n >= 4.0 * window_table.reach(cut) ** 2 and _cut_holds(x, j, m_max, cut)):
        return _tabulated(x, j, n, cut, precision)
    return _summed(x, j, n, m_max, precision)


def _cut_holds(x, j, m_max, cut: int) -> bool:
    """Whether the table holds these sums: m_max = cut - j with whole j >= 1 everywhere, j a
    scalar, a row (one position per column of ``x``) or ``x``'s shape, and m_max j's shape."""
    j = np.asarray(j, dtype=np.float64)
    m_max = np.asarray(m_max, dtype=np.float64)
    if m_max.shape != j.shape or j.shape not in ((), np.shape(x)[-1:], np.shape(x)):
        return False
    return bool(j.size and j.min() >= 1 and np.all(j == np.floor(j)) and np.array_equal(m_max, cut - j))


@lru_cache(maxsize=8)
def _window_table(n: int, cut: int, precision: bool) -> np.ndarray:
    """The coefficients of :mod:`rscale.core.window_table` for positions j = 1..min(cut,
    :data:`_TABLE_ROWS`) at (n, cut), read-only. Node values are the window sums themselves,
    computed as one product: per block of nodes, the pmf over the block's union of windows
    (log C(n, m) from one table) times the weights (rows, m) of every position at once."""
    rows = min(cut, _TABLE_ROWS)
    u = window_table.nodes(cut)
    x = u * u / n
    m = np.arange(cut, dtype=np.float64)                        # m_max is at most cut - 1 (j = 1)
    logc = log_choose(n, m)
    jv = np.arange(1, rows + 1, dtype=np.float64)[:, None]
    inside = m[None, :] <= cut - jv                             # m <= m_max = cut - j
    weights = np.where(inside, jv / (jv + m[None, :]) if precision else 1.0, 0.0)
    mu = n * x
    sd = np.sqrt(mu * (1.0 - x))
    lo = np.maximum(0.0, np.floor(mu - _WINDOW_SD * sd - _WINDOW_SD)).astype(np.int64)
    hi = np.minimum(cut - 1.0, np.ceil(mu + _WINDOW_SD * sd + _WINDOW_SD)).astype(np.int64)
    values = np.zeros((rows, u.size))
    values[:, 0] = weights[:, 0]                                # x = 0: K = 0 surely
    for a in range(1, u.size, _TABLE_NODE_BLOCK):
        b = min(a + _TABLE_NODE_BLOCK, u.size)
        first, last = int(lo[a:b].min()), int(hi[a:b].max())
        if last < first:
            continue
        mm = m[first:last + 1, None]
        xb = x[None, a:b]
        pmf = np.exp(logc[first:last + 1, None] + mm * np.log(xb) + (n - mm) * np.log1p(-xb))
        values[:, a:b] = weights[:, first:last + 1] @ pmf
    coef = window_table.coefficients(values)
    coef.flags.writeable = False
    return coef


def _tabulated(x, j, n: int, cut: int, precision: bool) -> np.ndarray:
    """:func:`_binomial_window_sum` with m_max = cut - j from the table: positions j <= the
    table's rows are read off it, the others (j > :data:`_TABLE_ROWS`) summed. ``j`` is a scalar,
    a row (its last axis ``x``'s: one position per column, as the position-major layout and a
    query-major row give it) or ``x``'s shape."""
    x = np.asarray(x, dtype=np.float64)
    j = np.asarray(j, dtype=np.float64)
    coef = _window_table(n, cut, precision)
    rows = coef.shape[1]
    if j.ndim == 0:
        if j <= rows:
            return window_table.evaluate(coef, n, x, int(j) - 1)
        return _summed(x, j, n, cut - j, precision)
    if j.shape != x.shape:
        j = j.reshape((1,) * (x.ndim - j.ndim) + j.shape)       # a row: one position per column
    read = j <= rows
    if read.all():
        return window_table.evaluate(coef, n, x, (j - 1).astype(np.int64))
    out = np.empty(x.shape)
    if j.shape == x.shape:
        out[read] = window_table.evaluate(coef, n, x[read], (j[read] - 1).astype(np.int64))
        rest = ~read
        out[rest] = _summed(x[rest], j[rest], n, cut - j[rest], precision)
        return out
    cols, rest = np.flatnonzero(read.ravel()), np.flatnonzero(~read.ravel())
    jr = j.ravel()
    out[..., cols] = window_table.evaluate(coef, n, x[..., cols], (jr[cols] - 1).astype(np.int64))
    out[..., rest] = _summed(x[..., rest], jr[rest], n, cut - jr[rest], precision)
    return out


def _summed(x, j, n: int, m_max, precision: bool) -> np.ndarray:
    """:func:`_binomial_window_sum`, every element's window summed (:func:`_window_sums`).

    Each element's sum depends on its own (x, j, m_max) alone and is added term by term in order
    of m, so an element of a stack (B, P) equal in all three to the one in the row above is not
    summed again but copied (an ``evt-eb`` table's posterior draws repeat a positive's value in
    ~70% of its draws): the same bits as summing it.
    """
    x, j, m_max = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(j, dtype=np.float64),
                                      np.asarray(m_max, dtype=np.float64))
    if x.ndim == 2 and x.shape[0] > 1:
        same = (x[1:] == x[:-1]) & (j[1:] == j[:-1]) & (m_max[1:] == m_max[:-1])
        if same.any():
            new = np.ones(x.shape, dtype=bool)
            np.logical_not(same, out=new[1:])
            out = np.empty(x.shape, dtype=np.float64)
            out[new] = _window_sums(x[new], j[new], n, m_max[new], precision)
            for r in range(1, x.shape[0]):
                np.copyto(out[r], out[r - 1], where=same[r - 1])
            return out
    return _window_sums(x.ravel(), j.ravel(), n, m_max.ravel(), precision).reshape(x.shape)


def _window_sums(x, j, n: int, m_max, precision: bool) -> np.ndarray:
    """:func:`_binomial_window_sum` of flat arrays. The window of an element (+-10 sd + 10 around
    n x, cut at m_max) is summed from its low end up, one term at a time: windows of similar
    length (within 25%) padded into blocks (elements, width) of at most :data:`_BLOCK_TERMS`,
    accumulated along each row in order of m (a padding term is 0.0 and adds nothing); each
    element's logs taken once, not per term; log C(n, m) from one table over 0..max m when that
    is no longer than the terms, and j / (j + m) from a table for whole j: the per-term values,
    looked up (the per-term form of 39d6b08 is the reference of tests/test_query_fast_path.py)."""
    m_max = np.minimum(m_max, n)
    out = np.zeros(x.shape, dtype=np.float64)
    valid = m_max >= 0
    # Degenerate laws: K = 0 or K = n almost surely.
    zero = valid & (x <= 0)
    out[zero] = 1.0
    one = valid & (x >= 1) & (m_max >= n)
    out[one] = (j[one] / (j[one] + n)) if precision else 1.0
    mid = np.flatnonzero(valid & (x > 0) & (x < 1))
    if mid.size == 0:
        return out
    xm = x[mid]
    mu = n * xm
    sd = np.sqrt(mu * (1.0 - xm))
    lo = np.maximum(0.0, np.floor(mu - _WINDOW_SD * sd - _WINDOW_SD))
    hi = np.minimum(m_max[mid], np.ceil(mu + _WINDOW_SD * sd + _WINDOW_SD))
    keep = hi >= lo
    # Below the window the pmf is negligible, so a CDF whose window lies entirely below m_max
    # is 1 up to 1e-15: the sum handles it the same way, no special case needed.
    mid, lo, hi = mid[keep], lo[keep].astype(np.int64), hi[keep].astype(np.int64)
    if mid.size == 0:
        return out
    lengths = hi - lo + 1
    top = int(hi.max())
    # every m a padded block reaches (lo + width - 1 <= top + longest - 1), at most n: no clipping
    reach = min(n, top + int(lengths.max()) - 1)
    table = log_choose(n, np.arange(reach + 1, dtype=np.float64)) if top < int(lengths.sum()) else None
    logx, log1mx = np.log(x[mid]), np.log1p(-x[mid])
    jm = j[mid]
    weights = None                  # j / (j + m) by (j, m) for whole j: the same quotients, looked up
    if precision and jm.min() >= 0 and (int(jm.max()) + 1) * (reach + 1) <= _CHUNK_TERMS and np.all(jm == np.floor(jm)):
        jv = np.arange(int(jm.max()) + 1, dtype=np.float64)[:, None]
        with np.errstate(invalid="ignore"):                              # 0 / 0 at j = m = 0, as computed per term
            weights = jv / (jv + np.arange(reach + 1, dtype=np.float64)[None, :])
        jm = jm.astype(np.int64)
    from numpy.lib.stride_tricks import sliding_window_view
    key = np.ceil(np.log(lengths) / np.log(1.25)).astype(np.int64)
    order = np.argsort(key, kind="stable")
    for group in np.split(order, np.flatnonzero(np.diff(key[order])) + 1):
        width = int(lengths[group].max())
        step = np.arange(width, dtype=np.float64)
        # row i of a window view holds entries i..i + width - 1: an element's terms, one row gather
        tab = None if table is None else sliding_window_view(table, width)
        wts = None if weights is None else sliding_window_view(weights, width, axis=1)
        for part in np.array_split(group, -(-group.size * width // _BLOCK_TERMS)):
            lo_p, hi_p = lo[part], hi[part]
            from_zero = not lo_p.any()
            m = step[None, :] if from_zero else lo_p.astype(np.float64)[:, None] + step    # (elements, width)
            pad = m > hi_p[:, None]
            padded = bool(pad.any())
            past_n = not from_zero and int(lo_p.max()) + width - 1 > reach    # a small n: clip m there
            if past_n:
                mi = np.minimum(lo_p[:, None] + np.arange(width), reach)
                m = mi.astype(np.float64)
            logpmf = m * logx[part][:, None]             # log C(n, m) + m log x + (n - m) log(1 - x), in place
            if table is None:
                logpmf += log_choose(n, m)                   # (a + b == b + a exactly)
            else:
                logpmf += table[mi] if past_n else tab[0][None, :] if from_zero else tab[lo_p]
            rest = n - m
            if rest.shape == logpmf.shape:
                rest *= log1mx[part][:, None]
            else:
                rest = rest * log1mx[part][:, None]
            logpmf += rest
            terms = np.exp(logpmf, out=logpmf)
            if weights is not None:
                terms *= wts[jm[part], 0] if from_zero else (
                    weights[jm[part][:, None], mi] if past_n else wts[jm[part], lo_p])
            elif precision:
                jj = jm[part][:, None]
                terms *= jj / (jj + m)
            if padded:
                np.copyto(terms, 0.0, where=pad)
            # each element's terms added one at a time in order of m (a sequential accumulate)
            out[mid[part]] = np.add.accumulate(terms, axis=1, out=terms)[:, -1]
    return out


def _positives(h: Hardness):
    """(x, j as float64, per-query sum) in the fastest layout of ``h``: position-major where it
    applies, else query-major with a segment sum."""
    bp = h.by_position
    if bp is not None:
        return h.x_by_position, bp.jf, bp.sums
    return h.x, h.jf, lambda v: ragged.group_sum(v, h.offsets)


def ap_at_k(h: Hardness, n: float, k: int | None = 1000, mode: str = "plugin") -> np.ndarray:
    """Per-query AP@k (ILIAS normalisation: divide by min(k, |G|)); k=None for full AP.

    plugin:   AP = sum_{j: r_j <= k} j / r_j / min(k, |G|),  r_j = j + N x_j
    expected: AP = sum_j E[1{K_j <= k - j} j / (j + K_j)] / min(k, |G|),  K_j ~ Bin(N, x_j)
    """
    n = check_n(n)
    k = check_k(k)
    _check_mode(mode)
    norm = h.n_pos if k is None else np.minimum(h.n_pos, k)
    x, j, sums = _positives(h)
    if mode == "plugin":
        r = n * x
        r += j                                      # r = j + N x, in place
        contrib = np.divide(j, r)
        if k is not None:
            np.multiply(contrib, _within(r, k), out=contrib)     # j / r > 0: times 0 or 1 is exact
    else:
        ni = _integer_n(n)
        m_max = np.full(x.shape, ni) if k is None else k - j
        contrib = _binomial_window_sum(x, j, ni, m_max, precision=True, cut=k)
    return sums(contrib) / norm


def hit_at_k(h: Hardness, n: float, k: int = 1, mode: str = "plugin") -> np.ndarray:
    """Per-query R@k as a hit rate: 1 if a positive is in the top k (K_1 <= k - 1).

    expected: P(K_1 <= k - 1), the Binomial CDF; for k = 1 this is (1 - x_1)^N.
    """
    n = check_n(n)
    k = check_k(k)
    if k is None:
        raise InvalidArgumentError("R@k needs a cut-off k")
    _check_mode(mode)
    x1 = h.first
    if mode == "plugin":
        return _within(1.0 + n * x1, k).astype(np.float64)
    if k == 1:
        return p_rank1(h, n)
    ni = _integer_n(n)
    return _binomial_window_sum(x1, 1.0, ni, k - 1.0, precision=False, cut=k)


def recall_at_k(h: Hardness, n: float, k: int = 100, mode: str = "plugin") -> np.ndarray:
    """Per-query fraction of positives in the top k: sum_j 1{j + K_j <= k} / |G|."""
    n = check_n(n)
    k = check_k(k)
    if k is None:
        raise InvalidArgumentError("Recall@k needs a cut-off k")
    _check_mode(mode)
    x, j, sums = _positives(h)
    if mode == "plugin":
        inside = _within(j + n * x, k).astype(np.float64)
    else:
        inside = _binomial_window_sum(x, j, _integer_n(n), k - j, precision=False, cut=k)
    return sums(inside) / h.n_pos


def reciprocal_rank(h: Hardness, n: float, k: int | None = None, mode: str = "plugin") -> np.ndarray:
    """Per-query reciprocal rank of the first positive (MRR is the mean), 0 beyond cut-off k.

    expected, no cut-off: E[1/(1+K)] = (1 - (1-x)^(N+1)) / ((N+1) x), K ~ Bin(N, x).
    """
    n = check_n(n)
    k = check_k(k)
    _check_mode(mode)
    x1 = h.first
    if mode == "plugin":
        r = 1.0 + n * x1
        rr = 1.0 / r
        return rr if k is None else np.where(_within(r, k), rr, 0.0)
    ni = _integer_n(n)
    if k is not None:
        return _binomial_window_sum(x1, 1.0, ni, k - 1.0, precision=True, cut=k)
    with np.errstate(divide="ignore", invalid="ignore"):
        rr = -np.expm1((ni + 1.0) * np.log1p(-x1)) / ((ni + 1.0) * x1)
    return np.where(x1 > 0, rr, 1.0)


def p_rank1(h: Hardness, n: float, poisson: bool = False) -> np.ndarray:
    """Per-query probability that the best positive ranks first: (1 - x_1)^N, or e^{-N x_1}.

    The Poisson form is the rare-event limit (N large, x small, N x = O(1)).
    """
    n = check_n(n)
    x1 = h.first
    if poisson:
        return np.exp(-n * x1)
    with np.errstate(divide="ignore"):
        return np.exp(n * np.log1p(-x1))


# A stack is evaluated in blocks of rows of at most this many values: one row of 60k positives
# (0.5 MB of float64) stays in a core's own cache, where a (17, 60k) array op streams 8 MB through
# the shared one: 2-2.5x the CPU time of one row at a time on the loaded 2-core machine, and
# blocks of 2 rows 1.3x (docs/benchmarks.md, "Query path with the interval: sorted once").
_STACK_BLOCK = 1 << 16


def per_query(h: Hardness, metric: str, n: float, k: int | None = None,
              mode: str = "plugin") -> np.ndarray:
    """Dispatch on a metric name from :data:`METRICS`; returns one value per query ((B, Q) for a
    stack (B, P), evaluated in cache-sized blocks of rows: the same values as one row at a time).
    The expected mode takes a stack whole: its cost is the Binomial terms, not memory traffic, and
    an element equal to the one in the row above is summed once (:func:`_binomial_window_sum`);
    a large stack is read off the table of window sums, within 2e-11 of summing it
    (:func:`_tabulated`), so there the rows alone may differ from it by that much."""
    if h.x.ndim == 2 and h.x.shape[0] > 1 and h.x.size > _STACK_BLOCK:
        if mode == "expected":      # whole, in C order like the blocks' concatenation (a mean over rows adds alike)
            return np.ascontiguousarray(_dispatch(h, metric, n, k, mode))
        rows = max(1, _STACK_BLOCK // max(h.x.shape[1], 1))
        if metric in ("AP", "Recall") and h.by_position is not None:
            h.x_by_position                         # gathered once for the whole stack, kept with it
        return np.concatenate([per_query(h.rows(slice(i, i + rows)), metric, n, k, mode)
                               for i in range(0, h.x.shape[0], rows)])
    return _dispatch(h, metric, n, k, mode)


def _dispatch(h: Hardness, metric: str, n: float, k: int | None, mode: str) -> np.ndarray:
    if metric == "AP":
        return ap_at_k(h, n, k, mode)
    if metric == "R":
        return hit_at_k(h, n, 1 if k is None else k, mode)
    if metric == "Recall":
        return recall_at_k(h, n, k, mode)
    if metric == "RR":
        return reciprocal_rank(h, n, k, mode)
    raise InvalidArgumentError(f"unknown metric {metric!r}; expected one of {', '.join(METRICS)}")


def mean_metric(h: Hardness, metric: str, n: float, k: int | None = None,
                mode: str = "plugin") -> float:
    """Benchmark value: the mean over queries of :func:`per_query`."""
    return float(per_query(h, metric, n, k, mode).mean())


def map_at_k(h: Hardness, n: float, k: int | None = 1000, mode: str = "plugin") -> float:
    """mAP@k at gallery size N (mean of :func:`ap_at_k`)."""
    return float(ap_at_k(h, n, k, mode).mean())


def metric_curve(h: Hardness, metric: str, ns, k: int | None = None,
                 mode: str = "plugin") -> np.ndarray:
    """The benchmark value at every gallery size in ``ns`` (one value per size)."""
    return np.array([mean_metric(h, metric, n, k, mode) for n in np.atleast_1d(ns)])
