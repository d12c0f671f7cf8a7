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
prediction at N = S minus the exact value gives one signed error; e_m is their mean at factor
m. For a requested factor f = N / S, e(f) is e_m interpolated piecewise-linearly in log m through
(1, 0), and beyond the largest factor M extrapolated in proportion: e(f) = e_M log f / log M.
f <= 1 has no term (e = 0).

Per-query sample sizes may differ: the target of query q is a gallery of its own S_q, so
predictions use x S_q / S_ref at N = S_ref (the plug-in rank j + S_q x) with S_ref = max S.

Example: ``backtest_error(est, bt, "AP", 1000, "plugin", factor=20.0)`` returns a
:class:`BacktestError` (e at f = 20, the factor it was measured at, e there, shares used).
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
    columns (P, C) and their factors (C,). Factor 2's shares are the estimate's replicates."""

    counts: np.ndarray
    columns: np.ndarray | None = None
    column_factors: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))

    def factors(self, est) -> list[int]:
        """Stored factors: 2 when ``est`` has replicates and the file a back-test (version 3), and
        the factors of the share columns."""
        if self.columns is None:
            return []
        return ([2] if est.replicates is not None else []) + sorted({int(m) for m in self.column_factors})


@dataclass(frozen=True)
class BacktestError:
    """e(f) for one measure at factor f, the stored factor nearest f from below (or the largest)
    with its mean error and share count: 'predicting the sample from 1/m of it was off by e_m'."""

    at_n: float
    factor: int
    error: float
    shares: int


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
                   lambda: law.Hardness.from_flat(np.asarray(bt.counts, dtype=np.float64) / s_ref, est.offsets))
    truth = float(law.per_query(counts, metric, s_ref, k, "plugin").mean())
    return _mean_metrics(est, _share_hardness(est, bt, m), metric, k, mode) - truth


def backtest_error(est, bt: Backtest | None, metric: str, k, mode, *, factor: float,
                   cache: dict | None = None) -> BacktestError | None:
    """e(f) at extrapolation factor ``factor`` = N / S (module docstring); None when nothing is
    stored to back-test with or ``factor`` <= 1. ``cache`` (a dict) keeps each factor's errors
    across calls on the same estimate (a curve asks for many N)."""
    if bt is None or factor <= 1.0:
        return None
    ms = bt.factors(est)
    if not ms:
        return None
    below = [m for m in ms if m <= factor]
    above = [m for m in ms if m > factor]
    lo = below[-1] if below else None
    hi = above[0] if above else None
    if bt.columns is not None and not bt.columns.flags.writeable:
        cache = bt.__dict__.setdefault("_errors", {})    # registry-cached (read-only): kept with the value
    elif cache is None:
        cache = {}
    errs = {}
    for m in (lo, hi):
        if m is not None:
            key = (metric, k, mode, m)
            if key not in cache:
                cache[key] = factor_errors(est, bt, metric, k, mode, m)
            errs[m] = cache[key]
    mean = {m: float(e.mean()) for m, e in errs.items()}
    lf = np.log(factor)
    if hi is None:                                  # beyond the largest factor: in proportion
        at_n = mean[lo] * lf / np.log(lo)
    else:
        m0, e0 = (lo, mean[lo]) if lo is not None else (1, 0.0)
        at_n = e0 + (mean[hi] - e0) * (lf - np.log(m0)) / (np.log(hi) - np.log(m0))
    used = lo if lo is not None else hi
    return BacktestError(at_n=float(at_n), factor=int(used), error=mean[used], shares=int(errs[used].size))


def backtest_fields(b: BacktestError | None) -> dict:
    """The back-test statement of one answer row: ``backtest_factor`` m and ``backtest_error``
    e_m ('predicting the sample from 1/m of it was off by e_m'), ``backtest_at_n`` e(f) (what
    the interval carries for it); None each when there is no back-test term."""
    if b is None:
        return {"backtest_factor": None, "backtest_error": None, "backtest_at_n": None}
    return {"backtest_factor": b.factor, "backtest_error": b.error, "backtest_at_n": b.at_n}


__all__ = ["backtest_fields", "Backtest", "BacktestError", "backtest_error", "backtest_hardness", "disjoint_shares",
           "factor_errors", "max_factor", "sample_metric"]
