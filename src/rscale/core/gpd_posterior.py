"""The GPD parameter posterior of each query's tail: weighted (xi, sigma) points over xi in
[xi_min, 0] (profile likelihood x flat prior on xi), vectorised over queries.

Used by ``evt`` with ``posterior=True`` or ``endpoint="averaged"`` and by the tail-parameter
draws of the stored replicates (:mod:`rscale.core.replicates`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rscale.core.tailfit import _profile
from rscale.errors import InvalidArgumentError


@dataclass(frozen=True)
class GPDPosterior:
    """Shape-parameter uncertainty of each query's tail: M (xi, sigma) points with weights.

    ``weight`` rows sum to 1: the profile likelihood times a flat prior on xi in [xi_min, 0],
    integrated with the trapezoid rule over a grid that is uniform in xi across the region
    holding the likelihood mass (log-likelihood within ``span`` of its maximum).
    """

    xi: np.ndarray       # (Q, M)
    sigma: np.ndarray    # (Q, M)
    weight: np.ndarray   # (Q, M)


def _xi_sigma_at(yy, valid, n, mean, ymax, uu):
    """Profile xi, sigma, loglik at per-query u values (u = theta * ymax; u = 0 is exponential)."""
    theta = np.maximum(uu, 1e-300) / ymax
    xi, ll = _profile(yy, theta, valid, n)
    expo = uu <= 1e-12
    xi = np.where(expo, 0.0, xi)
    with np.errstate(divide="ignore", invalid="ignore"):
        sigma = np.where(expo, mean, -xi / theta)
    ll = np.where(expo, n * (-np.log(mean) - 1.0), ll)
    return xi, sigma, ll


def gpd_posterior(y, xi_min: float = -1.0, points: int = 40, coarse: int = 64,
                  span: float = 12.0) -> GPDPosterior:
    """Weighted (xi, sigma) points covering each query's likelihood for xi in [xi_min, 0].

    Two passes, vectorised over queries: a coarse grid in u = theta * max(y) locates the region
    where the profile log-likelihood is within ``span`` of its maximum; a second grid, uniform in
    xi over that region (mapped back to u by interpolating the monotone coarse xi(u) table), carries
    the weights. Cost: (coarse + points) passes over the excess matrix.
    """
    y = np.atleast_2d(np.asarray(y, dtype=np.float64))
    valid = ~np.isnan(y)
    n = valid.sum(axis=1).astype(np.float64)
    if np.any(n < 2):
        raise InvalidArgumentError("each query needs at least 2 excesses to fit a tail")
    ymax = np.nanmax(y, axis=1)
    mean = np.nansum(y, axis=1) / n
    yy = np.where(valid, y, 0.0)
    q = y.shape[0]
    ug = np.concatenate([[0.0], 1.0 - np.geomspace(1.0, 1e-9, coarse)[1:]])
    xi_c = np.empty((q, ug.size))
    ll_c = np.empty((q, ug.size))
    for j, uj in enumerate(ug):
        xi_c[:, j], _, ll_c[:, j] = _xi_sigma_at(yy, valid, n, mean, ymax, np.full(q, uj))
    ll_c = np.where(xi_c >= xi_min, ll_c, -np.inf)
    keep = ll_c >= ll_c.max(axis=1, keepdims=True) - span
    # xi range of the mass, widened by one coarse cell each side (xi falls as u grows)
    idx = np.arange(ug.size)
    lo_j = np.where(keep, idx, ug.size).min(axis=1)
    hi_j = np.where(keep, idx, -1).max(axis=1)
    xi_top = xi_c[np.arange(q), np.maximum(lo_j - 1, 0)]
    xi_bot = np.maximum(xi_c[np.arange(q), np.minimum(hi_j + 1, ug.size - 1)], xi_min)
    t = np.linspace(0.0, 1.0, points)
    targets = xi_top[:, None] + t[None, :] * (xi_bot - xi_top)[:, None]      # (Q, M), decreasing
    # invert the monotone table: u where xi_c crosses each target (linear within a cell)
    above = (xi_c[:, None, :] > targets[:, :, None]).sum(axis=2)           # cells with xi > target
    j1 = np.clip(above, 1, ug.size - 1)
    j0 = j1 - 1
    rows = np.arange(q)[:, None]
    x0, x1 = xi_c[rows, j0], xi_c[rows, j1]
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.clip(np.nan_to_num((targets - x0) / (x1 - x0)), 0.0, 1.0)
    uu = ug[j0] + frac * (ug[j1] - ug[j0])
    xi = np.empty((q, points))
    sigma = np.empty((q, points))
    ll = np.empty((q, points))
    for m in range(points):
        xi[:, m], sigma[:, m], ll[:, m] = _xi_sigma_at(yy, valid, n, mean, ymax, uu[:, m])
    ll = np.where(xi >= xi_min, ll, -np.inf)
    # trapezoid weights in xi (flat prior on xi)
    dxi = np.abs(np.diff(xi, axis=1))
    width = np.zeros_like(xi)
    width[:, :-1] += dxi / 2
    width[:, 1:] += dxi / 2
    width = np.where(np.all(width == 0, axis=1, keepdims=True), 1.0, width)
    w = np.exp(ll - np.max(ll, axis=1, keepdims=True)) * width
    w = np.nan_to_num(w)
    w /= w.sum(axis=1, keepdims=True)
    return GPDPosterior(xi=xi, sigma=sigma, weight=w)
