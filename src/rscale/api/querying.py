"""Answering queries from stored hardness, and metric-vs-N curves."""

from __future__ import annotations

import numpy as np


def query(text: str, registry=None, *, bootstrap: int = 1000, seed: int = 0, level: float = 0.95) -> dict:
    """Answer a query from stored hardness: rows of predictions with CIs, plus warnings."""
    from rscale.core.prediction import resolve_mode
    from rscale.core.uncertainty import paired_difference
    from rscale.errors import QuerySyntaxError
    from rscale.query.grammar import parse
    from rscale.store.registry import Registry

    q = parse(text)
    if not q.sizes:
        raise QuerySyntaxError(f"say at which gallery size: add 'at N=1e8' (query: {q})")
    if not q.backbones:
        raise QuerySyntaxError(f"say for which backbones: add 'for NAME' or 'for *' (query: {q})")
    reg = Registry.locate(registry)
    estimator = q.estimator or "evt"
    versions, catalog = [], reg.versions()          # one catalog read for every backbone named
    _known_estimator(estimator, catalog)
    for ref in q.backbones:
        versions += reg.resolve(ref.name, ref.version, benchmark=q.benchmark, catalog=catalog, estimator=estimator)
    # rows and per-query values are keyed by the version's series and number (one backbone may be
    # registered on several benchmarks, sources or estimators, each with its own v1)
    label = _series_labels(versions)
    rows, warnings, per_query, row_series = [], [], {}, []
    for v in versions:
        est, info = reg.read_hardness(v)
        s_max = float(est.n_sampled.max())
        if s_max < SMALL_SAMPLE and max(q.sizes) >= 10 * s_max:
            warnings.append(
                f"{label[_key(v)]}: a sample of S={s_max:,.0f} fits the tail inside the bulk of the score law and sees "
                f"nothing beyond its top 1/S; at S = 10k of a 1M pool the reported interval covered only 61-80% "
                f"of simulator cells (docs/benchmarks.md): sample {SMALL_SAMPLE:,} or more")
        cells = [(m, n) for m in q.measures for n in q.sizes]
        answers = reported_intervals(v, est, cells=cells, mode=q.mode, bootstrap=bootstrap, seed=seed, level=level)
        for (m, n), (pq, lo, hi) in zip(cells, answers):
            per_query[(_key(v), str(m), n)] = (info["query_ids"], pq)
            r_lo, r_hi = _with_sensitivity(v.summary.get("sensitivity"), str(m), n, float(lo), float(hi))
            row_series.append(_key(v))
            rows.append({"backbone": v.backbone, "version": f"v{v.version}", "benchmark": v.benchmark,
                         "measure": str(m), "N": n, "value": float(pq.mean()), "ci_low": float(lo),
                         "ci_high": float(hi), "range_low": r_lo, "range_high": r_hi, "estimator": v.estimator,
                         "mode": resolve_mode(m.law_metric, q.mode),
                         "extrapolation": n / s_max})
    # ranking resolution between backbones evaluated on the same queries
    for m in q.measures:
        for n in q.sizes:
            group = sorted((i for i, r in enumerate(rows) if r["measure"] == str(m) and r["N"] == n),
                           key=lambda i: -rows[i]["value"])
            for a, b in zip(group, group[1:]):
                qa, va = per_query[(row_series[a], str(m), n)]
                qb, vb = per_query[(row_series[b], str(m), n)]
                if not bootstrap or qa.shape != qb.shape or not (qa == qb).all():
                    continue
                d = paired_difference(va, vb, bootstrap, seed, level)
                if not d.resolved:
                    warnings.append(f"{m} at N={n:g}: {label[row_series[a]]} vs {label[row_series[b]]} differ by "
                                    f"{d.value:+.4f}, within resolution ({level:.0%} CI {d.lo:+.4f}..{d.hi:+.4f}): "
                                    "not ranked")
    for v in versions:
        check = v.summary.get("tail_check")
        if check and check.get("rejected_share", 0.0) >= REJECTED_WARN:
            warnings.append(
                f"{label[_key(v)]}: the fitted tail of {check['rejected_share']:.0%} of queries is rejected by their own "
                f"largest sampled score (p < {check['level']:g}; near-duplicate clusters?): the interval spans the "
                "count bound for them, and a larger sample would narrow it")
        budget = v.summary.get("budget")
        if not budget or "error" in budget:
            continue
        for r, series in zip(rows, row_series):
            if series != _key(v) or not r["measure"].startswith("mAP"):
                continue
            above = [i for i, bn in enumerate(budget["N"]) if bn >= r["N"]]
            if above and not budget["sufficient"][above[0]]:
                i = above[0]
                warnings.append(
                    f"{label[_key(v)]}: the sample (S={budget['S']:,}) does not support N={r['N']:g}: halving it moves "
                    f"{budget['measure']} at N={budget['N'][i]:g} by {budget['last_step'][i]:+.4f}, more than "
                    f"query-sampling noise ({budget['noise'][i]:.4f})")
    for r, series in zip(rows, row_series):
        if r["extrapolation"] > 1000:
            warnings.append(f"{label[series]}: N={r['N']:g} is {r['extrapolation']:.0f}x the sample; "
                            "predictions this far out are not validated")
    return {"query": str(q), "rows": rows, "warnings": sorted(set(warnings))}


