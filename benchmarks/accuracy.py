"""Accuracy of every estimator against simulated truth (the paper's Table 1, on simulated data).

For each simulator family (every tail family, both hardness laws), sample fractions of a 1e8 pool
(1%, 2%, 5%, 10%), several independent draws each, plus the small-pool regime (a 1M pool sampled
at 10k / 50k / 100k, the target being the realised metric of that pool): predict mAP@1000 at N
and compare with the exact realised value. Prints signed error, MAE and the coverage of the 95%
query-bootstrap CI (and of the interval `rscale query` reports), and with --write replaces the
table in docs/benchmarks.md. --set holdout / fresh / fresh2 / fresh3 / fresh4 / fresh5 / fresh6 run scenario sets kept out of the choices
made before them (see their comments).

Run: .venv/bin/python benchmarks/accuracy.py [--draws 3] [--quick] [--set design|holdout|fresh|fresh2|fresh3|fresh4|fresh5|fresh6] [--write]
     [--shipped-only]   (evt and the interval users get: estimate with replicates and back-test, register, query)
"""

from __future__ import annotations

import argparse
import platform
import sys
import time

import numpy as np

from rscale import sim
from rscale.core.estimators.base import HardnessEstimate
from rscale.core.estimators.methods import estimate
from rscale.core.prediction import predict_per_query
from rscale.core.uncertainty import bootstrap_indices, percentile_ci, query_bootstrap
from rscale.sim.benchmark import HardnessLaw, SimSpec

K_METRIC = 1000
REPORTED = "evt shipped interval (benchmark)"   # the interval `rscale query` reports: estimate, register, query
POPULATION = "evt shipped interval (population)"

# (label, method, params, mode)
ESTIMATORS = [
    ("naive (evaluate at S)", "naive", {}, None),
    ("count", "count", {}, "plugin"),
    ("loguniform curve", "loguniform", {}, None),
    ("powerlaw curve", "powerlaw", {}, None),
    ("sdm (skew-normal)", "sdm", {}, "plugin"),
    ("evt-paper (plugin)", "evt-paper", {}, "plugin"),
    ("evt-paper (expected)", "evt-paper", {}, "expected"),
    ("evt (default, plugin)", "evt", {}, "plugin"),
    ("evt (default, expected)", "evt", {}, "expected"),
    ("evt q=0.98 (plugin)", "evt", {"q": 0.98}, "plugin"),
    # the hierarchical tail model (rscale.core.estimators.evt_eb): the realised metric's
    # expectation averaged over its posterior draws (posterior predictive); xi_max=0: bounded grid
    ("evt-eb (predictive, expected)", "evt-eb", {}, "expected"),
    ("evt-eb xi_max=0 (predictive, expected)", "evt-eb", {"xi_max": 0.0}, "expected"),
    # cap-free: a grid to a genuinely heavy shape, the top held-out excesses censored in the shape
    # fit (the fresh5 candidate, docs/benchmarks.md)
    ("evt-eb xi_max=0.5 censored (predictive, expected)", "evt-eb", {"xi_max": 0.5, "shape_fit": "censored"}, "expected"),
]
EB_ROWS = ("evt-eb (predictive, expected)", "evt-eb xi_max=0 (predictive, expected)",
           "evt-eb xi_max=0.5 censored (predictive, expected)")

SCENARIOS = [
    # name, family, hardness law, n_queries (ILIAS ~1232, INSTRE ~1250)
    ("bounded/power", "bounded", HardnessLaw("power", 1.2, 1e-10, 1.0, immune=0.05), 1232),
    ("gaussian/loguniform", "gaussian", HardnessLaw("loguniform", 1.0, 1e-12, 1.0, immune=0.02), 1250),
    ("neardup/loguniform", "neardup", HardnessLaw("loguniform", 1.0, 1e-11, 1e-1, immune=0.03), 1232),
    ("gaussian/power", "gaussian", HardnessLaw("power", 1.2, 1e-10, 1.0, immune=0.05), 1250),
    ("bounded/loguniform", "bounded", HardnessLaw("loguniform", 1.0, 1e-12, 1.0, immune=0.02), 1232),
]


