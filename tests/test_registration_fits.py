"""Issue 14's "a registration takes at most R estimator fits": every estimator fit of one version,
counted at the dispatch every caller goes through (benchmarks/registration_fits.py prints the
same count for the CLI with R = 16 replicates + 4 back-test shares)."""

import collections
import traceback
from pathlib import Path

import rscale.core.estimators.methods as methods
from rscale import api, sim
from rscale.sim.benchmark import HardnessLaw, SimSpec
from rscale.store.sample_stats_file import write_sample_stats


def test_register_fits_nothing_and_estimate_fits_one_plus_its_stored_columns(tmp_path, monkeypatch):
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
    out = api.register(tmp_path / "h.parquet", tmp_path / "s.parquet", registry=tmp_path / "reg", backbone="b",
                       benchmark="sim")
    by_phase = {p: sum(n for (q, _m, _c), n in fits.items() if q == p) for p in ("estimate", "register")}
    r = summary["replicates"]
    assert r == 4 and summary["backtest_factors"] == [2, 4]
    stored = r + 4                                                # the halves and the back-test's quarters
    assert by_phase["register"] == 0                              # the budget check reads the stored halves
    assert by_phase["estimate"] == 1 + stored                     # the point, then one fit per stored column
    assert summary["fits"] == by_phase["estimate"]                # what estimate reports it did
    budget = api.show(out["ref"], tmp_path / "reg").summary["budget"]
    assert budget["halves"] == r and budget["fractions"] == [0.5, 1.0] and len(budget["N"]) == 6
