"""rscale.core.edge_models: the second model of the hardness past the sample's edge, from two
disjoint halves (hand-checked sums, a simulator whose tail model is known to be off, the estimate
that stores it)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from rscale.core import edge_models as em


def test_band_ratios_add_one_count_of_prior_and_an_empty_band_is_one():
    depth = np.array([2e-3, 5e-3, 0.05, 0.5, 0.9, 5e-4, 2.0])        # the last two outside every band
    obs = np.array([1.0, 0.0, 3.0, 2.0, 4.0, 9.0, 9.0])
    mu = np.array([0.25, 0.25, 1.0, 1.0, 2.0, 1.0, 1.0])
    assert em.band_ratios(obs, mu, depth).tolist() == [2.0 / 1.5, 4.0 / 2.0, 7.0 / 4.0]
    assert em.band_ratios(obs, mu, depth, prior=0.0).tolist() == [2.0, 3.0, 2.0]
    assert em.band_ratios(obs[:2], mu[:2], depth[:2]).tolist()[1:] == [1.0, 1.0]


def test_halves_pool_both_directions_over_the_positives_each_half_counts_nothing_above():
    # three positives; half A counts nothing above the first two, half B nothing above the last two
    x_a, c_a, s_a = np.array([2e-3, 0.02, 0.1]), np.array([0, 0, 3]), np.array([100.0, 100.0, 100.0])
    x_b, c_b, s_b = np.array([5e-3, 0.3, 4e-3]), np.array([1, 0, 0]), np.array([100.0, 100.0, 100.0])
    r = em.halves_band_ratios((x_a, c_a, s_a), (x_b, c_b, s_b))
    # A -> B: depths 0.2 (obs 1, mu 0.2) and 2.0 (outside); B -> A: depths 30 (outside) and 0.4 (obs 3, mu 0.4)
    # so only band [0.1, 1) has data: (1 + 3 + 1) / (0.2 + 0.4 + 1)
    assert r.tolist() == [1.0, 1.0, pytest.approx(5.0 / 1.6)]


def test_the_factor_touches_only_uncounted_positives_inside_the_bands():
    x = np.array([2e-5, 2e-4, 2e-3, 2e-2, 2e-3])
    counts = np.array([0, 0, 0, 0, 3])
    f = em.edge_factor(x, counts, np.full(5, 100.0), [2.0, 3.0, 4.0])
    assert f.tolist() == [2.0, 3.0, 4.0, 1.0, 1.0]     # depths 2e-3, 2e-2, 0.2, 2 (past the bands); counted
    f = em.edge_factor(x, counts, np.full(5, 10.0), [2.0, 3.0, 4.0])
    assert f.tolist() == [1.0, 2.0, 3.0, 4.0, 1.0]     # depths 2e-4 (below the bands), 2e-3, 2e-2, 0.2; counted
    draws = np.array([[0.3, 0.6], [0.1, 0.2]])
    np.testing.assert_allclose(em.corrected(draws, np.array([2.0, 3.0])), [[0.6, 1.0], [0.3, 0.6]], rtol=1e-15)
    assert em.corrected(draws, np.array([2.0, 3.0]))[0, 1] == 1.0          # capped: 1.2 is no hardness


def test_on_the_simulator_the_halves_see_a_tail_model_that_is_too_light():
    """A sample whose positives past the edge are twice as hard as a model says: the halves'
    ratio, from counts alone, comes out near 2 where there are enough counts."""
    rng = np.random.default_rng(3)
    p, s = 40_000, 2_000.0
    model = 10 ** rng.uniform(-5.5, -3.2, p)           # the model's x: depths 0.003-0.63 per half of 1000
    truth = 2.0 * model
    c_a, c_b = rng.binomial(1000, truth), rng.binomial(1000, truth)
    half = np.full(p, s / 2)
    r = em.halves_band_ratios((model, c_a, half), (model, c_b, half))
    assert r[0] == pytest.approx(2.0, rel=0.3) and r[1] == pytest.approx(2.0, rel=0.1)
    assert r[2] == pytest.approx(2.0, rel=0.05)
    right = em.halves_band_ratios((truth, c_a, half), (truth, c_b, half))     # a right model: ratios near 1
    assert np.all(np.abs(right - 1.0) < 0.15)


def test_estimate_stores_the_factor_from_the_first_splits_halves(tmp_path):
    """rscale estimate (evt-eb): the factor is 1 on every counted positive and the band ratios
    recorded with it are what the first split's halves measure; evt (no posterior draws) has none."""
    from rscale import api, sim
    from rscale.core.estimators.methods import estimate, stored_params
    from rscale.core.replicates import SEED, replicate_halves
    from rscale.sim.presets import PRESETS
    from rscale.store.hardness_file import read_hardness
    from rscale.store.sample_stats_file import write_sample_stats
    ss = sim.sample(sim.simulate(replace(PRESETS["sim_bounded"], n_queries=60), seed=2), 40_000, k=400, seed=2)
    write_sample_stats(ss, tmp_path / "s.parquet")
    summary = api.estimate(tmp_path / "s.parquet", "evt-eb", out=tmp_path / "h.parquet", replicates=4,
                           backtest=False)
    est, info = read_hardness(tmp_path / "h.parquet")
    assert info["schema_version"] == 5 and est.edge_factor is not None
    assert np.all(est.edge_factor[ss.pos_counts > 0] == 1.0)
    a, b = replicate_halves(ss, 0, splits=2, seed=SEED)
    kw = stored_params("evt-eb", est.params)
    sizes = np.diff(est.offsets)
    ra = em.halves_band_ratios(*((estimate(h, "evt-eb", **kw).draws.mean(axis=1), h.pos_counts,
                                  np.repeat(h.n_sampled, sizes)) for h in (a, b)))
    np.testing.assert_allclose(info["edge"]["ratios"], ra, rtol=1e-12)
    assert summary["edge_band_ratios"] == [round(r, 4) for r in ra]
    want = em.edge_factor(est.draws.mean(axis=1), ss.pos_counts, np.repeat(ss.n_sampled, sizes), ra)
    np.testing.assert_allclose(est.edge_factor, want, rtol=1e-12)
    api.estimate(tmp_path / "s.parquet", "evt", out=tmp_path / "e.parquet", replicates=4, backtest=False)
    assert read_hardness(tmp_path / "e.parquet")[0].edge_factor is None


