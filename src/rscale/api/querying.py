"""Answering queries from stored hardness, and metric-vs-N curves."""

from __future__ import annotations

import numpy as np


def query(text: str, registry=None, *, bootstrap: int = 1000, seed: int = 0, level: float = 0.95,
          ci_kind: str = "benchmark") -> dict:
    """Answer a query from stored hardness: rows of predictions with intervals of kind
    ``ci_kind`` (``benchmark`` or ``population``, :mod:`rscale.core.interval`), plus warnings.
    A ``reranked@K'`` query answers the metric after reranking each version's first-stage top K'
    from the reranked input stored with it (:func:`reranked_answers`); its rows carry ``reranked``.
    A ``for A vs B`` query answers the paired difference A - B (:func:`rscale.api.paired.paired_answer`)."""
    from rscale.core.backtest import backtest_fields
    from rscale.core.interval import check_ci_kind
    from rscale.core.prediction import resolve_mode
    from rscale.core.uncertainty import paired_difference
    from rscale.errors import QuerySyntaxError
    from rscale.query.grammar import parse
    from rscale.store.registry import Registry

    check_ci_kind(ci_kind)
    q = parse(text)
    if not q.sizes:
        raise QuerySyntaxError(f"say at which gallery size: add 'at N=1e8' (query: {q})")
    if not q.backbones:
        raise QuerySyntaxError(f"say for which backbones: add 'for NAME' or 'for *' (query: {q})")
    reg = Registry.locate(registry)
    versions, catalog = [], reg.versions()          # one catalog read for every backbone named
    estimator = default_estimator(q.estimator, catalog)
    _known_estimator(estimator, catalog)
    if q.paired:                                    # for A vs B: the paired difference (rscale.api.paired)
        from rscale.api.paired import paired_answer
        return paired_answer(q, reg, catalog=catalog, estimator=estimator, bootstrap=bootstrap, seed=seed,
                             level=level, ci_kind=ci_kind)
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
        if q.rerank_depth is None:
            answers = reported_intervals(est, cells=cells, mode=q.mode, ci_kind=ci_kind, bootstrap=bootstrap,
                                         seed=seed, level=level, backtest=info["backtest"])
        else:  # the back-test covers the first-stage law only: no term for the reranked one
            answers = [(*a, None) for a in reranked_answers(
                reg, v, est=est, cells=cells, depth=q.rerank_depth, mode=q.mode, ci_kind=ci_kind,
                bootstrap=bootstrap, seed=seed, level=level, label=label[_key(v)])]
        if est.replicates is None and (ci_kind == "benchmark" or bootstrap):
            warnings.append(f"{label[_key(v)]}: its hardness has no replicates (a version-1 file or a sample too small "
                            "to halve): no distractor or tail-model term, " +
                            ("no benchmark interval" if ci_kind == "benchmark" else "the query bootstrap alone") +
                            "; re-run 'rscale estimate' and register again")
        for (m, n), (pq, lo, hi, bt) in zip(cells, answers):
            per_query[(_key(v), str(m), n)] = (info["query_ids"], pq)
            row_series.append(_key(v))
            rows.append({"backbone": v.backbone, "version": f"v{v.version}", "benchmark": v.benchmark,
                         "measure": str(m), "N": n, "value": float(pq.mean()), "ci_low": float(lo),
                         "ci_high": float(hi), "ci_kind": ci_kind, "estimator": v.estimator,
                         "mode": resolve_mode(m.law_metric, q.mode, v.estimator),
                         "extrapolation": n / s_max, **backtest_fields(bt),
                         **({} if q.rerank_depth is None else {"reranked": q.rerank_depth})})
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
        check = v.summary.get("rejected_tails") or v.summary.get("tail_check")   # the latter: older registrations
        if check and check.get("rejected_share", 0.0) >= REJECTED_WARN:
            warnings.append(
                f"{label[_key(v)]}: the fitted tail of {check['rejected_share']:.0%} of queries is rejected by their own "
                f"largest sampled score (p < {check['level']:g}; near-duplicate clusters?): their hardness may be "
                "understated beyond what the interval carries, and a larger sample would narrow it")
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


