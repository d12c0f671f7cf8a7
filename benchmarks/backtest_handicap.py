"""The share's handicap, separated from the factor, on design data only (docs/benchmarks.md,
"The share's handicap in the back-test").

A 1/m share predicting the whole sample is off by the estimator's error at factor m *plus* the
handicap of fitting its tail on K/m excesses. The stored shares can also predict galleries
smaller than the sample at no fit: a quarter predicting the union of itself and j - 1 other
quarters (factor j, the same K/4 excesses), or a half, or the full sample, predicting its own
gallery (factor 1). Those need only the shares' own counts (how many of the share's
distractors sit at or above each positive, exact from the thinning), not a new estimate. Per
design cell this script records every such error, grouped by (factor f, share size 1/m):

- (2, 2)  half -> the whole sample (the existing back-test; 16)
- (4, 4)  quarter -> the whole sample (the existing back-test; 4)
- (2, 4)  quarter -> its union with one other quarter (12)
- (3, 4)  quarter -> its union with two others (12)
- (1, 4)  quarter -> its own gallery (4);  (1, 2) half -> its own (16);  (1, 1) the estimate -> the sample (1)

and the estimate's actual error (simulator truth) at N = 2S, 4S, 8S, 16S and at N = 1e8 (the
m = 1 line the back-test wants to reach). With ``--eighths`` also the 8 disjoint eighths (8 more
fits, each on 1/8 of the sample) and, per eighth i, its error at the union of i with the next
j - 1 eighths in cyclic order (key "j,8", j = 1..8: 8 errors each; j = 1 its own gallery, j = 8
the sample): a balanced design of 56 increments, not every union (1,016 correlated ones). benchmarks/backtest_handicap_rules.py compares carry
rules on those rows. Only design data: the held-out sets are refused.

Run: PYTHONPATH=src .venv/bin/python benchmarks/backtest_handicap.py --set design --method evt
     [--fractions 0.01,0.05] [--out benchmarks/backtest_handicap_design.jsonl]   (appends; cells in it are skipped)
     [--eighths --out benchmarks/backtest_eighths_design.jsonl]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
DESIGN_SETS = ("design", "holdout", "fresh", "fresh2", "fresh3", "fresh4", "fresh5")


def mean_metric_at(offsets, x, n_q, mode, metric="AP", k=1000):
    """Mean metric of hardness column(s) x ((P,) or (B, P)) for galleries of n_q distractors per
    query: x n_q / n_ref at N = n_ref (the plug-in rank j + n_q x)."""
    from rscale.core import law
    n_ref = float(np.max(n_q))
    scale = np.repeat(np.asarray(n_q, dtype=np.float64) / n_ref, np.diff(offsets))
    h = law.Hardness.from_flat(np.clip(np.asarray(x) * scale, 0.0, 1.0), offsets)
    return law.per_query(h, metric, n_ref, k, mode).mean(axis=-1)


def exact_metric(offsets, counts, n_q, metric="AP", k=1000):
    """Exact metric of the gallery (n_q distractors per query) whose counts per positive are
    ``counts``: rank j + c (the plug-in on c / n_ref at N = n_ref)."""
    from rscale.core import law
    n_ref = float(np.max(n_q))
    h = law.Hardness.from_flat(np.asarray(counts, dtype=np.float64) / n_ref, offsets)
    return float(law.per_query(h, metric, n_ref, k, "plugin").mean())


def cell(spec, n, s, seed, method="evt", mode="plugin", eighths=False):
    from rscale import sim
    from rscale.core.backtest import PER_FACTOR, SEED, disjoint_shares
    from rscale.core.estimators.methods import estimate, stored_params
    from rscale.core.interval import metric_intervals
    from rscale.core.prediction import predict_per_query, replicate_per_query
    from rscale.core.replicates import DEFAULT_SPLITS, hardness_replicates, replicate_halves
    from rscale.core.replicates import SEED as REP_SEED

    bench = sim.simulate(spec, seed=seed)
    ss = sim.sample(bench, s, k=min(4000, s), seed=seed)
    t = time.perf_counter()
    est = estimate(ss, method)
    est = replace(est, replicates=hardness_replicates(ss, method=method, params=est.params))
    kwargs = stored_params(method, est.params)
    quarters = disjoint_shares(ss, 4, PER_FACTOR, SEED)
    qx = [estimate(q, method, **kwargs).x for q in quarters]
    if eighths:
        eights = disjoint_shares(ss, 8, 8, SEED)
        ex = [estimate(q, method, **kwargs).x for q in eights]
    secs = time.perf_counter() - t
    off = est.offsets
    assert np.array_equal(sum(q.pos_counts for q in quarters), ss.pos_counts)      # a partition
    truth_s = exact_metric(off, ss.pos_counts, ss.n_sampled)
    errs = {}
    # halves: own gallery (1, 2) and the whole sample (2, 2)
    halves = [h for i in range(DEFAULT_SPLITS) for h in replicate_halves(ss, i, splits=DEFAULT_SPLITS, seed=REP_SEED)]
    errs["1,2"] = [float(mean_metric_at(off, est.replicates[:, i], h.n_sampled, mode)) - exact_metric(off, h.pos_counts, h.n_sampled)
                   for i, h in enumerate(halves)]
    errs["2,2"] = [float(mean_metric_at(off, est.replicates[:, i], ss.n_sampled, mode)) - truth_s
                   for i in range(est.replicates.shape[1])]
    point = est.x if est.draws is None else est.draws.T        # the point averages over the draws (evt-eb)
    errs["1,1"] = [float(np.mean(mean_metric_at(off, point, ss.n_sampled, mode))) - truth_s]
    for j in (1, 2, 3, 4):
        e = []
        for i in range(4):
            others = [o for o in range(4) if o != i]
            for rest in itertools.combinations(others, j - 1):
                grp = (i, *rest)
                cnt = sum(quarters[g].pos_counts for g in grp)
                nq = sum(quarters[g].n_sampled for g in grp)
                e.append(float(mean_metric_at(off, qx[i], nq, mode)) - exact_metric(off, cnt, nq))
        errs[f"{j},4"] = e
    if eighths:
        assert np.array_equal(sum(q.pos_counts for q in eights), ss.pos_counts)
        for j in range(1, 9):
            e = []
            for i in range(8):
                grp = [(i + t) % 8 for t in range(j)]
                cnt = sum(eights[g].pos_counts for g in grp)
                nq = sum(eights[g].n_sampled for g in grp)
                e.append(float(mean_metric_at(off, ex[i], nq, mode)) - exact_metric(off, cnt, nq))
            errs[f"{j},8"] = e
    truth = float(sim.truth(bench, ss, n, "AP", 1000, seed=seed).mean())
    pq = predict_per_query(est, "AP", n, 1000, mode)
    reps = replicate_per_query(est, "AP", n, 1000, mode)
    v, lo, hi = metric_intervals(pq[None], reps[None], ci_kind="benchmark")
    s_ref = float(est.n_sampled.max())
    actual = {m: float(predict_per_query(est, "AP", m * s_ref, 1000, mode).mean())
              - float(sim.truth(bench, ss, m * s_ref, "AP", 1000, seed=seed).mean()) for m in (2, 4, 8, 16)}
    return {"truth": truth, "v": float(v[0]), "half": float(hi[0] - v[0]), "method": method, "errors": errs,
            "actual_factor": actual, "fit_seconds": secs}


def main(argv=None):
    import accuracy
    from rscale.sim.benchmark import SimSpec

    ap = argparse.ArgumentParser()
    ap.add_argument("--set", dest="which", default="design")
    ap.add_argument("--method", default="evt")
    ap.add_argument("--fractions", default="0.01,0.05")
    ap.add_argument("--scenarios", type=int, default=None, help="only the first N scenarios of the set")
    ap.add_argument("--out", default="benchmarks/backtest_handicap_design.jsonl")
    ap.add_argument("--eighths", action="store_true", help="also the 8 disjoint eighths (key 'j,8')")
    a = ap.parse_args(argv)
    if a.which not in DESIGN_SETS:
        raise SystemExit(f"--set {a.which}: not design data")
    scenarios, offset = accuracy.SETS[a.which]
    out = Path(a.out)
    done = set()
    if out.exists():
        done = {(r["set"], r["scenario"], r["fraction"], r["method"]) for r in map(json.loads, out.read_text().splitlines())}
    mode = "expected" if a.method == "evt-eb" else "plugin"
    for name, family, hl, nq in scenarios[: a.scenarios]:
        spec = SimSpec(name=name, family=family, n_queries=nq, hardness=hl)
        for f in (float(x) for x in a.fractions.split(",")):
            if (a.which, name, f, a.method) in done:
                continue
            r = cell(spec, 1e8, int(f * 1e8), seed=7 + offset, method=a.method, mode=mode,
                     eighths=a.eighths)
            r.update(scenario=name, fraction=f, set=a.which)
            with out.open("a") as fh:
                fh.write(json.dumps(r) + "\n")
            print(name, f, round(r["fit_seconds"]), {k: round(float(np.mean(v)), 4) for k, v in r["errors"].items()},
                  {k: round(v, 4) for k, v in r["actual_factor"].items()}, round(r["v"] - r["truth"], 4), flush=True)


if __name__ == "__main__":
    main()
