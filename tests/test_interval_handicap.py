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
    halves = ([0, 1], [2, 3])                                           # one pair of halves: unions of quarters
    reps = np.clip(np.stack([(c4[:, h].sum(axis=1) + 0.5) / n4[q_of][:, h].sum(axis=1) for h in halves], axis=1)
                   * rng.uniform(0.7, 1.3, (counts.size, 2)), 0, 1)
    est = HardnessEstimate(method="count", x=x, offsets=offsets, rule=np.array(["count"] * x.size),
                           n_sampled=np.asarray(sizes), replicates=reps)
    bt = Backtest(counts=counts, columns=cols, column_factors=np.array([4, 4, 4, 4]), column_counts=c4, column_sizes=n4,
                  replicate_counts=np.stack([c4[:, h].sum(axis=1) for h in halves], axis=1),
                  replicate_sizes=np.stack([n4[:, h].sum(axis=1) for h in halves], axis=1))
    # brute force: share i predicting the gallery of union g (its sizes, plug-in ranks j + n x) minus
    # that gallery's exact AP (the distractors of g ranked against the positives)
    def err(i, g, hardness=cols):
        pred, exact = [], []
        for q, (d, ps, sh) in enumerate(zip(dist, pos_scores, share_of)):
            inside = np.isin(sh, g)
            n = int(inside.sum())
            pred.append(_plugin_ap(hardness[offsets[q]:offsets[q + 1], i], n, k))
            exact.append(_brute_ap([j + int((d[inside] >= x).sum()) for j, x in enumerate(ps, 1)], k))
        return np.mean(pred) - np.mean(exact)
    pairs = [(np.log(2), np.log(2), err(h, [0, 1, 2, 3], reps) - err(h, halves[h], reps)) for h in range(2)]
    for i in range(4):
        own = err(i, [i])
        for j in (2, 3, 4):
            for rest in itertools.combinations([o for o in range(4) if o != i], j - 1):
                pairs.append((np.log(j), np.log(4), err(i, [i, *rest]) - own))
    e11 = np.mean([_plugin_ap(x[offsets[q]:offsets[q + 1]], s, k) for q, s in enumerate(sizes)]) - np.mean(
        [_brute_ap([j + int((d >= p).sum()) for j, p in enumerate(ps, 1)], k) for d, ps in zip(dist, pos_scores)])
    return est, bt, sorted(pairs), e11


def test_increments_and_own_error_match_brute_force_rankings_of_explicit_galleries():
    from rscale.core.backtest import increment_errors, own_error
    est, bt, want, e11 = _explicit_backtest(np.random.default_rng(21))
    u, w, d = increment_errors(est, bt, "AP", 6, "plugin")
    assert len(u) == 2 + 28                                   # 2 halves; 4 quarters x (3 pairs + 3 triples + the whole)
    got = sorted(zip(u, w, d))
    np.testing.assert_allclose(np.array(got), np.array(want), atol=1e-12)
    assert any(abs(v) > 0.01 for _, _, v in want)             # the check has something to see
    assert own_error(est, bt.counts, "AP", 6, "plugin") == pytest.approx(e11, abs=1e-12)


