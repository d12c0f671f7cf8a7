"""Curve-fit baselines and evaluate-at-S: predictions from the metric measured on sub-samples.

These do not estimate per-positive hardness; they measure the metric on nested sub-samples of
the sample and extrapolate the metric-vs-N curve (the tail-aware paper's curve-fit baselines).

Sub-samples: halving the sample i times (:func:`rscale.core.subsample.subsample`) gives nested
uniform sub-samples of about S / 2^i with exact counts, so the metric at N = S' is the plug-in law
on the realised fractions c' / S' (exact for that sub-sample).

- ``naive`` (evaluate-at-S): the metric on the sample itself, whatever N is asked.
- ``loguniform``: m(N) = a + b log N, least squares over the sub-sample sizes (log-uniform
  hardness makes mAP decay linearly in log N, paper section 3).
- ``powerlaw``: m(N) = a N^-beta, least squares of log m on log N.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rscale.core import law
from rscale.core.sample_stats import SampleStats
from rscale.errors import InvalidArgumentError

CURVE_METHODS = ("naive", "loguniform", "powerlaw")


def nested_hardness(ss: SampleStats, levels: int = 4, seed: int = 0) -> list[np.ndarray]:
    """Realised fractions c'/S' of nested sub-samples S, S/2, ..., S/2^levels (flat, per positive).
    The sub-samples keep no top list (``k=0``): only the counts are read, and a list cut to the
    fewest kept at every level would run out on short ones (a sample with K = S = 202)."""
    from rscale.core.subsample import subsample

    out, cur = [], ss
    for i in range(levels + 1):
        if i:
            cur = subsample(cur, 0.5, seed=seed + i, k=0)
        out.append(np.minimum(cur.pos_counts / cur.n_sampled[cur.positive_query()], 1.0))
    return out


@dataclass(frozen=True)
class CurveEstimate:
    """Per-query metric values on nested sub-samples, extrapolated by ``method``."""

    method: str
    metric: str
    k: int | None
    sizes: np.ndarray        # (L,) sub-sample sizes, largest first
    values: np.ndarray       # (L, Q) per-query metric at N = size

    def per_query(self, n: float) -> np.ndarray:
        if self.method == "naive":
            return self.values[0]
        logn = np.log(self.sizes)
        if self.method == "loguniform":
            # linear least squares per query; the mean of per-query fits is the fit of the mean
            x = logn - logn.mean()
            slope = (x[:, None] * (self.values - self.values.mean(axis=0))).sum(axis=0) / (x ** 2).sum()
            pred = self.values.mean(axis=0) + slope * (np.log(n) - logn.mean())
            return np.clip(pred, 0.0, 1.0)
        raise InvalidArgumentError("powerlaw extrapolates the benchmark mean only; use value()")

    def value(self, n: float, weights=None) -> float:
        """The extrapolated benchmark value (optionally with query weights, for the bootstrap)."""
        w = np.full(self.values.shape[1], 1.0 / self.values.shape[1]) if weights is None else weights
        means = self.values @ w
        if self.method == "powerlaw":
            logn = np.log(self.sizes)
            ym = np.log(np.maximum(means, 1e-12))
            b, a = np.polyfit(logn, ym, 1)
            return float(np.clip(np.exp(a + b * np.log(n)), 0.0, 1.0))
        return float(self.per_query(n) @ w)


def estimate_curve(ss: SampleStats, method: str, metric: str = "AP", k: int | None = 1000,
                   levels: int = 4, seed: int = 0) -> CurveEstimate:
    if method not in CURVE_METHODS:
        raise InvalidArgumentError(f"unknown curve method {method!r}; expected one of {', '.join(CURVE_METHODS)}")
    if np.any(ss.n_sampled != ss.n_sampled[0]):
        raise InvalidArgumentError("curve baselines need the same sample size S for every query")
    s = float(ss.n_sampled[0])
    fractions = nested_hardness(ss, 0 if method == "naive" else levels, seed)
    sizes = s / 2.0 ** np.arange(len(fractions))
    values = np.stack([
        law.per_query(law.Hardness.from_flat(x, ss.pos_offsets), metric, size, k, "plugin")
        for x, size in zip(fractions, sizes)])
    return CurveEstimate(method, metric, k, sizes, values)
