"""The reranked scaling law: first-stage hardness + a rerank-score tail -> reranked metric at any N.

A reranker reorders only the first-stage top K' (``depth``) of a gallery of N iid distractors.
Write a distractor as (U, E): U its first-stage hardness (the share of the first-stage law at or
above its score, Uniform(0, 1) for iid distractors), E its rerank score. A query's positives,
in first-stage order p = 1..G, have first-stage hardness x_1 <= ... <= x_G and rerank scores t_p.

1. **Survival.** Positive p is in the top K' iff K_p + p <= K', K_p = #{U_i <= x_p} ~ Bin(N, x_p)
   (the existing law), i.e. iff U_(K'-p+1) > x_p. These events are nested (p survives => every
   p' < p does), so the survivors are positives 1..L, with P(L >= l) = P(Bin(N, x_l) <= K' - l).
2. **Who is reranked with them.** Given L = l the top K' holds m = K' - l distractors, the m
   smallest U. Let v = U_(m+1). If v <= x_{l+1} they are iid Uniform(0, v); if v > x_{l+1} (then
   exactly m distractors lie below x_{l+1}) they are iid Uniform(0, x_{l+1}). So, with
   w = min(v, x_{l+1}) (x_{G+1} = 1), they are iid Uniform(0, w), and w has the law:
   v ~ Beta(m + 1, N - m) on (x_l, x_{l+1}] and an atom P(Bin(N, x_{l+1}) = m) at x_{l+1}; the
   total is P(L = l) (exact, no approximation).
3. **Reranked rank.** Survivor p is outranked by the survivors that rerank above it (its position
   j'_p among survivors by t) and by M_p ~ Bin(m, rho_p(w)) distractors of the top K', where
   rho_p(w) = G_p(w) / w and G_p(w) = P(U <= w, E >= t_p) (pessimistic: a tie ranks above) is the
   **joint tail**: the share of distractors both in the first-stage top fraction w and reranking
   above p. The reranked rank is j'_p + M_p; a positive that does not survive keeps a rank > K'.

Metrics with a cut-off k <= K' only count survivors, so (per query)

    E[AP@k]     = sum_l sum_{nodes of w | l} weight * sum_{p <= l} E[1{j'_p + M <= k} j'_p / (j'_p + M)] / min(k, G)
    E[R@k]      = the same with the best-reranked survivor b (j'_b = 1): P(M_b <= k - 1)
    E[Recall@k] = sum_p P(j'_p + M_p <= k) / G,   E[RR@k] = E[1{M_b <= k-1} / (1 + M_b)]

``expected`` evaluates this exactly up to the quadrature of w's continuous part (``nodes``
equal-probability nodes of the truncated Beta) and the Binomial window sums of
:mod:`rscale.core.law`. ``plugin`` puts every count at its centre: L = max{l : l + N x_l <= K'},
w = min((K' - L) / N, x_{L+1}), M_p = (K' - L) rho_p(w); fed the *realised* quantities of one
gallery (x = K / N, G on the grid i / N from its own top list) it reproduces that gallery's exact
reranked ranks (tested against :func:`rscale.core.rerank.reranked_ranks`).

The joint tail G is what a distractor sample estimates: of S sampled distractors, those in the
first-stage top fraction w are the sample's top w S; G_p(w) ~= #{i <= w S : e_i >= t_p} / S.
A gallery's top K' is the sample's top ~K' S / N (about 50 of a 5% sample for K' = 1000), so the
sample stats must hold the rerank scores of at least that many top candidates per query
(:func:`joint_from_top`). Unlike first-stage hardness, the reranked quantity depends on N through
w ~ K'/N: as N grows the top K' becomes a more extreme slice of the first-stage law.

Example: one positive, x = 0 (first), joint tail G(w) = w / 2 (half of any top slice reranks
above it), K' = 3, N = 100 plugin: L = 1, m = 2, w = 0.02, M = 2 * 0.5 = 1, rank 2: AP@3 = 1/2.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rscale.core import ragged
from rscale.core.law import _binomial_window_sum, _window_sums, _within, check_k, check_n, log_choose
from rscale.errors import InvalidArgumentError

METRICS = ("AP", "R", "Recall", "RR")
MODES = ("expected", "plugin")


@dataclass(frozen=True)
class RerankedHardness:
    """Per positive of each query: first-stage hardness ``x`` (sorted ascending within the query:
    first-stage order), rerank score ``rerank`` and the joint tail ``joint[p]`` = G_p on its
    query's ``grid[q]`` (increasing from 0; G_p(w) <= w, non-decreasing). Build with :meth:`build`."""

    x: np.ndarray           # (P,)
    rerank: np.ndarray      # (P,)
    offsets: np.ndarray     # (Q+1,)
    grid: np.ndarray        # (Q, V)
    joint: np.ndarray       # (P, V)

    @classmethod
    def build(cls, x, rerank, offsets, grid, joint) -> "RerankedHardness":
        x = np.asarray(x, np.float64)
        rerank = np.asarray(rerank, np.float64)
        off = ragged.check_offsets(offsets, x.size)
        grid = np.atleast_2d(np.asarray(grid, np.float64))
        joint = np.atleast_2d(np.asarray(joint, np.float64))
        q = off.size - 1
        if rerank.shape != x.shape or grid.shape[0] != q or joint.shape != (x.size, grid.shape[1]):
            raise InvalidArgumentError(f"reranked hardness: x {x.shape}, rerank {rerank.shape}, grid {grid.shape} and "
                                       f"joint {joint.shape} do not fit {q} queries of {x.size} positives")
        if np.any(np.diff(off) == 0):
            raise InvalidArgumentError(f"query {int(np.flatnonzero(np.diff(off) == 0)[0])} has no positives")
        if not (np.all(np.isfinite(x)) and np.all((x >= 0) & (x <= 1))):
            raise InvalidArgumentError("first-stage hardness must lie in [0, 1]")
        if grid.shape[1] < 2 or np.any(grid[:, 0] != 0) or np.any(np.diff(grid, axis=1) <= 0) or np.any(grid > 1):
            raise InvalidArgumentError("each query's grid must start at 0, increase strictly and stay <= 1")
        pq = ragged.group_index(off)
        tol = 1e-12
        if (not np.all(np.isfinite(joint)) or np.any(joint < -tol) or np.any(joint > grid[pq] + tol)
                or np.any(np.diff(joint, axis=1) < -tol)):
            raise InvalidArgumentError("the joint tail must satisfy 0 <= G(w) <= w and be non-decreasing in w")
        order = ragged.sort_within_groups(x, off)
        return cls(x[order], rerank[order], off, grid, joint[order])

    @property
    def n_queries(self) -> int:
        return int(self.offsets.size - 1)


