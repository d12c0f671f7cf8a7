"""Real backbones in the DVC pipeline: one ``real_backbones:`` entry of params.yaml -> descriptor sets.

An entry names a local checkpoint, its preprocessing, the images (an ILIAS tree or query/positive
folders or lists with a qrels file, and a distractor folder or list), the query-side intervention
and the scoring settings, in four sub-mappings, so each DVC stage reads only the ones it needs
(dvc.yaml: ``real_gallery`` and ``real_queries`` run ``rscale extract-backbone``, then
``real_score`` / ``real_estimate`` / ``real_register``). Reranking is optional: an entry of the
same name under ``rerank_backbones:`` (its own mapping, because a DVC ``foreach`` cannot skip
items) adds ``real_rerank`` and ``real_register_reranked``::

    real_backbones:
      my_vit:                                  # the registered name (+ "-gp" / "-msa" under an intervention)
        backbone: {model: ckpt/my_vit, pooling: cls, preprocessing: auto, resolution: null, batch_size: 32}
        images: {layout: ilias, root: data/ilias, distractors: data/distractors}
        queries: {intervention: none, crop: false}
        score: {fraction: 0.05, k: 1000, seed: 0, candidates: 63}   # top 63 = K' 1000 x 0.05 x 1.25 kept by id
    rerank_backbones:                          # optional, keyed by real_backbones names
      my_vit: {detector: ckpt/owlv2}

``layout: folders``: ``root`` holds ``queries`` and ``positives`` (each an image folder or a
``.txt`` list of image paths) and ``qrels.csv`` or ``qrels.parquet`` (query_id, positive_id; ids
are the image paths relative to their folder, without suffix, or as written in the list).
Paths are relative to the params file's folder. The gallery (positives, distractors, qrels) and
the queries are written by separate stages, so an intervention ablation re-extracts only the
queries. ``score.candidates`` R (default 0): each query's top R sampled distractors kept by id
as ``real_score`` scores (``rscale score-backbone``). ``rerank_backbones.<name>``: the OWLv2
checkpoint folder, the region cache (default ``out/region_cache/<name>``) and the reranker's settings
(``rscale.api.rerank``'s keys, each overriding params.yaml's ``rerank:`` section, which overrides
the defaults); ``real_rerank`` reranks those lists and the positives of real_score's sample
stats and writes ``out/sample_stats/<name>.reranked.parquet`` (schema version 2), which
``real_register_reranked`` registers as the entry's next version (with its reranked input).
The converted ImageNet MobileNetV2 is a checkpoint folder like any other
(``examples/real_backbone_inputs.py`` writes it and a small photo set; the README's example).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rscale.errors import FormatError, InvalidArgumentError

SECTION = "real_backbones"
RERANK_SECTION = "rerank_backbones"
PARTS = ("gallery", "queries")
LAYOUTS = ("ilias", "folders")
INTERVENTIONS = ("none", "gp", "msa")
_GROUPS = {"backbone": ("model", "pooling", "preprocessing", "resolution", "batch_size"),
           "images": ("layout", "root", "distractors"),
           "queries": ("intervention", "crop"),
           "score": ("fraction", "k", "seed", "candidates")}
_REQUIRED = {"backbone": ("model",), "images": ("root", "distractors"), "queries": (), "score": ("fraction", "k", "seed")}
_RERANK_KEYS = ("detector", "cache", "first_stage_weight", "max_boxes", "nms_iou", "min_objectness",
                "min_side", "resolution", "batch_size", "shard_size")


@dataclass(frozen=True)
class RealBackbone:
    """One checked ``real_backbones`` entry; paths resolved against the params file's folder."""
    name: str
    model: Path
    pooling: str
    preprocessing: str
    resolution: int | None
    batch_size: int
    layout: str
    root: Path
    distractors: Path
    intervention: str
    crop: bool
    fraction: float
    k: int
    seed: int
    candidates: int = 0             # score.candidates R: each query's top R sampled distractors kept by id

    @property
    def registered_name(self) -> str:
        """The backbone name the registry gets: the entry's, plus ``-<intervention>`` when the queries
        carry one (the name :func:`rscale.api.scoring.score` records from the descriptor sets)."""
        return self.name if self.intervention == "none" else f"{self.name}-{self.intervention}"


