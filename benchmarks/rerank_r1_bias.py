"""Bias of reranked predictions from a sample against the exact reranked truth on the simulator's
Gaussian rerank model (rscale.sim.rerank), before and after the half-sample correction
(rscale.core.rerank_law.half_sample_corrected).

The cell set was fixed before measuring: the registry test's cell (correlation r = 0.7, positives
lifted by 1, N = 40,000) and one change of each: r = 0.5, r = 0.9, lift 0.5, N = 200,000; each with
100 queries (~3 positives), S = 20,000 sampled distractors, the top 600 reranked, K' = 1000, four
independent samples. Per sample: the first-stage hardness by the default estimator (evt), the
GPD-smoothed joint tail of the sample and of 8 half-samples (4 splits, seeds 2027..2030), the
expected mode. Truth: the law on the true hardness and the model's exact joint tail.

Run:  PYTHONPATH=src python benchmarks/rerank_r1_bias.py [--samples 4] [--queries 100]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

CELLS = [(0.7, 1.0, 4e4), (0.5, 1.0, 4e4), (0.9, 1.0, 4e4), (0.7, 0.5, 4e4), (0.7, 1.0, 2e5)]
MEASURES = (("R@1", "R", 1), ("MRR@1000", "RR", 1000), ("mAP@1000", "AP", 1000))
S, TOP, DEPTH = 20_000, 600, 1000


def main():
    from rscale.core import rerank_law as law
    from rscale.core.estimators.evt import estimate_evt
    from rscale.core.subsample import split_halves
    from rscale.sim import benchmark as sb
    from rscale.sim import rerank as sr

    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--splits", type=int, default=4)
    args = ap.parse_args()
    t0 = time.perf_counter()
    errors = {name: ([], []) for name, *_ in MEASURES}
    print(f"{'cell':28s} {'measure':9s} {'truth':>7s} {'bias before':>12s} {'bias after':>11s}  per sample before -> after")
    for r, lift, n in CELLS:
        spec = sb.SimSpec(name="sim_rr", family="gaussian", n_queries=args.queries, mean_positives=3,
                          hardness=sb.HardnessLaw(x_min=1e-4, x_max=3e-2, immune=0.0))
        bench = sb.simulate(spec, seed=1)
        model = sr.GaussianRerankModel(r)
        t = sr.positive_rerank_scores(model, bench.pos_x, np.random.default_rng(3), lift=lift)
        exact = sr.exact_reranked_hardness(bench, t, model)
        truth = {name: law.reranked_metric(exact, m, n, k, depth=DEPTH) for name, m, k in MEASURES}
        cell = {name: ([], []) for name, *_ in MEASURES}
        for seed in range(1, args.samples + 1):
            ss = sr.with_rerank_scores(bench, sb.sample(bench, S, k=TOP, seed=seed), model, top=TOP, pos_rerank=t,
                                       seed=seed)
            x = estimate_evt(ss).x

            def table(part):
                grid, joint = law.joint_from_top_smoothed(part.top_rerank, part.n_sampled, part.pos_rerank,
                                                          part.pos_offsets)
                return law.RerankedHardness.build(x, t, bench.pos_offsets, grid, joint)

            point = table(ss)
            halves = [table(h) for i in range(args.splits) for h in split_halves(ss, seed=2027 + i)]
            for name, m, k in MEASURES:
                v = law.reranked_per_query(point, m, n, k, depth=DEPTH)
                vh = np.stack([law.reranked_per_query(h, m, n, k, depth=DEPTH) for h in halves])
                cell[name][0].append(v.mean() - truth[name])
                cell[name][1].append(law.half_sample_corrected(v, vh).mean() - truth[name])
        for name, *_ in MEASURES:
            before, after = (np.array(a) for a in cell[name])
            errors[name][0].extend(before)
            errors[name][1].extend(after)
            print(f"r={r} lift={lift} N={n:<9g} {name:9s} {truth[name]:7.4f} {before.mean():+12.4f} {after.mean():+11.4f}  "
                  + " ".join(f"{b:+.3f}->{a:+.3f}" for b, a in zip(before, after)))
    print("over all cells and samples:")
    for name, (before, after) in errors.items():
        b, a = np.array(before), np.array(after)
        print(f"  {name:9s} mean bias {b.mean():+.4f} -> {a.mean():+.4f}; mean |error| {np.abs(b).mean():.4f} -> "
              f"{np.abs(a).mean():.4f}; rms {np.sqrt((b ** 2).mean()):.4f} -> {np.sqrt((a ** 2).mean()):.4f}")
    print(f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
