"""Batched generalized-Pareto (GPD) fits with the shape restricted to xi in [xi_min, 0].

GPD of excesses y >= 0 over a threshold: F(y) = 1 - (1 + xi y / sigma)^(-1/xi) (exponential at
xi = 0); for xi < 0 the support ends at -sigma / xi (bounded cosine scores have such an endpoint).

Fit: maximum likelihood through the profile likelihood in theta = -xi / sigma (Grimshaw 1993;
Zhang & Stephens 2009 use the same reduction, but average over a posterior with a prior, which we
do not). For fixed theta the MLE of xi is closed form,

    xi(theta) = mean(log(1 - theta y)),       sigma = -xi / theta,
    l(theta) / n = log(theta / -xi(theta)) - 1 - xi(theta),

so each query's fit is a 1-D maximisation. xi <= 0 is theta in [0, 1 / max y); theta -> 0 is the
exponential limit, l(0)/n = -log(mean y) - 1. We evaluate l on a grid of theta for all queries at
once, then refine around the best grid point by golden-section search, all vectorised over
queries (arrays of shape (Q, n), NaN-padded for queries with fewer excesses). xi >= xi_min keeps
the likelihood bounded (it is unbounded as xi -> -inf; the MLE is regular for xi > -0.5).

Example: ``fit_gpd(np.array([[0.1, 0.4, 0.2, 0.05]]))`` returns one (xi, sigma, loglik) triple.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rscale.errors import InvalidArgumentError

_GOLDEN = (np.sqrt(5.0) - 1.0) / 2.0


@dataclass(frozen=True)
class GPDFit:
    xi: np.ndarray       # (Q,) shape, <= 0 under the default constraint
    sigma: np.ndarray    # (Q,) scale
    loglik: np.ndarray   # (Q,) maximised log-likelihood
    n: np.ndarray        # (Q,) number of excesses used

    @property
    def endpoint(self) -> np.ndarray:
        """Largest excess with positive density: -sigma/xi for xi < 0, inf otherwise."""
        with np.errstate(divide="ignore"):
            return np.where(self.xi < 0, -self.sigma / np.minimum(self.xi, -1e-300), np.inf)


def _profile(y, theta, valid, n):
    """xi(theta) and l(theta) for each query (theta: (Q,) values)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        lg = np.log1p(-theta[:, None] * y)
    lg = np.where(valid, lg, 0.0)
    xi = lg.sum(axis=1) / n
    with np.errstate(divide="ignore", invalid="ignore"):
        ll = n * (np.log(theta / -xi) - 1.0 - xi)
    return xi, ll


