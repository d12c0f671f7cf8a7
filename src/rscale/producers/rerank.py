"""OWLv2 crop reranking (O2I paper, section 5.5): training-free, the gallery index untouched.

1. **Proposals** (:func:`propose_regions`): transformers' own ``Owlv2ForObjectDetection``, used
   class-agnostically (no text query): ``image_embedder`` -> ``objectness_predictor`` (logits,
   sigmoid) and ``box_predictor`` ((cx, cy, w, h) in [0, 1] of the image zero-padded at the
   bottom and right to a square, as ``Owlv2ImageProcessor`` pads). Boxes are mapped back to the
   original pixels and clipped (:func:`rscale.core.rerank.boxes_to_pixels`), then greedy NMS keeps
   the best by objectness (:class:`ProposalParams`).
2. **Regions** (:func:`region_features`): the whole image plus each kept box, cropped from the
   original image and encoded by the retrieval backbone with the first stage's settings
   (``producers.extract``'s ``load_backbone`` / ``to_pixels`` / ``embed``: same pooling, resolution,
   normalisation), into a content-addressed region cache (:mod:`rscale.producers.rerank_cache`).
3. **Rerank** (:func:`rerank`): each query's top K' first-stage candidates rescored by the max
   cosine between the query descriptor and the candidate's regions
   (:func:`rscale.core.rerank.max_region_scores`: one GEMM per query block, a segmented max).
   ``first_stage_weight`` w blends in the first-stage score, (1 - w) s_region + w s_first; the
   default w = 0 is the paper's pure max-region cosine. Because the whole image is region 0, the
   max-region score is never below the whole-image cosine (the first-stage score when the gallery
   was extracted with the same settings). Ties keep the first-stage order.

Weights load from local folders only (``local_files_only=True``). float32 on CPU, bfloat16 on CUDA.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from rscale.core import rerank as core_rerank
from rscale.errors import FormatError, InvalidArgumentError
from rscale.producers.extract import _torch
from rscale.store.candidate_lists import read_candidates

OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
OUTPUT_FORMAT = "rscale-rerank"
OUTPUT_VERSION = 1


@dataclass(frozen=True)
class ProposalParams:
    """Class-agnostic proposal settings. Defaults are ours (the paper does not state them):

    - ``max_boxes`` 10: boxes kept per image after NMS (plus the whole image);
    - ``nms_iou`` 0.5: a box overlapping a better one by more is dropped;
    - ``min_objectness`` 0.0: sigmoid(objectness) floor (0 keeps the top ``max_boxes`` whatever they score);
    - ``min_side`` 8: boxes with a side under 8 pixels of the original image are dropped;
    - ``resolution`` None: the detector's input side, default the checkpoint's ``vision_config.image_size``
      (960 for google/owlv2-*-patch16*); another value interpolates the position embeddings.
    """
    max_boxes: int = 10
    nms_iou: float = 0.5
    min_objectness: float = 0.0
    min_side: float = 8.0
    resolution: int | None = None

    def __post_init__(self):
        # the real-valued settings as floats: they enter the region cache's identity digest (JSON,
        # where 4 and 4.0 differ), so ProposalParams(min_side=4) and a file's `min_side: 4.0` (or
        # rscale.api.rerank_settings, which reads reals as floats) must be one cache
        for name in ("nms_iou", "min_objectness", "min_side"):
            v = getattr(self, name)
            if isinstance(v, int) and not isinstance(v, bool):
                object.__setattr__(self, name, float(v))


@dataclass
class Detector:
    model: object
    resolution: int
    mean: tuple
    std: tuple
    device: str
    dtype: object
    interpolate: bool
    digest: str


def load_detector(path, resolution: int | None = None, device: str | None = None, dtype=None) -> Detector:
    """Load ``Owlv2ForObjectDetection`` from a local checkpoint folder (never from the network)."""
    torch = _torch()
    import transformers

    from rscale.producers.lineage import weights_digest
    from rscale.producers.checkpoint import checkpoint_config
    path = Path(path)
    model_type = checkpoint_config(path, what="detector", hint="download an OWLv2 checkpoint once elsewhere (e.g. "
                                   "google/owlv2-base-patch16-ensemble) and pass its local folder; rscale never "
                                   "downloads at run time").get("model_type", "")
    if model_type != "owlv2":
        raise InvalidArgumentError(f"detector checkpoint {path} has model_type {model_type!r}; the reranker "
                                   f"needs an OWLv2 checkpoint (model_type 'owlv2')")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = dtype or (torch.bfloat16 if device.startswith("cuda") else torch.float32)
    model = transformers.Owlv2ForObjectDetection.from_pretrained(path, local_files_only=True, dtype=dtype)
    model = model.to(device).eval()
    vcfg = model.config.vision_config
    native = int(vcfg.image_size)
    res = int(resolution or native)
    if res % int(vcfg.patch_size):
        raise InvalidArgumentError(f"detector resolution {res} is not a multiple of its patch size {vcfg.patch_size}")
    mean, std = OPENAI_CLIP_MEAN, OPENAI_CLIP_STD
    pre = path / "preprocessor_config.json"
    if pre.exists():
        p = json.loads(pre.read_text())
        mean, std = tuple(p.get("image_mean", mean)), tuple(p.get("image_std", std))
    return Detector(model, res, mean, std, device, dtype, res != native, weights_digest(path))


def padded_square(image, fill=(0, 0, 0)):
    """The image pasted at the top-left of a max(W, H) square of ``fill`` (OWLv2's padding)."""
    from PIL import Image
    im = image.convert("RGB")
    side = max(im.size)
    canvas = Image.new("RGB", (side, side), fill)
    canvas.paste(im, (0, 0))
    return canvas


def detector_pixels(det: Detector, images):
    """PIL images -> (B, 3, R, R) detector input: zero-padded to a square, resized (bilinear), normalised."""
    torch = _torch()
    from PIL import Image
    arrs = []
    for im in images:
        sq = padded_square(im)
        if sq.size != (det.resolution, det.resolution):
            sq = sq.resize((det.resolution, det.resolution), Image.BILINEAR)
        arrs.append(np.asarray(sq, dtype=np.float32) / 255.0)
    x = (np.stack(arrs) - np.asarray(det.mean, np.float32)) / np.asarray(det.std, np.float32)
    return torch.from_numpy(x.transpose(0, 3, 1, 2).copy()).to(det.device, det.dtype)


def raw_proposals(det: Detector, pixels):
    """(objectness in [0, 1] (B, P), boxes cxcywh of the padded square (B, P, 4)) for every patch."""
    torch = _torch()
    m = det.model
    with torch.inference_mode():
        feature_map, _ = m.image_embedder(pixel_values=pixels, interpolate_pos_encoding=det.interpolate)
        b, h, w, d = feature_map.shape
        feats = feature_map.reshape(b, h * w, d)
        objectness = torch.sigmoid(m.objectness_predictor(feats))
        boxes = m.box_predictor(feats, feature_map, interpolate_pos_encoding=det.interpolate)
    return objectness.float().cpu().numpy(), boxes.float().cpu().numpy()


def propose_regions(det: Detector, images, params: ProposalParams = ProposalParams()):
    """Per image, (boxes (n, 4) pixel corners x1, y1, x2, y2, objectness (n,)), best first, after NMS."""
    objectness, boxes = raw_proposals(det, detector_pixels(det, images))
    out = []
    for im, obj, bx in zip(images, objectness, boxes):
        px = core_rerank.boxes_to_pixels(bx, *im.size)
        keep = core_rerank.nms_keep(px, obj, params.nms_iou, params.max_boxes, params.min_objectness, params.min_side)
        out.append((px[keep].astype(np.float32), obj[keep].astype(np.float32)))
    return out


def _crop(image, box):
    x1, y1, x2, y2 = (int(round(float(v))) for v in box)
    return image.crop((x1, y1, max(x2, x1 + 1), max(y2, y1 + 1)))


def encode_regions(det: Detector, bb, images, *, pooling: str, params: ProposalParams, batch_size: int = 32):
    """Regions (whole image first, then kept boxes) and their descriptors for a batch of images."""
    from rscale.producers import extract as ex
    from rscale.producers.rerank_cache import Regions
    proposals = propose_regions(det, images, params)
    crops, boxes, objectness, sizes = [], [], [], []
    for im, (bx, obj) in zip(images, proposals):
        w, h = im.size
        crops.append(im)
        boxes.append(np.array([[0, 0, w, h]], np.float32))
        objectness.append(np.array([np.nan], np.float32))
        crops += [_crop(im, b) for b in bx]
        boxes.append(bx.reshape(-1, 4))
        objectness.append(obj)
        sizes.append(1 + len(bx))
    vecs = [ex.embed(bb, ex.to_pixels(bb, crops[a:a + batch_size]), pooling) for a in range(0, len(crops), batch_size)]
    return Regions(np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64), np.concatenate(boxes),
                   np.concatenate(objectness), np.concatenate(vecs).astype(np.float16))


