"""Estimator variants per scenario on a benchmarks/accuracy.py scenario set (the cells and seeds of
its first draw): how evt-eb's choices were made on the design set (docs/benchmarks.md, "The
hierarchical tail estimator"). Samples and truth are cached under $CACHE (default /tmp/ebcache).

Run: PYTHONPATH=src .venv/bin/python benchmarks/evt_eb_variants.py \
         '[["evt",{},"plugin"],["evt-eb",{},"expected"]]' design      # FRACS=0.01,0.05 by default
"""
import sys, os, pickle, time, json
import numpy as np
sys.path.insert(0, "benchmarks")
import accuracy as A
from rscale import sim
from rscale.sim.benchmark import SimSpec
from rscale.core.estimators.methods import estimate
from rscale.core.prediction import predict_per_query

CACHE = os.environ.get("CACHE", "/tmp/ebcache")
os.makedirs(CACHE, exist_ok=True)


def cells(which="design", fracs=(0.01, 0.05)):
    scen, off = A.SETS[which]
    for name, family, hl, nq in scen:
        spec = SimSpec(name=name, family=family, n_queries=nq, hardness=hl)
        for f in fracs:
            path = f"{CACHE}/{which}-{name.replace('/','_').replace(' ','_')}-{f}.pkl"
            if not os.path.exists(path):
                seed = 7 + off
                bench = sim.simulate(spec, seed=seed)
                s = int(f * 1e8)
                ss = sim.sample(bench, s, k=min(4000, s), seed=seed)
                truth = float(sim.truth(bench, ss, 1e8, "AP", 1000, seed=seed).mean())
                pickle.dump((ss, truth), open(path, "wb"))
            yield name, f, path

MODE = {}
variants = json.loads(sys.argv[1]) if len(sys.argv) > 1 else [["evt", {}], ["evt-eb", {"xi_max": 0.0}]]
which = sys.argv[2] if len(sys.argv) > 2 else "design"
for v in variants:
    if len(v) == 3:
        MODE[json.dumps(v[:2])] = v[2]
variants = [v[:2] for v in variants]
res = {}
FR = tuple(float(x) for x in os.environ.get("FRACS", "0.01,0.05").split(","))
for name, f, path in cells(which, FR):
    ss, truth = pickle.load(open(path, "rb"))
    row = []
    for m, p in variants:
        t = time.perf_counter()
        est = estimate(ss, m, **p)
        v = float(predict_per_query(est, "AP", 1e8, 1000, MODE.get(json.dumps([m, p]), "plugin")).mean())
        row.append(v - truth)
        res.setdefault(json.dumps([m, p, MODE.get(json.dumps([m, p]), "plugin")]), []).append(v - truth)
    print(f"{name:28s} {f:.2f} " + " ".join(f"{e:+.4f}" for e in row), flush=True)
for k, v in res.items():
    print(f"MAE {np.mean(np.abs(v)):.4f} mean {np.mean(v):+.4f}  {k}")