def _where(key: str) -> str:
    return f"{SECTION}.{key}"


def load_real_backbone(config, name: str) -> RealBackbone:
    """The ``real_backbones.<name>`` entry of a params file, checked before anything is written."""
    from rscale.api.config import load_config
    from rscale.api.registry import check_name
    from rscale.producers.extract import POOLINGS, PREPROCESSINGS

    data = load_config(config)
    section = data.get(SECTION) or {}
    if not isinstance(section, dict):
        raise FormatError(f"'{SECTION}' must be a mapping of backbone name -> entry", path=str(config))
    if name not in section:
        known = ", ".join(sorted(section)) or "none"
        raise InvalidArgumentError(f"no entry '{name}' under {SECTION}: in {config} (entries: {known}); add one "
                                   "(see the commented example in params.yaml)")
    check_name("backbone", name)
    entry = section[name]
    if not isinstance(entry, dict):
        raise FormatError(f"{_where(name)} must be a mapping with {', '.join(_GROUPS)}", path=str(config))
    if "rerank" in entry:
        raise FormatError(f"{_where(name)}.rerank: the rerank group is an entry of its own, {RERANK_SECTION}.{name} "
                          "(the same keys), so that entries without one skip the rerank stages", path=str(config))
    bad = sorted(set(entry) - set(_GROUPS))
    if bad:
        raise FormatError(f"{_where(name)}: unknown key(s) {bad} (known: {', '.join(_GROUPS)})", path=str(config))
    groups = {}
    for group, keys in _GROUPS.items():
        value = entry.get(group) or {}
        if not isinstance(value, dict):
            raise FormatError(f"{_where(name)}.{group} must be a mapping ({', '.join(keys)})", path=str(config))
        bad = sorted(set(value) - set(keys))
        if bad:
            raise FormatError(f"{_where(name)}.{group}: unknown key(s) {bad} (known: {', '.join(keys)})",
                              path=str(config))
        missing = [k for k in _REQUIRED[group] if value.get(k) is None]
        if missing:
            raise FormatError(f"{_where(name)}.{group}: give {', '.join(missing)}", path=str(config))
        groups[group] = value
    b, im, q, s = groups["backbone"], groups["images"], groups["queries"], groups["score"]
    base = Path(config).parent

    def path(value) -> Path:
        p = Path(str(value))
        return p if p.is_absolute() else base / p

    def choice(group, key, value, options):
        value = str(value)
        if value not in options:
            raise FormatError(f"{_where(name)}.{group}.{key} must be one of {', '.join(options)}, got {value!r}",
                              path=str(config))
        return value

    pooling = choice("backbone", "pooling", b.get("pooling", "cls"), POOLINGS)
    preprocessing = choice("backbone", "preprocessing", b.get("preprocessing", "auto"), PREPROCESSINGS)
    layout = choice("images", "layout", im.get("layout", "ilias"), LAYOUTS)
    intervention = choice("queries", "intervention", q.get("intervention", "none"), INTERVENTIONS)
    crop = q.get("crop", False)
    if not isinstance(crop, bool):
        raise FormatError(f"{_where(name)}.queries.crop must be true or false, got {crop!r}", path=str(config))

    def whole(group, key, value, low):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise FormatError(f"{_where(name)}.{group}.{key} must be a whole number >= {low}, got {value!r}",
                              path=str(config))
        return value

    resolution = b.get("resolution")
    resolution = None if resolution is None else whole("backbone", "resolution", resolution, 1)
    fraction = s["fraction"]
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise FormatError(f"{_where(name)}.score.fraction must lie in (0, 1] (the share of the distractors "
                          f"scored), got {fraction!r}", path=str(config))
    model = path(b["model"])
    if not (model / "config.json").is_file():
        from rscale.api.o2i import BUILTIN_BACKBONES
        hint = (f" ({b['model']} is a builtin name: give a checkpoint folder, e.g. out/examples/backbones/"
                f"{b['model']} written by examples/real_backbone_inputs.py)" if b["model"] in BUILTIN_BACKBONES else "")
        raise FormatError(f"{_where(name)}.backbone.model: no transformers checkpoint (config.json) at {model}{hint}",
                          path=str(config))
    if intervention == "msa":
        import json

        from rscale.api.o2i import CLS_FAMILY
        model_type = str(json.loads((model / "config.json").read_text()).get("model_type", ""))
        if pooling != "cls" or model_type not in CLS_FAMILY:
            raise FormatError(f"{_where(name)}.queries.intervention msa masks the CLS token's attention: it needs a "
                              f"ViT-family backbone ({', '.join(CLS_FAMILY)}) with pooling cls, got {model_type} "
                              f"with pooling {pooling}", path=str(config))
    return RealBackbone(name, model, pooling, preprocessing, resolution,
                        whole("backbone", "batch_size", b.get("batch_size", 32), 1), layout, path(im["root"]),
                        path(im["distractors"]), intervention, crop, float(fraction), whole("score", "k", s["k"], 1),
                        whole("score", "seed", s["seed"], 0), _candidates(name, s, config))


