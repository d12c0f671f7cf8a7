"""Averaging the two edge models the sample cannot tell apart (issue 14; docs/benchmarks.md, "Two
edge models, averaged"); a benchmark of a candidate rule, nothing of it is in ``src/``.

Past the sample's edge (positives the sample counts no distractor above) evt-eb's hardness is its
tail model's extrapolation, and its 16 posterior draws carry the spread. The complementary halves
measure that model's mean error there (the other half's counts over the own half's model, in three
decades of model depth: ``edge_transfer.halves_band_factors``), and the full pool confirms those
means on every real set, but not the spread that decides whether correcting the mean helps mAP;
the halves do not identify it (docs/benchmarks.md, "Does the halves' edge ratio transfer?" and "Is
it the sample's depth?"). So two models fit the sample equally well:

- ``U``: evt-eb as shipped;
- ``C``: every edge positive's draws times its band's halves ratio (1 outside the bands).

The candidate gives each weight 1/2 (the sample carries no evidence between them): its point is
the mean of the two predictions, and its benchmark interval the shipped interval of ``U`` joined
with the same interval moved by C - U (the union of the two models' intervals).

Per cell, through the shipped path (``benchmarks/accuracy_table.py``'s ``run_cell``: estimate ->
register -> query, cached): U's value and benchmark interval and the truth (realised mAP@1000 of
the simulator's gallery at N = 1e8, or a real set's full-pool value); then C - U from the fit the
cell stored (two half fits of the first split; since the rule is built, the factor the fit stores).
Printed: the signed errors of U, the average and C, the coverage and width of U's interval and of
the union, and a check: the script's own prediction of what the query answers (U before the rule
was built, the average since) against the answer, 0 up to rounding.

Run: PYTHONPATH=src .venv/bin/python benchmarks/edge_average.py --set design [--fractions 0.01,0.05] [--json rows.json]
     (cov4 and realset4 were measured once with --held-out, 2026-12-07; seen since)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import accuracy_table as T  # noqa: E402
from bias_by_depth import mean_metric as mean_ap  # noqa: E402
from edge_transfer import SEEN_HELD_OUT, SEEN_REAL_SETS, check_set, halves_band_factors  # noqa: E402

METHOD = "evt-eb"
DEFAULT_CACHE = Path.home() / ".cache" / "rscale" / "accuracy_table"


def held_out_sim_draws(name: str, fractions) -> list:
    """The accuracy table's draw 0 of every scenario of a held-out simulator set
    (``interval_carry.HELD_OUT``), as ``T.sim_draws`` makes them for the table's own sets."""
    from interval_carry import HELD_OUT
    scenarios, offset = HELD_OUT[name]
    out = []
    for sc_name, family, hl, nq in scenarios:
        spec = {"name": sc_name, "family": family, "n_queries": nq, "hardness": dict(vars(hl))}
        for f in fractions:
            s = int(f * T.SIM_N)
            sim = {"spec": spec, "s": s, "k": min(4000, s), "seed": 7 + offset}
            out.append(T.Draw(name, sc_name, f, 0, T.SIM_N, sim=sim, identity=json.dumps(sim, sort_keys=True, default=str)))
    return out


def draws_of(name: str, fractions) -> list:
    """A set's cells: a real set's committed draws (any folder ``benchmarks/NAME/data``), a held-out
    simulator set's draw 0 (``interval_carry.HELD_OUT``), else the accuracy table's draw 0. Which
    sets a script may run is its ``check``'s business, not this."""
    from interval_carry import HELD_OUT
    if (Path(__file__).parent / name / "data" / "manifest.json").is_file():
        return T.real_draws(name, fractions, None)
    if name in HELD_OUT:
        return held_out_sim_draws(name, fractions)
    return T.sim_draws(name, fractions, 1)


def shipped_cell(draw, cache: Path):
    """(answer, estimate, file info, sample file) of one cell through the shipped path (``T.run_cell``: estimate
    -> register -> query, cached), the estimate read back from the fit the cell stored."""
    from rscale.store.hardness_file import read_hardness
    res = T.run_cell(draw, METHOD, str(cache))
    if "failed" in res or res.get("lo") is None:
        raise RuntimeError(f"{draw.label}: the shipped path failed: {res.get('failed')}")
    sample, _ = T.cached_sample(draw, cache)
    fit = T._valid_fit(cache, sample, METHOD)
    est, info = read_hardness(Path(fit["dir"]) / fit["file"])
    return res, est, info, sample


