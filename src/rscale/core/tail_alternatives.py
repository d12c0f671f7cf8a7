"""Tail-model alternatives of an evt estimate: predictions under other tail models its data do
not rule out (the ends the interval before stored replicates stretched to)."""

from __future__ import annotations

# the shape cap of the heavy-tail alternative: GPD tails with finite variance
HEAVY_XI_MAX = 0.5


def tail_check(ss, method: str, *, params: dict, metric: str = "AP", k: int | None = 1000,
               label: str = "mAP@1000", sizes=(1e8,), level: float = 0.01) -> dict | None:
    """The tail-model alternatives of an evt estimate (None for other methods): predictions under
    other tail models its data do not rule out, the ends the reported interval stretches to.

    ``alternative``: queries whose fitted tail their own largest sampled excess rejects
    (:func:`rscale.core.estimators.evt.rejected_tails`) get their tail-derived positives at the
    count bound (c + 1) / S. ``own_shape`` / ``shared_shape``: every query with its own fitted
    GPD shape, or with the shape shrunk toward the across-query centre by empirical Bayes
    (``pool_xi="shrink"``, scales refitted); whichever the estimate itself is not (the default
    averages the two, so both are given). Per-query shapes carry a standard error of about 0.07 at
    200 excesses, which spreads deep-tail hardness over decades; one shape for all is the opposite
    assumption, and neither is the better model on every family (docs/benchmarks.md).
    ``heavy_shape``: every query's own shape with the bounded-tail constraint xi <= 0 lifted to
    xi <= HEAVY_XI_MAX. Cosine scores are bounded, but over the decades a sample sees their tail
    can decay more slowly than any bounded GPD (a mixture of distractor populations); where fits
    pile up at xi = 0 the data are asking for this model.
    ``single_threshold``: every query at the configured threshold, when the estimate raises it for
    queries whose GPD fails the goodness-of-fit test (``gof_crit``): the refit helps on dense
    near-duplicate clusters and overshoots on some sparser ones (docs/benchmarks.md).
    """
    if method not in ("evt", "evt-paper"):
        return None
    from dataclasses import asdict

    from rscale.core.estimators.methods import estimate as run
    from rscale.core.estimators.methods import evt_config_of, stored_params
    from rscale.core.estimators.rejected_tails import count_bound, rejected_tails
    from rscale.core.prediction import predict_per_query

    kwargs = stored_params(method, params)
    est = run(ss, method, **kwargs)
    flagged, _ = rejected_tails(est, ss, level)

    def mean_at(e):
        return [round(float(predict_per_query(e, metric, n, k).mean()), 5) for n in sizes]

    out = {"measure": label, "N": list(sizes), "level": level, "rejected_share": round(float(flagged.mean()), 4),
           "alternative": mean_at(count_bound(est, ss, flagged))}
    base = {**asdict(evt_config_of(method, kwargs))}
    if not base["posterior"]:
        if base["pool_xi"] != "none":
            out["own_shape"] = mean_at(run(ss, "evt", **{**base, "pool_xi": "none"}))
        if base["pool_xi"] not in ("shrink", "full"):
            out["shared_shape"] = mean_at(run(ss, "evt", **{**base, "pool_xi": "shrink"}))
        if base["xi_max"] == 0.0:
            out["heavy_shape"] = mean_at(run(ss, "evt", **{**base, "pool_xi": "none", "xi_max": HEAVY_XI_MAX}))
    if base["gof_crit"] > 0:
        out["single_threshold"] = mean_at(run(ss, "evt", **{**base, "gof_crit": 0.0}))
    return out
