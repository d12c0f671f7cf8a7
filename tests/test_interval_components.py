"""benchmarks/interval_components.py: the parts it reads off a hardness file rebuild the
benchmark interval `rscale predict` reports for it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from benchmark_modules import load_benchmark


def test_the_parts_rebuild_the_interval_predict_reports(tmp_path):
    from rscale import api, sim
    from rscale.sim.presets import PRESETS
    from rscale.store.sample_stats_file import write_sample_stats
    ic = load_benchmark("interval_components.py", "interval_components")
    ss = sim.sample(sim.simulate(replace(PRESETS["sim_bounded"], n_queries=60), seed=2), 40_000, k=400, seed=2)
    write_sample_stats(ss, tmp_path / "s.parquet")
    api.estimate(tmp_path / "s.parquet", "evt-eb", out=tmp_path / "h.parquet", replicates=4)
    parts = ic.components(tmp_path / "h.parquet", 1e6, "expected")
    [row] = api.predict(tmp_path / "h.parquet", ["mAP@1000"], sizes=(1e6,), mode="expected")
    assert (parts["lo"], parts["hi"], parts["value"]) == pytest.approx((row["ci_low"], row["ci_high"], row["value"]),
                                                                         abs=1e-12)
    assert parts["check"] < 1e-12 and parts["factor"] == pytest.approx(1e6 / 40_000)
    assert parts["half"] == pytest.approx(np.hypot(parts["t_half"], parts["g_half"]))
    assert min(parts["v_u"], parts["v_c"]) - 1e-12 <= parts["value"] <= max(parts["v_u"], parts["v_c"]) + 1e-12
    assert np.isfinite(parts["band"]).all() and len(parts["share_errors"]) == len(parts["share_factors"]) > 0
