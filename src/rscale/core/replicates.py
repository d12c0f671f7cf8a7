"""Hardness replicates: disjoint half-sample re-estimates of every positive's hardness, made
once at estimate time and stored with the hardness (docs/formats.md), from which every
command's interval comes (:mod:`rscale.core.interval`).

The sample is split ``splits`` times into two disjoint uniform halves
(:func:`rscale.core.subsample.split_halves`: every distractor lands in exactly one half, each
half keeps its share of the top-K list, so its tail fit sees half the excesses) and each half is
re-estimated with the same estimator and parameters. Replicates 2i and 2i + 1 are the pair of
split i. For any measure and N, a pair's predictions m_a, m_b are independent estimates from
S/2 distractors, so (m_a - m_b) / 2 has the variance of the full-sample prediction's error
(variance halves as the data doubles): the distractor-sampling term and, through the refits,
the tail-parameter term, rescaled to S at the metric level. The shared bias of the two halves
cancels in the difference, so the replicates carry variance, not bias.

Why not per-positive replicates around the estimate (x * exp(+-d) with d the per-positive
half-difference) or tail-parameter posterior draws crossed with them: per-positive hardness
noise is large (a quarter of the positives differ by more than a factor e between halves at 5%
of 1e8 on the gaussian family), and added on top of the estimate's own noise it moves the
metric through the convex AP map (every replicate 0.01-0.03 lower in mAP@1000 there, measured),
which is a bias, not a spread; posterior draws would count the parameter noise the refits
already carry a second time (docs/benchmarks.md).

Cost: 2 * splits estimator fits (R = 2 * splits replicates).

Which distractors a half holds (what pairs two versions' replicates, :func:`split_key`): split i
thins each query's top-K list by position with the generator seeded ``seed + i`` (the same
kept positions for any sample of the same Q and K) and the sampled distractors beyond the list by
Binomial draws on the count increments between positives. Halves are not keyed by distractor id
(sample stats carry none), so two versions' half i hold the same distractors only when their
samples have the same queries, the same S and the same top-K scores (the same distractors in
the same order): two estimates of one sample, or versions that differ in their positives alone.
Beyond the top list the increments depend on the positives, so there the halves of such versions
are independent draws of the same size (where the metric at N >> S gains nothing: those
positives' hardness is at least K / S).

Example: ``hardness_replicates(ss, method="evt", params={}, splits=8)`` returns an array (P, 16).
"""

from __future__ import annotations

import numpy as np

DEFAULT_SPLITS = 8     # R = 16 replicates
SEED = 2027
SPLIT_RULE = "top-list positions thinned by seed + i, count increments beyond (rscale 3)"


def split_key(ss, *, splits: int, seed: int = SEED) -> str:
    """``sha256:<hex>`` of what decides which distractors each half-sample holds (module
    docstring): the split rule, ``splits`` and ``seed``, and the sample's query ids, S per query and
    top-K scores. Two versions with the same key have replicates 2i and 2i + 1 made from the same
    halves of the same distractors: their replicate differences pair (:func:`rscale.core.interval.
    difference_intervals`). Example: two estimates of one sample stats file share a key."""
    import hashlib
    h = hashlib.sha256()
    for part in (SPLIT_RULE, f"splits={int(splits)} seed={int(seed)} k={ss.k}", "\x00".join(ss.query_ids.astype(str))):
        h.update(part.encode() + b"\x01")
    h.update(np.ascontiguousarray(ss.n_sampled, dtype="<i8").tobytes())
    h.update(np.ascontiguousarray(ss.top_scores, dtype="<f8").tobytes())
    return "sha256:" + h.hexdigest()


def hardness_replicates(ss, *, method: str, params: dict, splits: int = DEFAULT_SPLITS, seed: int = SEED) -> np.ndarray:
    """(P, 2 * splits) half-sample hardness of every positive of ``ss`` (``method`` with its
    stored ``params``): columns 2i, 2i + 1 are the disjoint halves of split i."""
    from rscale.core.estimators.methods import estimate as run
    from rscale.core.estimators.methods import stored_params
    from rscale.core.subsample import split_halves
    from rscale.errors import InvalidArgumentError

    if splits < 2:
        raise InvalidArgumentError(f"replicates need at least 2 half-sample splits (4 replicates), got {splits}")
    kwargs = stored_params(method, params)
    out = np.empty((ss.n_positives, 2 * splits))
    for i in range(splits):
        for j, half in enumerate(split_halves(ss, seed=seed + i)):
            out[:, 2 * i + j] = run(half, method, **kwargs).x
    return out
