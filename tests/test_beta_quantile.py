"""Beta quantiles from the cached Chebyshev interpolant (rscale.core.beta_quantile) against the
forward function: the returned w must give back p through scipy's regularised incomplete beta
(``betaincc``, accurate to a few ulps), to ~1e-12 relative in w, where scipy's own inverse
(``betainccinv``) misses by up to 2e-8 for some laws."""

import numpy as np
import pytest
from scipy.special import betaincc, betainccinv, betaln, xlog1py, xlogy

from rscale.core import beta_quantile as bq


def implied_relative_error(a, b, p, w):
    """|P(W > w) - p| / (pdf(w) w): the relative error in w that the forward function implies."""
    pdf = np.exp(xlogy(a - 1, w) + xlog1py(b - 1, -w) - betaln(a, b))
    return np.abs(betaincc(a, b, w) - p) / (pdf * w)


LAWS = [(1000.0, 39000.0), (994.0, 39006.0), (1.0, 40000.0), (501.0, 1e8 - 500), (10.0, 1e9), (2.0, 3.0),
        (991.0, 99999010.0)]


@pytest.mark.parametrize("a,b", LAWS)
def test_quantiles_give_back_their_probability(a, b):
    rng = np.random.default_rng(int(a) % 97)
    p = np.concatenate([rng.uniform(0, 1, 3000), 10 ** -rng.uniform(0, 12, 1000), 1 - 10 ** -rng.uniform(1, 12, 500)])
    w = bq.beta_isf(a, b, p)
    assert w.shape == p.shape and np.all((w > 0) & (w < 1))
    err = implied_relative_error(a, b, p, w)
    # the forward function itself is good to ~1e-12 for b ~ 1e8-1e9 (its residuals after Newton)
    assert np.nanmax(err) < (1e-10 if b > 1e7 else 1e-11), (a, b, np.nanmax(err))
    # the same answer again, from the cached panels
    np.testing.assert_array_equal(bq.beta_isf(a, b, p), w)


def test_more_accurate_than_scipys_inverse_where_that_errs():
    a, b = 10.0, 1e9
    p = np.linspace(0.01, 0.99, 500)
    assert np.max(implied_relative_error(a, b, p, betainccinv(a, b, p))) > 1e-9       # scipy's own error
    assert np.max(implied_relative_error(a, b, p, bq.beta_isf(a, b, p))) < 1e-10


def test_edges_and_shapes():
    a, b = 1000.0, 39000.0
    p = np.array([[0.0, 1.0], [0.5, 1e-320]])
    w = bq.beta_isf(a, b, p)
    assert w.shape == (2, 2)
    np.testing.assert_array_equal(w[0], betainccinv(a, b, p[0]))          # the boundaries: scipy's
    assert implied_relative_error(a, b, 0.5, w[1, 0]) < 1e-12