def _candidates(name: str, s: dict, config) -> int:
    r = s.get("candidates", 0)
    k = s["k"]
    if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r <= (k if isinstance(k, int) else r):
        raise FormatError(f"{_where(name)}.score.candidates must be a whole number in [0, score.k={k}] (each "
                          f"query's top sampled distractors kept by id for the reranker; 0: none), got {r!r}",
                          path=str(config))
    return r


def load_rerank_group(config, name: str) -> tuple[RealBackbone, dict]:
    """(the ``real_backbones.<name>`` entry, its ``rerank_backbones.<name>`` group): candidates R
    (the entry's ``score.candidates``, which must be >= 1), paths resolved (the cache defaults to
    out/region_cache/<name> next to the params file). Refused in one line: no such group, a group
    naming no real_backbones entry, unknown or missing keys, ``candidates`` in the group (moved)."""
    from rscale.api.config import load_config

    section = load_config(config).get(RERANK_SECTION) or {}
    where = f"{RERANK_SECTION}.{name}"
    if not isinstance(section, dict):
        raise FormatError(f"'{RERANK_SECTION}' must be a mapping of real_backbones name -> rerank settings",
                          path=str(config))
    if name not in section:
        raise InvalidArgumentError(f"no entry '{name}' under {RERANK_SECTION}: in {config} (entries: "
                                   f"{', '.join(sorted(section)) or 'none'}); add one to rerank this backbone")
    rr = section[name]
    if not isinstance(rr, dict):
        raise FormatError(f"{where} must be a mapping ({', '.join(_RERANK_KEYS)})", path=str(config))
    if "candidates" in rr:
        raise FormatError(f"{where}.candidates moved to {SECTION}.{name}.score.candidates: real_score keeps the "
                          "candidate lists as it scores, so the sample is scored once", path=str(config))
    bad = sorted(set(rr) - set(_RERANK_KEYS))
    if bad:
        raise FormatError(f"{where}: unknown key(s) {bad} (known: {', '.join(_RERANK_KEYS)})", path=str(config))
    if rr.get("detector") is None:
        raise FormatError(f"{where}: give detector", path=str(config))
    try:
        entry = load_real_backbone(config, name)
    except InvalidArgumentError:
        raise FormatError(f"{where} names no {SECTION} entry: add {SECTION}.{name} or remove {where}",
                          path=str(config)) from None
    if entry.candidates < 1:
        raise FormatError(f"{where} reranks each query's top {SECTION}.{name}.score.candidates sampled distractors: "
                          f"set it to a whole number in [1, score.k={entry.k}] (about K' x fraction, with a margin)",
                          path=str(config))
    base = Path(config).parent

    def path(value) -> Path:
        p = Path(str(value))
        return p if p.is_absolute() else base / p

    return entry, {**rr, "candidates": entry.candidates, "detector": path(rr["detector"]),
                   "cache": path(rr.get("cache") or f"out/region_cache/{name}")}


