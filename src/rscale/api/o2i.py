"""The controlled O2I benchmark end to end: render -> extract -> evaluate -> analyse (`rscale o2i run`).

:func:`load_o2i_config` reads and checks the ``o2i:`` section of params.yaml before anything is
written; :func:`run_o2i` runs it:

1. render: the objects (the 16 real pybullet objects, then procedural meshes drawn by ``seed``)
   under the :class:`~rscale.producers.o2i.RenderProtocol` of ``o2i.render`` with ``o2i.renderer``
   (tinyrenderer, the default, or pyrender; cached, content-addressed);
2. extract, per backbone: the renders, the O2I-matched crops (decomposition), the fixed-pixel
   canvases, the object-box crops and the gray-padded (GP) queries; MSA for ViT-family backbones
   with a CLS token. Every image is resized whole to the network's input size (no centre crop:
   it would change every render's O2I and clip the nearest object, docs/o2i_backbone.md). Each
   descriptor set lives under ``<cache>/descriptors/<recipe digest>/`` (weights, pooling, input
   size, preprocessing, intervention, the images and boxes): a set that exists is read, never
   extracted again;
3. evaluate and analyse (rscale.core.o2i): cross-distance R@k / MRR, decomposition, canvas cosines,
   asymmetry with its paired t-test, interventions against the baseline (McNemar / paired t, Holm);
4. write, into the output folder (built next to it and renamed into place, so a failed run leaves
   the previous one): ``tables/<name>-<sha256 prefix>.parquet``, PNG plots, ``report.md``,
   ``manifest.json`` (every input and output digest, the code version) and ``timings.json``; the run is logged with
   :func:`rscale.producers.lineage.producer_run` (stage ``o2i``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rscale.errors import FormatError, InvalidArgumentError

DEFAULT_BACKBONE = "mobilenet_v2_imagenet"
BUILTIN_BACKBONES = (DEFAULT_BACKBONE,)
CLS_FAMILY = ("vit", "dinov2", "dinov3_vit", "clip", "clip_vision_model")   # MSA needs a CLS token
RECIPE_VERSION = 1
FORMAT = "rscale-o2i"
SCHEMA_VERSION = 1
CONDITIONS = ("baseline", "gp", "box_crop", "alpha_qe", "msa")
PREPROCESSING = "full-frame resize to {r}x{r} (bicubic), checkpoint mean/std; no centre crop"

_KEYS = ("objects", "seed", "cache", "renderer", "render", "backbones", "canvas", "interventions", "batch_size",
         "workers")
_BACKBONE_KEYS = ("name", "model", "pooling")
_CANVAS_KEYS = ("distance_index", "sizes", "object_size")
_INTERVENTION_KEYS = ("gp", "alpha_qe", "msa")


@dataclass(frozen=True)
class BackboneEntry:
    name: str
    model: str            # a builtin name or a local checkpoint folder
    pooling: str

    @property
    def builtin(self) -> bool:
        return self.model in BUILTIN_BACKBONES


@dataclass(frozen=True)
class O2IConfig:
    objects: int
    seed: int
    cache: Path
    protocol: object                      # RenderProtocol
    backbones: tuple
    canvas_distance: int = 0
    canvas_sizes: tuple = (256, 384, 512, 768, 1024, 1536)
    canvas_object_size: int = 256
    gp: dict = field(default_factory=lambda: {"views": 5, "span": 4.0})
    alpha_qe: dict = field(default_factory=lambda: {"n": 2, "alpha": 3.0})
    msa: dict = field(default_factory=lambda: {"scales": [1.0, 0.5, 0.25]})
    batch_size: int = 8        # CPU: small batches stay in cache (docs/benchmarks.md, O2I default run)
    workers: int = 1
    renderer: str = "tinyrenderer"         # rscale.producers.o2i.render.RENDERERS

    def to_dict(self) -> dict:
        return {"objects": self.objects, "seed": self.seed, "renderer": self.renderer,
                "render": self.protocol.to_dict(),
                "backbones": [{"name": b.name, "model": b.model, "pooling": b.pooling} for b in self.backbones],
                "canvas": {"distance_index": self.canvas_distance, "sizes": list(self.canvas_sizes),
                           "object_size": self.canvas_object_size},
                "interventions": {"gp": self.gp, "alpha_qe": self.alpha_qe, "msa": self.msa}}


def _unknown(section: str, given: dict, known) -> None:
    bad = sorted(set(given) - set(known))
    if bad:
        raise InvalidArgumentError(f"{section}: unknown key(s) {bad} (known: {', '.join(known)})")


def _int(section: str, value, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low or \
            (high is not None and value > high):
        rng = f">= {low}" if high is None else f"in {low}..{high}"
        raise InvalidArgumentError(f"{section} must be an integer {rng}, got {value!r}")
    return int(value)


def _backbone(entry, where: Path) -> BackboneEntry:
    from rscale.producers.extract import POOLINGS

    if isinstance(entry, str):
        entry = {"model": entry}
    if not isinstance(entry, dict):
        raise InvalidArgumentError(f"o2i.backbones: each entry is a builtin name ({', '.join(BUILTIN_BACKBONES)}) "
                                   f"or a mapping {{name, model, pooling}}, got {entry!r}")
    _unknown("o2i.backbones entry", entry, _BACKBONE_KEYS)
    model = str(entry.get("model", ""))
    if not model:
        raise InvalidArgumentError(f"o2i.backbones entry {entry}: give 'model' ({DEFAULT_BACKBONE} or a local "
                                   "transformers checkpoint folder)")
    pooling = str(entry.get("pooling", "pooled" if model in BUILTIN_BACKBONES else "cls"))
    if pooling not in POOLINGS:
        raise InvalidArgumentError(f"o2i.backbones '{model}': pooling must be one of {', '.join(POOLINGS)}, "
                                   f"got {pooling!r}")
    if model not in BUILTIN_BACKBONES:
        path = Path(model)
        if not path.is_absolute() and not path.exists():
            path = where / path
        if not path.exists():
            if "/" not in model and os.sep not in model:
                raise InvalidArgumentError(f"o2i.backbones: unknown backbone {model!r}: use {DEFAULT_BACKBONE} or "
                                           "the path of a local transformers checkpoint folder")
            raise InvalidArgumentError(f"o2i.backbones: checkpoint folder {model} not found; give the path of a "
                                       "local transformers checkpoint (config.json + weights)")
        if not (path / "config.json").is_file():
            raise InvalidArgumentError(f"o2i.backbones: {model} has no config.json: not a transformers checkpoint "
                                       "folder")
        model = str(path)
    name = str(entry.get("name") or (model if model in BUILTIN_BACKBONES else Path(model).name))
    return BackboneEntry(name, model, pooling)


def load_o2i_config(path=None, *, section: dict | None = None, objects: int | None = None) -> O2IConfig:
    """The ``o2i:`` section of a params file (or ``section`` directly), every value checked.

    ``objects`` overrides ``o2i.objects`` (``--objects``)."""
    from rscale.producers.o2i import RenderProtocol
    from rscale.producers.o2i.assets import N_RANDOM, REAL_OBJECTS, BROKEN_RANDOM
    from rscale.producers.o2i.render import DEFAULT_RENDERER, RENDERERS

    if section is None:
        from rscale.api.config import load_config
        section = load_config(path, "o2i")
    where = Path(path).resolve().parent if path is not None else Path.cwd()
    cfg = dict(section or {})
    _unknown("o2i", cfg, _KEYS)
    n_max = len(REAL_OBJECTS) + N_RANDOM - len(BROKEN_RANDOM)
    n = _int("--objects / o2i.objects", cfg.get("objects", 200) if objects is None else objects, 2, n_max)
    seed = _int("o2i.seed", cfg.get("seed", 0), 0)
    protocol = RenderProtocol.from_dict(cfg.get("render"))
    renderer = cfg.get("renderer", DEFAULT_RENDERER)
    if renderer not in RENDERERS:
        raise InvalidArgumentError(f"o2i.renderer must be one of {', '.join(RENDERERS)}, got {renderer!r}")
    entries = cfg.get("backbones", [DEFAULT_BACKBONE])
    if not isinstance(entries, list) or not entries:
        raise InvalidArgumentError("o2i.backbones must list at least one backbone, e.g. [mobilenet_v2_imagenet]")
    backbones = tuple(_backbone(e, where) for e in entries)
    names = [b.name for b in backbones]
    dup = sorted({x for x in names if names.count(x) > 1})
    if dup:
        raise InvalidArgumentError(f"o2i.backbones: name(s) {dup} given twice; give each entry its own 'name'")
    canvas = dict(cfg.get("canvas") or {})
    _unknown("o2i.canvas", canvas, _CANVAS_KEYS)
    k = _int("o2i.canvas.distance_index", canvas.get("distance_index", 0), 0, len(protocol.distances) - 1)
    sizes = tuple(_int("o2i.canvas.sizes", s, 8) for s in canvas.get("sizes", (256, 384, 512, 768, 1024, 1536)))
    if len(sizes) < 2 or len(set(sizes)) != len(sizes):
        raise InvalidArgumentError(f"o2i.canvas.sizes: give at least two distinct canvas sizes, got {list(sizes)}")
    obj_size = _int("o2i.canvas.object_size", canvas.get("object_size", 256), 1)
    if obj_size > min(sizes):
        raise InvalidArgumentError(f"o2i.canvas: object_size {obj_size} is larger than the smallest canvas "
                                   f"{min(sizes)}; use object_size <= {min(sizes)}")
    iv = dict(cfg.get("interventions") or {})
    _unknown("o2i.interventions", iv, _INTERVENTION_KEYS)
    gp = {"views": 5, "span": 4.0, **(iv.get("gp") or {})}
    qe = {"n": 2, "alpha": 3.0, **(iv.get("alpha_qe") or {})}
    msa = {"scales": [1.0, 0.5, 0.25], **(iv.get("msa") or {})}
    _unknown("o2i.interventions.gp", gp, ("views", "span"))
    _unknown("o2i.interventions.alpha_qe", qe, ("n", "alpha"))
    _unknown("o2i.interventions.msa", msa, ("scales",))
    _int("o2i.interventions.gp.views", gp["views"], 1)
    _int("o2i.interventions.alpha_qe.n", qe["n"], 1, n)
    cache = Path(cfg.get("cache", "out/o2i-cache"))
    if not cache.is_absolute() and path is not None:
        cache = where / cache
    return O2IConfig(n, seed, cache, protocol, backbones, k, sizes, obj_size, gp, qe, msa,
                     _int("o2i.batch_size", cfg.get("batch_size", 8), 1), _int("o2i.workers", cfg.get("workers", 1), 1),
                     renderer)


def select_assets(n: int, seed: int) -> list:
    """The 16 real pybullet objects (the first n when n < 16), then n - 16 procedural meshes
    drawn without replacement by ``seed`` (kept in their id order)."""
    from rscale.producers.o2i import pybullet_assets

    real = pybullet_assets("real")
    if n <= len(real):
        return real[:n]
    rand = pybullet_assets("random")
    pick = np.sort(np.random.default_rng(seed).choice(len(rand), n - len(real), replace=False))
    return real + [rand[i] for i in pick]


# ---- extraction, cached by recipe ----------------------------------------------------------------

@dataclass
class Counters:
    rendered: int = 0          # frames drawn
    extracted: int = 0         # descriptor sets computed (extract calls)
    reused: int = 0            # descriptor sets read from the cache
    seconds: dict = field(default_factory=lambda: {"render": 0.0, "extract": 0.0, "evaluate": 0.0, "write": 0.0})


@dataclass(frozen=True)
class ModelInfo:
    entry: BackboneEntry
    path: Path
    model_type: str
    resolution: int
    weights: str               # lineage.weights_digest
    licence: str
    has_cls: bool


def prepare_backbone(entry: BackboneEntry, cache: Path) -> ModelInfo:
    """Resolve an entry to a local checkpoint (converting the builtin MobileNetV2 on first use)."""
    from rscale.producers.lineage import weights_digest

    licence = "see the checkpoint's own model card"
    if entry.builtin:
        from rscale.producers.mobilenet import LICENCE, convert_mobilenet_v2
        path = convert_mobilenet_v2(cache / "backbones" / entry.model).path
        licence = LICENCE
    else:
        path = Path(entry.model)
    try:
        cfg = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise FormatError(f"cannot read config.json ({exc})", path=str(path)) from None
    vcfg = cfg.get("vision_config", cfg)
    res = int(vcfg.get("image_size", 224))
    model_type = str(cfg.get("model_type", ""))
    return ModelInfo(entry, Path(path), model_type, res, weights_digest(path), licence,
                     model_type in CLS_FAMILY and entry.pooling == "cls")


def _extract_cached(info: ModelInfo, items, condition: str, cfg: O2IConfig, counters: Counters,
                    intervention=None, progress: bool = True, lineage: bool = True) -> dict:
    """{id: descriptor} of ``items``; the set is extracted once per recipe."""
    from rscale.producers import extract as ex
    from rscale.producers.lineage import digest_lines
    from rscale.store.descriptor_set import DescriptorSet
    from rscale.store.registry import canonical_digest

    images = digest_lines(f"{i}\t{Path(p).name}\t{list(b) if b is not None else None}" for i, p, b in items)
    recipe = {"version": RECIPE_VERSION, "weights": info.weights, "pooling": info.entry.pooling,
              "resolution": info.resolution, "preprocessing": "full-frame-resize",
              "intervention": condition, "intervention_params": getattr(intervention, "params", {}) or {},
              "images": images}
    key = canonical_digest(recipe).split(":", 1)[1]
    root = cfg.cache / "descriptors" / key[:2] / key
    ds = None
    if (root / "manifest.json").is_file():
        try:
            ds = DescriptorSet.open(root)
            if ds.count != len(items) or ds.verify():
                ds = None
        except FormatError:
            ds = None
        if ds is None:
            shutil.rmtree(root, ignore_errors=True)      # damaged outside rscale: extract it again
    t0 = time.perf_counter()
    if ds is None:
        # extracted into a folder of its own and renamed into place: two runs sharing a cache never
        # clobber each other's set (the first rename wins, the other is dropped)
        root.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key[:16]}.", dir=root.parent))
        try:
            ex.extract(items, info.path, tmp, role="queries" if condition != "baseline" else "positives",
                       pooling=info.entry.pooling, resolution=info.resolution, batch_size=cfg.batch_size,
                       intervention=intervention, progress=progress, lineage=lineage,
                       meta={"o2i_condition": condition, "o2i_recipe": key,
                             "preprocessing": PREPROCESSING.format(r=info.resolution)})
            if root.exists() and not (root / "manifest.json").is_file():
                shutil.rmtree(root)                  # left by an interrupted older version
            try:
                tmp.chmod(0o755)                     # mkdtemp's 0700 would hide the set from other users
                os.rename(tmp, root)
            except OSError:                          # another run finished the same set first
                if not (root / "manifest.json").is_file():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        ds = DescriptorSet.open(root)
        counters.extracted += 1
    else:
        counters.reused += 1
    counters.seconds["extract"] += time.perf_counter() - t0
    ids = ds.ids().astype(str)
    vecs = np.concatenate([np.asarray(v, dtype=np.float32) for _, v in ds.shards()])
    return {"ids": ids, "vectors": vecs, "path": root, "key": key}


def _stack(got: dict, object_ids, suffixes) -> np.ndarray:
    """(objects, len(suffixes), dim) from {ids, vectors}, ids ``<object><suffix>``."""
    pos = {i: n for n, i in enumerate(got["ids"].tolist())}
    idx = [[pos[f"{o}{s}"] for s in suffixes] for o in object_ids]
    return got["vectors"][np.asarray(idx)]


# ---- the run -------------------------------------------------------------------------------------

@dataclass
class O2IResult:
    out: Path
    manifest: dict
    counters: Counters
    summary: dict


def run_o2i(cfg: O2IConfig, out_dir, *, progress: bool = True, lineage: bool = True) -> O2IResult:
    """Render, extract, evaluate and analyse; write tables, plots, report and manifest to ``out_dir``."""
    from rscale.core import o2i as core
    from rscale.producers import o2i
    from rscale.producers.interventions import GrayPad, MaskedScales
    from rscale.producers.lineage import code_version, digest_file, producer_run
    from rscale.store.run_sidecar import write_run_sidecar

    out_dir = Path(out_dir)
    counters = Counters()
    assets = select_assets(cfg.objects, cfg.seed)
    t0 = time.perf_counter()
    rs = o2i.render_set(assets, cfg.protocol, cache_dir=cfg.cache, renderer=cfg.renderer, progress=progress,
                        workers=cfg.workers)
    counters.rendered = rs.rendered
    counters.seconds["render"] = time.perf_counter() - t0
    objects = rs.object_ids
    dist = np.asarray(rs.distances, dtype=np.float64)
    V = len(dist)
    views = [f"@d{k}" for k in range(V)]
    far_near = [(f, n) for f in range(V) for n in range(V) if dist[f] > dist[n]]
    lin = rs.lineage()

    tables = {n: [] for n in ("cross_distance", "recall_by_ratio", "decomposition", "canvas", "asymmetry",
                              "asymmetry_test", "interventions", "ranks")}
    descriptor_sets, models = {}, {}
    for entry in cfg.backbones:
        info = prepare_backbone(entry, cfg.cache)
        models[entry.name] = {"model": entry.model, "path": str(info.path), "model_type": info.model_type,
                              "pooling": entry.pooling, "resolution": info.resolution, "weights": info.weights,
                              "licence": info.licence, "preprocessing": PREPROCESSING.format(r=info.resolution)}

        def get(condition, items, intervention=None):
            got = _extract_cached(info, items, condition, cfg, counters, intervention, progress, lineage)
            descriptor_sets[f"{entry.name}/{condition}"] = {"path": str(got["path"]), "recipe": got["key"],
                                                           "manifest": digest_file(got["path"] / "manifest.json")}
            return got

        base = _stack(get("baseline", rs.items()), objects, views)
        matched_items = [it for f, n in far_near for it in o2i.matched_crop_items(rs, f, n)]
        matched_got = get("matched_crop", matched_items)
        canvas_got = get("canvas", o2i.canvas_items(rs, cfg.cache, cfg.canvas_distance, cfg.canvas_sizes,
                                                    cfg.canvas_object_size))
        box = _stack(get("box_crop", o2i.box_crop_items(rs)), objects, [v + "#box" for v in views])
        gp = _stack(get("gp", rs.items(), GrayPad(**cfg.gp)), objects, views)
        msa = None
        if info.has_cls:
            msa = _stack(get("msa", rs.items(), MaskedScales(**cfg.msa)), objects, views)

        t1 = time.perf_counter()
        cd = core.cross_distance(base, dist)
        tab = cd.table()
        tables["cross_distance"] += _rows(tab, backbone=entry.name)
        rbr = core.recall_by_ratio(cd, 1)
        tables["recall_by_ratio"] += _rows({"ratio": rbr["ratio"], "R@1": rbr["R@1"], "pairs": rbr["pairs"]},
                                           backbone=entry.name)
        matched = {(f, n): _stack(matched_got, objects, [f"@d{f}~d{n}"])[:, 0] for f, n in far_near}
        mcd = core.matched_cross_distance(base, dist, matched)
        tables["decomposition"] += _rows(core.decomposition_table(cd, mcd), backbone=entry.name)
        cv = _stack(canvas_got, objects, [f"@d{cfg.canvas_distance}@c{s}" for s in cfg.canvas_sizes])
        cm = core.canvas_cosine_matrix(cv)
        tables["canvas"] += [{"backbone": entry.name, "size_a": int(a), "size_b": int(b), "cosine": float(cm[i, j])}
                             for i, a in enumerate(cfg.canvas_sizes) for j, b in enumerate(cfg.canvas_sizes)]
        asym = core.asymmetry(cd)
        tables["asymmetry"] += _rows(core.asymmetry_table(asym), backbone=entry.name)
        test = core.asymmetry_significance(asym)
        tables["asymmetry_test"].append({"backbone": entry.name, "mrr_tight_query": asym.mrr_tight_query,
                                         "mrr_wide_query": asym.mrr_wide_query, "difference": asym.difference,
                                         "favoured": asym.favoured, "ci_low": test.ci_low, "ci_high": test.ci_high,
                                         "p_value": test.p_value, "test": test.test, "objects": test.n,
                                         "pairs_each_side": asym.n_pairs_each})
        runs = {"baseline": cd,
                "gp": core.query_side_cross_distance(gp, base, dist),
                "box_crop": core.query_side_cross_distance(box, base, dist),
                "alpha_qe": core.alpha_qe_cross_distance(base, dist, **cfg.alpha_qe)}
        if msa is not None:
            runs["msa"] = core.query_side_cross_distance(msa, base, dist)
        for name, run in runs.items():
            tables["ranks"] += [{"backbone": entry.name, "condition": name, "object_id": o,
                                 "d_q": float(dist[q]), "d_t": float(dist[t]), "rank": int(run.ranks[p, i])}
                                for p, (q, t) in enumerate(run.pairs) for i, o in enumerate(objects)]
            if name == "baseline":
                continue
            tables["interventions"] += _rows(core.intervention_table(cd, run, ks=(1,)), backbone=entry.name,
                                             intervention=name, status="measured")
        if msa is None:
            tables["interventions"].append(
                {"backbone": entry.name, "intervention": "msa",
                 "status": f"not applicable: MSA masks the CLS token's attention; {info.model_type} with pooling "
                           f"'{entry.pooling}' has none"})
        counters.seconds["evaluate"] += time.perf_counter() - t1

    t2 = time.perf_counter()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        written = {name: _write_table(rows, tmp / "tables", name) for name, rows in tables.items()}
        plots = _plots(tables, tmp)
        summary = _summary(tables)
        _write_report(tmp / "report.md", cfg, rs, models, tables, summary, plots)
        outputs = {f"tables/{v['file']}": v["sha256"] for v in written.values()}
        outputs.update({p: digest_file(tmp / p) for p in plots})
        outputs["report.md"] = digest_file(tmp / "report.md")
        manifest = {"format": FORMAT, "schema_version": SCHEMA_VERSION, "code_version": code_version(),
                    "params": cfg.to_dict(),
                    "renders": {"manifest": str(rs.manifest), "digest": lin["renders"], "renderer": lin["renderer"],
                                "protocol": lin["protocol"], "count": len(rs.records)},
                    "assets": lin["assets"], "backbones": models, "descriptor_sets": descriptor_sets,
                    "tables": written, "plots": plots, "outputs": outputs}
        params = {"objects": cfg.objects, "seed": cfg.seed, "distances": list(cfg.protocol.distances),
                  "resolution": cfg.protocol.resolution, "background": list(cfg.protocol.background),
                  "backbones": ",".join(b.name for b in cfg.backbones)}
        licences = sorted({a["licence"] for a in lin["assets"].values()})
        inputs = {"renders": lin["renders"], "renderer": lin["renderer"], "asset_licences": "; ".join(licences),
                  **{f"weights.{n}": m["weights"] for n, m in models.items()}}
        with producer_run("o2i", params, inputs, enabled=lineage) as run:
            (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str) + "\n")
            for name, digest in outputs.items():
                run.output(name.replace("/", "."), digest)
            run.output("manifest", digest_file(tmp / "manifest.json"))
            for k, v in summary.get("metrics", {}).items():
                run.metric(k, v)
            write_run_sidecar(tmp / "manifest.json", "o2i", run.run_id)
        counters.seconds["write"] = time.perf_counter() - t2
        (tmp / "timings.json").write_text(json.dumps({"seconds": counters.seconds, "rendered": counters.rendered,
                                                      "extracted": counters.extracted, "reused": counters.reused},
                                                     indent=2, sort_keys=True) + "\n")
        tmp.chmod(0o755)
        if out_dir.exists():
            old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
            os.replace(out_dir, old)
            os.replace(tmp, out_dir)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return O2IResult(out_dir, manifest, counters, summary)


def _rows(columns: dict, **const) -> list[dict]:
    n = len(next(iter(columns.values())))
    out = []
    for i in range(n):
        row = dict(const)
        for k, v in columns.items():
            x = v[i]
            row[k] = x.item() if hasattr(x, "item") else x
        out.append(row)
    return out


def _write_table(rows: list[dict], folder: Path, name: str) -> dict:
    """A Parquet table named by its content: ``<name>-<sha256 prefix>.parquet``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rscale.producers.lineage import digest_file

    folder.mkdir(parents=True, exist_ok=True)
    cols = list(dict.fromkeys(k for r in rows for k in r))
    table = pa.table({c: [r.get(c) for r in rows] for c in cols}) if rows else pa.table({})
    table = table.replace_schema_metadata({"rscale.format": f"o2i-{name}", "rscale.schema_version": "1"})
    tmp = folder / f".{name}.parquet"
    pq.write_table(table, tmp)
    digest = digest_file(tmp)
    final = folder / f"{name}-{digest.split(':', 1)[1][:16]}.parquet"
    os.replace(tmp, final)
    return {"file": final.name, "sha256": digest, "rows": len(rows)}


