"""Does the reranked prediction's sampling variance scale as 1/S, as the half-sample rule
assumes (docs/benchmarks.md, "Reranked interval coverage", point 2)?

On cell A of benchmarks/rerank_interval_coverage.py (Gaussian rerank model r = 0.7, lift 1,
100 queries, S = 20,000, N = 40,000, K' = 1000, top 600 reranked), for each sample seed: the
plug-in mAP@1000 on the *true* first-stage hardness with the joint tail estimated from the
whole sample and from each half of one split (rscale.core.subsample.split_halves, seed 2027),
for the GPD slice tail with its own shape (the default), an exponential slice tail and plain
counts. Prints, per tail: the sd across samples of the whole sample's prediction and of one
half's (the rule wants a variance ratio of 2), and the RMS half-difference (the rule's estimate
of the first).

Run: PYTHONPATH=src python benchmarks/rerank_replicate_scaling.py --seeds 100:130
"""

from __future__ import annotations

import argparse

import numpy as np


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="100:130", help="first:last (exclusive) sample seeds")
    args = ap.parse_args(argv)
    from rscale.core import rerank_law as law
    from rscale.core.subsample import split_halves
    from rscale.sim import benchmark as sb
    from rscale.sim import rerank as sr

    s, n, top, depth = 20_000, 40_000, 600, 1000
    spec = sb.SimSpec(name="sim_rr", family="gaussian", n_queries=100, mean_positives=3,
                      hardness=sb.HardnessLaw(x_min=1e-4, x_max=3e-2, immune=0.0))
    bench = sb.simulate(spec, seed=1)
    model = sr.GaussianRerankModel(0.7)
    t = sr.positive_rerank_scores(model, bench.pos_x, np.random.default_rng(3), lift=1.0)
    first, last = (int(v) for v in args.seeds.split(":"))
    res = {tail: [] for tail in ("own", "exponential", "counts")}
    for seed in range(first, last):
        ss = sr.with_rerank_scores(bench, sb.sample(bench, s, k=top, seed=seed), model, top=top, pos_rerank=t,
                                   seed=seed)
        parts = (ss, *split_halves(ss, seed=2027))
        for tail, values in res.items():
            row = []
            for part in parts:
                if tail == "counts":
                    g, j = law.joint_from_top(part.top_rerank, part.n_sampled, t, part.pos_offsets)
                else:
                    g, j = law.joint_from_top_smoothed(part.top_rerank, part.n_sampled, t, part.pos_offsets,
                                                       shape=tail)
                h = law.RerankedHardness.build(bench.pos_x, t, bench.pos_offsets, g, j)
                row.append(law.reranked_metric(h, "AP", n, depth, depth=depth, mode="plugin"))
            values.append(row)
    truth = law.reranked_metric(sr.exact_reranked_hardness(bench, t, model), "AP", n, depth, depth=depth)
    print(f"samples {last - first}, exact law mAP@1000 {truth:.4f}")
    for tail, v in res.items():
        v = np.array(v)
        sd, sd_half = v[:, 0].std(ddof=1), v[:, 1:].std(axis=0, ddof=1).mean()
        rms = np.sqrt(np.mean(((v[:, 1] - v[:, 2]) / 2) ** 2))
        print(f"{tail:12s} mean {v[:, 0].mean():.4f}  sd {sd:.5f}  sd of a half {sd_half:.5f}  "
              f"variance ratio {(sd_half / sd) ** 2:.2f}  RMS half-diff {rms:.5f} ({rms / sd:.2f} of the sd)")


if __name__ == "__main__":
    main()
