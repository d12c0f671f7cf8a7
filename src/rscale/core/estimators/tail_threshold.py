"""Where each query's tail starts, for ``evt`` and ``evt-paper``: the threshold and its excesses,
the largest-excess test (also registration's rejected-tail check,
:mod:`rscale.core.estimators.rejected_tails`), and ``evt``'s goodness-of-fit rule that raises the
threshold of queries whose GPD fails an Anderson-Darling test."""

from __future__ import annotations

import numpy as np

from rscale.core.estimators.evt_config import GOF_KEEP, REJECT_LEVEL, XI_MIN, EVTConfig
from rscale.core.gpd import anderson_darling, gpd_logsf
from rscale.core.tailfit import GPDFit, fit_gpd
from rscale.errors import InvalidArgumentError


MIN_EXCESSES = 10


def tail_threshold(top: np.ndarray, k_top: int, q: float, min_excesses: int = MIN_EXCESSES):
    """Threshold u (q-quantile of each row's top k_top scores) and the excesses (NaN-padded).

    Rows are descending, so the excesses are each row's leading scores; only those columns are
    returned (about (1 - q) k_top of them). With short top lists (small samples, sub-samples) the
    threshold is lowered to keep at least ``min_excesses`` excesses (the (m+1)-th score), so that
    every query has a tail to fit; with K = 4000 and q = 0.95 (200 excesses) this never applies.
    Where the top scores are tied (real pools hold exact copies: 14 sampled distractors at cosine
    1.0 in one realset6 query), the (m+1)-th score equals the m-th and fewer than m scores lie
    above it; the threshold is then the first score below the m-th, so the m tied ones are
    excesses. A row whose scores from the m-th down are all tied keeps the (m+1)-th (it has no
    tail to fit, and :func:`~rscale.core.tailfit.fit_gpd` says so).
    """
    tops = top[:, :k_top]
    if tops.shape[1] < 3:
        raise InvalidArgumentError(f"need at least 3 top scores per query to fit a tail, got {tops.shape[1]}")
    u = np.quantile(tops, q, axis=1)
    m = min(min_excesses, tops.shape[1] - 1)
    too_few = np.sum(tops > u[:, None], axis=1) < m
    below = tops < tops[:, m - 1:m]                      # rows descending: a run of False, then True
    first_below = np.where(below.any(axis=1), np.argmax(below, axis=1), m)
    u = np.where(too_few, tops[np.arange(tops.shape[0]), first_below], u)
    width = max(int(np.max(np.sum(tops > u[:, None], axis=1))), 2)
    exc = tops[:, :width] - u[:, None]
    return u, np.where(exc > 0, exc, np.nan)


def max_excess_pvalue(y_max, xi, sigma, n_u):
    """P(the largest of n_u excesses from GPD(xi, sigma) >= y_max), per query."""
    sf = np.exp(gpd_logsf(y_max, xi, sigma))
    return -np.expm1(n_u * np.log1p(-np.minimum(sf, 1.0 - 1e-16)))


def gof_threshold(top: np.ndarray, k_top: int, config: EVTConfig, u, exc, fit):
    """Raise the threshold of queries whose GPD fails an Anderson-Darling test.

    A query whose excesses the fitted GPD does not describe (A^2 > ``config.gof_crit``) is refitted
    on the top ``GOF_KEEP`` share of its excesses (threshold quantile 1 - (1 - q) GOF_KEEP), unless
    its largest excess alone rejects the fit (that is the count test's business: a cluster seen as
    a few outlying scores). The typical case is a
    near-duplicate cluster sampled many times: a single GPD through bulk and cluster is pinned at
    xi = 0 with a large scale, and calls every positive above the cluster far harder than it is.
    Returns (u, exc, fit, refit flags, A^2 at the first threshold).
    """
    n_u = np.sum(~np.isnan(exc), axis=1)
    ad = anderson_darling(exc, fit.xi, fit.sigma)
    outlying = max_excess_pvalue(top[:, 0] - u, fit.xi, fit.sigma, n_u) < REJECT_LEVEL
    refit = (ad > config.gof_crit) & ~outlying
    if not refit.any():
        return u, exc, fit, refit, ad
    rows = np.flatnonzero(refit)
    u2, exc2 = tail_threshold(top[rows], k_top, 1.0 - (1.0 - config.q) * GOF_KEEP)
    sub = fit_gpd(exc2, xi_min=XI_MIN)
    u = u.copy()
    u[rows] = u2
    width = max(exc.shape[1], exc2.shape[1])
    exc = np.pad(exc, ((0, 0), (0, width - exc.shape[1])), constant_values=np.nan)
    exc[rows] = np.nan
    exc[rows, :exc2.shape[1]] = exc2

    def put(a, b):
        a = np.asarray(a).copy()
        a[rows] = b
        return a
    fit = GPDFit(xi=put(fit.xi, sub.xi), sigma=put(fit.sigma, sub.sigma), loglik=put(fit.loglik, sub.loglik),
                 n=put(fit.n, sub.n))
    return u, exc, fit, refit, ad
