"""Paired differences of two versions, ``rscale query "mAP@1000 at N=1e8 for A vs B"``: A - B with
the interval of the difference from paired replicates (:func:`rscale.core.interval.
difference_intervals`), for two versions whose half-sample replicates pair: the same split of the
same distractor sample, which their hardness files record as one split key
(:func:`rscale.core.replicates.split_key`). Anything else is refused in one line."""

from __future__ import annotations

import numpy as np


def paired_answer(q, reg, *, catalog, estimator: str, bootstrap: int = 1000, seed: int = 0, level: float = 0.95,
                  ci_kind: str = "benchmark") -> dict:
    """The answer to a parsed ``for A vs B`` query ``q``: one row per (measure, N) with the
    difference ``value`` = A - B, ``value_a``, ``value_b``, the interval of kind ``ci_kind`` and the
    back-test term of the difference (``backtest_at_n`` = e_A(f) - e_B(f)), plus warnings."""
    from rscale.core.interval import difference_intervals
    from rscale.core.prediction import resolve_mode
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
    (est_a, info_a), (est_b, info_b) = reg.read_hardness(va), reg.read_hardness(vb)
    a_name, b_name = f"{va.ref} on {va.benchmark}", f"{vb.ref} on {vb.benchmark}"
    if info_a["query_ids"].shape != info_b["query_ids"].shape or not (info_a["query_ids"] == info_b["query_ids"]).all():
        raise InvalidArgumentError(f"{a_name} and {b_name} are not evaluated on the same queries in the same order: "
                                   "a paired difference needs both; ask for each one's row with "
                                   f"'for {q.backbones[0]}, {q.backbones[1]}'")
    if ci_kind == "benchmark" or bootstrap:
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
                f"their positives, do); ask 'for {q.backbones[0]}, {q.backbones[1]}' for each one's own interval")
    cells = [(m, float(n)) for m in q.measures for n in q.sizes]
    answers = difference_intervals(est_a, est_b, [(m.law_metric, m.k, n) for m, n in cells], mode=q.mode,
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
    for (m, n), (pq_a, pq_b, lo, hi, bt_a, bt_b) in zip(cells, answers):
        value = float((pq_a - pq_b).mean())
        rows.append({"backbone": va.backbone, "version": f"v{va.version}", "versus": vb.backbone,
                     "versus_version": f"v{vb.version}", "benchmark": va.benchmark, "measure": str(m), "N": int(n),
                     "value": value, "value_a": float(pq_a.mean()), "value_b": float(pq_b.mean()), "ci_low": lo,
                     "ci_high": hi, "ci_kind": ci_kind, "paired": "replicates",
                     "estimator": va.estimator, "mode": resolve_mode(m.law_metric, q.mode, va.estimator), "extrapolation": n / s_max,
                     **_difference_backtest(bt_a, bt_b)})
        if np.isfinite(lo) and lo <= 0.0 <= hi:
            warnings.append(f"{m} at N={n:g}: {va.ref} - {vb.ref} = {value:+.4f}, its {ci_kind} interval "
                            f"{lo:+.4f}..{hi:+.4f} contains 0: not resolved")
    warnings += _side_warnings(q, (va, vb), reg.root)
    return {"query": str(q), "rows": rows, "warnings": sorted(set(warnings))}


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


def _difference_backtest(a, b) -> dict:
    """The back-test fields of A - B (:func:`rscale.core.backtest.backtest_fields`):
    ``backtest_at_n`` e_A(f) - e_B(f), none unless both sides have a term; ``backtest_factor`` m
    and ``backtest_error`` e_A,m - e_B,m when both were measured at the same factor."""
    from rscale.core.backtest import backtest_fields
    if a is None or b is None:
        return backtest_fields(None)
    same = a.factor == b.factor
    return {"backtest_factor": a.factor if same else None, "backtest_error": a.error - b.error if same else None,
            "backtest_at_n": a.at_n - b.at_n}