def _known_estimator(estimator: str, catalog) -> None:
    """Refuse an estimator name (``using ...``) that no version in the catalog was made with and
    that is not an estimator at all, listing the estimators (not the backbones)."""
    present = sorted({v.estimator for v in catalog})
    if estimator in present:
        return
    from rscale.core.estimators.methods import HARDNESS_METHODS   # only on this error path
    if estimator not in HARDNESS_METHODS:
        from rscale.errors import QuerySyntaxError
        raise QuerySyntaxError(f"unknown estimator {estimator!r} in 'using {estimator}' (estimators: "
                               f"{', '.join(HARDNESS_METHODS)}; in this registry: {', '.join(present) or 'none'})")
def reported_intervals(v, est, *, cells, mode=None, bootstrap: int = 1000, seed: int = 0, level: float = 0.95):
    """(per-query values, low, high) of the interval ``rscale query`` reports, for each
    (measure, N) cell of one version: the query-bootstrap percentile CI widened by the version's
    stored distractor, convergence and tail-model terms (:func:`_reported_ci`). NaN bounds
    without a bootstrap. ``rscale curve`` draws its band from the same function."""
    from rscale.core.prediction import predict_per_query
    from rscale.core.uncertainty import percentile_ci, query_bootstrap

    pqs = np.stack([predict_per_query(est, m.law_metric, n, m.k, mode) for m, n in cells])
    # one pass over the resamples for every measure and size of this version
    cis = np.stack(percentile_ci(query_bootstrap(pqs, bootstrap, seed), level), axis=1) if bootstrap else None
    out = []
    for i, (m, n) in enumerate(cells):
        lo, hi = cis[i] if bootstrap else (np.nan, np.nan)
        lo, hi = _reported_ci(v.summary.get("distractor_sd"), v.summary.get("tail_check"), str(m), n,
                              float(pqs[i].mean()), float(lo), float(hi))
        out.append((pqs[i], float(lo), float(hi)))
    return out


def _key(v) -> tuple:
    """A version's identity within a query's answer: its series and version number."""
    return (*v.series, v.version)


def _series_labels(versions) -> dict:
    """How warnings name each version: its backbone, plus what tells apart the versions that share
    it (version, benchmark, source, estimator)."""
    out = {}
    for v in versions:
        same = [w for w in versions if w.backbone == v.backbone]
        extra = [f"{word} {getattr(v, attr)}" for word, attr in (("on", "benchmark"), ("source", "source"),
                                                                 ("using", "estimator"))
                 if len({getattr(w, attr) for w in same}) > 1]
        out[_key(v)] = " ".join([v.ref, *extra]) if len(same) > 1 else v.backbone
    return out


# the tail_check entries (rscale.api.estimation.tail_check) the reported interval stretches to,
# when a version has them
TAIL_ALTERNATIVES = ("alternative", "own_shape", "shared_shape", "heavy_shape", "single_threshold")
SMALL_SAMPLE = 50_000  # below this many sampled distractors the simulator's coverage falls (docs/benchmarks.md)
REJECTED_WARN = 0.05   # twice-and-more the false-rejection rate expected at level 0.01 plus noise


def _reported_ci(dsd, check, measure: str, n: float, value: float, lo: float, hi: float):
    """Widen a query CI by the stored distractor-sampling term (quadrature), convergence step and
    rejected-tail alternative (versions registered before a term was stored go without it),
    log-N interpolated within the stored sizes."""
    from rscale.core.uncertainty import reported_interval

    def at(entry, key):
        if not entry or "error" in entry or entry.get("measure") != measure or key not in entry:
            return None
        x = np.log10(np.asarray(entry["N"], dtype=float))
        if not x[0] <= np.log10(n) <= x[-1]:
            return None
        return float(np.interp(np.log10(n), x, entry[key]))

    if np.isnan(lo):
        return lo, hi
    sd, step = at(dsd, "sd"), at(dsd, "step")
    alts = [at(check, key) for key in TAIL_ALTERNATIVES]
    if sd is None and all(a is None for a in alts):
        return lo, hi
    return reported_interval(value, lo, hi, sd or 0.0, step or 0.0, alternatives=alts)


def _with_sensitivity(sens, measure: str, n: float, lo: float, hi: float):
    """The union of a CI and the stored estimator-sensitivity band (log-N interpolated), when the
    version has one for this measure; else the CI itself."""
    if not sens or sens.get("measure") != measure or np.isnan(lo):
        return lo, hi
    x = np.log10(np.asarray(sens["N"], dtype=float))
    if not x[0] <= np.log10(n) <= x[-1]:
        return lo, hi
    band_lo = float(np.interp(np.log10(n), x, sens["low"]))
    band_hi = float(np.interp(np.log10(n), x, sens["high"]))
    return min(lo, band_lo), max(hi, band_hi)


