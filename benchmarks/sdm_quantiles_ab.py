"""A/B of sdm's skew-normal quantiles on half-samples (every replicate and back-test fit): one
exact scipy root search per query, level and shape (what sdm did until the spline) against the
cubic spline in logit(p) through exact nodes (rscale.core.estimators.sdm.skewnorm_quantiles).
On a design scenario's 1% sample (N = 1e8: S = 1e6, K = 4000), two disjoint half-samples; prints
seconds per fit side by side, their ratio, and the largest relative difference of the hardness
inside the fitted levels (x <= K/S) and of the fit's least-squares residual.

Run: OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 PYTHONPATH=src .venv/bin/python benchmarks/sdm_quantiles_ab.py
"""
import sys
import time
from pathlib import Path
from unittest import mock

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))
from scipy import stats  # noqa: E402

import accuracy_table  # noqa: E402
from rscale import sim  # noqa: E402
from rscale.core.estimators import sdm  # noqa: E402
from rscale.core.subsample import split_halves  # noqa: E402
from rscale.sim.benchmark import HardnessLaw, SimSpec  # noqa: E402


def exact_quantiles(p, alphas=sdm.ALPHAS):
    for a in alphas:
        yield stats.skewnorm.isf(np.asarray(p), a)


draw = accuracy_table.sim_draws("design", [0.01], 1, 1)[0]
spec = draw.sim["spec"]
spec = SimSpec(name=spec["name"], family=spec["family"], n_queries=spec["n_queries"],
               hardness=HardnessLaw(**spec["hardness"]))
ss = sim.sample(sim.simulate(spec, seed=draw.sim["seed"]), draw.sim["s"], k=draw.sim["k"], seed=draw.sim["seed"])
print(f"{draw.label}: {ss.n_queries} queries, S = {int(ss.n_sampled[0])}, K = {ss.k}, {ss.n_positives} positives")
for i, half in enumerate(split_halves(ss, seed=0)):
    t0 = time.perf_counter()
    new = sdm.estimate_sdm(half)
    t_new = time.perf_counter() - t0
    with mock.patch.object(sdm, "skewnorm_quantiles", exact_quantiles):
        t0 = time.perf_counter()
        old = sdm.estimate_sdm(half)
        t_old = time.perf_counter() - t0
    inside = old.x <= half.k / half.n_sampled[half.positive_query()]
    rel_x = np.max(np.abs(new.x[inside] - old.x[inside]) / np.maximum(old.x[inside], 1e-300))
    rel_sse = np.max(np.abs(new.tail["sse"] - old.tail["sse"]) / old.tail["sse"])
    print(f"half {i}: {np.unique(half.n_sampled).size} distinct S; exact {t_old:.2f} s, spline {t_new:.2f} s "
          f"({t_old / t_new:.0f}x); max rel. diff: x (inside the fitted levels, {inside.sum()} positives) "
          f"{rel_x:.1e}, residual {rel_sse:.1e}")
