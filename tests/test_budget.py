"""The sufficient-budget check (rscale.core.budget) reads the stored half-sample replicates: the
S prediction against the average of the halves' predictions, no estimator fit."""

from dataclasses import replace

import numpy as np
import pytest

from rscale import api, sim
from rscale.core import law
from rscale.core.budget import BUDGET_SIZES, NO_REPLICATES, budget_check
from rscale.core.estimators.methods import estimate
from rscale.core.replicates import hardness_replicates
from rscale.errors import InvalidArgumentError
from rscale.sim.presets import PRESETS


@pytest.fixture(scope="module")
def est_ss():
    bench = sim.simulate(replace(PRESETS["sim_gaussian"], n_queries=60), seed=4)
    ss = sim.sample(bench, 100_000, k=300, seed=4)
    est = estimate(ss, "evt")
    return replace(est, replicates=hardness_replicates(ss, method="evt", params=est.params, splits=4)), ss


def _metric(x, offsets, n):
    """Per-query mAP@1000 of one hardness column, one column at a time (not the replicate stack)."""
    return law.per_query(law.Hardness.from_flat(np.asarray(x, dtype=np.float64), offsets), "AP", n, 1000, "plugin")


def test_the_last_step_is_the_estimate_minus_the_average_of_its_halves(est_ss):
    est, _ss = est_ss
    got = budget_check(est)
    assert got["N"] == list(BUDGET_SIZES) and got["halves"] == 8 and got["S"] == 100_000
    for i, n in enumerate(BUDGET_SIZES):
        full = _metric(est.x, est.offsets, n)
        halves = np.mean([_metric(est.replicates[:, r], est.offsets, n) for r in range(8)], axis=0)
        step = full.mean() - halves.mean()
        noise = 1.96 * full.std(ddof=1) / np.sqrt(full.size)
        assert got["predictions"][i] == pytest.approx([halves.mean(), full.mean()], abs=1e-5)
        assert got["last_step"][i] == pytest.approx(step, abs=1e-5)
        assert got["noise"][i] == pytest.approx(noise, abs=1e-5)
        assert got["sufficient"][i] == (abs(step) <= noise)
        lo, hi = got["last_step_ci"][i]
        assert lo <= got["last_step"][i] <= hi


def test_the_verdict_follows_a_known_drift(est_ss):
    est, _ss = est_ss
    # halves that estimate exactly what the sample does: the last doubling moves nothing
    still = budget_check(replace(est, replicates=np.repeat(est.x[:, None], 8, axis=1)))
    assert all(still["sufficient"]) and still["last_step"] == [0.0] * 6 and still["supported_up_to"] == 1e10
    # halves 100x easier than the full sample (a drift the doubling still makes): the step has the
    # drift's sign (the full sample predicts lower) and exceeds the query noise at every N
    drift = budget_check(replace(est, replicates=np.repeat(est.x[:, None] / 100.0, 8, axis=1)))
    assert not any(drift["sufficient"]) and drift["supported_up_to"] is None
    assert all(-step > noise > 0 for step, noise in zip(drift["last_step"], drift["noise"]))


def test_without_replicates_there_is_no_check_and_registration_says_why(est_ss, tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    import rscale.core.estimators.methods as methods
    from rscale.store.hardness_file import hardness_table
    from rscale.store.sample_stats_file import write_sample_stats

    est, ss = est_ss
    with pytest.raises(InvalidArgumentError, match="no half-sample replicates"):
        budget_check(replace(est, replicates=None))
    table = hardness_table(replace(est, replicates=None), ss)       # a version-1 file, with its sample
    md = dict(table.schema.metadata)
    md[b"rscale.schema_version"] = b"1"
    pq.write_table(table.replace_schema_metadata(md), tmp_path / "v1.parquet")
    write_sample_stats(ss, tmp_path / "s.parquet")
    calls = []
    real = methods.estimate
    monkeypatch.setattr(methods, "estimate", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    api.register(tmp_path / "v1.parquet", tmp_path / "s.parquet", registry=tmp_path / "reg", backbone="old")
    assert calls == []                                               # no fall-back to fits
    assert api.show("old", tmp_path / "reg").summary["budget"] == {"error": NO_REPLICATES}
    warnings = api.query("mAP@1000 at N=1e9 for old", tmp_path / "reg")["warnings"]
    assert any("no replicates" in w for w in warnings) and not any("does not support" in w for w in warnings)
