"""The OWLv2 crop reranker end to end, and reranked metrics predicted at any gallery size.

- :func:`rerank`: each query's top K' first-stage candidates rescored by max region cosine
  (:mod:`rscale.producers.rerank`), written as an artifact folder (reranked lists, per-query
  metrics, a manifest with input digests, the MLflow run in a sidecar). docs/rerank.md.
- :func:`rerank_sample`: a distractor sample's top candidates (``rscale score --candidates``) and
  the positives rescored the same way, into sample stats schema 2 (:mod:`rscale.producers.rerank_sample`).
- :func:`predict_reranked`: the reranked metric at gallery size N from a distractor sample
  whose top candidates were reranked too (:mod:`rscale.core.rerank_law`). docs/rerank.md.
"""

from __future__ import annotations

from pathlib import Path

from rscale.errors import InvalidArgumentError

PROPOSAL_KEYS = ("max_boxes", "nms_iou", "min_objectness", "min_side", "resolution")
CONFIG_KEYS = PROPOSAL_KEYS + ("k", "first_stage_weight", "batch_size", "shard_size")
FLOAT_KEYS = ("nms_iou", "min_objectness", "min_side", "first_stage_weight")


def rerank_settings(config=None, **overrides) -> dict:
    """The reranker's settings: defaults, then the ``rerank:`` section of ``config`` (a
    params.yaml-style file; refused when it has none), then the ``overrides`` that are not None.
    Unknown keys and out-of-range values are refused; real-valued settings come back as floats."""
    from rscale.api.config import load_config
    from rscale.producers.rerank import ProposalParams

    settings = {"k": 1000, "first_stage_weight": 0.0, "batch_size": 16, "shard_size": 1024,
                **{k: getattr(ProposalParams(), k) for k in PROPOSAL_KEYS}}
    if config is not None:
        section = load_config(config, "rerank")
        unknown = sorted(set(section) - set(CONFIG_KEYS))
        if unknown:
            raise InvalidArgumentError(f"{config}: unknown key 'rerank.{unknown[0]}' (known: {', '.join(CONFIG_KEYS)})")
        settings.update(section)
    settings.update({k: v for k, v in overrides.items() if v is not None})
    for name in ("k", "batch_size", "shard_size"):
        if isinstance(settings[name], bool) or not isinstance(settings[name], int) or settings[name] < 1:
            raise InvalidArgumentError(f"rerank {name} must be a whole number >= 1, got {settings[name]!r}")
    if isinstance(settings["max_boxes"], bool) or not isinstance(settings["max_boxes"], int) or settings["max_boxes"] < 0:
        raise InvalidArgumentError(f"rerank max_boxes must be a whole number >= 0, got {settings['max_boxes']!r}")
    res = settings["resolution"]
    if res is not None and (isinstance(res, bool) or not isinstance(res, int) or res < 1):
        raise InvalidArgumentError(f"rerank resolution must be a whole number >= 1 or null (the detector's own), "
                                   f"got {res!r}")
    # real numbers, as floats: `min_side: 8` in a params file and the default 8.0 must give the same
    # region cache identity (its digest is over the JSON of the settings, where 8 and 8.0 differ)
    for name in FLOAT_KEYS:
        v = settings[name]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise InvalidArgumentError(f"rerank {name} must be a number, got {v!r}")
        settings[name] = float(v)
    for name in ("nms_iou", "first_stage_weight"):
        if not 0.0 <= settings[name] <= 1.0:
            raise InvalidArgumentError(f"rerank {name} must lie in [0, 1], got {settings[name]!r}")
    return settings


