"""Tails the data reject: the largest-excess test per query and the count bound for them."""

from __future__ import annotations

import numpy as np

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


def count_bound(est: HardnessEstimate, ss: SampleStats, flagged: np.ndarray) -> HardnessEstimate:
    """The other end of the uncertainty where a query's tail is rejected: every positive of a
    flagged query whose hardness came from the tail gets at least (c + 1) / S, the conventional
    upper-side count estimate (a cluster the sample barely saw may hold many more near
    duplicates than the fitted tail allows). Other positives keep their estimate."""
    pq = ss.positive_query()
    from_tail = np.isin(est.rule, ("tail", "endpoint"))
    bound = (ss.pos_counts + 1.0) / ss.n_sampled[pq]
    x = np.where(flagged[pq] & from_tail, np.maximum(est.x, bound), est.x)
    return HardnessEstimate(method=est.method, x=x, offsets=est.offsets, rule=est.rule,
                            n_sampled=est.n_sampled, params=est.params, tail=est.tail)
