"""One simulator cell through the shipped path, in process: simulate, sample, the exact truth,
then ``rscale estimate`` -> ``register`` -> ``query`` (benchmarks/interval_carry.py,
benchmarks/interval_handicap.py)."""

from __future__ import annotations

from pathlib import Path

MODE = {"evt-eb": "expected"}       # the prediction mode a query names per estimator (as the table does)


def shipped_sim_cell(spec, n: float, s: int, seed: int, method: str, d: Path):
    """(sample stats, truth = realised mAP@1000 at n, the benchmark-interval query row, mode) of
    one cell, its files (s.parquet, h.parquet, reg/) under ``d``."""
    from rscale import api, sim
    from rscale.store.sample_stats_file import write_sample_stats
    bench = sim.simulate(spec, seed=seed)
    ss = sim.sample(bench, s, k=min(4000, s), seed=seed)
    truth = float(sim.truth(bench, ss, n, "AP", 1000, seed=seed).mean())
    d.mkdir(parents=True, exist_ok=True)
    write_sample_stats(ss, d / "s.parquet")
    api.estimate(d / "s.parquet", method, out=d / "h.parquet")
    api.register(d / "h.parquet", d / "s.parquet", registry=d / "reg", backbone="b", benchmark="sim")
    mode = MODE.get(method)
    text = f"mAP@1000 at N={int(n)} for b using {method}" + (f" {mode}" if mode else "")
    return ss, truth, api.query(text, d / "reg", ci_kind="benchmark")["rows"][0], mode
