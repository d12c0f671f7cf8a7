"""The per-positive hardness posterior of ``evt`` with ``posterior=True``: tail-parameter
likelihood x log-normal misspecification x the count's Poisson likelihood, as quantile draws."""

from __future__ import annotations

import numpy as np

from rscale.core.gpd import gpd_logsf

_GH_NODES, _GH_WEIGHTS = np.polynomial.hermite.hermgauss(16)


def posterior_hardness_draws(c, s, log_pu, y, xi, sigma, weight, tau: float, n_draws: int,
                             chunk: int = 2048) -> np.ndarray:
    """Equal-probability quantiles of each positive's hardness posterior, shape (P, n_draws).

    Prior: log x = log_pu + log P_GPD(Y >= y; xi_m, sigma_m) + eta, with m drawn by ``weight`` (the
    tail posterior, arrays (P, M)) and eta ~ Normal(0, tau^2) (Gauss-Hermite, 16 nodes).
    Likelihood: c ~ Poisson(S x). Draw d is the posterior's (d + 1/2) / n_draws quantile.
    """
    out = np.empty((c.size, n_draws))
    eta = np.sqrt(2.0) * tau * _GH_NODES
    log_om = np.log(_GH_WEIGHTS / np.sqrt(np.pi))
    levels = (np.arange(n_draws) + 0.5) / n_draws
    for a in range(0, c.size, chunk):
        b = min(a + chunk, c.size)
        logx = log_pu[a:b, None] + gpd_logsf(y[a:b, None], xi[a:b], sigma[a:b])         # (p, M)
        lx = (logx[:, :, None] + eta[None, None, :]).reshape(b - a, -1)                   # (p, M*H)
        lam_log = np.log(s[a:b])[:, None] + lx
        cc = c[a:b, None].astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            loglik = np.where(np.isneginf(lam_log), np.where(cc == 0, 0.0, -np.inf),
                              cc * lam_log - np.exp(lam_log))
        logw = (np.log(np.maximum(weight[a:b], 1e-300))[:, :, None] + log_om[None, None, :]).reshape(b - a, -1)
        logw = logw + loglik
        w = np.exp(logw - np.max(logw, axis=1, keepdims=True))
        order = np.argsort(lx, axis=1)
        cw = np.cumsum(np.take_along_axis(w, order, axis=1), axis=1)
        cw /= cw[:, -1:]
        pick = (cw[:, None, :] < levels[None, :, None]).sum(axis=2)                       # (p, D)
        pick = np.minimum(pick, lx.shape[1] - 1)
        out[a:b] = np.exp(np.take_along_axis(np.take_along_axis(lx, order, axis=1), pick, axis=1))
    return out
