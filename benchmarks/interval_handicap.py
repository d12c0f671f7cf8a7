"""Held-out set ``cov2`` and the real sets: the back-test's level carry (the candidate chosen on
design data, docs/benchmarks.md "The share's handicap in the back-test") beside the shipped
slope carry, coverage and mean width of the benchmark interval of mAP@1000 at N = 1e8 (cov2) or
the pool (real sets).

Two steps, so that the slow estimates (evt-eb: 21 fits per cell) can run while nothing is
evaluated on them:

- ``--make DIR``: for each cov2 cell, the shipped path (``api.estimate`` -> ``api.register`` ->
  ``api.query`` with the benchmark interval) and the simulator's truth; keeps the hardness file,
  the query's row and the shares' counts (``rscale.core.backtest.share_counts``: no fit).
  Prints only the seconds: no rule is evaluated.
- ``--measure DIR``: both rules from the kept files (the old one is the query's own row, checked
  against the core function), coverage and mean width per estimator and fraction.
- ``--real H --data D``: both rules on the hardness files ``benchmarks/realset/check.py --keep H``
  wrote through the CLI (the share counts from the draws' sample stats in D).

Run: PYTHONPATH=src .venv/bin/python benchmarks/interval_handicap.py --make /tmp/cov2 --methods evt-eb
     PYTHONPATH=src .venv/bin/python benchmarks/interval_handicap.py --measure /tmp/cov2 [--json rows.json]
     PYTHONPATH=src .venv/bin/python benchmarks/interval_handicap.py --real H1 --data benchmarks/realset/data
     PYTHONPATH=src .venv/bin/python benchmarks/interval_handicap.py --decide cov2=a.json realset=b.json realset2=c.json
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from _shipped import MODE  # noqa: E402  (one cell through the shipped path: benchmarks/_shipped.py)
N_SIM = 1e8


def make_cell(spec, n, s, seed, method, d: Path):
    from _shipped import shipped_sim_cell
    t = time.perf_counter()
    ss, truth, row, mode = shipped_sim_cell(spec, n, s, seed, method, d)
    save_counts(ss, d / "h.parquet", d / "share_counts.npz")
    (d / "cell.json").write_text(json.dumps({"truth": truth, "n": n, "method": method, "mode": mode,
                                             "row": {k: row[k] for k in ("value", "ci_low", "ci_high")}}))
    return time.perf_counter() - t


def save_counts(ss, h_path, out):
    """The shares' and the halves' own counts and sizes (no fit), for the level carry."""
    from rscale.core.backtest import share_counts
    from rscale.core.replicates import replicate_counts
    from rscale.store.hardness_file import read_hardness
    est, info = read_hardness(h_path)
    counts, sizes = share_counts(ss, info["backtest"].column_factors)
    arrays = {"counts": counts, "sizes": sizes}
    if est.replicates is not None:
        arrays["rep_counts"], arrays["rep_sizes"] = replicate_counts(ss, splits=est.replicates.shape[1] // 2)
    np.savez(out, **arrays)


def both_rules(h_path, counts_path, n, mode):
    """(value, old low, old high, new low, new high, old band, new band) of mAP@1000 at N from one
    hardness file: the shipped rule through the core function, and the level carry on the same
    stored arrays plus the shares' counts."""
    from dataclasses import replace

    from rscale.core.backtest import backtest_error, carry_level, increment_errors, own_error
    from rscale.core.interval import metric_intervals, predicted_intervals
    from rscale.core.prediction import predict_per_query, replicate_per_query
    from rscale.store.hardness_file import read_hardness
    est, info = read_hardness(h_path)
    bt = info["backtest"]
    (pq, lo, hi, b), = predicted_intervals(est, [("AP", 1000, n)], mode=mode, backtest=bt)
    c = np.load(counts_path)
    bt2 = replace(bt, column_counts=c["counts"], column_sizes=c["sizes"],
                  replicate_counts=c["rep_counts"] if "rep_counts" in c else None,
                  replicate_sizes=c["rep_sizes"] if "rep_sizes" in c else None)
    factor = n / float(np.max(est.n_sampled))
    new_band = None
    u, w, dd = increment_errors(est, bt2, "AP", 1000, mode)
    if dd.size >= 2 and factor > 1:
        e11 = own_error(est, bt2.counts, "AP", 1000, mode)
        new_band = carry_level(e11, u, w, dd, factor)
    elif b is not None:
        new_band = (b.at_n, b.low, b.high)         # no quarters: the halves' carry stays
    reps = replicate_per_query(est, "AP", n, 1000, mode)
    point = predict_per_query(est, "AP", n, 1000, mode)
    band = np.array([[np.nan, np.nan]]) if new_band is None else np.array([[new_band[1], new_band[2]]])
    _, lo_n, hi_n = metric_intervals(point[None], reps[None], backtest=band)
    return (float(pq.mean()), lo, hi, float(lo_n[0]), float(hi_n[0]),
            None if b is None else (b.at_n, b.low, b.high), new_band)


