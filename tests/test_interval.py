"""The one interval mechanism: intervals from stored half-sample replicates (rscale.core.interval,
rscale.core.replicates), checked by hand against scipy and against simulated truth."""

from dataclasses import replace

import numpy as np
import pytest
from scipy.stats import t as student_t

from rscale import sim
from rscale.core.estimators.methods import estimate
from rscale.core.interval import metric_intervals, predicted_intervals
from rscale.core.prediction import predict_per_query, replicate_per_query
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
        (pq, lo, hi, _), = predicted_intervals(est, [("AP", 1000, 1e6)])
        preds.append(pq.mean())
        sds.append((hi - lo) / 2 / student_t.ppf(0.975, 6))
    spread = np.std(preds, ddof=1)
    assert 0.5 < np.sqrt(np.mean(np.square(sds))) / spread < 2.0


@pytest.mark.parametrize("p,df", [(0.975, 8), (0.975, 2), (0.95, 4), (0.995, 100), (0.975, 1)])
def test_t_quantile_matches_scipy(p, df):
    from rscale.core.interval import t_quantile
    assert t_quantile(p, df) == pytest.approx(student_t.ppf(p, df), rel=1e-9)


# -- the back-test (rscale.core.backtest) ------------------------------------------------------

def _brute_force_metrics(distractors, positives, k):
    """AP@k, RR and R@k of one query in a gallery of exactly these distractor scores: the
    gallery sorted by score, a distractor tied with a positive ranked above it."""
    items = sorted([(-s, 0) for s in distractors] + [(-s, 1) for s in positives])
    ranks = [i + 1 for i, (_, is_pos) in enumerate(items) if is_pos]
    ap = sum(j / r for j, r in enumerate(ranks, 1) if r <= k) / min(k, len(ranks))
    return ap, 1.0 / ranks[0], float(ranks[0] <= k)


def test_backtest_truth_is_the_exact_metric_of_a_gallery_equal_to_the_sample():
    from rscale.core.backtest import sample_metric
    from rscale.core.estimators.base import HardnessEstimate
    rng = np.random.default_rng(4)
    sizes, n_pos = [30, 25, 30, 12], [3, 1, 4, 2]     # per-query S differ: c / S_ref still gives rank j + c
    counts, want = [], {m: [] for m in ("AP", "RR", "R")}
    for s, p in zip(sizes, n_pos):
        d = rng.integers(0, 12, s) / 12.0              # coarse scores: ties between positives and distractors
        pos = np.sort(rng.integers(0, 12, p) / 12.0)[::-1]
        counts += [int((d >= x).sum()) for x in pos]
        for metric, value in zip(("AP", "RR", "R"), _brute_force_metrics(d, pos, k=5)):
            want[metric].append(value)
    offsets = np.concatenate([[0], np.cumsum(n_pos)])
    est = HardnessEstimate(method="count", x=np.zeros(offsets[-1]), offsets=offsets,
                           rule=np.array(["count"] * offsets[-1]), n_sampled=np.array(sizes))
    for metric, k in (("AP", 5), ("RR", None), ("R", 5)):                 # RR without a cut-off
        np.testing.assert_allclose(sample_metric(est, np.array(counts), metric, k), want[metric], atol=1e-12)


def test_backtest_shares_are_disjoint_uniform_sub_samples():
    from rscale.core.backtest import disjoint_shares, max_factor
    spec = SimSpec(name="t", family="gaussian", n_queries=40, hardness=HardnessLaw("loguniform", 1.0, 1e-9, 1e-2))
    ss = sim.sample(sim.simulate(spec, seed=2), 80_000, k=800, seed=2)
    shares = disjoint_shares(ss, 8, 4, seed=1)
    sizes = np.stack([s.n_sampled for s in shares])
    assert np.all(np.abs(sizes / (ss.n_sampled / 8) - 1) < 0.05)          # each about S / 8
    # disjoint: no share's count exceeds what the sample has, and their sum stays within it
    total = np.sum([s.pos_counts for s in shares], axis=0)
    assert np.all(total <= ss.pos_counts) and np.all(sizes.sum(axis=0) <= ss.n_sampled)
    assert max_factor(ss) == 4 and max_factor(ss, (4, 8, 16, 32)) == 16     # K / m >= 50 caps it (800 / 16)


@pytest.fixture(scope="module")
def biased_sample():
    """A small gaussian benchmark where sdm (a skew-normal fit to the top of the law) is biased low
    at N = 10 S, by more than its half-sample spread."""
    spec = SimSpec(name="t", family="gaussian", n_queries=60,
                   hardness=HardnessLaw("loguniform", 1.0, 1e-9, 1e-2, immune=0.02))
    bench = sim.simulate(spec, seed=1)
    return bench, sim.sample(bench, 100_000, k=800, seed=3)