def test_the_budget_check_compares_the_halves_with_the_model_they_are():
    """The sufficient-budget check's S side is model U (the halves are the tail model as fitted),
    so an edge factor does not move its verdict; the query's point does move."""
    from rscale.core.budget import budget_check
    from rscale.core.estimators.base import HardnessEstimate
    rng = np.random.default_rng(0)
    off = np.arange(0, 601, 3)
    x = 10 ** rng.uniform(-7, -4, 600)
    draws = x[:, None] * rng.uniform(0.5, 1.5, (600, 4))
    reps = x[:, None] * rng.uniform(0.7, 1.3, (600, 4))
    est = HardnessEstimate(method="evt-eb", x=x, offsets=off, rule=np.array(["tail"] * 600),
                           n_sampled=np.full(200, 10_000), draws=draws, replicates=reps)
    with_edge = replace(est, edge_factor=np.where(x * 1e4 >= 1e-3, 5.0, 1.0))
    sizes = (1e6, 1e8)
    assert budget_check(with_edge, sizes=sizes) == budget_check(est, sizes=sizes)
    from rscale.core.prediction import predict
    assert predict(with_edge, "AP", 1e6, 1000, "expected") < predict(est, "AP", 1e6, 1000, "expected") - 1e-3


def test_a_paired_difference_pairs_the_models_and_widens_by_half_their_differences_distance():
    """A - B with both sides carrying two edge models: the value is A's average minus B's, and
    each end moves out by |(C - U)_A - (C - U)_B| / 2 from the interval of the U models alone."""
    from rscale.core.estimators.base import HardnessEstimate
    from rscale.core.interval import difference_intervals
    from rscale.core.prediction import edge_models_per_query
    rng = np.random.default_rng(1)
    off = np.arange(0, 601, 3)

    def one(scale, factor):
        x = scale * 10 ** rng.uniform(-7, -4, 600)
        return HardnessEstimate(method="evt-eb", x=x, offsets=off, rule=np.array(["tail"] * 600),
                                n_sampled=np.full(200, 10_000), draws=x[:, None] * rng.uniform(0.5, 1.5, (600, 4)),
                                replicates=x[:, None] * rng.uniform(0.7, 1.3, (600, 4)),
                                edge_factor=np.where(x * 1e4 >= 1e-3, factor, 1.0))
    a, b = one(1.0, 4.0), one(2.0, 1.5)
    cells = [("AP", 1000, 1e6)]
    [(pa, pb, lo, hi, _, _)] = difference_intervals(a, b, cells, mode="expected")
    [(ua, ub, lo_u, hi_u, _, _)] = difference_intervals(replace(a, edge_factor=None), replace(b, edge_factor=None),
                                                        cells, mode="expected")
    (ua_, ca), (ub_, cb) = (edge_models_per_query(e, "AP", 1e6, 1000, "expected") for e in (a, b))
    assert pa.mean() == pytest.approx((ua_.mean() + ca.mean()) / 2, abs=1e-15)
    spread = abs((ca.mean() - ua_.mean()) - (cb.mean() - ub_.mean())) / 2
    assert spread > 1e-3
    centre_shift = (pa.mean() - pb.mean()) - (ua.mean() - ub.mean())
    assert lo == pytest.approx(lo_u + centre_shift - spread, abs=1e-12)
    assert hi == pytest.approx(hi_u + centre_shift + spread, abs=1e-12)


