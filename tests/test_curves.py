"""The curve baselines (rscale.core.estimators.curves) on short top lists: their nested sub-samples
read counts alone, so a sample whose top list is the whole sample (K = S, the real set at 1%)
still gives every level; the strict default sub-sample says which query ran out, not 'K=0'."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from rscale import sim
from rscale.core.estimators.curves import CURVE_METHODS, estimate_curve, nested_hardness
from rscale.core.subsample import subsample
from rscale.errors import InvalidArgumentError
from rscale.sim.presets import PRESETS

REALSET_1PCT = Path(__file__).resolve().parents[1] / "benchmarks/realset/data/draw-01pct-0.sample_stats.parquet"


@pytest.fixture(scope="module")
def short_list():
    """500 queries, S = K = 200: every sampled distractor is in the top list (as on realset at 1%)."""
    return sim.sample(sim.simulate(replace(PRESETS["sim_gaussian"], n_queries=500), seed=6), 200, k=200, seed=6)


def test_every_curve_runs_on_a_top_list_as_long_as_the_sample(short_list):
    ss = short_list
    with pytest.raises(InvalidArgumentError):          # what failed: a chain of default sub-samples
        cur = ss
        for i in range(1, 5):
            cur = subsample(cur, 0.5, seed=i)
    for method in CURVE_METHODS:
        c = estimate_curve(ss, method)
        assert c.values.shape == (1 if method == "naive" else 5, ss.n_queries)
        assert 0.0 <= c.value(1e5) <= 1.0
    means = estimate_curve(ss, "loguniform").values.mean(axis=1)
    assert np.all(np.diff(means) > 0)                 # fewer distractors, higher mAP, level by level


def test_the_count_only_sub_samples_are_exact_nested_thinnings(short_list):
    ss = prev = short_list
    for i in range(1, 5):
        cur = subsample(prev, 0.5, seed=10 + i, k=0)
        assert cur.k == 0
        assert np.all(cur.pos_counts <= prev.pos_counts) and np.all(cur.n_sampled <= prev.n_sampled)
        assert np.all(cur.pos_counts <= cur.n_sampled[cur.positive_query()])
        # a Binomial(S_prev, 1/2) size per query: the mean within 5 sd of half the previous one
        sd = np.sqrt(prev.n_sampled.sum() / 4)
        assert abs(cur.n_sampled.sum() - prev.n_sampled.sum() / 2) < 5 * sd
        sd_c = np.sqrt(prev.pos_counts.sum() / 4) + 1
        assert abs(cur.pos_counts.sum() - prev.pos_counts.sum() / 2) < 5 * sd_c
        prev = cur
    fractions = nested_hardness(ss, 4, seed=0)
    assert len(fractions) == 5 and all(np.all((f >= 0) & (f <= 1)) for f in fractions)


def test_a_default_sub_sample_that_runs_out_names_the_query_and_the_fix():
    one = sim.sample(sim.simulate(replace(PRESETS["sim_gaussian"], n_queries=3), seed=1), 4, k=1, seed=1)
    with pytest.raises(InvalidArgumentError) as info:
        for seed in range(40):                        # K = 1: some seed keeps no top score of some query
            subsample(one, 0.5, seed=seed)
    msg = str(info.value)
    assert "keeps 0 of its 1 top scores" in msg and "needs 1 per query" in msg and "K=0" not in msg
    assert "longer top list (K) or a larger sample" in msg


def test_every_curve_runs_on_the_real_set_at_one_percent():
    from rscale.store.sample_stats_file import read_sample_stats
    ss = read_sample_stats(REALSET_1PCT)
    assert ss.k == int(ss.n_sampled.max())            # the case: the top list is the whole sample
    for method in CURVE_METHODS:
        assert 0.0 < estimate_curve(ss, method).value(1e5) < 1.0
