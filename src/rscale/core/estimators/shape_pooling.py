"""Sharing the tail shape across queries (empirical-Bayes shrinkage of per-query GPD shapes)."""

from __future__ import annotations

import numpy as np

from rscale.core.gpd import gpd_loglik
from rscale.core.tailfit import GPDFit, fit_sigma_given_xi


def pooled_shape(exc: np.ndarray, fit, mode: str):
    """Share information on the tail shape across queries, then refit each query's scale.

    ``full``: every query takes the median of the per-query shapes. ``shrink``: empirical Bayes,
    xi_q = w xi_hat_q + (1 - w) median with w = tau^2 / (tau^2 + se_q^2), se_q^2 = (1 + xi)^2 / n_u
    (the MLE's asymptotic variance) and tau^2 the between-query variance left after removing it.
    Alone it is not the better model on every family (docs/benchmarks.md): the per-query spread of
    shapes is mostly estimation noise, yet pooling it away makes tails lighter on average. The
    default estimator averages its tails with the per-query ones (``pool_xi="average"``).
    """
    n_u = np.sum(~np.isnan(exc), axis=1)
    centre = float(np.median(fit.xi))
    if mode == "full":
        xi = np.full_like(fit.xi, centre)
    else:
        se2 = (1.0 + fit.xi) ** 2 / n_u
        tau2 = max(float(np.var(fit.xi) - np.mean(se2)), 1e-6)
        w = tau2 / (tau2 + se2)
        xi = w * fit.xi + (1.0 - w) * centre
    xi = np.clip(xi, -0.999, 0.0)
    sigma = fit_sigma_given_xi(exc, xi)
    return GPDFit(xi=xi, sigma=sigma, loglik=gpd_loglik(exc, xi, sigma), n=fit.n)