def joint_from_top(top_rerank, n_sampled, pos_rerank, offsets) -> tuple[np.ndarray, np.ndarray]:
    """(grid (Q, R+1), joint (P, R+1)) from the rerank scores of each query's top R first-stage
    candidates of a sample of S: grid i / S, G_p(i / S) = #{i' <= i : e_i' >= t_p} / S.

    With the whole gallery as the "sample" (S = N) this is the gallery's realised joint tail."""
    top = np.atleast_2d(np.asarray(top_rerank, np.float64))
    s = np.asarray(n_sampled, np.float64).reshape(-1)
    t = np.asarray(pos_rerank, np.float64)
    off = ragged.check_offsets(offsets, t.size)
    if top.shape[0] != s.size or s.size != off.size - 1:
        raise InvalidArgumentError(f"{top.shape[0]} rerank lists for {s.size} sample sizes and {off.size - 1} queries")
    if np.any(s < top.shape[1]):
        raise InvalidArgumentError("a query stores more reranked candidates than it sampled")
    grid = np.arange(top.shape[1] + 1)[None, :] / s[:, None]
    pq = ragged.group_index(off)
    above = top[pq] >= t[:, None]                       # pessimistic: a tie reranks above the positive
    joint = np.concatenate([np.zeros((t.size, 1)), np.cumsum(above, axis=1)], axis=1) / s[pq][:, None]
    return grid, joint


def _check(metric, k, depth, n, mode):
    if metric not in METRICS:
        raise InvalidArgumentError(f"unknown metric {metric!r}; expected one of {', '.join(METRICS)}")
    if mode not in MODES:
        raise InvalidArgumentError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
    depth = check_k(depth)
    k = check_k(k if k is not None else (1 if metric == "R" else depth))
    if depth is None or k > depth:
        raise InvalidArgumentError(f"a reranked metric needs a cut-off k <= the rerank depth K'={depth}, got k={k}")
    n = check_n(n)
    if n < depth:
        raise InvalidArgumentError(f"gallery size N={n:g} is smaller than the rerank depth K'={depth}")
    return k, depth, n


def _rho(grid_q, joint_rows, w):
    """rho_p(w) = G_p(w) / w for rows p and points w (linear interpolation of G; clamped at the
    grid's end; the first segment's slope at w = 0)."""
    w = np.atleast_1d(np.asarray(w, np.float64))
    wc = np.clip(w, grid_q[1] * 1e-9, grid_q[-1])
    i = np.clip(np.searchsorted(grid_q, wc, side="right") - 1, 0, grid_q.size - 2)
    frac = (wc - grid_q[i]) / (grid_q[i + 1] - grid_q[i])
    g = joint_rows[:, i] * (1 - frac) + joint_rows[:, i + 1] * frac
    return np.clip(g / wc, 0.0, 1.0)                    # (rows, points)


