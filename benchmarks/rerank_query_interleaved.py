"""Reranked ``rscale query`` time, this tree against another source tree, interleaved.

Builds the registry of ``benchmarks/rerank_query_speed.py`` (200 simulated queries, 594 positives,
the top 600 of S = 20,000 reranked, N = 40,000; registered once, by this tree), then for each
round and each tree (alternating, so machine load hits both alike) runs every query in a fresh
interpreter: cold (imports, blob decoding, the first evaluation), again (the same query again in
that process) and other N (then the same measures at other gallery sizes), wall and CPU seconds, and the values and bounds (to compare the answers: the
half-sample correction of R@k, which costs no evaluation, is turned off in this tree for that).

Run:  PYTHONPATH=src python benchmarks/rerank_query_interleaved.py --before /tmp/base/src [--rounds 3]
(``--before``: the ``src`` folder of the other tree, e.g. ``git archive <commit> src | tar -x -C /tmp/base``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

QUERIES = ("mAP@1000, R@1 at N=4e4 for sim_rr",
           "mAP@1000, R@1 at N=4e4 for sim_rr reranked@1000",
           "mAP@1000, R@1 at N=4e4 for sim_rr reranked@1000 expected",
           "mAP@1000, R@1, MRR@1000 at N=4e4,1e5 for sim_rr reranked@1000 expected")

_CHILD = """
import json, sys, time
t0, c0 = time.perf_counter(), time.process_time()
from rscale import api
from rscale.core import rerank_replicates as rr
if hasattr(rr, "CORRECTED_METRICS"):
    rr.CORRECTED_METRICS = ()      # the half-sample correction costs nothing; off, to compare the answers
if hasattr(rr, "CORRECTED_IN_EXPECTED_MODE"):
    rr.CORRECTED_IN_EXPECTED_MODE = ()
a = api.query({text!r}, registry={reg!r})
t1, c1 = time.perf_counter(), time.process_time()
b = api.query({text!r}, registry={reg!r})
t2, c2 = time.perf_counter(), time.process_time()
api.query({other!r}, registry={reg!r})
t3, c3 = time.perf_counter(), time.process_time()
print(json.dumps(dict(cold=t1 - t0, cold_cpu=c1 - c0, warm=t2 - t1, warm_cpu=c2 - c1, new_n=t3 - t2, new_n_cpu=c3 - c2,
                      rows=[[r["measure"], r["N"], r["value"], r["ci_low"], r["ci_high"]] for r in b["rows"]])))
"""


def build(work: Path) -> Path:
    from rscale import api
    from rscale.sim import benchmark as sb
    from rscale.sim import rerank as sr
    from rscale.store.sample_stats_file import write_sample_stats
    spec = sb.SimSpec(name="sim_rr", family="gaussian", n_queries=200, mean_positives=3,
                      hardness=sb.HardnessLaw(x_min=1e-4, x_max=3e-2, immune=0.0))
    bench = sb.simulate(spec, seed=1)
    model = sr.GaussianRerankModel(0.7)
    t = sr.positive_rerank_scores(model, bench.pos_x, np.random.default_rng(3), lift=1.0)
    ss = sr.with_rerank_scores(bench, sb.sample(bench, 20_000, k=600, seed=1), model, top=600, pos_rerank=t, seed=1)
    write_sample_stats(ss, work / "ss.parquet")
    api.estimate(work / "ss.parquet", out=work / "h.parquet")
    api.register(work / "h.parquet", work / "ss.parquet", registry=work / "registry")
    return work / "registry"


def run(src: str, text: str, reg: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": src}
    other = text.replace("N=4e4,1e5", "N=5e4,2e5").replace("N=4e4", "N=5e4")
    out = subprocess.run([sys.executable, "-c", _CHILD.format(text=text, other=other, reg=str(reg))], capture_output=True,
                         text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="the src folder of the tree to compare against")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--registry", default=None, help="reuse a registry built by an earlier run")
    args = ap.parse_args()
    os.environ.setdefault("MLFLOW_TRACKING_URI", "sqlite:///" + tempfile.mkdtemp() + "/mlruns.db")
    reg = Path(args.registry) if args.registry else build(Path(tempfile.mkdtemp(prefix="rerank-interleaved-")))
    after = str(Path(__file__).resolve().parents[1] / "src")
    results = {(tree, text): [] for tree in ("before", "after") for text in QUERIES}
    for _ in range(args.rounds):
        for text in QUERIES:
            for tree, src in (("before", args.before), ("after", after)):
                results[(tree, text)].append(run(src, text, reg))
    for text in QUERIES:
        print(text)
        for tree in ("before", "after"):
            rs = results[(tree, text)]
            f = {k: [r[k] for r in rs] for k in ("cold", "cold_cpu", "warm", "warm_cpu", "new_n", "new_n_cpu")}
            print(f"  {tree:6s} cold {min(f['cold']):6.3f}-{max(f['cold']):6.3f} s (cpu {np.median(f['cold_cpu']):6.3f})"
                  f"   again {min(f['warm']):6.3f}-{max(f['warm']):6.3f} s (cpu {np.median(f['warm_cpu']):6.3f})"
                  f"   other N {min(f['new_n']):6.3f}-{max(f['new_n']):6.3f} s (cpu {np.median(f['new_n_cpu']):6.3f})")
        b, a = results[("before", text)][0]["rows"], results[("after", text)][0]["rows"]
        diffs = [max(abs(x - y) for x, y in zip(rb[2:], ra[2:])) for rb, ra in zip(b, a)]
        print("  rows (after):", "; ".join(f"{r[0]}@N={r[1]:g} {r[2]:.6f} [{r[3]:.4f}, {r[4]:.4f}]" for r in a))
        print(f"  largest difference of value/bounds before vs after: {max(diffs):.2e}")


if __name__ == "__main__":
    main()