def region_identity(det: Detector, bb, backbone_digest: str, pooling: str, params: ProposalParams) -> dict:
    return {"detector_sha256": det.digest, "detector_resolution": det.resolution, "backbone_sha256": backbone_digest,
            "backbone_model_type": bb.model_type, "pooling": pooling, "resolution": bb.resolution,
            "preprocessing": bb.preprocessing,
            "proposals": {k: v for k, v in asdict(params).items() if k != "resolution"}}


def region_features(items, det: Detector, bb, cache, *, pooling: str, params: ProposalParams,
                    batch_size: int = 16, shard_size: int = 1024, progress: bool = True):
    """Make sure ``cache`` holds the regions of every (image id, path) in ``items``; returns
    (their sha256 in order, the number of images computed now). Only images no shard holds are
    computed, ``shard_size`` at a time, each shard written whole."""
    from rich.progress import Progress

    from rscale.producers import extract as ex
    from rscale.producers.lineage import digest_file
    sha = [digest_file(p) for _, p in items]
    known = cache.known_images()
    todo, seen = [], set()
    for (iid, path), s in zip(items, sha):
        if s not in known and s not in seen:
            todo.append((iid, path, s))
            seen.add(s)
    with Progress(disable=not progress or not todo, transient=True) as bar:
        task = bar.add_task("regions", total=len(todo))
        for a in range(0, len(todo), shard_size):
            part = todo[a:a + shard_size]
            blocks = []
            for b in range(0, len(part), batch_size):
                batch = part[b:b + batch_size]
                images = [ex.open_image(p).convert("RGB") for _, p, _ in batch]
                blocks.append(encode_regions(det, bb, images, pooling=pooling, params=params, batch_size=batch_size * 4))
                bar.advance(task, len(batch))
            cache.write_shard([t[0] for t in part], [t[2] for t in part], _concat_regions(blocks))
    return sha, len(todo)


