"""What the benchmark interval's width is made of, per sample fraction, on the accuracy table's
simulator cells (docs/benchmarks.md, "Why the width does not shrink from 5% to 10%").

For each cell whose fit benchmarks/accuracy_table.py keeps in its cache, recomputes from the
stored hardness file what ``rscale query --ci benchmark`` reports for mAP@1000 at N = 1e8
(rscale.core.interval) and its parts: the replicates' t half-width, the gallery-noise term z g,
the back-test band's width and its carried error |e(f)|, and the stored shares' mean error at
N = S per factor (halves, m = 2; quarters, m = 4). Means per fraction, over all cells and split
into the cluster families (neardup, bigdup) and the rest. Reads only; fits nothing.

Run: PYTHONPATH=src .venv/bin/python benchmarks/interval_parts.py [--cache DIR] [--method evt-eb]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
SETS = ("design", "holdout", "fresh", "fresh2", "fresh3", "fresh4", "fresh5", "fresh6")
CLUSTER = ("neardup", "bigdup")


def cell_parts(est, bt, n: float, mode: str) -> dict:
    from rscale.core.backtest import factor_errors
    from rscale.core.interval import _bands, _cell_predictions, _t_quantile, metric_intervals
    from rscale.core.prediction import gallery_sd
    pqs, reps, bts = _cell_predictions(est, [("AP", 1000, n)], mode, "benchmark", 0, None, bt)
    m = reps[0].mean(axis=-1)
    sd = float(np.sqrt(np.mean(((m[0::2] - m[1::2]) / 2.0) ** 2)))
    g = gallery_sd(est, "AP", n, 1000)
    v, lo, hi = metric_intervals(pqs, reps, backtest=_bands(bts), gallery_sd=np.array([g]))
    b = bts[0]
    shares = {} if bt is None else {m_: float(factor_errors(est, bt, "AP", 1000, mode, m_).mean())
                                    for m_ in bt.factors(est)}
    return {"t_sd": _t_quantile(0.95, m.size // 2) * sd, "z_g": 1.959964 * g, "value": float(v[0]),
            "band": np.nan if b is None else b.high - b.low, "carried": np.nan if b is None else abs(b.at_n),
            "width": float(hi[0] - lo[0]), "e2": shares.get(2, np.nan), "e4": shares.get(4, np.nan)}


def main(argv=None):
    import accuracy_table as T
    from gallery_noise_coverage import latest
    from rscale.store.hardness_file import read_hardness
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", default=os.path.expanduser("~/.cache/rscale/accuracy_table"))
    ap.add_argument("--method", default="evt-eb")
    ap.add_argument("--fractions", default="0.01,0.02,0.05,0.1")
    a = ap.parse_args(argv)
    cache = Path(a.cache)
    print("| fraction | cells | replicates t sd | gallery z g | back-test band width | carried abs e(f) | "
          "interval width | MAE | halves' e_2: cluster / other | quarters' e_4: cluster / other |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for f in (float(x) for x in a.fractions.split(",")):
        rows = []
        for s in SETS:
            for d in T.sim_draws(s, [f], 1):
                entry = latest(cache, "samples", T._sample_key(d))
                fit = None if entry is None else latest(cache, "fits", T.fit_key(Path(entry["sample"]), a.method))
                if fit is None:
                    continue
                est, info = read_hardness(Path(fit["dir"]) / fit["file"])
                r = cell_parts(est, info["backtest"], float(d.n), T.query_mode(a.method))
                r.update(error=r["value"] - entry["truth"], cluster=d.scenario.split("/")[0] in CLUSTER)
                rows.append(r)
        if not rows:
            continue

        def mean(key, sel=None):
            xs = [r[key] for r in rows if sel is None or r["cluster"] == sel]
            return float(np.nanmean(xs)) if xs else float("nan")
        print(f"| {f:.0%} | {len(rows)} | {mean('t_sd'):.4f} | {mean('z_g'):.4f} | {mean('band'):.4f} | {mean('carried'):.4f} | "
              f"{mean('width'):.4f} | {np.mean([abs(r['error']) for r in rows]):.4f} | {mean('e2', True):+.4f} / {mean('e2', False):+.4f} | "
              f"{mean('e4', True):+.4f} / {mean('e4', False):+.4f} |", flush=True)


if __name__ == "__main__":
    main()
