"""Tails the data reject: per query, the largest-excess test on an ``evt`` / ``evt-paper`` fit.
Registration counts the queries it flags and warns (``rscale register``), and ``rscale estimate``
reports their share; nothing changes the estimate."""

from __future__ import annotations

from rscale.core.estimators.base import HardnessEstimate
from rscale.core.estimators.evt_config import REJECT_LEVEL
from rscale.core.estimators.tail_threshold import max_excess_pvalue
from rscale.core.sample_stats import SampleStats
from rscale.errors import InvalidArgumentError


def rejected_tails(est: HardnessEstimate, ss: SampleStats, level: float = REJECT_LEVEL):
    """Per query: is the fitted tail rejected by its own largest sampled excess?

    p = P(max of n_u GPD excesses >= the largest observed) under the query's fit (the one stored
    in ``est.tail`` by the evt estimators); p < ``level`` flags a tail the GPD cannot describe
    (typically a near-duplicate cluster far above the threshold, seen as a few outlying scores).
    Returns (flags (Q,) bool, p (Q,)).
    """
    t = est.tail
    if not {"u", "n_u", "xi", "sigma"} <= set(t):
        raise InvalidArgumentError(f"a {est.method} estimate has no fitted tails to check; use evt or evt-paper")
    p = max_excess_pvalue(ss.top_scores[:, 0] - t["u"], t["xi"], t["sigma"], t["n_u"])
    return p < level, p
