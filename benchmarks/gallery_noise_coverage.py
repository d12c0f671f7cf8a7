"""The realised value's gallery noise in the benchmark interval: coverage and width with and
without the term, from the same stored estimates (docs/benchmarks.md, "The realised value's
gallery noise").

Reads the fits that benchmarks/accuracy_table.py keeps in its cache (run it first for the cells
wanted, e.g. ``--estimators evt-eb --fractions 0.01,0.05 --cache DIR``), and for each cell
recomputes what ``rscale query --ci benchmark`` reports (rscale.core.interval: the point, the
replicates' t half-width, the back-test band) twice: without the gallery-noise term and with it
(rscale.core.gallery_noise, the shipped default), against the cell's exact truth.

Run: PYTHONPATH=src .venv/bin/python benchmarks/gallery_noise_coverage.py --cache DIR [--sets a,b]
         [--fractions 0.01,0.05] [--method evt-eb]
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def latest(cache: Path, kind: str, key: str) -> dict | None:
    """The newest cached entry of ``key``, whatever its source digests (the fits are read back,
    not trusted for a table: this benchmark recomputes every interval from them)."""
    paths = sorted((cache / kind).glob(f"{key}-*.json"), key=lambda p: p.stat().st_mtime)
    return json.loads(paths[-1].read_text()) if paths else None


def cell_rows(cache: Path, sets, fractions, method: str):
    import accuracy_table as T
    from rscale.core.interval import _bands, _cell_predictions, metric_intervals
    from rscale.core.prediction import gallery_sd
    from rscale.store.hardness_file import read_hardness

    for set_name in sets:
        draws = T.real_draws(set_name, fractions, None) if set_name.startswith("realset") else T.sim_draws(set_name, fractions, 1)
        for d in draws:
            if d.sample is not None:
                sample, truth = Path(d.sample), d.truth
            else:
                entry = latest(cache, "samples", T._sample_key(d))
                if entry is None:
                    continue
                sample, truth = Path(entry["sample"]), entry["truth"]
            fit = latest(cache, "fits", T.fit_key(sample, method))
            if fit is None:
                continue
            est, info = read_hardness(Path(fit["dir"]) / fit["file"])
            cells = [("AP", 1000, float(d.n))]
            pqs, reps, bts = _cell_predictions(est, cells, T.query_mode(method), "benchmark", 0, None, info["backtest"])
            g = np.array([gallery_sd(est, "AP", float(d.n), 1000)])
            _, lo0, hi0 = metric_intervals(pqs, reps, backtest=_bands(bts))
            v, lo1, hi1 = metric_intervals(pqs, reps, backtest=_bands(bts), gallery_sd=g)
            yield {"set": set_name, "scenario": d.scenario, "fraction": d.fraction, "draw": d.draw, "truth": truth,
                   "value": float(v[0]), "g": float(g[0]), "lo0": float(lo0[0]), "hi0": float(hi0[0]),
                   "lo1": float(lo1[0]), "hi1": float(hi1[0])}


def main(argv=None):
    import accuracy as A
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", required=True)
    ap.add_argument("--sets", default=None, help="comma-separated (default: realset, realset2 and every simulator set)")
    ap.add_argument("--fractions", default="0.01,0.05")
    ap.add_argument("--method", default="evt-eb")
    args = ap.parse_args(argv)
    sets = args.sets.split(",") if args.sets else ["realset", "realset2", *A.SETS]
    fractions = [float(f) for f in args.fractions.split(",")]
    rows = list(cell_rows(Path(args.cache), sets, fractions, args.method))
    if not rows:
        sys.exit("no cached fits for these cells: run benchmarks/accuracy_table.py with this --cache first")
    groups = defaultdict(list)
    for r in rows:
        sim_set = not r["set"].startswith("realset")
        groups[(r["set"], r["fraction"])].append(r)
        if sim_set:
            groups[("simulator, pooled", r["fraction"])].append(r)
    print(f"{args.method}, mAP@1000, benchmark interval (95%) without / with the gallery-noise term, same estimates")
    print("| set | fraction | cells | median g | covered without | width without | covered with | width with | width ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (s, f), rs in groups.items():
        c0 = sum(r["lo0"] <= r["truth"] <= r["hi0"] for r in rs)
        c1 = sum(r["lo1"] <= r["truth"] <= r["hi1"] for r in rs)
        w0 = np.mean([r["hi0"] - r["lo0"] for r in rs])
        w1 = np.mean([r["hi1"] - r["lo1"] for r in rs])
        n = len(rs)
        print(f"| {s} | {f:.0%} | {n} | {np.median([r['g'] for r in rs]):.4f} | {c0}/{n} ({c0 / n:.0%}) | {w0:.4f} | "
              f"{c1}/{n} ({c1 / n:.0%}) | {w1:.4f} | {w1 / w0:.3f} |")
    gained = [r for r in rows if not r["lo0"] <= r["truth"] <= r["hi0"] and r["lo1"] <= r["truth"] <= r["hi1"]]
    print(f"\ncells the term brings inside: {len(gained)}; "
          + "; ".join(f"{r['set']} {r['scenario']} {r['fraction']:.0%} (err {r['value'] - r['truth']:+.4f}, g {r['g']:.4f})"
                      for r in gained))


if __name__ == "__main__":
    main()
