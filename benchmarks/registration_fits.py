"""Estimator fits of one version: `rscale estimate` then `rscale register`, counted, not guessed.

Issue 14's goal "a registration takes at most R estimator fits" (R = the stored replicates). Every
call of the estimator dispatch (``rscale.core.estimators.methods.estimate``, through which every
caller fits: the point estimate, the half-sample replicates, the back-test shares; the budget
check reads the stored halves and fits nothing) is counted with the rscale function that made it,
running the CLI in process on a small simulated sample (60 queries, S = 200k, K = 400). Prints, per
command, the fits and where they come from, and the stored columns: R = the replicates plus the
back-test's share columns, each one fit.

Run: PYTHONPATH=src .venv/bin/python benchmarks/registration_fits.py [--method evt]
"""

from __future__ import annotations

import argparse
import collections
import json
import tempfile
import traceback
from pathlib import Path


def count_fits(tmp: Path, method: str = "evt") -> dict:
    """{"replicates": stored replicates, "shares": stored back-test columns, "estimate": Counter(caller
    -> fits), "register": Counter(...)}."""
    import pyarrow.parquet as pq

    import rscale.core.estimators.methods as methods
    from rscale import sim
    from rscale.cli import main
    from rscale.sim.benchmark import HardnessLaw, SimSpec
    from rscale.store.sample_stats_file import write_sample_stats

    spec = SimSpec(name="b", family="gaussian", n_queries=60, hardness=HardnessLaw("loguniform", 1.0, 1e-9, 1e-2))
    write_sample_stats(sim.sample(sim.simulate(spec, seed=5), 200_000, k=400, seed=5), tmp / "s.parquet")
    counts = {"estimate": collections.Counter(), "register": collections.Counter()}
    phase = ["estimate"]
    fit = methods.estimate

    def counted(*args, **kwargs):
        frames = [f"{Path(f.filename).stem}.{f.name}" for f in traceback.extract_stack()[:-1]
                  if "/rscale/" in f.filename and "/cli/" not in f.filename]
        counts[phase[0]][" <- ".join(frames[::-1][:2])] += 1
        return fit(*args, **kwargs)

    methods.estimate = counted
    try:
        assert main(["estimate", str(tmp / "s.parquet"), "--method", method, "--out", str(tmp / "h.parquet")]) == 0
        phase[0] = "register"
        assert main(["register", str(tmp / "h.parquet"), "--sample", str(tmp / "s.parquet"), "--registry",
                     str(tmp / "reg"), "--backbone", "b", "--benchmark", "sim"]) == 0
    finally:
        methods.estimate = fit
    from rscale.store.hardness_file import read_hardness
    _est, info = read_hardness(tmp / "h.parquet")
    meta = pq.read_schema(tmp / "h.parquet").metadata
    shares = 0 if info["backtest"] is None or info["backtest"].columns is None else info["backtest"].columns.shape[1]
    return {"replicates": json.loads(meta[b"rscale.replicates"])["R"], "shares": int(shares), **counts}


def main(argv=None):
    import contextlib
    import io

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--method", default="evt")
    a = ap.parse_args(argv)
    with contextlib.redirect_stdout(io.StringIO()):          # the commands' own output
        got = count_fits(Path(tempfile.mkdtemp()), a.method)
    r = got["replicates"] + got["shares"]
    print(f"method {a.method}: stored columns R = {r} ({got['replicates']} half-sample replicates, "
          f"{got['shares']} back-test shares)")
    for phase in ("estimate", "register"):
        print(f"rscale {phase}: {sum(got[phase].values())} estimator fits")
        for where, n in sorted(got[phase].items(), key=lambda kv: -kv[1]):
            print(f"  {n:3d}  from {where}")
    total = sum(got["estimate"].values()) + sum(got["register"].values())
    print(f"estimate + register: {total} fits = R + {total - r} for R = {r} stored columns")


if __name__ == "__main__":
    main()
