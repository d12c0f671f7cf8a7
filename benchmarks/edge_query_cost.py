"""What the edge average costs a first query (docs/benchmarks.md, "Two edge models, averaged"):
the CPU time of one cell's prediction and benchmark interval (mAP@1000 at N = 1e8, the back-test
included) on a decoded, read-only evt-eb table, with its two edge models and with the factor
dropped (one model, as before the build), interleaved rounds, median.

Run: PYTHONPATH=src .venv/bin/python benchmarks/edge_query_cost.py [--file HARDNESS] [--rounds 3]
(default: the largest hardness file with an edge factor in the accuracy table's cache)
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

import numpy as np


def largest_with_edge(cache: Path) -> Path:
    from rscale.store.hardness_file import read_hardness
    for p in sorted(cache.glob("hardness/*/h.parquet"), key=lambda p: -p.stat().st_size):
        if read_hardness(p)[0].edge_factor is not None:
            return p
    raise SystemExit(f"no hardness file with an edge factor under {cache}/hardness: run the accuracy table or "
                     "rscale estimate first, and pass it with --file")


def main(argv=None):
    from rscale.core.interval import predicted_intervals
    from rscale.store.hardness_file import read_hardness
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--file", default=None)
    ap.add_argument("--cache", default=str(Path.home() / ".cache" / "rscale" / "accuracy_table"))
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    path = Path(a.file) if a.file else largest_with_edge(Path(a.cache))
    est, _ = read_hardness(path)
    print(f"{path}: {est.offsets.size - 1} queries, {est.x.size} positives, {est.draws.shape[1]} draws")
    times = {"one model (factor dropped)": [], "two edge models": []}
    for _ in range(a.rounds):
        for name in times:
            e, info = read_hardness(path)
            if name.startswith("one"):
                e = replace(e, edge_factor=None)
            for arr in (e.x, e.offsets, e.draws, e.replicates, e.edge_factor):
                if arr is not None:
                    arr.flags.writeable = False
            t = time.process_time()
            predicted_intervals(e, [("AP", 1000, 1e8)], ci_kind="benchmark", backtest=info["backtest"])
            times[name].append(time.process_time() - t)
    for name, v in times.items():
        print(f"{name}: first query {np.median(v) * 1e3:.0f} ms CPU (median of {len(v)}: "
              + ", ".join(f"{x * 1e3:.0f}" for x in v) + ")")
    print(f"ratio {np.median(times['two edge models']) / np.median(times['one model (factor dropped)']):.2f}")


if __name__ == "__main__":
    main()
