"""Paired differences of two versions, ``rscale query "mAP@1000 at N=1e8 for A vs B"`` and
``rscale diff``: A - B with the interval of the difference from paired replicates
(:func:`rscale.core.interval.difference_intervals`), for two versions whose half-sample replicates
pair: the same split of the same distractor sample, which their hardness files record as one split
key (:func:`rscale.core.replicates.split_key`). Anything else is refused in one line.
:func:`paired_rows` is the one home of that check and of the rows; :func:`paired_answer` (the
query) and :func:`rscale.api.registry.diff` both call it."""

from __future__ import annotations

import numpy as np


def paired_answer(q, reg, *, catalog, estimator: str, bootstrap: int = 1000, seed: int = 0, level: float = 0.95,
                  ci_kind: str = "benchmark") -> dict:
    """The answer to a parsed ``for A vs B`` query ``q``: one row per (measure, N) with the
    difference ``value`` = A - B, ``value_a``, ``value_b``, the interval of kind ``ci_kind`` and the
    back-test term of the difference (``backtest_at_n`` and its band ``backtest_low`` /
    ``backtest_high``, carried from the differences of the two sides' share errors:
    :func:`rscale.core.backtest.difference_error`), plus warnings."""
    from rscale.errors import InvalidArgumentError

    if q.rerank_depth is not None:
        raise InvalidArgumentError(f"a paired difference is of first-stage metrics only (no reranked@{q.rerank_depth}): "
                                   f"ask for each backbone's reranked row with 'for {q.backbones[0]}, {q.backbones[1]}'")
    sides = []
    for ref in q.backbones:
        found = reg.resolve(ref.name, ref.version, benchmark=q.benchmark, catalog=catalog, estimator=estimator)
        if len(found) != 1:
            raise InvalidArgumentError(
                f"'{ref}' names {len(found)} versions ({', '.join(f'{v.ref} on {v.benchmark}' for v in found)}); a "
                "paired difference compares one version with one: name it with its version, or add 'on BENCHMARK'")
        sides.append(found[0])
    va, vb = sides
    if (*va.series, va.version) == (*vb.series, vb.version):
        raise InvalidArgumentError(f"'{q.backbones[0]}' and '{q.backbones[1]}' are the same version ({va.ref}); "
                                   "a paired difference needs two")
    rows, warnings, _ = paired_rows(reg, (va, vb), cells=[(m, float(n)) for m in q.measures for n in q.sizes],
                                    mode=q.mode, ci_kind=ci_kind, level=level, bootstrap=bootstrap, seed=seed,
                                    names=tuple(str(r) for r in q.backbones))
    warnings += _side_warnings(q, (va, vb), reg.root)
    return {"query": str(q), "rows": rows, "warnings": sorted(set(warnings))}


