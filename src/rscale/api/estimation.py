"""Estimating hardness and predicting metrics from files, with the uncertainty diagnostics."""

from __future__ import annotations

import numpy as np


def _parse_param(text: str):
    from rscale.errors import InvalidArgumentError
    if "=" not in text:
        raise InvalidArgumentError(f"estimator parameter {text!r} must look like name=value (e.g. q=0.98)")
    key, raw = text.split("=", 1)
    raw = raw.strip()
    low = raw.lower()
    if low in ("true", "false"):
        return key.strip(), low == "true"
    for cast in (int, float):
        try:
            return key.strip(), cast(raw)
        except ValueError:
            pass
    return key.strip(), raw


def estimator_params(method: str, params=()) -> dict:
    """Parsed and checked ``name=value`` estimator parameters (before any work is done)."""
    from rscale.errors import InvalidArgumentError
    kwargs = dict(_parse_param(p) for p in params)
    if method in ("evt", "evt-eb"):
        if method == "evt":
            from rscale.core.estimators.evt_config import DEFAULT
            from rscale.core.estimators.methods import evt_config as config_of
        else:
            from rscale.core.estimators.methods import DEFAULT_EB as DEFAULT    # through the dispatch table,
            from rscale.core.estimators.methods import eb_config as config_of   # not evt-eb's own module
        for key, value in kwargs.items():
            if not hasattr(DEFAULT, key):
                continue                                   # evt_config names the unknown ones
            default = getattr(DEFAULT, key)
            kinds = {bool: ((bool,), "true or false"), int: ((int,), "whole number"),
                     float: ((int, float), "number"), str: ((str,), "word")}
            accepted, what = kinds[type(default)]
            if not isinstance(value, accepted) or (isinstance(value, bool) and type(default) is not bool):
                raise InvalidArgumentError(f"estimator parameter {key}={value} must be a {what} "
                                           f"(e.g. -p {key}={str(default).lower() if type(default) is bool else default})")
        config_of(kwargs).check()
    elif kwargs and method in ("evt-paper", "count"):
        raise InvalidArgumentError(f"{method} takes no parameters (got {', '.join(sorted(kwargs))}); "
                                   "vary the method 'evt' with -p name=value instead")
    return kwargs