# Held out from every choice made on the table above (the convergence factor included): other
# hardness laws, immune shares, within-query correlation, query counts and seeds (--set holdout).
HOLDOUT = [
    ("bounded/power a1.5", "bounded", HardnessLaw("power", 1.5, 1e-11, 1e-1, immune=0.1, rho=0.3), 800),
    ("gaussian/loguniform wide", "gaussian", HardnessLaw("loguniform", 1.0, 1e-13, 1e-1, immune=0.0, rho=0.7), 1500),
    ("neardup/power a1.2", "neardup", HardnessLaw("power", 1.2, 1e-10, 1e-2, immune=0.05), 1000),
    ("gaussian/power a1.5", "gaussian", HardnessLaw("power", 1.5, 1e-11, 1e-1, immune=0.1, rho=0.0), 600),
    ("bounded/loguniform narrow", "bounded", HardnessLaw("loguniform", 1.0, 1e-9, 1e-3, immune=0.05), 2000),
    ("neardup/loguniform", "neardup", HardnessLaw("loguniform", 1.0, 1e-12, 1e-1, immune=0.1, rho=0.2), 1250),
]
HOLDOUT_SEED = 50_000

# Fresh (--set fresh): written down before any estimator or interval choice was measured on them, with
# two families (scalemix, shoulder) that no earlier choice saw. The shared-shape alternative of the
# reported interval was chosen on the design and held-out tables; this set is its first check.
FRESH = [
    ("scalemix/power", "scalemix", HardnessLaw("power", 1.3, 1e-10, 1e-1, immune=0.05, rho=0.4), 1100),
    ("shoulder/loguniform", "shoulder", HardnessLaw("loguniform", 1.0, 1e-11, 1e-1, immune=0.05, rho=0.5), 1300),
    ("scalemix/loguniform", "scalemix", HardnessLaw("loguniform", 1.0, 1e-12, 1.0, immune=0.02, rho=0.5), 900),
    ("shoulder/power a1.4", "shoulder", HardnessLaw("power", 1.4, 1e-11, 1e-2, immune=0.08, rho=0.3), 1200),
    ("bounded/power a1.3", "bounded", HardnessLaw("power", 1.3, 1e-10, 1e-1, immune=0.05, rho=0.6), 1000),
    ("gaussian/power a1.3", "gaussian", HardnessLaw("power", 1.3, 1e-12, 1e-2, immune=0.05, rho=0.4), 1232),
]
FRESH_SEED = 90_000

# Fresh, second round (--set fresh2): written down after the fresh set's result (74% coverage: the
# bounded-shape constraint was too light on the scalemix family) and before the unconstrained-shape
# alternative was measured anywhere; the families are known, the hardness laws and seeds are new.
FRESH2 = [
    ("scalemix/power a1.1", "scalemix", HardnessLaw("power", 1.1, 1e-11, 1e-1, immune=0.03, rho=0.6), 1250),
    ("shoulder/loguniform wide", "shoulder", HardnessLaw("loguniform", 1.0, 1e-13, 1.0, immune=0.0, rho=0.3), 1000),
    ("neardup/power a1.4", "neardup", HardnessLaw("power", 1.4, 1e-11, 1e-1, immune=0.05, rho=0.5), 1200),
    ("gaussian/loguniform narrow", "gaussian", HardnessLaw("loguniform", 1.0, 1e-10, 1e-2, immune=0.05, rho=0.2), 900),
    ("bounded/power rho0", "bounded", HardnessLaw("power", 1.2, 1e-12, 1e-1, immune=0.02, rho=0.0), 1400),
    ("scalemix/loguniform narrow", "scalemix", HardnessLaw("loguniform", 1.0, 1e-11, 1e-2, immune=0.05, rho=0.4), 1100),
]
FRESH2_SEED = 130_000

