"""Would tabulating the expected mode's g_j(x) make a first query fast? A measure-once prototype,
not the shipped path (issue 14's 10 ms goal; docs/benchmarks.md, "Tabulated window sums").

The expected mode sums, per element of a stack (position j, hardness x), the Binomial(N, x) pmf
times j / (j + m) over a window of +-10 sd around N x, cut at m = k - j (`rscale.core.law.
_window_sums`). The alternative: per whole j, evaluate that exact sum at nodes in t = log(N x)
spaced alpha / sqrt(1 + N x) apart (the pmf's own scale; the cut-off's transition is about
1 / sqrt(k) wide in t), and read every element off a cubic spline through them.

Data: an evt-eb fit (its 16 posterior draws per positive, the stack a query sums) of a committed
real-set sample, tiled T times to reach 10k queries. Prints, side by side in one process, the
exact sums' and the table's milliseconds (median of 3), their ratio, the terms the nodes cost, and
the table's largest absolute and relative error, at N = 1e8 and N = S (the back-test's N).

Run: OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 PYTHONPATH=src .venv/bin/python benchmarks/law_tabulation.py
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
from scipy.interpolate import CubicSpline  # noqa: E402

from rscale.core import law  # noqa: E402
from rscale.core.estimators.methods import estimate  # noqa: E402
from rscale.store.sample_stats_file import read_sample_stats  # noqa: E402


def node_grid(lam_lo: float, lam_hi: float, alpha: float) -> np.ndarray:
    t = [np.log(lam_lo)]
    while t[-1] < np.log(lam_hi) or len(t) < 4:
        t.append(t[-1] + alpha / np.sqrt(1.0 + np.exp(t[-1])))
    return np.array(t)


def tabulated_ap_sums(x, j, n: int, k: int, alpha: float):
    """(sums, node terms): E[1{K <= k - j} j / (j + K)] for flat x, whole j, read off splines."""
    out = np.where(x <= 0, 1.0, 0.0)
    lam = n * x
    terms = 0
    for jj in np.unique(j):
        c = k - jj
        sel = np.flatnonzero((j == jj) & (x > 0))
        if c < 0 or sel.size == 0:
            continue
        beyond = c + law._WINDOW_SD * np.sqrt(c) + 2 * law._WINDOW_SD + 1      # the sum is 0 past it
        ls = lam[sel]
        use = ls <= beyond
        if not use.any():
            continue
        t = node_grid(0.999 * ls[use].min(), 1.001 * min(ls[use].max(), beyond), alpha)
        ln = np.exp(t)
        g = law._window_sums(ln / n, np.full(t.shape, float(jj)), n, np.full(t.shape, float(c)), True)
        lo = np.maximum(0, np.floor(ln - law._WINDOW_SD * np.sqrt(ln) - law._WINDOW_SD))
        hi = np.minimum(c, np.ceil(ln + law._WINDOW_SD * np.sqrt(ln) + law._WINDOW_SD))
        terms += int(np.sum(np.maximum(hi - lo + 1, 0)))
        out[sel[use]] = CubicSpline(t, g)(np.log(ls[use]))
    return out, terms


def median_ms(fn, rounds=3):
    times, value = [], None
    for _ in range(rounds):
        t0 = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times)), value


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sample", default=str(ROOT / "benchmarks/realset/data/draw-05pct-0.sample_stats.parquet"))
    ap.add_argument("--queries", type=int, default=10_000, help="tile the fit's queries up to this many")
    ap.add_argument("--alphas", default="0.1,0.05")
    args = ap.parse_args()
    ss = read_sample_stats(args.sample)
    est = estimate(ss, "evt-eb")
    tiles = max(1, -(-args.queries // ss.n_queries))
    draws = np.tile(est.draws.T, (1, tiles))                                  # (D, P * tiles)
    sizes = np.diff(est.offsets)
    offsets = np.concatenate([[0], np.cumsum(np.tile(sizes, tiles))])
    h = law.Hardness.from_flat(draws, offsets)
    x, j = np.broadcast_arrays(h.x_by_position if h.by_position is not None else h.x,
                               h.by_position.jf if h.by_position is not None else h.jf)
    print(f"{args.sample}: evt-eb, {ss.n_queries} queries x {tiles} = {ss.n_queries * tiles}, "
          f"{draws.shape[0]} draws, {x.size} elements")
    print("N      alpha  exact ms  table ms  ratio  node terms  max abs err  max rel err (exact > 1e-6)")
    for n in (1e8, float(ss.n_sampled.max())):
        ni = int(n)
        t_ex, ex = median_ms(lambda: law._binomial_window_sum(x, j, ni, 1000 - j, True))
        for alpha in (float(a) for a in args.alphas.split(",")):
            t_tab, (tab, terms) = median_ms(lambda: tabulated_ap_sums(x.ravel(), j.ravel(), ni, 1000, alpha))
            tab = tab.reshape(x.shape)
            err = np.abs(tab - ex)
            big = ex > 1e-6
            print(f"{n:<6.0e} {alpha:<6} {t_ex:8.0f}  {t_tab:8.0f}  {t_ex / t_tab:5.1f}  {terms:10d}  "
                  f"{err.max():11.1e}  {np.max(err[big] / ex[big]):.1e}")


if __name__ == "__main__":
    main()
