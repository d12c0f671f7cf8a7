"""Coverage and width of the reranked interval (``rscale query "... reranked@K'"`` and
``rscale predict-rerank``, :func:`rscale.core.rerank_replicates.reranked_intervals`) against the
simulator's exact truth, before and after the gallery-noise term.

Cells (fixed before measuring): the simulator's Gaussian rerank model (rscale.sim.rerank) on a
Gaussian-family benchmark, 100 queries x ~3 positives of first-stage hardness in [1e-4, 3e-2],
S = 20,000 sampled distractors, the default evt hardness with 16 half-sample replicates, the
GPD-smoothed joint tails of the sample and of the same halves, the query's default modes
(mAP@K' plug-in, R@1 expected):

    A  r = 0.7, lift 1.0, N = 40k,  K' = 1000, top 600 reranked   (tests/test_rerank_query.py's cell)
    B  r = 0.5, lift 1.0, N = 100k, K' = 1000, top 300 reranked   (a 5x extrapolation)
    C  r = 0.9, lift 0.5, N = 40k,  K' = 1000, top 600 reranked   (a reranker close to the first stage)

Per cell, ``--samples`` independent samples of the same benchmark. Two truths:

- ``law``: the exact reranked law on the true hardness and the model's joint tail (expected
  mode): the mean over galleries;
- ``gallery``: the realised metric of one independent gallery of N drawn from the model per
  sample (the law's plug-in on that gallery's realised quantities, which equals exact reranking of
  it: tests/test_rerank_law.py), what a full-gallery rerank prints.

For each: the share of samples whose 95% benchmark interval covers it, with the replicate term
alone (``before``) and with the gallery term (``after``), the mean half-width, the prediction's
across-sample sd and bias, the replicates' RMS half-difference, the sd of one half's prediction
(1/S variance scaling predicts sqrt(2) x the full's) and the gallery sd (computed, and measured
over the galleries drawn).

Run: PYTHONPATH=src python benchmarks/rerank_interval_coverage.py --cells A,B,C --samples 30 -o out/bench/rerank_coverage.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np

CELLS = {
    "A": dict(r=0.7, lift=1.0, n=40_000, depth=1000, top=600),
    "B": dict(r=0.5, lift=1.0, n=100_000, depth=1000, top=300),
    "C": dict(r=0.9, lift=0.5, n=40_000, depth=1000, top=600),
}
S, QUERIES = 20_000, 100


def realised(model, bench, t, n, depth, measures, rng):
    """The exact reranked metric of one gallery of ``n`` distractors drawn from the model."""
    from rscale.core import rerank_law as law
    q = bench.pos_offsets.size - 1
    pq = np.repeat(np.arange(q), np.diff(bench.pos_offsets))
    u, e = model.gallery(n, q, rng)
    keep = min(n, depth + 200)
    part = np.argpartition(u, keep - 1, axis=1)[:, :keep]
    order = np.take_along_axis(part, np.argsort(np.take_along_axis(u, part, axis=1), axis=1), axis=1)
    top = np.take_along_axis(e, order, axis=1)
    k = (u[pq] <= bench.pos_x[:, None]).sum(axis=1)
    h = law.RerankedHardness.build(k / n, t, bench.pos_offsets, *law.joint_from_top(top, np.full(q, n), t,
                                                                                   bench.pos_offsets))
    return [float(law.reranked_per_query(h, m, n, kk, depth=depth, mode="plugin").mean()) for m, kk, _ in measures]


def run_cell(name, samples):
    from rscale.core import rerank_law as law
    from rscale.core.estimators.methods import estimate
    from rscale.core.interval import metric_intervals
    from rscale.core.replicates import SEED, hardness_replicates
    from rscale.core.rerank_replicates import gallery_sd, reranked_input, reranked_sets
    from rscale.sim import benchmark as sb
    from rscale.sim import rerank as sr

    c = CELLS[name]
    n, depth = c["n"], c["depth"]
    measures = [("AP", depth, "plugin"), ("R", 1, "expected")]
    spec = sb.SimSpec(name="sim_rr", family="gaussian", n_queries=QUERIES, mean_positives=3,
                      hardness=sb.HardnessLaw(x_min=1e-4, x_max=3e-2, immune=0.0))
    bench = sb.simulate(spec, seed=1)
    model = sr.GaussianRerankModel(c["r"])
    t = sr.positive_rerank_scores(model, bench.pos_x, np.random.default_rng(3), lift=c["lift"])
    exact = sr.exact_reranked_hardness(bench, t, model)
    law_truth = [law.reranked_metric(exact, m, n, k, depth=depth) for m, k, _ in measures]
    gal_rng = np.random.default_rng([name.encode()[0], 7])
    rows = []
    for seed in range(1, samples + 1):
        ss = sb.sample(bench, S, k=c["top"], seed=seed)
        ss = sr.with_rerank_scores(bench, ss, model, top=c["top"], pos_rerank=t, seed=seed)
        est = estimate(ss, "evt")
        reps = hardness_replicates(ss, method="evt", params=est.params)
        inp = reranked_input(ss, splits=8, seed=SEED)
        point, halves = reranked_sets(inp, est.x, reps)
        gal = realised(model, bench, t, n, depth, measures, gal_rng)
        for i, (m, k, mode) in enumerate(measures):
            pq = law.reranked_per_query(point, m, n, k, depth=depth, mode=mode)
            rep = np.stack([law.reranked_per_query(h, m, n, k, depth=depth, mode=mode) for h in halves])
            gsd = gallery_sd(point, m, n, k, depth=depth)
            v, lo0, hi0 = metric_intervals(pq[None], rep[None])
            _, lo1, hi1 = metric_intervals(pq[None], rep[None], gallery_sd=np.array([gsd]))
            means = rep.mean(axis=1).reshape(8, 2)
            rows.append(dict(seed=seed, measure=f"{'mAP@' + str(k) if m == 'AP' else 'R@1'}", value=float(v[0]),
                             before=[float(lo0[0]), float(hi0[0])], after=[float(lo1[0]), float(hi1[0])],
                             rms_half_diff=float(np.sqrt(np.mean(((means[:, 0] - means[:, 1]) / 2) ** 2))),
                             half0=float(means[0, 0]), gallery_sd=gsd, law=law_truth[i], gallery=gal[i]))
        print(name, seed, [round(r["value"], 4) for r in rows[-2:]], flush=True)
    return rows


def summarise(rows):
    out = {}
    for measure in sorted({r["measure"] for r in rows}):
        rs = [r for r in rows if r["measure"] == measure]
        v = np.array([r["value"] for r in rs])
        gal = np.array([r["gallery"] for r in rs])
        s = {"samples": len(rs), "law_truth": rs[0]["law"], "mean_prediction": float(v.mean()),
             "bias_vs_law": float(v.mean() - rs[0]["law"]), "sd_prediction": float(v.std(ddof=1)),
             "rms_half_diff": float(np.sqrt(np.mean([r["rms_half_diff"] ** 2 for r in rs]))),
             "sd_half_prediction": float(np.std([r["half0"] for r in rs], ddof=1)),
             "gallery_sd_computed": float(np.mean([r["gallery_sd"] for r in rs])),
             "gallery_sd_measured": float(np.std(gal, ddof=1)), "gallery_mean": float(gal.mean())}
        for kind in ("before", "after"):
            s[f"half_width_{kind}"] = float(np.mean([(r[kind][1] - r[kind][0]) / 2 for r in rs]))
            for truth in ("law", "gallery"):
                s[f"cover_{truth}_{kind}"] = int(sum(r[kind][0] <= r[truth] <= r[kind][1] for r in rs))
        out[measure] = s
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", default="A,B,C")
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("-o", "--out", default=None)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    result = {"machine": platform.machine(), "numpy": np.__version__, "S": S, "queries": QUERIES, "cells": {}}
    for name in args.cells.split(","):
        rows = run_cell(name, args.samples)
        result["cells"][name] = {**CELLS[name], "summary": summarise(rows), "rows": rows}
    result["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps({k: v["summary"] for k, v in result["cells"].items()}, indent=1))
    if args.out:
        from pathlib import Path
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