def estimate(sample_stats, method: str = "evt-eb", *, params=(), out=None, replicates: int = 16,
             backtest: bool = True) -> dict:
    """Estimate hardness from a sample-stats file; write it to ``out`` when given, with
    ``replicates`` hardness replicates (:mod:`rscale.core.replicates`: replicates / 2 half-sample
    splits, 2 estimator fits each; 0: none, and then no benchmark interval) and, with
    ``backtest``, the back-test's share hardness (:mod:`rscale.core.backtest`: 4 fits on the
    disjoint quarters of the sample; the halves are the replicates).

    Returns a summary: method, queries, positives, share of positives per rule, median tail
    shape, share of queries whose fitted tail their own largest score rejects (evt methods),
    replicates, back-test factors, estimator fits, seconds, files written.
    """
    import time

    from rscale.core.estimators.base import HardnessEstimate, rule_shares
    from rscale.core.estimators.methods import HARDNESS_METHODS
    from rscale.core.estimators.methods import estimate as run
    from rscale.errors import InvalidArgumentError
    from rscale.store.hardness_file import write_hardness
    from rscale.store.sample_stats_file import read_sample_stats

    if method not in HARDNESS_METHODS:
        raise InvalidArgumentError(
            f"'{method}' does not produce per-positive hardness (hardness estimators: "
            f"{', '.join(HARDNESS_METHODS)}); the curve baselines are compared in benchmarks/accuracy.py")
    from pathlib import Path

    from rscale.producers.lineage import digest_file, producer_run
    kwargs = estimator_params(method, params)
    if replicates != 0 and (replicates < 4 or replicates % 2):
        raise InvalidArgumentError(f"--replicates must be 0 or an even number >= 4 (e.g. 16), got {replicates}")
    if out is not None and Path(out).is_dir():
        raise InvalidArgumentError(f"the output {out} is a folder; name the hardness file to write "
                                   f"(e.g. {Path(out) / 'hardness.parquet'})")
    ss = read_sample_stats(sample_stats)
    # estimate first, then open the run that records the write: a failing estimate leaves no run
    t = time.perf_counter()
    est = run(ss, method, **kwargs)
    if not isinstance(est, HardnessEstimate):
        raise InvalidArgumentError(f"'{method}' does not produce per-positive hardness")
    rep_meta, rep_note, edge_meta = {}, None, None
    if replicates:
        from dataclasses import replace

        from rscale.core.replicates import SEED, hardness_replicates, split_key, uses_recorded_halves
        from rscale.errors import RscaleError
        first_split = {}

        def keep_first_split(i, j, half, half_est):
            if i == 0:
                first_split[j] = (half, half_est)
        try:
            reps = hardness_replicates(ss, method=method, params=est.params, splits=replicates // 2,
                                       on_half=keep_first_split)
            est = replace(est, replicates=reps)
            if est.draws is not None:          # the second edge model (rscale.core.edge_models)
                est, edge_meta = _with_edge_factor(est, ss, first_split)
            rep_meta = {"R": int(reps.shape[1]), "splits": replicates // 2, "kind": "half-sample pairs", "seed": SEED,
                        "split_key": split_key(ss, splits=replicates // 2, seed=SEED)}   # what pairs two versions
            if uses_recorded_halves(ss, replicates // 2):
                rep_meta["halves"] = "by distractor id"      # read off the sample stats (rscale.core.halves)
        except RscaleError as exc:       # a sample too small to halve: stored without, and said
            rep_note = f"no replicates: {exc}"
    from rscale.core.backtest import PER_FACTOR, Backtest, backtest_hardness
    from rscale.core.backtest import SEED as BT_SEED
    bt, bt_meta = None, None
    if backtest:
        cols, factors = backtest_hardness(ss, method=method, params=est.params)
        bt = Backtest(counts=ss.pos_counts, columns=cols, column_factors=factors)
        bt_meta = {"per_factor": PER_FACTOR, "seed": BT_SEED}
    fits = 1 + (0 if est.replicates is None else int(est.replicates.shape[1])) + (0 if bt is None else int(bt.columns.shape[1]))
    secs = time.perf_counter() - t
    with producer_run("estimate", {"method": method, **kwargs}, {"sample_stats": digest_file(sample_stats)},
                      enabled=out is not None) as record:
        written = [str(p) for p in write_hardness(est, ss, out, rep_meta, bt, bt_meta, edge_meta)] if out else []
        if written:
            from rscale.store.run_sidecar import write_run_sidecar
            write_run_sidecar(written[0], "estimate", record.run_id)
        for p in written:
            record.output(Path(p).name, digest_file(p))
        record.metric("seconds", secs)
    summary = {"method": est.method, "queries": ss.n_queries, "positives": ss.n_positives,
               "rules": {k: round(v, 4) for k, v in rule_shares(est).items()}, "seconds": round(secs, 3),
               "replicates": 0 if est.replicates is None else int(est.replicates.shape[1]),
               "backtest_factors": [] if bt is None else bt.factors(est), "fits": fits, "written": written}
    if rep_note:
        summary["replicates_note"] = rep_note
    if edge_meta:
        summary["edge_band_ratios"] = [round(r, 4) for r in edge_meta["ratios"]]
    if "xi" in est.tail:
        summary["median_tail_shape_xi"] = round(float(np.median(est.tail["xi"])), 4)
        # fits pinned at the exponential boundary: many of them say the bounded family is too light
        summary["tail_shape_at_zero_share"] = round(float(np.mean(est.tail["xi"] == 0.0)), 4)
    if "cluster" in est.tail:     # evt-eb: queries with a near-duplicate cluster given its own tail
        summary["cluster_share"] = round(float(np.mean(est.tail["cluster"] > 0)), 4)
    if "gof_refit" in est.tail:   # queries whose threshold the goodness-of-fit rule raised
        summary["gof_refit_share"] = round(float(np.mean(est.tail["gof_refit"])), 4)
    if method in ("evt", "evt-paper"):
        from rscale.core.estimators.rejected_tails import rejected_tails
        summary["rejected_tail_share"] = round(float(rejected_tails(est, ss)[0].mean()), 4)
    return summary


def _with_edge_factor(est, ss, first_split: dict):
    """``est`` with the second edge model's factor (:mod:`rscale.core.edge_models`) from the first
    replicate split's two halves (their sample stats and estimates, already made), and the file
    metadata that records it (bands, prior, the measured ratios)."""
    from dataclasses import replace

    from rscale.core.edge_models import BANDS, PRIOR_COUNTS, edge_factor, halves_band_ratios
    sizes = np.diff(est.offsets)

    def triple(half, half_est):
        return half_est.draws.mean(axis=1), half.pos_counts, np.repeat(half.n_sampled, sizes)
    ratios = halves_band_ratios(triple(*first_split[0]), triple(*first_split[1]))
    factor = edge_factor(est.draws.mean(axis=1), ss.pos_counts, np.repeat(ss.n_sampled, sizes), ratios)
    meta = {"bands": [list(b) for b in BANDS], "prior_counts": PRIOR_COUNTS, "ratios": [float(r) for r in ratios],
            "split": 0, "weights": [0.5, 0.5]}
    return replace(est, edge_factor=factor), meta


def check_sample_of(ss, est, *, info, sample_name, hardness_name) -> None:
    """Refuse sample stats that are not the sample a hardness table was estimated from: the same
    queries, the same positives of each query, the same S per query and the same sampled counts."""
    from rscale.errors import InvalidArgumentError

    def same(a, b) -> bool:
        a, b = np.asarray(a), np.asarray(b)
        return a.shape == b.shape and bool((a == b).all())

    pos_ids = np.asarray(info["positive_ids"].to_pylist(), dtype=str)
    for what, ok in (("query ids", lambda: same(ss.query_ids.astype(str), info["query_ids"])),
                     ("positives", lambda: same(ss.pos_offsets, est.offsets) and same(ss.pos_ids.astype(str), pos_ids)),
                     ("sample sizes S", lambda: same(ss.n_sampled, est.n_sampled)),
                     ("sampled counts", lambda: same(ss.pos_counts, info["counts"]))):
        if not ok():
            raise InvalidArgumentError(f"the sample stats {sample_name} are not the sample of {hardness_name} (their "
                                       f"{what} differ); pass the file the hardness was estimated from")


def predict(hardness, measures=("mAP@1000",), *, sizes=(1e8,), mode: str | None = None,
            level: float = 0.95, bootstrap: int = 1000, seed: int = 0, in_pool: bool = False,
            sample_stats=None, ci_kind: str = "benchmark") -> list[dict]:
    """Predicted metric values with the interval of kind ``ci_kind`` from a hardness file: the
    interval ``rscale query`` reports for the same version, measure and N
    (:func:`rscale.core.interval.predicted_intervals`, from the replicates the file carries).

    ``sample_stats`` (optional) is checked to be the sample the hardness was estimated from.
    """
    from rscale.core.interval import check_ci_kind, predicted_intervals
    from rscale.core.prediction import resolve_mode
    from rscale.query.measures import Measure
    from rscale.store.hardness_file import read_hardness
    from rscale.store.sample_stats_file import read_sample_stats

    check_ci_kind(ci_kind)
    est, info = read_hardness(hardness)
    if sample_stats is not None:
        ss = read_sample_stats(sample_stats) if not hasattr(sample_stats, "top_scores") else sample_stats
        check_sample_of(ss, est, info=info, sample_name=sample_stats, hardness_name=hardness)
    s_max = float(est.n_sampled.max())
    parsed = [m if isinstance(m, Measure) else Measure.parse(m) for m in measures]
    cells = [(m, float(n)) for m in parsed for n in sizes]
    answers = predicted_intervals(est, [(m.law_metric, m.k, n) for m, n in cells], mode=mode, ci_kind=ci_kind,
                                  level=level, bootstrap=bootstrap, seed=seed,
                                  in_pool_counts=info["counts"] if in_pool else None, backtest=info["backtest"])
    from rscale.core.backtest import backtest_fields
    rows = []
    for (measure, n), (pq, lo, hi, bt) in zip(cells, answers):
        rows.append({"measure": str(measure), "N": n, "value": float(pq.mean()),
                     "ci_low": lo, "ci_high": hi, "level": level, "ci_kind": ci_kind, **backtest_fields(bt),
                     "replicates": 0 if est.replicates is None else int(est.replicates.shape[1]),
                     "estimator": est.method, "mode": resolve_mode(measure.law_metric, mode, est.method),
                     "extrapolation": n / s_max,
                     "backbone": info["meta"].get("backbone", ""), "queries": int(est.n_sampled.size)})
    return rows


from rscale.core.budget import BUDGET_SIZES  # noqa: E402  (api.BUDGET_SIZES: the budget check's sizes)


def _measure(measure: str) -> dict:
    from rscale.query.measures import Measure
    m = Measure.parse(measure)
    return {"metric": m.law_metric, "k": m.k, "label": str(m)}


def budget_check(hardness, *, measure: str = "mAP@1000", sizes=BUDGET_SIZES, seed: int = 0) -> dict:
    """The sufficient-budget diagnostic of a hardness file (:func:`rscale.core.budget.budget_check`:
    from its stored half-sample replicates, no estimator fit; what registration stores)."""
    from rscale.core.budget import budget_check as check
    from rscale.store.hardness_file import read_hardness
    est, _info = read_hardness(hardness)
    return check(est, sizes=sizes, seed=seed, **_measure(measure))