def test_the_query_cost_benchmark_runs_on_a_table_with_two_models(capsys):
    from benchmark_modules import ROOT, load_benchmark
    bench = load_benchmark("edge_query_cost.py")
    bench.main(["--file", str(ROOT / "tests" / "golden" / "hardness_v5.parquet"), "--rounds", "1"])
    out = capsys.readouterr().out
    assert "8 positives, 3 draws" in out and "two edge models: first query" in out and "ratio" in out


def test_each_direction_uses_the_own_halfs_depth_and_the_other_halfs_size():
    """Unequal halves: A's edge positive at depth x_A S_A is checked against B's count with the
    expectation x_A S_B (and B's against A's with x_B S_A)."""
    x_a, c_a, s_a = np.array([4e-4]), np.array([0]), np.array([500.0])      # depth 0.2, expects 0.4 in B
    x_b, c_b, s_b = np.array([2e-5]), np.array([3]), np.array([1000.0])     # counted in B: not an edge of B
    r = em.halves_band_ratios((x_a, c_a, s_a), (x_b, c_b, s_b))
    assert r.tolist() == [1.0, 1.0, pytest.approx((3 + 1) / (4e-4 * 1000 + 1))]
    r = em.halves_band_ratios((x_b, c_b, s_b), (x_a, c_a, s_a))             # the same pair, named the other way
    assert r.tolist() == [1.0, 1.0, pytest.approx((3 + 1) / (4e-4 * 1000 + 1))]