def test_backtest_widens_the_interval_of_a_biased_estimator_until_it_covers(biased_sample):
    from rscale.core.backtest import Backtest, backtest_hardness
    bench, ss = biased_sample
    n = 1e6
    truth = float(sim.truth(bench, ss, n, "AP", 1000, seed=3).mean())
    est = estimate(ss, "sdm")
    est = replace(est, replicates=hardness_replicates(ss, method="sdm", params=est.params, splits=2))
    cols, factors = backtest_hardness(ss, method="sdm", params=est.params, per_factor=2)
    bt = Backtest(counts=ss.pos_counts, columns=cols, column_factors=factors)
    (pq, lo0, hi0, none), = predicted_intervals(est, [("AP", 1000, n)])
    (_, lo, hi, b), = predicted_intervals(est, [("AP", 1000, n)], backtest=bt)
    reps = replicate_per_query(est, "AP", n, 1000)
    _, lo_r, hi_r = metric_intervals(pq[None], reps[None])          # no gallery-noise term, no back-test
    assert none is None and not lo_r[0] <= truth <= hi_r[0]   # the replicates alone miss: bias, not spread
    assert pq.mean() - truth < -0.01 and b.at_n < -0.01        # the back-test sees the bias, its sign included
    assert b.factor == 4 and b.shares == 2                     # f = 10 beyond the largest factor: from 4
    assert b.low < 0 and hi - hi0 == pytest.approx(-b.low)        # reaches up by the band's far end
    assert lo == pytest.approx(max(0.0, lo0 - max(b.high, 0.0))) and lo <= truth <= hi   # and covers


def test_query_predict_and_curve_give_the_same_back_tested_interval(tmp_path):
    from rscale import api
    from rscale.store.hardness_file import read_hardness
    from rscale.store.sample_stats_file import write_sample_stats
    spec = SimSpec(name="t", family="gaussian", n_queries=50, hardness=HardnessLaw("loguniform", 1.0, 1e-9, 1e-2))
    ss = sim.sample(sim.simulate(spec, seed=5), 100_000, k=400, seed=5)
    write_sample_stats(ss, tmp_path / "s.parquet")
    summary = api.estimate(tmp_path / "s.parquet", "evt", out=tmp_path / "h.parquet", replicates=4)
    assert summary["backtest_factors"] == [2, 4] and summary["fits"] == 1 + 4 + 4
    api.register(tmp_path / "h.parquet", tmp_path / "s.parquet", registry=tmp_path / "reg", backbone="b", benchmark="sim")
    q = api.query("mAP@1000 at N=1e7 for b", tmp_path / "reg")["rows"][0]
    p = api.predict(tmp_path / "h.parquet", sizes=[1e7])[0]
    c = api.curve("mAP@1000 for b", "1e6..1e7", points=2, registry=tmp_path / "reg")["series"][0]
    assert c["N"][-1] == 1e7
    assert q["ci_low"] == p["ci_low"] == c["ci_low"][-1] and q["ci_high"] == p["ci_high"] == c["ci_high"][-1]
    assert q["backtest_factor"] == p["backtest_factor"] == 4 and q["backtest_at_n"] == p["backtest_at_n"]
    # the back-test term is in it: wider than the replicates alone, on the side of -e(f)
    est, _ = read_hardness(tmp_path / "h.parquet")
    (_, lo0, hi0, _), = predicted_intervals(est, [("AP", 1000, 1e7)])
    assert q["ci_high"] - q["ci_low"] > hi0 - lo0
    e_lo, e_hi = q["backtest_low"], q["backtest_high"]
    assert e_lo <= q["backtest_at_n"] <= e_hi and (e_lo, e_hi) == (p["backtest_low"], p["backtest_high"])
    assert q["ci_low"] == pytest.approx(min(lo0, lo0 - e_hi)) and q["ci_high"] == pytest.approx(max(hi0, hi0 - e_lo))
    # and N <= S has no back-test term
    assert api.predict(tmp_path / "h.parquet", sizes=[5e4])[0]["backtest_factor"] is None


