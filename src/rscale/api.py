"""The public Python API shared by the CLI and notebooks.

Functions here take plain values (paths, names, numbers) and return plain values or dataclasses;
the CLI only parses arguments and prints.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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
    truth_at_s: float
    evaluate_at_s: float
    count: float
    true_hardness_expected: float


def demo(backbones=None, n: float = 1e8, fraction: float = 0.05, k: int = 1000,
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
            truth_at_s=float(sim.truth(bench, ss, s, "AP", k, seed=seed).mean()),
            evaluate_at_s=law.map_at_k(count, s, k),
            count=law.map_at_k(count, n, k),
            true_hardness_expected=law.map_at_k(bench.hardness, n, k, mode="expected"),
        ))
    return rows


def simulate_sample_stats(backbone: str, out, s: int, k: int = 4000, n_queries: int | None = None,
                          seed: int = 0):
    """Simulate a preset backbone and write the sample stats of an S-distractor sample."""
    from dataclasses import replace

    from rscale import sim
    from rscale.sim.presets import preset
    from rscale.store.sample_stats_file import write_sample_stats

    spec = preset(backbone)
    if n_queries:
        spec = replace(spec, n_queries=n_queries)
    ss = sim.sample(sim.simulate(spec, seed=seed), s, k=k, seed=seed)
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
        **{k: v for k, v in sorted(ss.meta.items()) if k != "k"},
    }
