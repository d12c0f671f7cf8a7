import numpy as np
import pytest

from rscale.core.uncertainty import (
    bootstrap_indices,
    paired_difference,
    percentile_ci,
    query_bootstrap,
    sufficient_budget,
)


def test_bootstrap_matches_the_standard_error():
    rng = np.random.default_rng(0)
    v = rng.random(2000)
    boots = query_bootstrap(v, b=2000, seed=1)
    assert boots.std() == pytest.approx(v.std() / np.sqrt(v.size), rel=0.1)
    lo, hi = percentile_ci(boots)
    assert lo < v.mean() < hi


def test_bootstrap_of_many_predictions_shares_resamples():
    v = np.random.default_rng(1).random((3, 500))
    boots = query_bootstrap(v, b=300, seed=2)
    assert boots.shape == (3, 300)
    np.testing.assert_allclose(boots[0], query_bootstrap(v[0], b=300, seed=2))


def test_paired_difference_resolution():
    rng = np.random.default_rng(2)
    base = rng.random(1000)
    noise = rng.normal(0, 0.01, 1000)
    resolved = paired_difference(base + 0.01 + noise, base)
    assert resolved.resolved and resolved.lo > 0
    tied = paired_difference(base + noise - noise.mean(), base)
    assert not tied.resolved


def test_sufficient_budget():
    rng = np.random.default_rng(3)
    base = rng.random(1000)          # query noise: 1.96 * 0.29 / sqrt(1000) = 0.018
    converged = np.stack([base + 0.05, base + 0.01, base + 0.005 + rng.normal(0, 0.01, 1000), base])
    check = sufficient_budget(converged, [0.125, 0.25, 0.5, 1.0])
    assert check.sufficient and check.noise == pytest.approx(1.96 * base.std(ddof=1) / np.sqrt(1000))
    drifting = np.stack([base + 0.12, base + 0.08, base + 0.04, base])
    check = sufficient_budget(drifting, [0.125, 0.25, 0.5, 1.0])
    assert not check.sufficient and check.last_step.value == pytest.approx(-0.04)


def test_blockwise_bootstrap_equals_materialised_indices():
    rng = np.random.default_rng(4)
    v = rng.random((3, 257))
    for b in (1, 63, 64, 200):
        idx = bootstrap_indices(257, b, seed=5)
        assert idx.shape == (b, 257)
        np.testing.assert_array_equal(query_bootstrap(v, b, seed=5), query_bootstrap(v, idx=idx))
        np.testing.assert_allclose(query_bootstrap(v[1], b, seed=5), query_bootstrap(v, b, seed=5)[1], rtol=1e-12)
