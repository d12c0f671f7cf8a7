"""How the back-test enters the interval: the comparison that chose its grid and its rule, on the
simulator's design scenarios only (docs/design.md; docs/benchmarks.md records the figures).

For each design scenario of benchmarks/accuracy.py and each fraction of a 1e8 pool: simulate,
estimate with evt as ``rscale estimate`` does (16 half-sample replicates), plus back-test shares
at every factor of a deeper grid (4..64, 4 disjoint shares each), and record for mAP@1000 at
N = 1e8: the point v, the replicate half-width t sd, each factor's mean back-test error e_m, the
estimate's actual error at N = m S (the simulator's truth) and at N = 1e8. Then, for each cap M
of the grid (factors <= M used; e(f) beyond M in proportion to log f, rscale.core.backtest) and
each rule:

- quadrature: v +- sqrt((t sd)^2 + e(f)^2)
- shift:      (v - e(f)) +- t sd          (a point correction by the back-test)
- union:      [min(v, v - e) - t sd, max(v, v - e) + t sd]

it prints coverage, mean width and the MAE of the interval's centre. (A third variant, the
shares' error less the move of the full sample's prediction when its top list is cut to the
shares' length, was measured with this script at commit e7b1ad7 and dropped.)

Run: PYTHONPATH=src .venv/bin/python benchmarks/backtest_rule.py [--draws 1] [--fractions 0.01,0.02,0.05,0.1]
     [--set design|holdout|fresh..fresh5] [--method evt|evt-eb] [--grid 4,8,16]
     [--json rows.json]        (or --rows rows.json to re-print the table from saved rows)
Rows also carry every share's error (``share_errors``), which benchmarks/backtest_carry_variants.py
compares carry rules on (docs/benchmarks.md, "Carrying the back-test to the user's factor"). Only
design data: the held-out sets (cov1, the real sets) are refused.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
GRID = (4, 8, 16, 32, 64)


def cell(spec, n, s, seed, method="evt", grid=GRID, mode="plugin"):
    from rscale import sim
    from rscale.core.backtest import Backtest, backtest_hardness, factor_errors
    from rscale.core.estimators.methods import estimate
    from rscale.core.interval import metric_intervals
    from rscale.core.prediction import predict_per_query, replicate_per_query
    from rscale.core.replicates import hardness_replicates

    bench = sim.simulate(spec, seed=seed)
    ss = sim.sample(bench, s, k=min(4000, s), seed=seed)
    truth = float(sim.truth(bench, ss, n, "AP", 1000, seed=seed).mean())
    t = time.perf_counter()
    est = estimate(ss, method)
    est = replace(est, replicates=hardness_replicates(ss, method=method, params=est.params))
    cols, factors = backtest_hardness(ss, method=method, params=est.params, factors=grid)
    secs = time.perf_counter() - t
    bt = Backtest(counts=ss.pos_counts, columns=cols, column_factors=factors)
    pq = predict_per_query(est, "AP", n, 1000, mode)
    reps = replicate_per_query(est, "AP", n, 1000, mode)
    v, lo, hi = metric_intervals(pq[None], reps[None], ci_kind="benchmark")
    s_ref = float(est.n_sampled.max())
    shares = {m: factor_errors(est, bt, "AP", 1000, mode, m).tolist() for m in bt.factors(est)}
    per_factor = {m: float(np.mean(e)) for m, e in shares.items()}
    actual = {m: float(predict_per_query(est, "AP", m * s_ref, 1000, mode).mean())
              - float(sim.truth(bench, ss, m * s_ref, "AP", 1000, seed=seed).mean()) for m in bt.factors(est)}
    return {"truth": truth, "v": float(v[0]), "half": float(hi[0] - v[0]), "method": method,
            "raw_factor": per_factor, "share_errors": shares, "actual_factor": actual, "seconds": secs}


def e_of(per_factor: dict, f: float, cap: int) -> float:
    """e(f) as rscale.core.backtest computes it, from the factors <= cap."""
    errs = {int(m): e for m, e in per_factor.items() if int(m) <= cap}
    ms = sorted(errs)
    if not ms or f <= 1:
        return 0.0
    below, above = [m for m in ms if m <= f], [m for m in ms if m > f]
    if not above:
        return errs[below[-1]] * np.log(f) / np.log(below[-1])
    m0, e0 = (below[-1], errs[below[-1]]) if below else (1, 0.0)
    return e0 + (errs[above[0]] - e0) * (np.log(f) - np.log(m0)) / (np.log(above[0]) - np.log(m0))


def interval(r, cap, rule):
    v, h = r["v"], r["half"]
    e = e_of(r["raw_factor"], 1.0 / r["fraction"], cap) if cap else 0.0      # N = 1e8, S = fraction x 1e8
    return {"quadrature": (v - np.hypot(h, e), v + np.hypot(h, e)), "shift": (v - e - h, v - e + h),
            "union": (min(v, v - e) - h, max(v, v - e) + h)}[rule]


def table(rows) -> str:
    out = ["| cap M | rule | coverage | mean width | MAE of the centre |", "|---|---|---|---|---|"]
    for cap, rule in [(0, "union")] + [(c, r) for c in (2, 4, 8, 16, 64) for r in ("quadrature", "shift", "union")]:
        iv = [interval(r, cap, rule) for r in rows]
        cov = np.mean([lo <= r["truth"] <= hi for r, (lo, hi) in zip(rows, iv)])
        width = np.mean([hi - lo for lo, hi in iv])
        centre = np.mean([abs((lo + hi) / 2 - r["truth"]) for r, (lo, hi) in zip(rows, iv)])
        out.append(f"| {cap or 'none (replicates only)'} | {'-' if not cap else rule} | {cov:.0%} ({len(rows)}) "
                   f"| {width:.4f} | {centre:.4f} |")
    return "\n".join(out)


def main(argv=None):
    import accuracy
    from rscale.sim.benchmark import SimSpec

    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=1)
    ap.add_argument("--fractions", default="0.01,0.02,0.05,0.1")
    ap.add_argument("--json", default=None, help="write the rows here")
    ap.add_argument("--set", dest="which", default="design", help="scenario set of benchmarks/accuracy.py "
                    "(design data only: design, holdout, fresh..fresh5)")
    ap.add_argument("--method", default="evt")
    ap.add_argument("--grid", default=",".join(map(str, GRID)), help="back-test factors beyond the halves")
    ap.add_argument("--rows", default=None, help="re-print the table from rows saved with --json (or JSON lines)")
    a = ap.parse_args(argv)
    if a.rows:
        text = Path(a.rows).read_text()
        rows = json.loads(text) if text.lstrip().startswith("[") else [json.loads(x) for x in text.splitlines() if x]
        print(table(rows))
        return
    if a.which not in ("design", "holdout", "fresh", "fresh2", "fresh3", "fresh4", "fresh5"):
        raise SystemExit(f"--set {a.which}: not design data (held-out sets are measured once, by benchmarks/interval_carry.py)")
    scenarios, offset = accuracy.SETS[a.which]
    grid = tuple(int(x) for x in a.grid.split(","))
    mode = "expected" if a.method == "evt-eb" else "plugin"
    rows = []
    for name, family, hl, nq in scenarios:
        spec = SimSpec(name=name, family=family, n_queries=nq, hardness=hl)
        for f in (float(x) for x in a.fractions.split(",")):
            for dr in range(a.draws):
                r = cell(spec, 1e8, int(f * 1e8), seed=1000 * dr + 7 + offset, method=a.method, grid=grid, mode=mode)
                r.update(scenario=name, fraction=f, set=a.which)
                rows.append(r)
                print(json.dumps(r), file=sys.stderr, flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    print(table(rows))


if __name__ == "__main__":
    main()