def _positions(t_survivors) -> np.ndarray:
    """1-based position of each survivor among the survivors by rerank score (ties: first-stage order)."""
    order = np.lexsort((np.arange(t_survivors.size), -t_survivors))
    pos = np.empty(t_survivors.size, np.float64)
    pos[order] = np.arange(1, t_survivors.size + 1)
    return pos


def _rho_rows(grid, joint_rows, qrow, w, end=None, top=None):
    """rho for rows of the joint tail (query ``qrow`` each) at per-row points w (rows, points).
    ``end`` (Q,) and ``top`` (Q,): each query's last grid value and last segment (V_q - 2), for a
    grid padded with +inf beyond them (:class:`_Stack`); None: the grid's own last column."""
    g = grid[qrow]                                                  # (rows, V)
    if end is None:
        wc = np.clip(w, g[:, 1:2] * 1e-9, g[:, -1:])
        i = np.clip((g[:, None, :] <= wc[:, :, None]).sum(axis=2) - 1, 0, g.shape[1] - 2)
    else:
        wc = np.clip(w, g[:, 1:2] * 1e-9, end[qrow][:, None])
        i = np.minimum(np.maximum((g[:, None, :] <= wc[:, :, None]).sum(axis=2) - 1, 0), top[qrow][:, None])
    lo, hi = np.take_along_axis(g, i, axis=1), np.take_along_axis(g, i + 1, axis=1)
    frac = (wc - lo) / (hi - lo)
    gl, gh = np.take_along_axis(joint_rows, i, axis=1), np.take_along_axis(joint_rows, i + 1, axis=1)
    return np.clip((gl * (1 - frac) + gh * frac) / wc, 0.0, 1.0)


# A slice of w whose probability is at most this is dropped (its nodes are not evaluated): the
# metric moves by less than this per dropped slice, since every per-node value lies in [0, 1].
_NEGLIGIBLE = 1e-16


@dataclass(frozen=True)
class _Level:
    """What the expected mode needs of survivor count l that does not depend on N or K': the
    queries with at least l positives (``qs``), their l-th and (l+1)-th hardness (``xn`` = 1 for a
    query of exactly l), the survivors' flat rows (Ql, l) and their positions among survivors by
    rerank score ``jp`` (Ql, l), and the best-reranked survivor's row ``best`` (Ql,)."""

    l: int
    qs: np.ndarray
    last: np.ndarray
    xl: np.ndarray
    xn: np.ndarray
    rows: np.ndarray
    jp: np.ndarray
    best: np.ndarray


def _levels(h) -> list:
    """Every survivor count's :class:`_Level` of ``h``, computed once per table and cached on it."""
    cached = h.__dict__.get("_levels_cache")
    if cached is not None:
        return cached
    n_pos = np.diff(h.offsets)
    out = []
    for l in range(1, int(n_pos.max()) + 1):
        qs = np.flatnonzero(n_pos >= l)
        start = h.offsets[qs]
        last = n_pos[qs] == l
        xl = h.x[start + l - 1]
        xn = np.where(last, 1.0, h.x[np.minimum(start + l, h.x.size - 1)])
        rows = start[:, None] + np.arange(l)[None, :]
        t = h.rerank[rows]
        first = np.arange(l)
        earlier = first[None, None, :] < first[None, :, None]             # ties: first-stage order
        above = (t[:, None, :] > t[:, :, None]) | ((t[:, None, :] == t[:, :, None]) & earlier)
        jp = 1.0 + above.sum(axis=2)
        best = rows[np.arange(qs.size), np.argmin(jp, axis=1)]
        out.append(_Level(l, qs, last, xl, xn, rows, jp, best))
    h.__dict__["_levels_cache"] = out                  # frozen dataclass: cache beside the fields
    return out


@dataclass(frozen=True)
class _Stack:
    """Several tables of the same queries and positives (the point and the half-sample replicates
    of one reranked input) as one: query t * Q + q is query q of table t, row t * P + p its
    positive p; grids padded with +inf to the longest (``end``, ``top``: each query's own last grid
    value and last segment), and each survivor count's :class:`_Level` concatenated, so the
    expected mode runs its level loop once for all of them."""

    n_queries: int
    sizes: np.ndarray       # (T Q,) positives per query
    grid: np.ndarray        # (T Q, V)
    end: np.ndarray         # (T Q,)
    top: np.ndarray         # (T Q,)
    joint: np.ndarray       # (T P, V)
    levels: list

    @classmethod
    def build(cls, tables) -> "_Stack":
        qn, pn = tables[0].n_queries, tables[0].x.size
        width = max(h.grid.shape[1] for h in tables)
        grid = np.full((len(tables) * qn, width), np.inf)
        joint = np.zeros((len(tables) * pn, width))
        end, top = np.empty(len(tables) * qn), np.empty(len(tables) * qn, np.int64)
        for t, h in enumerate(tables):
            v = h.grid.shape[1]
            grid[t * qn:(t + 1) * qn, :v] = h.grid
            joint[t * pn:(t + 1) * pn, :v] = h.joint
            joint[t * pn:(t + 1) * pn, v:] = h.joint[:, -1:]
            end[t * qn:(t + 1) * qn] = h.grid[:, -1]
            top[t * qn:(t + 1) * qn] = v - 2
        per_table = [_levels(h) for h in tables]
        levels = []
        for i, lv in enumerate(per_table[0]):
            parts = [lvs[i] for lvs in per_table]
            levels.append(_Level(lv.l, np.concatenate([p.qs + t * qn for t, p in enumerate(parts)]),
                                 np.concatenate([p.last for p in parts]), np.concatenate([p.xl for p in parts]),
                                 np.concatenate([p.xn for p in parts]),
                                 np.concatenate([p.rows + t * pn for t, p in enumerate(parts)]),
                                 np.concatenate([p.jp for p in parts]),
                                 np.concatenate([p.best + t * pn for t, p in enumerate(parts)])))
        return cls(len(tables) * qn, np.tile(np.diff(tables[0].offsets), len(tables)), grid, end, top, joint,
                   levels)


