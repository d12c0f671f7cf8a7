"""Peak memory and time of reading list columns: a generated sample-stats file read whole
(``read_sample_stats``, each run in a fresh process: peak RSS, Arrow pool peak), and each list
reader's own Arrow allocation (the sample-stats and reranked-input readers' list decoders on the
same table, in process).

Run: PYTHONPATH=src python benchmarks/list_read_memory.py [--queries 20000 --k 1000 --repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CHILD = r"""
import json, resource, sys, time
import pyarrow as pa
from rscale.store.sample_stats_file import read_sample_stats
t = time.perf_counter()
ss = read_sample_stats(sys.argv[1])
dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "arrow_peak_mib": pa.default_memory_pool().max_memory() / 2**20,
                  "top_scores_mib": ss.top_scores.nbytes / 2**20}))
"""


READER = r"""
import json, sys, time, tracemalloc
import pyarrow as pa, pyarrow.parquet as pq
from rscale.store.reranked_input_file import _lists
from rscale.store.sample_stats_file import _list_column
path, reader, name = sys.argv[1:4]
table = pq.read_table(path)
pool = pa.proxy_memory_pool(pa.default_memory_pool())   # counts only what the reader allocates
pa.set_memory_pool(pool)
kind = "str" if name == "positive_ids" else "float"
read = (lambda: _list_column(table, name, path, kind)) if reader == "sample stats" else (lambda: _lists(table, name, path, kind))
tracemalloc.start()
t = time.perf_counter()
values, _ = read()
ms = (time.perf_counter() - t) * 1e3
_, numpy_peak = tracemalloc.get_traced_memory()
print(json.dumps({"ms": ms, "arrow_peak_mib": pool.max_memory() / 2**20, "numpy_peak_mib": numpy_peak / 2**20,
                  "values_mib": values.nbytes / 2**20}))
"""


def generated(path: Path, q: int, k: int, p: int = 4, r: int = 200) -> None:
    from rscale.core.sample_stats import SampleStats
    from rscale.store.sample_stats_file import write_sample_stats
    rng = np.random.default_rng(0)
    top = -np.sort(-rng.random((q, k)), axis=1)
    ps = rng.random(q * p) * 0.5
    counts = (top[np.repeat(np.arange(q), p)] >= ps[:, None]).sum(axis=1)
    counts = np.where(counts >= k, k + 10, counts).astype(np.int64)
    write_sample_stats(SampleStats(
        query_ids=np.array([f"q{i}" for i in range(q)]), n_sampled=np.full(q, 10_000_000, np.int64),
        top_scores=top, pos_offsets=np.arange(q + 1, dtype=np.int64) * p,
        pos_ids=np.array([f"p{i}" for i in range(q * p)]), pos_scores=ps, pos_counts=counts,
        meta={"k": str(k)}, top_rerank=top[:, :r] * 0.5, pos_rerank=ps * 0.5), path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=20_000)
    ap.add_argument("--k", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    import pyarrow as pa
    print(f"# Python {platform.python_version()}, numpy {np.__version__}, pyarrow {pa.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ss.parquet"
        generated(path, args.queries, args.k)
        print(f"# file {path.stat().st_size / 2**20:.0f} MiB, Q = {args.queries}, K = {args.k}, R = 200")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        runs = [json.loads(subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True,
                                          check=True, env=env).stdout) for _ in range(args.repeats)]
        best = min(runs, key=lambda r: r["seconds"])
        print(f"read_sample_stats: best {best['seconds']:.2f} s, peak RSS {min(r['peak_rss_mib'] for r in runs):.0f} MiB, "
              f"Arrow pool peak {best['arrow_peak_mib']:.0f} MiB (top_scores {best['top_scores_mib']:.0f} MiB)")
        print("| reader | column | ms | Arrow peak MiB | numpy peak MiB | values MiB |")
        print("|---|---|---|---|---|---|")
        for reader in ("sample stats", "reranked input"):
            for name in ("top_scores", "top_rerank_scores", "positive_ids"):
                out = [json.loads(subprocess.run([sys.executable, "-c", READER, str(path), reader, name],
                                                 capture_output=True, text=True, check=True, env=env).stdout)
                       for _ in range(args.repeats)]
                b = min(out, key=lambda r: r["ms"])
                print(f"| {reader} | {name} | {b['ms']:.1f} | {b['arrow_peak_mib']:.1f} | {b['numpy_peak_mib']:.1f} | "
                      f"{b['values_mib']:.1f} |")

if __name__ == "__main__":
    main()
