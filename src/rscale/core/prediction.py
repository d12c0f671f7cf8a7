"""From a hardness estimate to per-query metric predictions at any N (pure numpy).

An estimate with posterior ``draws`` (the ``evt`` estimator) predicts the per-query metric as the
average over its draws, which integrates the hardness uncertainty through the metric; one without
draws plugs its point hardness into the law.
"""

from __future__ import annotations

import numpy as np

from rscale.core import law
from rscale.core.estimators.base import HardnessEstimate


def predict_per_query(est: HardnessEstimate, metric: str, n: float, k: int | None = 1000,
                      mode: str = "plugin") -> np.ndarray:
    """Per-query predicted metric at gallery size ``n`` (the benchmark value is the mean)."""
    if est.draws is None:
        return law.per_query(est.hardness(), metric, n, k, mode)
    vals = [law.per_query(law.Hardness.from_flat(est.draws[:, d], est.offsets), metric, n, k, mode)
            for d in range(est.draws.shape[1])]
    return np.mean(vals, axis=0)


def predict(est: HardnessEstimate, metric: str, n: float, k: int | None = 1000,
            mode: str = "plugin") -> float:
    return float(predict_per_query(est, metric, n, k, mode).mean())