def read_table(out_dir, name: str):
    """One table of an O2I output folder, as a pyarrow Table (via its manifest)."""
    import pyarrow.parquet as pq

    man = read_manifest(out_dir)
    if name not in man["tables"]:
        raise InvalidArgumentError(f"no table {name!r} in {out_dir} (tables: {', '.join(sorted(man['tables']))})")
    return pq.read_table(Path(out_dir) / "tables" / man["tables"][name]["file"])


def read_manifest(out_dir) -> dict:
    path = Path(out_dir) / "manifest.json"
    if not path.is_file():
        raise FormatError("no manifest.json: not an O2I output folder", path=str(out_dir),
                          hint="run `rscale o2i run -o FOLDER` first")
    try:
        man = json.loads(path.read_text())
    except ValueError as exc:
        raise FormatError(f"not JSON ({exc})", path=str(path)) from None
    if man.get("format") != FORMAT:
        raise FormatError(f"not an O2I manifest (format {man.get('format')!r})", path=str(path))
    return man


def o2i_run(out_dir, backbone: str | None = None, *, condition: str = "baseline", label: str | None = None):
    """One condition of an O2I output folder as per-query ranks for :func:`rscale.api.compare.compare`
    (every ordered distance pair stacked: ids ``<object>@<d_q>-><d_t>``)."""
    from rscale.api.compare import PerQueryRanks

    t = read_table(out_dir, "ranks").to_pydict()
    names = list(dict.fromkeys(t["backbone"]))
    if backbone is None:
        if len(names) != 1:
            raise InvalidArgumentError(f"{out_dir} holds backbones {names}: name one, e.g. {out_dir}#{names[0]}/baseline")
        backbone = names[0]
    sel = [i for i in range(len(t["rank"])) if t["backbone"][i] == backbone and t["condition"][i] == condition]
    if not sel:
        conds = sorted({c for b, c in zip(t["backbone"], t["condition"]) if b == backbone})
        raise InvalidArgumentError(f"{out_dir}: no condition {condition!r} for backbone {backbone!r} "
                                   f"(backbones: {', '.join(names)}; conditions: {', '.join(conds) or 'none'})")
    ids = [f"{t['object_id'][i]}@{t['d_q'][i]:g}->{t['d_t'][i]:g}" for i in sel]
    ranks = np.asarray([t["rank"][i] for i in sel], dtype=np.int64)
    return PerQueryRanks(np.asarray(ids), ranks, np.arange(len(sel) + 1), label or f"{backbone}/{condition}")


