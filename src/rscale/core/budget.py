"""The sufficient-budget diagnostic of an estimate: does the last doubling of the sample, S/2 -> S,
move the prediction by more than query-sampling noise (the paper's criterion, appendix D)?

It reads what the hardness table already carries and fits nothing. The S/2 prediction is the
average, per query, of the R stored half-sample replicates' predictions
(:mod:`rscale.core.replicates`: R / 2 splits of the sample into two disjoint uniform halves, each
half re-estimated with the same estimator and parameters at estimate time); the S prediction is
the estimate's own (:func:`rscale.core.prediction.predict_per_query`; with two edge models, the
tail model as fitted, the one the halves are). Per N in ``sizes``:
the last step is the mean over queries of S minus the halves' average, with its paired query
bootstrap CI, and N is supported when |last step| <= 1.96 sd / sqrt(Q) of the S prediction
(:func:`rscale.core.uncertainty.sufficient_budget`).

Why the average of the halves, not one nested chain S/8, S/4, S/2 re-fitted at registration (what
this check was): one half-sample prediction carries its own distractor-sampling and tail-fit
noise, so one chain's last step is the drift plus that noise; averaging 16 halves leaves the
drift, the systematic move of the prediction between S/2 and S that the criterion asks about. On
the simulator, where the truth is known (benchmarks/budget_verdicts.py, docs/benchmarks.md: 144
cells per estimator), the verdict agreed with "the prediction is within query noise of the truth"
in 84% of cells against 79% for the nested re-fit (evt; the step's spread over seeds halved), 69%
against 58% (evt-eb). For an estimator with draws the halves store certainty equivalents, which at
N >> 20 S predict below the draw average the S prediction is (docs/benchmarks.md); comparing the
halves with the full sample's own certainty equivalent instead agreed less often (63%). The back-test's quarters (S/4) are not used: they are stored as the
shares' hardness x, which for an estimator with posterior draws is not the kind of value its
halves store (a certainty equivalent of the draws), so an S/4 -> S/2 step would compare two kinds.

A hardness without replicates (a version-1 file, or ``rscale estimate --replicates 0``) has no
budget check: :data:`NO_REPLICATES` says so (registration stores it as the check's ``error``).

Example: ``budget_check(est)`` for an estimate with replicates returns a dict with, per N in
:data:`BUDGET_SIZES`, the two predictions, the last step and its CI, the noise and the verdict.
"""

from __future__ import annotations

BUDGET_SIZES = tuple(10.0 ** e for e in range(5, 11))
NO_REPLICATES = ("the hardness table stores no half-sample replicates (a version-1 file, or estimated with "
                 "--replicates 0), which the sufficient-budget check reads; re-estimate with rscale estimate "
                 "(16 replicates by default) and register that file for it")
BOOTSTRAP = 500     # query resamples of the last step's CI


def budget_check(est, *, metric: str = "AP", k: int | None = 1000, label: str = "mAP@1000", sizes=BUDGET_SIZES,
                 seed: int = 0) -> dict:
    """The diagnostic as a plain dict (stored in a version's summary): per N the S/2 and S
    predictions, the last step with its paired CI, the noise and whether N is supported, plus
    ``halves`` (how many replicates were averaged) and ``supported_up_to``. InvalidArgumentError
    (:data:`NO_REPLICATES`) when ``est`` has no replicates."""
    from rscale.core.prediction import edge_models_per_query, predict_per_query, replicate_per_query
    from rscale.core.uncertainty import sufficient_budget
    from rscale.errors import InvalidArgumentError

    if est.replicates is None:
        raise InvalidArgumentError(NO_REPLICATES)
    fractions = [0.5, 1.0]
    out = {"measure": label, "fractions": fractions, "S": int(est.n_sampled.max()),
           "halves": int(est.replicates.shape[1]), "N": [], "predictions": [], "last_step": [],
           "last_step_ci": [], "sufficient": [], "noise": []}
    for n in sizes:
        halves = replicate_per_query(est, metric, n, k).mean(axis=0)
        # like with like: the halves are the tail model as fitted, so the S side is its model U
        # (rscale.core.edge_models), not the mean of the two edge models
        models = edge_models_per_query(est, metric, n, k)
        full = predict_per_query(est, metric, n, k) if models is None else models[0]
        check = sufficient_budget([halves, full], fractions, seed=seed, b=BOOTSTRAP)
        out["N"].append(float(n))
        out["predictions"].append([round(float(p), 5) for p in check.predictions])
        out["last_step"].append(round(check.last_step.value, 5))
        out["last_step_ci"].append([round(check.last_step.lo, 5), round(check.last_step.hi, 5)])
        out["sufficient"].append(bool(check.sufficient))
        out["noise"].append(round(check.noise, 5))
    ok = [n for n, good in zip(out["N"], out["sufficient"]) if good]
    out["supported_up_to"] = max(ok) if ok and out["sufficient"][0] else None
    return out


__all__ = ["BUDGET_SIZES", "NO_REPLICATES", "budget_check"]
