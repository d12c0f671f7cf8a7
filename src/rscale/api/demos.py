"""Demos and simulated data: truth next to predictions."""

from __future__ import annotations

from dataclasses import dataclass

from rscale.api.querying import query
from rscale.api.scoring import score
from rscale.core import law
from rscale.core.estimators import estimate_count


@dataclass(frozen=True)
class DemoRow:
    backbone: str
    family: str
    n_queries: int
    s: int
    n: float
    truth: float
    evaluate_at_s: float
    count: float
    true_hardness_expected: float


def demo(backbones=None, n: float = 1e8, *, fraction: float = 0.05, k: int = 1000,
         n_queries: int | None = None, seed: int = 0) -> list[DemoRow]:
    """Simulate each backbone, sample ``fraction`` of an N-distractor pool, and compare.

    Returns, per backbone: the exact realised mAP@k at N (truth), the metric on the sample alone
    (evaluate-at-S), the count estimator's prediction at N, and the law's expected value on the
    true hardness (what a perfect hardness estimate would predict).
    """
    from dataclasses import replace

    from rscale import sim
    from rscale.sim.presets import PRESETS, preset

    names = list(backbones) if backbones else list(PRESETS)
    s = int(round(fraction * n))
    rows = []
    for name in names:
        spec = preset(name)
        if n_queries:
            spec = replace(spec, n_queries=n_queries)
        bench = sim.simulate(spec, seed=seed)
        ss = sim.sample(bench, s, k=4000, seed=seed)
        count = estimate_count(ss).hardness()
        rows.append(DemoRow(
            backbone=name, family=spec.family, n_queries=spec.n_queries, s=s, n=n,
            truth=float(sim.truth(bench, ss, n, "AP", k, seed=seed).mean()),
            evaluate_at_s=law.map_at_k(count, s, k),
            count=law.map_at_k(count, n, k),
            true_hardness_expected=law.map_at_k(bench.hardness, n, k, mode="expected"),
        ))
    return rows


def pipeline_demo(config="params.yaml", registry=None) -> list[dict]:
    """After `dvc repro`: every configured backbone's registry answer next to simulated truth.

    The truth is recomputed by the simulator from the same preset, sample size and seed the
    pipeline's sample stage used (it is deterministic), at the ``report.n`` gallery size.
    """
    from dataclasses import replace

    from rscale import sim
    from rscale.api.config import load_config
    from rscale.sim.presets import preset
    cfg, samp = load_config(config), load_config(config, "sample")
    n = float((cfg.get("report") or {}).get("n", 1e8))
    rows = []
    for name in cfg.get("backbones") or []:
        spec = replace(preset(name), n_queries=int(samp["queries"]))
        bench = sim.simulate(spec, seed=int(samp["seed"]))
        ss = sim.sample(bench, int(samp["s"]), k=int(samp["k"]), seed=int(samp["seed"]))
        truth = float(sim.truth(bench, ss, n, "AP", 1000, seed=int(samp["seed"])).mean())
        ans = query(f"mAP@1000 at N={int(n)} for {name}", registry)
        r = ans["rows"][0]
        count_h = estimate_count(ss).hardness()
        at_s = float(law.map_at_k(count_h, float(samp["s"]), 1000))
        rows.append({"backbone": name, "query": ans["query"], "version": r["version"], "truth": truth,
                     "predicted": r["value"], "ci_low": r["ci_low"], "ci_high": r["ci_high"],
                     "evaluate_at_s": at_s, "count": float(law.map_at_k(count_h, n, 1000)),
                     "estimator": r["estimator"], "S": int(samp["s"]), "N": n,
                     "truth_kind": "simulated, exact"})
    # descriptor backbones: the truth is the exact full-pool evaluation by the same scoring engine
    import tempfile
    from pathlib import Path

    from rscale.store.sample_stats_file import read_sample_stats
    for name in cfg.get("descriptor_backbones", []) or []:
        base = Path("out/descriptors") / name
        if not (base / "distractors" / "manifest.json").exists():
            continue
        with tempfile.TemporaryDirectory() as tmp:
            full = score(base / "queries", base / "positives", qrels=base / "qrels.parquet", distractors_dir=base / "distractors",
                         out=Path(tmp) / "full.parquet", fraction=1.0, k=10, lineage=False)
            ss_full = read_sample_stats(Path(tmp) / "full.parquet")
        pool = float(full["S"])
        truth = float(law.map_at_k(law.Hardness.from_counts(ss_full.pos_counts, ss_full.pos_offsets, pool), pool, 1000))
        ans = query(f"mAP@1000 at N={int(pool)} for {name}", registry)
        r = ans["rows"][0]
        sampled = read_sample_stats(Path("out/sample_stats") / f"{name}.parquet")
        s_size = float(sampled.n_sampled.max())
        count_h = estimate_count(sampled).hardness()
        at_s = float(law.map_at_k(count_h, s_size, 1000))
        rows.append({"backbone": name, "query": ans["query"], "version": r["version"], "truth": truth,
                     "predicted": r["value"], "ci_low": r["ci_low"], "ci_high": r["ci_high"],
                     "evaluate_at_s": at_s, "count": float(law.map_at_k(count_h, pool, 1000)),
                     "estimator": r["estimator"], "S": int(s_size), "N": pool,
                     "truth_kind": "full-pool evaluation"})
    return rows


def simulate_sample_stats(backbone: str, out, *, s: int, k: int = 4000, n_queries: int | None = None,
                          seed: int = 0, halves: bool = False):
    """Simulate a preset backbone and write the sample stats of an S-distractor sample; ``halves``:
    with recorded half-sample membership (:func:`rscale.sim.benchmark.simulated_halves`), so that
    presets simulated with the same seed, S and K pair in ``for A vs B``."""
    from dataclasses import replace

    from rscale import sim
    from rscale.sim.presets import preset
    from rscale.store.sample_stats_file import write_sample_stats

    spec = preset(backbone)
    if n_queries:
        spec = replace(spec, n_queries=n_queries)
    ss = sim.sample(sim.simulate(spec, seed=seed), s, k=k, seed=seed, halves=halves)
    return write_sample_stats(ss, out)


def describe_sample_stats(path) -> dict:
    """Read (and so validate) a sample-stats file; return a small summary."""
    from rscale.store.sample_stats_file import read_sample_stats

    ss = read_sample_stats(path)
    return {
        "queries": ss.n_queries,
        "positives": ss.n_positives,
        "K": ss.k,
        "S": f"{int(ss.n_sampled.min()):,}" + ("" if ss.n_sampled.min() == ss.n_sampled.max()
                                              else f"..{int(ss.n_sampled.max()):,}"),
        "S_min": int(ss.n_sampled.min()), "S_max": int(ss.n_sampled.max()),
        **{k: v for k, v in sorted(ss.meta.items()) if k != "k"},
    }
