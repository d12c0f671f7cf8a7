"""Coverage and width of the benchmark-value interval under the back-test carry rule, on held-out
set ``cov1`` (simulator) and on the two real-embedding sets, for evt and evt-eb, side by side
with the previous rule (docs/benchmarks.md, "Carrying the back-test to the user's factor").

``cov1`` was written down (with the target) before the chosen carry rule was measured on it; it
is a check, not a design set: new laws, query counts and a new seed offset, with the families
the target names (near-duplicate, gaussian, bounded, student) and one shoulder scenario.

Run: PYTHONPATH=src .venv/bin/python benchmarks/interval_carry.py --set cov1 [--methods evt,evt-eb]
     [--fractions 0.01,0.02,0.05,0.1] [--json rows.json]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from rscale.sim.benchmark import HardnessLaw  # noqa: E402

# Held out (--set cov1): written down before the chosen carry rule was measured on any set but the
# design data (design, holdout, fresh..fresh5); no choice was made on it.
COV1 = [
    ("neardup/power a1.25 cov", "neardup", HardnessLaw("power", 1.25, 1e-12, 1e-1, immune=0.04, rho=0.2), 1150),
    ("neardup/loguniform cov", "neardup", HardnessLaw("loguniform", 1.0, 1e-11, 1.0, immune=0.03, rho=0.5), 1050),
    ("gaussian/loguniform cov", "gaussian", HardnessLaw("loguniform", 1.0, 1e-11, 1e-1, immune=0.03, rho=0.3), 1200),
    ("gaussian/power a1.4 cov", "gaussian", HardnessLaw("power", 1.4, 1e-12, 1e-1, immune=0.04, rho=0.6), 1000),
    ("bounded/loguniform cov", "bounded", HardnessLaw("loguniform", 1.0, 1e-13, 1e-1, immune=0.01, rho=0.4), 1100),
    ("student/power a1.2 cov", "student", HardnessLaw("power", 1.2, 1e-12, 1e-1, immune=0.03, rho=0.4), 1000),
    ("student/loguniform cov", "student", HardnessLaw("loguniform", 1.0, 1e-10, 1e-2, immune=0.05, rho=0.2), 1200),
    ("shoulder/power a1.3 cov", "shoulder", HardnessLaw("power", 1.3, 1e-11, 1e-1, immune=0.05, rho=0.5), 950),
]
COV1_SEED = 410_000

# Held out (--set cov2): written down, with its target and decision rule (docs/benchmarks.md,
# "The share's handicap in the back-test"), before any candidate handicap rule was measured on
# it; no choice is made on it. New laws, query counts and a new seed offset; every family of
# the simulator but one appears once.
COV2 = [
    ("neardup/power a1.35 cov2", "neardup", HardnessLaw("power", 1.35, 1e-12, 1e-1, immune=0.03, rho=0.3), 1100),
    ("gaussian/power a1.3 cov2", "gaussian", HardnessLaw("power", 1.3, 1e-11, 1.0, immune=0.03, rho=0.5), 1150),
    ("bounded/power a1.25 cov2", "bounded", HardnessLaw("power", 1.25, 1e-11, 1e-1, immune=0.04, rho=0.2), 1050),
    ("student/loguniform mid cov2", "student", HardnessLaw("loguniform", 1.0, 1e-11, 1e-1, immune=0.04, rho=0.3), 1000),
    ("logistic/loguniform cov2", "logistic", HardnessLaw("loguniform", 1.0, 1e-12, 1e-1, immune=0.02, rho=0.4), 1200),
    ("scalemix/power a1.3 cov2", "scalemix", HardnessLaw("power", 1.3, 1e-12, 1e-1, immune=0.03, rho=0.4), 1000),
    ("bigdup/power a1.2 cov2", "bigdup", HardnessLaw("power", 1.2, 1e-12, 1e-1, immune=0.04, rho=0.3), 1100),
    ("shoulder/loguniform cov2", "shoulder", HardnessLaw("loguniform", 1.0, 1e-12, 1e-1, immune=0.03, rho=0.2), 1050),
]
COV2_SEED = 450_000

# Held out (--set cov3): written down on 2026-12-02, after cov2 was measured and before any
# interval rule of the next round (the one after the level carry was rejected on width) was
# designed; nothing has been measured on it. Reserved for that round's single measurement, with
# the target and decision rule it writes down first (docs/benchmarks.md, "Held-out set cov3").
# New laws, query counts and a new seed offset; every family of the simulator once.
COV3 = [
    ("neardup/loguniform mid cov3", "neardup", HardnessLaw("loguniform", 1.0, 1e-12, 1e-2, immune=0.03, rho=0.5), 1080),
    ("gaussian/loguniform wide cov3", "gaussian", HardnessLaw("loguniform", 1.0, 1e-12, 1.0, immune=0.04, rho=0.3), 1020),
    ("bounded/power a1.3 cov3", "bounded", HardnessLaw("power", 1.3, 1e-12, 1e-1, immune=0.05, rho=0.6), 1130),
    ("student/power a1.25 cov3", "student", HardnessLaw("power", 1.25, 1e-12, 1e-1, immune=0.03, rho=0.2), 1170),
    ("logistic/power a1.3 cov3", "logistic", HardnessLaw("power", 1.3, 1e-11, 1e-1, immune=0.04, rho=0.3), 990),
    ("scalemix/loguniform wide cov3", "scalemix", HardnessLaw("loguniform", 1.0, 1e-13, 1.0, immune=0.02, rho=0.5), 1060),
    ("bigdup/loguniform mid cov3", "bigdup", HardnessLaw("loguniform", 1.0, 1e-11, 1e-2, immune=0.03, rho=0.2), 1110),
    ("shoulder/power a1.25 cov3", "shoulder", HardnessLaw("power", 1.25, 1e-12, 1.0, immune=0.04, rho=0.4), 1040),
]
COV3_SEED = 490_000

# Held out (--set cov4): written down on 2026-12-07, after cov3 was spent on the edge calibration
# (docs/benchmarks.md, "Where the bias lives") and before anything of the next round (estimator
# or interval) was designed. Spent on 2026-12-07 by that round's single measurement (the edge
# average, docs/benchmarks.md "Two edge models, averaged"); seen since. New laws, query counts
# and a new seed offset; every family of the simulator once.
COV4 = [
    ("neardup/power a1.3 cov4", "neardup", HardnessLaw("power", 1.3, 1e-11, 1e-2, immune=0.05, rho=0.4), 1010),
    ("gaussian/power a1.35 cov4", "gaussian", HardnessLaw("power", 1.35, 1e-12, 1e-1, immune=0.02, rho=0.2), 1140),
    ("bounded/loguniform wide cov4", "bounded", HardnessLaw("loguniform", 1.0, 1e-12, 1.0, immune=0.03, rho=0.5), 1070),
    ("student/loguniform wide cov4", "student", HardnessLaw("loguniform", 1.0, 1e-12, 1.0, immune=0.04, rho=0.4), 1090),
    ("logistic/loguniform mid cov4", "logistic", HardnessLaw("loguniform", 1.0, 1e-11, 1e-2, immune=0.03, rho=0.6), 1160),
    ("scalemix/power a1.25 cov4", "scalemix", HardnessLaw("power", 1.25, 1e-11, 1e-1, immune=0.05, rho=0.2), 1030),
    ("bigdup/power a1.3 cov4", "bigdup", HardnessLaw("power", 1.3, 1e-11, 1e-1, immune=0.02, rho=0.5), 1120),
    ("shoulder/loguniform mid cov4", "shoulder", HardnessLaw("loguniform", 1.0, 1e-11, 1e-2, immune=0.05, rho=0.3), 980),
]
COV4_SEED = 530_000

# Held out (--set cov5): written down on 2026-12-07, after cov4 was spent on the edge average
# (docs/benchmarks.md, "Two edge models, averaged") and before anything of the round after it was
# designed. Spent on 2026-12-07 by benchmarks/edge_backtest_union.py's single measurement (with
# realset5; docs/benchmarks.md, "The back-test belongs to model U"), seen since. New laws, query
# counts and a new seed offset; every family of the simulator once.
COV5 = [
    ("neardup/loguniform wide cov5", "neardup", HardnessLaw("loguniform", 1.0, 1e-12, 1.0, immune=0.04, rho=0.3), 1060),
    ("gaussian/power a1.25 cov5", "gaussian", HardnessLaw("power", 1.25, 1e-12, 1e-1, immune=0.05, rho=0.4), 1180),
    ("bounded/power a1.4 cov5", "bounded", HardnessLaw("power", 1.4, 1e-11, 1e-1, immune=0.03, rho=0.3), 1000),
    ("student/power a1.35 cov5", "student", HardnessLaw("power", 1.35, 1e-11, 1e-1, immune=0.02, rho=0.5), 1120),
    ("logistic/power a1.2 cov5", "logistic", HardnessLaw("power", 1.2, 1e-12, 1e-1, immune=0.05, rho=0.5), 1040),
    ("scalemix/loguniform mid cov5", "scalemix", HardnessLaw("loguniform", 1.0, 1e-12, 1e-2, immune=0.04, rho=0.3), 1150),
    ("bigdup/loguniform wide cov5", "bigdup", HardnessLaw("loguniform", 1.0, 1e-12, 1.0, immune=0.03, rho=0.4), 1080),
    ("shoulder/power a1.35 cov5", "shoulder", HardnessLaw("power", 1.35, 1e-12, 1e-1, immune=0.02, rho=0.6), 1020),
]
COV5_SEED = 570_000

# Held out (--set cov6): written down on 2026-12-07, after cov5 was spent on the back-test's
# U-band rule (docs/benchmarks.md, "The back-test belongs to model U") and before anything of the
# round after it was designed. Spent on 2026-12-07 by benchmarks/edge_weight.py's single
# measurement (with realset6; docs/benchmarks.md, "The back-test places the point between the edge
# models"), seen since. New laws, query counts and a new seed offset; every family once.
COV6 = [
    ("neardup/power a1.35 cov6", "neardup", HardnessLaw("power", 1.35, 1e-11, 1e-1, immune=0.03, rho=0.4), 1110),
    ("gaussian/loguniform mid cov6", "gaussian", HardnessLaw("loguniform", 1.0, 1e-11, 1e-2, immune=0.04, rho=0.5), 990),
    ("bounded/loguniform wide cov6", "bounded", HardnessLaw("loguniform", 1.0, 1e-12, 1.0, immune=0.05, rho=0.2), 1070),
    ("student/loguniform mid cov6", "student", HardnessLaw("loguniform", 1.0, 1e-12, 1e-2, immune=0.03, rho=0.3), 1010),
    ("logistic/loguniform wide cov6", "logistic", HardnessLaw("loguniform", 1.0, 1e-11, 1.0, immune=0.02, rho=0.4), 1160),
    ("scalemix/power a1.3 cov6", "scalemix", HardnessLaw("power", 1.3, 1e-12, 1e-1, immune=0.05, rho=0.4), 1040),
    ("bigdup/power a1.25 cov6", "bigdup", HardnessLaw("power", 1.25, 1e-12, 1e-1, immune=0.04, rho=0.3), 1100),
    ("shoulder/loguniform wide cov6", "shoulder", HardnessLaw("loguniform", 1.0, 1e-11, 1.0, immune=0.03, rho=0.5), 1030),
]
COV6_SEED = 610_000

# Held out (--set cov7): written down on 2026-12-07, after cov6 was spent on the edge weight and
# before anything of the round after it was designed. Spent on 2026-12-07 by that round's single
# measurement (with realset7; docs/benchmarks.md, "The two reaches past model U, joined in
# quadrature"); seen since. New laws, query counts and a new seed offset; every family once.
COV7 = [
    ("neardup/loguniform mid cov7", "neardup", HardnessLaw("loguniform", 1.0, 1e-11, 1e-2, immune=0.02, rho=0.5), 1015),
    ("gaussian/loguniform wide cov7", "gaussian", HardnessLaw("loguniform", 1.0, 1e-12, 1.0, immune=0.03, rho=0.3), 1125),
    ("bounded/loguniform mid cov7", "bounded", HardnessLaw("loguniform", 1.0, 1e-11, 1e-2, immune=0.04, rho=0.4), 1055),
    ("student/power a1.3 cov7", "student", HardnessLaw("power", 1.3, 1e-11, 1e-1, immune=0.05, rho=0.2), 1145),
    ("logistic/power a1.4 cov7", "logistic", HardnessLaw("power", 1.4, 1e-12, 1e-1, immune=0.03, rho=0.5), 995),
    ("scalemix/power a1.35 cov7", "scalemix", HardnessLaw("power", 1.35, 1e-11, 1e-1, immune=0.02, rho=0.3), 1075),
    ("bigdup/power a1.35 cov7", "bigdup", HardnessLaw("power", 1.35, 1e-11, 1e-1, immune=0.05, rho=0.6), 1165),
    ("shoulder/power a1.3 cov7", "shoulder", HardnessLaw("power", 1.3, 1e-11, 1e-1, immune=0.04, rho=0.2), 1035),
]
COV7_SEED = 650_000

# Held out (--set cov8): written down on 2026-12-07, after cov7 was spent on the quadrature join
# and before anything of the round after it was designed; nothing has been measured on it.
# Reserved for that round's single measurement (with the new real set realset8, docs/realset8.md), with
# the target and decision rule it writes down first. New laws, query counts and a new seed
# offset; every family once.
COV8 = [
    ("neardup/power a1.25 cov8", "neardup", HardnessLaw("power", 1.25, 1e-12, 1e-1, immune=0.04, rho=0.3), 1085),
    ("gaussian/power a1.35 cov8", "gaussian", HardnessLaw("power", 1.35, 1e-11, 1e-1, immune=0.02, rho=0.6), 1195),
    ("bounded/power a1.25 cov8", "bounded", HardnessLaw("power", 1.25, 1e-12, 1e-1, immune=0.03, rho=0.5), 1005),
    ("student/loguniform wide cov8", "student", HardnessLaw("loguniform", 1.0, 1e-11, 1.0, immune=0.04, rho=0.4), 1135),
    ("logistic/loguniform mid cov8", "logistic", HardnessLaw("loguniform", 1.0, 1e-12, 1e-2, immune=0.05, rho=0.3), 1065),
    ("scalemix/loguniform mid cov8", "scalemix", HardnessLaw("loguniform", 1.0, 1e-11, 1e-2, immune=0.03, rho=0.5), 1175),
    ("bigdup/loguniform wide cov8", "bigdup", HardnessLaw("loguniform", 1.0, 1e-12, 1.0, immune=0.02, rho=0.4), 1045),
    ("shoulder/loguniform mid cov8", "shoulder", HardnessLaw("loguniform", 1.0, 1e-12, 1e-2, immune=0.05, rho=0.6), 1125),
]
COV8_SEED = 690_000
HELD_OUT = {"cov1": (COV1, COV1_SEED), "cov2": (COV2, COV2_SEED), "cov3": (COV3, COV3_SEED),
            "cov4": (COV4, COV4_SEED), "cov5": (COV5, COV5_SEED), "cov6": (COV6, COV6_SEED),
            "cov7": (COV7, COV7_SEED), "cov8": (COV8, COV8_SEED)}


def old_rule_band(est, bt, metric, k, mode, factor):
    """The rule this one replaced, for the side-by-side figures: e(f) = e_M log f / log M from the
    largest stored factor M (f beyond it; every cell here has f >= 10 > M), no band of its own."""
    import numpy as np

    from rscale.core.backtest import factor_errors
    ms = bt.factors(est)
    if not ms or factor <= 1:
        return float("nan")
    top = ms[-1]
    return float(factor_errors(est, bt, metric, k, mode, top).mean()) * np.log(factor) / np.log(top)


def both_rules(h_path, n, mode):
    """(value, new low, new high, old low, old high, e(f) new, band) of mAP@1000 at N from one
    hardness file: the shipped core function, and the previous rule on the same stored arrays."""
    import numpy as np

    from rscale.core.interval import metric_intervals, predicted_intervals
    from rscale.core.prediction import predict_per_query, replicate_per_query
    from rscale.store.hardness_file import read_hardness
    est, info = read_hardness(h_path)
    (pq, lo, hi, b), = predicted_intervals(est, [("AP", 1000, n)], mode=mode, backtest=info["backtest"])
    factor = n / float(np.max(est.n_sampled))
    e_old = old_rule_band(est, info["backtest"], "AP", 1000, mode, factor)
    reps = replicate_per_query(est, "AP", n, 1000, mode)
    _, lo_o, hi_o = metric_intervals(predict_per_query(est, "AP", n, 1000, mode)[None], reps[None],
                                     backtest=np.array([e_old]))
    return (float(pq.mean()), lo, hi, float(lo_o[0]), float(hi_o[0]), None if b is None else b.at_n,
            None if b is None else (b.low, b.high), e_old)


from _shipped import MODE  # noqa: E402  (one cell through the shipped path: benchmarks/_shipped.py)


def sim_cell(spec, n, s, seed, method):
    """Shipped path (estimate -> register -> query, in process) for one simulator cell, and both
    rules from the same hardness file."""
    import tempfile
    import time

    from _shipped import shipped_sim_cell
    d = Path(tempfile.mkdtemp(prefix="interval-carry-"))
    t = time.perf_counter()
    _, truth, row, mode = shipped_sim_cell(spec, n, s, seed, method, d)
    value, lo, hi, lo_o, hi_o, e_new, band, e_old = both_rules(d / "h.parquet", n, mode)
    assert abs(row["ci_low"] - lo) < 1e-12 and abs(row["ci_high"] - hi) < 1e-12, (row, lo, hi)   # shipped == core
    return {"truth": truth, "value": row["value"], "lo": row["ci_low"], "hi": row["ci_high"], "old_lo": lo_o,
            "old_hi": hi_o, "e_new": e_new, "band": band, "e_old": e_old, "secs": time.perf_counter() - t}


def real_rows(h_dir, data):
    """Both rules on the hardness files ``benchmarks/realset/check.py --keep h_dir`` wrote through the CLI."""
    import json
    man = json.loads((Path(data) / "manifest.json").read_text())
    rows = []
    for h in sorted(p for p in Path(h_dir).glob("draw-*.parquet") if len(p.name.split(".")) == 3):
        draw, method = h.name.split(".")[0], h.name.split(".")[1]
        value, lo, hi, lo_o, hi_o, e_new, band, e_old = both_rules(h, float(man["pool"]), MODE.get(method))
        rows.append({"draw": draw, "fraction": draw.split("-")[1], "method": method, "truth": man["truth_map_at_1000"],
                     "value": value, "lo": lo, "hi": hi, "old_lo": lo_o, "old_hi": hi_o, "e_new": e_new,
                     "band": band, "e_old": e_old})
    return rows


def table(rows, key="fraction"):
    """Coverage and mean width per method and fraction, new rule beside the old."""
    import numpy as np
    out = ["| estimator | fraction | cells | old rule: covered, mean width | new rule: covered, mean width |",
           "|---|---|---|---|---|"]
    for method in dict.fromkeys(r["method"] for r in rows):
        for f in sorted({r[key] for r in rows if r["method"] == method}):
            rs = [r for r in rows if r["method"] == method and r[key] == f]
            old = sum(r["old_lo"] <= r["truth"] <= r["old_hi"] for r in rs)
            new = sum(r["lo"] <= r["truth"] <= r["hi"] for r in rs)
            out.append(f"| {method} | {f} | {len(rs)} | {old}/{len(rs)}, {np.mean([r['old_hi'] - r['old_lo'] for r in rs]):.4f} "
                       f"| {new}/{len(rs)}, {np.mean([r['hi'] - r['lo'] for r in rs]):.4f} |")
        rs = [r for r in rows if r["method"] == method]
        old = sum(r["old_lo"] <= r["truth"] <= r["old_hi"] for r in rs)
        new = sum(r["lo"] <= r["truth"] <= r["hi"] for r in rs)
        out.append(f"| {method} | all | {len(rs)} | {old}/{len(rs)} ({old / len(rs):.0%}), "
                   f"{np.mean([r['old_hi'] - r['old_lo'] for r in rs]):.4f} | {new}/{len(rs)} ({new / len(rs):.0%}), "
                   f"{np.mean([r['hi'] - r['lo'] for r in rs]):.4f} |")
    return "\n".join(out)


def main(argv=None):
    import argparse
    import json

    from rscale.sim.benchmark import SimSpec
    ap = argparse.ArgumentParser()
    ap.add_argument("--set", dest="which", default="cov1", help="cov1 (simulator) or a folder of hardness files (--real)")
    ap.add_argument("--real", default=None, help="folder written by benchmarks/realset/check.py --keep (both rules on it)")
    ap.add_argument("--data", default=None, help="with --real: the set's data folder (its manifest.json)")
    ap.add_argument("--methods", default="evt,evt-eb")
    ap.add_argument("--fractions", default="0.01,0.05")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    if a.real:
        rows = real_rows(a.real, a.data)
    else:
        if a.which != "cov1":
            raise SystemExit("--set: only cov1 here (the design sets are benchmarks/backtest_rule.py's)")
        rows = []
        for method in a.methods.split(","):
            for name, family, hl, nq in COV1:
                spec = SimSpec(name=name, family=family, n_queries=nq, hardness=hl)
                for f in (float(x) for x in a.fractions.split(",")):
                    r = sim_cell(spec, 1e8, int(f * 1e8), 7 + COV1_SEED, method)
                    r.update(method=method, scenario=name, fraction=f"{f:.0%}")
                    rows.append(r)
                    print(json.dumps(r), file=sys.stderr, flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    print(table(rows))


if __name__ == "__main__":
    main()