def _expected_all(h, metric, n, k, depth, nodes):
    """:func:`_expected_stack` of one table."""
    return _expected_stack(_Stack.build([h]), metric, n, k, depth, nodes)


def _expected_stack(h, metric, n, k, depth, nodes):
    """The expected mode for every query of a :class:`_Stack` at once, one survivor count l at a
    time (m = K' - l is shared by all queries at that level, so the Beta laws and Binomial sums
    are vectorised).

    The same quantities as :func:`_expected_reference`, evaluated only where they carry weight: a
    query's continuous slice of w, or its atom, with probability <= ``_NEGLIGIBLE`` (most (query, l)
    pairs: L is nearly determined) gets no Beta quantiles and no Binomial sums, and a pair whose
    Chernoff bound already puts both below it gets no Beta tail either (:func:`_negligible_levels`);
    the slice's nodes are quantiles of a cached interpolant (:func:`rscale.core.beta_quantile.
    beta_isf`); rho is looked up once per slice for all its nodes; scipy.special, not scipy.stats
    (whose import alone costs ~1.5 s)."""
    from scipy.special import betaincc, xlog1py, xlogy

    from rscale.core.beta_quantile import beta_isf
    ni = int(round(n))
    total = np.zeros(h.n_queries)
    u = (np.arange(nodes) + 0.5) / nodes
    for lv in h.levels[:depth]:
        m = depth - lv.l
        keep = np.flatnonzero(~_negligible_levels(lv.xl, lv.xn, lv.last, m, ni))
        if keep.size == 0:
            continue
        qs, last, xl, xn = lv.qs[keep], lv.last[keep], lv.xl[keep], lv.xn[keep]
        sf_l = betaincc(m + 1, ni - m, xl)
        sf_n = np.where(last, 0.0, betaincc(m + 1, ni - m, xn))
        cont = np.maximum(sf_l - sf_n, 0.0)
        log_c = float(log_choose(ni, np.array([float(m)]))[0])
        atom = np.where(last, 0.0, np.exp(log_c + xlogy(m, xn) + xlog1py(ni - m, -xn)))
        live = np.flatnonzero(cont > _NEGLIGIBLE)
        has_atom = np.flatnonzero(atom > _NEGLIGIBLE)
        if live.size == 0 and has_atom.size == 0:
            continue
        w = np.clip(beta_isf(m + 1, ni - m, sf_l[live, None] - cont[live, None] * u[None, :]),
                    xl[live, None], xn[live, None])
        w = np.where(np.isfinite(w), w, xn[live, None])                    # weightless nodes of an empty slice
        for sl, pts, wt in ((live, w, np.repeat(cont[live, None] / nodes, nodes, axis=1)),
                            (has_atom, xn[has_atom, None], atom[has_atom, None])):
            if sl.size == 0:
                continue
            val = _level_values(h, lv, keep[sl], qs[sl], pts, metric, k, m)
            total += np.bincount(np.repeat(qs[sl], pts.shape[1]), weights=(wt * val).ravel(), minlength=h.n_queries)
    return total


def _negligible_levels(xl, xn, last, m: int, n: int) -> np.ndarray:
    """Per (query, level): whether the continuous slice (x_l, x_{l+1}] of v ~ Beta(m + 1, n - m) and
    the atom P(Bin(n, x_{l+1}) = m) both certainly have probability <= ``_NEGLIGIBLE``, by the
    Chernoff bound P(Bin(n, x) <= m) <= exp(-n KL(m / n || x)) for x > m / n (slice and atom lie in
    {Bin(n, x_l) <= m}) and P(Bin(n, x) >= m) <= exp(-n KL(m / n || x)) for x < m / n (then the slice
    lies in {Bin(n, x_{l+1}) >= m + 1} and the atom in {Bin(n, x_{l+1}) >= m})."""
    from scipy.special import xlog1py, xlogy
    f = m / n

    def kl(x):
        x = np.clip(x, 1e-300, 1.0 - 1e-16)
        with np.errstate(all="ignore"):
            return xlogy(f, f) - xlogy(f, x) + xlog1py(1.0 - f, -f) - xlog1py(1.0 - f, -x)

    bound = np.log(_NEGLIGIBLE) - 1.0                                    # a margin for rounding of the bound
    above = (xl > f) & (-n * kl(xl) < bound)
    below = ~last & (xn < f) & (-n * kl(xn) < bound)
    return above | below