def _two_model_estimate(seed=0, writeable=False):
    from rscale.core.estimators.base import HardnessEstimate
    rng = np.random.default_rng(seed)
    off = np.arange(0, 601, 3)
    x = 10 ** rng.uniform(-7, -4, 600)
    est = HardnessEstimate(method="evt-eb", x=x, offsets=off, rule=np.array(["tail"] * 600),
                           n_sampled=np.full(200, 10_000), draws=x[:, None] * rng.uniform(0.5, 1.5, (600, 4)),
                           replicates=x[:, None] * rng.uniform(0.7, 1.3, (600, 4)),
                           edge_factor=np.where(x * 1e4 >= 1e-3, 4.0, 1.0))
    if not writeable:
        for a in (est.x, est.offsets, est.draws, est.replicates, est.edge_factor):
            a.flags.writeable = False
    return est


@pytest.mark.parametrize("mode", [None, "plugin", "expected"])
def test_a_cached_two_model_estimate_answers_each_model_and_the_point_between_them(mode):
    """A read-only estimate keeps its per-query values: U and C each equal what a one-model
    estimate of U or of C answers (a repeat returns the kept array); the point is their mean
    without a band and (1 - w) U + w C with one, w the band's weight."""
    from rscale.core.prediction import edge_models_per_query, edge_weight, predict_per_query
    est = _two_model_estimate()
    one = replace(est, edge_factor=None)
    other = replace(est, edge_factor=None, draws=est.draws * est.edge_factor[:, None], x=est.x * est.edge_factor)
    for metric, k, n in (("AP", 1000, 1e6), ("RR", None, 1e7)):
        u, c = edge_models_per_query(est, metric, n, k, mode)
        np.testing.assert_array_equal(u, predict_per_query(one, metric, n, k, mode))
        np.testing.assert_allclose(c, predict_per_query(other, metric, n, k, mode), rtol=0, atol=1e-15)
        assert edge_models_per_query(est, metric, n, k, mode)[0] is u and not np.array_equal(u, c)
        np.testing.assert_array_equal(predict_per_query(est, metric, n, k, mode), (u + c) / 2)
        gap = float(c.mean() - u.mean())
        for band, w in (((-0.25 * gap, -0.25 * gap), 0.25), ((-2 * gap, -gap), 1.0), ((gap, 2 * gap), 0.0),
                        ((np.nan, np.nan), 0.5)):
            assert edge_weight(float(u.mean()), float(c.mean()), band) == pytest.approx(w, abs=1e-12)
            np.testing.assert_allclose(predict_per_query(est, metric, n, k, mode, band=band), (1 - w) * u + w * c,
                                       rtol=0, atol=1e-15)
        np.testing.assert_array_equal(predict_per_query(one, metric, n, k, mode, band=(0.1, 0.2)),
                                      predict_per_query(one, metric, n, k, mode))   # one model: no weight


@pytest.mark.parametrize("u, c, band, want", [
    (0.50, 0.48, (0.01, 0.03), 0.48),        # U optimistic by 0.02 (the band's centre), C 0.02 below: C
    (0.50, 0.48, (0.04, 0.08), 0.48),        # by more than the distance: still C, never past it
    (0.50, 0.48, (0.00, 0.01), 0.495),       # by 0.005: a quarter of the way
    (0.50, 0.48, (-0.02, 0.00), 0.50),       # U pessimistic, C below: U
    (0.50, 0.53, (-0.03, -0.01), 0.52),      # C above, U pessimistic by 0.02: two thirds of the way
    (0.50, 0.53, (0.01, 0.02), 0.50),        # C above, U optimistic: U
    (0.50, 0.48, None, 0.49),                # no band: the mean
    (0.50, 0.50, (0.01, 0.03), 0.50),        # the models agree
])
def test_the_point_is_u_corrected_by_the_bands_centre_kept_between_the_models(u, c, band, want):
    from rscale.core.prediction import edge_weight
    w = edge_weight(u, c, band)
    assert 0.0 <= w <= 1.0
    assert (1 - w) * u + w * c == pytest.approx(want, abs=1e-12)