def default_estimator(estimator: str | None, catalog) -> str:
    """The estimator a query without ``using`` reads: the default (evt-eb), or ``evt`` (the default
    before it) in a registry that holds no evt-eb version."""
    if estimator:
        return estimator
    present = {v.estimator for v in catalog}
    return "evt" if "evt-eb" not in present and "evt" in present else "evt-eb"


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


def reranked_answers(reg, v, *, est, cells, depth: int, mode=None, ci_kind: str = "benchmark", bootstrap: int = 1000,
                     seed: int = 0, level: float = 0.95, label: str | None = None):
    """(per-query values, low, high) of each (measure, N) cell of one version after reranking its
    first-stage top ``depth`` (K'): :func:`rscale.core.rerank_replicates.reranked_intervals` on the
    version's stored reranked input, with the version's hardness and hardness replicates (replicate
    i and half-sample i are the same half). The mode follows the first stage's per-measure default.
    Refused, in one line, for a version without rerank data, a cut-off beyond K', and a K' the
    stored rerank scores do not reach at some N."""
    from rscale.core.prediction import resolve_mode
    from rscale.core.rerank_replicates import reranked_intervals, supported_depth
    from rscale.errors import InvalidArgumentError
    from rscale.query.grammar import format_size

    name = label or v.ref
    stored = reg.read_reranked(v)
    if stored is None:
        raise InvalidArgumentError(
            f"{name} has no rerank data for 'reranked@{depth}': it was registered from sample stats without rerank "
            "scores (columns top_rerank_scores, positive_rerank_scores); register it again with --sample pointing at "
            "schema-2 sample stats (docs/rerank.md)")
    inp, _info = stored
    for m, _n in cells:
        if m.k is None or m.k > depth:
            raise InvalidArgumentError(
                f"{m} cannot be answered after reranking the top {depth}: a reranked measure needs a cut-off "
                f"k <= K'={depth} (write e.g. {m.name}@{min(m.k or depth, depth)}"
                + (f" or reranked@{m.k})" if m.k else ")"))
    for n in sorted({n for _m, n in cells}):
        most = supported_depth(inp, n)
        if most < depth:
            reach = min(float(s.reach.min()) for s in inp.sets)
            fix = f"ask for reranked@{most} or less at this N, or N >= " if most >= 1 else "ask for N >= "
            raise InvalidArgumentError(
                f"{name}: reranked@{depth} at N={format_size(int(n))} needs the rerank scores of the sample's top "
                f"{depth / n:.3g} of the first-stage law, the stored ones reach {reach:.3g} (halves included): "
                f"{fix}{depth / reach:.3g}, or register a sample with more reranked candidates")
    reps = est.replicates if inp.halves else None
    return reranked_intervals(inp, est.x, reps,
                              [(m.law_metric, m.k, float(n), resolve_mode(m.law_metric, mode, est.method)) for m, n in cells],
                              depth=depth, ci_kind=ci_kind, level=level, bootstrap=bootstrap, seed=seed)


def reported_intervals(est, *, cells, mode=None, ci_kind: str = "benchmark", bootstrap: int = 1000, seed: int = 0,
                       level: float = 0.95, backtest=None):
    """(per-query values, low, high, back-test) of the interval ``rscale query`` reports, for each
    (measure, N) cell of one version's hardness (``backtest``: the file's stored back-test):
    :func:`rscale.core.interval.predicted_intervals`, the function ``rscale predict`` and
    ``rscale curve`` call too."""
    from rscale.core.interval import predicted_intervals
    return predicted_intervals(est, [(m.law_metric, m.k, float(n)) for m, n in cells], mode=mode, ci_kind=ci_kind,
                               level=level, bootstrap=bootstrap, seed=seed, backtest=backtest)


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


