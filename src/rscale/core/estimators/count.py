"""The count estimator: x = c / S.

The Krichene-Rendle sampled-rank correction specialised to this setting: the sampled exceedance
count c of a positive is Binomial(S, x), so c / S is unbiased for x. It is exact in expectation but
cannot see below 1/S: a positive no sampled distractor beats gets x = 0 and is predicted immune
at every N, which is why it over-predicts at large N (the paper's +0.04..+0.07).
"""

from __future__ import annotations

import numpy as np

from rscale.core.estimators.base import HardnessEstimate
from rscale.core.sample_stats import SampleStats


def estimate_count(ss: SampleStats) -> HardnessEstimate:
    s = ss.n_sampled[ss.positive_query()].astype(np.float64)
    return HardnessEstimate(method="count", x=ss.pos_counts / s, offsets=ss.pos_offsets,
                            rule=np.full(ss.n_positives, "count"), n_sampled=ss.n_sampled.copy())
