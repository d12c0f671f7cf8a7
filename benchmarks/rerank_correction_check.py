"""The half-sample correction of reranked predictions through the shipped path (register, then
``rscale query "... reranked@1000"``), before and after, against the simulator's exact truth.

Cells and decision rule: fixed before measuring in docs/benchmarks.md, "Half-sample correction in
rscale query ... reranked@K'". Per cell and sample: simulated sample stats with rerank scores
(Gaussian rerank model, rscale.sim.rerank), ``api.estimate`` (evt, 16 replicates, no back-test:
the reranked answer has no back-test term), ``api.register`` with the sample stats, then
``api.query`` twice, with ``rscale.core.rerank_replicates.CORRECTED_METRICS`` set to none
("before") and to every measured metric ("after"). Truths: the exact law on the true hardness
and the model's joint tail; one independently drawn gallery per sample (its exact reranked
metric, ``benchmarks/rerank_interval_coverage.py``'s ``realised``).

``--mode expected`` asks every measure in the expected mode (the query's ``... reranked@K' expected``).

Run:  PYTHONPATH=src python benchmarks/rerank_correction_check.py --cells A,B --samples 12 -o out/bench/corr_AB.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from rerank_interval_coverage import CELLS as _COVERAGE_CELLS, QUERIES, S, realised  # noqa: E402

CELLS = {**_COVERAGE_CELLS, "D": dict(r=0.7, lift=1.0, n=200_000, depth=1000, top=600)}
MEASURES = (("mAP@1000", "AP", 1000, "plugin"), ("R@1", "R", 1, "expected"), ("MRR@1000", "RR", 1000, "plugin"))


def run_cell(name, samples, work, mode=None, first_seed=1):
    from rscale import api
    from rscale.core import rerank_law as law
    from rscale.core import rerank_replicates as rr
    from rscale.sim import benchmark as sb
    from rscale.sim import rerank as sr
    from rscale.store.sample_stats_file import write_sample_stats

    c = CELLS[name]
    n, depth = c["n"], c["depth"]
    spec = sb.SimSpec(name="sim_rr", family="gaussian", n_queries=QUERIES, mean_positives=3,
                      hardness=sb.HardnessLaw(x_min=1e-4, x_max=3e-2, immune=0.0))
    bench = sb.simulate(spec, seed=1)
    model = sr.GaussianRerankModel(c["r"])
    t = sr.positive_rerank_scores(model, bench.pos_x, np.random.default_rng(3), lift=c["lift"])
    exact = sr.exact_reranked_hardness(bench, t, model)
    truth = {m: law.reranked_metric(exact, lm, n, k, depth=depth) for m, lm, k, _ in MEASURES}
    gal_rng = np.random.default_rng([name.encode()[0], 11])
    text = f"{', '.join(m for m, *_ in MEASURES)} at N={n:g} for sim_rr reranked@{depth}" + (f" {mode}" if mode else "")
    rows = []
    for seed in range(first_seed, first_seed + samples):
        d = work / f"{name}{seed}"
        d.mkdir(parents=True)
        ss = sr.with_rerank_scores(bench, sb.sample(bench, S, k=c["top"], seed=seed), model, top=c["top"],
                                   pos_rerank=t, seed=seed)
        write_sample_stats(ss, d / "ss.parquet")
        api.estimate(d / "ss.parquet", out=d / "h.parquet", backtest=False)
        api.register(d / "h.parquet", d / "ss.parquet", registry=d / "registry")
        answers, seconds = {}, {}
        for kind, corrected in (("before", ()), ("after", tuple(lm for _m, lm, *_ in MEASURES))):
            saved = rr.CORRECTED_METRICS, rr.CORRECTED_IN_EXPECTED_MODE
            rr.CORRECTED_METRICS, rr.CORRECTED_IN_EXPECTED_MODE = corrected, ()
            try:
                t0 = time.perf_counter()
                answers[kind] = {r["measure"]: r for r in api.query(text, registry=d / "registry")["rows"]}
                seconds[kind] = time.perf_counter() - t0
            finally:
                rr.CORRECTED_METRICS, rr.CORRECTED_IN_EXPECTED_MODE = saved
        gal = dict(zip([m for m, *_ in MEASURES],
                       realised(model, bench, t, n, depth, [(lm, k, mode) for _m, lm, k, mode in MEASURES], gal_rng)))
        for m, *_ in MEASURES:
            rows.append(dict(seed=seed, measure=m, law=truth[m], gallery=gal[m],
                             **{f"{kind}_{f}": answers[kind][m][f] for kind in answers
                                for f in ("value", "ci_low", "ci_high")}))
        print(name, mode or "default", seed, {m: (round(answers["before"][m]["value"], 4), round(answers["after"][m]["value"], 4),
                               round(truth[m], 4)) for m, *_ in MEASURES}, f"query {seconds}", flush=True)
        shutil.rmtree(d)
    return rows


def summarise(rows):
    out = {}
    for m in sorted({r["measure"] for r in rows}):
        rs = [r for r in rows if r["measure"] == m]
        s = {"samples": len(rs), "law": rs[0]["law"], "gallery_mean": float(np.mean([r["gallery"] for r in rs]))}
        for kind in ("before", "after"):
            v = np.array([r[f"{kind}_value"] for r in rs])
            s[f"{kind}_mean"] = float(v.mean())
            s[f"{kind}_bias"] = float(v.mean() - rs[0]["law"])
            s[f"{kind}_mae"] = float(np.abs(v - rs[0]["law"]).mean())
            s[f"{kind}_sd"] = float(v.std(ddof=1))
            s[f"{kind}_half_width"] = float(np.mean([(r[f"{kind}_ci_high"] - r[f"{kind}_ci_low"]) / 2 for r in rs]))
            for truth in ("law", "gallery"):
                s[f"{kind}_cover_{truth}"] = int(sum(r[f"{kind}_ci_low"] <= r[truth] <= r[f"{kind}_ci_high"]
                                                     for r in rs))
        out[m] = s
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", default="A,B,C,D")
    ap.add_argument("--samples", type=int, default=12)
    ap.add_argument("--mode", default=None, choices=("expected", "plugin"),
                    help="every measure in this mode (default: the query's per-measure defaults)")
    ap.add_argument("--first-seed", type=int, default=1, help="sample seeds first-seed .. first-seed + samples - 1")
    ap.add_argument("-o", "--out", default=None)
    args = ap.parse_args(argv)
    os.environ.setdefault("MLFLOW_TRACKING_URI", "sqlite:///" + tempfile.mkdtemp() + "/mlruns.db")
    work = Path(tempfile.mkdtemp(prefix="rerank-correction-"))
    t0 = time.perf_counter()
    result = {"S": S, "queries": QUERIES, "mode": args.mode or "default", "cells": {}}
    for name in args.cells.split(","):
        rows = run_cell(name, args.samples, work, args.mode, args.first_seed)
        result["cells"][name] = {**CELLS[name], "summary": summarise(rows), "rows": rows}
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    result["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps({k: v["summary"] for k, v in result["cells"].items()}, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
