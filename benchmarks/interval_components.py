"""The parts of each accuracy-table cell's benchmark interval, from the table's own cached fits:
design data for an interval round, computed without fitting anything.

For every evt-eb cell of the named sets whose fit the accuracy table's cache holds (a simulator
draw's sample and fit, or a committed real-set draw's fit, still valid against today's source),
the hardness file is read and the interval the shipped path reports is taken apart into what
:func:`rscale.core.interval.metric_intervals` joins: the point v, the edge models v_U and v_C,
the back-test band (e_lo, e_hi) at the cell's factor f = N / S, the replicate half-width t sd and
the gallery term z g (half = their quadrature sum), with the truth, the shipped interval and
whether it covers (the rows in ``benchmarks/interval_components_rows/`` were read before the
quadrature round, when the shipped interval joined the two reaches past U by their maximum).
``check`` is the largest |difference| between the interval rebuilt here from the parts and the
shipped one (0 up to rounding). Rows go to ``--out`` (one JSON file per set).

Only seen sets: the accuracy table's sets (it never holds a held-out one). No fit is made; a cell
whose fit is not cached is listed as skipped.

Run: PYTHONPATH=src .venv/bin/python benchmarks/interval_components.py --sets fresh,fresh2
     [--cache /work/cache/acc] [--out benchmarks/interval_components_rows]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import accuracy_table as table  # noqa: E402

METHOD = "evt-eb"
LEVEL = 0.95


def components(hardness: Path, n: float, mode: str | None) -> dict:
    """The parts of the benchmark interval of mAP@1000 at ``n`` for one hardness file."""
    from statistics import NormalDist

    from rscale.core import interval
    from rscale.core.prediction import gallery_sd
    from rscale.store.hardness_file import read_hardness
    est, info = read_hardness(hardness)
    cells = [("AP", 1000, float(n))]
    ((pq, lo, hi, bt),) = interval.predicted_intervals(est, cells, mode=mode, ci_kind="benchmark", level=LEVEL,
                                                        backtest=info["backtest"])
    _, reps, _ = interval._cell_predictions(est, cells, mode, "benchmark", 1000, None, info["backtest"], LEVEL)
    m = reps[0].mean(axis=1).reshape(-1, 2)
    sd = float(np.sqrt(np.mean(((m[:, 0] - m[:, 1]) / 2.0) ** 2)))
    t_half = interval._t_quantile(LEVEL, m.shape[0]) * sd
    g_half = NormalDist().inv_cdf(0.5 + LEVEL / 2.0) * gallery_sd(est, "AP", float(n), 1000)
    models = interval._edge_values(est, cells, mode, None)
    v = float(pq.mean())
    v_u, v_c = (v, v) if models is None else (float(models[0, 0]), float(models[0, 1]))
    e_lo, e_hi = (np.nan, np.nan) if bt is None else (bt.low, bt.high)
    half = float(np.hypot(t_half, g_half))
    b_lo, b_hi = np.nan_to_num(e_lo), np.nan_to_num(e_hi)
    # the shipped join (docs/benchmarks.md, "The two reaches past model U, joined in quadrature")
    rebuilt_lo = min(v_u - float(np.hypot(max(b_hi, 0.0), max(v_u - v_c, 0.0))), v) - half
    rebuilt_hi = max(v_u + float(np.hypot(max(-b_lo, 0.0), max(v_c - v_u, 0.0))), v) + half
    check = max(abs(max(rebuilt_lo, 0.0) - lo), abs(min(rebuilt_hi, 1.0) - hi))
    return {"s": float(np.max(est.n_sampled)), "factor": float(n) / float(np.max(est.n_sampled)), "value": v,
            "v_u": v_u, "v_c": v_c, "band": [float(e_lo), float(e_hi)],
            "at_n": None if bt is None else float(bt.at_n), "t_half": t_half, "g_half": float(g_half),
            "half": half, "lo": float(lo), "hi": float(hi), "check": float(check),
            "share_factors": None if bt is None or bt.share_factors is None else [float(x) for x in bt.share_factors],
            "share_errors": None if bt is None or bt.share_errors is None else [float(x) for x in bt.share_errors]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", required=True)
    ap.add_argument("--cache", default="/work/cache/acc")
    ap.add_argument("--out", default=str(HERE / "interval_components_rows"))
    a = ap.parse_args(argv)
    known = set(table.accuracy_module().SETS) | set(table.REAL_SETS)
    cache, out = Path(a.cache), Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in a.sets.split(","):
        if name not in known:
            sys.exit(f"--sets {name}: not one of the accuracy table's sets ({', '.join(sorted(known))})")
        draws = (table.real_draws(name, None, None) if name in table.REAL_SETS
                 else table.sim_draws(name, table.SIM_FRACTIONS, table.SIM_DRAWS))
        rows, skipped = [], []
        for draw in draws:
            got = table.cached_sample(draw, cache)
            fit = None if got is None else table._valid_fit(cache, got[0], METHOD)
            if fit is None or "failed" in fit:
                skipped.append(draw.label)
                continue
            sample, truth = got
            row = {"set": draw.set, "scenario": draw.scenario, "fraction": draw.fraction, "draw": draw.draw,
                   "n": draw.n, "truth": truth, **components(Path(fit["dir"]) / fit["file"], draw.n,
                                                              table.query_mode(METHOD))}
            row["covered"] = row["lo"] <= truth <= row["hi"]
            rows.append(row)
            print(f"{draw.label:<48} err {row['value'] - truth:+.4f} U {row['v_u'] - truth:+.4f} "
                  f"C {row['v_c'] - truth:+.4f} band {row['band'][0]:+.4f}..{row['band'][1]:+.4f} "
                  f"half {row['half']:.4f} covered {row['covered']} check {row['check']:.1e}", flush=True)
        (out / f"{name}.json").write_text(json.dumps(rows, indent=1) + "\n")
        print(f"{name}: {len(rows)} cells, {sum(r['covered'] for r in rows)} covered; skipped (no cached fit): "
              f"{', '.join(skipped) or 'none'}", flush=True)


if __name__ == "__main__":
    main()
