"""Bias of the reranked law's joint tail estimators against the simulator's exact truth, with the
first-stage hardness known (the true x), so that only the joint tail differs from the truth
(docs/benchmarks.md, "Reranked joint tail at the shape bound").

Estimators of G_p(w) from the sample's reranked top (rscale.core.rerank_law):

- ``counts``: :func:`joint_from_top` (plain counts);
- ``gpd-as-fit``: :func:`joint_from_top_smoothed` with ``at_bound="gpd"`` (every fit used as it
  is: the estimator before fits at the shape bound xi = -1 fell back to counts);
- ``smoothed``: :func:`joint_from_top_smoothed` as shipped (fits at the bound keep the counts).

``--correct`` adds each one half-sample corrected (``+hs``: 2 v_S - the mean over 8 halves of 4
splits, :func:`half_sample_corrected`).

Each on the Gaussian rerank model's scores (``gauss``) and on the same scores through the bounded,
rank-preserving map Phi(E) (``bounded``: a cosine-like score with an end point; the law sees only
ranks, so the truth is unchanged, and an estimator should not care).

Cells (fixed before measuring): T is the size of tests/test_rerank_sample.py's done-when check
(N = 800, S = 400, top 60, K' = 40, hardness 1e-3..2e-2; T9 the same with r = 0.9, lift 0.5); A and D are the cells of
docs/benchmarks.md "Half-sample correction" (S = 20,000, top 600, K' = 1000; N 40k and 200k).
Truth: the law on the true hardness and the model's exact joint tail (expected mode for R@1 and for
the expected rows, the same mode as the estimate).

Run:  PYTHONPATH=src python benchmarks/rerank_tail_bias.py --cells T,T9,A,D --samples 8 --correct -o out/bench/tail_bias.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np

CELLS = {
    "T": dict(r=0.7, lift=1.0, n=800, s=400, top=60, depth=40, x=(1e-3, 2e-2), queries=100),
    "T9": dict(r=0.9, lift=0.5, n=800, s=400, top=60, depth=40, x=(1e-3, 2e-2), queries=100),
    "A": dict(r=0.7, lift=1.0, n=40_000, s=20_000, top=600, depth=1000, x=(1e-4, 3e-2), queries=100),
    "D": dict(r=0.7, lift=1.0, n=200_000, s=20_000, top=600, depth=1000, x=(1e-4, 3e-2), queries=100),
}
CASES = (("mAP expected", "AP", None, "expected"), ("mAP plugin", "AP", None, "plugin"),
         ("R@1 expected", "R", 1, "expected"), ("MRR plugin", "RR", None, "plugin"))


def estimators():
    from rscale.core import rerank_law as law
    return {
        "counts": lambda top, s, t, off: law.joint_from_top(top, s, t, off),
        "gpd-as-fit": lambda top, s, t, off: law.joint_from_top_smoothed(top, s, t, off, at_bound="gpd"),
        "smoothed": lambda top, s, t, off: law.joint_from_top_smoothed(top, s, t, off),
    }


SPLITS = 4


def _table(make, scale, part, bench, t):
    """The reranked table of sample stats ``part``: true hardness, the joint tail by ``make`` from
    the rerank scores mapped by ``scale`` (the positives' own scores ``t`` kept for the law's ties)."""
    from rscale.core import rerank_law as law
    grid, joint = make(scale(part.top_rerank), part.n_sampled, scale(t), part.pos_offsets)
    return law.RerankedHardness.build(bench.pos_x, t, bench.pos_offsets, grid, joint)


def run_cell(name, samples, correct=False, only=None):
    from scipy.special import ndtr

    from rscale.core import rerank_law as law
    from rscale.core.subsample import split_halves
    from rscale.sim import benchmark as sb
    from rscale.sim import rerank as sr
    c = CELLS[name]
    spec = sb.SimSpec(name="sim_rr", family="gaussian", n_queries=c["queries"], mean_positives=3,
                      hardness=sb.HardnessLaw(x_min=c["x"][0], x_max=c["x"][1], immune=0.0))
    bench = sb.simulate(spec, seed=1)
    model = sr.GaussianRerankModel(c["r"])
    t = sr.positive_rerank_scores(model, bench.pos_x, np.random.default_rng(3), lift=c["lift"])
    exact = sr.exact_reranked_hardness(bench, t, model)
    depth, n = c["depth"], c["n"]
    truth = {case: law.reranked_metric(exact, m, n, k or depth, depth=depth, mode=mode) for case, m, k, mode in CASES}
    errors = {}
    for seed in range(1, samples + 1):
        ss = sr.with_rerank_scores(bench, sb.sample(bench, c["s"], k=c["top"], seed=seed), model, top=c["top"],
                                   pos_rerank=t, seed=seed)
        for scale, f in (("gauss", lambda v: v), ("bounded", ndtr)):
            for est, make in estimators().items():
                if only and est not in only:
                    continue
                if est == "counts" and scale == "bounded":
                    continue                                   # counts see only ranks: the same as gauss
                h = _table(make, f, ss, bench, t)
                halves = ([_table(make, f, p, bench, t) for i in range(SPLITS) for p in split_halves(ss, seed=2027 + i)]
                          if correct else [])
                for case, m, k, mode in CASES:
                    v = law.reranked_per_query(h, m, n, k or depth, depth=depth, mode=mode)
                    errors.setdefault((scale, est, case), []).append(v.mean() - truth[case])
                    if halves:
                        vh = np.stack([law.reranked_per_query(p, m, n, k or depth, depth=depth, mode=mode) for p in halves])
                        errors.setdefault((scale, est + "+hs", case), []).append(
                            law.half_sample_corrected(v, vh).mean() - truth[case])
    rows = []
    for (scale, est, case), e in errors.items():
        e = np.array(e)
        rows.append(dict(cell=name, scale=scale, estimator=est, case=case, truth=truth[case], bias=float(e.mean()),
                         mae=float(np.abs(e).mean()), sd=float(e.std(ddof=1))))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", default="T,T9,A,D")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--estimators", default=None, help="comma-separated subset")
    ap.add_argument("--correct", action="store_true", help="also the half-sample corrected value (+hs)")
    ap.add_argument("-o", "--out", default=None)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    rows = []
    print(f"{'cell':4s} {'scale':8s} {'estimator':11s} {'case':13s} {'truth':>7s} {'bias':>8s} {'mae':>7s} {'sd':>7s}")
    for name in args.cells.split(","):
        for row in run_cell(name, args.samples, args.correct, args.estimators and args.estimators.split(",")):
            rows.append(row)
            print(f"{row['cell']:4s} {row['scale']:8s} {row['estimator']:11s} {row['case']:13s} {row['truth']:7.4f} "
                  f"{row['bias']:+8.4f} {row['mae']:7.4f} {row['sd']:7.4f}", flush=True)
    print(f"{time.perf_counter() - t0:.0f} s, python {platform.python_version()}, numpy {np.__version__}")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
