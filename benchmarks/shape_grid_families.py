"""Where does evt-eb's sign on a simulator family come from? Its shape grid, measured on seen data
(issue 14; docs/benchmarks.md, "evt-eb's shape grid and the scale-mixture family").

The accuracy table shows `evt-eb` pessimistic in every scale-mixture (``scalemix``) cell while every
other estimator is optimistic there. Per scenario of one family in every simulator set of
benchmarks/accuracy.py (design, holdout, fresh..fresh6: all seen), at 1% and 5% of N = 1e8 (one
draw, the seeds of benchmarks/evt_eb_variants.py), the error of mAP@1000 against the simulator's
realised truth for:

- ``evt`` (plug-in), the earlier default, whose shapes are bounded (xi <= 0) but for its patches;
- ``evt-eb`` as shipped (expected mode; one tail model: the stored edge factor is made by
  ``rscale estimate`` from the replicates, which this script does not fit);
- ``evt-eb -p xi_max=0``: the same model with its shape grid cut at the bounded side;
- ``evt-eb -p cluster=off``: without the near-duplicate split.

With ``--drift``, instead: per cell, the mean over queries of evt-eb's posterior-mean shape at each
of its four threshold candidates (400, 200, 100 and 50 excesses of the top 4000 scores), on a grid
widened to xi <= 0.5: whether the fitted shape drifts with depth inside the sample, which is what a
model of a shape that keeps drifting past the sample would have to read.

With ``--real``, instead: the same question on the four real-embedding sets (all seen; their
committed 1% and 5% draws, the prediction at the full pool against its exact truth), for ``evt``,
``evt-eb`` and ``evt-eb`` with the grid cut at 0 and widened to 0.5: whether real tails behave like
the scale mixture (truth below the sampled shape's extrapolation) or like Student (above it).

Samples and truth are cached under --cache. No rule is chosen here: the figures say which part of
the model sets the sign, for the next round's design.

Run: PYTHONPATH=src .venv/bin/python benchmarks/shape_grid_families.py --family scalemix [--drift]
     PYTHONPATH=src .venv/bin/python benchmarks/shape_grid_families.py --real
"""
import argparse
import json
import os
import pickle
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import accuracy as A  # noqa: E402
from rscale import sim  # noqa: E402
from rscale.core.estimators import evt_eb  # noqa: E402
from rscale.core.estimators.methods import estimate  # noqa: E402
from rscale.core.gpd_eb import shape_grid  # noqa: E402
from rscale.core.prediction import predict_per_query  # noqa: E402
from rscale.sim.benchmark import SimSpec  # noqa: E402

SETS = ("design", "holdout", "fresh", "fresh2", "fresh3", "fresh4", "fresh5", "fresh6")
VARIANTS = (("evt", {}, "plugin"), ("evt-eb", {}, "expected"), ("evt-eb", {"xi_max": 0.0}, "expected"),
            ("evt-eb", {"cluster": "off"}, "expected"))


def cell(cache: Path, which: str, off: int, name: str, family: str, hl, nq: int, f: float):
    """(sample stats, realised truth of mAP@1000 at 1e8), cached."""
    path = cache / f"{which}-{name.replace('/', '_').replace(' ', '_')}-{f}.pkl"
    if not path.exists():
        seed = 7 + off
        bench = sim.simulate(SimSpec(name=name, family=family, n_queries=nq, hardness=hl), seed=seed)
        s = int(f * 1e8)
        ss = sim.sample(bench, s, k=min(4000, s), seed=seed)
        truth = float(sim.truth(bench, ss, 1e8, "AP", 1000, seed=seed).mean())
        with open(path, "wb") as fh:
            pickle.dump((ss, truth), fh)
    with open(path, "rb") as fh:
        return pickle.load(fh)


REAL_SETS = ("realset", "realset2", "realset3", "realset4", "realset5", "realset6", "realset7")
REAL_VARIANTS = (("evt", {}, "plugin"), ("evt-eb", {}, "expected"), ("evt-eb", {"xi_max": 0.0}, "expected"),
                 ("evt-eb", {"xi_max": 0.5}, "expected"))