def cell(draw, cache: Path) -> dict:
    """One cell (module docstring). Since the rule is built (rscale estimate stores the edge factor
    and the query places its point between the models: the average until the back-test weighted it,
    2026-12-07), the query answers that point: then ``U``'s value is the script's own,
    its interval the shipped interval of the fit without its factor (model U alone), the union the
    one measured (U's interval joined with itself moved by C - U, clipped to [0, 1]; the query's own
    interval has moved only U by the back-test band since 2026-12-07, docs/benchmarks.md "The
    back-test belongs to model U"), and ``check`` compares the shipped point with the query's answer."""
    from rscale.store.sample_stats_file import read_sample_stats
    res, est, info, sample = shipped_cell(draw, cache)
    built = est.edge_factor is not None
    if built:
        f, ratios = est.edge_factor, info["edge"]["ratios"]
    else:
        f, ratios = halves_band_factors(read_sample_stats(sample), est, METHOD)
    draws = est.draws.T
    u = mean_ap(draws, est.offsets, draw.n, "expected")
    c = mean_ap(draws * f[None], est.offsets, draw.n, "expected")
    shift = c - u
    v, lo, hi, t = res["value"], res["lo"], res["hi"], res["truth"]
    if built:                                   # the query gave the point between the models
        from dataclasses import replace

        from rscale.core.interval import _bands, _cell_predictions, predicted_intervals
        from rscale.core.prediction import edge_weight
        [band] = _bands(_cell_predictions(est, [("AP", 1000, float(draw.n))], T.query_mode(METHOD), "benchmark", 0,
                                          None, info["backtest"])[2])
        w = edge_weight(u, c, band)             # 1/2 (the average) until 2026-12-07 (docs/benchmarks.md)
        check = abs((1 - w) * u + w * c - v)
        [(_, lo, hi, _)] = predicted_intervals(replace(est, edge_factor=None), [("AP", 1000, float(draw.n))],
                                               mode=T.query_mode(METHOD), backtest=info["backtest"])
        lo2, hi2 = max(0.0, min(lo, lo + shift)), min(1.0, max(hi, hi + shift))
    else:                                       # the query gave U
        check = abs(u - v)
        lo2, hi2 = min(lo, lo + shift), max(hi, hi + shift)
    return {"set": draw.set, "cell": draw.scenario if draw.sim else f"draw {draw.draw}", "fraction": draw.fraction,
            "truth": t, "value": v, "shift": shift, "u_check": check, "band_ratios": [float(r) for r in ratios],
            "built": built, "err_U": u - t, "err_average": (u + c) / 2 - t, "err_C": c - t,
            "covered_U": bool(lo <= t <= hi), "width_U": hi - lo,
            "covered_union": bool(lo2 <= t <= hi2), "width_union": hi2 - lo2}


def summary(rows: list) -> str:
    out = ["| set | S/N | cells | MAE U | MAE average | MAE C | U covers | width | union covers | width | max abs U | max abs average |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in sorted({r["set"] for r in rows}):
        for f in sorted({r["fraction"] for r in rows if r["set"] == s}):
            rs = [r for r in rows if r["set"] == s and r["fraction"] == f]

            def m(k):
                return float(np.mean([abs(r[k]) for r in rs]))
            out.append(f"| {s} | {f:.0%} | {len(rs)} | {m('err_U'):.4f} | {m('err_average'):.4f} | {m('err_C'):.4f} | "
                       f"{sum(r['covered_U'] for r in rs)}/{len(rs)} | {m('width_U'):.4f} | "
                       f"{sum(r['covered_union'] for r in rs)}/{len(rs)} | {m('width_union'):.4f} | "
                       f"{max(abs(r['err_U']) for r in rs):.4f} | {max(abs(r['err_average']) for r in rs):.4f} |")
    return "\n".join(out)


def check_seen_or_reserved(which: str, held_out: bool, reserved: tuple = ()) -> None:
    """Stop (one line) unless ``which`` is seen data (a design set, a spent held-out simulator set,
    a seen real set), or ``held_out`` and one of ``reserved`` (the sets a round wrote down for its
    single measurement)."""
    from bias_by_depth import DESIGN_SETS
    seen = (*DESIGN_SETS, *SEEN_HELD_OUT, *SEEN_REAL_SETS)
    if which not in seen and not (held_out and which in reserved):
        raise SystemExit(f"--set {which}: a seen set ({', '.join(seen)}); a held-out set is measured once, "
                         f"with --held-out, by the round that wrote down its rule "
                         f"({'reserved: ' + ', '.join(reserved) if reserved else 'none is reserved now'})")


def run_cells(argv, *, description: str, check, cell_of, header: str, line, summary_of, held_out_help: str) -> list:
    """The command line of a per-cell candidate script (this one, ``edge_backtest_union.py``,
    ``edge_weight.py``, ``interval_quadrature.py``): ``--set`` (guarded by ``check(set, held_out)``),
    ``--fractions``, ``--cache``, ``--held-out``, ``--json``; one table line per cell (``line(row)``)
    as it is computed, then ``summary_of(rows)``."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--set", dest="which", required=True)
    ap.add_argument("--fractions", default="0.01,0.05")
    ap.add_argument("--cache", default=str(DEFAULT_CACHE), help="the accuracy table's cache (shared with it)")
    ap.add_argument("--held-out", action="store_true", help=held_out_help)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    check(a.which, a.held_out)
    fractions = [float(x) for x in a.fractions.split(",")]
    # the fits' lineage goes where the accuracy table's goes (its cache), not into the working folder
    os.environ.setdefault("MLFLOW_TRACKING_URI", "sqlite:///" + str(Path(a.cache) / "mlruns.db"))
    rows = []
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for d in draws_of(a.which, fractions):
        r = cell_of(d, Path(a.cache))
        rows.append(r)
        print(line(r), flush=True)
        if a.json:
            Path(a.json).write_text(json.dumps(rows, indent=1))
    print()
    print(summary_of(rows))
    return rows


def main(argv=None):
    run_cells(argv, description=__doc__.split("\n")[0], check=check_set, cell_of=cell,
              header="| set | cell | S/N | truth | U | average | C | band ratios | U covers | union covers | |own - query| |",
              line=lambda r: (f"| {r['set']} | {r['cell']} | {r['fraction']:g} | {r['truth']:.4f} | {r['err_U']:+.4f} | "
                              f"{r['err_average']:+.4f} | {r['err_C']:+.4f} | "
                              f"{' / '.join(f'{x:.2f}' for x in r['band_ratios'])} | "
                              f"{'yes' if r['covered_U'] else 'no'} | {'yes' if r['covered_union'] else 'no'} | "
                              f"{r['u_check']:.1e} |"),
              summary_of=summary,
              held_out_help="allow the sets in edge_transfer.HELD_OUT_SETS: the single measurement written down before it")


if __name__ == "__main__":
    main()
