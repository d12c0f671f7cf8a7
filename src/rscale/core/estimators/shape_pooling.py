"""The tail shape shared across queries: empirical-Bayes shrinkage of per-query GPD shapes, the
second tail model ``evt`` averages with each query's own (``EVTConfig.shape_average``)."""

from __future__ import annotations

import numpy as np

from rscale.core.gpd import gpd_loglik
from rscale.core.tailfit import GPDFit, fit_sigma_given_xi


def shrunk_shape_fit(exc: np.ndarray, fit) -> GPDFit:
    """Each query's shape shrunk toward the across-query median, its scale refitted given it.

    xi_q = w xi_hat_q + (1 - w) median with w = tau^2 / (tau^2 + se_q^2), se_q^2 = (1 + xi)^2 / n_u
    (the MLE's asymptotic variance) and tau^2 the between-query variance left after removing it
    (at least 1e-6); shapes clipped to [-0.999, 0]. Alone it is not the better model on every
    family (docs/benchmarks.md): the per-query spread of shapes is mostly estimation noise, yet
    pooling it away makes tails lighter on average; ``evt`` averages its tails with the per-query
    ones.
    """
    n_u = np.sum(~np.isnan(exc), axis=1)
    centre = float(np.median(fit.xi))
    se2 = (1.0 + fit.xi) ** 2 / n_u
    tau2 = max(float(np.var(fit.xi) - np.mean(se2)), 1e-6)
    w = tau2 / (tau2 + se2)
    xi = np.clip(w * fit.xi + (1.0 - w) * centre, -0.999, 0.0)
    sigma = fit_sigma_given_xi(exc, xi)
    return GPDFit(xi=xi, sigma=sigma, loglik=gpd_loglik(exc, xi, sigma), n=fit.n)
