"""Where between the two edge models the point belongs, read off the back-test (issue 14;
docs/benchmarks.md, "The back-test places the point between the edge models"); a benchmark of a
candidate rule, built since its measurement (``rscale.core.prediction.edge_weight``).

evt-eb's estimate carries two models past the sample's edge (``rscale.core.edge_models``): ``U``,
the tail model as fitted, and ``C``, the same draws times the complementary halves' band ratios.
The shipped point is their average (weight 1/2 each: "the sample holds no evidence between them").
The back-test is that evidence: its band [e_lo, e_hi] is model U's error at the user's own factor
(its shares are model-U re-estimates, section "The back-test belongs to model U"). The candidate,
``weighted`` (shipped since 2026-12-07), takes U corrected by the band's centre and keeps it
between the two models:

    v = clip(U - (e_lo + e_hi) / 2,  min(U, C),  max(U, C))

(the average where the cell has no band). Its interval is the shipped one (U-band), which holds
every point between U and C.

Per cell, through the shipped path (``benchmarks/accuracy_table.py``'s ``run_cell``: estimate ->
register -> query, cached), the models, the band and the truth (``edge_backtest_union.cell``, whose
``check`` compares its rebuilt interval with the query's, 0 up to rounding), and both points;
``point_check``: the candidate against the query's point (0 up to rounding since the build; the
average's distance to it before).

Run: PYTHONPATH=src .venv/bin/python benchmarks/edge_weight.py --set design [--fractions 0.01,0.05] [--json rows.json]
     (cov6 and realset6 were measured once with --held-out, 2026-12-07; seen since)
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import edge_average  # noqa: E402
import edge_backtest_union  # noqa: E402
from edge_average import check_seen_or_reserved  # noqa: E402

# cov6 and realset6 were measured once, with --held-out, by the round that wrote this rule down
# (docs/benchmarks.md, 2026-12-07); seen since (edge_transfer.SEEN_*), so none is reserved now
HELD_OUT_SETS: tuple = ()


def check_set(which: str, held_out: bool) -> None:
    """Stop (one line) unless ``which`` is seen data, or ``held_out`` and one of :data:`HELD_OUT_SETS`."""
    check_seen_or_reserved(which, held_out, HELD_OUT_SETS)


def weighted(u: float, c: float, band) -> tuple[float, float]:
    """(the candidate point, its weight on C) from the models' values and U's band (NaN: none)."""
    if band is None or not np.all(np.isfinite(band)) or u == c:
        return (u + c) / 2.0, 0.5
    v = float(np.clip(u - (band[0] + band[1]) / 2.0, min(u, c), max(u, c)))
    return v, (v - u) / (c - u)


def cell(draw, cache: Path) -> dict:
    r = edge_backtest_union.cell(draw, cache)
    u, c = r["truth"] + r["err_U"], r["truth"] + r["err_C"]
    v, w = weighted(u, c, r["band"])
    lo, hi = r["lo_u_band"], r["hi_u_band"]
    return {**r, "err_average": (u + c) / 2.0 - r["truth"], "err_weighted": v - r["truth"], "weight_C": w,
            "point_check": abs(v - r["value"]),
            "weighted_inside": bool(lo - 1e-12 <= v <= hi + 1e-12)}


def summary(rows: list) -> str:
    out = ["| set | S/N | cells | MAE U | MAE C | MAE average (shipped until 2026-12-07) | MAE weighted (shipped since) | mean weight on C | "
           "interval covers | width |", "|---|---|---|---|---|---|---|---|---|---|"]
    for s in sorted({r["set"] for r in rows}):
        fr = sorted({r["fraction"] for r in rows if r["set"] == s})
        for f in [*fr, None] if len(fr) > 1 else fr:
            rs = [r for r in rows if r["set"] == s and (f is None or r["fraction"] == f)]

            def m(k):
                return float(np.mean([abs(r[k]) for r in rs]))
            out.append(f"| {s} | {'all' if f is None else f'{f:.0%}'} | {len(rs)} | {m('err_U'):.4f} | {m('err_C'):.4f} | "
                       f"{m('err_average'):.4f} | {m('err_weighted'):.4f} | "
                       f"{np.mean([r['weight_C'] for r in rs]):.2f} | {sum(r['covered_u_band'] for r in rs)}/{len(rs)} | "
                       f"{np.mean([r['width_u_band'] for r in rs]):.4f} |")
    return "\n".join(out)


def main(argv=None):
    edge_average.run_cells(
        argv, description=__doc__.split("\n")[0], check=check_set, cell_of=cell,
        header="| set | cell | S/N | truth | U | C | band | average | weighted | weight on C | inside | check interval / point |",
        line=lambda r: (f"| {r['set']} | {r['cell']} | {r['fraction']:g} | {r['truth']:.4f} | {r['err_U']:+.4f} | "
                        f"{r['err_C']:+.4f} | {r['band'][0]:+.4f}..{r['band'][1]:+.4f} | {r['err_average']:+.4f} | "
                        f"{r['err_weighted']:+.4f} | {r['weight_C']:.2f} | {'yes' if r['weighted_inside'] else 'NO'} | "
                        f"{r['check']:.1e} / {r['point_check']:.1e} |"),
        summary_of=summary,
        held_out_help="allow a set in HELD_OUT_SETS (none now): the single measurement written down before it")


if __name__ == "__main__":
    main()
