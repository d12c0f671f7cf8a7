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

An estimator with posterior ``draws`` (``evt-eb``) predicts by averaging the metric over its
draws, not by plugging in its mean hardness x; through the convex AP map the plug-in is lower
where it extrapolates. The interval stays centred on the reported point (it is built around v
from pair differences, and at N = S, where the back-test scores the replicates, plug-in and
draw average differ by about 1e-4), but replicates stored as x carry the plug-in's spread,
which is larger: pair sd 0.0226 against the draw-averaged predictions' 0.0191 (150 gaussian
queries, 1e7 from 1e5), 0.0038 against 0.0025 (design gaussian/power, 1e8 from 5%). Its
replicate is therefore a certainty equivalent of the half's draws (:func:`point_column`): per
query, the hardness between two adjacent draws (log-linear) whose mAP@1000 (expected mode, the
mode evt-eb is validated in) at N = ``CE_FACTOR`` x S equals the draws' average there (at N = S
the draws hardly differ, so the mix would be ill-determined; 20 is a 5% sample's extrapolation).
Pair sd then 0.0200 and 0.0025, mean within 0.0023 of the halves' own draw average. Simpler
columns missed: one draw per replicate (the posterior's spread differs between halves, some
flat, some wide: +0.013 in the mean over 8 replicates), the per-positive geometric mean or
median of the draws (+0.007, +0.006 in the mean).

Cost: 2 * splits estimator fits (R = 2 * splits replicates).

Which distractors a half holds (what pairs two versions' replicates, :func:`split_key`): when the
sample stats record the halves by distractor id (schema version 3, written by ``rscale score``,
:mod:`rscale.core.halves`), split i is read off them exactly, and the key is the hash rule with the
digest of the sampled id set: two backbones scored on the same distractor sample pair, whatever
their scores. Otherwise (older files, simulated samples, ``splits`` > 8) split i
thins each query's top-K list by position with the generator seeded ``seed + i`` (the same
kept positions for any sample of the same Q and K) and the sampled distractors beyond the list by
Binomial draws on the count increments between positives. Those halves are not keyed by
distractor id, so two versions' half i hold the same distractors only when their
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
    if uses_recorded_halves(ss, splits):
        from rscale.core.halves import RULE
        ids = ss.meta.get("sample_ids")
        parts = [RULE, f"splits={int(splits)}", "\x00".join(ss.query_ids.astype(str))]
        if ids:                      # the sampled id set decides the halves: scores do not enter
            parts.append(f"sample_ids {ids}")
        for part in parts:
            h.update(part.encode() + b"\x01")
        if not ids:                  # recorded by hand without the id digest: this sample alone
            for a in (ss.n_sampled, ss.n_halves, ss.top_scores, ss.top_halves):
                h.update(np.ascontiguousarray(a).tobytes())
        return "sha256:" + h.hexdigest()
    for part in (SPLIT_RULE, f"splits={int(splits)} seed={int(seed)} k={ss.k}", "\x00".join(ss.query_ids.astype(str))):
        h.update(part.encode() + b"\x01")
    h.update(np.ascontiguousarray(ss.n_sampled, dtype="<i8").tobytes())
    h.update(np.ascontiguousarray(ss.top_scores, dtype="<f8").tobytes())
    return "sha256:" + h.hexdigest()


def uses_recorded_halves(ss, splits: int) -> bool:
    """Whether the replicates of ``splits`` splits come from the recorded halves (module docstring)."""
    from rscale.core.sample_stats import HALF_SPLITS
    return bool(getattr(ss, "has_halves", False)) and int(splits) <= HALF_SPLITS


def replicate_halves(ss, split: int, *, splits: int, seed: int = SEED):
    """The two halves (A, B) of split ``split`` of ``splits``: recorded by id when the sample stats
    hold them, else the seeded thinning (module docstring)."""
    if uses_recorded_halves(ss, splits):
        from rscale.core.halves import recorded_halves
        return recorded_halves(ss, split)
    from rscale.core.subsample import split_halves
    return split_halves(ss, seed=seed + split)


CE_METRIC = ("AP", 1000, "expected")     # the measure a certainty equivalent matches
CE_FACTOR = 20.0                         # ... at N = CE_FACTOR x S (module docstring)


