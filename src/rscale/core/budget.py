"""The sufficient-budget diagnostic of a sample: does halving it move the prediction?

Hardness is re-estimated on nested sub-samples S/8, S/4, S/2 (derived from the sample stats,
:func:`rscale.core.subsample.subsample`) and each predicts the metric at every N in ``sizes``;
N is supported when the last doubling (S/2 -> S) moves the prediction by no more than
query-sampling noise (the paper's criterion, appendix D; :func:`rscale.core.uncertainty.sufficient_budget`).
The sub-samples keep only the matching share of the top-K list, so their tail fits see fewer
excesses than a real run at that size would: the check errs on the side of warning.

Three estimator fits: the full-sample estimate is passed in (``full``) when the caller has it
(registration: the stored hardness), else estimated once more.
"""

from __future__ import annotations

BUDGET_SIZES = tuple(10.0 ** e for e in range(5, 11))


def budget_check(ss, method: str, *, params: dict, metric: str = "AP", k: int | None = 1000,
                 label: str = "mAP@1000", sizes=BUDGET_SIZES, seed: int = 0, full=None) -> dict:
    """The diagnostic as a plain dict (stored in a version's summary): per N the four
    predictions, the last step with its paired CI, the noise and whether N is supported."""
    from rscale.core.estimators.methods import estimate as run
    from rscale.core.estimators.methods import stored_params
    from rscale.core.prediction import predict_per_query
    from rscale.core.subsample import subsample
    from rscale.core.uncertainty import sufficient_budget

    kwargs = stored_params(method, params)
    chain = [ss]
    for i in range(3):
        chain.append(subsample(chain[-1], 0.5, seed=seed + i))
    chain = chain[::-1]                                   # S/8, S/4, S/2, S
    fractions = [0.125, 0.25, 0.5, 1.0]
    ests = [run(sub, method, **kwargs) for sub in chain[:-1]]
    ests.append(run(ss, method, **kwargs) if full is None else full)
    out = {"measure": label, "fractions": fractions, "S": int(ss.n_sampled.max()), "N": [], "predictions": [],
           "last_step": [], "last_step_ci": [], "sufficient": []}
    for n in sizes:
        per = [predict_per_query(e, metric, n, k) for e in ests]
        check = sufficient_budget(per, fractions, seed=seed, b=500)
        out["N"].append(float(n))
        out["predictions"].append([round(float(p), 5) for p in check.predictions])
        out["last_step"].append(round(check.last_step.value, 5))
        out["last_step_ci"].append([round(check.last_step.lo, 5), round(check.last_step.hi, 5)])
        out["sufficient"].append(bool(check.sufficient))
        out.setdefault("noise", []).append(round(check.noise, 5))
    ok = [n for n, good in zip(out["N"], out["sufficient"]) if good]
    out["supported_up_to"] = max(ok) if ok and out["sufficient"][0] else None
    return out


__all__ = ["BUDGET_SIZES", "budget_check"]