def _concat_regions(blocks):
    from rscale.producers.rerank_cache import Regions
    sizes = np.concatenate([np.diff(r.offsets) for r in blocks])
    return Regions(np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64), np.concatenate([r.boxes for r in blocks]),
                   np.concatenate([r.objectness for r in blocks]), np.concatenate([r.vectors for r in blocks]))


def max_region_scores_torch(queries, candidates, region_vectors, region_offsets, *, device: str, dtype, block: int = 64):
    """:func:`rscale.core.rerank.max_region_scores` with torch (bf16 GEMMs on a GPU): the same blocks,
    the segmented max by ``scatter_reduce`` (amax)."""
    torch = _torch()
    q = torch.as_tensor(np.asarray(queries, np.float32), device=device).to(dtype)
    regions = torch.as_tensor(np.asarray(region_vectors), device=device).to(dtype)
    off = np.asarray(region_offsets, np.int64)
    cand = np.asarray(candidates, np.int64)
    out = np.empty(cand.shape, np.float32)
    for a in range(0, len(cand), block):
        cb = cand[a:a + block]
        images, inverse = np.unique(cb, return_inverse=True)
        rows, starts = core_rerank.region_index(images, off)
        seg = torch.as_tensor(np.repeat(np.arange(images.size), np.diff(np.append(starts, rows.size))), device=device)
        sims = (q[a:a + block] @ regions[torch.as_tensor(rows, device=device)].T).float()
        per_image = torch.full((sims.shape[0], images.size), -torch.inf, device=device)
        per_image.scatter_reduce_(1, seg.expand(sims.shape[0], -1), sims, reduce="amax")
        idx = torch.as_tensor(inverse.reshape(cb.shape), device=device)
        out[a:a + block] = torch.gather(per_image, 1, idx).cpu().numpy()
    return out


# ---------------------------------------------------------------- inputs
def gallery_items(gallery) -> list[tuple[str, Path]]:
    """(id, path) pairs: from a folder (ids are paths relative to it without the suffix, as
    ``rscale extract`` names them), a mapping id -> path, or an iterable of pairs."""
    if isinstance(gallery, (str, os.PathLike)):
        root = Path(gallery)
        if not root.is_dir():
            raise InvalidArgumentError(f"gallery {root} is not an image folder")
        exts = {".jpg", ".jpeg", ".png", ".webp", ".bmp"}
        return [(str(p.relative_to(root).with_suffix("")), p) for p in sorted(root.rglob("*")) if p.suffix.lower() in exts]
    if isinstance(gallery, dict):
        return [(str(k), Path(v)) for k, v in gallery.items()]
    return [(str(k), Path(v)) for k, v, *_ in gallery]