def point_column(est, n_ref: float) -> np.ndarray:
    """The hardness column a re-estimate contributes as a replicate: its x, or with posterior
    draws their certainty equivalent at gallery size ``n_ref`` (module docstring): per query,
    the log-linear mix of two adjacent draws (ordered by the query's metric) whose
    :data:`CE_METRIC` equals the draws' mean metric, one secant step on the mixing weight."""
    if est.draws is None:
        return est.x
    from rscale.core import law

    metric, k, mode = CE_METRIC
    draws = np.maximum(est.draws, 1e-300)
    offsets = est.offsets
    q_of = np.repeat(np.arange(offsets.size - 1), np.diff(offsets))

    def per_query(x):
        return law.per_query(law.Hardness.from_flat(x, offsets), metric, n_ref, k, mode)

    m = np.stack([per_query(draws[:, j]) for j in range(draws.shape[1])], axis=1)   # (Q, D)
    target = m.mean(axis=1)
    order = np.argsort(m, axis=1, kind="stable")
    ms = np.take_along_axis(m, order, axis=1)
    lo = np.clip((ms <= target[:, None]).sum(axis=1) - 1, 0, m.shape[1] - 2)     # ms[lo] <= target <= ms[lo + 1]
    rows = np.arange(m.shape[0])
    a_col, b_col = order[rows, lo], order[rows, lo + 1]
    m_a, m_b = ms[rows, lo], ms[rows, lo + 1]
    la = np.log(draws[np.arange(draws.shape[0]), a_col[q_of]])
    lb = np.log(draws[np.arange(draws.shape[0]), b_col[q_of]])

    def mix(w):
        return np.exp(la + w[q_of] * (lb - la))

    span = np.where(m_b > m_a, m_b - m_a, 1.0)
    w = np.clip((target - m_a) / span, 0.0, 1.0)
    got = per_query(mix(w))                       # one secant step between w and the end it is short of
    short = got < target
    end_w = np.where(short, 1.0, 0.0)
    end_m = np.where(short, m_b, m_a)
    denom = end_m - got
    step = np.where(np.abs(denom) > 1e-15, (target - got) / np.where(np.abs(denom) > 1e-15, denom, 1.0), 0.0)
    w = np.clip(w + step * (end_w - w), 0.0, 1.0)
    return mix(w)


def replicate_counts(ss, *, splits: int = DEFAULT_SPLITS, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """((P, 2 * splits) counts, (Q, 2 * splits) sizes) of the replicates' halves, in the columns'
    order: per half, how many of its own sampled distractors lie at or above each positive, and how
    many it holds per query (no fit: the same halves :func:`hardness_replicates` re-estimates). The
    back-test's level carry predicts each half's own gallery with them (:mod:`rscale.core.backtest`)."""
    counts, sizes = [], []
    for i in range(splits):
        for half in replicate_halves(ss, i, splits=splits, seed=seed):
            counts.append(half.pos_counts)
            sizes.append(half.n_sampled)
    return np.stack(counts, axis=1).astype(np.int64), np.stack(sizes, axis=1).astype(np.int64)


def hardness_replicates(ss, *, method: str, params: dict, splits: int = DEFAULT_SPLITS, seed: int = SEED,
                        on_half=None) -> np.ndarray:
    """(P, 2 * splits) half-sample hardness of every positive of ``ss`` (``method`` with its
    stored ``params``): columns 2i, 2i + 1 are the disjoint halves of split i. ``on_half(i, j,
    half, estimate)``, when given, sees each half's sample stats and full estimate as it is made
    (the first split's two make the edge factor, :mod:`rscale.core.edge_models`)."""
    from rscale.core.estimators.methods import estimate as run
    from rscale.core.estimators.methods import stored_params
    from rscale.errors import InvalidArgumentError

    if splits < 2:
        raise InvalidArgumentError(f"replicates need at least 2 half-sample splits (4 replicates), got {splits}")
    kwargs = stored_params(method, params)
    out = np.empty((ss.n_positives, 2 * splits))
    n_ref = CE_FACTOR * float(np.max(ss.n_sampled))
    for i in range(splits):
        for j, half in enumerate(replicate_halves(ss, i, splits=splits, seed=seed)):
            est = run(half, method, **kwargs)
            out[:, 2 * i + j] = point_column(est, n_ref)
            if on_half is not None:
                on_half(i, j, half, est)
    return out
