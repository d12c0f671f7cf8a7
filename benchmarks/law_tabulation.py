"""The shipped table of window sums against summing every window, side by side in one process
(issue 14's 10 ms goal; docs/benchmarks.md, "Tabulated window sums, shipped").

The expected mode sums, per element of a stack (position j, hardness x), the Binomial(N, x) pmf
times j / (j + m) over a window of +-10 sd around N x, cut at m = k - j: `rscale.core.law._summed`.
Since the table (`rscale.core.window_table`), positions j <= 32 of a large enough input are read
off piecewise quintics in sqrt(N x) through those sums at nodes (`law._tabulated`). (The earlier
measure-once prototype of this script, cubic splines in log(N x), is at commit 164f994.)

Data: an evt-eb fit (its 16 posterior draws per positive, the stack a query sums) of a committed
real-set sample, tiled T times to reach 10k queries, in the position-major layout the law uses.
Prints, per N (1e8 and N = S, the back-test's), the summed and tabulated milliseconds (median of 5;
"table, built" clears the table cache first, so it includes the build; "table, cached" does not),
their ratios, and the table's largest absolute error against the summed windows, for AP@1000's
sums (j / (j + m)) and Recall@1000's (a CDF).

Run: PYTHONPATH=src .venv/bin/python benchmarks/law_tabulation.py
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
from rscale.core import law  # noqa: E402
from rscale.core.estimators.methods import estimate  # noqa: E402
from rscale.store.sample_stats_file import read_sample_stats  # noqa: E402


def median_ms(fn, rounds=5, before=None):
    times, value = [], None
    for _ in range(rounds):
        if before is not None:
            before()
        t0 = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times)), value


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sample", default=str(ROOT / "benchmarks/realset/data/draw-05pct-0.sample_stats.parquet"))
    ap.add_argument("--queries", type=int, default=10_000, help="tile the fit's queries up to this many")
    ap.add_argument("--k", type=int, default=1000)
    args = ap.parse_args()
    ss = read_sample_stats(args.sample)
    est = estimate(ss, "evt-eb")
    tiles = max(1, -(-args.queries // ss.n_queries))
    draws = np.tile(est.draws.T, (1, tiles))                                  # (D, P * tiles)
    sizes = np.diff(est.offsets)
    offsets = np.concatenate([[0], np.cumsum(np.tile(sizes, tiles))])
    h = law.Hardness.from_flat(draws, offsets)
    bp = h.by_position
    x, j = (h.x_by_position, bp.jf) if bp is not None else (h.x, h.jf)
    k = args.k
    print(f"{args.sample}: evt-eb, {ss.n_queries} queries x {tiles} = {ss.n_queries * tiles}, "
          f"{draws.shape[0]} draws, {x.size} elements, positions past {law._TABLE_ROWS} (summed): "
          f"{int(np.sum(np.broadcast_to(j > law._TABLE_ROWS, x.shape)))}")
    print(f"sums      N       summed ms  table, built ms  ratio  table, cached ms  ratio  max abs err")
    for n in (1e8, float(ss.n_sampled.max())):
        ni = int(n)
        for name, precision in (("AP", True), ("Recall", False)):
            t_ex, ex = median_ms(lambda: law._summed(x, j, ni, k - j, precision))
            t_b, tab = median_ms(lambda: law._binomial_window_sum(x, j, ni, k - j, precision, cut=k),
                                 before=law._window_table.cache_clear)
            t_c, tab = median_ms(lambda: law._binomial_window_sum(x, j, ni, k - j, precision, cut=k))
            print(f"{name:<9} {n:<7.0e} {t_ex:9.0f}  {t_b:15.1f}  {t_ex / t_b:5.1f}x  {t_c:16.1f}  "
                  f"{t_ex / t_c:5.1f}x  {np.abs(tab - ex).max():11.1e}"
                  + ("" if ni >= 4 * law.window_table.reach(k) ** 2 else "  (not tabulated: N < 4 reach(k)^2)"))


if __name__ == "__main__":
    main()
