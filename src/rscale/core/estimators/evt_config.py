"""The configuration of the tail-aware (EVT) estimators: the paper's rule (``PAPER``) and
rscale's default (``DEFAULT``), with the constants of the goodness-of-fit threshold rule.
What each field does is explained in :mod:`rscale.core.estimators.evt`.
"""

from __future__ import annotations

from dataclasses import dataclass

from rscale.errors import InvalidArgumentError

POOL_XI = ("none", "shrink", "full", "average")


@dataclass(frozen=True)
class EVTConfig:
    k_top: int = 4000
    q: float = 0.95
    xi_min: float = -1.0
    xi_max: float = 0.0          # 0: bounded or exponential tails (the paper); > 0 admits heavy tails
    posterior: bool = False
    # point rule (evt-paper)
    count_min: int = 5
    endpoint: str = "zero"       # beyond the fitted endpoint: "zero" (paper) or "averaged"
    count_test: float = 0.0      # > 0: below count_min, use the count when the tail is rejected at this level
    pool_xi: str = "none"        # the tail shape: per query ("none"), shared ("shrink": empirical Bayes,
                                 # "full"), or the average of per-query and shrunk tails ("average")
    gof_crit: float = 0.0        # > 0: refit a query's tail higher up when its Anderson-Darling A^2 exceeds this
    # posterior rule (evt)
    tau_decades: float = 0.5
    draws: int = 16

    def check(self) -> "EVTConfig":
        if not 0.0 < self.q < 1.0:
            raise InvalidArgumentError(f"threshold quantile q must lie in (0, 1), got {self.q}")
        if self.k_top < 10:
            raise InvalidArgumentError(f"k_top must be at least 10, got {self.k_top}")
        if self.count_min < 1:
            raise InvalidArgumentError(f"count_min must be >= 1, got {self.count_min}")
        if self.tau_decades < 0 or self.draws < 1:
            raise InvalidArgumentError("tau_decades must be >= 0 and draws >= 1")
        if not 0.0 <= self.xi_max <= 1.0:
            raise InvalidArgumentError(f"xi_max must lie in [0, 1], got {self.xi_max}")
        if self.gof_crit < 0:
            raise InvalidArgumentError(f"gof_crit must be >= 0 (0: one threshold for every query), got {self.gof_crit}")
        if self.pool_xi not in POOL_XI:
            raise InvalidArgumentError(f"pool_xi must be one of {', '.join(POOL_XI)}, got {self.pool_xi!r}")
        if self.pool_xi != "none" and self.posterior:
            raise InvalidArgumentError(f"pool_xi={self.pool_xi!r} applies to the point rule only; "
                                       "with posterior=True set pool_xi=\"none\"")
        return self


# Goodness-of-fit threshold rule: the 1% point of A^2 for excesses drawn from a GPD and fitted by
# fit_gpd, maximised over shapes -0.6..0 and 50-200 excesses (1.44-2.0 by simulation; tests re-derive
# it), and the share of a rejected query's excesses its refit keeps (200 -> 50 at the defaults).
GOF_CRIT = 2.0
GOF_KEEP = 0.25
REJECT_LEVEL = 0.01   # the largest excess's p below which a query's tail is called rejected

PAPER = EVTConfig()
# rscale's default: the published rule plus the count test, tail-shape averaging and the
# goodness-of-fit threshold rule (see the module docstring); docs/benchmarks.md measures each
# against the paper's rule on every simulator family.
DEFAULT = EVTConfig(count_test=0.01, pool_xi="average", gof_crit=GOF_CRIT)
