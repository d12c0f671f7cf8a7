"""The realised value's gallery noise (rscale.core.gallery_noise) against the simulator's realised
truth, and its place in the benchmark interval."""
import numpy as np
import pytest

from rscale import sim
from rscale.core.estimators.base import HardnessEstimate
from rscale.core.gallery_noise import nested_counts, realised_sd
from rscale.core.interval import metric_intervals, predicted_intervals
from rscale.core.prediction import gallery_sd, predict_per_query, replicate_per_query
from rscale.sim.benchmark import HardnessLaw, SimSpec


@pytest.fixture(scope="module")
def bench():
    spec = SimSpec(name="g", family="gaussian", n_queries=300,
                   hardness=HardnessLaw("loguniform", 1.0, 1e-10, 1e-2, immune=0.05))
    return sim.simulate(spec, seed=3)


def truth_sd(bench, ss, n, metric, k, galleries=200):
    """sd of the simulator's realised truth over galleries containing the sample ``ss``
    (sim.truth: its own nested Binomial draws, independent of rscale.core.gallery_noise)."""
    return float(np.std([sim.truth(bench, ss, n, metric, k, seed=i).mean() for i in range(galleries)], ddof=1))


@pytest.mark.parametrize("metric,k", [("AP", 1000), ("R", 100), ("RR", None)])
def test_realised_sd_matches_the_spread_of_the_simulators_realised_truth(bench, metric, k):
    ss = sim.sample(bench, 10_000, k=400, seed=1)          # S << N: the sample barely conditions
    got = realised_sd(bench.pos_x, bench.pos_offsets, metric, 1e8, k, draws=400)
    assert got == pytest.approx(truth_sd(bench, ss, 1e8, metric, k), rel=0.15)
    assert got > 0


def test_in_pool_noise_is_that_of_the_unseen_distractors_only(bench):
    n = 2e6
    ss = sim.sample(bench, 1_000_000, k=400, seed=1)      # the gallery holds the sample: half of it
    pooled = realised_sd(bench.pos_x, bench.pos_offsets, "AP", n, 1000, base_counts=ss.pos_counts,
                         n_sampled=ss.n_sampled, draws=400)
    assert pooled == pytest.approx(truth_sd(bench, ss, n, "AP", 1000), rel=0.15)
    assert pooled < 0.85 * realised_sd(bench.pos_x, bench.pos_offsets, "AP", n, 1000, draws=400)
    same = realised_sd(bench.pos_x, bench.pos_offsets, "AP", 1e6, 1000, base_counts=ss.pos_counts,
                       n_sampled=ss.n_sampled)
    assert same == 0.0                                       # N = S: the gallery is the sample


def test_nested_counts_keep_the_order_and_the_binomial_marginals():
    rng = np.random.default_rng(0)
    x = np.array([1e-4, 3e-4, 3e-4, 1e-3, 5e-5])           # two queries, ascending within each
    off = np.array([0, 4, 5])
    c = nested_counts(x, off, 10_000, 20_000, rng)
    assert np.all(np.diff(c[:, :4], axis=1) >= 0)           # a harder positive is never outranked by fewer
    assert np.array_equal(c[:, 1], c[:, 2])                 # ties share their count
    assert c.mean(axis=0) == pytest.approx(10_000 * x, rel=0.03)
    assert c.var(axis=0) == pytest.approx(10_000 * x * (1 - x), rel=0.06)


def test_seeded_so_every_command_gets_the_same_term(bench):
    a = realised_sd(bench.pos_x, bench.pos_offsets, "AP", 1e8, 1000)
    assert a == realised_sd(bench.pos_x, bench.pos_offsets, "AP", 1e8, 1000)


def exact_estimate(bench, replicates: int = 4) -> HardnessEstimate:
    """The true hardness, with replicates that agree exactly (no estimation noise at all)."""
    x = bench.pos_x.copy()
    est = HardnessEstimate(method="count", x=x, offsets=bench.pos_offsets.copy(), rule=np.full(x.size, "count"),
                           n_sampled=np.full(bench.query_ids.size, 10_000), replicates=np.repeat(x[:, None], replicates, 1))
    for a in (est.x, est.offsets, est.replicates):
        a.flags.writeable = False
    return est


