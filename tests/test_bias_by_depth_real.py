"""benchmarks/bias_by_depth_real.py: the depth bands of a real set's positives, from its committed
truth counts, and what each band carries."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmark_modules import load_benchmark


@pytest.fixture(scope="module")
def bd():
    return load_benchmark("bias_by_depth_real.py", "bias_by_depth_real")


def _truth(bd, name):
    from rscale.store.sample_stats_file import read_sample_stats
    data = bd.HERE / name / "data"
    return read_sample_stats(data / "truth.sample_stats.parquet"), json.loads((data / "manifest.json").read_text())


def test_an_estimate_equal_to_the_realised_hardness_carries_nothing(bd, monkeypatch):
    """With the estimator replaced by x = K / N (every positive's full-pool count over the pool),
    no band moves the prediction and the error against the law at K / N is 0: the bands measure
    the estimate's departure from the realised hardness and nothing else."""
    from rscale.core.estimators import methods
    from rscale.core.estimators.base import HardnessEstimate
    truth, man = _truth(bd, "realset2")

    def exact(ss, method):
        return HardnessEstimate(method="exact", x=truth.pos_counts / man["pool"], offsets=ss.pos_offsets,
                                rule=np.full(ss.n_positives, "count"), n_sampled=ss.n_sampled.copy(), params={})

    monkeypatch.setattr(methods, "estimate", exact)
    r = bd.real_cell("realset2", 0.05, 0, "exact", "expected")
    assert r["error_law"] == 0.0 and all(b["carries"] == 0.0 for b in r["bands"])
    assert all(b["median_log10_ratio"] == 0.0 for b in r["bands"] if b["positives"] > b["zero_count"])


def test_the_bands_partition_the_positives_and_put_every_zero_count_in_the_first(bd):
    truth, man = _truth(bd, "realset2")
    r = bd.real_cell("realset2", 0.05, 0, "count", "plugin")
    assert sum(b["positives"] for b in r["bands"]) == truth.n_positives == man["positives"]
    zero = int(np.sum(truth.pos_counts == 0))
    assert r["bands"][0]["zero_count"] == zero > 0 and all(b["zero_count"] == 0 for b in r["bands"][1:])
    assert r["n"] == man["pool"] and r["s"] < man["pool"]


def test_a_held_out_set_is_refused(bd):
    with pytest.raises(SystemExit, match="not a seen real set"):
        bd.main(["--sets", "realset8"])



def test_the_gap_bins_hold_the_uncounted_positives_and_their_counts(bd):
    """The second table: every positive the draw counts nothing above falls in one gap bin, and a
    bin's figures are its positives' own (recomputed here for one bin)."""
    from rscale.store.sample_stats_file import read_sample_stats
    truth, man = _truth(bd, "realset2")
    ss = read_sample_stats(bd.HERE / "realset2" / "data" / "draw-05pct-0.sample_stats.parquet")
    x_hat = np.full(ss.n_positives, 1.0 / man["pool"])                # the model: one expected count each
    bins = bd.by_gap(ss, x_hat, truth.pos_counts, float(man["pool"]))
    assert sum(b["positives"] for b in bins) == int(np.sum(ss.pos_counts == 0))
    assert all(b["mean_model_k"] == pytest.approx(1.0) and b["model_k_zero_share"] == pytest.approx(np.exp(-1.0))
               for b in bins)
    pq = ss.positive_query()
    top = ss.top_scores[pq, 0]
    g = (ss.pos_scores - top) / (top - ss.top_scores[pq, 9])
    first = (ss.pos_counts == 0) & (g < 0.5)
    assert bins[0]["gap"][1] == 0.5 and bins[0]["positives"] == int(first.sum())
    assert bins[0]["mean_k"] == pytest.approx(float(truth.pos_counts[first].mean()))


def test_the_halves_table_counts_each_uncounted_positive_of_each_half_once(bd):
    """The third table: the positives one half counts nothing above, in both directions, each in
    one bin; a model of zero hardness would expect no count and a K = 0 share of 1."""
    from rscale.core.replicates import replicate_halves
    from rscale.store.sample_stats_file import read_sample_stats
    ss = read_sample_stats(bd.HERE / "realset2" / "data" / "draw-05pct-0.sample_stats.parquet")
    bins = bd.halves_by_gap(ss, "count")                     # count: x = c / S, 0 where the half counts nothing
    a, b = replicate_halves(ss, 0, splits=8)
    assert sum(x["positives"] for x in bins) == int(np.sum(a.pos_counts == 0) + np.sum(b.pos_counts == 0))
    assert all(x["mean_model_k"] == 0.0 and x["model_k_zero_share"] == 1.0 for x in bins)
    assert any(x["mean_k"] > 0 for x in bins)                # the other half does count some of them


def test_the_floor_probe_keeps_the_mean_and_moves_only_the_far_positives():
    """benchmarks/edge_floor_probe.py: the floor adds rho to the far positives' mean over the draws
    whatever its share pi, in the same draws for every positive of a query, and nowhere else."""
    fp = load_benchmark("edge_floor_probe.py", "edge_floor_probe")
    rng = np.random.default_rng(5)
    draws = rng.uniform(0, 1e-4, (40, 16))
    pq = np.repeat(np.arange(10), 4)
    far = rng.random(40) < 0.5
    for share in (1.0, 0.25, 1 / 16):
        out = fp.with_floor(draws, far, pq, 10, 2e-5, share)
        np.testing.assert_allclose(out.mean(axis=1) - draws.mean(axis=1), np.where(far, 2e-5, 0.0), atol=1e-15)
        moved = out != draws
        for q in range(10):
            rows = moved[(pq == q) & far]
            if rows.size:                                       # a query with a far positive
                assert (rows == rows[0]).all() and rows[0].sum() == max(round(share * 16), 1)
        assert moved[far].any() and not moved[~far].any()
    with pytest.raises(SystemExit, match="not a seen real set"):
        fp.main(["--sets", "realset8"])


def test_an_estimator_parameter_reaches_the_fit_and_a_bad_one_is_one_line(bd, monkeypatch):
    """-p name=value is parsed as `rscale estimate -p` parses it and handed to every fit."""
    from rscale.core.estimators import methods
    seen = []
    real = methods.estimate
    monkeypatch.setattr(methods, "estimate", lambda ss, m, **kw: seen.append(kw) or real(ss, m, **kw))
    bd.main(["--sets", "realset2", "--fractions", "0.05", "--method", "evt-eb", "-p", "xi_max=0", "-p", "cluster=off"])
    assert seen == [{"xi_max": 0, "cluster": "off"}]
    with pytest.raises(SystemExit, match="^-p: .*xi_max"):
        bd.main(["--sets", "realset2", "-p", "xi_max=high"])
