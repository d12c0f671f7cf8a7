"""The back-test: predict the sample's own metric (a gallery of N = S distractors, known exactly)
from disjoint 1/m shares of it, to measure the estimator's error at the user's extrapolation
factor on the user's own data (docs/design.md, "Uncertainty reported with a prediction").

Exact value at N = S: a positive j of a query (positives best first) with c sampled distractors
at or above it has rank j + c in a gallery equal to the sample, which is the law's plug-in on
x = c / S at N = S (:func:`sample_metric`; tests compare it with a brute-force ranking).

Estimate time (:func:`backtest_hardness`, the only fits): for each factor m of
:data:`FACTORS` the sample is partitioned into m disjoint uniform shares by sequential thinning
(share j keeps each remaining distractor with p = 1 / (m - j),
:func:`rscale.core.subsample.subsample`), and the first :data:`PER_FACTOR` shares are
re-estimated with the same estimator and parameters. Factor 2 needs no fit: the half-sample
replicates (:mod:`rscale.core.replicates`) are uniform halves. Cap (:func:`max_factor`): a share
keeps at least :data:`MIN_SUB_SAMPLED` sampled distractors and :data:`MIN_SUB_TOP` top scores
on its smallest query; a share the estimator refuses ends the grid there.

Why only m = 2 and 4 (chosen on the simulator design set, benchmarks/backtest_rule.py,
docs/benchmarks.md): a 1/m share keeps only 1/m of the sample's top-K list, so its tail fit sees
m times fewer excesses than the user's fit; from m = 8 on that handicap, not the extrapolation,
dominates its error (predicting S from S/64 was off by +0.03 to +0.09 where predicting 64 S from
S was off by -0.01 to +0.07), and the interval grew 2-4x wider than needed. Cutting the full
sample's top list to the shares' length to cancel the handicap over-corrected the bounded
family (measured, dropped).

Query time (:func:`backtest_error`): for any measure, cut-off and mode, each stored share's
prediction at N = S minus the exact value gives one signed error e_i at its factor m_i (16 halves
at m = 2, 4 quarters at m = 4). The carry to a requested factor f = N / S (:func:`carry`) is a
regression of those share errors on u = log m through the origin (a gallery of S predicted from
S is exact: e = 0 at m = 1), e = b u, with the prediction interval of one new error at
U = log f: b U +- t_{n-1} s sqrt(1 + U^2 / sum u_i^2), s the residual sd (n - 1 degrees of
freedom). Where the shares agree on a slope the band is narrow and grows with the distance in
log f only through the slope's uncertainty; where they disagree (errors at 2 and 4 that no common
slope fits, or shares scattered around their mean) it is wide, in both directions. No constant
but the level. This replaced e(f) = e_4 log f / log 4 (a fixed log-factor scale from the largest
factor, no uncertainty of its own), chosen among the variants of docs/benchmarks.md ("Carrying the
back-test to the user's factor") on the design data only. f <= 1 has no term (None).

The level carry (:func:`carry_level`; measured, not shipped: docs/benchmarks.md, "The share's
handicap in the back-test"; benchmarks/interval_handicap.py computes it from the sample stats).
A 1/m share's error at the sample is the estimator's error at factor m plus the share's
handicap (its tail fitted on K/m excesses), and the estimate is not exact at N = S either. Three measurements need no fit: the estimate's own error at N = S (:func:`own_error`,
e_11), and, per share, its increment over its own gallery (:func:`increment_errors`): a quarter
predicting its union with j - 1 other quarters (u = log j, j = 2..4) minus predicting its own
gallery, a half predicting the sample minus its own half (u = log 2), each at w = log m. The
share's own level cancels in an increment; the rate still depends on m, and the error grows
faster than log f, so d = a u + b u^2 + c u w, fitted through 0, is carried to U = log f at
w = 0: e(f) = e_11 + a U + b U^2 with the t prediction band of one new increment. No fit and no
constant; 16 + 28 increments per measure. Held out (cov2, realset, realset2) it covered more
(evt-eb 55/56 against 50/56) at 1.81x the slope carry's mean width; the rule written before
measuring capped the width at 1.5x, so the slope carry stays, and the shares' counts are not
stored in the hardness file (they would double its read time for a carry nobody uses).

Per-query sample sizes may differ: the target of query q is a gallery of its own S_q, so
predictions use x S_q / S_ref at N = S_ref (the plug-in rank j + S_q x) with S_ref = max S.

Example: ``backtest_error(est, bt, "AP", 1000, "plugin", factor=20.0)`` returns a
:class:`BacktestError` (e(f) at f = 20 and its band, the largest factor measured, e there, shares).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

FACTORS = (4,)              # with the halves (2): chosen on the simulator design set (module docstring)
PER_FACTOR = 4              # disjoint shares re-estimated per factor (4 fits)
MIN_SUB_SAMPLED = 100       # a share keeps at least this many sampled distractors per query
MIN_SUB_TOP = 50            # ... and this many top scores (the tail fit needs excesses)
SEED = 2029


def max_factor(ss, factors=FACTORS) -> int:
    """The largest factor of ``factors`` whose 1/m share keeps :data:`MIN_SUB_SAMPLED` sampled
    distractors and :data:`MIN_SUB_TOP` top scores on the sample's smallest query (1: none)."""
    s_min, k = int(np.min(ss.n_sampled)), int(ss.k)
    ok = [m for m in (2, *factors) if s_min / m >= MIN_SUB_SAMPLED and k / m >= MIN_SUB_TOP]
    return max(ok) if ok else 1


