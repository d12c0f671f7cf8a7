"""Estimators: sample stats in, per-positive hardness out (one module per family).

See :mod:`rscale.core.estimators.methods` for the table of names."""

from rscale.core.estimators.base import HardnessEstimate
from rscale.core.estimators.count import estimate_count

__all__ = ["HardnessEstimate", "estimate_count"]