def _level_values(h, lv, idx, qs, w, metric, k, m) -> np.ndarray:
    """(slices, points): the per-query metric given survivor count ``lv.l`` and the slice point w
    (slices, points) for entries ``idx`` of the level (their queries ``qs``)."""
    pts = w.shape[1]
    if metric in ("R", "RR"):
        rho = _rho_rows(h.grid, h.joint[lv.best[idx]], qs, w, h.end, h.top)              # (slices, points)
        return _window_sums(rho.ravel(), np.ones(rho.size), m, np.full(rho.size, k - 1),
                            metric == "RR").reshape(rho.shape)
    l = lv.l
    rho = _rho_rows(h.grid, h.joint[lv.rows[idx].ravel()], qs.repeat(l), w.repeat(l, axis=0), h.end, h.top)
    j = np.repeat(lv.jp[idx].reshape(-1, 1), pts, axis=1)                                # (slices * l, points)
    v = _window_sums(rho.ravel(), j.ravel(), m, (k - j).ravel(), metric == "AP")
    norm = np.minimum(k, h.sizes[qs]) if metric == "AP" else h.sizes[qs]
    return v.reshape(-1, l, pts).sum(axis=1) / norm[:, None]


def _expected_reference(h, metric, n, k, depth, nodes):
    """The expected mode as first written (scipy.stats, every node of every level evaluated), kept as
    the reference :func:`_expected_all` is tested and benchmarked against (``benchmarks/rerank_law_speed.py``)."""
    from scipy.stats import beta, binom
    ni = int(round(n))
    n_pos = np.diff(h.offsets)
    total = np.zeros(h.n_queries)
    for l in range(1, min(int(n_pos.max()), depth) + 1):
        m = depth - l
        qs = np.flatnonzero(n_pos >= l)
        start = h.offsets[qs]
        last = n_pos[qs] == l
        xl = h.x[start + l - 1]
        xn = np.where(last, 1.0, h.x[np.minimum(start + l, h.x.size - 1)])
        sf_l = beta.sf(xl, m + 1, ni - m)
        sf_n = np.where(last, 0.0, beta.sf(xn, m + 1, ni - m))
        cont = np.maximum(sf_l - sf_n, 0.0)
        u = (np.arange(nodes) + 0.5) / nodes
        w = np.clip(beta.isf(sf_l[:, None] - cont[:, None] * u[None, :], m + 1, ni - m), xl[:, None], xn[:, None])
        w = np.where(np.isfinite(w), w, xn[:, None])                        # weightless nodes of an empty slice
        atom = np.where(last, 0.0, binom.pmf(m, ni, xn))
        w = np.concatenate([w, xn[:, None]], axis=1)                       # (Ql, nodes + 1)
        wt = np.concatenate([np.repeat(cont[:, None] / nodes, nodes, axis=1), atom[:, None]], axis=1)
        # survivors: the first l positives of each query, their positions among them by rerank score
        rows = (start[:, None] + np.arange(l)[None, :]).ravel()
        t = h.rerank[rows].reshape(-1, l)
        first = np.arange(l)
        earlier = first[None, None, :] < first[None, :, None]             # ties: first-stage order
        above = (t[:, None, :] > t[:, :, None]) | ((t[:, None, :] == t[:, :, None]) & earlier)
        jp = 1.0 + above.sum(axis=2)                                         # (Ql, l)
        qrow = np.repeat(qs, l)
        if metric in ("R", "RR"):
            best = rows.reshape(-1, l)[np.arange(qs.size), np.argmin(jp, axis=1)]
            rho = _rho_rows(h.grid, h.joint[best], qs, w)                    # (Ql, nodes + 1)
            val = _binomial_window_sum(rho.ravel(), np.ones(rho.size), m, np.full(rho.size, k - 1),
                                       precision=metric == "RR").reshape(rho.shape)
        else:
            rho = _rho_rows(h.grid, h.joint[rows], qrow, np.repeat(w, l, axis=0))   # (Ql * l, nodes + 1)
            j = np.repeat(jp.reshape(-1, 1), w.shape[1], axis=1)
            v = _binomial_window_sum(rho.ravel(), j.ravel(), m, (k - j).ravel(),
                                     precision=metric == "AP").reshape(rho.shape)
            norm = np.minimum(k, n_pos[qs]) if metric == "AP" else n_pos[qs]
            val = v.reshape(qs.size, l, -1).sum(axis=1) / norm[:, None]
        total[qs] += (wt * val).sum(axis=1)
    return total


