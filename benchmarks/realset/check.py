"""Run the shipped estimators once on the committed real-embedding set (docs/realset.md).

For every committed draw: ``rscale estimate DRAW -m METHOD -o H`` then ``rscale predict H --n N
--sample DRAW`` (N = the pool size) through the CLI itself (in process, typer's runner), for the
hardness estimators evt, evt-eb (the default), evt-paper, count and sdm; the curve baselines (loguniform,
powerlaw; no CLI command) through ``rscale.core.estimators.methods.estimate`` as
benchmarks/accuracy.py calls them; and the naive value at S. Compared with the truth in the
manifest: signed error per draw, mean |error| per fraction, and for the hardness estimators
whether the interval ``rscale predict --sample`` prints covers the truth, and its width.

Run: PYTHONPATH=src .venv/bin/python benchmarks/realset/check.py [--set realset | realset2 | realset3] [--data DIR]
(``--set NAME`` reads benchmarks/NAME/data: the icon set of docs/realset.md, the WordNet set of
docs/realset2.md, the glyph set of docs/realset3.md; ``--data`` any folder of the same layout). Prints a markdown table (pasted into
docs/benchmarks.md) and writes --json if given.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

HARDNESS = ("evt", "evt-eb", "evt-paper", "count", "sdm")
CURVES = ("loguniform", "powerlaw")
MODE = {"evt-eb": "expected"}     # evt-eb predicts the realised metric's expectation over its draws


def cli(args):
    from typer.testing import CliRunner

    from rscale.cli.app import app
    res = CliRunner().invoke(app, [str(a) for a in args])
    if res.exit_code != 0:
        raise RuntimeError(f"rscale {' '.join(map(str, args))} exited {res.exit_code}: {res.output[-400:]}")
    return res.output


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--set", default="realset", help="benchmarks/SET/data (realset, realset2, realset3); --data overrides")
    ap.add_argument("--data", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--methods", default=",".join(HARDNESS + CURVES),
                    help="comma-separated subset of the estimators to run (default: all)")
    ap.add_argument("--keep", default=None, help="write the hardness files here (kept; default: a temporary folder)")
    ap.add_argument("--fractions", default=None, help="comma-separated draw fractions to run (e.g. 01pct,05pct; default: all)")
    a = ap.parse_args(argv)
    chosen = a.methods.split(",")
    from rscale.core.estimators.methods import estimate
    from rscale.core.metrics import ap_at_k_from_counts
    from rscale.errors import InvalidArgumentError
    from rscale.store.sample_stats_file import read_sample_stats

    data = Path(a.data) if a.data else Path(__file__).resolve().parent.parent / a.set / "data"
    man = json.loads((data / "manifest.json").read_text())
    n, truth = man["pool"], man["truth_map_at_1000"]
    rows = []
    tmp = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="realset-check-"))
    tmp.mkdir(parents=True, exist_ok=True)
    for draw in sorted(k for k in man["sizes"] if k.startswith("draw-")):
        if a.fractions and draw.split("-")[1] not in a.fractions.split(","):
            continue
        path = data / f"{draw}.sample_stats.parquet"
        ss = read_sample_stats(path)
        frac = draw.split("-")[1]
        row = {"draw": draw, "fraction": frac, "S": int(ss.n_sampled[0]), "truth": truth,
               "naive": float(np.mean(ap_at_k_from_counts(ss.pos_counts, ss.pos_offsets, 1000)))}
        for m in (m for m in HARDNESS if m in chosen):
            t = time.perf_counter()
            h = tmp / f"{draw}.{m}.parquet"
            cli(["estimate", path, "-m", m, "-o", h, "--format", "json"])
            row[m] = {"secs": 0.0}
            for kind in ("benchmark", "population"):
                mode = ["--mode", MODE[m]] if m in MODE else []
                out = json.loads(cli(["predict", h, "--n", str(n), "--sample", path, "--ci", kind, *mode, "--format", "json"]))
                r = out[0] if isinstance(out, list) else out["rows"][0]
                pre = "" if kind == "benchmark" else "pop_"
                row[m].update({"value": r["value"], pre + "lo": r["ci_low"], pre + "hi": r["ci_high"],
                               "ci_kind": r.get("ci_kind", ""), "backtest_at_n": r.get("backtest_at_n"),
                               "backtest_factor": r.get("backtest_factor"), "backtest_error": r.get("backtest_error")})
            row[m]["secs"] = time.perf_counter() - t
        for m in (m for m in CURVES if m in chosen):
            try:
                row[m] = {"value": float(estimate(ss, m, metric="AP", k=1000).value(n))}
            except InvalidArgumentError as exc:      # reported as a failure, not hidden
                row[m] = {"value": float("nan"), "error": str(exc)}
        rows.append(row)
        print(draw, {m: round(row[m]["value"] - truth, 4) for m in HARDNESS + CURVES if m in row}, flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps({"truth": truth, "N": n, "rows": rows}, indent=1))
    print(table(rows, truth, n))


def table(rows, truth, n):
    from rscale.core.estimators.methods import DEFAULT_METHOD
    present = set(rows[0])
    methods = [(f"{m} (default)" if m == DEFAULT_METHOD else m, m) for m in HARDNESS]
    methods += [("loguniform curve", "loguniform"), ("powerlaw curve", "powerlaw"), ("naive (at S)", "naive")]
    methods = [(label, key) for label, key in methods if key in present]
    fracs = sorted({r["fraction"] for r in rows})
    out = [f"truth mAP@1000 at N = {n:,}: {truth:.4f}", "",
           "| estimator | " + " | ".join(f"{f}: signed errors per draw | MAE" for f in fracs) + " |",
           "|---|" + "---|---|" * len(fracs)]
    for label, key in methods:
        cells = []
        for f in fracs:
            errs = [(r[key] if key == "naive" else r[key]["value"]) - truth for r in rows if r["fraction"] == f]
            ok = [e for e in errs if np.isfinite(e)]
            cells += [" ".join("fails" if not np.isfinite(e) else f"{e:+.3f}" for e in errs),
                      f"{np.mean(np.abs(ok)):.3f}" if ok else "-"]
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    for pre, kind in (("", "benchmark"), ("pop_", "population")):
        out += ["", f"Interval `rscale predict --ci {kind}` prints (95%): covered draws / draws, mean width "
                "(no interval: n/a)", "", "| estimator | " + " | ".join(fracs) + " |", "|---|" + "---|" * len(fracs)]
        for label, key in [(lab, k) for lab, k in methods if k in HARDNESS]:
            cells = []
            for f in fracs:
                rs = [r[key] for r in rows if r["fraction"] == f and r[key].get(pre + "lo") is not None]
                cov = sum(x[pre + "lo"] <= truth <= x[pre + "hi"] for x in rs)
                width = np.mean([x[pre + "hi"] - x[pre + "lo"] for x in rs]) if rs else float("nan")
                cells.append(f"{cov}/{len(rs)}, {width:.3f}")
            out.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    main()