def rerank_group_settings(config, rr: dict) -> dict:
    """The reranker's settings for one ``rerank_backbones`` group ``rr``: the defaults, then the
    params file's ``rerank:`` section (when it has one), then the group's own keys."""
    from rscale import api      # not `from rscale.api.rerank import`: that binds api.rerank to the module
    from rscale.api.config import load_config

    section = config if "rerank" in load_config(config) else None
    return api.rerank_settings(section, **{k: rr.get(k) for k in _RERANK_KEYS if k not in ("detector", "cache")})


def _sides(entry: RealBackbone):
    """(queries, positives, qrels) of the entry's images: item triples and (query_id, positive_id) pairs."""
    from rscale.producers.extract import ilias_layout, image_items

    if not entry.root.is_dir():
        raise FormatError(f"images.root of real_backbones.{entry.name} is not a folder", path=str(entry.root),
                          hint="an ILIAS tree (<instance>/query, <instance>/pos) or, with layout 'folders', "
                               "queries, positives and qrels.csv")
    if entry.layout == "ilias":
        return ilias_layout(entry.root, crop_queries=entry.crop)
    from rscale.api.scoring import read_qrels

    def side(stem):
        for candidate in (entry.root / stem, entry.root / f"{stem}.txt"):
            if candidate.exists():
                return image_items(candidate)
        raise FormatError(f"no {stem}/ folder or {stem}.txt list", path=str(entry.root),
                          hint="layout 'folders' reads <root>/queries, <root>/positives and <root>/qrels.csv")
    qrels_file = next((p for p in (entry.root / "qrels.parquet", entry.root / "qrels.csv") if p.exists()), None)
    if qrels_file is None:
        raise FormatError("no qrels.parquet or qrels.csv", path=str(entry.root),
                          hint="columns query_id, positive_id: which positives belong to which query")
    rel = read_qrels(qrels_file)
    return side("queries"), side("positives"), [(q, p) for q, ps in rel.items() for p in ps]


