"""Cold `rscale query` of this checkout against another source tree, interleaved (same machine
load for both), each on its own registry holding the same hardness table (10k queries).

Run: .venv/bin/python benchmarks/cold_query_compare.py OTHER_SRC [ROUNDS] [ESTIMATOR]
     (OTHER_SRC: the src/ folder of another checkout, e.g. `git worktree add /tmp/main main`;
     ESTIMATOR: evt-eb, the default, whose table stores posterior draws and answers in expected
     mode, a fit of ~1-2 min here; or evt)
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = str(Path(__file__).resolve().parent.parent / "src")
MAKE = """
import sys
from rscale.core.estimators.methods import estimate
from rscale.sim.benchmark import SimSpec, sample, simulate
from rscale.store.hardness_file import write_hardness
bench = simulate(SimSpec(name="speed", family="gaussian", n_queries=10_000, mean_positives=6.0), seed=0)
ss = sample(bench, 5_000_000, k=4000, seed=0)
write_hardness(estimate(ss, sys.argv[2]), ss, sys.argv[1])
"""


def main():
    other, rounds = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 15
    estimator = sys.argv[3] if len(sys.argv) > 3 else "evt-eb"
    trees = {"other": str(Path(other).resolve()), "this": HERE}
    py, tmp = sys.executable, Path(tempfile.mkdtemp())
    h = tmp / "h.parquet"
    subprocess.run([py, "-c", MAKE, str(h), estimator], env={**os.environ, "PYTHONPATH": HERE}, check=True)
    q = "mAP@1000 at N=1e8 for speed"

    def cli(name, *extra):
        return subprocess.run([py, "-m", "rscale.cli", "query", q, "-r", str(tmp / name), "--format", "json", *extra],
                              env={**os.environ, "PYTHONPATH": trees[name]}, check=True, capture_output=True)

    for name, src in trees.items():
        subprocess.run([py, "-c", f"from rscale import api; api.register({str(h)!r}, None, {str(tmp / name)!r})"],
                       env={**os.environ, "PYTHONPATH": src}, check=True)
        os.utime(tmp / name / "catalog.duckdb", (time.time() - 60, time.time() - 60))
        cli(name)                                                    # writes the catalog snapshot
    times = {(n, b): [] for n in trees for b in ("0", "1000")}
    for _ in range(rounds):
        for name in trees:
            for b in ("0", "1000"):
                t = time.perf_counter()
                cli(name, "--bootstrap", b)
                times[(name, b)].append(time.perf_counter() - t)
    floor = []
    for _ in range(rounds):
        t = time.perf_counter()
        subprocess.run([py, "-c", "import duckdb, pyarrow.parquet"], check=True)
        floor.append(time.perf_counter() - t)
    print(f"floor: python -c 'import duckdb, pyarrow.parquet'  median {statistics.median(floor) * 1e3:6.0f} ms")
    for (name, b), ts in times.items():
        print(f"{name:5s} ({trees[name]}) rscale query --bootstrap {b:>4s}: median {statistics.median(ts) * 1e3:6.0f} ms "
              f"(min {min(ts) * 1e3:.0f}, {len(ts)} runs)")


if __name__ == "__main__":
    main()