def test_one_model_predictions_are_the_law_over_the_draws_as_before():
    from rscale.core import law
    from rscale.core.prediction import predict_per_query
    est = replace(_two_model_estimate(writeable=True), edge_factor=None)
    want = np.mean(law.per_query(law.Hardness.from_flat(est.draws.T, est.offsets), "AP", 1e6, 1000, "expected"), axis=0)
    np.testing.assert_array_equal(predict_per_query(est, "AP", 1e6, 1000), want)


def test_both_interval_kinds_move_out_by_half_the_models_distance():
    """With no back-test band: the interval of the averaged per-query values, without the models'
    term, widened by |C - U| / 2 on each side, for the benchmark and the population kind alike."""
    from rscale.core.interval import metric_intervals, predicted_intervals
    from rscale.core.prediction import edge_models_per_query, gallery_sd, replicate_per_query
    est = _two_model_estimate()
    cells = [("AP", 1000, 1e6)]
    u, c = edge_models_per_query(est, "AP", 1e6, 1000)
    spread = abs(c.mean() - u.mean()) / 2
    assert spread > 1e-3
    for kind in ("benchmark", "population"):
        [(pq, lo, hi, _)] = predicted_intervals(est, cells, ci_kind=kind, bootstrap=200)
        reps = replicate_per_query(est, "AP", 1e6, 1000)[None]
        _, lo0, hi0 = metric_intervals(pq[None], reps, ci_kind=kind, bootstrap=200,
                                       gallery_sd=np.array([gallery_sd(est, "AP", 1e6, 1000)]))
        assert lo == pytest.approx(max(0.0, lo0[0] - spread), abs=1e-12)
        assert hi == pytest.approx(min(1.0, hi0[0] + spread), abs=1e-12)


def test_a_file_with_a_factor_on_a_counted_positive_is_refused(tmp_path):
    """The factor is 1 wherever the sample counts a distractor; a file saying otherwise is refused
    naming the row, and the version-4 reader's edge metadata is empty without the column."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from benchmark_modules import ROOT
    from rscale.errors import FormatError
    from rscale.store.hardness_file import read_hardness
    t = pq.read_table(ROOT / "tests" / "golden" / "hardness_v5.parquet")
    f = t.column("edge_factor").to_numpy().copy()
    f[1] = 7.0                                       # row 1 has count 1
    bad = t.set_column(t.column_names.index("edge_factor"), "edge_factor", pa.array(f))
    pq.write_table(bad, tmp_path / "bad.parquet")
    with pytest.raises(FormatError, match="edge factor 7.0 on a positive the sample counts") as e:
        read_hardness(tmp_path / "bad.parquet")
    assert e.value.row == 1 and e.value.column == "edge_factor"
    pq.write_table(t.drop(["edge_factor"]), tmp_path / "nocol.parquet")
    est, info = read_hardness(tmp_path / "nocol.parquet")
    assert est.edge_factor is None and info["edge"] == {}


@pytest.mark.parametrize("kind", ["benchmark", "population"])
def test_the_bands_reach_and_the_distance_to_c_join_in_quadrature_past_u(kind):
    """The band is U's error (its shares are model-U estimates) and C - U the edge correction's:
    past U on each side the interval reaches sqrt(a^2 + b^2), a the band's reach and b the distance
    to C on that side; with one of them 0 on a side (no band, a band reaching away from C) it is
    the other, so no band gives the union of the two models' intervals."""
    from rscale.core.interval import metric_intervals
    rng = np.random.default_rng(5)
    point = rng.uniform(0.3, 0.5, (1, 400))
    reps = point[:, None, :] + rng.normal(0, 0.004, (1, 16, 1))
    v = point.mean()
    shift = -0.03                                      # C 0.03 below U
    u, c = v - shift / 2, v + shift / 2
    kw = dict(ci_kind=kind, bootstrap=300)
    _, lo0, hi0 = metric_intervals(point, reps, **kw)  # around v, no band, no models: v -+ the half-widths
    below, above = v - lo0[0], hi0[0] - v
    _, lo, hi = metric_intervals(point, reps, models=np.array([[u, c]]), **kw)
    assert (lo[0], hi[0]) == pytest.approx((c - below, u + above), abs=1e-12)       # no band: the union
    _, lo, hi = metric_intervals(point, reps, backtest=np.array([[0.01, 0.02]]), models=np.array([[u, c]]), **kw)
    assert lo[0] == pytest.approx(u - np.hypot(0.02, 0.03) - below, abs=1e-12)     # both reach down
    assert u - 0.03 - 0.02 < u - np.hypot(0.02, 0.03) < u - 0.03                   # between sum and max
    assert hi[0] == pytest.approx(u + above, abs=1e-12)
    _, lo, hi = metric_intervals(point, reps, backtest=np.array([[-0.02, -0.01]]), models=np.array([[u, c]]), **kw)
    assert lo[0] == pytest.approx(c - below, abs=1e-12)                             # one reach a side
    assert hi[0] == pytest.approx(u + 0.02 + above, abs=1e-12)
    _, lo, hi = metric_intervals(point, reps, backtest=np.array([[0.01, 0.05]]), models=np.array([[u, c]]), **kw)
    assert lo[0] == pytest.approx(u - np.hypot(0.05, 0.03) - below, abs=1e-12)
    _, lo1, hi1 = metric_intervals(point, reps, backtest=np.array([[0.01, 0.05]]), **kw)   # one model
    assert (lo1[0], hi1[0]) == pytest.approx((v - 0.05 - below, v + above), abs=1e-12)