def test_backtest_error_is_the_share_regression_on_log_m_with_its_prediction_band():
    from rscale.core.backtest import Backtest, backtest_error, carry, factor_errors
    from rscale.core.estimators.base import HardnessEstimate
    rng = np.random.default_rng(8)
    offsets = np.arange(0, 121, 3)                                    # 40 queries, 3 positives each
    x = rng.uniform(0, 1e-3, 120)
    est = HardnessEstimate(method="count", x=x, offsets=offsets, rule=np.array(["count"] * 120),
                           n_sampled=np.full(40, 10_000), replicates=np.clip(x[:, None] * rng.uniform(0.5, 1.5, (120, 4)), 0, 1))
    bt = Backtest(counts=rng.integers(0, 12, 120), columns=np.clip(x[:, None] * rng.uniform(0.3, 1.2, (120, 4)), 0, 1),
                  column_factors=np.array([4, 4, 4, 4]))
    e2, e4 = (factor_errors(est, bt, "AP", 100, None, m) for m in (2, 4))
    at = {f: backtest_error(est, bt, "AP", 100, None, factor=f) for f in (1.0, 1.5, 3.0, 20.0)}
    assert at[1.0] is None                                            # N <= S: no term
    # by hand: least squares through the origin in u = log m, t_{n-1} prediction band of one new error
    u = np.log(np.r_[np.full(4, 2.0), np.full(4, 4.0)])
    e = np.r_[e2, e4]
    b = (u @ e) / (u @ u)
    s = np.sqrt(np.sum((e - b * u) ** 2) / 7)
    for f in (1.5, 3.0, 20.0):
        half = student_t.ppf(0.975, 7) * s * np.sqrt(1 + np.log(f) ** 2 / (u @ u))
        assert (at[f].at_n, at[f].low, at[f].high) == pytest.approx((b * np.log(f), b * np.log(f) - half, b * np.log(f) + half))
    assert (at[1.5].factor, at[3.0].factor, at[20.0].factor) == (2, 2, 4) and at[20.0].shares == 4
    assert at[3.0].error == pytest.approx(e2.mean()) and at[20.0].error == pytest.approx(e4.mean())
    assert carry([2.0], [0.01], 8.0) == pytest.approx((0.03, 0.03, 0.03))     # one share: the point, no band
    # the interval is the union of the replicate intervals around v - e for e in the band and around v
    point = rng.uniform(0.3, 0.6, (2, 40))
    reps = point[:, None, :] + rng.normal(0, 0.01, (2, 4, 40))
    v, lo0, hi0 = metric_intervals(point, reps)
    _, lo, hi = metric_intervals(point, reps, backtest=np.array([0.02, -0.03]))
    assert lo == pytest.approx([lo0[0] - 0.02, lo0[1]]) and hi == pytest.approx([hi0[0], hi0[1] + 0.03])
    _, lo, hi = metric_intervals(point, reps, backtest=np.array([[-0.01, 0.02], [0.005, 0.01]]))
    assert lo == pytest.approx([lo0[0] - 0.02, lo0[1] - 0.01]) and hi == pytest.approx([hi0[0] + 0.01, hi0[1]])


def _simulated_ladder(rng, slope, sd, n2=16, n4=4):
    """Share errors of a back-test whose error truly grows as slope * log m: 16 halves, 4 quarters."""
    f = np.r_[np.full(n2, 2.0), np.full(n4, 4.0)]
    return f, slope * np.log(f) + rng.normal(0, sd, f.size)


def test_carry_band_covers_a_simulated_error_at_the_users_factor_as_often_as_its_level():
    from rscale.core.backtest import carry
    rng = np.random.default_rng(11)
    for factor in (20.0, 100.0):
        hits, points = [], []
        for _ in range(2000):
            f, e = _simulated_ladder(rng, slope=0.004, sd=0.003)
            new = 0.004 * np.log(factor) + rng.normal(0, 0.003)          # the error the user's own estimate makes
            point, low, high = carry(f, e, factor)
            hits.append(low <= new <= high)
            points.append(point)
        assert abs(np.mean(hits) - 0.95) < 0.015                        # brute force: the band's level holds
        assert np.mean(points) == pytest.approx(0.004 * np.log(factor), rel=0.03)


def test_carried_term_grows_with_the_factor_where_shares_agree_and_shrinks_where_they_do_not():
    from rscale.core.backtest import carry
    rng = np.random.default_rng(12)
    # agree: a clean slope; the carried error and its far end grow with log f
    f, e = _simulated_ladder(rng, slope=0.005, sd=0.0005)
    c20, c100 = carry(f, e, 20.0), carry(f, e, 100.0)
    assert c100[0] > c20[0] > 0 and c100[2] > c20[2] and c100[0] == pytest.approx(0.005 * np.log(100), rel=0.1)
    # disagree: halves at 0, quarters scattered around +0.02 (a handicap of the small shares, no common slope).
    # The old rule carried the quarters' mean as e_4 log f / log 4; the regression, anchored at 0 by the 16
    # halves, carries a smaller point, and even its band's far end stays below the old carry; the band
    # is wide (the shares' disagreement), not the zero-width point the old rule gave
    f = np.r_[np.full(16, 2.0), np.full(4, 4.0)]
    e = np.r_[rng.normal(0, 0.001, 16), 0.02 + np.array([-0.012, -0.004, 0.004, 0.012])]
    point, low, high = carry(f, e, 100.0)
    old = e[16:].mean() * np.log(100) / np.log(4)
    assert 0 < point < 0.6 * old and low < point < high < old and high - low > 0.6 * old