def rerank(queries, candidates, *, gallery, detector, backbone, cache, out, qrels=None, config=None,
           k: int | None = None, first_stage_weight: float | None = None, max_boxes: int | None = None,
           device: str | None = None, progress: bool = True, lineage: bool = True, registry=None,
           name: str | None = None, benchmark: str | None = None) -> dict:
    """Rerank each query's top ``k`` first-stage candidates (Parquet: query_id, gallery_id, score,
    rank) of ``queries`` (a query descriptor set) by max region cosine; write the folder ``out``
    (reranked.parquet, metrics.parquet with ``qrels``, manifest.json). ``gallery``: the image
    folder the first stage scored; ``detector`` / ``backbone``: local checkpoint folders (OWLv2;
    the backbone that extracted the queries); ``cache``: the region cache folder (created if
    absent, reused across runs). Settings: defaults < ``config``'s ``rerank:`` section < arguments.
    With ``registry`` (a folder) the output is also registered as ``rerank:NAME@vN``
    (:mod:`rscale.api.rerank_registry`; ``name`` default the query set's backbone, ``benchmark``
    default ``unknown``), both names checked before anything runs.
    Returns the summary (mean R@1 and mAP@K' before and after, images computed now; with a
    registry, ``registered``: ref, created, content, lineage)."""
    from rscale.producers import rerank as producer

    s = rerank_settings(config, k=k, first_stage_weight=first_stage_weight, max_boxes=max_boxes)
    for what, value in (("queries", queries), ("candidates", candidates), ("gallery", gallery),
                        ("detector", detector), ("backbone", backbone)):
        if not Path(value).exists():
            raise InvalidArgumentError(f"{what} {value} does not exist")
    if qrels is not None and not Path(qrels).is_file():
        raise InvalidArgumentError(f"qrels {qrels} is not a file")
    out, cache = Path(out), Path(cache)
    if out.exists() and not out.is_dir():
        raise InvalidArgumentError(f"--out {out} is a file; name a folder to write into")
    if cache.exists() and not cache.is_dir():
        raise InvalidArgumentError(f"--cache {cache} is a file; name the region cache folder")
    if registry is not None:                # names refused before the run, not after it
        from rscale.api.registry import check_name
        from rscale.store.descriptor_set import DescriptorSet
        check_name("benchmark", benchmark or "unknown", flag="--benchmark")
        recorded = DescriptorSet.open(queries).manifest.get("backbone")
        if name is None and not recorded:
            raise InvalidArgumentError(f"the query set {queries} records no backbone name: give --name NAME")
        check_name("backbone", str(name or recorded), flag="--name")
    elif name is not None or benchmark is not None:
        raise InvalidArgumentError("--name and --benchmark name the registered artifact: give --registry DIR too")
    params = producer.ProposalParams(**{key: s[key] for key in PROPOSAL_KEYS})
    summary = producer.rerank(queries, candidates, gallery, detector, backbone, cache, out, k=s["k"], qrels=qrels,
                              first_stage_weight=float(s["first_stage_weight"]), params=params,
                              batch_size=s["batch_size"], shard_size=s["shard_size"], device=device,
                              progress=progress, lineage=lineage)
    if registry is not None:
        from rscale.api.rerank_registry import register_rerank
        summary["registered"] = register_rerank(out, registry=registry, name=name, benchmark=benchmark)
    return summary


def rerank_sample(sample_stats, *, queries, distractors, positives, detector, backbone, cache, out, candidates=None,
                  config=None, first_stage_weight: float | None = None, max_boxes: int | None = None,
                  device: str | None = None, progress: bool = True, lineage: bool = True) -> dict:
    """Sample stats (``rscale score --candidates R``) -> sample stats schema 2 (``out``) with the
    rerank scores of each query's top R sampled candidates and of its positives, the input of
    :func:`predict_reranked`. ``candidates``: the lists (default ``<stem>.candidates.parquet``
    next to ``sample_stats``); ``distractors`` / ``positives``: the image folders (or list files)
    the first stage extracted; detector, backbone, cache and settings as :func:`rerank` (its
    ``k`` does not apply: every listed candidate is reranked)."""
    from rscale.producers import rerank as producer
    from rscale.producers.extract import image_items
    from rscale.producers.rerank_sample import rerank_sample as run

    s = rerank_settings(config, first_stage_weight=first_stage_weight, max_boxes=max_boxes)
    for name, value in (("sample stats", sample_stats), ("queries", queries), ("distractors", distractors),
                        ("positives", positives), ("detector", detector), ("backbone", backbone)):
        if not Path(value).exists():
            raise InvalidArgumentError(f"{name} {value} does not exist")
    out, cache = Path(out), Path(cache)
    if out.is_dir():
        raise InvalidArgumentError(f"--out {out} is a folder; name the sample-stats file to write")
    if cache.exists() and not cache.is_dir():
        raise InvalidArgumentError(f"--cache {cache} is a file; name the region cache folder")
    items = [[(i, p) for i, p, *_ in image_items(src)] for src in (distractors, positives)]
    params = producer.ProposalParams(**{key: s[key] for key in PROPOSAL_KEYS})
    return run(sample_stats, queries, items[0], items[1], detector, backbone, cache, out, candidates=candidates,
               first_stage_weight=float(s["first_stage_weight"]), params=params, batch_size=s["batch_size"],
               shard_size=s["shard_size"], device=device, progress=progress, lineage=lineage)


