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


def _parse_param(text: str):
    from rscale.errors import InvalidArgumentError
    if "=" not in text:
        raise InvalidArgumentError(f"estimator parameter {text!r} must look like name=value (e.g. q=0.98)")
    key, raw = text.split("=", 1)
    raw = raw.strip()
    low = raw.lower()
    if low in ("true", "false"):
        return key.strip(), low == "true"
    for cast in (int, float):
        try:
            return key.strip(), cast(raw)
        except ValueError:
            pass
    return key.strip(), raw


def estimate(sample_stats, method: str = "evt", params=(), out=None) -> dict:
    """Estimate hardness from a sample-stats file; write it to ``out`` when given.

    Returns a summary: method, queries, positives, share of positives per rule, median tail
    shape, seconds, files written.
    """
    import time

    from rscale.core.estimators.base import HardnessEstimate
    from rscale.core.estimators.evt import rule_shares
    from rscale.core.estimators.methods import HARDNESS_METHODS
    from rscale.core.estimators.methods import estimate as run
    from rscale.errors import InvalidArgumentError
    from rscale.store.hardness_file import write_hardness
    from rscale.store.sample_stats_file import read_sample_stats

    if method not in HARDNESS_METHODS:
        raise InvalidArgumentError(
            f"'{method}' does not produce per-positive hardness (hardness estimators: "
            f"{', '.join(HARDNESS_METHODS)}); the curve baselines are compared in benchmarks/accuracy.py")
    ss = read_sample_stats(sample_stats)
    kwargs = dict(_parse_param(p) for p in params)
    t = time.perf_counter()
    est = run(ss, method, **kwargs)
    secs = time.perf_counter() - t
    assert isinstance(est, HardnessEstimate)
    written = [str(p) for p in write_hardness(est, ss, out)] if out else []
    summary = {"method": est.method, "queries": ss.n_queries, "positives": ss.n_positives,
               "rules": {k: round(v, 4) for k, v in rule_shares(est).items()}, "seconds": round(secs, 3),
               "written": written}
    if "xi" in est.tail:
        summary["median_tail_shape_xi"] = round(float(np.median(est.tail["xi"])), 4)
    return summary


def predict(hardness, measures=("mAP@1000",), sizes=(1e8,), mode: str = "plugin",
            level: float = 0.95, bootstrap: int = 1000, seed: int = 0) -> list[dict]:
    """Predicted metric values with query-bootstrap CIs from a hardness file."""
    from rscale.core.prediction import predict_per_query
    from rscale.core.uncertainty import bootstrap_indices, percentile_ci, query_bootstrap
    from rscale.query.measures import Measure
    from rscale.store.hardness_file import read_hardness

    est, info = read_hardness(hardness)
    idx = bootstrap_indices(est.n_sampled.size, bootstrap, seed)
    s_max = float(est.n_sampled.max())
    rows = []
    for m in measures:
        measure = m if isinstance(m, Measure) else Measure.parse(m)
        for n in sizes:
            pq = predict_per_query(est, measure.law_metric, n, measure.k, mode)
            lo, hi = percentile_ci(query_bootstrap(pq, idx=idx), level)
            rows.append({"measure": str(measure), "N": float(n), "value": float(pq.mean()),
                         "ci_low": float(lo), "ci_high": float(hi), "level": level,
                         "estimator": est.method, "mode": mode, "extrapolation": float(n) / s_max,
                         "backbone": info["meta"].get("backbone", ""), "queries": int(est.n_sampled.size)})
    return rows