DEFAULT_CURVE_RANGE = (1e5, 1e9)


def curve(text: str, n_range: str | None = None, *, points: int = 25, registry=None, bootstrap: int = 1000,
          seed: int = 0, level: float = 0.95) -> dict:
    """Metric vs N for every backbone of a query (no sizes in it): values, band, sampled points.

    The band is the interval ``rscale query`` reports at each N (:func:`reported_intervals`, the
    same bootstrap and seed). The sampled points are exact measurements: the realised metric of
    the sample itself (N = S, plug-in on c / S) and, when the version has its sample stats, of
    nested sub-samples S/2..S/8. Without ``n_range`` the curve runs from 1e5, or from the power of
    ten at or below the smallest measured point, to 1e9 (or 10x the largest sample).
    """
    from rscale.core import law as law_
    from rscale.core.subsample import subsample
    from rscale.errors import InvalidArgumentError, QuerySyntaxError
    from rscale.query.grammar import parse, parse_size
    from rscale.store.registry import Registry

    q = parse(text)
    if q.sizes:
        raise QuerySyntaxError(f"a curve query names no sizes (use --n for the range): {q}")
    if not q.backbones:
        raise QuerySyntaxError(f"say for which backbones: add 'for NAME' (query: {q})")
    if n_range is not None:
        try:
            lo_s, hi_s = (parse_size(p) for p in n_range.split(".."))
        except ValueError:
            raise InvalidArgumentError(f"cannot read the range {n_range!r}; write e.g. 1e5..1e9") from None
        if hi_s <= lo_s:
            raise InvalidArgumentError(f"the range {n_range!r} must go from small to large")
    reg = Registry.locate(registry)
    versions, catalog = [], reg.versions()          # one catalog read for every backbone named
    _known_estimator(q.estimator or "evt", catalog)
    for ref in q.backbones:
        versions += reg.resolve(ref.name, ref.version, benchmark=q.benchmark, catalog=catalog, estimator=q.estimator or "evt")
    measured = []                                   # per version: {measure: [(N, exact value), ...]}
    for v in versions:
        est, info = reg.read_hardness(v)
        s = float(est.n_sampled.max())
        realised = law_.Hardness.from_flat(info["counts"] / np.repeat(est.n_sampled, np.diff(est.offsets)),
                                           est.offsets)
        hards = [(s, realised)]
        cur = reg.read_sample(v)          # digest-checked; a version's missing sample is an error
        if cur is not None:
            for i in range(3):
                cur = subsample(cur, 0.5, seed=seed + i)
                size = float(cur.n_sampled.mean())
                hards.append((size, law_.Hardness.from_flat(cur.pos_counts / cur.n_sampled[cur.positive_query()],
                                                            cur.pos_offsets)))
        measured.append({str(m): sorted((size, float(law_.per_query(h, m.law_metric, size, m.k, "plugin").mean()))
                                        for size, h in hards) for m in q.measures})
    if n_range is None:
        sizes = [n for per in measured for pts in per.values() for n, _ in pts]
        lo_s = min([DEFAULT_CURVE_RANGE[0]] + [10.0 ** np.floor(np.log10(n)) for n in sizes if n >= 1])
        hi_s = max([DEFAULT_CURVE_RANGE[1]] + [10.0 ** np.ceil(np.log10(10 * n)) for n in sizes])
    ns = np.unique(np.round(np.geomspace(lo_s, hi_s, points)))
    series = []
    for v, per in zip(versions, measured):
        est, _ = reg.read_hardness(v)
        for m in q.measures:
            band = reported_intervals(v, est, cells=[(m, float(n)) for n in ns], mode=q.mode, bootstrap=bootstrap,
                                      seed=seed, level=level)
            series.append({"backbone": v.backbone, "version": f"v{v.version}", "benchmark": v.benchmark,
                           "measure": str(m), "N": ns.tolist(), "value": [float(pq.mean()) for pq, _, _ in band],
                           "ci_low": [lo for _, lo, _ in band], "ci_high": [hi for _, _, hi in band],
                           "sampled": per[str(m)]})
    return {"query": str(q), "series": series}


def plot_curve(data: dict, out) -> str:
    """Draw a curve() result to an image file (matplotlib, the 'plot' extra)."""
    from rscale.errors import MissingExtraError
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingExtraError("matplotlib", "plot") from None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, s in enumerate(data["series"]):
        color = f"C{i}"
        label = f"{s['backbone']}@{s['version']} {s['measure']}"
        ax.plot(s["N"], s["value"], color=color, label=label)
        ax.fill_between(s["N"], s["ci_low"], s["ci_high"], color=color, alpha=0.2, linewidth=0)
        if s["sampled"]:
            xs, ys = zip(*s["sampled"])
            ax.scatter(xs, ys, color=color, marker="o", s=18, zorder=3)
    ax.set_xscale("log")
    ax.set_xlabel("gallery size N (distractors)")
    ax.set_ylabel("metric (band: the interval rscale query reports; dots: measured)")
    ax.set_title(data["query"], fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return str(out)