def _plugin_query(h, q, metric, n, k, depth):
    a, b = h.offsets[q], h.offsets[q + 1]
    x, t, joint, grid_q = h.x[a:b], h.rerank[a:b], h.joint[a:b], h.grid[q]
    g = x.size
    f = np.arange(1, g + 1)
    inside = np.flatnonzero(_within(f + n * x, depth))
    survivors = int(inside.max()) + 1 if inside.size else 0     # nested: a prefix of first-stage order
    if survivors == 0:
        return 0.0
    m = depth - survivors
    w = min(m / n, x[survivors] if survivors < g else 1.0)
    big_m = m * _rho(grid_q, joint[:survivors], w)[:, 0] if m > 0 and w > 0 else np.zeros(survivors)
    jp = _positions(t[:survivors])
    r = jp + big_m
    if metric in ("R", "RR"):
        best = r[int(np.argmin(jp))]
        return float(_within(np.array([best]), k)[0]) * (1.0 / best if metric == "RR" else 1.0)
    ok = _within(r, k)
    if metric == "AP":
        return float(np.sum(np.where(ok, jp / r, 0.0)) / min(k, g))
    return float(ok.sum() / g)


@dataclass(frozen=True)
class SurvivorGrid:
    """The plug-in's view of a reranked table at (N, K'), every query's positives padded to the
    largest query (Q, G) in first-stage order: which positives survive into the gallery's top K'
    (a prefix), how many top-K' distractors they share (m = K' - survivors), the share rho of
    those that rerank above each survivor (0 where m or the slice w is 0; NaN for the dead), and
    each survivor's position among the survivors by rerank score (jp, 1-based). Shared by the
    plug-in metric and the gallery-noise term (:func:`rscale.core.rerank_replicates.gallery_sd`)."""

    sizes: np.ndarray       # (Q,) positives per query
    alive: np.ndarray       # (Q, G) survivors
    survivors: np.ndarray   # (Q,)
    m: np.ndarray           # (Q,) top-K' distractors
    rho: np.ndarray         # (Q, G)
    jp: np.ndarray          # (Q, G)

    @classmethod
    def build(cls, h, n, depth) -> "SurvivorGrid":
        sizes = np.diff(h.offsets)
        q, g = sizes.size, int(sizes.max())
        col = ragged.position_in_group(h.offsets) - 1
        qi = ragged.group_index(h.offsets)
        x = np.full((q, g), np.inf)
        x[qi, col] = h.x
        t = np.full((q, g), -np.inf)
        t[qi, col] = h.rerank
        f = np.arange(1, g + 1)[None, :]
        inside = _within(f + n * x, depth)                       # a prefix of first-stage order (x ascending)
        survivors = np.where(inside.any(axis=1), g - np.argmax(inside[:, ::-1], axis=1), 0)
        m = depth - survivors
        nxt = np.where(survivors < sizes, x[np.arange(q), np.minimum(survivors, g - 1)], 1.0)
        w = np.minimum(m / n, nxt)
        alive = f <= survivors[:, None]                          # (Q, G)
        rows = np.flatnonzero(alive[qi, col])                    # the surviving positives (flat order)
        rho = np.full((q, g), np.nan)
        if rows.size:
            rq = qi[rows]
            rho[rq, col[rows]] = np.where((m[rq] > 0) & (w[rq] > 0),
                                          _rho_rows(h.grid, h.joint[rows], rq, w[rq][:, None])[:, 0], 0.0)
        ts = np.where(alive, t, -np.inf)
        earlier = np.arange(g)[None, :] < np.arange(g)[:, None]               # [p, p']: p' before p
        above = (ts[:, None, :] > ts[:, :, None]) | ((ts[:, None, :] == ts[:, :, None]) & earlier[None])
        jp = 1.0 + (above & alive[:, None, :]).sum(axis=2)                     # position among survivors
        return cls(sizes, alive, survivors, m, rho, jp)


def _plugin_all(h, metric, n, k, depth):
    """:func:`_plugin_query` for every query at once: positives padded to the largest query (Q, G)."""
    grid = SurvivorGrid.build(h, n, depth)
    sizes, alive, survivors, jp = grid.sizes, grid.alive, grid.survivors, grid.jp
    q = sizes.size
    big_m = np.where(alive, grid.m[:, None] * np.nan_to_num(grid.rho), 0.0)
    r = jp + big_m
    ok = _within(r, k) & alive
    if metric in ("R", "RR"):
        best = np.argmin(np.where(alive, jp, np.inf), axis=1)
        rb = r[np.arange(q), best]
        hit = ok[np.arange(q), best]
        out = np.where(hit, 1.0 / rb if metric == "RR" else 1.0, 0.0)
    elif metric == "AP":
        out = np.where(ok, jp / r, 0.0).sum(axis=1) / np.minimum(k, sizes)
    else:
        out = ok.sum(axis=1) / sizes
    return np.where(survivors > 0, out, 0.0)