# Fresh, third round (--set fresh3): written down at the start of the round that followed fresh2
# (87%), before any change of that round was measured; a family no choice saw (logistic: an
# exactly exponential tail), known families with new hardness laws, query counts and seeds.
FRESH3 = [
    ("logistic/power a1.25", "logistic", HardnessLaw("power", 1.25, 1e-11, 1e-1, immune=0.04, rho=0.5), 1150),
    ("logistic/loguniform wide", "logistic", HardnessLaw("loguniform", 1.0, 1e-12, 1.0, immune=0.02, rho=0.2), 1250),
    ("shoulder/power a1.2 rho0.1", "shoulder", HardnessLaw("power", 1.2, 1e-12, 1e-1, immune=0.05, rho=0.1), 1232),
    ("neardup/loguniform narrow", "neardup", HardnessLaw("loguniform", 1.0, 1e-10, 1e-2, immune=0.05, rho=0.4), 1000),
    ("scalemix/power a1.3", "scalemix", HardnessLaw("power", 1.3, 1e-12, 1e-1, immune=0.1, rho=0.3), 1300),
    ("bounded/loguniform rho0.8", "bounded", HardnessLaw("loguniform", 1.0, 1e-11, 1e-1, immune=0.03, rho=0.8), 900),
]
FRESH3_SEED = 170_000

# Fresh, fourth round (--set fresh4): written down after fresh3 was measured and before the
# goodness-of-fit threshold rule (a near-duplicate fix) was measured on any set but the four
# before fresh3; two near-duplicate scenarios, since that rule acts there.
FRESH4 = [
    ("neardup/power a1.3", "neardup", HardnessLaw("power", 1.3, 1e-12, 1e-1, immune=0.03, rho=0.3), 1100),
    ("neardup/loguniform wide", "neardup", HardnessLaw("loguniform", 1.0, 1e-13, 1.0, immune=0.0, rho=0.6), 1300),
    ("shoulder/loguniform rho0.7", "shoulder", HardnessLaw("loguniform", 1.0, 1e-12, 1e-1, immune=0.05, rho=0.7), 950),
    ("logistic/power a1.4", "logistic", HardnessLaw("power", 1.4, 1e-12, 1e-1, immune=0.05, rho=0.4), 1232),
    ("gaussian/power a1.25", "gaussian", HardnessLaw("power", 1.25, 1e-11, 1.0, immune=0.02, rho=0.5), 1250),
    ("scalemix/loguniform wide", "scalemix", HardnessLaw("loguniform", 1.0, 1e-12, 1.0, immune=0.03, rho=0.2), 1000),
]
FRESH4_SEED = 210_000

# Fresh, fifth round (--set fresh5): written down before evt-eb's cap-free shape prior was measured
# on any set but the design set; a genuinely heavy family no choice saw (student: GPD shape
# 1/nu = 0.1..0.25), two near-duplicate scenarios, known families with new laws and a new seed.
FRESH5 = [
    ("student/power a1.3", "student", HardnessLaw("power", 1.3, 1e-11, 1e-1, immune=0.04, rho=0.3), 1200),
    ("student/loguniform", "student", HardnessLaw("loguniform", 1.0, 1e-12, 1.0, immune=0.02, rho=0.5), 1000),
    ("neardup/power a1.15", "neardup", HardnessLaw("power", 1.15, 1e-11, 1e-1, immune=0.05, rho=0.4), 1250),
    ("neardup/loguniform mid", "neardup", HardnessLaw("loguniform", 1.0, 1e-12, 1e-2, immune=0.02, rho=0.1), 1100),
    ("bounded/power a1.35", "bounded", HardnessLaw("power", 1.35, 1e-12, 1.0, immune=0.03, rho=0.5), 950),
    ("logistic/loguniform narrow", "logistic", HardnessLaw("loguniform", 1.0, 1e-10, 1e-2, immune=0.05, rho=0.3), 1300),
    ("scalemix/power a1.2", "scalemix", HardnessLaw("power", 1.2, 1e-11, 1.0, immune=0.04, rho=0.6), 1150),
]
FRESH5_SEED = 250_000