def fit_gpd(y, xi_min: float = -1.0, grid: int = 48, refine: int = 30) -> GPDFit:
    """Fit a GPD to each row of excesses ``y`` (Q, n), NaN-padded; shape xi in [xi_min, 0]
    (bounded or exponential tails: the tail-aware rules' constraint). xi_min must be in [-1, 0).
    Heavy shapes (xi > 0) are the hierarchical tail model's (:mod:`rscale.core.gpd_eb`).
    """
    y = np.atleast_2d(np.asarray(y, dtype=np.float64))
    if not -1.0 <= xi_min < 0.0:
        raise InvalidArgumentError(f"xi_min must lie in [-1, 0), got {xi_min}")
    valid = ~np.isnan(y)
    if np.any(y[valid] < 0):
        raise InvalidArgumentError("excesses must be >= 0 (scores minus the threshold)")
    n = valid.sum(axis=1).astype(np.float64)
    if np.any(n < 2):
        raise InvalidArgumentError("each query needs at least 2 excesses to fit a tail")
    ymax = np.nanmax(y, axis=1)
    mean = np.nansum(y, axis=1) / n
    if np.any(ymax <= 0):
        raise InvalidArgumentError("excesses are all zero for some query; raise the threshold resolution")
    yy = np.where(valid, y, 0.0)

    # Exponential limit (theta = 0, xi = 0).
    ll0 = n * (-np.log(mean) - 1.0)

    # Grid over u = theta * ymax in (0, 1), denser near 1 where xi falls fast.
    u = 1.0 - np.geomspace(1.0, 1e-8, grid + 1)[1:]
    u = np.concatenate([np.geomspace(1e-4, u[0], 8)[:-1], u])
    best_ll = ll0.copy()
    best_j = np.full(y.shape[0], -1)
    ll_grid = np.empty((y.shape[0], u.size))
    for j, uj in enumerate(u):
        xi, ll = _profile(yy, uj / ymax, valid, n)
        ll = np.where(xi >= xi_min, ll, -np.inf)
        ll_grid[:, j] = ll
        better = ll > best_ll
        best_ll = np.where(better, ll, best_ll)
        best_j = np.where(better, j, best_j)

    # Golden-section refinement on the bracket around the best grid point (one profile
    # evaluation per step: each row keeps the interior point it already evaluated).
    u_ext = np.concatenate([[0.0], u, [1.0]])
    a = np.where(best_j < 0, 0.0, u_ext[np.maximum(best_j, 0)])
    b = np.where(best_j < 0, u_ext[1], u_ext[np.minimum(best_j + 2, u.size + 1)])

    def f(uu):
        xi, ll = _profile(yy, np.maximum(uu, 1e-300) / ymax, valid, n)
        return np.where(xi >= xi_min, ll, -np.inf)

    c = b - _GOLDEN * (b - a)
    d = a + _GOLDEN * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(refine):
        left = fc >= fd                      # the maximum lies in [a, d]
        a = np.where(left, a, c)
        b = np.where(left, d, b)
        p = np.where(left, b - _GOLDEN * (b - a), a + _GOLDEN * (b - a))
        fp = f(p)
        c, d, fc, fd = (np.where(left, p, d), np.where(left, c, p),
                        np.where(left, fp, fd), np.where(left, fc, fp))
    u_ref = np.where(fc >= fd, c, d)
    ll_ref = np.maximum(fc, fd)
    use_ref = ll_ref > best_ll
    u_best = np.where(use_ref, u_ref, np.where(best_j < 0, 0.0, u[np.maximum(best_j, 0)]))
    theta = u_best / ymax
    xi, ll = _profile(yy, np.maximum(theta, 1e-300), valid, n)
    exp_fit = (theta <= 0) | (ll0 >= ll)
    xi = np.where(exp_fit, 0.0, xi)
    with np.errstate(divide="ignore", invalid="ignore"):
        sigma = np.where(exp_fit, mean, -xi / theta)
    ll = np.where(exp_fit, ll0, ll)
    return GPDFit(xi=xi, sigma=sigma, loglik=ll, n=n.astype(np.int64))


def fit_sigma_given_xi(y, xi, iterations: int = 80) -> np.ndarray:
    """Maximum-likelihood scale of each row of excesses ``y`` (Q, n; NaN-padded) for a given shape
    ``xi`` (Q,) in (-1, 1]: the root of (1 + xi) sum y / (sigma + xi y) = n, found by bisection in
    log sigma (the left side falls in sigma; for xi < 0, sigma > -xi max y keeps every excess
    inside the support)."""
    y = np.atleast_2d(np.asarray(y, dtype=np.float64))
    xi = np.asarray(xi, dtype=np.float64)
    if np.any((xi <= -1.0) | (xi > 1.0)):
        raise InvalidArgumentError("xi must lie in (-1, 1] to fit the scale")
    valid = ~np.isnan(y)
    n = valid.sum(axis=1).astype(np.float64)
    ymax, mean = np.nanmax(y, axis=1), np.nansum(y, axis=1) / n
    lo = np.where(xi < 0, np.maximum(-xi * ymax, 1e-300) * (1.0 + 1e-12), mean * 1e-9)
    hi = np.maximum(mean * 100.0, lo * 10.0)
    yy = np.where(valid, y, 0.0)
    for _ in range(iterations):
        mid = np.sqrt(lo * hi)
        g = (1.0 + xi) * np.sum(np.where(valid, yy / (mid[:, None] + xi[:, None] * yy), 0.0), axis=1) - n
        lo, hi = np.where(g > 0, mid, lo), np.where(g > 0, hi, mid)
    return np.sqrt(lo * hi)
