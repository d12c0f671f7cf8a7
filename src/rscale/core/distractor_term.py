"""The distractor-sampling-plus-fit term of a prediction and its convergence step, from disjoint
half-samples (the paper's nested bootstrap; the interval before stored replicates).

The sample is split into two disjoint halves ``splits`` times; each half is re-estimated and
predicts the metric; the spread of the prediction from the whole sample follows from the
half-sample differences (:func:`rscale.core.uncertainty.distractor_spread`), and the mean
half-sample prediction minus the whole sample's is the step that bounds the remaining bias
(:func:`rscale.core.uncertainty.reported_interval`).
"""

from __future__ import annotations

import numpy as np


def distractor_sd(ss, method: str, *, params: dict, metric: str = "AP", k: int | None = 1000,
                  label: str = "mAP@1000", sizes=(1e8,), splits: int = 3) -> dict:
    """{"measure", "N", "sd", "step", "splits"}: per N the half-sample spread and step."""
    from rscale.core.estimators.methods import estimate as run
    from rscale.core.estimators.methods import stored_params
    from rscale.core.prediction import predict_per_query
    from rscale.core.subsample import split_halves
    from rscale.core.uncertainty import convergence_step, distractor_spread

    kwargs = stored_params(method, params)
    preds = []                                                   # (splits*2, len(sizes))
    for i in range(splits):
        for half in split_halves(ss, seed=100 + i):
            e = run(half, method, **kwargs)
            preds.append([predict_per_query(e, metric, n, k).mean() for n in sizes])
    preds = np.asarray(preds)
    full = run(ss, method, **kwargs)
    sd = [distractor_spread(preds[:, j]) for j in range(len(sizes))]
    step = [convergence_step(preds[:, j], float(predict_per_query(full, metric, n, k).mean()))
            for j, n in enumerate(sizes)]
    return {"measure": label, "N": list(sizes), "sd": [round(float(v), 5) for v in sd],
            "step": [round(float(v), 5) for v in step], "splits": splits}