# Fresh, sixth round (--set fresh6): written down before evt-eb's cluster tail (a near-duplicate
# cluster above the bulk counted apart, with a tail of its own) was measured on any set but the
# design sets (design, fresh4, fresh5's near-duplicate cells); a family no choice saw (bigdup:
# larger, tighter clusters lower in the bulk's tail), known families with new laws and a new seed.
FRESH6 = [
    ("neardup/power a1.25", "neardup", HardnessLaw("power", 1.25, 1e-11, 1e-1, immune=0.04, rho=0.2), 1150),
    ("bigdup/loguniform", "bigdup", HardnessLaw("loguniform", 1.0, 1e-12, 1e-1, immune=0.03, rho=0.4), 1000),
    ("bounded/loguniform mid", "bounded", HardnessLaw("loguniform", 1.0, 1e-12, 1e-2, immune=0.04, rho=0.3), 1100),
    ("gaussian/loguniform rho0.4", "gaussian", HardnessLaw("loguniform", 1.0, 1e-11, 1.0, immune=0.03, rho=0.4), 1200),
    ("student/power a1.2", "student", HardnessLaw("power", 1.2, 1e-11, 1e-1, immune=0.05, rho=0.5), 1000),
    ("scalemix/loguniform mid", "scalemix", HardnessLaw("loguniform", 1.0, 1e-12, 1e-2, immune=0.02, rho=0.3), 1050),
    ("logistic/power a1.2", "logistic", HardnessLaw("power", 1.2, 1e-12, 1.0, immune=0.03, rho=0.2), 1150),
]
FRESH6_SEED = 290_000
SETS = {"design": (SCENARIOS, 0), "holdout": (HOLDOUT, HOLDOUT_SEED), "fresh": (FRESH, FRESH_SEED),
        "fresh2": (FRESH2, FRESH2_SEED), "fresh3": (FRESH3, FRESH3_SEED),
        "fresh4": (FRESH4, FRESH4_SEED), "fresh5": (FRESH5, FRESH5_SEED), "fresh6": (FRESH6, FRESH6_SEED)}


_SHIPPED = {}


def shipped(ss, n, ci_kind, seed):
    """The interval users get: rscale estimate (with its stored replicates) -> register -> query,
    through the api (in process). The estimate and registration are shared by both ci kinds."""
    import tempfile
    from pathlib import Path

    from rscale import api
    from rscale.query.grammar import format_size
    from rscale.store.sample_stats_file import write_sample_stats

    key = (id(ss), seed, n)      # ss is held in the entry, so its id cannot be reused while cached
    t = time.perf_counter()
    if key not in _SHIPPED:
        _SHIPPED.clear()
        d = Path(tempfile.mkdtemp(prefix="accuracy-"))
        write_sample_stats(ss, d / "s.parquet")
        api.estimate(d / "s.parquet", "evt", out=d / "h.parquet")
        api.register(d / "h.parquet", d / "s.parquet", registry=d / "reg", backbone="b", benchmark="sim")
        _SHIPPED[key] = (d / "reg", time.perf_counter() - t, ss)
    reg, secs, _ = _SHIPPED[key]
    row = api.query(f"mAP@{K_METRIC} at N={format_size(int(n))} for b", reg, ci_kind=ci_kind, seed=seed)["rows"][0]
    return row["value"], row["ci_low"], row["ci_high"], secs + time.perf_counter() - t


