"""Where the estimator's error at N comes from, by how deep each positive sits relative to the
sample, on design data only (docs/benchmarks.md, "Where the bias lives").

A positive whose true hardness x has x S << 1 (S the query's sampled distractors) has, in
expectation, no sampled distractor above it: the sample says only that it is beyond the sample's
resolution, and its estimate is the tail model's extrapolation. One with x S >> 1 is measured by
its own count. For each cell (the simulator's true x known) this script splits the positives by
x S into depth bands and, for each band, sets that band's estimated hardness (every posterior draw)
to the true x and recomputes the predicted mAP@1000 at N: the error that band carries is how much
the prediction moves (one band at a time; the bands interact through the AP of a query, so the
contributions need not add up to the total, and the sum is printed beside it). The error is taken
against the law's own value under the true x (what a perfect estimate would predict), so gallery
noise is not in it; the realised truth is printed too. Also per band: the median of
log10(x_hat / x) (negative: estimated too easy).

Run: PYTHONPATH=src .venv/bin/python benchmarks/bias_by_depth.py [--sets design,fresh5] [--method evt-eb] [-p xi_max=0]
     [--fractions 0.01,0.05] [--json rows.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
DESIGN_SETS = ("design", "holdout", "fresh", "fresh2", "fresh3", "fresh4", "fresh5", "fresh6")
BANDS = ((0.0, 0.1), (0.1, 1.0), (1.0, 10.0), (10.0, np.inf))     # true x S
N_SIM = 1e8


def mean_metric(draws, offsets, n, mode):
    """Mean over queries of the metric averaged over the hardness draws (D, P)."""
    from rscale.core import law
    h = law.Hardness.from_flat(np.clip(draws, 0.0, 1.0), offsets)
    return float(np.mean(law.per_query(h, "AP", n, 1000, mode), axis=0).mean())


def add_estimator_options(ap) -> None:
    """``--method`` and ``-p NAME=VALUE`` (repeated): the estimator and its parameters."""
    ap.add_argument("--method", default="evt-eb")
    ap.add_argument("-p", dest="params", action="append", default=[], metavar="NAME=VALUE",
                    help="an estimator parameter, as `rscale estimate -p` takes it (a variant to compare)")


def estimator_options(a) -> dict:
    """The parsed ``-p`` parameters of :func:`add_estimator_options`, checked as `rscale estimate`
    checks them; a bad one stops with one line."""
    from rscale.api.estimation import estimator_params
    from rscale.errors import InvalidArgumentError
    try:
        return estimator_params(a.method, a.params)
    except InvalidArgumentError as exc:
        raise SystemExit(f"-p: {exc}") from None


def band_moves(draws, x_true, offsets, depth, n, mode, pred) -> list:
    """[(selection, moved)] per band of ``depth``: the positives in it, and how far the predicted
    mean metric ``pred`` moves when their draws are set to ``x_true``."""
    out = []
    for lo, hi in BANDS:
        sel = (depth >= lo) & (depth < hi)
        fixed = draws.copy()
        fixed[:, sel] = x_true[sel]
        out.append((sel, pred - mean_metric(fixed, offsets, n, mode)))
    return out


def cell(spec, f, seed, method, mode, params=None):
    from rscale import sim
    from rscale.core.estimators.methods import estimate
    bench = sim.simulate(spec, seed=seed)
    s = int(f * N_SIM)
    ss = sim.sample(bench, s, k=min(4000, s), seed=seed)
    t = time.perf_counter()
    est = estimate(ss, method, **(params or {}))
    secs = time.perf_counter() - t
    assert np.array_equal(est.offsets, bench.pos_offsets)
    x_true = bench.pos_x
    draws = est.x[None] if est.draws is None else est.draws.T            # (D, P)
    s_pos = np.repeat(est.n_sampled, np.diff(est.offsets)).astype(np.float64)
    depth = x_true * s_pos
    pred = mean_metric(draws, est.offsets, N_SIM, mode)
    exact = mean_metric(x_true[None], est.offsets, N_SIM, mode)
    realised = float(sim.truth(bench, ss, N_SIM, "AP", 1000, seed=seed).mean())
    x_hat = draws.mean(axis=0)
    bands = []
    for (lo, hi), (sel, moved) in zip(BANDS, band_moves(draws, x_true, est.offsets, depth, N_SIM, mode, pred)):
        ratio = np.log10(np.maximum(x_hat[sel], 1e-300) / x_true[sel]) if sel.any() else np.array([np.nan])
        bands.append({"band": [lo, hi], "positives": int(sel.sum()), "carries": moved,
                      "median_log10_ratio": float(np.median(ratio))})
    return {"error": pred - exact, "error_realised": pred - realised, "pred": pred, "exact": exact,
            "bands": bands, "fit_seconds": secs}


def main(argv=None):
    import accuracy
    from rscale.sim.benchmark import SimSpec
    ap = argparse.ArgumentParser()
    ap.add_argument("--sets", default="design,fresh5")
    ap.add_argument("--fractions", default="0.01,0.05")
    ap.add_argument("--json", default=None)
    add_estimator_options(ap)
    a = ap.parse_args(argv)
    params = estimator_options(a)
    mode = "expected" if a.method == "evt-eb" else "plugin"
    rows = []
    print("| set | scenario | S/N | error | " + " | ".join(f"x S in [{lo:g}, {hi:g}): n, carries, log10 ratio"
                                                        for lo, hi in BANDS) + " | sum of bands |")
    print("|---|---|---|---|" + "---|" * len(BANDS) + "---|")
    for which in a.sets.split(","):
        if which not in DESIGN_SETS:
            raise SystemExit(f"--sets {which}: not design data")
        scenarios, offset = accuracy.SETS[which]
        for name, family, hl, nq in scenarios:
            spec = SimSpec(name=name, family=family, n_queries=nq, hardness=hl)
            for f in (float(x) for x in a.fractions.split(",")):
                r = cell(spec, f, 7 + offset, a.method, mode, params)
                r.update(set=which, scenario=name, fraction=f, method=a.method, params=params)
                rows.append(r)
                print(f"| {which} | {name} | {f:.0%} | {r['error']:+.4f} | "
                      + " | ".join(f"{b['positives']}, {b['carries']:+.4f}, {b['median_log10_ratio']:+.2f}" for b in r["bands"])
                      + f" | {sum(b['carries'] for b in r['bands']):+.4f} |", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