def _check_reach(h, n, depth) -> None:
    reach = h.grid[:, -1]
    short = np.flatnonzero(reach * n < depth * (1 - 1e-12) - 1e-9)
    if short.size:
        q = int(short[0])
        raise InvalidArgumentError(
            f"the rerank scores of query {q} reach the top {reach[q]:.3g} of the first-stage law, less than "
            f"K'/N = {depth / n:.3g}: rerank more of the sample's top candidates, or ask for N >= {depth / reach[q]:.3g}")


def reranked_per_query(h: RerankedHardness, metric: str, n: float, k: int | None = None, *, depth: int,
                       mode: str = "expected", nodes: int = 16) -> np.ndarray:
    """Per-query reranked metric (``AP``, ``R``, ``Recall`` or ``RR`` at cut-off k <= ``depth``)
    at gallery size N after reranking the first-stage top ``depth`` (K'); see the module docstring."""
    k, depth, n = _check(metric, k, depth, n, mode)
    if nodes < 1:
        raise InvalidArgumentError(f"nodes must be >= 1, got {nodes}")
    _check_reach(h, n, depth)
    if mode == "plugin":
        return _plugin_all(h, metric, n, k, depth)
    return _expected_all(h, metric, n, k, depth, nodes)


def reranked_per_query_stacked(tables, metric: str, n: float, k: int | None = None, *, depth: int,
                               mode: str = "expected", nodes: int = 16) -> np.ndarray:
    """(T, Q): :func:`reranked_per_query` of each of ``tables`` (the same queries and positives:
    a point and its half-sample replicates), the expected mode evaluated for all of them in one
    level loop (:class:`_Stack`; equal to the one-table evaluation up to float rounding)."""
    tables = list(tables)
    if mode != "expected" or len(tables) < 2:
        return np.stack([reranked_per_query(h, metric, n, k, depth=depth, mode=mode, nodes=nodes) for h in tables])
    k, depth, n = _check(metric, k, depth, n, mode)
    for h in tables:
        if h.n_queries != tables[0].n_queries or not np.array_equal(h.offsets, tables[0].offsets):
            raise InvalidArgumentError("stacked reranked tables must have the same queries and positives")
        _check_reach(h, n, depth)
    if nodes < 1:
        raise InvalidArgumentError(f"nodes must be >= 1, got {nodes}")
    cached = tables[0].__dict__.get("_stack_cache")
    if cached is not None and len(cached[0]) == len(tables) and all(a is b for a, b in zip(cached[0], tables)):
        stack = cached[1]
    else:
        stack = _Stack.build(tables)
        tables[0].__dict__["_stack_cache"] = (tuple(tables), stack)   # frozen dataclass: cache beside the fields
    out = _expected_stack(stack, metric, n, k, depth, nodes)
    return out.reshape(len(tables), tables[0].n_queries)


def reranked_metric(h: RerankedHardness, metric: str, n: float, k: int | None = None, *, depth: int,
                    mode: str = "expected", nodes: int = 16) -> float:
    """The benchmark value: the mean over queries of :func:`reranked_per_query`."""
    return float(reranked_per_query(h, metric, n, k, depth=depth, mode=mode, nodes=nodes).mean())


def half_sample_corrected(point, halves) -> np.ndarray:
    """Per-query reranked values with the sample-noise (Jensen) bias of the joint tail removed to
    first order: ``2 v_S - mean_i v_{S/2, i}``, ``point`` (Q,) the law on the sample's joint tail
    and ``halves`` (H, Q) the same law, same first-stage hardness, on the joint tails of H disjoint
    half-samples (:func:`rscale.core.subsample.split_halves`).

    Why: the metric is convex in the share rho_b of top-K' distractors that rerank above the best
    survivor (R@1 = E (1 - rho_b)^m, m ~ K'), and rho_b is estimated from the few sample points of
    the top slice (about K' S / N), so E f(rho_hat) > f(rho) even where rho_hat is unbiased. That
    bias is proportional to Var(rho_hat), ~1/S, so a half-sample carries twice of it and the
    difference removes it (Richardson extrapolation in 1/S). Measured on the Gaussian rerank model
    (docs/benchmarks.md, "Reranked R@1 bias"): rho_hat's mean within 0.7-1.3x of rho, its sd 0.9-1.5x
    its mean, and R@1 overstated by +0.037 on average over 5 cells, -0.001 after (per cell +0.001 to
    +0.015, except r = 0.9, unbiased before, overcorrected to -0.038). Per-query values may leave
    [0, 1]; their mean is the estimate.

    Example: point [0.5], halves [[0.55], [0.57]] -> [0.44]."""
    point = np.asarray(point, np.float64)
    halves = np.atleast_2d(np.asarray(halves, np.float64))
    if halves.shape[1:] != point.shape or halves.shape[0] < 1:
        raise InvalidArgumentError(f"half-sample values {halves.shape} do not fit point values {point.shape}")
    return 2.0 * point - halves.mean(axis=0)


