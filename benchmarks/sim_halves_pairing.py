"""Two simulated backbones paired by the simulator's recorded halves (``rscale simulate --halves``,
:func:`rscale.sim.benchmark.simulated_halves`): the paired benchmark interval of A - B against the
exact difference of their realised values, and its width against the two own intervals combined.

Per seed: presets A and B (different score-law families, the same query ids) sampled with the
same seed, S and K and halves on (one split key), each estimated with evt, 16 replicates and the
back-test, as ``rscale estimate`` does; truth per backbone is the exact realised metric of a
gallery of N (``sim.truth``), and the difference's truth their difference.

Run: PYTHONPATH=src python benchmarks/sim_halves_pairing.py [--a sim_bounded --b sim_gaussian --seeds 8]
"""

from __future__ import annotations

import argparse
import platform
import time
from dataclasses import replace

import numpy as np

from _fits import fitted


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", default="sim_bounded")
    ap.add_argument("--b", default="sim_gaussian")
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--s", type=float, default=1e5)
    ap.add_argument("--k", type=int, default=400)
    ap.add_argument("--n", type=float, default=1e7)
    args = ap.parse_args(argv)
    from rscale import sim
    from rscale.core.interval import difference_intervals, predicted_intervals
    from rscale.core.replicates import split_key
    from rscale.sim.presets import PRESETS

    print(f"# Python {platform.python_version()}, numpy {np.__version__}; {args.a} - {args.b}, Q={args.queries}, "
          f"S={args.s:g}, K={args.k}, mAP@1000 at N={args.n:g}")
    print("| seed | truth A - B | estimate A - B | paired 95% interval | covers | own A, own B cover | unpaired covers | "
          "split keys equal | paired / own width |")
    print("|---|---|---|---|---|---|---|---|---|")
    cells, covered, unpaired, ratios, t0 = [("AP", 1000, args.n)], 0, 0, [], time.perf_counter()
    for seed in range(args.seeds):
        side = []
        for name in (args.a, args.b):
            bench = sim.simulate(replace(PRESETS[name], n_queries=args.queries), seed=seed)
            ss = sim.sample(bench, int(args.s), k=args.k, seed=seed, halves=True)
            side.append((bench, ss, *fitted(ss, per_factor=2)))
        (ba, sa, ea, ta), (bb, sb, eb, tb) = side
        t_a, t_b = (float(sim.truth(bn, sn, args.n, "AP", 1000, seed).mean()) for bn, sn in ((ba, sa), (bb, sb)))
        truth = t_a - t_b
        (pa, pb, lo, hi, _, _), = difference_intervals(ea, eb, cells, backtest_a=ta, backtest_b=tb)
        (_, la, ha, _), = predicted_intervals(ea, cells, backtest=ta)
        (_, lb, hb, _), = predicted_intervals(eb, cells, backtest=tb)
        ok = lo <= truth <= hi
        covered += ok
        ((qa, _, _, _),), ((qb, _, _, _),) = predicted_intervals(ea, cells), predicted_intervals(eb, cells)
        va, vb = float(qa.mean()), float(qb.mean())
        u_lo = va - vb - np.hypot(va - la, hb - vb)         # the two own intervals combined, each side
        u_hi = va - vb + np.hypot(ha - va, vb - lb)
        unpaired += u_lo <= truth <= u_hi
        own = f"{'yes' if la <= t_a <= ha else 'no'}, {'yes' if lb <= t_b <= hb else 'no'}"
        ratios.append((hi - lo) / np.hypot(ha - la, hb - lb))
        print(f"| {seed} | {truth:+.4f} | {pa.mean() - pb.mean():+.4f} | {lo:+.4f}..{hi:+.4f} | {'yes' if ok else 'no'} | {own} | "
              f"{'yes' if u_lo <= truth <= u_hi else 'no'} | {split_key(sa, splits=8) == split_key(sb, splits=8)} | {ratios[-1]:.2f} |")
    print(f"covered {covered}/{args.seeds} (unpaired {unpaired}/{args.seeds}); width ratio {min(ratios):.2f}..{max(ratios):.2f} (mean {np.mean(ratios):.2f}); "
          f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