def _read_qrels(path):
    import pyarrow.parquet as pq
    t = pq.read_table(path)
    for c in ("query_id", "positive_id"):
        if c not in t.column_names:
            raise FormatError("missing column (expected query_id, positive_id)", path=str(path), column=c)
    pairs: dict[str, set] = {}
    for q, p in zip(t.column("query_id").to_pylist(), t.column("positive_id").to_pylist()):
        pairs.setdefault(str(q), set()).add(str(p))
    return pairs


def list_metrics(gallery_ids, qrels: dict, query_ids, k: int) -> dict:
    """Per-query R@1 and AP@k of ranked lists (Q, k) of gallery ids (NaN for a query without qrels)."""
    from rscale.core import metrics
    ranks, sizes, n_rel = [], [], []
    for q, row in zip(query_ids, gallery_ids):
        pos = qrels.get(str(q), set())
        r = np.flatnonzero(np.isin(row, list(pos))) + 1 if pos else np.zeros(0, np.int64)
        ranks.append(r)
        sizes.append(r.size)
        n_rel.append(len(pos))
    n_rel = np.asarray(n_rel)
    has = n_rel > 0
    off = np.concatenate([[0], np.cumsum(np.asarray(sizes)[has])]).astype(np.int64)
    flat = np.concatenate([r for r, h in zip(ranks, has) if h] or [np.zeros(0, np.int64)]).astype(np.int64)
    ap = np.full(len(query_ids), np.nan)
    r1 = np.full(len(query_ids), np.nan)
    if has.any():
        ap[has] = metrics.ap_at_k(flat, off, k=k, n_relevant=n_rel[has])
        ranked = np.diff(off) > 0                      # hit_at_k needs a ranked positive per query
        hit = np.zeros(int(has.sum()))
        if ranked.any():
            sub = np.concatenate([[0], np.cumsum(np.diff(off)[ranked])]).astype(np.int64)
            hit[ranked] = metrics.hit_at_k(flat, sub, k=1)
        r1[has] = hit
    return {"R@1": r1, f"mAP@{k}": ap}


def _write_parquet(table, path):
    import pyarrow.parquet as pq
    pq.write_table(table, path)


@dataclass
class RegionScorer:
    """The detector, the backbone and the region cache of one rerank run, checked against the
    first stage's query set: what both the list reranker (:func:`rerank`) and the sample-stats
    reranker (:mod:`rscale.producers.rerank_sample`) score with."""
    det: Detector
    bb: object
    cache: object
    pooling: str
    backbone_digest: str
    params: ProposalParams
    cache_dir: Path
    fresh_cache: bool

    @classmethod
    def open(cls, qset, detector_dir, backbone_dir, cache_dir, *, params: ProposalParams = ProposalParams(),
             pooling: str | None = None, resolution: int | None = None, device: str | None = None) -> "RegionScorer":
        """Load both models (local folders only) and open the cache; refuse a query set extracted by
        other backbone weights or of another dimension. Pooling, resolution and preprocessing are the
        query set's (the first stage's settings); ``pooling`` / ``resolution`` override them."""
        from rscale.producers import extract as ex
        from rscale.producers.lineage import weights_digest
        from rscale.producers.rerank_cache import RegionCache
        meta = qset.manifest
        # the first stage's preprocessing: its image processor sets the input size itself
        preprocessing = meta.get("preprocessing", "auto")
        if resolution is None and preprocessing != "processor":
            resolution = meta.get("resolution")
        with ex.quiet_weight_loading(True):                     # no weight-loading bars: ours report the work
            det = load_detector(detector_dir, params.resolution, device)
            bb = ex.load_backbone(backbone_dir, resolution, device, preprocessing=preprocessing, inference=True)
        pooling = pooling or meta.get("pooling", "cls")
        backbone_digest = weights_digest(backbone_dir)
        if meta.get("weights_sha256") and meta["weights_sha256"] != backbone_digest:
            raise InvalidArgumentError(f"the query set {qset.root} was extracted with backbone weights "
                                       f"{meta['weights_sha256'][:19]}, not {backbone_dir} ({backbone_digest[:19]}); "
                                       f"regions must come from the first stage's backbone")
        if qset.dim != int(np.asarray(ex.embed(bb, ex.to_pixels(bb, [_blank()]), pooling)).shape[1]):
            raise InvalidArgumentError(f"query descriptors have dimension {qset.dim}, the backbone gives another")
        fresh = not Path(cache_dir).exists()
        cache = RegionCache.open(cache_dir, region_identity(det, bb, backbone_digest, pooling, params))
        return cls(det, bb, cache, pooling, backbone_digest, params, Path(cache_dir), fresh)

    def regions(self, items, *, batch_size: int = 16, shard_size: int = 1024, progress: bool = True):
        """(Regions of the (id, path) ``items`` in order, images computed now): only images no
        cache shard holds are computed; a fresh cache refused before its first shard is removed."""
        try:
            sha, computed = region_features(items, self.det, self.bb, self.cache, pooling=self.pooling,
                                            params=self.params, batch_size=batch_size, shard_size=shard_size,
                                            progress=progress)
        except BaseException:
            if self.fresh_cache and not self.cache.shard_paths():   # refused before any shard: leave nothing behind
                shutil.rmtree(self.cache_dir, ignore_errors=True)
            raise
        return self.cache.regions_of(sha), computed

    def max_region_scores(self, qvec, cand_index, regions, *, block: int = 8) -> np.ndarray:
        """(Q, K) max cosine of each query over the regions of its candidates (indices into ``regions``):
        float32 numpy GEMMs on CPU, bf16 torch on CUDA."""
        if self.bb.device.startswith("cuda"):
            return max_region_scores_torch(qvec, cand_index, regions.vectors, regions.offsets,
                                           device=self.bb.device, dtype=self.bb.dtype, block=max(block, 64))
        return core_rerank.max_region_scores(qvec, cand_index, regions.vectors.astype(np.float32), regions.offsets,
                                             block=block)