@pytest.mark.parametrize("side", ["a", "b", "both"])
@pytest.mark.parametrize("band", [(0.01, 0.03), (-0.03, -0.01)])
def test_a_paired_difference_moves_its_u_models_difference_by_the_band(monkeypatch, side, band):
    """A - B with a back-test band (the difference of the two sides' model-U share errors) and edge
    models on one side or both: past U_A - U_B the band's reach and the distance to C_A - C_B
    join in quadrature; a side without edge models is its own U and C. A sign error in the models' difference (A's
    against B's) moves the wrong end."""
    from rscale.core import backtest as bt_mod
    from rscale.core.interval import difference_intervals
    from rscale.core.prediction import edge_models_per_query, predict_per_query
    a0, b0 = _two_model_estimate(0, writeable=True), _two_model_estimate(1, writeable=True)
    b0 = replace(b0, edge_factor=np.where(b0.edge_factor > 1, 2.5, 1.0))
    a = a0 if side in ("a", "both") else replace(a0, edge_factor=None)
    b = b0 if side in ("b", "both") else replace(b0, edge_factor=None)
    cells = [("AP", 1000, 1e6)]
    e_lo, e_hi = band

    def with_band(ea, eb, e=None):
        patched = (lambda *args, **kw: None) if e is None else (
            lambda *args, **kw: bt_mod.BacktestError(at_n=(e[0] + e[1]) / 2, factor=4, error=0.0, shares=4,
                                                     low=e[0], high=e[1]))
        monkeypatch.setattr(bt_mod, "difference_error", patched)
        [(pa, pb, lo, hi, _, _)] = difference_intervals(ea, eb, cells, mode="expected")
        return pa, pb, lo, hi

    def models(e):                                              # (U, C); one model: both are it
        m = edge_models_per_query(e, "AP", 1e6, 1000, "expected")
        if m is None:
            m = [predict_per_query(e, "AP", 1e6, 1000, "expected")] * 2
        return [float(m[0].mean()), float(m[1].mean())]
    (ua, ca), (ub, cb) = models(a), models(b)
    u_d, c_d = ua - ub, ca - cb
    assert abs(c_d - u_d) > 1e-3
    _, _, lo0, hi0 = with_band(a, b)                              # no band: the union of U_d's and C_d's
    half = (hi0 - lo0 - abs(c_d - u_d)) / 2
    assert half > 0
    pa, pb, lo, hi = with_band(a, b, band)
    assert pa.mean() - pb.mean() == pytest.approx((u_d + c_d) / 2, abs=1e-12)
    v_d = pa.mean() - pb.mean()
    assert lo == pytest.approx(min(u_d - np.hypot(max(e_hi, 0.0), max(u_d - c_d, 0.0)), v_d) - half, abs=1e-12)
    assert hi == pytest.approx(max(u_d + np.hypot(max(-e_lo, 0.0), max(c_d - u_d, 0.0)), v_d) + half, abs=1e-12)