def extract_real_backbone(config, name: str, *, part: str, out, progress: bool = True) -> dict:
    """Extract one part of a ``real_backbones`` entry into ``out``.

    ``part="gallery"``: ``out/positives``, ``out/distractors`` (descriptor sets) and
    ``out/qrels.parquet``; ``part="queries"``: the query descriptor set ``out`` itself, with the
    entry's intervention. The sets record the entry's name as their backbone and the distractor
    images' path as their source, which scoring and registration carry on.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rscale.producers import extract as ex
    from rscale.producers.interventions import GrayPad, MaskedScales

    if part not in PARTS:
        raise InvalidArgumentError(f"part must be one of {', '.join(PARTS)}, got {part!r}")
    entry = load_real_backbone(config, name)
    out = Path(out)
    preprocessing = entry.preprocessing
    if preprocessing == "auto" and entry.intervention == "msa":
        preprocessing = "resize"          # MSA's patch mask needs the whole image (as `rscale extract`)
    from rscale.api.registry import nameable_form
    benchmark = nameable_form("benchmark", entry.root.resolve().name)   # the images' root names the benchmark
    meta = {"backbone": entry.name, "source": str(entry.distractors), **({"benchmark": benchmark} if benchmark else {})}
    kw = dict(pooling=entry.pooling, resolution=entry.resolution, batch_size=entry.batch_size, progress=progress,
              preprocessing=preprocessing, meta=meta)
    queries, positives, qrels = _sides(entry)
    if part == "queries":
        make = {"none": None, "gp": GrayPad, "msa": MaskedScales}[entry.intervention]
        ds = ex.extract(queries, entry.model, out, role="queries", intervention=make() if make else None, **kw)
        return {"queries": ds.count, "intervention": entry.intervention, "written": str(out)}
    known_q = {q for q, *_ in queries}
    known_p = {p for p, *_ in positives}
    stray = next(((q, p) for q, p in qrels if q not in known_q or p not in known_p), None)
    if stray is not None:
        side, value = ("query_id", stray[0]) if stray[0] not in known_q else ("positive_id", stray[1])
        raise FormatError(f"qrels {side} {value!r} names no image of the entry", path=str(entry.root),
                          hint="ids are image paths relative to their folder, without suffix")
    ps = ex.extract(positives, entry.model, out / "positives", role="positives", **kw)
    ds = ex.extract(ex.image_items(entry.distractors), entry.model, out / "distractors", role="distractors", **kw)
    pq.write_table(pa.table({"query_id": [a for a, _ in qrels], "positive_id": [b for _, b in qrels]}),
                   out / "qrels.parquet")
    return {"positives": ps.count, "distractors": ds.count, "qrels": len(qrels), "written": str(out)}


def score_real_backbone(config, name: str, *, out, progress: bool = True) -> dict:
    """Score one ``real_backbones`` entry's descriptor sets into sample stats ``out`` (the stage
    real_score): its fraction, seed and k, the halves recorded by distractor id, and each query's
    top ``score.candidates`` sampled distractors kept by id in ``<stem>.candidates.parquet``,
    written for every entry (no rows at 0) so that the stage has the same outputs for all; a
    reranked entry's real_rerank reads those lists instead of scoring the sample again."""
    from rscale import api
    from rscale.store.candidate_lists import candidates_path, write_candidates

    entry = load_real_backbone(config, name)
    gallery = Path(config).parent / "out" / "real" / name / "gallery"
    queries = Path(config).parent / "out" / "real" / name / "queries"
    for what, p in (("gallery descriptor sets", gallery), ("query set", queries)):
        if not p.exists():
            raise FormatError(f"no {what} of real_backbones.{name} yet", path=str(p),
                              hint="run the stages before real_score (dvc repro real_score@" + name + ")")
    summary = api.score(queries, gallery / "positives", qrels=gallery / "qrels.parquet",
                        distractors_dir=gallery / "distractors", out=out, fraction=entry.fraction, seed=entry.seed,
                        k=entry.k, candidates=entry.candidates, halves=True, progress=progress)
    if not entry.candidates:                      # the stage's second output, empty: no lists asked for
        import numpy as np
        write_candidates(candidates_path(out), np.zeros(0, str), np.zeros((0, 0), str), np.zeros((0, 0)),
                         sample_stats=Path(out).name)
    return summary


def rerank_real_backbone(config, name: str, *, out, progress: bool = True) -> dict:
    """Rerank one ``real_backbones`` entry with its ``rerank_backbones`` group into ``out``: sample
    stats schema 2 with the rerank scores of each query's top candidates and of its positives (the
    stage real_rerank), from real_score's sample stats and the candidate lists it kept
    (``out/sample_stats/<name>.parquet`` and ``.candidates.parquet``: the sample is scored once)."""
    from dataclasses import fields

    from rscale.producers.extract import image_items
    from rscale.producers.rerank import ProposalParams
    from rscale.producers.rerank_sample import rerank_sample
    from rscale.store.candidate_lists import candidates_path

    proposal_keys = tuple(f.name for f in fields(ProposalParams))

    entry, rr = load_rerank_group(config, name)
    base = Path(config).parent
    queries = base / "out" / "real" / name / "queries"
    sample = base / "out" / "sample_stats" / f"{name}.parquet"
    for what, p in (("query set", queries), ("sample stats", sample), ("candidate lists", candidates_path(sample))):
        if not p.exists():
            raise FormatError(f"no {what} of real_backbones.{name} yet", path=str(p),
                              hint="run the stages before real_rerank (dvc repro real_rerank@" + name + ")")
    s = rerank_group_settings(config, rr)
    _, positives, _ = _sides(entry)
    return rerank_sample(sample, queries, [(i, p) for i, p, *_ in image_items(entry.distractors)],
                         [(i, p) for i, p, *_ in positives], rr["detector"], entry.model, rr["cache"], out,
                         first_stage_weight=float(s["first_stage_weight"]),
                         params=ProposalParams(**{k: s[k] for k in proposal_keys}), pooling=entry.pooling,
                         resolution=entry.resolution, batch_size=s["batch_size"], shard_size=s["shard_size"],
                         progress=progress)