def reranked_hardness(ss, est, *, tail: bool = True):
    """The reranked law's input from sample stats with rerank scores and a first-stage hardness
    estimate of the same positives: x from ``est``, the joint tail from the sample's reranked top
    (``tail``: with a GPD tail for each slice's rerank scores, else plain counts)."""
    from rscale.core.rerank_law import RerankedHardness, joint_from_top, joint_from_top_smoothed
    _require_rerank_scores(ss)
    make = joint_from_top_smoothed if tail else joint_from_top
    grid, joint = make(ss.top_rerank, ss.n_sampled, ss.pos_rerank, ss.pos_offsets)
    return RerankedHardness.build(est.x, ss.pos_rerank, ss.pos_offsets, grid, joint)


def _require_rerank_scores(ss) -> None:
    from rscale.errors import FormatError
    if not ss.has_rerank:
        raise FormatError("these sample stats hold no rerank scores (columns top_rerank_scores, "
                          "positive_rerank_scores, schema version 2)",
                          hint="rerank each query's top sampled candidates and its positives, and store their scores "
                               "(docs/rerank.md, 'Reranked metrics at any N')")


def predict_reranked(sample_stats, *, n, depth: int = 1000, measures=None, method: str = "evt-eb", mode: str | None = None,
                     ci_kind: str = "benchmark", replicates: int = 16, bootstrap: int = 1000, seed: int = 0,
                     level: float = 0.95) -> list[dict]:
    """The metric after reranking the first-stage top ``depth`` (K') at each gallery size in ``n``,
    predicted from sample stats that carry rerank scores (schema version 2), with the interval
    ``rscale query "... reranked@K'"`` reports: the same function
    (:func:`rscale.core.rerank_replicates.reranked_intervals`) on the same input, so a version
    registered from these sample stats (``rscale estimate`` with its defaults, then ``register``)
    answers the same value, bounds and ``ci_kind``.

    First-stage hardness comes from ``method`` (default parameters) with ``replicates`` half-sample
    hardness replicates (the seeds ``rscale estimate`` uses; 0: none, then the benchmark bounds are
    NaN), the joint tails from the sample's reranked top candidates and from the same halves'
    (:func:`rscale.core.rerank_replicates.reranked_input`); the law is :mod:`rscale.core.rerank_law`.
    ``mode``: None follows the first stage's per-measure default (plug-in for mAP and MRR@k,
    expected for R@k and Recall@k), as the query does. Per (measure, N) a row: the reranked value,
    its interval of kind ``ci_kind`` (``bootstrap`` query resamples for ``population``), and the
    first-stage prediction of the same measure for comparison. ``measures`` default to mAP@K' and R@1."""
    from rscale.core import prediction
    from rscale.core.estimators.methods import estimate
    from rscale.core.interval import check_ci_kind
    from rscale.core.replicates import SEED, hardness_replicates
    from rscale.core.rerank_replicates import reranked_input, reranked_intervals, supported_depth
    from rscale.errors import RscaleError
    from rscale.query.measures import Measure
    from rscale.store.sample_stats_file import read_sample_stats

    ss = read_sample_stats(sample_stats) if not hasattr(sample_stats, "top_scores") else sample_stats
    check_ci_kind(ci_kind)
    if not isinstance(bootstrap, int) or bootstrap < 0:
        raise InvalidArgumentError(f"bootstrap must be a whole number >= 0, got {bootstrap!r}")
    if not isinstance(replicates, int) or replicates != 0 and (replicates < 4 or replicates % 2):
        raise InvalidArgumentError(f"replicates must be 0 or an even number >= 4 (e.g. 16), got {replicates!r}")
    measures = measures or (f"mAP@{depth}", "R@1")
    parsed = [Measure.parse(m) if isinstance(m, str) else m for m in measures]
    sizes = [float(v) for v in (n if isinstance(n, (list, tuple)) else [n])]
    for measure in parsed:
        if measure.law_metric == "RR" and measure.k is None:
            raise InvalidArgumentError(f"{measure}: a reranked metric needs a cut-off within the top K'={depth}; "
                                       f"write MRR@{depth}")
    _require_rerank_scores(ss)
    est = estimate(ss, method)
    reps, splits = None, 0
    if replicates:
        try:
            reps = hardness_replicates(ss, method=method, params=est.params, splits=replicates // 2)
            inp = reranked_input(ss, splits=replicates // 2, seed=SEED)
            splits = replicates // 2
        except RscaleError:           # a sample too small to halve: no replicates (benchmark bounds NaN)
            reps = None
    if not splits:
        inp = reranked_input(ss, splits=0, seed=SEED)
    cells = [(m.law_metric, m.k, size, prediction.resolve_mode(m.law_metric, mode, est.method)) for m in parsed for size in sizes]
    for size in sizes:
        most = supported_depth(inp, size)
        if size >= depth and most < depth:
            reach = min(float(s.reach.min()) for s in inp.sets)
            raise InvalidArgumentError(
                f"K'={depth} at N={size:g} needs the rerank scores of the sample's top {depth / size:.3g} of the "
                f"first-stage law; the stored ones reach {reach:.3g}" + (" (half-samples included)" if splits else "")
                + f": rerank more of the sample's top candidates, or ask for N >= {depth / reach:.3g}"
                + (" (or replicates=0: no benchmark interval)" if splits else ""))
    answers = reranked_intervals(inp, est.x, reps, cells, depth=depth, ci_kind=ci_kind, level=level,
                                 bootstrap=bootstrap, seed=seed)
    return [{"measure": str(m), "n": size, "depth": depth, "value": float(pq.mean()), "ci_low": lo, "ci_high": hi,
             "ci_kind": ci_kind, "first_stage": prediction.predict(est, m.law_metric, size, m.k), "method": method,
             "mode": cell[3]}
            for (m, size), cell, (pq, lo, hi) in zip([(m, s) for m in parsed for s in sizes], cells, answers)]


def write_reranked_input_for(hardness, ss, *, out) -> tuple:
    """Write the reranked-law input of a version (:mod:`rscale.store.reranked_input_file`) from its
    hardness file and the sample stats it was estimated from, when they carry rerank scores:
    the sample's joint tails, and those of the half-samples the hardness replicates were made on
    (the splits and seed recorded in the hardness file), so no estimator is re-run. Returns
    (path, summary): the reranked top R, replicates, reach (the smallest share of the first-stage
    law any set covers: K' <= reach x N is supported) and the rerank run's lineage."""
    from rscale.core.rerank_replicates import reranked_input
    from rscale.store.hardness_file import read_hardness
    from rscale.store.hashing import sha256_file
    from rscale.store.reranked_input_file import write_reranked_input

    est, info = read_hardness(hardness)
    reps = info.get("replicates") or {}
    splits = int(reps.get("splits", 0)) if est.replicates is not None else 0
    if splits and 2 * splits != est.replicates.shape[1]:
        splits = 0                      # replicates made some other way: no pairing with half-samples
    seed = int(reps.get("seed", 0))
    inp = reranked_input(ss, splits=splits, seed=seed)
    lineage = {k: str(v) for k, v in sorted(ss.meta.items()) if k.startswith("rerank")}
    top = int(ss.top_rerank.shape[1])
    meta = {"hardness_sha256": sha256_file(hardness), "splits": splits, "seed": seed, "tail": True, "top": top,
            "lineage": lineage}
    path = write_reranked_input(inp, out, query_ids=ss.query_ids, pos_ids=ss.pos_ids, meta=meta)
    reach = min(float(s.reach.min()) for s in inp.sets)
    return path, {"top": top, "replicates": 2 * splits, "reach": float(f"{reach:.6g}"), "lineage": lineage}