def load_compare_run(spec: str):
    """``rscale compare`` operand: an exact evaluation's sample-stats Parquet file, or an O2I output
    folder with an optional ``#BACKBONE/CONDITION`` (``out/o2i#mobilenet_v2_imagenet/gp``)."""
    from rscale.api.compare import load_run

    path, _, sel = spec.partition("#")
    if Path(path).is_dir():
        backbone, condition = sel.split("/", 1) if "/" in sel else \
            (("", sel) if sel in CONDITIONS else (sel, ""))
        return o2i_run(path, backbone or None, condition=condition or "baseline", label=spec)
    if not Path(path).is_file():
        raise InvalidArgumentError(f"{spec}: no such file or O2I output folder (give a sample-stats Parquet file of "
                                   "`rscale score --fraction 1`, or OUT_DIR#BACKBONE/CONDITION)")
    return load_run(path, label=spec)


# ---- summary, plots, report ----------------------------------------------------------------------

def _summary(tables: dict) -> dict:
    out = {"backbones": {}, "metrics": {}}
    for r in tables["asymmetry_test"]:
        b = r["backbone"]
        rbr = [x for x in tables["recall_by_ratio"] if x["backbone"] == b]
        by_mag = {}
        for x in rbr:
            m = round(abs(float(np.log(x["ratio"]))), 1)      # the rounded ratios: 2.44 and 2.45 are one level
            by_mag.setdefault(m, []).append((x["R@1"], x["pairs"]))
        mags = sorted(by_mag)
        r1 = [float(sum(a * n for a, n in by_mag[m]) / sum(n for _, n in by_mag[m])) for m in mags]
        out["backbones"][b] = {"R@1_by_magnitude": dict(zip([float(np.exp(m)) for m in mags], r1)),
                               "asymmetry": {k: r[k] for k in ("favoured", "difference", "p_value")}}
        out["metrics"][f"{b}.mean_R1"] = float(np.mean([x["R@1"] for x in tables["cross_distance"]
                                                       if x["backbone"] == b]))
    return out


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _plots(tables: dict, folder: Path) -> list[str]:
    plt = _plt()
    names = []

    def save(fig, name: str) -> None:
        fig.tight_layout()
        fig.savefig(folder / name)
        plt.close(fig)
        names.append(name)

    backbones = list(dict.fromkeys(r["backbone"] for r in tables["cross_distance"]))

    fig, ax = plt.subplots(figsize=(5, 3.4), dpi=100)
    for b in backbones:
        rows = sorted((r for r in tables["recall_by_ratio"] if r["backbone"] == b), key=lambda r: r["ratio"])
        ax.plot([r["ratio"] for r in rows], [r["R@1"] for r in rows], "o-", label=b)
    ax.axvline(1.0, color="0.7", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("d_q / d_t (query distance / positive distance)")
    ax.set_ylabel("R@1")
    ax.set_ylim(0, 1.02)
    ax.set_title("Cross-distance R@1 (paper Fig. 2)")
    ax.legend(fontsize=7)
    save(fig, "cross_distance.png")

    fig, ax = plt.subplots(figsize=(5, 3.4), dpi=100)
    for b in backbones:
        rows = sorted((r for r in tables["asymmetry"] if r["backbone"] == b), key=lambda r: r["magnitude"])
        m = [float(np.exp(r["magnitude"])) for r in rows]
        ax.plot(m, [r["mrr_tight_query"] for r in rows], "o-", label=f"{b}: tight query -> wide gallery")
        ax.plot(m, [r["mrr_wide_query"] for r in rows], "s--", label=f"{b}: wide query -> tight gallery")
    ax.set_xlabel("mismatch magnitude max(d_q, d_t) / min(d_q, d_t)")
    ax.set_ylabel("MRR")
    ax.set_title("Asymmetry")
    ax.legend(fontsize=7)
    save(fig, "asymmetry.png")

    for b in backbones:
        rows = [r for r in tables["canvas"] if r["backbone"] == b]
        sizes = list(dict.fromkeys(r["size_a"] for r in rows))
        mat = np.asarray([r["cosine"] for r in rows]).reshape(len(sizes), len(sizes))
        fig, ax = plt.subplots(figsize=(4.2, 3.6), dpi=100)
        im = ax.imshow(mat, vmin=min(0.0, float(mat.min())), vmax=1.0, cmap="viridis")
        ax.set_xticks(range(len(sizes)), sizes, fontsize=7)
        ax.set_yticks(range(len(sizes)), sizes, fontsize=7)
        for i in range(len(sizes)):
            for j in range(len(sizes)):
                ax.text(j, i, f"{mat[i, j]:.2f}", ha="center", va="center", fontsize=6, color="w")
        ax.set_title(f"Fixed-pixel canvas cosine ({b})", fontsize=9)
        fig.colorbar(im, ax=ax)
        save(fig, f"canvas-{b}.png")

    rows = [r for r in tables["interventions"] if r.get("status") == "measured"]
    if rows:
        fig, ax = plt.subplots(figsize=(5, 3.4), dpi=100)
        for b in backbones:
            for iv in dict.fromkeys(r["intervention"] for r in rows if r["backbone"] == b):
                sel = [r for r in rows if r["backbone"] == b and r["intervention"] == iv]
                ratio = [r["d_q"] / r["d_t"] for r in sel]
                order = np.argsort(ratio)
                ax.plot(np.asarray(ratio)[order], np.asarray([r["R@1_gain"] for r in sel])[order], "o-",
                        label=f"{b}: {iv}", ms=3)
        ax.axhline(0, color="0.6", lw=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("d_q / d_t")
        ax.set_ylabel("R@1 gain over baseline")
        ax.set_title("Query-side interventions")
        ax.legend(fontsize=7)
        save(fig, "interventions.png")
    return names


def _md_table(rows: list[dict], cols: list[str], fmt=None) -> str:
    fmt = fmt or {}

    def cell(r, c):
        v = r.get(c)
        if isinstance(v, float):
            return fmt.get(c, "{:.3f}").format(v) if np.isfinite(v) else "n/a"
        return "" if v is None else str(v)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(r, c) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def _write_report(path: Path, cfg: O2IConfig, rs, models: dict, tables: dict, summary: dict, plots: list) -> None:
    p = cfg.protocol
    lic = {}
    for a in rs.lineage()["assets"].values():
        lic[a["licence"]] = lic.get(a["licence"], 0) + 1
    md = ["# O2I benchmark report", "",
          f"{len(rs.object_ids)} objects (16 real pybullet objects first, then procedural meshes drawn with seed "
          f"{cfg.seed}) x {len(p.distances)} camera distances {list(p.distances)}, {p.resolution}x{p.resolution} "
          f"px, background {list(p.background)}; renderer {rs.renderer}; renders digest "
          f"`{rs.content_digest()}`. Asset licences: "
          + ", ".join(f"{k} ({v})" for k, v in sorted(lic.items())) + ".", "",
          "Backbones (every image resized whole to the input size: no centre crop):", ""]
    md += [f"- `{n}`: {m['model_type']}, pooling {m['pooling']}, {m['preprocessing']}; weights `{m['weights']}`; "
           f"licence: {m['licence']}" for n, m in models.items()]
    md += ["", "## 1. Cross-distance retrieval", "",
           "Object i's render at d_q queries a gallery of its render at d_t and every other object at every "
           "distance; its other renders are masked (pessimistic ties).", "",
           "![R@1 against d_q/d_t](cross_distance.png)", "",
           _md_table(tables["cross_distance"], ["backbone", "d_q", "d_t", "ratio", "R@1", "R@5", "R@10", "MRR"]),
           "", "## 2. Decomposition (O2I-matched crops)", "",
           "alpha: raw R@1; beta: R@1 with the farther render cropped to the nearer render's O2I and resized to the "
           "native input size; gamma = 1 - alpha, delta = 1 - beta, epsilon = delta / gamma (resolution share).", "",
           _md_table(tables["decomposition"], ["backbone", "d_q", "d_t", "alpha", "beta", "gamma", "delta", "epsilon",
                                               "note"]),
           "", "## 3. Fixed-pixel canvas", "",
           f"Object pixels of each render at distance index {cfg.canvas_distance} (box resized once to "
           f"{cfg.canvas_object_size} px) pasted byte for byte on canvases {list(cfg.canvas_sizes)}; mean cosine "
           "over objects.", ""]
    md += [f"![canvas cosines]({x})" for x in plots if x.startswith("canvas-")]
    for b in models:
        rows = [r for r in tables["canvas"] if r["backbone"] == b]
        sizes = list(dict.fromkeys(r["size_a"] for r in rows))
        mat = [{"size": s, **{str(r["size_b"]): r["cosine"] for r in rows if r["size_a"] == s}} for s in sizes]
        md += ["", f"`{b}`:", "", _md_table(mat, ["size"] + [str(s) for s in sizes])]
    md += ["", "## 4. Asymmetry", "",
           "MRR of tight-query -> wide-gallery pairs (d_q < d_t) against the mirrored wide-query pairs, paired t-test "
           "over objects of per-object mean RR (effect = tight - wide). Direction as measured.", "",
           "![asymmetry curves](asymmetry.png)", "",
           _md_table(tables["asymmetry_test"], ["backbone", "mrr_tight_query", "mrr_wide_query", "difference",
                                                "ci_low", "ci_high", "p_value", "favoured"], {"p_value": "{:.3g}"}),
           "", _md_table(tables["asymmetry"], ["backbone", "magnitude", "mrr_tight_query", "mrr_wide_query",
                                               "difference"]),
           "", "## 5. Query-side interventions", "",
           "Against the baseline per distance pair: R@1 by McNemar's exact test, MRR by the paired t-test, Holm over "
           "every (pair, measure) cell of one intervention. GP: gray-pad averaging "
           f"{cfg.gp}; box_crop: the query cropped to its tight object box; alpha_qe: alpha-query expansion "
           f"{cfg.alpha_qe} in each query's own gallery; msa: ViT-family backbones with a CLS token only.", ""]
    if "interventions.png" in plots:
        md += ["![intervention gains](interventions.png)", ""]
    measured = [r for r in tables["interventions"] if r.get("status") == "measured"]
    md += [_md_table(measured, ["backbone", "intervention", "d_q", "d_t", "R@1_baseline", "R@1_intervention",
                                "R@1_gain", "R@1_p_holm", "MRR_gain", "MRR_p_holm"],
                     {"R@1_p_holm": "{:.3g}", "MRR_p_holm": "{:.3g}"})]
    na = [r for r in tables["interventions"] if r.get("status", "").startswith("not applicable")]
    md += [""] + [f"- `{r['backbone']}` {r['intervention']}: {r['status']}" for r in na]
    path.write_text("\n".join(md) + "\n")
