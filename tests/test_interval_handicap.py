"""The back-test's level carry (rscale.core.backtest: share_counts, own_error, increment_errors,
carry_level): each piece against an independent computation (brute-force rankings of explicit
galleries, statsmodels' OLS prediction interval), and its band against simulated truth."""

import itertools

import numpy as np
import pytest

from rscale import sim
from rscale.sim.benchmark import HardnessLaw, SimSpec


def _brute_ap(ranks_of_positives, k):
    ranks = sorted(ranks_of_positives)
    return sum(j / r for j, r in enumerate(ranks, 1) if r <= k) / min(k, len(ranks))


def _plugin_ap(x, n, k):
    """Plug-in AP@k of one query: positives easiest first (x ascending), rank j + n x."""
    return _brute_ap([j + n * xi for j, xi in enumerate(sorted(x), 1)], k)


def _explicit_backtest(rng, k=6):
    """Four explicit disjoint shares of each query's distractors, share hardness columns made from
    them (their own fractions, perturbed), and the brute-force (u, d) increments and e_11."""
    from rscale.core.backtest import Backtest
    from rscale.core.estimators.base import HardnessEstimate
    n_pos = [3, 1, 4, 2, 2]
    sizes = [40, 36, 48, 28, 44]
    pos_scores, share_of, dist = [], [], []
    for s, p in zip(sizes, n_pos):
        dist.append(rng.integers(0, 30, s) / 30.0)
        share_of.append(rng.permutation(np.arange(s) % 4))             # 4 disjoint shares, about S / 4 each
        pos_scores.append(np.sort(rng.integers(0, 30, p) / 30.0)[::-1])
    offsets = np.concatenate([[0], np.cumsum(n_pos)])
    counts = np.concatenate([[int((d >= x).sum()) for x in ps] for d, ps in zip(dist, pos_scores)])
    c4 = np.stack([np.concatenate([[int(((d >= x) & (sh == i)).sum()) for x in ps]
                                   for d, ps, sh in zip(dist, pos_scores, share_of)]) for i in range(4)], axis=1)
    n4 = np.stack([[int((sh == i).sum()) for sh in share_of] for i in range(4)], axis=1)
    q_of = np.repeat(np.arange(len(n_pos)), n_pos)
    cols = np.clip((c4 + 0.5) / n4[q_of] * rng.uniform(0.6, 1.4, c4.shape), 0, 1)
    x = np.clip((counts + 0.5) / np.asarray(sizes)[q_of] * rng.uniform(0.7, 1.3, counts.size), 0, 1)
    est = HardnessEstimate(method="count", x=x, offsets=offsets, rule=np.array(["count"] * x.size),
                           n_sampled=np.asarray(sizes))
    bt = Backtest(counts=counts, columns=cols, column_factors=np.array([4, 4, 4, 4]), column_counts=c4, column_sizes=n4)
    # brute force: share i predicting the gallery of union g (its sizes, plug-in ranks j + n x) minus
    # that gallery's exact AP (the distractors of g ranked against the positives)
    def err(i, g):
        pred, exact = [], []
        for q, (d, ps, sh) in enumerate(zip(dist, pos_scores, share_of)):
            inside = np.isin(sh, g)
            n = int(inside.sum())
            pred.append(_plugin_ap(cols[offsets[q]:offsets[q + 1], i], n, k))
            exact.append(_brute_ap([j + int((d[inside] >= x).sum()) for j, x in enumerate(ps, 1)], k))
        return np.mean(pred) - np.mean(exact)
    pairs = []
    for i in range(4):
        own = err(i, [i])
        for j in (2, 3, 4):
            for rest in itertools.combinations([o for o in range(4) if o != i], j - 1):
                pairs.append((np.log(j), err(i, [i, *rest]) - own))
    e11 = np.mean([_plugin_ap(x[offsets[q]:offsets[q + 1]], s, k) for q, s in enumerate(sizes)]) - np.mean(
        [_brute_ap([j + int((d >= p).sum()) for j, p in enumerate(ps, 1)], k) for d, ps in zip(dist, pos_scores)])
    return est, bt, sorted(pairs), e11