SMALL_SAMPLE = 50_000  # below this many sampled distractors the simulator's coverage falls (docs/benchmarks.md)
REJECTED_WARN = 0.05   # twice-and-more the false-rejection rate expected at level 0.01 plus noise


DEFAULT_CURVE_RANGE = (1e5, 1e9)


def curve(text: str, n_range: str | None = None, *, points: int = 25, registry=None, bootstrap: int = 1000,
          seed: int = 0, level: float = 0.95, ci_kind: str = "benchmark") -> dict:
    """Metric vs N for every backbone of a query (no sizes in it): values, band, sampled points.

    The band is the interval ``rscale query`` reports at each N (:func:`reported_intervals`, the
    same bootstrap and seed). The sampled points are exact measurements: the realised metric of
    the sample itself (N = S, plug-in on c / S) and, when the version has its sample stats, of
    nested sub-samples S/2..S/8, as far as each query's stored top list allows (a halving that
    would leave a query none of its top scores ends them; the band does not depend on them). Without ``n_range`` the curve runs from 1e5, or from the power of
    ten at or below the smallest measured point, to 1e9 (or 10x the largest sample).
    """
    from rscale.core import law as law_
    from rscale.core.subsample import subsample
    from rscale.errors import InvalidArgumentError, QuerySyntaxError
    from rscale.query.grammar import parse, parse_size
    from rscale.store.registry import Registry

    from rscale.core.interval import check_ci_kind
    check_ci_kind(ci_kind)
    q = parse(text)
    if q.sizes:
        raise QuerySyntaxError(f"a curve query names no sizes (use --n for the range): {q}")
    if q.rerank_depth is not None:
        raise QuerySyntaxError(f"curve draws first-stage metrics only; ask rscale query for reranked ones "
                               f"(e.g. \"{q} at N=1e8\" with the sizes after the measures): {q}")
    if not q.backbones:
        raise QuerySyntaxError(f"say for which backbones: add 'for NAME' (query: {q})")
    if q.paired:
        raise QuerySyntaxError(f"curve draws each backbone's own metric; ask rscale query for a paired difference "
                               f"(e.g. \"{q} at N=1e8\"), or list the backbones with commas: {q}")
    if n_range is not None:
        try:
            lo_s, hi_s = (parse_size(p) for p in n_range.split(".."))
        except ValueError:
            raise InvalidArgumentError(f"cannot read the range {n_range!r}; write e.g. 1e5..1e9") from None
        if hi_s <= lo_s:
            raise InvalidArgumentError(f"the range {n_range!r} must go from small to large")
    reg = Registry.locate(registry)
    versions, catalog = [], reg.versions()          # one catalog read for every backbone named
    estimator = default_estimator(q.estimator, catalog)
    _known_estimator(estimator, catalog)
    for ref in q.backbones:
        versions += reg.resolve(ref.name, ref.version, benchmark=q.benchmark, catalog=catalog, estimator=estimator)
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
                try:
                    cur = subsample(cur, 0.5, seed=seed + i)
                except InvalidArgumentError:      # the top list runs out: the points end at the last halving it allows
                    break
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
        est, info = reg.read_hardness(v)
        for m in q.measures:
            band = reported_intervals(est, cells=[(m, float(n)) for n in ns], mode=q.mode, ci_kind=ci_kind,
                                      bootstrap=bootstrap, seed=seed, level=level, backtest=info["backtest"])
            series.append({"backbone": v.backbone, "version": f"v{v.version}", "benchmark": v.benchmark,
                           "measure": str(m), "N": ns.tolist(), "value": [float(b[0].mean()) for b in band],
                           "ci_low": [b[1] for b in band], "ci_high": [b[2] for b in band], "ci_kind": ci_kind,
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