def disjoint_shares(ss, m: int, count: int, seed: int = SEED) -> list:
    """The first ``count`` of m disjoint uniform 1/m shares of the sample (sequential thinning:
    share j keeps each distractor not in shares 0..j-1 with probability 1 / (m - j))."""
    from rscale.core.subsample import subsample
    shares, rest = [], ss
    for j in range(min(count, m)):
        p = 1.0 / (m - j)
        shares.append(subsample(rest, p, seed=seed + 101 * m + j))
        if j + 1 < min(count, m):
            rest = subsample(rest, p, seed=seed + 101 * m + j, complement=True)
    return shares


def backtest_hardness(ss, *, method: str, params: dict, factors=FACTORS, per_factor: int = PER_FACTOR,
                      seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """((P, C) share hardness, (C,) factor of each column) for every factor of ``factors`` up to
    :func:`max_factor`, :data:`PER_FACTOR` disjoint shares each. Stops at the first factor the
    estimator refuses (an RscaleError on a share)."""
    from rscale.core.estimators.methods import estimate as run
    from rscale.core.estimators.methods import stored_params
    from rscale.errors import RscaleError

    kwargs = stored_params(method, params)
    top = max_factor(ss, factors)
    cols, col_factors = [], []
    for m in (f for f in factors if f <= top):
        try:
            xs = [run(share, method, **kwargs).x for share in disjoint_shares(ss, m, per_factor, seed)]
        except RscaleError:
            break
        cols += xs
        col_factors += [m] * len(xs)
    if not cols:
        return np.empty((ss.n_positives, 0)), np.empty(0, dtype=np.int64)
    return np.stack(cols, axis=1), np.asarray(col_factors, dtype=np.int64)


@dataclass(frozen=True)
class Backtest:
    """What a hardness file stores for the back-test: the sample's counts (P,), the share hardness
    columns (P, C) and their factors (C,). Factor 2's shares are the estimate's replicates.
    Optionally (not stored in the file; the level carry's inputs): each share column's own counts
    (P, C) and sizes per query (Q, C), and the same for the replicates' halves (P, R), (Q, R)
    (:func:`share_counts`, :func:`rscale.core.replicates.replicate_counts`)."""

    counts: np.ndarray
    columns: np.ndarray | None = None
    column_factors: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    column_counts: np.ndarray | None = None
    column_sizes: np.ndarray | None = None
    replicate_counts: np.ndarray | None = None
    replicate_sizes: np.ndarray | None = None

    def factors(self, est) -> list[int]:
        """Stored factors: 2 when ``est`` has replicates and the file a back-test (version 3), and
        the factors of the share columns."""
        if self.columns is None:
            return []
        return ([2] if est.replicates is not None else []) + sorted({int(m) for m in self.column_factors})


@dataclass(frozen=True)
class BacktestError:
    """The carried error for one measure at factor f: ``at_n`` e(f) and its prediction band
    [``low``, ``high``] (:func:`carry`); ``factor`` the largest stored factor at or below f (or
    the smallest above it) with ``error`` its mean share error and ``shares`` its share count:
    'predicting the sample from 1/m of it was off by e_m'. ``share_factors`` / ``share_errors``:
    every share's factor and error (what the band was fitted to; a paired difference regresses
    the differences of the two sides' share errors)."""

    at_n: float
    factor: int
    error: float
    shares: int
    low: float = float("nan")
    high: float = float("nan")
    share_factors: np.ndarray = field(default=None, compare=False, repr=False)
    share_errors: np.ndarray = field(default=None, compare=False, repr=False)


def sample_metric(est, counts, metric: str, k) -> np.ndarray:
    """Per-query exact metric of a gallery equal to the sample: the plug-in on c / S_ref at
    N = S_ref, i.e. rank j + c for positive j with count c."""
    from rscale.core import law
    s_ref = float(np.max(est.n_sampled))
    h = law.Hardness.from_flat(np.asarray(counts, dtype=np.float64) / s_ref, est.offsets)
    return law.per_query(h, metric, s_ref, k, "plugin")


def _kept(owner, name: str, read_only: bool, make):
    """``make()``, kept in ``owner.__dict__[name]`` when the arrays it is made from are read-only
    (a registry-cached table, immutable): then it is made once per decoded table."""
    memo = owner.__dict__.get(name)
    if memo is None:
        memo = make()
        if read_only:
            owner.__dict__[name] = memo
    return memo


def _read_only(*arrays) -> bool:
    return all(a is not None and not a.flags.writeable for a in arrays)


def _share_hardness(est, bt: Backtest, m: int):
    """The law's view of the stored shares at factor m as one stack (shares, P), each sorted within
    queries: the replicates' for m = 2 (kept by the estimate), the share columns' otherwise (the
    columns sorted once, kept with the back-test of a registry-cached table)."""
    from rscale.core import law
    if m == 2:
        return est.replicate_hardness()
    h = _kept(bt, "_columns_hardness", _read_only(bt.columns, est.offsets),
              lambda: law.Hardness.from_flat(bt.columns.T, est.offsets))
    if h.by_position is not None:
        h.x_by_position                            # the law's layout, made once for all the columns
    return h.rows(np.flatnonzero(bt.column_factors == m))


def _mean_metrics(est, h, metric, k, mode) -> np.ndarray:
    """Mean metric of each row of the sorted stack ``h`` for a gallery of S_q distractors per query
    (x S_q / S_ref at N = S_ref: the plug-in rank j + S_q x). The per-query scale keeps the order
    within a query (clip(x S_q / S_ref) is non-decreasing in x), so the sorted stack is reused."""
    from rscale.core import law
    s_ref = float(np.max(est.n_sampled))
    scale = np.repeat(est.n_sampled / s_ref, np.diff(est.offsets))
    hh = h if np.all(scale == 1.0) else h.scaled(scale)
    return law.per_query(hh, metric, s_ref, k, mode).mean(axis=-1)


def factor_errors(est, bt: Backtest, metric: str, k, mode: str, m: int) -> np.ndarray:
    """Signed errors of every stored share at factor m: its prediction at N = S minus the exact value."""
    from rscale.core.prediction import resolve_mode
    from rscale.core import law
    mode = resolve_mode(metric, mode, est.method)
    s_ref = float(np.max(est.n_sampled))
    counts = _kept(bt, "_counts_hardness", _read_only(bt.counts, est.offsets, est.n_sampled),    # sample_metric's view
                   lambda: law.Hardness.from_flat(np.asarray(bt.counts, dtype=np.float64) / s_ref, est.offsets,
                                                  like=est.__dict__.get("_hardness")))  # its index arrays, if made
    truth = float(law.per_query(counts, metric, s_ref, k, "plugin").mean())
    return _mean_metrics(est, _share_hardness(est, bt, m), metric, k, mode) - truth


def carry(share_factors, share_errors, factor: float, *, level: float = 0.95) -> tuple[float, float, float]:
    """(e(f), low, high): the share errors ``share_errors`` at their factors ``share_factors``
    regressed on u = log m through the origin, carried to ``factor`` f with the prediction
    interval of one new error at level ``level`` (module docstring). Needs two shares or more
    (one: the point, no band: low = high = e(f)).

    Example: ``carry([2, 2, 4, 4], [0.01, 0.012, 0.02, 0.024], 16.0)`` is about (0.044, 0.036, 0.052)."""
    from rscale.core.interval import _t_quantile
    u = np.log(np.asarray(share_factors, dtype=np.float64))
    e = np.asarray(share_errors, dtype=np.float64)
    uu = float(u @ u)
    b = float(u @ e) / uu
    big_u = float(np.log(factor))
    point = b * big_u
    if e.size < 2:
        return point, point, point
    s = float(np.sqrt(np.sum((e - b * u) ** 2) / (e.size - 1)))
    half = _t_quantile(level, e.size - 1) * s * float(np.sqrt(1.0 + big_u * big_u / uu))
    return point, point - half, point + half


def share_counts(ss, column_factors, *, per_factor: int = PER_FACTOR, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """((P, C) counts, (Q, C) sizes) of the stored share columns of factors ``column_factors`` (in
    their order, as :func:`backtest_hardness` made them): per share, how many of its own sampled
    distractors lie at or above each positive, and how many it holds per query. No fit: the same
    thinning (:func:`disjoint_shares`) read again."""
    factors = np.asarray(column_factors, dtype=np.int64)
    counts, sizes = [], []
    for m in dict.fromkeys(int(f) for f in factors):
        n = int(np.sum(factors == m))
        for share in disjoint_shares(ss, m, min(n, per_factor), seed):
            counts.append(share.pos_counts)
            sizes.append(share.n_sampled)
    if not counts:
        return np.empty((ss.n_positives, 0), dtype=np.int64), np.empty((ss.n_queries, 0), dtype=np.int64)
    return np.stack(counts, axis=1).astype(np.int64), np.stack(sizes, axis=1).astype(np.int64)


def _stack_means(offsets, x, sizes, mode, metric, k) -> np.ndarray:
    """Mean metric of each row of the hardness stack ``x`` (B, P) for galleries of ``sizes`` (B, Q)
    distractors per query: x n / n_ref at N = n_ref, the plug-in rank j + n x."""
    from rscale.core import law
    n_ref = float(np.max(sizes))
    scale = np.repeat(np.asarray(sizes, dtype=np.float64) / n_ref, np.diff(offsets), axis=1)
    h = law.Hardness.from_flat(np.clip(x * scale, 0.0, 1.0), offsets)
    return law.per_query(h, metric, n_ref, k, mode).mean(axis=-1)


def _exact_means(offsets, counts, metric, k) -> np.ndarray:
    """Exact metric of each gallery whose counts per positive are the rows of ``counts`` (B, P):
    rank j + c (the plug-in on c / n_ref at N = n_ref, n_ref above every count)."""
    from rscale.core import law
    n_ref = float(np.max(counts)) + 1.0
    h = law.Hardness.from_flat(np.asarray(counts, dtype=np.float64) / n_ref, offsets)
    return law.per_query(h, metric, n_ref, k, "plugin").mean(axis=-1)


def own_error(est, counts, metric: str, k, mode: str) -> float:
    """e_11: the estimate's own point prediction of a gallery equal to its sample (N = S_q per
    query; averaged over the posterior draws where the point is) minus that gallery's exact value."""
    from rscale.core.prediction import resolve_mode
    mode = resolve_mode(metric, mode, est.method)
    point = est.x[None] if est.draws is None else est.draws.T
    sizes = np.broadcast_to(est.n_sampled, (point.shape[0], est.n_sampled.size))
    return float(np.mean(_stack_means(est.offsets, point, sizes, mode, metric, k))
                 - _exact_means(est.offsets, np.asarray(counts)[None], metric, k)[0])


def increment_errors(est, bt: Backtest, metric: str, k, mode: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(u, w, d) of every stored share with counts. For share i of a factor's g disjoint 1/m shares
    and every union U of i with j - 1 others (j = 2..g), d = (i's error at U) - (i's error at its
    own gallery), u = log j, w = log m; for each half (the replicates, with their counts) the union
    with its complement, the sample: u = w = log 2. Each error is the share's prediction for a
    gallery of U's distractors minus U's exact value (from the stored counts): the same share, the
    same K / m excesses, factor j; its own level cancels in d (module docstring)."""
    import itertools

    from rscale.core.prediction import resolve_mode
    mode = resolve_mode(metric, mode, est.method)
    us, ws, ds = [], [], []
    if bt.replicate_counts is not None and est.replicates is not None:
        x = est.replicates.T                                       # (R, P)
        own = _stack_means(est.offsets, x, bt.replicate_sizes.T, mode, metric, k) - _exact_means(
            est.offsets, bt.replicate_counts.T, metric, k)
        full = _stack_means(est.offsets, x, np.broadcast_to(est.n_sampled, (x.shape[0], est.n_sampled.size)), mode,
                            metric, k) - _exact_means(est.offsets, np.asarray(bt.counts)[None], metric, k)[0]
        us += [np.log(2.0)] * x.shape[0]
        ws += [np.log(2.0)] * x.shape[0]
        ds += list(full - own)
    factors = np.asarray(bt.column_factors)
    for m in (dict.fromkeys(int(f) for f in factors) if bt.column_counts is not None else ()):
        idx = np.flatnonzero(factors == m)
        if idx.size < 2:
            continue
        groups = [(i, g) for j in range(1, idx.size + 1) for i in range(idx.size)
                  for g in itertools.combinations(range(idx.size), j) if i in g]
        cols = bt.column_counts[:, idx].T                          # (g, P)
        size = bt.column_sizes[:, idx].T                           # (g, Q)
        x = np.stack([bt.columns[:, idx[i]] for i, _ in groups])
        pred = _stack_means(est.offsets, x, np.stack([size[list(g)].sum(axis=0) for _, g in groups]), mode, metric, k)
        unions = sorted({g for _, g in groups})
        exact = dict(zip(unions, _exact_means(est.offsets, np.stack([cols[list(g)].sum(axis=0) for g in unions]),
                                              metric, k)))
        err = {(i, g): p - exact[g] for (i, g), p in zip(groups, pred)}
        for (i, g), e in err.items():
            if len(g) > 1:
                us.append(np.log(len(g)))
                ws.append(np.log(m))
                ds.append(e - err[(i, (i,))])
    return (np.asarray(us, dtype=np.float64), np.asarray(ws, dtype=np.float64), np.asarray(ds, dtype=np.float64))


def carry_level(own: float, u, w, d, factor: float, *, level: float = 0.95) -> tuple[float, float, float]:
    """(e(f), low, high): the estimate's own error at N = S, ``own``, plus the shares' increments
    ``d`` (at log-factors ``u``, share sizes w = log m) regressed through 0 on u, u^2 and u w
    (d = a u + b u^2 + c u w: a bias growing with log f, faster where b > 0, at a rate that
    depends on the share's excess count), carried to U = log f at w = 0 (the user's own fit) with
    the t prediction interval of one new increment: own + a U + b U^2 +- t_{n-p} s
    sqrt(1 + x0' (X'X)^-1 x0), x0 = (U, U^2, 0). A term the data cannot identify (one share size:
    no u w; one factor: no u^2) is left out. Fewer points than terms + 1: the point, no band.

    Example: ``carry_level(-0.004, [0.69] * 3 + [1.1, 1.39], [0.69] * 3 + [1.39] * 2,
    [0.002, 0.0025, 0.003, 0.006, 0.008], 20.0)`` is about (0.010, -0.065, 0.085)."""
    from rscale.core.interval import _t_quantile
    u, w, e = (np.asarray(a, dtype=np.float64) for a in (u, w, d))
    big_u = float(np.log(factor))
    terms, x0 = [u], [big_u]
    if np.unique(u).size >= 2:
        terms.append(u * u)
        x0.append(big_u * big_u)
    if np.unique(w).size >= 2:
        terms.append(u * w)
        x0.append(0.0)
    x, x0 = np.stack(terms, axis=1), np.asarray(x0)
    beta = np.linalg.lstsq(x, e, rcond=None)[0]
    point = own + float(x0 @ beta)
    dof = e.size - x.shape[1]
    if dof < 1:
        return point, point, point
    s = float(np.sqrt(np.sum((e - x @ beta) ** 2) / dof))
    half = _t_quantile(level, dof) * s * float(np.sqrt(1.0 + x0 @ np.linalg.pinv(x.T @ x) @ x0))
    return point, point - half, point + half


def backtest_error(est, bt: Backtest | None, metric: str, k, mode, *, factor: float,
                   cache: dict | None = None, level: float = 0.95) -> BacktestError | None:
    """e(f) and its band at extrapolation factor ``factor`` = N / S (:func:`carry` on every stored
    share); None when nothing is stored to back-test with or ``factor`` <= 1. ``cache`` (a dict)
    keeps each factor's errors across calls on the same estimate (a curve asks for many N)."""
    if bt is None or factor <= 1.0:
        return None
    ms = bt.factors(est)
    if not ms:
        return None
    if bt.columns is not None and not bt.columns.flags.writeable:
        cache = bt.__dict__.setdefault("_errors", {})    # registry-cached (read-only): kept with the value
    elif cache is None:
        cache = {}
    errs = {}
    for m in ms:
        key = (metric, k, mode, m)
        if key not in cache:
            cache[key] = factor_errors(est, bt, metric, k, mode, m)
        errs[m] = cache[key]
    fs = np.concatenate([np.full(errs[m].size, m, dtype=np.int64) for m in ms])
    es = np.concatenate([errs[m] for m in ms])
    at_n, low, high = carry(fs, es, factor, level=level)
    below = [m for m in ms if m <= factor]
    used = below[-1] if below else ms[0]
    return BacktestError(at_n=float(at_n), factor=int(used), error=float(errs[used].mean()), shares=int(errs[used].size),
                         low=float(low), high=float(high), share_factors=fs, share_errors=es)


def difference_error(a: BacktestError | None, b: BacktestError | None, factor: float, *,
                     level: float = 0.95) -> BacktestError | None:
    """The carried error of a paired difference A - B: :func:`carry` on the differences of the two
    sides' share errors at the factors both measured with as many shares (share i of A and of B
    hold the same distractors when their replicates pair). None when they have no such factor;
    ``factor`` / ``error`` as for one side, at the largest common factor at or below f."""
    if a is None or b is None or a.share_factors is None or b.share_factors is None:
        return None
    common = [int(m) for m in np.unique(a.share_factors)
              if np.sum(a.share_factors == m) == np.sum(b.share_factors == m) > 0]
    if not common:
        return None
    sel_a, sel_b = np.isin(a.share_factors, common), np.isin(b.share_factors, common)
    fs, d = a.share_factors[sel_a], a.share_errors[sel_a] - b.share_errors[sel_b]
    at_n, low, high = carry(fs, d, factor, level=level)
    below = [m for m in common if m <= factor]
    used = below[-1] if below else common[0]
    return BacktestError(at_n=float(at_n), factor=used, error=float(d[fs == used].mean()), shares=int(np.sum(fs == used)),
                         low=float(low), high=float(high), share_factors=fs, share_errors=d)


def backtest_fields(b: BacktestError | None) -> dict:
    """The back-test statement of one answer row: ``backtest_factor`` m and ``backtest_error``
    e_m ('predicting the sample from 1/m of it was off by e_m'), ``backtest_at_n`` e(f) and
    ``backtest_low`` / ``backtest_high`` its band (what the interval carries for it); None each
    when there is no back-test term."""
    if b is None:
        return {"backtest_factor": None, "backtest_error": None, "backtest_at_n": None,
                "backtest_low": None, "backtest_high": None}
    return {"backtest_factor": b.factor, "backtest_error": b.error, "backtest_at_n": b.at_n,
            "backtest_low": b.low, "backtest_high": b.high}


__all__ = ["backtest_fields", "Backtest", "BacktestError", "backtest_error", "carry", "difference_error",
           "backtest_hardness", "disjoint_shares",
           "carry_level", "factor_errors", "increment_errors", "max_factor", "own_error", "sample_metric",
           "share_counts"]
