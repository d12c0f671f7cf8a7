"""An estimate with what ``rscale estimate`` stores beside it, in memory: the benchmarks' one copy.

``fitted(ss)`` is the point estimate, its half-sample replicates (:mod:`rscale.core.replicates`)
and the back-test's share columns (:mod:`rscale.core.backtest`), as the pair (estimate with
replicates, Backtest) that :mod:`rscale.core.interval` takes. Scripts in benchmarks/ import it as
``from _fits import fitted`` (this folder is on their path, as for ``_timing``).
"""

from __future__ import annotations


def fitted(ss, *, method: str = "evt", splits: int = 8, per_factor: int | None = None):
    """(estimate with 2 * ``splits`` replicates, its Backtest with ``per_factor`` shares per factor;
    None: the back-test's default, 4)."""
    from dataclasses import replace

    from rscale.core.backtest import PER_FACTOR, Backtest, backtest_hardness
    from rscale.core.estimators.methods import estimate
    from rscale.core.replicates import hardness_replicates

    est = estimate(ss, method)
    est = replace(est, replicates=hardness_replicates(ss, method=method, params=est.params, splits=splits))
    cols, factors = backtest_hardness(ss, method=method, params=est.params,
                                      per_factor=PER_FACTOR if per_factor is None else per_factor)
    return est, Backtest(counts=ss.pos_counts, columns=cols, column_factors=factors)
