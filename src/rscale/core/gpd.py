"""The generalized Pareto distribution (GPD) of excesses over a threshold, vectorised.

F(y) = 1 - (1 + xi y / sigma)^(-1/xi) for y >= 0 (exponential at xi = 0); for xi < 0 the support ends
at -sigma / xi. Survival, log-likelihood and the Anderson-Darling statistic of NaN-padded rows of
excesses (Q, n), one (xi, sigma) per row. Fitting lives in :mod:`rscale.core.tailfit`, the
hierarchical shape posterior in :mod:`rscale.core.gpd_eb`.

Example: ``gpd_logsf(0.1, -0.2, 0.05)`` is log P(Y >= 0.1) under GPD(-0.2, 0.05).
"""

from __future__ import annotations

import numpy as np


def gpd_logsf(y, xi, sigma):
    """log P(Y >= y) for GPD excesses (vectorised; -inf beyond the endpoint)."""
    y = np.asarray(y, dtype=np.float64)
    xi = np.asarray(xi, dtype=np.float64)
    sigma = np.asarray(sigma, dtype=np.float64)
    z = xi * y / sigma
    small = np.abs(xi) < 1e-12
    with np.errstate(divide="ignore", invalid="ignore"):
        general = -np.log1p(np.maximum(z, -1.0)) / np.where(small, 1.0, xi)
    out = np.where(small, -y / sigma, general)
    out = np.where(z <= -1.0, -np.inf, out)
    return np.where(y <= 0, 0.0, out)


def anderson_darling(y, xi, sigma) -> np.ndarray:
    """Anderson-Darling statistic A^2 of each row of NaN-padded excesses y (Q, n) against
    GPD(xi[q], sigma[q]): A^2 = -n - (1/n) sum_i (2i - 1) [log F(y_(i)) + log(1 - F(y_(n+1-i)))].

    With (xi, sigma) fitted to the same row, its null distribution depends on xi and n only a
    little (rscale.core.estimators.evt_config.GOF_CRIT is calibrated by simulation; tests re-derive it).
    """
    y = np.atleast_2d(np.asarray(y, dtype=np.float64))
    valid = ~np.isnan(y)
    n = valid.sum(axis=1)
    cdf = -np.expm1(gpd_logsf(np.where(valid, y, 0.0), np.asarray(xi, dtype=np.float64)[:, None],
                              np.asarray(sigma, dtype=np.float64)[:, None]))
    cdf = np.sort(np.where(valid, np.clip(cdf, 1e-12, 1.0 - 1e-12), np.nan), axis=1)   # NaN last
    i = np.arange(y.shape[1])[None, :]
    inside = i < n[:, None]
    mirror = np.take_along_axis(cdf, np.clip(n[:, None] - 1 - i, 0, y.shape[1] - 1), axis=1)
    terms = (2 * i + 1) * (np.log(np.where(inside, cdf, 0.5)) + np.log1p(-np.where(inside, mirror, 0.5)))
    return -n - np.sum(np.where(inside, terms, 0.0), axis=1) / np.maximum(n, 1)


def gpd_loglik(y, xi, sigma):
    """Per-query log-likelihood of NaN-padded excesses y (Q, n) under GPD(xi, sigma)."""
    y = np.asarray(y, dtype=np.float64)
    xi = np.asarray(xi, dtype=np.float64)[:, None]
    sigma = np.asarray(sigma, dtype=np.float64)[:, None]
    z = xi * y / sigma
    small = np.abs(xi) < 1e-12
    with np.errstate(divide="ignore", invalid="ignore"):
        log_f = -np.log(sigma) - np.where(small, y / sigma,
                                          (1.0 / np.where(small, 1.0, xi) + 1.0) * np.log1p(z))
    log_f = np.where(z <= -1.0, -np.inf, log_f)
    return np.nansum(np.where(np.isnan(y), np.nan, log_f), axis=1)