def measure(root: Path):
    rows = []
    for cell in sorted(root.glob("*/*/*/cell.json")):
        meta = json.loads(cell.read_text())
        d = cell.parent
        value, lo, hi, lo_n, hi_n, old_b, new_b = both_rules(d / "h.parquet", d / "share_counts.npz", meta["n"], meta["mode"])
        assert abs(meta["row"]["ci_low"] - lo) < 1e-12 and abs(meta["row"]["ci_high"] - hi) < 1e-12   # shipped == core
        rows.append({"method": meta["method"], "scenario": d.parent.name, "fraction": d.name, "truth": meta["truth"],
                     "value": value, "old_lo": lo, "old_hi": hi, "lo": lo_n, "hi": hi_n, "old_band": old_b,
                     "new_band": new_b})
    return rows


def real_rows(h_dir, data):
    from rscale.store.sample_stats_file import read_sample_stats
    man = json.loads((Path(data) / "manifest.json").read_text())
    rows = []
    for h in sorted(p for p in Path(h_dir).glob("draw-*.parquet") if len(p.name.split(".")) == 3):
        draw, method = h.name.split(".")[0], h.name.split(".")[1]
        ss = read_sample_stats(Path(data) / f"{draw}.sample_stats.parquet")
        cp = Path(h_dir) / f"{draw}.{method}.share_counts.npz"
        save_counts(ss, h, cp)
        value, lo, hi, lo_n, hi_n, old_b, new_b = both_rules(h, cp, float(man["pool"]), MODE.get(method))
        rows.append({"method": method, "scenario": draw, "fraction": draw.split("-")[1], "truth": man["truth_map_at_1000"],
                     "value": value, "old_lo": lo, "old_hi": hi, "lo": lo_n, "hi": hi_n, "old_band": old_b,
                     "new_band": new_b})
    return rows


def table(rows):
    out = ["| estimator | fraction | cells | old rule: covered, mean width | level rule: covered, mean width |",
           "|---|---|---|---|---|"]
    for method in dict.fromkeys(r["method"] for r in rows):
        groups = sorted({r["fraction"] for r in rows if r["method"] == method}) + ["all"]
        for f in groups:
            rs = [r for r in rows if r["method"] == method and (f == "all" or r["fraction"] == f)]
            old = sum(r["old_lo"] <= r["truth"] <= r["old_hi"] for r in rs)
            new = sum(r["lo"] <= r["truth"] <= r["hi"] for r in rs)
            out.append(f"| {method} | {f} | {len(rs)} | {old}/{len(rs)} ({old / len(rs):.0%}), "
                       f"{np.mean([r['old_hi'] - r['old_lo'] for r in rs]):.4f} | {new}/{len(rs)} ({new / len(rs):.0%}), "
                       f"{np.mean([r['hi'] - r['lo'] for r in rs]):.4f} |")
    return "\n".join(out)


