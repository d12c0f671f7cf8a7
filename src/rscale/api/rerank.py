"""The OWLv2 crop reranker end to end, and reranked metrics predicted at any gallery size.

- :func:`rerank`: each query's top K' first-stage candidates rescored by max region cosine
  (:mod:`rscale.producers.rerank`), written as an artifact folder (reranked lists, per-query
  metrics, a manifest with input digests, the MLflow run in a sidecar). docs/rerank.md.
- :func:`predict_reranked`: the reranked metric at gallery size N from a distractor sample
  whose top candidates were reranked too (:mod:`rscale.core.rerank_law`). docs/rerank.md.
"""

from __future__ import annotations

from pathlib import Path

from rscale.errors import InvalidArgumentError

PROPOSAL_KEYS = ("max_boxes", "nms_iou", "min_objectness", "min_side", "resolution")
CONFIG_KEYS = PROPOSAL_KEYS + ("k", "first_stage_weight", "batch_size", "shard_size")


def rerank_settings(config=None, **overrides) -> dict:
    """The reranker's settings: defaults, then the ``rerank:`` section of ``config`` (a
    params.yaml-style file), then the ``overrides`` that are not None. Unknown keys are refused."""
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
        if not isinstance(settings[name], int) or settings[name] < 1:
            raise InvalidArgumentError(f"rerank {name} must be a whole number >= 1, got {settings[name]!r}")
    if not isinstance(settings["max_boxes"], int) or settings["max_boxes"] < 0:
        raise InvalidArgumentError(f"rerank max_boxes must be a whole number >= 0, got {settings['max_boxes']!r}")
    if not 0.0 <= float(settings["nms_iou"]) <= 1.0:
        raise InvalidArgumentError(f"rerank nms_iou must lie in [0, 1], got {settings['nms_iou']!r}")
    if not 0.0 <= float(settings["first_stage_weight"]) <= 1.0:
        raise InvalidArgumentError(f"rerank first_stage_weight must lie in [0, 1], got {settings['first_stage_weight']!r}")
    return settings


def rerank(queries, candidates, *, gallery, detector, backbone, cache, out, qrels=None, config=None,
           k: int | None = None, first_stage_weight: float | None = None, max_boxes: int | None = None,
           device: str | None = None, progress: bool = True, lineage: bool = True) -> dict:
    """Rerank each query's top ``k`` first-stage candidates (Parquet: query_id, gallery_id, score,
    rank) of ``queries`` (a query descriptor set) by max region cosine; write the folder ``out``
    (reranked.parquet, metrics.parquet with ``qrels``, manifest.json). ``gallery``: the image
    folder the first stage scored; ``detector`` / ``backbone``: local checkpoint folders (OWLv2;
    the backbone that extracted the queries); ``cache``: the region cache folder (created if
    absent, reused across runs). Settings: defaults < ``config``'s ``rerank:`` section < arguments.
    Returns the summary (mean R@1 and mAP@K' before and after, images computed now)."""
    from rscale.producers import rerank as producer

    s = rerank_settings(config, k=k, first_stage_weight=first_stage_weight, max_boxes=max_boxes)
    for name, value in (("queries", queries), ("candidates", candidates), ("gallery", gallery),
                        ("detector", detector), ("backbone", backbone)):
        if not Path(value).exists():
            raise InvalidArgumentError(f"{name} {value} does not exist")
    if qrels is not None and not Path(qrels).is_file():
        raise InvalidArgumentError(f"qrels {qrels} is not a file")
    out, cache = Path(out), Path(cache)
    if out.exists() and not out.is_dir():
        raise InvalidArgumentError(f"--out {out} is a file; name a folder to write into")
    if cache.exists() and not cache.is_dir():
        raise InvalidArgumentError(f"--cache {cache} is a file; name the region cache folder")
    params = producer.ProposalParams(**{key: s[key] for key in PROPOSAL_KEYS})
    return producer.rerank(queries, candidates, gallery, detector, backbone, cache, out, k=s["k"], qrels=qrels,
                           first_stage_weight=float(s["first_stage_weight"]), params=params,
                           batch_size=s["batch_size"], shard_size=s["shard_size"], device=device,
                           progress=progress, lineage=lineage)