def real_sets():
    """Per real set, per 1% / 5% draw: its error under each of REAL_VARIANTS (printed), and the summary."""
    from rscale.store.sample_stats_file import read_sample_stats
    here = Path(__file__).resolve().parent
    print("set       S/N  draw  truth   " + "  ".join(f"{m}{' ' + json.dumps(p) if p else ''}" for m, p, _ in REAL_VARIANTS))
    for name in REAL_SETS:
        data = here / name / "data"
        man = json.loads((data / "manifest.json").read_text())
        n, truth = float(man["pool"]), float(man["truth_map_at_1000"])
        errors = {i: [] for i in range(len(REAL_VARIANTS))}
        for pct in ("01", "05"):
            for d in range(5):
                path = data / f"draw-{pct}pct-{d}.sample_stats.parquet"
                if not path.exists():
                    continue
                ss = read_sample_stats(path)
                row = []
                for i, (m, p, mode) in enumerate(REAL_VARIANTS):
                    e = float(predict_per_query(estimate(ss, m, **p), "AP", n, 1000, mode).mean()) - truth
                    errors[i].append(e)
                    row.append(e)
                print(f"{name:9s} {int(pct)}%  {d}  {truth:.4f} " + " ".join(f"{e:+.4f}" for e in row), flush=True)
        print(f"{name}: mean signed " + ", ".join(
            f"{m}{' ' + json.dumps(p) if p else ''} {np.mean(errors[i]):+.4f}" for i, (m, p, _) in enumerate(REAL_VARIANTS)))


def shapes_by_threshold(ss) -> list:
    """[(excesses, mean over queries of the posterior-mean shape)] per threshold candidate."""
    grid = shape_grid(0.5)
    top = ss.top_scores[:, :min(evt_eb.DEFAULT_EB.k_top, ss.k)]
    out = []
    for n in evt_eb.candidate_sizes(top.shape[1], evt_eb.DEFAULT_EB.q, evt_eb.DEFAULT_EB.held_out):
        c = evt_eb.tail_candidate(top, n, evt_eb.DEFAULT_EB.held_out, grid)
        out.append((n, float(np.mean(np.sum(c["post"] * grid[None, :], axis=1)))))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--family", default="scalemix")
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get("CACHE", "/tmp/shape_grid_cache")))
    ap.add_argument("--drift", action="store_true", help="the fitted shape per threshold candidate instead")
    ap.add_argument("--real", action="store_true", help="the four real-embedding sets instead")
    args = ap.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    if args.real:
        real_sets()
        return
    if args.drift:
        for which in SETS:
            scen, off = A.SETS[which]
            for name, family, hl, nq in scen:
                if family == args.family:
                    for f in (0.01, 0.05):
                        ss, _ = cell(args.cache, which, off, name, family, hl, nq, f)
                        print(f"{which:8s} {name:28s} {f:.2f} " + "  ".join(
                            f"{n}: {xi:+.3f}" for n, xi in shapes_by_threshold(ss)), flush=True)
        return
    print("set      scenario                     S/N  truth   " + "  ".join(
        f"{m}{' ' + json.dumps(p) if p else ''}" for m, p, _ in VARIANTS))
    errors = {i: [] for i in range(len(VARIANTS))}
    for which in SETS:
        scen, off = A.SETS[which]
        for name, family, hl, nq in scen:
            if family != args.family:
                continue
            for f in (0.01, 0.05):
                ss, truth = cell(args.cache, which, off, name, family, hl, nq, f)
                row = []
                for i, (m, p, mode) in enumerate(VARIANTS):
                    e = float(predict_per_query(estimate(ss, m, **p), "AP", 1e8, 1000, mode).mean()) - truth
                    errors[i].append(e)
                    row.append(e)
                print(f"{which:8s} {name:28s} {f:.2f} {truth:.4f} " + " ".join(f"{e:+.4f}" for e in row), flush=True)
    for i, (m, p, mode) in enumerate(VARIANTS):
        v = np.array(errors[i])
        if v.size:
            print(f"{m} {json.dumps(p)} ({mode}): cells {v.size}, MAE {np.abs(v).mean():.4f}, mean signed "
                  f"{v.mean():+.4f}, negative {int((v < 0).sum())}")


if __name__ == "__main__":
    main()
