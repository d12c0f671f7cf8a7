"""Where the point between the two edge models could sit, from the seen cells' parts: design data
for the next round (issue 14's MAE goals), computed without fitting anything.

Reads the rows of :mod:`interval_components` (every evt-eb cell of the accuracy table's seen sets:
the point v, the edge models v_U and v_C, the back-test band (e_lo, e_hi) at the cell's factor,
the truth) and prints, per simulator and real group and per sample fraction, the mean |error| of:

- the shipped point (:func:`rscale.core.prediction.edge_weight`, rebuilt here and checked against
  each row's v: ``mismatches`` must be 0);
- U, C and their mean;
- the oracle placement: the truth clipped to [min(U, C), max(U, C)], the least error any point
  kept between the two models can have (a bound, not a rule);
- the band's weight shrunk toward 1/2, w = 1/2 + lam (w_band - 1/2), and the band's weight
  allowed past the models, w = clip(-centre / (v_C - v_U), a, b) for a few (a, b);

then, per family of the simulator, the shipped point's MAE and signed error, and the oracle
weight w* = (v_U - truth) / (v_U - v_C) (unclipped) by bin of the band's weight.

Rows: ``benchmarks/edge_placement_rows/`` (interval_components.py on 2026-12-07, code at
fb8b09c, the accuracy table's cached fits: 196 simulator and 140 real cells, all seen).

Run: PYTHONPATH=src .venv/bin/python benchmarks/edge_placement.py [--rows DIR]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
FRACTIONS = (0.01, 0.02, 0.05, 0.10)
SHRINK = (0.0, 0.25, 0.5, 0.75, 1.0)
CAPS = ((0.0, 1.0), (0.0, 1.25), (0.0, 1.5), (0.0, 2.0), (-0.5, 1.5))


def load(rows_dir: Path) -> list[dict]:
    rows = []
    for path in sorted(Path(rows_dir).glob("*.json")):
        rows += json.loads(path.read_text())
    return rows


def group(row) -> str:
    return "real" if row["set"].startswith("realset") else "sim"


def centre(row) -> float:
    """The band's centre (NaN: no band)."""
    lo, hi = row["band"]
    return float("nan") if lo is None or hi is None else (lo + hi) / 2.0


def raw_weight(row) -> float:
    """-centre / (v_C - v_U), unclipped; 1/2 without a band or where the models agree (as shipped)."""
    c = centre(row)
    if not np.isfinite(c) or row["v_c"] == row["v_u"]:
        return 0.5
    return -c / (row["v_c"] - row["v_u"])


def placed(row, w: float) -> float:
    return (1.0 - w) * row["v_u"] + w * row["v_c"]


def oracle(row) -> float:
    """The truth clipped to the segment between the two models."""
    a, b = sorted((row["v_u"], row["v_c"]))
    return min(max(row["truth"], a), b)


def shipped(row) -> float:
    from rscale.core.prediction import edge_weight
    c = centre(row)
    return placed(row, edge_weight(row["v_u"], row["v_c"], None if not np.isfinite(c) else tuple(row["band"])))


def rules() -> dict:
    out = {"shipped": shipped, "U": lambda r: r["v_u"], "C": lambda r: r["v_c"],
           "mean of U and C": lambda r: placed(r, 0.5), "oracle (bound)": oracle}
    for lam in SHRINK:
        out[f"shrink lam={lam:g}"] = lambda r, lam=lam: placed(r, 0.5 + lam * (min(max(raw_weight(r), 0.0), 1.0) - 0.5))
    for a, b in CAPS:
        out[f"w in [{a:g}, {b:g}]"] = lambda r, a=a, b=b: placed(r, min(max(raw_weight(r), a), b))
    return out


def mae_table(rows) -> dict:
    """{rule: {(group, fraction): MAE}}."""
    out = {}
    for name, fn in rules().items():
        cells = defaultdict(list)
        for r in rows:
            cells[(group(r), r["fraction"])].append(abs(fn(r) - r["truth"]))
        out[name] = {k: float(np.mean(v)) for k, v in cells.items()}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default=str(HERE / "edge_placement_rows"))
    a = ap.parse_args(argv)
    rows = load(Path(a.rows))
    bad = sum(abs(shipped(r) - r["value"]) > 1e-12 for r in rows)
    print(f"{len(rows)} cells ({sum(group(r) == 'sim' for r in rows)} simulator, "
          f"{sum(group(r) == 'real' for r in rows)} real); shipped point rebuilt, mismatches: {bad}")
    if bad:
        raise SystemExit(f"{a.rows}: {bad} rows' point is not what edge_weight places today; reread them with "
                         "benchmarks/interval_components.py before comparing rules")
    table = mae_table(rows)
    keys = [(g, f) for g in ("sim", "real") for f in FRACTIONS]
    print("| point | " + " | ".join(f"{g} {f:.0%}" for g, f in keys) + " |")
    print("|---|" + "---|" * len(keys))
    for name, by in table.items():
        print(f"| {name} | " + " | ".join(f"{by[k]:.4f}" for k in keys) + " |")
    print("\nsimulator, shipped point, per family: MAE (mean signed error) at " + " / ".join(f"{f:.0%}" for f in FRACTIONS))
    fam = defaultdict(list)
    for r in rows:
        if group(r) == "sim":
            fam[r["scenario"].split("/")[0]].append(r)
    for name, rs in sorted(fam.items()):
        parts = []
        for f in FRACTIONS:
            e = np.array([r["value"] - r["truth"] for r in rs if r["fraction"] == f])
            parts.append(f"{np.mean(np.abs(e)):.4f} ({np.mean(e):+.4f})")
        print(f"  {name:9s} {len(rs) // len(FRACTIONS):2d} scenarios: " + "  ".join(parts))
    print("\noracle weight w* = (v_U - truth) / (v_U - v_C) by the band's weight (clipped, as shipped)")
    for g in ("sim", "real"):
        rs = [r for r in rows if group(r) == g and r["v_u"] != r["v_c"]]
        wb = np.array([min(max(raw_weight(r), 0.0), 1.0) for r in rs])
        ws = np.array([(r["v_u"] - r["truth"]) / (r["v_u"] - r["v_c"]) for r in rs])
        for lo, hi, label in ((0.0, 1e-9, "0"), (1e-9, 0.5, "(0, 1/2)"), (0.5, 1.0 - 1e-9, "[1/2, 1)"), (1.0 - 1e-9, 2.0, "1")):
            m = (wb >= lo) & (wb < hi)
            if m.any():
                print(f"  {g:4s} w_band {label:9s} {int(m.sum()):3d} cells: w* median {np.median(ws[m]):+.2f}, "
                      f"quartiles {np.percentile(ws[m], 25):+.2f} .. {np.percentile(ws[m], 75):+.2f}")


if __name__ == "__main__":
    main()
