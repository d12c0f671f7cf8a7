"""The two tail-aware baselines, `evt` and `evt-paper`, give the same hardness as at a reference
commit: the check that removing `evt`'s experimental modes (issue 14) left both rules' answers
bit-identical.

The reference commit's `src/` is extracted with `git archive` into a temporary folder; each code
version estimates, in its own interpreter, the same sample-stats files (simulator samples of four
tail families written once here, and committed real-set draws); the script prints, per sample and
method, the largest |difference| of x, whether the rules agree, the largest |difference| of
every stored tail-fit column, and of the re-estimates `rscale estimate` stores with them (4
half-sample replicates and the back-test's quarter shares, through the stored parameters). Exit status 1 when anything differs.

Run: PYTHONPATH=src .venv/bin/python benchmarks/evt_baselines.py [--ref 39d6b08] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
REF = "39d6b08"          # main before the evt cleanup
METHODS = ("evt", "evt-paper")
SIM_SAMPLES = (          # (family, queries, S, k, seed): the tail families the two rules handle differently
    ("bounded", 300, 50_000, 4000, 1),
    ("gaussian", 300, 20_000, 4000, 2),
    ("neardup", 300, 50_000, 4000, 3),
    ("student", 300, 100_000, 4000, 4),
    ("bigdup", 200, 5_000, 1000, 5),
)
REAL_SAMPLES = ("benchmarks/realset/data/draw-05pct-0.sample_stats.parquet",
                "benchmarks/realset/data/draw-01pct-0.sample_stats.parquet")

WORKER = r"""
import json, sys
import numpy as np
from rscale.core.backtest import backtest_hardness
from rscale.core.estimators.methods import estimate
from rscale.core.replicates import hardness_replicates
from rscale.store.sample_stats_file import read_sample_stats
paths, methods, out = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
arrays = {}
for i, p in enumerate(paths):
    ss = read_sample_stats(p)
    for m in methods:
        est = estimate(ss, m)
        arrays[f"{i}/{m}/x"] = est.x
        arrays[f"{i}/{m}/rule"] = est.rule.astype(str)
        for k, v in est.tail.items():
            arrays[f"{i}/{m}/tail/{k}"] = np.asarray(v, dtype=np.float64)
        # what rscale estimate stores besides x: re-estimates through the stored params
        arrays[f"{i}/{m}/replicates"] = hardness_replicates(ss, method=m, params=est.params, splits=2)
        arrays[f"{i}/{m}/backtest"] = backtest_hardness(ss, method=m, params=est.params)[0]
np.savez(out, **arrays)
"""


def _max_diff(a: np.ndarray, b: np.ndarray) -> float:
    """Largest |a - b| where they differ (equal entries, infinities and NaNs included, count 0)."""
    if a.shape != b.shape:
        return float("inf")
    differ = ~((a == b) | (np.isnan(a) & np.isnan(b)))
    return float(np.max(np.abs(a[differ] - b[differ]), initial=0.0)) if differ.any() else 0.0


def _run(src: Path, paths: list[str], out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    subprocess.run([sys.executable, "-c", WORKER, json.dumps(paths), json.dumps(list(METHODS)), str(out)],
                   check=True, env=env, cwd=ROOT)
    with np.load(out) as z:
        return {k: z[k] for k in z.files}


def _samples(tmp: Path, quick: bool) -> list[tuple[str, str]]:
    from rscale import sim
    from rscale.sim.benchmark import HardnessLaw, SimSpec
    from rscale.store.sample_stats_file import write_sample_stats
    out = []
    for family, nq, s, k, seed in SIM_SAMPLES[:2] if quick else SIM_SAMPLES:
        spec = SimSpec(name=family, family=family, n_queries=nq,
                       hardness=HardnessLaw("loguniform", 1.0, 1e-11, 1e-1, immune=0.03))
        ss = sim.sample(sim.simulate(spec, seed=seed), s, k=k, seed=seed)
        path = tmp / f"{family}.parquet"
        write_sample_stats(ss, path)
        out.append((f"sim {family} Q={nq} S={s}", str(path)))
    for p in REAL_SAMPLES[:1] if quick else REAL_SAMPLES:
        out.append((Path(p).name.split(".")[0] + " (realset)", str(ROOT / p)))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", default=REF, help="the commit whose evt / evt-paper answers are the reference")
    ap.add_argument("--quick", action="store_true", help="two simulator samples and one real draw")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="evt-baselines-") as d:
        tmp = Path(d)
        archive = tmp / "ref.tar"
        subprocess.run(["git", "archive", "-o", str(archive), args.ref, "src"], check=True, cwd=ROOT)
        with tarfile.open(archive) as tf:
            tf.extractall(tmp / "ref", filter="data")
        samples = _samples(tmp, args.quick)
        paths = [p for _, p in samples]
        ref = _run(tmp / "ref" / "src", paths, tmp / "ref.npz")
        new = _run(ROOT / "src", paths, tmp / "new.npz")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    print(f"reference {args.ref} vs working tree at {commit} (uncommitted edits included)")
    print(f"{'sample':34s} {'method':10s} {'max |dx|':>9s} {'rules':>6s} {'max |d tail|':>12s} {'max |d reps|':>12s}  rules (positives)")
    same = True
    for i, (name, _) in enumerate(samples):
        for m in METHODS:
            key = f"{i}/{m}/"
            dx = _max_diff(ref[key + "x"], new[key + "x"])
            rules = bool(np.array_equal(ref[key + "rule"], new[key + "rule"]))
            cols_ref = sorted(k for k in ref if k.startswith(key + "tail/"))
            cols_new = sorted(k for k in new if k.startswith(key + "tail/"))
            dt = max((_max_diff(ref[c], new[c]) for c in cols_ref if c in new), default=0.0)
            dr = max(_max_diff(ref[key + w], new[key + w]) for w in ("replicates", "backtest"))
            identical = (dx == 0.0 and dr == 0.0 and rules and dt == 0.0 and cols_ref == cols_new
                         and all(np.array_equal(ref[c], new[c], equal_nan=True) for c in cols_ref))
            same &= identical
            shares = dict(zip(*np.unique(new[key + "rule"], return_counts=True)))
            if key + "tail/gof_refit" in new:
                shares["gof refit (queries)"] = int(new[key + "tail/gof_refit"].sum())
            names = ", ".join(f"{r} {int(c)}" for r, c in shares.items())
            extra = "" if cols_ref == cols_new else " (tail columns differ)"
            print(f"{name:34s} {m:10s} {dx:9.2e} {'same' if rules else 'DIFF':>6s} {dt:12.2e} {dr:12.2e}  {names}{extra}")
    print("bit-identical" if same else "DIFFERENT")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