def _band_error(low, high):
    from rscale.core import backtest as bt_mod
    return bt_mod.BacktestError(at_n=(low + high) / 2, factor=4, error=0.0, shares=4, low=low, high=high)


@pytest.mark.parametrize("kind", ["benchmark", "population"])
@pytest.mark.parametrize("reach", [0.25, 1.5, -1.0])
def test_every_commands_point_is_placed_by_its_cells_back_test_band(monkeypatch, kind, reach):
    """predicted_intervals (query, predict, curve, report) answers (1 - w) U + w C per query, w from
    the cell's own band (its centre ``reach`` times C - U away from U, taken as U's error), inside
    the interval, which reaches past U by the band's reach and the distance to C joined in quadrature."""
    from rscale.core import backtest as bt_mod
    from rscale.core.interval import metric_intervals, predicted_intervals
    from rscale.core.prediction import edge_models_per_query, gallery_sd, replicate_per_query
    est = _two_model_estimate()
    u, c = edge_models_per_query(est, "AP", 1e6, 1000)
    gap = float(c.mean() - u.mean())
    assert abs(gap) > 1e-3
    e = (-reach * gap - 0.002, -reach * gap + 0.002)             # U's error: U - truth; centre -reach * gap
    monkeypatch.setattr(bt_mod, "backtest_error", lambda *a, **kw: _band_error(*e))
    [(pq, lo, hi, bt)] = predicted_intervals(est, [("AP", 1000, 1e6)], ci_kind=kind, bootstrap=200, mode="expected")
    w = min(max(reach, 0.0), 1.0)
    np.testing.assert_allclose(pq, (1 - w) * u + w * c, rtol=0, atol=1e-15)
    assert bt.low == e[0] and lo <= pq.mean() <= hi
    reps = replicate_per_query(est, "AP", 1e6, 1000)[None]
    _, lo0, hi0 = metric_intervals(pq[None], reps, ci_kind=kind, bootstrap=200, backtest=np.array([e]),
                                   gallery_sd=np.array([gallery_sd(est, "AP", 1e6, 1000)]),
                                   models=np.array([[u.mean(), c.mean()]]))
    assert (lo, hi) == pytest.approx((lo0[0], hi0[0]), abs=1e-12)


def test_a_paired_differences_point_is_each_sides_own_point_and_lies_in_its_interval(monkeypatch):
    """A - B: each side's point is placed by its own band (A's says U_A is optimistic past C_A: A's
    point is C_A; B's says nothing about U_B's error being toward C_B: B's point is U_B), the
    difference is their difference, and the interval holds it even where it lies outside
    [U_A - U_B, C_A - C_B]."""
    from rscale.core import backtest as bt_mod
    from rscale.core.interval import difference_intervals
    from rscale.core.prediction import edge_models_per_query
    a, b = _two_model_estimate(0, writeable=True), _two_model_estimate(1, writeable=True)
    (ua, ca), (ub, cb) = (edge_models_per_query(e, "AP", 1e6, 1000, "expected") for e in (a, b))
    ga, gb = float(ca.mean() - ua.mean()), float(cb.mean() - ub.mean())
    bands = {id(a): (-2 * ga, -2 * ga), id(b): (gb, gb)}
    monkeypatch.setattr(bt_mod, "backtest_error", lambda est, *args, **kw: _band_error(*bands[id(est)]))
    monkeypatch.setattr(bt_mod, "difference_error", lambda *args, **kw: None)
    [(pa, pb, lo, hi, ba, bb)] = difference_intervals(a, b, [("AP", 1000, 1e6)], mode="expected")
    np.testing.assert_allclose(pa, ca, rtol=0, atol=1e-15)
    np.testing.assert_allclose(pb, ub, rtol=0, atol=1e-15)
    d = float(pa.mean() - pb.mean())
    assert lo <= d <= hi
    assert lo <= min(ua.mean() - ub.mean(), ca.mean() - cb.mean()) and hi >= max(ua.mean() - ub.mean(),
                                                                                 ca.mean() - cb.mean())


