"""The realised value's gallery noise in the benchmark interval: coverage and width with and
without the term, from the same stored estimates (docs/benchmarks.md, "The realised value's
gallery noise").

Reads the fits that benchmarks/accuracy_table.py keeps in its cache (run it first for the cells
wanted, e.g. ``--estimators evt-eb --fractions 0.01,0.05 --cache DIR``), and for each cell
recomputes what ``rscale query --ci benchmark`` reports (rscale.core.interval: the point, the
replicates' t half-width, the back-test band) twice: without the gallery-noise term and with it
(rscale.core.gallery_noise, the shipped default), against the cell's exact truth.

Run: PYTHONPATH=src .venv/bin/python benchmarks/gallery_noise_coverage.py --cache DIR [--sets a,b]
         [--fractions 0.01,0.05] [--method evt-eb]
     PYTHONPATH=src .venv/bin/python benchmarks/gallery_noise_coverage.py --speed   # its cost and precision
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def latest(cache: Path, kind: str, key: str) -> dict | None:
    """The newest cached entry of ``key``, whatever its source digests (the fits are read back,
    not trusted for a table: this benchmark recomputes every interval from them)."""
    paths = sorted((cache / kind).glob(f"{key}-*.json"), key=lambda p: p.stat().st_mtime)
    return json.loads(paths[-1].read_text()) if paths else None


def cell_rows(cache: Path, sets, fractions, method: str):
    import accuracy_table as T
    from rscale.core.interval import _bands, _cell_predictions, metric_intervals
    from rscale.core.prediction import gallery_sd
    from rscale.store.hardness_file import read_hardness

    for set_name in sets:
        draws = T.real_draws(set_name, fractions, None) if set_name.startswith("realset") else T.sim_draws(set_name, fractions, 1)
        for d in draws:
            if d.sample is not None:
                sample, truth = Path(d.sample), d.truth
            else:
                entry = latest(cache, "samples", T._sample_key(d))
                if entry is None:
                    continue
                sample, truth = Path(entry["sample"]), entry["truth"]
            fit = latest(cache, "fits", T.fit_key(sample, method))
            if fit is None:
                continue
            est, info = read_hardness(Path(fit["dir"]) / fit["file"])
            cells = [("AP", 1000, float(d.n))]
            pqs, reps, bts = _cell_predictions(est, cells, T.query_mode(method), "benchmark", 0, None, info["backtest"])
            g = np.array([gallery_sd(est, "AP", float(d.n), 1000)])
            _, lo0, hi0 = metric_intervals(pqs, reps, backtest=_bands(bts))
            v, lo1, hi1 = metric_intervals(pqs, reps, backtest=_bands(bts), gallery_sd=g)
            yield {"set": set_name, "scenario": d.scenario, "fraction": d.fraction, "draw": d.draw, "truth": truth,
                   "value": float(v[0]), "g": float(g[0]), "lo0": float(lo0[0]), "hi0": float(hi0[0]),
                   "lo1": float(lo1[0]), "hi1": float(hi1[0])}


def _tables(queries: int):
    """The tables the cost is measured on: three simulated (a large one of ``queries`` queries, a
    1,000-query near-duplicate one, a 300-query one) and the committed real sets' first 5% draws
    fitted with evt (the hardness a user's table holds: few queries carry the noise there)."""
    import tempfile

    from rscale import api, sim
    from rscale.sim.benchmark import HardnessLaw, SimSpec
    from rscale.store.hardness_file import read_hardness
    for fam, hl, nq in [("gaussian", HardnessLaw("power", 1.2, 1e-10, 1e-2), queries),
                        ("neardup", HardnessLaw("loguniform", 0.0, 1e-10, 1e-3), 1000),
                        ("gaussian", HardnessLaw("power", 1.5, 1e-10, 1e-2), 300)]:
        b = sim.simulate(SimSpec(family=fam, n_queries=nq, hardness=hl), seed=3)
        yield f"simulated {fam}/{hl.kind}", b.pos_x, b.pos_offsets, 1e8
    for name in ("realset", "realset2"):
        data = HERE / name / "data"
        pool = float(json.loads((data / "manifest.json").read_text())["pool"])
        with tempfile.TemporaryDirectory() as tmp:
            api.estimate(data / "draw-05pct-0.sample_stats.parquet", "evt", out=Path(tmp) / "h.parquet")
            est, _ = read_hardness(Path(tmp) / "h.parquet")
        for n in (pool, 1e8):
            yield f"{name} 5% draw 0 (evt), N = {n:.3g}", est.x, est.offsets, n


def speed(queries: int = 10_000, rounds: int = 5, seeds: int = 20) -> None:
    """What the term costs a new (measure, N) cell, and how precise it is, on several tables: the
    shipped rule (as many galleries as rscale.core.gallery_noise.PRECISION needs) beside the fixed
    budget it replaced (about 1M positive-draws, 16-256 galleries) and the point prediction it
    joins (one expected-mode evaluation: a new cell makes 21 of them with the interval). mAP@1000;
    cost: median of ``rounds`` calls; precision: the sd over ``seeds`` seeds, relative to a
    reference of 2,000 galleries."""
    import time

    from rscale.core import gallery_noise as gn
    from rscale.core import law

    def ms(f):
        out = []
        for _ in range(rounds):
            t = time.perf_counter()
            f()
            out.append(1e3 * (time.perf_counter() - t))
        return float(np.median(out))

    print("| table | queries | positives | g (2,000 galleries) | point, expected mode | fixed budget: galleries, ms, rel. sd "
          "| shipped: galleries, ms, rel. sd | cost ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for label, x, off, n in _tables(queries):
        calls = []
        real = gn.nested_counts

        def counting(*a):
            calls.append(a[3])
            return real(*a)
        gn.nested_counts = counting
        try:
            gn.realised_sd(x, off, "AP", n, 1000)
        finally:
            gn.nested_counts = real
        fixed = int(np.clip(1_000_000 // x.size, 16, 256))
        ref = gn.realised_sd(x, off, "AP", n, 1000, draws=2000, seed=1)
        h = law.Hardness.from_flat(x, off)
        point = ms(lambda: law.per_query(h, "AP", n, 1000, "expected"))
        t_fixed = ms(lambda: gn.realised_sd(x, off, "AP", n, 1000, draws=fixed))
        t_new = ms(lambda: gn.realised_sd(x, off, "AP", n, 1000))
        sd_fixed = np.std([gn.realised_sd(x, off, "AP", n, 1000, draws=fixed, seed=s) for s in range(seeds)]) / ref
        sd_new = np.std([gn.realised_sd(x, off, "AP", n, 1000, seed=s) for s in range(seeds)]) / ref
        print(f"| {label} | {off.size - 1} | {x.size} | {ref:.5f} | {point:.1f} ms | {fixed}, {t_fixed:.1f} ms, {sd_fixed:.1%} | "
              f"{sum(calls)}, {t_new:.1f} ms, {sd_new:.1%} | {t_new / t_fixed:.2f}x |")
    rerank_speed(ms, seeds)


def rerank_speed(ms, seeds: int, queries: int = 1000) -> None:
    """The reranked term (rscale.core.rerank_replicates.gallery_sd) under the same rule, beside the
    fixed 200 galleries it replaced: ``queries`` queries of 3 positives that survive the first
    stage, the Gaussian rerank model's exact joint tails (as tests/test_rerank_gallery_noise.py
    builds them), N = 3,000, K' = 100."""
    from rscale.core import rerank_law as law
    from rscale.core import rerank_replicates as rr
    from rscale.sim.rerank import GaussianRerankModel
    rng = np.random.default_rng(5)
    model = GaussianRerankModel(0.7)
    n, depth = 3000, 100
    x = np.sort(rng.uniform(1e-4, 5e-3, (queries, 3)), axis=1).ravel()
    t = rng.uniform(2.8, 3.6, queries * 3)
    off = np.arange(queries + 1) * 3
    fine = np.concatenate([[0.0], np.geomspace(1e-7, 1.0, 400)])
    h = law.RerankedHardness.build(x, t, off, np.tile(fine, (queries, 1)), model.joint_tail(t, fine))
    print(f"\nreranked term, {queries} queries x 3 positives, N = {n}, K' = {depth}:")
    print("| measure | g (2,000 galleries) | fixed 200: ms, rel. sd | shipped: ms, rel. sd | cost ratio |")
    print("|---|---|---|---|---|")
    for metric, k in (("AP", depth), ("R", 1)):
        ref = rr.gallery_sd(h, metric, n, k, depth=depth, draws=2000, seed=1)
        t_fixed = ms(lambda: rr.gallery_sd(h, metric, n, k, depth=depth, draws=200))
        t_new = ms(lambda: rr.gallery_sd(h, metric, n, k, depth=depth))
        sd_fixed = np.std([rr.gallery_sd(h, metric, n, k, depth=depth, draws=200, seed=s) for s in range(seeds)]) / ref
        sd_new = np.std([rr.gallery_sd(h, metric, n, k, depth=depth, seed=s) for s in range(seeds)]) / ref
        print(f"| {metric}@{k} | {ref:.5f} | {t_fixed:.1f} ms, {sd_fixed:.1%} | {t_new:.1f} ms, {sd_new:.1%} | "
              f"{t_new / t_fixed:.2f}x |")


def main(argv=None):
    import accuracy as A
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache")
    ap.add_argument("--speed", action="store_true", help="only the term's cost and precision (shipped rule beside the fixed budget it replaced)")
    ap.add_argument("--sets", default=None, help="comma-separated (default: realset, realset2 and every simulator set)")
    ap.add_argument("--fractions", default="0.01,0.05")
    ap.add_argument("--method", default="evt-eb")
    args = ap.parse_args(argv)
    if args.speed:
        return speed()
    if not args.cache:
        ap.error("--cache is required (the accuracy table's cache holding the fits)")
    sets = args.sets.split(",") if args.sets else ["realset", "realset2", *A.SETS]
    fractions = [float(f) for f in args.fractions.split(",")]
    rows = list(cell_rows(Path(args.cache), sets, fractions, args.method))
    if not rows:
        sys.exit("no cached fits for these cells: run benchmarks/accuracy_table.py with this --cache first")
    groups = defaultdict(list)
    for r in rows:
        sim_set = not r["set"].startswith("realset")
        groups[(r["set"], r["fraction"])].append(r)
        if sim_set:
            groups[("simulator, pooled", r["fraction"])].append(r)
    print(f"{args.method}, mAP@1000, benchmark interval (95%) without / with the gallery-noise term, same estimates")
    print("| set | fraction | cells | median g | covered without | width without | covered with | width with | width ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (s, f), rs in groups.items():
        c0 = sum(r["lo0"] <= r["truth"] <= r["hi0"] for r in rs)
        c1 = sum(r["lo1"] <= r["truth"] <= r["hi1"] for r in rs)
        w0 = np.mean([r["hi0"] - r["lo0"] for r in rs])
        w1 = np.mean([r["hi1"] - r["lo1"] for r in rs])
        n = len(rs)
        print(f"| {s} | {f:.0%} | {n} | {np.median([r['g'] for r in rs]):.4f} | {c0}/{n} ({c0 / n:.0%}) | {w0:.4f} | "
              f"{c1}/{n} ({c1 / n:.0%}) | {w1:.4f} | {w1 / w0:.3f} |")
    gained = [r for r in rows if not r["lo0"] <= r["truth"] <= r["hi0"] and r["lo1"] <= r["truth"] <= r["hi1"]]
    print(f"\ncells the term brings inside: {len(gained)}; "
          + "; ".join(f"{r['set']} {r['scenario']} {r['fraction']:.0%} (err {r['value'] - r['truth']:+.4f}, g {r['g']:.4f})"
                      for r in gained))


if __name__ == "__main__":
    main()
