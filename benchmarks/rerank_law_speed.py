"""Speed of the reranked law (rscale.core.rerank_law): sample stats with rerank scores -> reranked
metric at N, for Q queries of G positives, K' = 1000, a 5% sample's top R reranked candidates.

Times the GPD-smoothed joint tail (joint_from_top_smoothed, once per sample) and the law per N in
both modes, side by side with the first-stage law (rscale.core.law.ap_at_k, expected mode) on the
same positives; the expected mode both as it is and as first written (``_expected_reference``),
with the largest per-query difference between the two.

Run:  PYTHONPATH=src python benchmarks/rerank_law_speed.py [--queries 1000] [--positives 5]
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

from rscale.core import law as first_law
from rscale.core import rerank_law as law


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--positives", type=int, default=5)
    ap.add_argument("--top", type=int, default=200, help="reranked top candidates of the sample per query")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    q, g, depth, s, n = args.queries, args.positives, 1000, 5_000_000, 1e8
    top = -np.sort(-rng.standard_normal((q, args.top)), axis=1) * 0.1 + 0.5
    t = rng.uniform(0.4, 0.9, q * g)
    x = rng.uniform(0, 2e-6, q * g)
    off = np.arange(q + 1) * g
    t0 = time.perf_counter()
    grid, joint = law.joint_from_top_smoothed(top, np.full(q, s), t, off)
    t_joint = time.perf_counter() - t0
    h = law.RerankedHardness.build(x, t, off, grid, joint)
    print(f"{platform.processor() or platform.machine()}, numpy {np.__version__}; Q={q}, G={g}, K'={depth}, "
          f"S={s:.0e}, N={n:.0e}, top {args.top} reranked")
    print(f"joint tail (GPD per slice, 48 slice sizes): {t_joint:.2f} s")
    import scipy.stats  # noqa: F401  (the reference's import, not timed)
    t0 = time.perf_counter()
    v = law.reranked_metric(h, "AP", n, depth, depth=depth, mode="plugin")
    dt = time.perf_counter() - t0
    print(f"reranked mAP@{depth} plugin  : {dt:.3f} s ({dt / q * 1e3:.3f} ms/query)  value {v:.4f}")
    for metric, k in (("AP", depth), ("R", 1)):
        t0 = time.perf_counter()
        old = law._expected_reference(h, metric, n, k, depth, 16)
        t_old = time.perf_counter() - t0
        t0 = time.perf_counter()
        new = law.reranked_per_query(h, metric, n, k, depth=depth, mode="expected")
        t_new = time.perf_counter() - t0
        name = f"mAP@{depth}" if metric == "AP" else "R@1"
        print(f"reranked {name} expected: reference {t_old:.2f} s, now {t_new:.3f} s ({t_old / t_new:.0f}x); "
              f"value {old.mean():.6f} vs {new.mean():.6f}, largest per-query difference {np.abs(old - new).max():.1e}")
    t0 = time.perf_counter()
    first_law.map_at_k(first_law.Hardness.from_flat(x, off), n, depth, mode="expected")
    print(f"first-stage mAP@{depth} expected (core.law): {time.perf_counter() - t0:.3f} s")


if __name__ == "__main__":
    main()
