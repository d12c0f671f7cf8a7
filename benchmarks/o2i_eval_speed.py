"""Speed of the O2I cross-distance evaluation (rscale.core.o2i), the paper's size.

3,000 objects x 5 distances, 1280-d random unit descriptors (MobileNetV2's width): all 20 ordered
pairs of distinct distances, i.e. a 15k x 15k similarity, ranks with the masked gallery. Printed
side by side with the bare float32 GEMMs of the full similarity (5 x (3000 x 1280) @
(1280 x 15000); cross_distance computes each symmetric block once, half of that), and with the
analyses that follow the ranks. The ranks are checked against a
per-query loop on a subset. Run:
    OPENBLAS_THREAD_TIMEOUT=4 PYTHONPATH=src python benchmarks/o2i_eval_speed.py [--objects 3000]
"""

from __future__ import annotations

import argparse
import os
import platform

import numpy as np
from _timing import best_of

from rscale.core import o2i


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, default=3000)
    ap.add_argument("--distances", type=int, default=5)
    ap.add_argument("--dim", type=int, default=1280)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--block", type=int, default=256, help="objects per block of cross_distance")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    n, v, d = args.objects, args.distances, args.dim
    ident = rng.standard_normal((n, 1, d)).astype(np.float32)
    desc = ident + 4.0 * rng.standard_normal((n, v, d)).astype(np.float32)
    desc /= np.linalg.norm(desc, axis=2, keepdims=True)
    dist = np.geomspace(1.0, 3.3, v)
    flat = desc.reshape(n * v, d)

    def gemms():
        for q in range(v):
            for a in range(0, n, 512):
                desc[a:a + 512, q] @ flat.T

    t_gemm, _ = best_of(gemms, args.repeat)
    t_eval, cd = best_of(lambda: o2i.cross_distance(desc, dist, block=args.block), args.repeat)
    t_an, _ = best_of(lambda: (cd.table(), o2i.recall_by_ratio(cd), o2i.asymmetry(cd),
                               o2i.decompose(cd.recall(1), np.clip(cd.recall(1) + 0.1, 0, 1))), 3)
    # correctness on 20 queries of one pair, by a loop
    p = cd.pair_index(0, v - 1)
    for i in rng.choice(n, 20, replace=False):
        s = desc[i, 0] @ flat.T
        pos = s[i * v + v - 1]
        s[i * v:(i + 1) * v] = -np.inf
        assert cd.ranks[p, i] == 1 + np.count_nonzero(s >= pos)
    threads = os.environ.get("OMP_NUM_THREADS") or os.environ.get("OPENBLAS_NUM_THREADS") or "default"
    print(f"machine: {platform.machine()} {os.cpu_count()} cpus (BLAS threads: {threads}), python "
          f"{platform.python_version()}, numpy {np.__version__}")
    print(f"{n} objects x {v} distances x {d}-d: {v * (v - 1)} ordered pairs, a {n * v:,} x {n * v:,} similarity")
    gflop = 2.0 * (n * v) ** 2 * d / 1e9
    print(f"bare float32 GEMMs, full ({gflop:.0f} GFLOP) {t_gemm:7.2f} s  ({gflop / t_gemm:.0f} GFLOP/s)")
    print(f"cross_distance (symmetric blocks of {args.block}: half the GEMM flops + masked ranks) "
          f"{t_eval:7.2f} s  ({t_eval / t_gemm:.2f}x the full GEMMs)")
    print(f"tables, Fig. 2, asymmetry, decomposition {t_an * 1e3:7.1f} ms")
    print(f"R@1 over pairs: mean {cd.recall(1).mean():.3f}")


if __name__ == "__main__":
    main()