def run_one(spec, n, s, seed, b_boot=300):
    bench = sim.simulate(spec, seed=seed)
    k = min(4000, s)
    ss = sim.sample(bench, s, k=k, seed=seed)
    truth = float(sim.truth(bench, ss, n, "AP", K_METRIC, seed=seed).mean())
    idx = bootstrap_indices(ss.n_queries, b_boot, seed)
    out = {}
    for label, method, params, mode in ESTIMATORS:
        t = time.perf_counter()
        est = estimate(ss, method, **({"metric": "AP", "k": K_METRIC} if mode is None else {}), **params)
        if isinstance(est, HardnessEstimate):
            pq = predict_per_query(est, "AP", n, K_METRIC, mode)
            pred = float(pq.mean())
            lo, hi = percentile_ci(query_bootstrap(pq, idx=idx))
            if label.startswith("evt (default, plugin)"):
                pin = float(predict_per_query(est, "AP", n, K_METRIC, "plugin", in_pool_counts=ss.pos_counts).mean())
                out["evt in-pool (plugin)"] = (pin - truth, None, 0.0, float("nan"))   # no CI of its own
                for kind, row in (("benchmark", REPORTED), ("population", POPULATION)):
                    value, r_lo, r_hi, secs = shipped(ss, n, kind, seed)
                    out[row] = (value - truth, r_lo <= truth <= r_hi, secs, r_hi - r_lo)
        else:
            pred = est.value(n)
            if est.method == "powerlaw":
                w = np.stack([np.bincount(r, minlength=ss.n_queries) / ss.n_queries for r in idx[:100]])
                boots = np.array([est.value(n, wi) for wi in w])
            else:
                boots = query_bootstrap(est.per_query(n), idx=idx)
            lo, hi = percentile_ci(boots)
        out[label] = (pred - truth, lo <= truth <= hi, time.perf_counter() - t, hi - lo)
    return truth, out


EVT_ROWS = ("evt-paper (plugin)", "evt (default, plugin)") + EB_ROWS
CORE_ROWS = ("count", "sdm (skew-normal)", "evt-paper (plugin)", "evt (default, plugin)") + EB_ROWS