def cells(rows):
    out = ["| estimator | cell | S/N | error | old band | level band | old covers | level covers |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ob = "-" if r["old_band"] is None else f"{r['old_band'][1]:+.3f}..{r['old_band'][2]:+.3f}"
        nb = "-" if r["new_band"] is None else f"{r['new_band'][1]:+.3f}..{r['new_band'][2]:+.3f}"
        out.append(f"| {r['method']} | {r['scenario']} | {r['fraction']} | {r['value'] - r['truth']:+.3f} | {ob} | {nb} | "
                   f"{'yes' if r['old_lo'] <= r['truth'] <= r['old_hi'] else 'no'} | "
                   f"{'yes' if r['lo'] <= r['truth'] <= r['hi'] else 'no'} |")
    return "\n".join(out)


def decide(sets: dict, method: str = "evt-eb") -> str:
    """The pre-registered decision (docs/benchmarks.md): D(rule) = sum over sets of the distance of
    the set's coverage from [90%, 97%]; switch iff D(new) < D(old), no set loses more than one
    covered cell, and the new mean width over all cells is at most 1.5x the old."""
    def dist(c):
        return max(0.0, 0.90 - c, c - 0.97)
    d_old = d_new = 0.0
    lost, w_old, w_new, lines = 0, [], [], []
    for name, rows in sets.items():
        rs = [r for r in rows if r["method"] == method]
        if not rs:
            continue
        old = sum(r["old_lo"] <= r["truth"] <= r["old_hi"] for r in rs)
        new = sum(r["lo"] <= r["truth"] <= r["hi"] for r in rs)
        d_old += dist(old / len(rs))
        d_new += dist(new / len(rs))
        lost = max(lost, old - new)
        w_old += [r["old_hi"] - r["old_lo"] for r in rs]
        w_new += [r["hi"] - r["lo"] for r in rs]
        lines.append(f"{name}: old {old}/{len(rs)}, new {new}/{len(rs)}")
    ratio = float(np.mean(w_new) / np.mean(w_old))
    switch = d_new < d_old and lost <= 1 and ratio <= 1.5
    return (f"{method}: " + "; ".join(lines) + f". D(old) = {d_old:.3f}, D(new) = {d_new:.3f}; most cells lost on a set: "
            f"{lost}; width ratio {ratio:.2f} ({np.mean(w_new):.4f} / {np.mean(w_old):.4f}) -> "
            f"{'switch' if switch else 'keep the old rule'}")


def main(argv=None):
    import argparse

    from interval_carry import COV2, COV2_SEED
    from rscale.sim.benchmark import SimSpec
    ap = argparse.ArgumentParser()
    ap.add_argument("--make", default=None)
    ap.add_argument("--measure", default=None)
    ap.add_argument("--real", default=None)
    ap.add_argument("--data", default=None)
    ap.add_argument("--methods", default="evt-eb,evt")
    ap.add_argument("--fractions", default="0.01,0.05")
    ap.add_argument("--json", default=None)
    ap.add_argument("--decide", nargs="+", default=None, help="NAME=rows.json for each set: the decision rule")
    a = ap.parse_args(argv)
    if a.decide:
        sets = {x.split("=")[0]: json.loads(Path(x.split("=")[1]).read_text()) for x in a.decide}
        for method in a.methods.split(","):
            print(decide(sets, method))
        return
    if a.make:
        for method in a.methods.split(","):
            for name, family, hl, nq in COV2:
                spec = SimSpec(name=name, family=family, n_queries=nq, hardness=hl)
                for f in (float(x) for x in a.fractions.split(",")):
                    d = Path(a.make) / method / name.replace("/", "_").replace(" ", "_") / f"{f:.0%}"
                    if (d / "cell.json").exists():
                        continue
                    secs = make_cell(spec, N_SIM, int(f * N_SIM), 7 + COV2_SEED, method, d)
                    print(f"{method} {name} {f:.0%}: {secs:.0f} s", flush=True)
        return
    rows = measure(Path(a.measure)) if a.measure else real_rows(a.real, a.data)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    print(table(rows))
    print()
    print(cells(rows))


if __name__ == "__main__":
    main()
