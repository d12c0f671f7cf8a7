"""The simulator: benchmarks with exact truth at any gallery size (see benchmark.py)."""

from rscale.sim.benchmark import (
    HardnessLaw,
    SimBenchmark,
    SimSpec,
    sample,
    simulate,
    truth,
    truth_counts,
    truth_shared,
    with_positives,
)

__all__ = ["HardnessLaw", "SimBenchmark", "SimSpec", "sample", "simulate", "truth", "truth_counts", "truth_shared",
           "with_positives"]
