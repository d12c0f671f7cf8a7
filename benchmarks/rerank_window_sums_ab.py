"""A/B of the reranked law's Binomial window sums: the rerank-only copy that
rscale.core.rerank_law kept until it called rscale.core.law._window_sums (read from git HEAD~1's
history by commit, --rev) against the shared one, on the shapes of the survivor levels (m = K'
minus survivors, cut-off k - j, rho in (1e-4, 1)). Prints median ms of 5 calls and the largest
relative difference. Run: OMP_NUM_THREADS=1 .venv/bin/python benchmarks/rerank_window_sums_ab.py
"""
import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
from rscale.core import law  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--rev", default="0eaac0a", help="a commit whose rerank_law.py still has _window_sums_one_n")
args = ap.parse_args()
old_src = subprocess.run(["git", "-C", str(ROOT), "show", f"{args.rev}:src/rscale/core/rerank_law.py"],
                         capture_output=True, text=True, check=True).stdout
a, b = old_src.index("def _window_sums_one_n("), old_src.index("def _expected_all(")
ns = {"np": np, "_WINDOW_SD": law._WINDOW_SD, "_CHUNK_TERMS": law._CHUNK_TERMS}
exec(old_src[a:b], ns)
old = ns["_window_sums_one_n"]
rng = np.random.default_rng(0)
for m, size in ((1000, 20000), (950, 200000), (5000, 50000)):
    lb = law.log_choose(m, np.arange(m + 1, dtype=float))
    rho = np.exp(rng.uniform(np.log(1e-4), 0, size))
    j = rng.integers(1, 6, size).astype(float)
    mm = 1000 - j
    for prec in (True, False):
        t = [[], []]
        for _ in range(5):
            t0 = time.perf_counter()
            vo = old(rho, j, m, mm, prec, lb)
            t[0].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            vn = law._window_sums(rho, j, m, mm, prec)          # builds its own table per call
            t[1].append(time.perf_counter() - t0)
        rel = np.max(np.abs(vo - vn) / np.maximum(np.abs(vo), 1e-300))
        print(f"m={m} elements={size} precision={prec}: rerank copy {1e3 * np.median(t[0]):.1f} ms, "
              f"shared {1e3 * np.median(t[1]):.1f} ms, ratio {np.median(t[0]) / np.median(t[1]):.2f}x, "
              f"max rel diff {rel:.2e}")