@pytest.mark.parametrize("two_models", ["a", "b"])
def test_a_paired_difference_with_one_two_model_side_places_only_that_sides_point(monkeypatch, two_models):
    """One side with two edge models and a band saying its U is off past its C, the other with
    one model (and a band of its own, which moves no point): the difference is that side's C minus
    the other's point, and the interval holds it."""
    from rscale.core import backtest as bt_mod
    from rscale.core.interval import difference_intervals
    from rscale.core.prediction import edge_models_per_query, predict_per_query
    a, b = _two_model_estimate(0, writeable=True), _two_model_estimate(1, writeable=True)
    if two_models == "a":
        b = replace(b, edge_factor=None)
    else:
        a = replace(a, edge_factor=None)
    two, one = (a, b) if two_models == "a" else (b, a)
    u, c = edge_models_per_query(two, "AP", 1e6, 1000, "expected")
    gap = float(c.mean() - u.mean())
    bands = {id(two): (-2 * gap, -2 * gap), id(one): (0.05, 0.08)}
    monkeypatch.setattr(bt_mod, "backtest_error", lambda est, *args, **kw: _band_error(*bands[id(est)]))
    monkeypatch.setattr(bt_mod, "difference_error", lambda *args, **kw: None)
    [(pa, pb, lo, hi, _, _)] = difference_intervals(a, b, [("AP", 1000, 1e6)], mode="expected")
    plain = predict_per_query(one, "AP", 1e6, 1000, "expected")
    np.testing.assert_allclose(pa if two_models == "a" else pb, c, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(pb if two_models == "a" else pa, plain)
    assert lo <= float(pa.mean() - pb.mean()) <= hi


def test_the_back_test_band_is_the_shares_error_as_prediction_minus_truth():
    """The sign the point's correction relies on: shares whose hardness is lighter than the sample's
    realised counts predict a higher AP than the sample's own, so their error, and the band carried
    from it, is positive (model U optimistic), and edge_weight moves the point toward a C below U."""
    from rscale.core.backtest import Backtest, backtest_error, factor_errors
    from rscale.core.estimators.base import HardnessEstimate
    from rscale.core.prediction import edge_weight
    rng = np.random.default_rng(2)
    off = np.arange(0, 301, 3)
    counts = rng.integers(1, 30, 300)
    s = 10_000
    x = counts / s
    est = HardnessEstimate(method="count", x=x, offsets=off, rule=np.array(["count"] * 300),
                           n_sampled=np.full(100, s), replicates=np.clip(x[:, None] * rng.uniform(0.2, 0.4, (300, 4)), 0, 1))
    bt = Backtest(counts=counts, columns=np.clip(x[:, None] * rng.uniform(0.1, 0.3, (300, 4)), 0, 1),
                  column_factors=np.array([4, 4, 4, 4]))
    assert np.all(factor_errors(est, bt, "AP", 100, "plugin", 2) > 0)   # too light -> too easy -> AP too high
    err = backtest_error(est, bt, "AP", 100, "plugin", factor=20.0)
    assert err.low > 0 and err.high > err.low
    assert edge_weight(0.5, 0.45, (err.low, err.high)) > 0.0 and edge_weight(0.5, 0.55, (err.low, err.high)) == 0.0
