"""The reranked interval's gallery term (rscale.core.rerank_replicates.gallery_sd): the sd over
galleries of the realised reranked metric under the law, checked against scipy's Binomial on a
hand-made case and against realised galleries drawn from the simulator's Gaussian rerank model
(the plug-in on a gallery's realised quantities is that gallery's exact reranked metric,
tests/test_rerank_law.py), and its place in the interval (rscale.core.interval.metric_intervals)."""

import numpy as np
import pytest
from scipy import stats

from rscale.core import rerank_law as law
from rscale.core.interval import metric_intervals
from rscale.core.rerank_replicates import gallery_sd


def constant_rho(rho, x, t, n_queries=1):
    """Queries of one positive each whose share of any top slice reranking above it is ``rho``."""
    grid = np.tile(np.linspace(0.0, 1.0, 11), (n_queries, 1))
    joint = np.tile(rho * grid[0], (n_queries, 1))
    return law.RerankedHardness.build(np.full(n_queries, x), np.full(n_queries, t), np.arange(n_queries + 1),
                                      grid, joint)


@pytest.mark.parametrize("metric,k", [("AP", 101), ("RR", 101), ("R", 3)])
def test_one_positive_is_a_binomial(metric, k):
    """x = 0 (it survives), K' = 101, N = 1e4: m = 100 distractors in the top K', each reranking
    above it with probability 0.02, so M ~ Bin(100, 0.02) and AP = RR = 1 / (1 + M), R@3 = 1{M <= 2}."""
    h = constant_rho(0.02, 0.0, 1.0)
    pmf = stats.binom.pmf(np.arange(101), 100, 0.02)
    v = 1.0 / (1.0 + np.arange(101)) if metric != "R" else (np.arange(101) <= k - 1).astype(float)
    want = np.sqrt(pmf @ v ** 2 - (pmf @ v) ** 2)
    got = gallery_sd(h, metric, 1e4, k, depth=101, draws=20_000)
    assert got == pytest.approx(want, rel=0.03)
    # Q independent queries: the sd of their mean is 1/sqrt(Q) of one query's
    assert gallery_sd(constant_rho(0.02, 0.0, 1.0, 16), metric, 1e4, k, depth=101, draws=5000) == pytest.approx(
        want / 4, rel=0.05)


def test_default_draws_reach_the_terms_precision(monkeypatch):
    """Without ``draws`` the term takes as many galleries as its precision needs (the first-stage
    rule, rscale.core.gallery_noise.draws_needed): 16 equal queries ask for about 1 + 2 / (0.05^2 16)
    = 51 after the first 8 (Q_eff as those 8 estimate it), and land within a few percent of the
    exact sd."""
    import rscale.core.rerank_replicates as rr
    h = constant_rho(0.02, 0.0, 1.0, 16)
    pmf = stats.binom.pmf(np.arange(101), 100, 0.02)
    want = np.sqrt(pmf @ (1.0 / (1.0 + np.arange(101))) ** 2 - (pmf @ (1.0 / (1.0 + np.arange(101)))) ** 2) / 4
    passes = []
    real = rr._outranking_variance
    monkeypatch.setattr(rr, "_outranking_variance", lambda *a: passes.append(a[-2]) or real(*a))
    got = [gallery_sd(h, "AP", 1e4, 101, depth=101, seed=s) for s in range(10)]
    assert passes[0] == 8 and 30 < passes[1] < 120
    assert np.mean(got) == pytest.approx(want, rel=0.05) and np.std(got) / want < 0.1


def test_a_positive_nobody_outranks_has_no_gallery_noise():
    assert gallery_sd(constant_rho(0.0, 0.0, 1.0, 4), "AP", 1e4, 101, depth=101) == 0.0


def test_against_realised_galleries_of_the_rerank_model():
    """40 queries x 3 positives that survive the first stage (N x <= 15 against K' = 100) with
    rerank scores near the top slice's: the computed sd of the realised mAP@100 / R@1 over
    galleries of N = 3000 is the sd measured over 400 galleries drawn from the model, within
    the measurement's error (about 4%) and w's own small randomness."""
    from rscale.sim.rerank import GaussianRerankModel
    rng = np.random.default_rng(5)
    model = GaussianRerankModel(0.7)
    q, n, depth = 40, 3000, 100
    x = np.sort(rng.uniform(1e-4, 5e-3, (q, 3)), axis=1).ravel()
    t = rng.uniform(2.8, 3.6, q * 3)
    off = np.arange(q + 1) * 3
    fine = np.concatenate([[0.0], np.geomspace(1e-7, 1.0, 1500)])
    exact = law.RerankedHardness.build(x, t, off, np.tile(fine, (q, 1)), model.joint_tail(t, fine))
    pq = np.repeat(np.arange(q), 3)
    realised = {"AP": [], "R": []}
    for _ in range(400):
        u, e = model.gallery(n, q, rng)
        order = np.argsort(u, axis=1)[:, :depth + 50]
        grid, joint = law.joint_from_top(np.take_along_axis(e, order, axis=1), np.full(q, n), t, off)
        h = law.RerankedHardness.build((u[pq] <= x[:, None]).sum(axis=1) / n, t, off, grid, joint)
        realised["AP"].append(law.reranked_metric(h, "AP", n, depth, depth=depth, mode="plugin"))
        realised["R"].append(law.reranked_metric(h, "R", n, 1, depth=depth, mode="plugin"))
    for metric, k in (("AP", depth), ("R", 1)):
        measured = np.std(realised[metric], ddof=1)
        assert measured > 0.01
        assert gallery_sd(exact, metric, n, k, depth=depth, draws=2000) == pytest.approx(measured, rel=0.1)


def test_the_gallery_term_adds_in_quadrature_to_the_replicate_term():
    from statistics import NormalDist

    from rscale.core.interval import t_quantile
    rng = np.random.default_rng(0)
    point = rng.uniform(0.2, 0.4, (2, 30))
    reps = point[:, None, :] + rng.normal(0, 0.02, (2, 16, 30))
    v, lo0, hi0 = metric_intervals(point, reps)
    _, lo1, hi1 = metric_intervals(point, reps, gallery_sd=np.array([0.01, 0.0]))
    rep_half = hi0 - v
    z = NormalDist().inv_cdf(0.975)
    assert rep_half[0] == pytest.approx(t_quantile(0.975, 8) * np.sqrt(np.mean(
        ((reps[0].mean(axis=1).reshape(8, 2) @ [1, -1]) / 2) ** 2)))
    assert hi1 - v == pytest.approx(np.hypot(rep_half, [z * 0.01, 0.0]))
    assert v - lo1 == pytest.approx(np.hypot(rep_half, [z * 0.01, 0.0]))
    _, plo, phi = metric_intervals(point, reps, ci_kind="population", gallery_sd=np.array([0.01, 0.0]), bootstrap=300)
    _, plo0, phi0 = metric_intervals(point, reps, ci_kind="population", bootstrap=300)
    assert plo[0] < plo0[0] and phi[0] > phi0[0] and plo[1] == plo0[1]
