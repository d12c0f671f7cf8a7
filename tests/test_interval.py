"""The one interval mechanism: intervals from stored half-sample replicates (rscale.core.interval,
rscale.core.replicates), checked by hand against scipy and against simulated truth."""

from dataclasses import replace

import numpy as np
import pytest
from scipy.stats import t as student_t

from rscale import sim
from rscale.core.estimators.methods import estimate
from rscale.core.interval import metric_intervals, predicted_intervals
from rscale.core.prediction import predict_per_query
from rscale.core.replicates import hardness_replicates
from rscale.core.uncertainty import percentile_ci, query_bootstrap
from rscale.errors import InvalidArgumentError
from rscale.sim.benchmark import HardnessLaw, SimSpec


def test_benchmark_interval_is_t_times_the_rms_pair_difference():
    rng = np.random.default_rng(0)
    point = rng.uniform(0.2, 0.6, (1, 50))
    reps = point[:, None, :] + rng.normal(0, 0.02, (1, 6, 50))       # 3 pairs
    v, lo, hi = metric_intervals(point, reps, ci_kind="benchmark")
    m = reps[0].mean(axis=1)
    sd = np.sqrt(np.mean(((m[0::2] - m[1::2]) / 2) ** 2))
    assert v[0] == pytest.approx(point.mean())
    assert hi[0] - v[0] == pytest.approx(student_t.ppf(0.975, 3) * sd) and v[0] - lo[0] == pytest.approx(hi[0] - v[0])
    # population: the replicate term and the percentile query bootstrap add in variance, each side
    _, plo, phi = metric_intervals(point, reps, ci_kind="population", bootstrap=400, seed=3)
    b_lo, b_hi = percentile_ci(query_bootstrap(point, 400, 3))
    half = student_t.ppf(0.975, 3) * sd
    assert v[0] - plo[0] == pytest.approx(np.hypot(v[0] - b_lo[0], half))
    assert phi[0] - v[0] == pytest.approx(np.hypot(b_hi[0] - v[0], half))


def test_interval_edges_and_refusals():
    point = np.full((1, 10), 0.99)
    reps = np.stack([np.full((1, 10), 0.9), np.full((1, 10), 1.0)] * 2, axis=1)
    _, lo, hi = metric_intervals(point, reps)
    assert hi[0] == 1.0 and lo[0] < 0.99                                  # clipped to [0, 1]
    _, lo, hi = metric_intervals(point, None)
    assert np.isnan(lo[0]) and np.isnan(hi[0])                            # no replicates: no benchmark interval
    with pytest.raises(InvalidArgumentError, match="ci_kind"):
        metric_intervals(point, reps, ci_kind="query")
    with pytest.raises(InvalidArgumentError, match="pairs"):
        metric_intervals(point, reps[:, :3])
    with pytest.raises(InvalidArgumentError, match="splits"):
        hardness_replicates(None, method="count", params={}, splits=1)


def test_replicate_spread_matches_the_spread_over_independent_samples():
    # simulated truth: the benchmark interval claims the error sd of one sample's prediction;
    # over independent samples of the same benchmark the predictions spread by about that much
    spec = SimSpec(name="t", family="gaussian", n_queries=150,
                   hardness=HardnessLaw("loguniform", 1.0, 1e-9, 1e-2, immune=0.02))
    bench = sim.simulate(spec, seed=1)
    preds, sds = [], []
    for seed in range(12):
        ss = sim.sample(bench, 200_000, k=400, seed=100 + seed)
        est = estimate(ss, "count")
        est = replace(est, replicates=hardness_replicates(ss, method="count", params={}, splits=6, seed=seed))
        (pq, lo, hi), = predicted_intervals(est, [("AP", 1000, 1e6)])
        preds.append(pq.mean())
        sds.append((hi - lo) / 2 / student_t.ppf(0.975, 6))
    spread = np.std(preds, ddof=1)
    assert 0.5 < np.sqrt(np.mean(np.square(sds))) / spread < 2.0


@pytest.mark.parametrize("p,df", [(0.975, 8), (0.975, 2), (0.95, 4), (0.995, 100), (0.975, 1)])
def test_t_quantile_matches_scipy(p, df):
    from rscale.core.interval import t_quantile
    assert t_quantile(p, df) == pytest.approx(student_t.ppf(p, df), rel=1e-9)