def test_increments_and_own_error_match_brute_force_rankings_of_explicit_galleries():
    from rscale.core.backtest import increment_errors, own_error
    est, bt, want, e11 = _explicit_backtest(np.random.default_rng(21))
    u, d = increment_errors(est, bt, "AP", 6, "plugin")
    assert len(u) == 28                                       # 4 shares x (3 pairs + 3 triples + the whole)
    got = sorted(zip(u, d))
    np.testing.assert_allclose(np.array(got), np.array(want), atol=1e-12)
    assert any(abs(v) > 0.01 for _, v in want)                # the check has something to see
    assert own_error(est, bt.counts, "AP", 6, "plugin") == pytest.approx(e11, abs=1e-12)


def test_carry_level_is_statsmodels_ols_prediction_interval_through_the_origin_plus_the_own_error():
    import statsmodels.api as sm
    from rscale.core.backtest import carry_level
    rng = np.random.default_rng(5)
    u = np.log(np.r_[np.full(12, 2.0), np.full(12, 3.0), np.full(4, 4.0)])
    d = 0.004 * u + rng.normal(0, 0.002, u.size)
    for factor in (5.0, 20.0, 100.0):
        fit = sm.OLS(d, u[:, None]).fit()
        frame = fit.get_prediction(np.array([[np.log(factor)]])).summary_frame(alpha=0.05)
        point, lo, hi = carry_level(-0.003, u, d, factor)
        assert point == pytest.approx(-0.003 + float(frame["mean"].iloc[0]), abs=1e-12)
        assert lo == pytest.approx(-0.003 + float(frame["obs_ci_lower"].iloc[0]), abs=1e-9)
        assert hi == pytest.approx(-0.003 + float(frame["obs_ci_upper"].iloc[0]), abs=1e-9)


def test_share_counts_are_the_shares_own_counts_and_partition_the_sample():
    from rscale.core.backtest import disjoint_shares, share_counts
    spec = SimSpec(name="t", family="gaussian", n_queries=30, hardness=HardnessLaw("loguniform", 1.0, 1e-9, 1e-2))
    ss = sim.sample(sim.simulate(spec, seed=2), 40_000, k=400, seed=2)
    counts, sizes = share_counts(ss, [4, 4, 4, 4])
    shares = disjoint_shares(ss, 4, 4)
    np.testing.assert_array_equal(counts, np.stack([s.pos_counts for s in shares], axis=1))
    np.testing.assert_array_equal(sizes, np.stack([s.n_sampled for s in shares], axis=1))
    np.testing.assert_array_equal(counts.sum(axis=1), ss.pos_counts)    # four of four quarters: the sample
    np.testing.assert_array_equal(sizes.sum(axis=1), ss.n_sampled)


def _handicapped_back_test(rng, slope, handicap, sd, factor):
    """A back-test whose shares carry a level of their own: every quarter predicts its own gallery
    off by the user's level plus a handicap, and each union of j quarters off by that plus
    slope * log j; the user's error at f is own + slope * log f. Returns (old rule's band, level
    rule's band, the user's error at f)."""
    from rscale.core.backtest import carry, carry_level
    own = rng.normal(-0.004, 0.002)
    level = own + handicap + rng.normal(0, sd, 4)                       # each quarter's own level
    u, d, fs, es = [], [], [], []
    for i in range(4):
        for j, n in ((2, 3), (3, 3), (4, 1)):
            noise = rng.normal(0, sd, n)
            u += [np.log(j)] * n
            d += list(slope * np.log(j) + noise)
            if j == 4:
                fs.append(4.0)
                es.append(level[i] + slope * np.log(4) + noise[0])
    halves = own + handicap / 2 + slope * np.log(2) + rng.normal(0, sd, 16)   # the halves: half the handicap
    new = own + slope * np.log(factor) + rng.normal(0, sd)
    old = carry(np.r_[np.full(16, 2.0), fs], np.r_[halves, es], factor)
    return old, carry_level(own, u, d, factor), new


def test_level_band_covers_a_simulated_error_as_often_as_its_level_where_the_old_band_does_not():
    rng = np.random.default_rng(13)
    for factor in (20.0, 100.0):
        hit_old, hit_new = [], []
        for _ in range(1500):
            old, lvl, new = _handicapped_back_test(rng, slope=0.004, handicap=0.012, sd=0.002, factor=factor)
            hit_old.append(old[1] <= new <= old[2])
            hit_new.append(lvl[1] <= new <= lvl[2])
        assert abs(np.mean(hit_new) - 0.95) < 0.02                      # brute force: its level holds
        assert np.mean(hit_old) < 0.5                                   # the handicap misleads the old carry
