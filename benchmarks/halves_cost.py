"""Recorded halves (``rscale score --halves``, rscale.core.halves): their cost, and the paired
difference of two backbones against exact truth.

Cost: the same generated descriptor sets scored through ``rscale.api.score`` (id hashing and the
engine, sample stats written) without and with ``halves``; best of ``--repeats`` wall times and
the sample-stats file sizes, side by side.

Coverage (``--seeds`` > 0): two backbones (two descriptor sets of one pool of distractor ids,
different vectors), each scored whole (fraction 1: the exact mAP@1000 of the pool) and on
``--seeds`` samples of ``--fraction`` of it with halves; per sample both are estimated (evt, 16
replicates, back-test) and the paired interval of A - B at N = pool is checked against the exact
difference. Samples of A and B with the same seed hold the same distractor ids, so their
replicates pair (one split key), though their top scores differ.

Run: PYTHONPATH=src python benchmarks/halves_cost.py [--queries 500 --distractors 200000 --dim 64 --k 1000]
     [--b-noise 0.3: B = A perturbed, correlated backbones]
     [--seeds 10 --fraction 0.05]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
from pathlib import Path

os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

import numpy as np  # noqa: E402

from _fits import fitted  # noqa: E402
from _timing import best_of  # noqa: E402
from _workload import add_workload_args  # noqa: E402


def main(argv=None):
    ap = add_workload_args(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    ap.add_argument("--cost-fraction", type=float, default=1.0)
    ap.add_argument("--seeds", type=int, default=0)
    ap.add_argument("--fraction", type=float, default=0.05)
    ap.add_argument("--b-noise", type=float, default=0.0,
                    help="> 0: backbone B is A's vectors plus this much Gaussian noise, renormalised (correlated "
                         "backbones); 0: B is an independent generated set of the same ids")
    args = ap.parse_args(argv)
    from rscale import api
    from rscale.store.sample_stats_file import read_sample_stats

    tmp = Path(tempfile.mkdtemp(prefix="rscale-halves-"))
    roots = []
    for name, seed in (("alpha", 1), ("beta", 2))[:1 if args.b_noise > 0 else 2]:
        root = tmp / name
        api.make_descriptor_sets(root, instances=args.queries, dim=args.dim, positives=3,
                                 distractors=args.distractors, hard_share=0.002, seed=seed, backbone=name,
                                 noise=(0.6, 1.2))
        roots.append(root)
    if args.b_noise > 0:
        roots.append(perturbed(roots[0], tmp / "beta", args.b_noise))

    def run(root, out, fraction, seed, halves):
        return api.score(root / "queries", root / "positives", qrels=root / "qrels.parquet",
                         distractors_dir=root / "distractors", out=out, fraction=fraction, seed=seed, k=args.k,
                         backend="numpy", lineage=False, halves=halves)

    print(f"{platform.machine()} numpy {np.__version__}, {os.cpu_count()} CPUs (shared); Q={args.queries} "
          f"pool={args.distractors} d={args.dim} K={args.k} fraction={args.cost_fraction:g}")
    print("| halves | scoring seconds | vs off | sample stats bytes | vs off |\n|---|---|---|---|---|")
    base = None
    for halves in (False, True):
        out = tmp / f"cost-{halves}.parquet"
        secs, _ = best_of(lambda: run(roots[0], out, args.cost_fraction, 0, halves), args.repeats)
        size = out.stat().st_size
        base = base or (secs, size)
        print(f"| {'on' if halves else 'off'} | {secs:.2f} | {secs / base[0]:.2f}x | {size:,} | {size / base[1]:.2f}x |")
    if args.seeds:
        coverage(args, api, run, roots, tmp, read_sample_stats)


def perturbed(src, out, eps):
    """Backbone B: every vector of A's sets plus N(0, eps^2 / d) per coordinate, renormalised."""
    import shutil

    from rscale.store.descriptor_set import DescriptorSet, write_descriptor_set
    rng = np.random.default_rng(99)
    for role in ("queries", "positives", "distractors"):
        ds = DescriptorSet.open(src / role)
        ids = ds.ids()
        v = np.concatenate([np.asarray(x, np.float32) for _, x in ds.shards()])
        v = v + rng.normal(0.0, eps / np.sqrt(v.shape[1]), v.shape).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        meta = {k: ds.manifest[k] for k in ("benchmark", "pooling", "resolution") if k in ds.manifest}
        write_descriptor_set(out / role, [(ids, v)], role=role, meta={**meta, "backbone": "beta",
                             "source": ds.manifest.get("source", "")}, shard_size=65_536)
    shutil.copy(src / "qrels.parquet", out / "qrels.parquet")
    return out


def coverage(args, api, run, roots, tmp, read_sample_stats):
    from rscale.core.interval import difference_intervals, predicted_intervals
    from rscale.core.metrics import ap_at_k_from_counts
    from rscale.core.replicates import split_key

    exact = []
    for i, root in enumerate(roots):
        ss = read_sample_stats(run(root, tmp / f"full{i}.parquet", 1.0, 0, False)["written"])
        exact.append(ap_at_k_from_counts(ss.pos_counts, ss.pos_offsets, 1000))
    n = float(args.distractors)
    truth = float(exact[0].mean() - exact[1].mean())
    print(f"\npool {args.distractors}, samples of {args.fraction:g}; exact mAP@1000 A {exact[0].mean():.4f}, "
          f"B {exact[1].mean():.4f}, A - B {truth:+.4f}")
    print("| seed | S | A - B | paired 95% interval | covers | split keys equal | paired / own width |\n"
          "|---|---|---|---|---|---|---|")
    covered, ratios = 0, []
    for seed in range(args.seeds):
        fits, keys = [], []
        for i, root in enumerate(roots):
            ss = read_sample_stats(run(root, tmp / f"s{seed}-{i}.parquet", args.fraction, 100 + seed, True)["written"])
            fits.append(fitted(ss))
            keys.append(split_key(ss, splits=8))
        (ea, ba), (eb, bb) = fits
        ((pa, pb, lo, hi, _, _),) = difference_intervals(ea, eb, [("AP", 1000, n)], backtest_a=ba, backtest_b=bb)
        # replicate terms alone: the paired interval against the two own intervals in quadrature
        ((_, _, lo0, hi0, _, _),) = difference_intervals(ea, eb, [("AP", 1000, n)])
        ((_, la, ha, _),), ((_, lb, hb, _),) = predicted_intervals(ea, [("AP", 1000, n)]), predicted_intervals(eb, [("AP", 1000, n)])
        ratio = (hi0 - lo0) / np.hypot(ha - la, hb - lb)
        ratios.append(ratio)
        d = float((pa - pb).mean())
        ok = lo <= truth <= hi
        covered += ok
        print(f"| {seed} | {int(ea.n_sampled.max())} | {d:+.4f} | {lo:+.4f}..{hi:+.4f} | {'yes' if ok else 'no'} | "
              f"{keys[0] == keys[1]} | {ratio:.2f} |")
    print(f"covered {covered}/{args.seeds}; paired / own width {min(ratios):.2f}..{max(ratios):.2f} "
          f"(mean {np.mean(ratios):.2f})")


if __name__ == "__main__":
    main()
