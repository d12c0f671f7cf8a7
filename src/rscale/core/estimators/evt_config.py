"""The two tail-aware (EVT) rules, kept as the baselines the hierarchical tail model (``evt-eb``)
is measured against: the published rule (``PAPER``, method ``evt-paper``) and rscale's default
before ``evt-eb`` (``DEFAULT``, method ``evt``: the published rule with three patches).
What each patch does, and why, is in :mod:`rscale.core.estimators.evt`.

Older versions also had experimental modes (shape pooling modes, a posterior path, an averaged
endpoint, heavy-tailed shapes); the hierarchical tail model replaced them. :data:`REMOVED` says,
for each removed parameter, what to use instead, and :func:`replay_params` reads the parameters
an older hardness file stored.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from rscale.errors import InvalidArgumentError


@dataclass(frozen=True)
class EVTConfig:
    """One tail-aware rule. Common to both: per query, the top ``k_top`` sampled scores, the
    threshold at their ``q`` quantile, a GPD with shape in [-1, 0] fitted to the excesses, the
    count c / S where at least ``count_min`` sampled distractors beat a positive, x = 0 beyond the
    fitted endpoint. The three patches of ``evt`` (all off in the published rule):"""
    k_top: int = 4000
    q: float = 0.95
    count_min: int = 5
    count_test: float = 0.0       # > 0: below count_min, the count where it rejects the tail at this level
    shape_average: bool = False   # average each query's tail with the one of its shape shrunk across queries
    gof_crit: float = 0.0         # > 0: refit a query's tail higher up when its Anderson-Darling A^2 exceeds this

    def check(self) -> "EVTConfig":
        if not 0.0 < self.q < 1.0:
            raise InvalidArgumentError(f"threshold quantile q must lie in (0, 1), got {self.q}")
        if self.k_top < 10:
            raise InvalidArgumentError(f"k_top must be at least 10, got {self.k_top}")
        if self.count_min < 1:
            raise InvalidArgumentError(f"count_min must be >= 1, got {self.count_min}")
        if not 0.0 <= self.count_test < 1.0:
            raise InvalidArgumentError(f"count_test must lie in [0, 1) (0: no count test), got {self.count_test}")
        if self.gof_crit < 0:
            raise InvalidArgumentError(f"gof_crit must be >= 0 (0: one threshold for every query), got {self.gof_crit}")
        return self


XI_MIN = -1.0          # the GPD shape's lower bound in both rules (the upper is 0: bounded or exponential tails)
# Goodness-of-fit threshold rule: the 1% point of A^2 for excesses drawn from a GPD and fitted by
# fit_gpd, maximised over shapes -0.6..0 and 50-200 excesses (1.44-2.0 by simulation; tests re-derive
# it), and the share of a rejected query's excesses its refit keeps (200 -> 50 at the defaults).
GOF_CRIT = 2.0
GOF_KEEP = 0.25
REJECT_LEVEL = 0.01   # the largest excess's p below which a query's tail is called rejected

PAPER = EVTConfig()
# rscale's default before evt-eb: the published rule plus the count test, tail-shape averaging and
# the goodness-of-fit threshold rule; docs/benchmarks.md measures each against the paper's rule.
DEFAULT = EVTConfig(count_test=0.01, shape_average=True, gof_crit=GOF_CRIT)

_FOR_POSTERIOR = "posterior draws of the tail are what -m evt-eb (the default estimator) gives"
# A parameter older versions of evt took -> what to use instead (one line each).
REMOVED = {
    "pool_xi": "evt averages each query's tail with its shrunk-shape one (shape_average=true; false: per-query "
               "shapes, as evt-paper); for a tail shape learned across queries use -m evt-eb",
    "posterior": _FOR_POSTERIOR,
    "tau_decades": _FOR_POSTERIOR,
    "draws": _FOR_POSTERIOR + " (-m evt-eb -p draws=16)",
    "endpoint": "evt and evt-paper put x = 0 beyond the fitted endpoint; -m evt-eb averages the tail over "
                "its shape posterior instead",
    "xi_max": "evt fits bounded tails (shape <= 0); for heavier tails use -m evt-eb -p xi_max=0.5",
    "xi_min": "evt fits the GPD shape in [-1, 0]",
}
# The value of each removed parameter under which an older estimate is one of today's rules.
_REMOVED_AS_TODAY = {"posterior": False, "endpoint": "zero", "xi_max": 0.0, "xi_min": XI_MIN}
_POOL_XI = {"none": False, "average": True}     # the pool_xi modes that are today's shape_average


def config_of(params: dict, base: EVTConfig = DEFAULT) -> EVTConfig:
    """``base`` with ``params`` (EVTConfig field names) overridden; an unknown name or one of
    :data:`REMOVED` is an InvalidArgumentError naming it and what to use instead."""
    for key in params:
        if key in REMOVED:
            raise InvalidArgumentError(f"evt has no parameter {key} any more: {REMOVED[key]}")
    known = {f.name for f in fields(EVTConfig)}
    unknown = sorted(set(params) - known)
    if unknown:
        raise InvalidArgumentError(f"unknown evt parameter(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    return replace(base, **params)


def replay_params(stored: dict) -> dict:
    """The EVTConfig fields that re-run the rule a stored ``evt`` estimate used (its hardness
    file's params, as :func:`rscale.core.estimators.methods.stored_params` passes them).

    Today's estimates store exactly these fields. An older file also stored the removed ones: a
    value under which it is one of today's rules is dropped (``pool_xi`` none / average becomes
    ``shape_average``); any other (``pool_xi="shrink"``, ``posterior=True``, ...) is an
    InvalidArgumentError, since no estimator re-runs it (re-estimate the sample instead).
    """
    known = {f.name for f in fields(EVTConfig)}
    out = {k: v for k, v in stored.items() if k in known}
    mode = stored.get("pool_xi")
    if mode is not None:
        if mode not in _POOL_XI:
            raise _not_replayable("pool_xi", mode)
        out["shape_average"] = _POOL_XI[mode]
    for key, today in _REMOVED_AS_TODAY.items():
        if key in stored and stored[key] != today:
            raise _not_replayable(key, stored[key])
    config_of(out).check()
    return out


def _not_replayable(key, value) -> InvalidArgumentError:
    return InvalidArgumentError(f"this hardness was estimated with evt {key}={value!r}, a mode rscale no longer "
                                f"has ({REMOVED[key]}); re-estimate the sample with rscale estimate")