def test_carry_level_is_statsmodels_ols_prediction_interval_through_the_origin_plus_the_own_error():
    import statsmodels.api as sm
    from rscale.core.backtest import carry_level
    rng = np.random.default_rng(5)
    u = np.log(np.r_[np.full(16, 2.0), np.full(12, 2.0), np.full(12, 3.0), np.full(4, 4.0)])
    w = np.log(np.r_[np.full(16, 2.0), np.full(28, 4.0)])          # 16 halves, then the quarters' unions
    d = 0.004 * u + 0.001 * u * u + 0.002 * u * w + rng.normal(0, 0.002, u.size)
    x = np.c_[u, u * u, u * w]
    fit = sm.OLS(d, x).fit()
    for factor in (5.0, 20.0, 100.0):
        big_u = np.log(factor)
        frame = fit.get_prediction(np.array([[big_u, big_u * big_u, 0.0]])).summary_frame(alpha=0.05)
        point, lo, hi = carry_level(-0.003, u, w, d, factor)
        assert point == pytest.approx(-0.003 + float(frame["mean"].iloc[0]), abs=1e-12)
        assert lo == pytest.approx(-0.003 + float(frame["obs_ci_lower"].iloc[0]), abs=1e-9)
        assert hi == pytest.approx(-0.003 + float(frame["obs_ci_upper"].iloc[0]), abs=1e-9)
    # one share size: no u w term (it would be u times a constant); one factor: no u^2 either
    q = u > np.log(2.5)
    fit = sm.OLS(d[16:], x[16:, :2]).fit()
    frame = fit.get_prediction(np.array([[np.log(20.0), np.log(20.0) ** 2]])).summary_frame(alpha=0.05)
    assert carry_level(0.0, u[16:], w[16:], d[16:], 20.0)[2] == pytest.approx(float(frame["obs_ci_upper"].iloc[0]))
    fit = sm.OLS(d[:16], u[:16, None]).fit()
    frame = fit.get_prediction(np.array([[np.log(20.0)]])).summary_frame(alpha=0.05)
    assert carry_level(0.0, u[:16], w[:16], d[:16], 20.0)[1] == pytest.approx(float(frame["obs_ci_lower"].iloc[0]))
    assert q.sum() == 16


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
    # the halves: each pair partitions the sample, and the counts are each half's own
    from rscale.core.replicates import replicate_counts, replicate_halves
    rc, rn = replicate_counts(ss, splits=3)
    assert rc.shape == (ss.n_positives, 6) and rn.shape == (ss.n_queries, 6)
    np.testing.assert_array_equal(rc[:, 0::2] + rc[:, 1::2], np.repeat(ss.pos_counts[:, None], 3, axis=1))
    np.testing.assert_array_equal(rn[:, 0::2] + rn[:, 1::2], np.repeat(ss.n_sampled[:, None], 3, axis=1))
    np.testing.assert_array_equal(rc[:, 3], replicate_halves(ss, 1, splits=3)[1].pos_counts)


def _handicapped_back_test(rng, a, b, c, handicap, sd, factor):
    """A back-test whose shares carry a level of their own and a rate that depends on their excess
    count: a 1/m share predicting its own gallery is off by the user's level plus handicap w
    (w = log m), and a union of j shares (u = log j) by that plus a u + b u^2 + c u w; the user's
    own error at f is own + a U + b U^2. Returns (the old slope rule's band, the level rule's band,
    the user's error at f)."""
    from rscale.core.backtest import carry, carry_level
    own = rng.normal(-0.004, 0.002)
    us, ws, ds, fs, es = [], [], [], [], []
    for m, unions in ((2, [(2, 1)] * 16), (4, [(2, 3), (3, 3), (4, 1)] * 4)):
        wm = np.log(m)
        for j, n in unions:
            uj = np.log(j)
            inc = a * uj + b * uj * uj + c * uj * wm + rng.normal(0, sd, n)
            us += [uj] * n
            ws += [wm] * n
            ds += list(inc)
            if j == m:                                             # the union is the sample: the old back-test
                fs.append(float(m))
                es.append(own + handicap * wm + rng.normal(0, sd) + inc[0])
    big_u = np.log(factor)
    new = own + a * big_u + b * big_u * big_u + rng.normal(0, sd)
    return carry(fs, es, factor), carry_level(own, us, ws, ds, factor), new


def test_level_band_covers_a_simulated_error_as_often_as_its_level_where_the_old_band_does_not():
    rng = np.random.default_rng(13)
    for factor in (20.0, 100.0):
        hit_old, hit_new, points = [], [], []
        for _ in range(1000):
            old, lvl, new = _handicapped_back_test(rng, a=0.002, b=0.001, c=0.002, handicap=0.01, sd=0.002,
                                                   factor=factor)
            hit_old.append(old[1] <= new <= old[2])
            hit_new.append(lvl[1] <= new <= lvl[2])
            points.append(lvl[0])
        assert abs(np.mean(hit_new) - 0.95) < 0.02                      # brute force: its level holds
        assert np.mean(hit_old) < 0.3                                   # the handicap misleads the slope carry
        big_u = np.log(factor)
        assert np.mean(points) == pytest.approx(-0.004 + 0.002 * big_u + 0.001 * big_u ** 2, abs=2e-3)
