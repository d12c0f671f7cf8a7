"""From a hardness estimate to per-query metric predictions at any N (pure numpy).

An estimate with posterior ``draws`` (the ``evt`` estimator) predicts the per-query metric as the
average over its draws, which integrates the hardness uncertainty through the metric; one without
draws plugs its point hardness into the law.
"""

from __future__ import annotations

import numpy as np

from rscale.core import law
from rscale.core.estimators.base import HardnessEstimate

# Per-metric default mode. AP and RR respond smoothly to N x, and the paper's plug-in predicts
# them well (measured in docs/benchmarks.md); R@k and Recall@k are step functions of the rank, so
# their plug-in is only meaningful on realised fractions and the Binomial expectation is used.
DEFAULT_MODE = {"AP": "plugin", "RR": "plugin", "R": "expected", "Recall": "expected"}


def resolve_mode(metric: str, mode: str | None) -> str:
    return DEFAULT_MODE.get(metric, "plugin") if mode is None else mode


def predict_per_query(est: HardnessEstimate, metric: str, n: float, k: int | None = 1000,
                      mode: str | None = None) -> np.ndarray:
    """Per-query predicted metric at gallery size ``n`` (the benchmark value is the mean).

    ``mode`` None picks :data:`DEFAULT_MODE` for the metric.
    """
    mode = resolve_mode(metric, mode)
    if est.draws is None:
        return law.per_query(est.hardness(), metric, n, k, mode)
    vals = [law.per_query(law.Hardness.from_flat(est.draws[:, d], est.offsets), metric, n, k, mode)
            for d in range(est.draws.shape[1])]
    return np.mean(vals, axis=0)


def predict(est: HardnessEstimate, metric: str, n: float, k: int | None = 1000,
            mode: str | None = None) -> float:
    return float(predict_per_query(est, metric, n, k, mode).mean())
