"""Estimators by name: one table, so the CLI, the benchmark and params.yaml share spellings.

Hardness estimators return a :class:`HardnessEstimate` (stored, compared, fed to the law);
curve baselines (``naive``, ``loguniform``, ``powerlaw``) return a :class:`CurveEstimate`, which
extrapolates one metric and has no per-positive hardness.
"""

from __future__ import annotations

from dataclasses import fields

from rscale.core.estimators.count import estimate_count
from rscale.core.estimators.curves import CURVE_METHODS, estimate_curve
from rscale.core.estimators.evt import EVTConfig, estimate_evt, estimate_evt_paper
from rscale.core.estimators.evt_config import config_of, replay_params
# DEFAULT_EB: re-exported for callers that type-check -p values (api.estimation), so none imports evt_eb itself
from rscale.core.estimators.evt_eb import DEFAULT_EB, EBConfig, eb_config, estimate_evt_eb  # noqa: F401
from rscale.core.estimators.sdm import estimate_sdm
from rscale.errors import InvalidArgumentError

HARDNESS_METHODS = ("evt", "evt-eb", "evt-paper", "count", "sdm")
METHODS = HARDNESS_METHODS + CURVE_METHODS
DEFAULT_METHOD = "evt-eb"


def evt_config(params: dict) -> EVTConfig:
    """The configuration method ``evt`` runs with these parameters (its defaults overridden;
    a removed parameter is refused with what to use instead)."""
    return config_of(params)


def estimate(ss, method: str = DEFAULT_METHOD, **params):
    """Run the named estimator on sample stats. ``params`` override its defaults."""
    if method == "evt":
        return estimate_evt(ss, evt_config(params), method="evt")
    if method == "evt-eb":
        return estimate_evt_eb(ss, eb_config(params))
    if method == "evt-paper":
        if params:
            raise InvalidArgumentError("evt-paper is the published configuration and takes no parameters; "
                                       "vary it with method 'evt' (-p count_test=0 -p shape_average=false "
                                       "-p gof_crit=0 is the published rule)")
        return estimate_evt_paper(ss)
    if method == "count":
        return estimate_count(ss)
    if method == "sdm":
        return estimate_sdm(ss, **params)
    if method in CURVE_METHODS:
        return estimate_curve(ss, method, **params)
    from difflib import get_close_matches
    near = get_close_matches(method, METHODS, n=1)
    hint = f" Did you mean '{near[0]}'?" if near else ""
    raise InvalidArgumentError(f"unknown estimator {method!r} (known: {', '.join(METHODS)}).{hint}")


def stored_params(method: str, params: dict) -> dict:
    """The stored parameters of a version that its estimator accepts again (evt's and evt-eb's
    config fields, an older evt file's removed ones translated or refused by
    :func:`~rscale.core.estimators.evt_config.replay_params`; none for the others, whose stored
    params are descriptive)."""
    if method == "evt":
        return replay_params(params)
    if method != "evt-eb":
        return {}
    known = {f.name for f in fields(EBConfig)}
    return {k: v for k, v in params.items() if k in known}