# A fitted shape within this of -1 is at the bound (fit_gpd's search stops ~1e-8 short of it).
_SHAPE_BOUND_TOL = 1e-6


def joint_from_top_smoothed(top_rerank, n_sampled, pos_rerank, offsets, *, points: int = 48,
                            min_exceedances: int = 10, share: float = 0.25,
                            shape: str = "own", at_bound: str = "counts") -> tuple[np.ndarray, np.ndarray]:
    """:func:`joint_from_top` with a generalized-Pareto tail for the rerank scores of each top slice.

    The share of the slice's (the sample's top i) rerank scores at or above t_p is a count, but
    for the positives that matter most (those few top-K' distractors rerank above) the slice holds
    none or one such score, and 0 / i would promise rank 1 (the count's Jensen bias). As the first
    stage does, the top ``share`` of the slice's scores (at least ``min_exceedances``) above their
    threshold u get a GPD tail (:func:`rscale.core.tailfit.fit_gpd`, shape in [-1, 0]):
    rho(t) = (k_u / i) P(Y >= t - u) for t > u; at or below u the count is used. Evaluated at
    ``points`` slice sizes i (geometric in i; slices of at most ``min_exceedances`` use counts)
    and made non-decreasing in w. ``shape``: ``own`` (each query's fitted shape, the default),
    ``shared`` (the median over queries, scale refitted) or ``exponential`` (shape 0).

    A fit whose shape sits at the lower bound xi = -1 is not a tail model: that GPD is the uniform
    law on [0, sigma], the maximum-likelihood limit when the excesses pile up towards an end point
    (bounded scores, such as the crop reranker's cosines), and its share above t falls only
    linearly to the end point, so it overstates every share near it (on the simulator's rerank
    model through the rank-preserving map Phi(E), R@1 predicted 0 for 0.30: docs/benchmarks.md,
    "Reranked joint tail at the shape bound"). With ``at_bound="counts"`` (the default) such a
    (query, slice) keeps its counts, which see only ranks; ``"gpd"`` uses the fit as it is (the
    estimator before this rule, kept for that benchmark)."""
    from rscale.core.gpd import gpd_logsf
    from rscale.core.tailfit import fit_gpd, fit_sigma_given_xi
    if shape not in ("own", "shared", "exponential"):
        raise InvalidArgumentError(f"shape must be own, shared or exponential, got {shape!r}")
    if at_bound not in ("counts", "gpd"):
        raise InvalidArgumentError(f"at_bound must be counts or gpd, got {at_bound!r}")
    top = np.atleast_2d(np.asarray(top_rerank, np.float64))
    s = np.asarray(n_sampled, np.float64).reshape(-1)
    t = np.asarray(pos_rerank, np.float64)
    off = ragged.check_offsets(offsets, t.size)
    q, r = top.shape
    if s.size != q or off.size - 1 != q or np.any(s < r):
        raise InvalidArgumentError(f"{q} rerank lists for {s.size} sample sizes and {off.size - 1} queries")
    sizes = np.unique(np.round(np.geomspace(1, r, points)).astype(np.int64))
    grid = np.concatenate([np.zeros((q, 1)), sizes[None, :] / s[:, None]], axis=1)
    pq = ragged.group_index(off)
    joint = np.zeros((t.size, sizes.size + 1))
    for col, i in enumerate(sizes, start=1):
        e = -np.sort(-top[:, :i], axis=1)                          # (Q, i) descending
        rho = (e[pq] >= t[:, None]).sum(axis=1) / i
        k_u = max(min_exceedances, int(share * i))
        if i > k_u:
            u = e[:, k_u]
            excess = e[:, :k_u] - u[:, None]
            if shape == "own":
                fit = fit_gpd(excess)
                xi, sigma = fit.xi, fit.sigma
            else:
                xi = np.zeros(q) if shape == "exponential" else np.full(q, float(np.median(fit_gpd(excess).xi)))
                sigma = fit_sigma_given_xi(excess, np.maximum(xi, -1 + 1e-9))
            beyond = t > u[pq]
            if at_bound == "counts":
                beyond &= (xi > -1.0 + _SHAPE_BOUND_TOL)[pq]
            y = t[beyond] - u[pq][beyond]
            rho[beyond] = k_u / i * np.exp(gpd_logsf(y, xi[pq][beyond], sigma[pq][beyond]))
        joint[:, col] = rho * i / s[pq]
    return grid, np.maximum.accumulate(joint, axis=1)
