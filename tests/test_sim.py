from dataclasses import replace

import numpy as np
import pytest
from scipy import integrate, stats

from rscale import sim
from rscale.core import law
from rscale.core.sample_stats import validate
from rscale.sim import score_laws
from rscale.sim.presets import PRESETS

P_GRID = np.array([0.9, 0.5, 1e-2, 1e-4, 1e-6, 1e-8, 1e-10, 1e-12, 1e-14])


@pytest.mark.parametrize("family", score_laws.FAMILIES)
def test_isf_inverts_sf_down_to_1e14(family):
    law_ = score_laws.draw_laws(family, 20, np.random.default_rng(0))
    for q in range(20):
        qq = np.full(P_GRID.size, q)
        s = law_.isf(P_GRID, qq)
        assert np.all(np.diff(s) > 0), "isf must increase as p falls"
        np.testing.assert_allclose(law_.sf(s, qq), P_GRID, rtol=1e-9)


def test_gaussian_law_against_scipy():
    law_ = score_laws.draw_laws("gaussian", 5, np.random.default_rng(1))
    s = np.linspace(0, 0.7, 50)
    for q in range(5):
        ref = stats.norm.sf(s, loc=law_.mu[q], scale=law_.sigma[q])
        np.testing.assert_allclose(law_.sf(s, np.full(50, q)), ref, rtol=1e-10)


def test_logistic_law_against_scipy():
    law_ = score_laws.draw_laws("logistic", 5, np.random.default_rng(7))
    s = np.linspace(0, 0.9, 50)
    for q in range(5):
        ref = stats.logistic.sf(s, loc=law_.mu[q], scale=law_.beta[q])
        np.testing.assert_allclose(law_.sf(s, np.full(50, q)), ref, rtol=1e-10)
    # an exactly exponential far tail: each further decade of survival costs beta * ln 10
    far = law_.isf(np.array([1e-8, 1e-9, 1e-10]), np.zeros(3, dtype=int))
    np.testing.assert_allclose(np.diff(far), law_.beta[0] * np.log(10), rtol=1e-6)


def test_student_law_against_scipy_and_heavy():
    law_ = score_laws.draw_laws("student", 5, np.random.default_rng(9))
    s = np.linspace(0, 1.5, 50)
    for q in range(5):
        ref = stats.t.sf(s, law_.nu[q], loc=law_.mu[q], scale=law_.scale[q])
        np.testing.assert_allclose(law_.sf(s, np.full(50, q)), ref, rtol=1e-10)
    assert np.all((law_.isf(np.full(5, 1e-8), np.arange(5)) > 0.45) & (law_.isf(np.full(5, 1e-8), np.arange(5)) < 0.7))
    # a Frechet-domain tail: sf(t s) / sf(s) -> t^(-nu) far out (GPD shape 1 / nu > 0)
    far = law_.isf(np.array([1e-12, 1e-13]), np.zeros(2, dtype=int)) - law_.mu[0]
    assert np.log(10) / np.log(far[1] / far[0]) == pytest.approx(law_.nu[0], rel=0.02)


def test_bounded_law_against_numerical_integration():
    law_ = score_laws.draw_laws("bounded", 3, np.random.default_rng(2))
    for q in range(3):
        lo, hi, a, b = law_.lo[q], law_.hi[q], law_.a[q], law_.b[q]

        def pdf(t):
            return a * b * t ** (a - 1) * (1 - t ** a) ** (b - 1)

        for s in (0.0, 0.3, 0.6, hi - 0.05):
            t0 = (s - lo) / (hi - lo)
            ref = integrate.quad(pdf, t0, 1.0, epsabs=1e-16, epsrel=1e-12)[0]
            assert law_.sf(np.array([s]), np.array([q]))[0] == pytest.approx(ref, rel=1e-7)
        assert law_.sf(np.array([hi + 0.01]), np.array([q]))[0] == 0.0


def test_neardup_is_the_mixture():
    law_ = score_laws.draw_laws("neardup", 4, np.random.default_rng(3))
    s = np.linspace(0.2, 0.9, 30)
    for q in range(4):
        w = law_.w[q]
        ref = ((1 - w) * stats.norm.sf(s, law_.bulk.mu[q], law_.bulk.sigma[q])
               + w * stats.norm.sf(s, law_.cluster.mu[q], law_.cluster.sigma[q]))
        np.testing.assert_allclose(law_.sf(s, np.full(30, q)), ref, rtol=1e-9)


@pytest.mark.parametrize("family", ["scalemix", "shoulder"])
def test_mixture_families_against_scipy(family):
    law_ = score_laws.draw_laws(family, 4, np.random.default_rng(6))
    assert np.allclose(law_.w.sum(axis=1), 1.0)
    s = np.linspace(0.0, 0.8, 40)
    for q in range(4):
        ref = sum(w * stats.norm.sf(s, m, sd) for w, m, sd in zip(law_.w[q], law_.mu[q], law_.sigma[q]))
        np.testing.assert_allclose(law_.sf(s, np.full(40, q)), ref, rtol=1e-9)
    # the scale mixture is heavier than its own first component far out
    if family == "scalemix":
        far = law_.isf(np.full(4, 1e-10), np.arange(4))
        assert np.all(far > law_.mu[:, 0] + law_.sigma[:, 0] * stats.norm.isf(1e-10))


