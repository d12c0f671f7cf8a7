"""Estimator sensitivity: the spread of a prediction over reasonable tail configurations.

The tail-aware estimator has choices no data settles exactly: the threshold quantile (the paper
reports q in 0.90-0.99 as reasonable) and whether a positive's own count may overrule the tail.
``ALTERNATIVES`` spans them; the range of predictions over it is reported next to the query CI,
and the union of the two is the interval rscale calls the prediction's *range*. On the simulator
the union covers the exact value in 85% of cells against 75% for the query CI alone
(docs/benchmarks.md): it exposes configuration sensitivity, not every bias.
"""

from __future__ import annotations

import numpy as np

ALTERNATIVES = (
    {}, {"q": 0.90}, {"q": 0.98},
    {"count_test": 0.0}, {"q": 0.90, "count_test": 0.0}, {"q": 0.98, "count_test": 0.0},
)


def sensitivity_range(ss, metric: str, ns, k: int | None = 1000, base: dict | None = None):
    """(low, high) arrays over ``ns`` of the mean predicted metric across ALTERNATIVES (evt)."""
    from rscale.core.estimators.methods import estimate
    from rscale.core.prediction import predict_per_query

    ests = [estimate(ss, "evt", **{**(base or {}), **alt}) for alt in ALTERNATIVES]
    vals = np.array([[predict_per_query(e, metric, float(n), k).mean() for n in np.atleast_1d(ns)] for e in ests])
    return vals.min(axis=0), vals.max(axis=0)