def paired_rows(reg, versions, *, cells, mode=None, ci_kind: str = "benchmark", level: float = 0.95,
                bootstrap: int = 1000, seed: int = 0, names=None):
    """(rows, warnings, per-query values) of A - B for the registered ``versions`` (A, B) at
    each (Measure, N) of ``cells``: the rows ``for A vs B`` answers, after the checks that the two
    pair (the same queries in the same order; replicates with one split key, unless the interval
    needs none, population with ``bootstrap`` 0, or A is B). ``names``: how the user named A and B (for the
    messages); per-query values: (A's (Q,), B's (Q,)) per cell, in A's query order."""
    from rscale.core.backtest import backtest_fields, difference_error
    from rscale.core.interval import difference_intervals
    from rscale.core.prediction import resolve_mode
    from rscale.errors import InvalidArgumentError

    va, vb = versions
    name_a, name_b = names or (va.ref, vb.ref)
    (est_a, info_a), (est_b, info_b) = reg.read_hardness(va), reg.read_hardness(vb)
    a_name, b_name = f"{va.ref} on {va.benchmark}", f"{vb.ref} on {vb.benchmark}"
    if info_a["query_ids"].shape != info_b["query_ids"].shape or not (info_a["query_ids"] == info_b["query_ids"]).all():
        raise InvalidArgumentError(f"{a_name} and {b_name} are not evaluated on the same queries in the same order: "
                                   "a paired difference needs both; ask for each one's row with "
                                   f"'for {name_a}, {name_b}'")
    same = (*va.series, va.version) == (*vb.series, vb.version)      # a version with itself pairs trivially
    if not same and (ci_kind == "benchmark" or bootstrap):
        for v, est, info in ((va, est_a, info_a), (vb, est_b, info_b)):
            if est.replicates is None:
                raise InvalidArgumentError(f"{v.ref} on {v.benchmark} has no hardness replicates, so no interval of the "
                                           "difference: re-run 'rscale estimate' and register again")
            if not info["replicates"].get("split_key"):
                raise InvalidArgumentError(
                    f"{v.ref} on {v.benchmark} was estimated before rscale recorded which distractors its half-samples "
                    "hold (rscale.replicates split_key), so its replicates cannot be paired: re-run 'rscale estimate' "
                    "and register again")
        split = [(info["replicates"].get("splits"), info["replicates"].get("seed")) for info in (info_a, info_b)]
        if split[0] != split[1]:
            raise InvalidArgumentError(
                f"{a_name} and {b_name} do not pair: their replicates come from different half-sample splits "
                f"({2 * split[0][0]} replicates, seed {split[0][1]} against {2 * split[1][0]} replicates, seed {split[1][1]}); "
                "estimate both with the same --replicates")
        if info_a["replicates"]["split_key"] != info_b["replicates"]["split_key"]:
            raise InvalidArgumentError(
                f"{a_name} and {b_name} do not pair: their half-samples are not the same split of the same "
                "distractors (two backbones pair when both are scored with 'rscale score --halves' on the same "
                "sample; without recorded halves only two estimates of one sample, or versions that differ only in "
                f"their positives, do); ask 'for {name_a}, {name_b}' for each one's own interval")
    answers = difference_intervals(est_a, est_b, [(m.law_metric, m.k, n) for m, n in cells], mode=mode,
                                   ci_kind=ci_kind, level=level, bootstrap=bootstrap, seed=seed,
                                   backtest_a=info_a["backtest"], backtest_b=info_b["backtest"])
    rows, warnings = [], []
    if est_a.replicates is not None and est_b.replicates is not None and \
            np.array_equal(est_a.replicates, est_b.replicates) and not np.array_equal(est_a.x, est_b.x):
        warnings.append(f"{va.ref} and {vb.ref} have identical half-sample replicates but different hardness: what "
                        "sets them apart acts on the full sample only (a parameter that binds at S but not at S/2, "
                        "such as a threshold quantile below the minimum excess count), so the interval carries no "
                        "estimation variance of the difference")
    s_max = float(max(est_a.n_sampled.max(), est_b.n_sampled.max()))
    s_ref = float(np.max(est_a.n_sampled))         # the factor difference_intervals carried the band to
    for (m, n), (pq_a, pq_b, lo, hi, bt_a, bt_b) in zip(cells, answers):
        value = float((pq_a - pq_b).mean())
        rows.append({"backbone": va.backbone, "version": f"v{va.version}", "versus": vb.backbone,
                     "versus_version": f"v{vb.version}", "benchmark": va.benchmark, "measure": str(m), "N": int(n),
                     "value": value, "value_a": float(pq_a.mean()), "value_b": float(pq_b.mean()), "ci_low": lo,
                     "ci_high": hi, "ci_kind": ci_kind, "paired": "replicates",
                     "estimator": va.estimator, "mode": resolve_mode(m.law_metric, mode, va.estimator),
                     "extrapolation": n / s_max, **backtest_fields(difference_error(bt_a, bt_b, n / s_ref, level=level))})
        if np.isfinite(lo) and lo <= 0.0 <= hi:
            warnings.append(f"{m} at N={n:g}: {va.ref} - {vb.ref} = {value:+.4f}, its {ci_kind} interval "
                            f"{lo:+.4f}..{hi:+.4f} contains 0: not resolved")
    return rows, warnings, [(a[0], a[1]) for a in answers]


def _side_warnings(q, versions, registry) -> list[str]:
    """What ``rscale query`` warns about each version alone (a sample that does not support N,
    rejected tails, a small sample, far extrapolation): it holds for their difference too."""
    from rscale.api.querying import query
    from rscale.query.grammar import format_size
    out = []
    for v in versions:
        text = (f"{', '.join(str(m) for m in q.measures)} at N={','.join(format_size(n) for n in q.sizes)} "
                f"for {v.backbone}@v{v.version} on {v.benchmark} using {v.estimator}" + (f" {q.mode}" if q.mode else ""))
        out += query(text, registry, bootstrap=0, ci_kind="population")["warnings"]    # values only: no interval
    return out