@pytest.mark.parametrize("family", score_laws.FAMILIES)
def test_top_order_statistics_match_bruteforce(family):
    # The K-th largest of S draws, drawn as order statistics, against materialised samples.
    rng = np.random.default_rng(4)
    law_ = score_laws.draw_laws(family, 1, rng)
    if family == "neardup":  # make the cluster visible at this small S
        law_ = replace(law_, w=np.array([0.01]))
    s, k, reps = 3000, 20, 1500
    n = np.full(reps, s)
    one = law_.take(np.zeros(reps, dtype=int))
    fast = (one.sample_top(n, k, rng) if hasattr(one, "sample_top")
            else score_laws.top_scores_by_inversion(one, n, k, rng))
    u = rng.random((reps, s))
    qm = np.broadcast_to(np.arange(reps)[:, None], u.shape)
    if family == "neardup":  # materialise the mixture by drawing each score's component
        from_cluster = rng.random(u.shape) < one.w[0]
        draws = np.where(from_cluster, one.cluster.isf(u, qm), one.bulk.isf(u, qm))
    elif isinstance(one, score_laws.MixtureLaw):
        comp = (rng.random(u.shape)[..., None] > np.cumsum(one.w[0])[:-1]).sum(axis=-1)
        draws = one.mu[0][comp] + one.sigma[0][comp] * rng.standard_normal(u.shape)
    else:
        draws = one.isf(u, qm)
    brute = -np.sort(-draws, axis=1)[:, :k]
    for col in (0, k - 1):
        assert stats.ks_2samp(fast[:, col], brute[:, col]).pvalue > 1e-3


def test_smallest_uniforms_when_fewer_than_k():
    v = score_laws.smallest_uniforms(np.array([3, 10]), 5, np.random.default_rng(5))
    assert np.isnan(v[0, 3:]).all() and not np.isnan(v[0, :3]).any()
    assert np.all(np.diff(v[1]) > 0) and v[1, -1] < 1


@pytest.fixture(scope="module")
def bench():
    spec = replace(PRESETS["sim_gaussian"], n_queries=400)
    return sim.simulate(spec, seed=7)


def test_sample_is_valid_and_counts_consistent(bench):
    ss = sim.sample(bench, 200_000, k=500, seed=1)
    validate(ss)  # sorted tops, counts consistent with them
    assert ss.top_scores.shape == (400, 500)
    # within a query, better positives never have more distractors above them
    c = ss.pos_counts
    same = np.diff(ss.positive_query()) == 0
    assert np.all(np.diff(c)[same] >= 0)


def test_sampled_counts_are_binomial(bench):
    # c_j ~ Binomial(S, x_j): standardised residuals have mean 0 and variance 1
    s = 1_000_000
    ss = sim.sample(bench, s, k=200, seed=2)
    x = bench.pos_x
    keep = (x * s > 20) & (x < 0.5)
    z = (ss.pos_counts[keep] - s * x[keep]) / np.sqrt(s * x[keep] * (1 - x[keep]))
    assert keep.sum() > 100
    assert abs(z.mean()) < 4 / np.sqrt(keep.sum())
    assert 0.8 < z.var() < 1.2


def test_truth_at_s_is_the_sample_and_counts_nest(bench):
    ss = sim.sample(bench, 100_000, k=300, seed=3)
    at_s = sim.truth(bench, ss, 100_000)
    ev = law.ap_at_k(law.Hardness.from_counts(ss.pos_counts, ss.pos_offsets, 100_000), 100_000, 1000)
    np.testing.assert_allclose(at_s, ev, rtol=1e-12)
    big = sim.truth_counts(bench, ss, 1e9)
    assert np.all(big >= ss.pos_counts)
    same = np.diff(ss.positive_query()) == 0
    assert np.all(np.diff(big)[same] >= 0)


def test_truth_mean_matches_expected_law(bench):
    # E[realised AP] over galleries = the law's expected mode on the true hardness.
    n = 10**8
    vals = []
    for seed in range(6):
        ss = sim.sample(bench, 1_000_000, k=100, seed=seed)
        vals.append(sim.truth(bench, ss, n, seed=seed))
    vals = np.concatenate(vals)
    want = law.ap_at_k(bench.hardness, n, 1000, "expected")
    diff = vals - np.tile(want, 6)
    assert abs(diff.mean()) < 4 * diff.std() / np.sqrt(diff.size)


def test_hardness_laws():
    rng = np.random.default_rng(6)
    n_pos = np.full(20000, 1)
    x = sim.HardnessLaw("loguniform", x_min=1e-8, x_max=1e-2, immune=0.0, rho=0.0).draw(n_pos, rng)
    assert stats.kstest(np.log(x), stats.uniform(np.log(1e-8), np.log(1e-2) - np.log(1e-8)).cdf).pvalue > 1e-3
    x = sim.HardnessLaw("power", alpha=1.2, x_min=1e-8, x_max=1e-2, immune=0.2, rho=0.5).draw(n_pos, rng)
    assert 0.18 < np.mean(x < 1e-12) < 0.22
    y = x[x >= 1e-8]
    # density proportional to x^-1.2: x^-0.2 is uniform between the bounds' images
    t = y ** -0.2
    assert stats.kstest(t, stats.uniform(1e-2 ** -0.2, 1e-8 ** -0.2 - 1e-2 ** -0.2).cdf).pvalue > 1e-3
