"""Whose error the back-test measures, in the union of the two edge models' intervals (issue 14;
docs/benchmarks.md, "The back-test belongs to model U"); a benchmark of a candidate rule, nothing
of it is in ``src/``.

evt-eb's estimate carries two models past the sample's edge (``rscale.core.edge_models``): ``U``,
the tail model as fitted, and ``C``, the same draws times the complementary halves' band ratios.
The back-test's shares (halves and quarters) are re-estimates with model ``U``, so its band
[e_lo, e_hi] is ``U``'s error carried to the user's factor. The benchmark interval shipped until
2026-12-07 (``rscale.core.interval.metric_intervals``, ``models``; "union" here) moved *both*
models by that band and joined them: with C below U and the back-test saying U is optimistic
(e_hi > 0), its lower end is C - e_hi - h (h the replicate and gallery half-width): U's measured
optimism taken off a model that was made to remove the optimism past the edge, a second time.

The candidate, ``U-band`` (built since the measurement, docs/benchmarks.md): the band moves ``U``
only; ``C`` keeps its plain interval:

    lo = min(U - max(e_hi, 0), C) - h,   hi = max(U - min(e_lo, 0), C) + h

(clipped to [0, 1]). It differs from the union only on the side where C lies from U and only when
the band reaches that way (C < U and e_hi > 0: a higher lower end; C > U and
e_lo < 0: a lower upper end); so it is never wider (up to rounding) and covers at most what the
union covers.

Per cell, through the shipped path (``benchmarks/accuracy_table.py``'s ``run_cell``: estimate ->
register -> query, cached), the query's interval and the truth; then from the fit the cell stored,
the parts (``rscale.core.interval``'s own functions) and both rules. The rule the query ran, rebuilt
from the parts, is printed against the query's interval (``check``, 0 up to rounding): the union
in the rows measured before the build (``benchmarks/edge_backtest_union_rows/``), U-band since,
until the quadrature round (``benchmarks/interval_quadrature.py``): the query's interval is that
round's root-sum-square join since, so ``check`` is then U-band's distance from it.

Run: PYTHONPATH=src .venv/bin/python benchmarks/edge_backtest_union.py --set design [--fractions 0.01,0.05] [--json rows.json]
     (cov5 and realset5 were measured once with --held-out, 2026-12-07; seen since)
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import accuracy_table as T  # noqa: E402
from edge_average import METHOD, check_seen_or_reserved, run_cells, shipped_cell  # noqa: E402

# cov5 and realset5 were measured once, with --held-out, by the round that wrote this rule down
# (docs/benchmarks.md, 2026-12-07); seen since (edge_transfer.SEEN_*), so none is reserved now
HELD_OUT_SETS: tuple = ()


def check_set(which: str, held_out: bool) -> None:
    """Stop (one line) unless ``which`` is seen data, or ``held_out`` and one of :data:`HELD_OUT_SETS`."""
    check_seen_or_reserved(which, held_out, HELD_OUT_SETS)


def intervals(u: float, c: float, half: float, band, level_bounds=(0.0, 1.0)) -> dict:
    """Both rules' (lo, hi) from model U's and C's values, the half-width h and U's back-test band
    (e_lo, e_hi) (NaN: no band)."""
    e_lo, e_hi = (0.0, 0.0) if band is None or not np.all(np.isfinite(band)) else (float(band[0]), float(band[1]))
    v, spread = (u + c) / 2.0, abs(c - u) / 2.0
    union = (v - max(e_hi, 0.0) - spread - half, v - min(e_lo, 0.0) + spread + half)
    u_band = (min(u - max(e_hi, 0.0), c) - half, max(u - min(e_lo, 0.0), c) + half)
    return {k: tuple(float(np.clip(x, *level_bounds)) for x in iv) for k, iv in (("union", union), ("u_band", u_band))}


def cell(draw, cache: Path) -> dict:
    from rscale.core.interval import _bands, _cell_predictions, _edge_values, metric_intervals
    from rscale.core.prediction import gallery_sd
    res, est, info, _ = shipped_cell(draw, cache)
    cells, mode = [("AP", 1000, float(draw.n))], T.query_mode(METHOD)
    pqs, reps, bts = _cell_predictions(est, cells, mode, "benchmark", 0, None, info["backtest"])
    # h: the shipped interval around the point without band or models, unclipped
    [v], _, [hi] = metric_intervals(pqs, reps, gallery_sd=np.array([gallery_sd(est, "AP", draw.n, 1000)]),
                                    bounds=(-np.inf, np.inf))
    v, half = float(v), float(hi - v)
    u, c = (float(x) for x in _edge_values(est, cells, mode, None)[0])
    band = _bands(bts)[0]
    iv = intervals(u, c, half, band)
    t = res["truth"]
    ran = iv["u_band"]                  # the rule the query runs since the build (the union before it)
    return {"set": draw.set, "cell": draw.scenario if draw.sim else f"draw {draw.draw}", "fraction": draw.fraction,
            "truth": t, "value": v, "err": v - t, "err_U": u - t, "err_C": c - t, "half": half,
            "band": [float(x) for x in band], "check": max(abs(ran[0] - res["lo"]), abs(ran[1] - res["hi"])),
            **{f"lo_{k}": x[0] for k, x in iv.items()}, **{f"hi_{k}": x[1] for k, x in iv.items()},
            **{f"covered_{k}": bool(x[0] <= t <= x[1]) for k, x in iv.items()},
            **{f"width_{k}": x[1] - x[0] for k, x in iv.items()}}


def summary(rows: list) -> str:
    out = ["| set | S/N | cells | MAE | union covers | width | U-band covers | width | width ratio |",
           "|---|---|---|---|---|---|---|---|---|"]
    for s in sorted({r["set"] for r in rows}):
        for f in sorted({r["fraction"] for r in rows if r["set"] == s}):
            rs = [r for r in rows if r["set"] == s and r["fraction"] == f]
            ws, wu = (float(np.mean([r[f"width_{k}"] for r in rs])) for k in ("union", "u_band"))
            out.append(f"| {s} | {f:.0%} | {len(rs)} | {np.mean([abs(r['err']) for r in rs]):.4f} | "
                       f"{sum(r['covered_union'] for r in rs)}/{len(rs)} | {ws:.4f} | "
                       f"{sum(r['covered_u_band'] for r in rs)}/{len(rs)} | {wu:.4f} | {wu / ws:.2f} |")
    return "\n".join(out)


def main(argv=None):
    run_cells(argv, description=__doc__.split("\n")[0], check=check_set, cell_of=cell,
              header="| set | cell | S/N | truth | error | U | C | band | union | U-band | check |",
              line=lambda r: (f"| {r['set']} | {r['cell']} | {r['fraction']:g} | {r['truth']:.4f} | {r['err']:+.4f} | "
                              f"{r['err_U']:+.4f} | {r['err_C']:+.4f} | {r['band'][0]:+.4f}..{r['band'][1]:+.4f} | "
                              f"{'yes' if r['covered_union'] else 'no'} {r['width_union']:.4f} | "
                              f"{'yes' if r['covered_u_band'] else 'no'} {r['width_u_band']:.4f} | {r['check']:.1e} |"),
              summary_of=summary,
              held_out_help="allow a set in HELD_OUT_SETS (none now): the single measurement written down before it")


if __name__ == "__main__":
    main()