def test_benchmark_interval_of_the_exact_hardness_covers_the_realised_values(bench):
    """Regression: the benchmark interval carried only the replicates, so with the hardness known
    exactly it had zero width and missed every realised gallery value; with the realised value's
    own noise it covers about 95% of galleries."""
    est = exact_estimate(bench)
    n = 1e8
    (pq, lo, hi, _), = predicted_intervals(est, [("AP", 1000, n)], mode="expected")
    ss = sim.sample(bench, 10_000, k=400, seed=1)
    realised = np.array([sim.truth(bench, ss, n, "AP", 1000, seed=i).mean() for i in range(300)])
    covered = np.mean((realised >= lo) & (realised <= hi))
    assert hi - lo > 0
    assert 0.90 <= covered <= 0.99
    g = gallery_sd(est, "AP", n, 1000)
    assert (hi - lo) / 2 == pytest.approx(1.959964 * g, rel=1e-6)    # the replicates add nothing here


def test_the_term_adds_in_quadrature_to_the_replicates_half_width(bench):
    rng = np.random.default_rng(2)
    x = bench.pos_x
    reps = np.clip(x[:, None] * rng.lognormal(0.0, 0.3, (x.size, 8)), 0.0, 1.0)
    est = HardnessEstimate(method="count", x=x.copy(), offsets=bench.pos_offsets.copy(),
                           rule=np.full(x.size, "count"), n_sampled=np.full(bench.query_ids.size, 10_000),
                           replicates=reps)
    n = 1e8
    (pq, lo, hi, _), = predicted_intervals(est, [("AP", 1000, n)], mode="plugin")
    reps_pq = replicate_per_query(est, "AP", n, 1000, "plugin")
    _, lo_r, hi_r = metric_intervals(pq[None], reps_pq[None])
    g = gallery_sd(est, "AP", n, 1000)
    half_r = (hi_r[0] - lo_r[0]) / 2
    assert (hi - lo) / 2 == pytest.approx(np.hypot(half_r, 1.959964 * g), rel=1e-6)
    assert pq.mean() == pytest.approx(predict_per_query(est, "AP", n, 1000, "plugin").mean())


def test_draws_needed_follows_the_precision_of_a_sum_of_variances():
    from rscale.core.gallery_noise import MAX_DRAWS, PRECISION, draws_needed
    assert draws_needed(np.zeros(50), 8) == 8                       # nothing varies: no more draws
    assert draws_needed(np.ones(10_000), 8) == 8                    # 1 + 2 / (0.05^2 1e4) < 8 drawn
    q = 40                                                          # 40 equal queries: Q_eff = 40
    assert draws_needed(np.ones(q), 8) == int(np.ceil(1 + 2 / (PRECISION ** 2 * q)))
    assert draws_needed(np.r_[1.0, np.zeros(999)], 8) == MAX_DRAWS  # one query carries it all: capped


def test_adaptive_draws_reach_the_precision_on_a_small_table_and_stop_early_on_a_large_one(monkeypatch):
    """Regression for the cost: a fixed budget of ~1M positive-draws spent 256 galleries on every
    table of up to 4,000 positives (85 ms of a 210 ms new-cell query on realset), where 8 suffice.
    A small table must still get the term to its precision: 8 galleries alone would not."""
    import rscale.core.gallery_noise as gn
    small = sim.simulate(SimSpec(name="s", family="gaussian", n_queries=25,
                                 hardness=HardnessLaw("loguniform", 1.0, 1e-9, 1e-5)), seed=5)
    ref = realised_sd(small.pos_x, small.pos_offsets, "AP", 1e8, 1000, draws=4000, seed=1)
    adaptive = np.array([realised_sd(small.pos_x, small.pos_offsets, "AP", 1e8, 1000, seed=s) for s in range(40)])
    fixed8 = np.array([realised_sd(small.pos_x, small.pos_offsets, "AP", 1e8, 1000, draws=8, seed=s) for s in range(40)])
    assert np.std(fixed8) / ref > 0.07                               # what stopping at 8 would give (0.096)
    assert np.std(adaptive) / ref < gn.PRECISION                     # 0.020 measured
    assert np.mean(adaptive) == pytest.approx(ref, rel=0.04)

    calls = []
    real = gn.nested_counts
    monkeypatch.setattr(gn, "nested_counts", lambda *a: calls.append(a[3]) or real(*a))
    large = sim.simulate(SimSpec(name="l", family="gaussian", n_queries=3000,
                                 hardness=HardnessLaw("loguniform", 1.0, 1e-10, 1e-2)), seed=6)
    realised_sd(large.pos_x, large.pos_offsets, "AP", 1e8, 1000)
    assert calls == [gn.FIRST_DRAWS]
    calls.clear()
    realised_sd(small.pos_x, small.pos_offsets, "AP", 1e8, 1000)
    assert calls[0] == gn.FIRST_DRAWS and len(calls) == 2 and sum(calls) > 20
