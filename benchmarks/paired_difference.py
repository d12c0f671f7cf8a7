"""The paired difference of two versions (``rscale query "... for A vs B"``) against the unpaired
combination of their own intervals, on the simulator, where the exact difference in one shared
gallery is known (docs/design.md, "Uncertainty reported with a prediction"; docs/benchmarks.md
keeps the figures).

Per seed: a benchmark a (``--family``, ``--queries``), b = a with every positive ``--factor``
times harder (the same distractors: :func:`rscale.sim.with_positives`), one sample of S
distractors of each drawn with the same seed (the same top-K scores, one split key), each
estimated with evt, 8 half-sample replicates and 2 back-test shares per factor. Printed: each
version's error, the difference's error, the paired interval (back-test term included) and whether
it covers the exact difference (:func:`rscale.sim.truth_shared`), and the width ratio of the
paired replicate interval to the two own replicate intervals combined in quadrature.

Run: PYTHONPATH=src .venv/bin/python benchmarks/paired_difference.py [--seeds 8] [--n 1e7] [--s 1e5]
"""

from __future__ import annotations

import argparse
import platform

import numpy as np

from rscale import sim
from rscale.core.interval import difference_intervals, predicted_intervals
from rscale.core.replicates import split_key
from rscale.sim.benchmark import HardnessLaw, SimSpec

from _fits import fitted


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--family", default="gaussian")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--s", type=float, default=1e5)
    ap.add_argument("--k", type=int, default=400)
    ap.add_argument("--n", type=float, default=1e7)
    ap.add_argument("--factor", type=float, default=1.6)
    ap.add_argument("--splits", type=int, default=4)
    a = ap.parse_args()
    print(f"# {platform.python_version()} numpy {np.__version__}; {a.family}, {a.queries} queries, S={a.s:g}, "
          f"K={a.k}, N={a.n:g}, b = a x {a.factor:g} harder, evt, {2 * a.splits} replicates")
    spec = SimSpec(name="a", family=a.family, n_queries=a.queries,
                   hardness=HardnessLaw("loguniform", 1.0, 1e-9, 1e-2, immune=0.02))
    cells = [("AP", 1000, a.n)]
    print("seed | err a | err b | A-B | exact | err A-B | paired interval | covers | paired/unpaired width")
    covered, ratios = 0, []
    for seed in range(a.seeds):
        bench_a = sim.simulate(spec, seed=seed)
        bench_b = sim.with_positives(bench_a, bench_a.pos_x * a.factor, "b")
        ss_a, ss_b = (sim.sample(b, int(a.s), k=a.k, seed=seed) for b in (bench_a, bench_b))
        assert split_key(ss_a, splits=a.splits) == split_key(ss_b, splits=a.splits)
        (ea, ba), (eb, bb) = fitted(ss_a, splits=a.splits, per_factor=2), fitted(ss_b, splits=a.splits, per_factor=2)
        ta, tb = (float(t.mean()) for t in sim.truth_shared([bench_a, bench_b], [ss_a, ss_b], a.n, "AP", 1000, seed))
        (pa, pb, lo, hi, _, _), = difference_intervals(ea, eb, cells, backtest_a=ba, backtest_b=bb)
        (_, _, lo0, hi0, _, _), = difference_intervals(ea, eb, cells)
        (_, la, ha, _), = predicted_intervals(ea, cells)
        (_, lb, hb, _), = predicted_intervals(eb, cells)
        d, td = pa.mean() - pb.mean(), ta - tb
        ratio = (hi0 - lo0) / np.hypot(ha - la, hb - lb)
        covered += lo <= td <= hi
        ratios.append(ratio)
        print(f"{seed} | {pa.mean() - ta:+.3f} | {pb.mean() - tb:+.3f} | {d:+.4f} | {td:+.4f} | {d - td:+.4f} | "
              f"[{lo:+.4f}, {hi:+.4f}] | {'yes' if lo <= td <= hi else 'NO'} | {ratio:.2f}")
    print(f"covered {covered}/{a.seeds}; width ratio {min(ratios):.2f}..{max(ratios):.2f} (mean {np.mean(ratios):.2f})")


if __name__ == "__main__":
    main()
