"""How the back-test enters the interval: the comparison that chose the rule, on the simulator's
design scenarios only (docs/design.md; docs/benchmarks.md records the figures).

For each design scenario of benchmarks/accuracy.py and each fraction of a 1e8 pool: simulate,
``rscale estimate`` (replicates and back-test stored), read the file back, and compute, for
mAP@1000 at N = 1e8, the point v, the replicate half-width t sd, the back-test's e(f) at the
cell's factor and the exact truth. Then three candidate intervals from the same numbers:

- quadrature: v +- sqrt((t sd)^2 + e(f)^2)
- shift:      (v - e(f)) +- t sd          (a point correction by the back-test)
- union:      [min(v, v - e) - t sd, max(v, v - e) + t sd]

and prints coverage, mean width and the MAE of v and of v - e(f).

Run: PYTHONPATH=src .venv/bin/python benchmarks/backtest_rule.py [--draws 2] [--fractions 0.01,0.05] [--set design]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))


def cell(spec, n, s, seed):
    from rscale import api, sim
    from rscale.core.backtest import backtest_error, factor_errors
    from rscale.core.interval import metric_intervals
    from rscale.core.prediction import predict_per_query, replicate_per_query
    from rscale.store.hardness_file import read_hardness
    from rscale.store.sample_stats_file import write_sample_stats

    bench = sim.simulate(spec, seed=seed)
    ss = sim.sample(bench, s, k=min(4000, s), seed=seed)
    truth = float(sim.truth(bench, ss, n, "AP", 1000, seed=seed).mean())
    d = Path(tempfile.mkdtemp(prefix="btrule-"))
    write_sample_stats(ss, d / "s.parquet")
    t = time.perf_counter()
    summary = api.estimate(d / "s.parquet", "evt", out=d / "h.parquet")
    secs = time.perf_counter() - t
    est, info = read_hardness(d / "h.parquet")
    pq = predict_per_query(est, "AP", n, 1000, "plugin")
    reps = replicate_per_query(est, "AP", n, 1000, "plugin")
    v, lo, hi = metric_intervals(pq[None], reps[None], ci_kind="benchmark")
    bt = backtest_error(est, info["backtest"], "AP", 1000, "plugin", factor=n / float(est.n_sampled.max()))
    per_factor = {m: float(factor_errors(est, info["backtest"], "AP", 1000, "plugin", m).mean())
                  for m in info["backtest"].factors(est)}
    raw = {m: float(factor_errors(est, info["backtest"], "AP", 1000, "plugin", m, corrected=False).mean())
           for m in info["backtest"].factors(est)}
    # what the back-test aims at: the estimate's own error at N = m S, from the simulator's truth
    actual = {m: float(predict_per_query(est, "AP", m * float(est.n_sampled.max()), 1000, "plugin").mean())
              - float(sim.truth(bench, ss, m * float(est.n_sampled.max()), "AP", 1000, seed=seed).mean())
              for m in info["backtest"].factors(est)}
    raw_e = backtest_error(est, info["backtest"], "AP", 1000, "plugin", factor=n / float(est.n_sampled.max()),
                           corrected=False).at_n
    return {"truth": truth, "v": float(v[0]), "half": float(hi[0] - v[0]), "e": bt.at_n, "factor": bt.factor,
            "e_m": bt.error, "per_factor": per_factor, "raw_factor": raw, "actual_factor": actual, "e_raw": raw_e, "fits": summary["fits"], "seconds": secs}


def candidates(r):
    v, h, e = r["v"], r["half"], r["e"]
    er = r["e_raw"]
    return {"replicates only": (v - h, v + h),
            "quadrature, uncorrected back-test": (v - np.hypot(h, er), v + np.hypot(h, er)),
            "quadrature": (v - np.hypot(h, e), v + np.hypot(h, e)),
            "shift": (v - e - h, v - e + h),
            "union": (min(v, v - e) - h, max(v, v - e) + h)}


def main(argv=None):
    import accuracy
    from rscale.sim.benchmark import SimSpec

    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=2)
    ap.add_argument("--fractions", default="0.01,0.05")
    ap.add_argument("--set", dest="which", default="design", choices=list(accuracy.SETS))
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    scenarios, offset = accuracy.SETS[a.which]
    rows = []
    for name, family, hl, nq in scenarios:
        spec = SimSpec(name=name, family=family, n_queries=nq, hardness=hl)
        for f in (float(x) for x in a.fractions.split(",")):
            for dr in range(a.draws):
                r = cell(spec, 1e8, int(f * 1e8), seed=1000 * dr + 7 + offset)
                r.update(scenario=name, fraction=f)
                rows.append(r)
                print(json.dumps(r), file=sys.stderr, flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    print("| fraction | rule | coverage | mean width | MAE of its centre |\n|---|---|---|---|---|")
    for f in sorted({r["fraction"] for r in rows}) + [None]:
        sel = [r for r in rows if f is None or r["fraction"] == f]
        for rule in candidates(sel[0]):
            iv = [candidates(r)[rule] for r in sel]
            cov = np.mean([lo <= r["truth"] <= hi for r, (lo, hi) in zip(sel, iv)])
            width = np.mean([hi - lo for lo, hi in iv])
            centre = np.mean([abs((lo + hi) / 2 - r["truth"]) for r, (lo, hi) in zip(sel, iv)])
            label = "all" if f is None else f"{f:.0%}"
            print(f"| {label} | {rule} | {cov:.0%} ({len(sel)}) | {width:.4f} | {centre:.4f} |")
    print(f"\nfits per estimate: {rows[0]['fits']}; seconds per estimate: "
          f"{np.mean([r['seconds'] for r in rows]):.1f} (mean)")


if __name__ == "__main__":
    main()
