"""Issue 14's "a registration takes at most R estimator fits": every estimator fit of one version,
counted at the dispatch every caller goes through (benchmarks/registration_fits.py prints the
same count for the CLI with R = 16)."""

import collections
import traceback
from pathlib import Path

import rscale.core.estimators.methods as methods
from rscale import api, sim
from rscale.sim.benchmark import HardnessLaw, SimSpec
from rscale.store.sample_stats_file import write_sample_stats


def test_register_fits_three_sub_samples_and_estimate_one_plus_replicates_plus_back_test(tmp_path, monkeypatch):
    spec = SimSpec(name="b", family="gaussian", n_queries=40, hardness=HardnessLaw("loguniform", 1.0, 1e-9, 1e-2))
    write_sample_stats(sim.sample(sim.simulate(spec, seed=3), 100_000, k=400, seed=3), tmp_path / "s.parquet")
    fits, phase, fit = collections.Counter(), ["estimate"], methods.estimate

    def counted(*args, **kwargs):
        caller = next(f.name for f in reversed(traceback.extract_stack()[:-1]) if f.name != "<listcomp>")
        fits[(phase[0], Path(traceback.extract_stack()[-2].filename).stem, caller)] += 1
        return fit(*args, **kwargs)

    monkeypatch.setattr(methods, "estimate", counted)
    summary = api.estimate(tmp_path / "s.parquet", "evt", out=tmp_path / "h.parquet", replicates=4)
    phase[0] = "register"
    api.register(tmp_path / "h.parquet", tmp_path / "s.parquet", registry=tmp_path / "reg", backbone="b",
                 benchmark="sim")
    by_phase = {p: sum(n for (q, _m, _c), n in fits.items() if q == p) for p in ("estimate", "register")}
    r = summary["replicates"]
    assert r == 4
    assert by_phase["register"] == 3 <= r                        # the budget check's S/8, S/4, S/2
    assert {c for (q, _m, c), _n in fits.items() if q == "register"} == {"budget_check"}
    assert by_phase["estimate"] == 1 + r + 4                      # the point, the halves, the quarters
    assert summary["fits"] == by_phase["estimate"]                # what estimate reports it did
