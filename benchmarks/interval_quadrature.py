"""How far the benchmark interval reaches past model U: the two measured reaches joined by their
maximum (shipped until this round) or in quadrature (the candidate); issue 14, docs/benchmarks.md
"The two reaches past model U, joined in quadrature".

evt-eb's interval (``rscale.core.interval.metric_intervals``) reaches from model U (the tail as
fitted) on each side by two measured amounts: ``a``, the back-test band's (U's own error at the
cell's factor: max(-e_lo, 0) upward, max(e_hi, 0) downward), and ``b``, the edge correction's
(the distance to model C on that side: max(C - U, 0) upward, max(U - C, 0) downward). The shipped
rule joins them by their maximum, hi = max(U + a, C, v) + half; the candidate by their
root-sum-square, hi = U + sqrt(a^2 + b^2) + half (v lies between U and C, so inside both). Where
only one reach points to a side the two rules agree.

Per cell, through the shipped path (``accuracy_table.run_cell``: estimate -> register -> query,
cached in the table's cache), the parts of the interval (``interval_components.components``, whose
``check`` rebuilds the shipped interval from them: 0 up to rounding), then both rules' coverage
and width against the truth.

Run: PYTHONPATH=src .venv/bin/python benchmarks/interval_quadrature.py --set fresh [--fractions 0.01,0.02,0.05,0.1]
     [--held-out] [--cache /work/cache/acc] [--json rows.json]
     (cov7 and realset7 were measured once with --held-out, 2026-12-07; seen since)
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import accuracy_table as T  # noqa: E402
import edge_average  # noqa: E402
from edge_average import check_seen_or_reserved  # noqa: E402
from interval_components import components  # noqa: E402

METHOD = "evt-eb"
# cov7 and realset7 were measured once, with --held-out, by the round that wrote this rule down
# (docs/benchmarks.md, 2026-12-07); seen since (edge_transfer.SEEN_*), so none is reserved now
HELD_OUT_SETS: tuple = ()


def check_set(which: str, held_out: bool) -> None:
    check_seen_or_reserved(which, held_out, HELD_OUT_SETS)


def reaches(u: float, c: float, band) -> tuple[float, float, float, float]:
    """(a_up, b_up, a_down, b_down): the band's and the edge correction's reach past U on each side."""
    e_lo, e_hi = (0.0, 0.0) if band is None or not np.all(np.isfinite(band)) else (float(band[0]), float(band[1]))
    return max(-e_lo, 0.0), max(c - u, 0.0), max(e_hi, 0.0), max(u - c, 0.0)


def joined(u: float, c: float, v: float, band, half: float, how: str) -> tuple[float, float]:
    """(lo, hi) clipped to [0, 1]: the two reaches joined by ``max`` (the shipped rule) or ``rss``."""
    a_up, b_up, a_dn, b_dn = reaches(u, c, band)
    if how == "max":
        lo, hi = min(u - a_dn, c, v) - half, max(u + a_up, c, v) + half
    else:
        lo = min(u - float(np.hypot(a_dn, b_dn)), v) - half
        hi = max(u + float(np.hypot(a_up, b_up)), v) + half
    return max(lo, 0.0), min(hi, 1.0)


def cell(draw, cache: Path) -> dict:
    res = T.run_cell(draw, METHOD, str(cache))
    if "failed" in res or res.get("lo") is None:
        raise RuntimeError(f"{draw.label}: the shipped path failed: {res.get('failed')}")
    sample, _ = T.cached_sample(draw, cache)
    fit = T._valid_fit(cache, sample, METHOD)
    parts = components(Path(fit["dir"]) / fit["file"], draw.n, T.query_mode(METHOD))
    t = res["truth"]
    row = {"set": draw.set, "cell": draw.scenario if draw.sim else f"draw {draw.draw}", "fraction": draw.fraction,
           "truth": t, **parts, "answer_check": max(abs(parts["lo"] - res["lo"]), abs(parts["hi"] - res["hi"]),
                                                    abs(parts["value"] - res["value"]))}
    for how in ("max", "rss"):
        lo, hi = joined(parts["v_u"], parts["v_c"], parts["value"], parts["band"], parts["half"], how)
        row[f"lo_{how}"], row[f"hi_{how}"] = lo, hi
        row[f"covered_{how}"], row[f"width_{how}"] = bool(lo <= t <= hi), hi - lo
    row["max_check"] = max(abs(row["lo_max"] - parts["lo"]), abs(row["hi_max"] - parts["hi"]))
    return row


def summary(rows: list) -> str:
    out = ["| set | S/N | cells | MAE | covered: max (shipped) | width | covered: rss (candidate) | width | width ratio |",
           "|---|---|---|---|---|---|---|---|---|"]
    for s in sorted({r["set"] for r in rows}):
        fr = sorted({r["fraction"] for r in rows if r["set"] == s})
        for f in [*fr, None] if len(fr) > 1 else fr:
            rs = [r for r in rows if r["set"] == s and (f is None or r["fraction"] == f)]
            w0, w1 = np.mean([r["width_max"] for r in rs]), np.mean([r["width_rss"] for r in rs])
            out.append(f"| {s} | {'all' if f is None else f'{f:.0%}'} | {len(rs)} | "
                       f"{np.mean([abs(r['value'] - r['truth']) for r in rs]):.4f} | "
                       f"{sum(r['covered_max'] for r in rs)}/{len(rs)} | {w0:.4f} | "
                       f"{sum(r['covered_rss'] for r in rs)}/{len(rs)} | {w1:.4f} | {w1 / w0:.3f} |")
    return "\n".join(out)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--fractions" not in argv:
        argv += ["--fractions", "0.01,0.02,0.05,0.1"]
    edge_average.run_cells(
        argv, description=__doc__.split("\n")[0], check=check_set, cell_of=cell,
        header="| set | cell | S/N | truth | v | U | C | band | half | max: covered, width | rss: covered, width | check |",
        line=lambda r: (f"| {r['set']} | {r['cell']} | {r['fraction']:g} | {r['truth']:.4f} | "
                        f"{r['value'] - r['truth']:+.4f} | {r['v_u'] - r['truth']:+.4f} | {r['v_c'] - r['truth']:+.4f} | "
                        f"{r['band'][0]:+.4f}..{r['band'][1]:+.4f} | {r['half']:.4f} | "
                        f"{'yes' if r['covered_max'] else 'NO'} {r['width_max']:.4f} | "
                        f"{'yes' if r['covered_rss'] else 'NO'} {r['width_rss']:.4f} | "
                        f"{max(r['answer_check'], r['max_check'], r['check']):.1e} |"),
        summary_of=summary,
        held_out_help="allow cov7 and realset7: the single measurement written down before it")


if __name__ == "__main__":
    main()
