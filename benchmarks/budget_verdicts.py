"""The sufficient-budget verdict on simulated data, where whether S suffices for N is known.

The check (rscale.core.budget) says N is supported by S when the last doubling S/2 -> S moves the
prediction of mAP@1000 at N by no more than query-sampling noise (1.96 sd / sqrt(Q) of the S
prediction; the paper's criterion, appendix D). Its claim is that the prediction from S is then
within that noise of the truth. Here the truth is the simulator's realised mAP@1000 of a gallery
of N distractors containing the sample, so for every cell (family, S, seed, N) the claim can be
checked: "sufficient in truth" = |prediction(S) - truth(N)| <= noise.

Three ways to get the S/2 prediction, one verdict each:
- ``nested`` (the check before issue 14's registration change): one uniform half of the sample
  (``subsample(ss, 0.5, seed=0)``), re-fitted;
- ``one half``: the first stored half-sample replicate alone (what a check on one stored half
  would do: the same statistic as ``nested``, no fit);
- ``16 halves`` (what registration now stores): the average of the 16 stored replicates;
- ``16 halves vs CE``: the same against the full sample's own certainty equivalent
  (:func:`rscale.core.replicates.point_column`, the kind of value a half stores for an estimator
  with posterior draws) instead of its draw-averaged prediction; for ``evt`` (no draws) the same
  as ``16 halves``.

Prints, per way, the verdict's agreement with the truth, the cells it calls sufficient that are
not (the check's false "ok"), the ones it flags that are fine, and the sd of its last step across
seeds (the verdict's own noise).

Run: PYTHONPATH=src .venv/bin/python benchmarks/budget_verdicts.py [--queries 600] [--seeds 6]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

import numpy as np

WAYS = ("nested", "one half", "16 halves", "16 halves vs CE")


def cell_rows(preset: str, s: int, seed: int, *, queries: int, method: str, sizes) -> list[dict]:
    """One simulated sample: per N, each way's last step, the noise, the error and the truth's verdict."""
    from rscale import sim
    from rscale.core.estimators.methods import estimate
    from rscale.core.prediction import predict_per_query, replicate_per_query
    from rscale.core.replicates import CE_FACTOR, hardness_replicates, point_column
    from rscale.core.subsample import subsample
    from rscale.sim.presets import PRESETS

    bench = sim.simulate(replace(PRESETS[preset], n_queries=queries), seed=seed)
    ss = sim.sample(bench, s, k=400, seed=seed)
    est = estimate(ss, method)
    est = replace(est, replicates=hardness_replicates(ss, method=method, params=est.params, splits=8))
    nested = estimate(subsample(ss, 0.5, seed=0), method, **{})
    ce = replace(est, x=point_column(est, CE_FACTOR * s), draws=None)
    rows = []
    for n in sizes:
        full = predict_per_query(est, "AP", n, 1000)
        reps = replicate_per_query(est, "AP", n, 1000)
        half_pred = {"nested": predict_per_query(nested, "AP", n, 1000).mean(), "one half": reps[0].mean(),
                     "16 halves": reps.mean(),
                     "16 halves vs CE": reps.mean() - predict_per_query(ce, "AP", n, 1000).mean() + full.mean()}
        noise = 1.96 * full.std(ddof=1) / np.sqrt(full.size)
        err = full.mean() - sim.truth(bench, ss, n, "AP", 1000, seed=seed).mean()
        rows.append({"preset": preset, "S": s, "seed": seed, "N": n, "noise": noise, "error": err,
                     "truth_ok": bool(abs(err) <= noise),
                     **{w: float(full.mean() - p) for w, p in half_pred.items()}})
    return rows


def summarise(rows: list[dict]) -> list[str]:
    lines = ["| S/2 from | agrees with truth | says ok, is not | flags, is fine | sd of last step over seeds |",
             "|---|---|---|---|---|"]
    for w in WAYS:
        said = np.array([abs(r[w]) <= r["noise"] for r in rows])
        true = np.array([r["truth_ok"] for r in rows])
        groups = {}
        for r in rows:
            groups.setdefault((r["preset"], r["S"], r["N"]), []).append(r[w])
        sd = np.sqrt(np.mean([np.var(v, ddof=1) for v in groups.values() if len(v) > 1]))
        lines.append(f"| {w} | {np.mean(said == true):.0%} ({int(np.sum(said == true))}/{said.size}) | "
                     f"{int(np.sum(said & ~true))} | {int(np.sum(~said & true))} | {sd:.4f} |")
    true = np.array([r["truth_ok"] for r in rows])
    lines.append(f"\ncells: {len(rows)}, sufficient in truth: {int(true.sum())}")
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=600)
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--method", default="evt-eb")
    ap.add_argument("--presets", default="sim_gaussian,sim_bounded,sim_neardup")
    ap.add_argument("--sizes", default="2e4,1e5", help="sample sizes S")
    ap.add_argument("--jsonl", default=None, help="also write every cell's row here")
    a = ap.parse_args(argv)
    sizes = [1e6, 1e7, 1e8, 1e9]
    rows = []
    for preset in a.presets.split(","):
        for s in (int(float(v)) for v in a.sizes.split(",")):
            for seed in range(a.seeds):
                rows += cell_rows(preset, s, seed, queries=a.queries, method=a.method, sizes=sizes)
    if a.jsonl:
        with open(a.jsonl, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    print(f"method {a.method}, {a.queries} queries, S in {a.sizes}, N in {sizes}, {a.seeds} seeds")
    print("\n".join(summarise(rows)))
    print("\n| preset | S | N | mean error | mean step: " + " / ".join(WAYS) + " | noise |\n|---|---|---|---|---|---|")
    for key in dict.fromkeys((r["preset"], r["S"], r["N"]) for r in rows):
        mine = [r for r in rows if (r["preset"], r["S"], r["N"]) == key]
        steps = " / ".join(f"{np.mean([r[w] for r in mine]):+.4f}" for w in WAYS)
        print(f"| {key[0]} | {key[1]:g} | {key[2]:g} | {np.mean([r['error'] for r in mine]):+.4f} | {steps} | "
              f"{np.mean([r['noise'] for r in mine]):.4f} |")

if __name__ == "__main__":
    main()