def selected_estimators(which: str, *, core: bool = False, shipped_only: bool = False):
    """(the ESTIMATORS rows a run measures, a one-line note naming the rows it leaves out or None).

    ``--shipped-only``: evt (default) alone; ``--core``: count, sdm, evt-paper, evt and the evt-eb
    rows, on every set; otherwise every row on the design set and the evt variants on the others."""
    if shipped_only:
        keep, why = ("evt (default, plugin)",), "--shipped-only"
    elif core:
        keep, why = CORE_ROWS, "--core"
    elif which != "design":
        keep, why = EVT_ROWS, f"--set {which} runs the evt variants only; --core adds count and sdm"
    else:
        return list(ESTIMATORS), None
    rows = [e for e in ESTIMATORS if e[0] in keep]
    left = [e[0] for e in ESTIMATORS if e[0] not in keep]
    return rows, (f"not run ({why}): {'; '.join(left)}" if left else None)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=3, help="independent sample draws per cell")
    ap.add_argument("--quick", action="store_true", help="one draw, two scenarios, 5%% only")
    ap.add_argument("--fractions", default=None, help="comma-separated web-scale fractions (default 0.01,0.02,0.05,0.1)")
    ap.add_argument("--no-pool", action="store_true", help="skip the small-pool (1M) cells")
    ap.add_argument("--core", action="store_true", help="only count, sdm, evt-paper, evt (default) and evt-eb, on any set")
    ap.add_argument("--shipped-only", action="store_true", help="only evt (default) and its shipped intervals "
                    "(estimate with replicates and back-test, register, query)")
    ap.add_argument("--write", action="store_true", help="write the table into docs/benchmarks.md")
    ap.add_argument("--set", dest="which", choices=list(SETS), default="design",
                    help="scenario set: design (every estimator), holdout, fresh, fresh2, fresh3, fresh4, fresh5, fresh6 (the evt variants only: "
                         "they check the default and its reported interval)")
    args = ap.parse_args(argv)
    global ESTIMATORS
    ESTIMATORS, note = selected_estimators(args.which, core=args.core, shipped_only=args.shipped_only)
    if note:
        print(note, file=sys.stderr)
    n_big, pool = 1e8, 1e6
    cells = []
    scenarios, seed_offset = SETS[args.which]
    if args.quick:
        scenarios = scenarios[:2]
    draws = 1 if args.quick else args.draws
    fracs = [0.05] if args.quick else [0.01, 0.02, 0.05, 0.10]
    if args.fractions:
        fracs = [float(f) for f in args.fractions.split(",")]
    for name, family, hl, nq in scenarios:
        spec = SimSpec(name=name, family=family, n_queries=nq, hardness=hl)
        for f in fracs:
            cells.append((f"web N=1e8, {f:.0%}", name, spec, n_big, int(f * n_big)))
        if not args.quick and not args.no_pool:
            for s in (10_000, 50_000, 100_000):
                cells.append((f"pool N=1e6, S={s // 1000}k", name, spec, pool, s))
    rows, by_scenario = {}, {}
    t0 = time.time()
    for regime, name, spec, n, s in cells:
        for d in range(draws):
            truth, out = run_one(spec, n, s, seed=1000 * d + 7 + seed_offset)
            for label, (err, covered, secs, width) in out.items():
                rows.setdefault((regime, label), []).append((err, covered, secs, width))
                by_scenario.setdefault((name, label), []).append((err, covered))
        print(f"  {regime:22s} {name:22s} done ({time.time() - t0:.0f}s)", file=sys.stderr)
    lines = [
        f"Command: `.venv/bin/python benchmarks/accuracy.py {' '.join(argv if argv is not None else sys.argv[1:])}` "
        f"({time.strftime('%Y-%m-%d')}, {platform.machine()}, Python {platform.python_version()}); "
        f"mAP@{K_METRIC}; {len(scenarios)} simulator scenarios x {draws} independent draws per row; "
        "error = prediction - exact realised value; coverage and mean width of the 95% query-bootstrap CI "
        "(for the two `evt shipped interval` rows: of the interval `rscale query --ci benchmark|population` reports "
        "after `rscale estimate` and `rscale register`).",
        "",
        "| regime | estimator | mean signed error | MAE | max abs error | CI coverage | CI width | seconds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (regime, label), vals in rows.items():
        e = np.array([v[0] for v in vals])
        c = [v[1] for v in vals]
        t = np.array([v[2] for v in vals])
        cov = "n/a" if c[0] is None else f"{np.mean(c):.0%}"
        lines.append(f"| {regime} | {label} | {e.mean():+.4f} | {np.abs(e).mean():.4f} | "
                     f"{np.abs(e).max():.4f} | {cov} | {np.mean([v[3] for v in vals]):.4f} | {t.mean():.2f} |")
    # overall summary per estimator
    lines += ["", "| estimator | MAE, web-scale cells | MAE, small-pool cells | CI coverage, all | CI width, all |",
              "|---|---|---|---|---|"]
    extra = [REPORTED, POPULATION, "evt in-pool (plugin)"]
    for label in [e[0] for e in ESTIMATORS] + extra:
        web = [abs(v[0]) for (r, lab), vals in rows.items() if lab == label and r.startswith("web") for v in vals]
        small = [abs(v[0]) for (r, lab), vals in rows.items() if lab == label and r.startswith("pool") for v in vals]
        cov = [v[1] for (r, lab), vals in rows.items() if lab == label for v in vals]
        width = [v[3] for (r, lab), vals in rows.items() if lab == label for v in vals]
        cov_text = "n/a" if cov and cov[0] is None else f"{np.mean(cov):.0%}"
        lines.append(f"| {label} | {np.mean(web):.4f} | {np.mean(small) if small else float('nan'):.4f} | {cov_text} "
                     f"| {np.mean(width):.4f} |")
    lines += ["", f"| scenario | MAE ({REPORTED}) | coverage of the reported CI |", "|---|---|---|"]
    for name in dict.fromkeys(n for n, _ in by_scenario):
        vals = by_scenario[(name, REPORTED)]
        lines.append(f"| {name} | {np.mean([abs(v[0]) for v in vals]):.4f} | {np.mean([v[1] for v in vals]):.0%} |")
    table = "\n".join(lines)
    print(table)
    if args.write:
        path = "docs/benchmarks.md"
        text = open(path).read()
        marker = "accuracy" if args.which == "design" else args.which
        start, end = f"<!-- {marker}:start -->", f"<!-- {marker}:end -->"
        block = f"{start}\n{table}\n{end}"
        if start in text:
            text = text[:text.index(start)] + block + text[text.index(end) + len(end):]
        else:
            text += f"\n## Estimator accuracy (`benchmarks/accuracy.py`)\n\n{block}\n"
        open(path, "w").write(text)


if __name__ == "__main__":
    main()