def rerank(queries, candidates, gallery, detector_dir, backbone_dir, cache_dir, out_dir, *, k: int = 1000,
           qrels=None, first_stage_weight: float = 0.0, pooling: str | None = None, resolution: int | None = None,
           params: ProposalParams = ProposalParams(), batch_size: int = 16, shard_size: int = 1024, block: int = 8,
           device: str | None = None, progress: bool = True, lineage: bool = True) -> dict:
    """Rerank each query's top ``k`` first-stage candidates by max region cosine; write ``out_dir``.

    ``queries``: the query descriptor set (folder); ``candidates``: Parquet of (query_id,
    gallery_id, score, rank); ``gallery``: image folder, id -> path mapping or (id, path) pairs;
    ``qrels``: optional Parquet of (query_id, positive_id) for per-query metrics. Pooling and
    resolution default to the query set's own (the first stage's settings). Everything is checked
    before anything is computed; the output folder appears whole (written aside, then renamed):
    ``reranked.parquet``, ``metrics.parquet`` (with qrels) and ``manifest.json``.
    """
    import pyarrow as pa

    from rscale.producers.lineage import digest_file, producer_run
    from rscale.store.run_sidecar import read_run_id, write_run_sidecar
    from rscale.store.descriptor_set import DescriptorSet

    core_rerank.combined_scores(0.0, 0.0, first_stage_weight)            # validates the weight
    qset = DescriptorSet.open(queries)
    qids, cand_ids, cand_scores, cand_ranks = read_candidates(candidates, k)
    qset_ids = np.asarray(qset.ids()).astype(str)
    qpos = {q: i for i, q in enumerate(qset_ids)}
    unknown_q = [q for q in qids if q not in qpos]
    if unknown_q:
        raise FormatError(f"query id {str(unknown_q[0])!r} is not in the query descriptor set {qset.root} "
                          f"({len(unknown_q)} unknown)", path=str(candidates), column="query_id")
    items = gallery_items(gallery)
    gpos = {g: i for i, (g, _) in enumerate(items)}
    flat = cand_ids.ravel()
    unknown = np.flatnonzero(~np.isin(flat, list(gpos)))
    if unknown.size:
        raise FormatError(f"gallery id {str(flat[unknown[0]])!r} is not in the gallery ({unknown.size} candidates name "
                          f"unknown images)", path=str(candidates), column="gallery_id",
                          hint="pass the gallery folder or mapping the first stage scored")
    qrel_pairs = _read_qrels(qrels) if qrels is not None else None

    scorer = RegionScorer.open(qset, detector_dir, backbone_dir, cache_dir, params=params, pooling=pooling,
                               resolution=resolution, device=device)
    det, bb, cache, pooling, backbone_digest = scorer.det, scorer.bb, scorer.cache, scorer.pooling, scorer.backbone_digest
    used = sorted(set(flat.tolist()), key=gpos.get)                # candidate images only
    regions, computed = scorer.regions([items[gpos[g]] for g in used], batch_size=batch_size,
                                       shard_size=shard_size, progress=progress)
    upos = {g: i for i, g in enumerate(used)}
    cand_index = np.vectorize(upos.get, otypes=[np.int64])(cand_ids)
    qvec = np.concatenate([np.asarray(v, np.float32) for _, v in qset.shards()])[[qpos[q] for q in qids]]
    region_scores = scorer.max_region_scores(qvec, cand_index, regions, block=block)
    final = core_rerank.combined_scores(region_scores, cand_scores, first_stage_weight)
    order = core_rerank.rerank_order(final, cand_ranks)
    take = lambda a: np.take_along_axis(a, order, axis=1)   # noqa: E731
    new_ids = take(cand_ids)

    out_dir = Path(out_dir)
    from rscale.store.atomic import temp_path
    tmp = temp_path(out_dir)
    tmp.mkdir(parents=True)
    qcol = np.repeat(qids, k)
    summary = {"queries": int(len(qids)), "k": int(k), "regions": regions.count, "images": len(used),
               "images_computed": int(computed)}
    try:
        _write_parquet(pa.table({
            "query_id": pa.array(qcol, pa.string()), "gallery_id": pa.array(new_ids.ravel(), pa.string()),
            "rank": pa.array(np.tile(np.arange(1, k + 1), len(qids)).astype(np.int64)),
            "score": pa.array(take(final).ravel().astype(np.float32)),
            "region_score": pa.array(take(region_scores).ravel().astype(np.float32)),
            "first_stage_score": pa.array(take(cand_scores).ravel().astype(np.float32)),
            "first_stage_rank": pa.array(take(cand_ranks).ravel().astype(np.int64))}), tmp / "reranked.parquet")
        files = ["reranked.parquet"]
        if qrel_pairs is not None:
            before = list_metrics(cand_ids, qrel_pairs, qids, k)
            after = list_metrics(new_ids, qrel_pairs, qids, k)
            cols = {"query_id": pa.array(qids, pa.string())}
            for name in before:
                cols[f"first_stage_{name}"] = pa.array(before[name])
                cols[name] = pa.array(after[name])
                summary[f"first_stage_{name}"] = float(np.nanmean(before[name])) if np.isfinite(before[name]).any() else None
                summary[name] = float(np.nanmean(after[name])) if np.isfinite(after[name]).any() else None
            _write_parquet(pa.table(cols), tmp / "metrics.parquet")
            files.append("metrics.parquet")
        inputs = {"first_stage": digest_file(candidates), "queries": digest_file(Path(queries) / "manifest.json"),
                  "detector": det.digest, "backbone": backbone_digest, "region_cache": cache.digest}
        if qrels is not None:
            inputs["qrels"] = digest_file(qrels)
        first_stage_run = read_run_id(candidates)          # `rscale score --candidates` leaves one
        if first_stage_run:
            inputs["first_stage_run"] = first_stage_run
        run_params = {"k": k, "first_stage_weight": first_stage_weight, "pooling": pooling,
                      "resolution": bb.resolution, "detector_resolution": det.resolution, **asdict(params)}
        with producer_run("rerank", run_params, inputs, enabled=lineage) as run:
            manifest = {"format": OUTPUT_FORMAT, "version": OUTPUT_VERSION, "params": run_params, "inputs": inputs,
                        "files": {f: digest_file(tmp / f) for f in files}, "summary": summary,
                        "backbone": qset.manifest.get("backbone")}
            (tmp / "manifest.json").write_text(json.dumps(manifest, sort_keys=True, indent=1) + "\n")
            for f in files:
                run.output(f, manifest["files"][f])
            for name, v in summary.items():
                if isinstance(v, float):
                    run.metric(name.replace("@", "_at_"), v)
            write_run_sidecar(tmp / "manifest.json", "rerank", run.run_id)
        if out_dir.exists():
            old = temp_path(out_dir.with_name(out_dir.name + "-replaced"))
            os.replace(out_dir, old)
            os.replace(tmp, out_dir)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {**summary, "written": str(out_dir)}


def _blank():
    from PIL import Image
    return Image.new("RGB", (8, 8), (127, 127, 127))
