"""Query-path speed: answering from stored hardness in process, and the CLI's cold start.

Targets (issue 4): a query over a stored hardness table of 10k queries answers in milliseconds
in process; `rscale query` cold start close to the floor of importing duckdb + pyarrow. All
figures are measured side by side in this run.

Run: .venv/bin/python benchmarks/query_speed.py
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _timing import median_of


def timed(cmd, env, repeat=5):
    """Median wall time of running ``cmd`` (a fresh process each time)."""
    return median_of(lambda: subprocess.run(cmd, env=env, check=True, capture_output=True), repeat)[0]


def main():
    from rscale import api
    from rscale.core.estimators.methods import estimate
    from rscale.sim.benchmark import SimSpec, sample, simulate
    from rscale.store.hardness_file import write_hardness

    tmp = Path(tempfile.mkdtemp())
    bench = simulate(SimSpec(name="speed", family="gaussian", n_queries=10_000, mean_positives=6.0), seed=0)
    ss = sample(bench, 5_000_000, k=4000, seed=0)
    est = estimate(ss, "evt")
    # 16 stored replicates (the interval's input; their values do not change the cost, so they are
    # the estimate times log-normal noise here instead of 16 half-sample fits of 10k queries)
    from dataclasses import replace
    rng = np.random.default_rng(0)
    est = replace(est, replicates=np.clip(est.x[:, None] * np.exp(rng.normal(0, 0.3, (est.x.size, 16))), 0, 1))
    h = tmp / "h.parquet"
    write_hardness(est, ss, h)
    reg = tmp / "reg"
    api.register(h, None, registry=reg)
    # a catalog not written in the last seconds, as in use (a just-written one is never cached)
    os.utime(reg / "catalog.duckdb", (time.time() - 60, time.time() - 60))
    q = "mAP@1000 at N=1e8 for speed"
    from rscale.store import registry as registry_module

    def clear_caches():
        if hasattr(registry_module, "clear_caches"):        # catalog rows, verified blobs, decoded tables
            registry_module.clear_caches()
        else:                                               # rscale before the verified read path
            registry_module._CATALOG_CACHE.clear()
            registry_module._decoded_hardness.cache_clear()
    t0 = time.perf_counter()
    api.query(q, reg, bootstrap=0)   # first query of a process: opens the catalog, decodes Parquet
    t_first = time.perf_counter() - t0
    t_uncached, _ = median_of(lambda: (clear_caches(), api.query(q, reg, bootstrap=0)), repeat=10)
    from rscale.store.registry import Registry
    v = Registry(reg).get("speed")
    blob = Registry(reg).blob_path(v.hardness)
    from hashlib import sha256
    t_hash, _ = median_of(lambda: sha256(blob.read_bytes()).hexdigest(), repeat=20)
    t_query, _ = median_of(lambda: api.query(q, reg, bootstrap=200, ci_kind="population"))
    t_point, _ = median_of(lambda: api.query(q, reg, bootstrap=0, ci_kind="population"))
    t_bench, _ = median_of(lambda: api.query(q, reg))
    from rscale.core.law import Hardness, map_at_k
    hh = Hardness.from_flat(est.x, est.offsets)
    t_law, _ = median_of(lambda: map_at_k(hh, 1e8, 1000), repeat=50)
    t_query_1000, _ = median_of(lambda: api.query(q, reg, bootstrap=1000, ci_kind="population"))
    env = {**os.environ, "RSCALE_REGISTRY": str(reg)}
    py = sys.executable
    t_floor = timed([py, "-c", "import duckdb, pyarrow.parquet"], env)
    t_floor_all = timed([py, "-c", "import duckdb, pyarrow.parquet, typer, rich, numpy"], env)
    t_help = timed([py, "-m", "rscale.cli", "--help"], env)
    t_cli = timed([py, "-m", "rscale.cli", "query", q, "--format", "json"], env)
    t_cli0 = timed([py, "-m", "rscale.cli", "query", q, "--format", "json", "--bootstrap", "0"], env)
    probe = ("import sys; from rscale.cli import main; main(['query', %r, '--format', 'json', '--bootstrap', '0']); "
             "print('pandas' in sys.modules, file=sys.stderr)" % q)
    pandas_loaded = subprocess.run([py, "-c", probe], env=env, capture_output=True, text=True).stderr.strip()[-5:]
    print(f"machine: {platform.machine()}, Python {platform.python_version()}, numpy {np.__version__}")
    print(f"registry with one version: {ss.n_queries} queries, {ss.n_positives} positives")
    print(f"in process, the law alone (hardness in memory)    {t_law * 1e3:8.1f} ms")
    print(f"in process, first api.query of the process, no CI {t_first * 1e3:8.1f} ms")
    print(f"in process, api.query, no CI, memory caches clear {t_uncached * 1e3:8.1f} ms")
    print(f"sha256 of the hardness blob ({blob.stat().st_size / 1e6:.1f} MB)          {t_hash * 1e3:8.1f} ms")
    print(f"in process, api.query, population --bootstrap 0 (cached){t_point * 1e3:7.1f} ms")
    print(f"in process, api.query, benchmark interval (16 replicates, the default) {t_bench * 1e3:6.1f} ms")
    print(f"in process, api.query, population (200 bootstrap resamples)  {t_query * 1e3:8.1f} ms")
    print(f"in process, api.query, population (1000 bootstrap resamples) {t_query_1000 * 1e3:8.1f} ms")
    print(f"cold: python -c 'import duckdb, pyarrow.parquet'   {t_floor * 1e3:8.0f} ms (floor)")
    print(f"cold: + typer, rich, numpy                          {t_floor_all * 1e3:8.0f} ms")
    print(f"cold: rscale --help                                 {t_help * 1e3:8.0f} ms ({t_help / t_floor:.2f}x floor)")
    print(f"cold: rscale query ... --format json                {t_cli * 1e3:8.0f} ms ({t_cli / t_floor:.2f}x floor)")
    print(f"cold: rscale query ... --format json --bootstrap 0  {t_cli0 * 1e3:8.0f} ms ({t_cli0 / t_floor:.2f}x floor)")
    print(f"cold: pandas imported by rscale query               {pandas_loaded.strip()}")


if __name__ == "__main__":
    main()
