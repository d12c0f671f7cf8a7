"""Paired tests against statsmodels and scipy (rscale.core.significance)."""

import numpy as np
import pytest
from scipy import stats

from rscale.core import significance as sig
from rscale.errors import InvalidArgumentError

statsmodels = pytest.importorskip("statsmodels")
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar  # noqa: E402
from statsmodels.stats.multitest import multipletests  # noqa: E402


def paired_hits(n, pa, pb, rho, seed):
    rng = np.random.default_rng(seed)
    z = rng.standard_normal(n)
    a = (rho * z + np.sqrt(1 - rho ** 2) * rng.standard_normal(n)) < stats.norm.ppf(pa)
    b = (rho * z + np.sqrt(1 - rho ** 2) * rng.standard_normal(n)) < stats.norm.ppf(pb)
    return a.astype(float), b.astype(float)


def table(a, b):
    return [[np.sum((a == 1) & (b == 1)), np.sum((a == 1) & (b == 0))],
            [np.sum((a == 0) & (b == 1)), np.sum((a == 0) & (b == 0))]]


@pytest.mark.parametrize("seed", range(8))
def test_mcnemar_exact_and_chi2_match_statsmodels(seed):
    n = [20, 50, 200, 1000][seed % 4]
    a, b = paired_hits(n, 0.5, 0.5 + 0.05 * (seed % 3), 0.6, seed)
    res = sig.mcnemar(a, b)
    ref = sm_mcnemar(table(a, b), exact=True)
    assert res.p_value == pytest.approx(ref.pvalue, rel=1e-10, abs=1e-15)
    assert res.statistic == ref.statistic
    assert res.discordant == (table(a, b)[0][1], table(a, b)[1][0])
    chi = sig.mcnemar(a, b, variant="chi2")
    ref2 = sm_mcnemar(table(a, b), exact=False, correction=True)
    assert chi.p_value == pytest.approx(ref2.pvalue, rel=1e-10) and chi.statistic == pytest.approx(ref2.statistic)
    mid = sig.mcnemar(a, b, variant="mid-p")
    b_, c_ = res.discordant
    assert mid.p_value == pytest.approx(res.p_value - stats.binom.pmf(min(b_, c_), b_ + c_, 0.5))
    assert mid.p_value <= res.p_value
    assert res.effect == pytest.approx(b.mean() - a.mean())


def test_mcnemar_hand_example_and_edge_cases():
    res = sig.mcnemar([1, 1, 0, 0, 1], [1, 1, 1, 1, 1])
    assert res.discordant == (0, 2) and res.p_value == pytest.approx(0.5) and res.effect == pytest.approx(0.4)
    same = np.array([1, 0, 1, 1, 0, 0, 1.0])
    ident = sig.mcnemar(same, same)                   # identical runs: no discordant pair
    assert ident.p_value == 1.0 and ident.discordant == (0, 0) and ident.effect == 0.0
    assert ident.ci_low == 0.0 and ident.ci_high == 0.0
    assert sig.mcnemar(same, same, variant="chi2").p_value == 1.0
    # all discordant pairs one way
    lop = sig.mcnemar(np.zeros(12), np.ones(12))
    assert lop.p_value == pytest.approx(2 * 0.5 ** 12)
    with pytest.raises(InvalidArgumentError, match="0 or 1"):
        sig.mcnemar([0.5, 1], [1, 1])
    with pytest.raises(InvalidArgumentError, match="same queries"):
        sig.mcnemar([0, 1, 1], [1, 1])
    with pytest.raises(InvalidArgumentError, match="variant"):
        sig.mcnemar([0, 1], [1, 1], variant="asymptotic")


@pytest.mark.parametrize("seed", range(5))
def test_paired_t_matches_scipy(seed):
    rng = np.random.default_rng(seed)
    n = [5, 30, 300, 2000, 11][seed]
    a = rng.beta(2, 3, n)
    b = np.clip(a + rng.normal(0.02, 0.1, n), 0, 1)
    res = sig.paired_t(a, b)
    ref = stats.ttest_rel(b, a)
    assert res.p_value == pytest.approx(ref.pvalue, rel=1e-10)
    assert res.statistic == pytest.approx(ref.statistic, rel=1e-10)
    ci = ref.confidence_interval(0.95)
    assert (res.ci_low, res.ci_high) == pytest.approx((ci.low, ci.high), rel=1e-10)
    assert res.effect == pytest.approx(np.mean(b - a))


def test_paired_t_degenerate_differences():
    a = np.array([0.1, 0.5, 0.9, 0.3])
    ident = sig.paired_t(a, a)
    assert ident.p_value == 1.0 and ident.effect == 0.0 and ident.statistic == 0.0
    shift = sig.paired_t(a, a + 0.1)                 # constant non-zero difference: sd 0
    assert shift.p_value == 0.0 and shift.statistic == np.inf and shift.effect == pytest.approx(0.1)
    with pytest.raises(InvalidArgumentError, match="at least 2"):
        sig.paired_t([0.1], [0.2])
    with pytest.raises(InvalidArgumentError, match="finite"):
        sig.paired_t([0.1, np.nan], [0.2, 0.3])


@pytest.mark.parametrize("seed", range(6))
def test_holm_matches_statsmodels(seed):
    rng = np.random.default_rng(seed)
    p = rng.uniform(0, 0.2, size=[1, 3, 7, 20, 4, 10][seed]) ** rng.uniform(0.5, 3)
    if seed == 4:
        p[1] = p[2]                                   # ties
    reject, adj, _, _ = multipletests(p, alpha=0.05, method="holm")
    np.testing.assert_allclose(sig.holm(p), adj, rtol=1e-12)
    np.testing.assert_array_equal(sig.holm(p) <= 0.05, reject)


def test_holm_edges():
    assert sig.holm([]).size == 0
    assert sig.holm([0.3]).tolist() == [0.3]
    np.testing.assert_allclose(sig.holm([0.01, 0.04, 0.03]), [0.03, 0.06, 0.06])
    with pytest.raises(InvalidArgumentError, match=r"\[0, 1\]"):
        sig.holm([0.1, 1.5])


def test_bootstrap_interval_covers_and_is_seeded():
    a, b = paired_hits(400, 0.5, 0.6, 0.5, 3)
    t = sig.mcnemar(a, b)
    boot = sig.mcnemar(a, b, ci="bootstrap", seed=1)
    assert boot.ci_low < boot.effect < boot.ci_high
    assert abs((boot.ci_high - boot.ci_low) - (t.ci_high - t.ci_low)) < 0.25 * (t.ci_high - t.ci_low)
    assert sig.mcnemar(a, b, ci="bootstrap", seed=1) == boot
    with pytest.raises(InvalidArgumentError, match="ci must be"):
        sig.paired_t(a, b, ci="wald")


def test_t_interval_covers_the_true_difference_about_95_percent():
    """Simulated truth: paired AP-like values with a known mean difference of 0.03."""
    rng = np.random.default_rng(0)
    cover = 0
    for _ in range(400):
        a = rng.beta(2, 3, 60)
        b = a + 0.03 + rng.normal(0, 0.1, 60)
        r = sig.paired_t(a, b)
        cover += r.ci_low <= 0.03 <= r.ci_high
    assert 0.92 <= cover / 400 <= 0.98
