"""Feature extraction with transformers' own vision backbones, into descriptor sets.

Backbones load from a local directory or the offline cache (``from_pretrained(path,
local_files_only=True)``); nothing is downloaded at run time. The class comes from the
checkpoint's ``config.json`` ``model_type``:

==============  ==========================  ====================================
model_type      class                       pooling ``cls`` / ``mean`` / ``pooled``
==============  ==========================  ====================================
vit             ViTModel                    CLS token / mean of patches / pooler
dinov2          Dinov2Model                 (register tokens are skipped by ``mean``)
dinov3_vit      AutoModel                   same
clip            CLIPVisionModel             pooled = post-layernorm CLS
siglip          SiglipVisionModel           pooled = attention-pooling head
mobilenet_v2    MobileNetV2Model            pooled = global average pool (``mean`` too; no CLS)
==============  ==========================  ====================================

Preprocessing (``preprocessing``, recorded in the descriptor set's manifest and recipe):

- ``processor``: the checkpoint's own ``AutoImageProcessor`` (its ``preprocessor_config.json``:
  resize, centre crop, rescale, normalise), so descriptors match the model's reference ones;
- ``resize``: a plain bicubic resize to ``resolution`` x ``resolution`` (PIL; no torchvision),
  scaled to [0, 1] and normalised with the checkpoint's mean/std when it has them, else
  ImageNet's: fixed-resolution protocols (the O2I paper's), and MSA, whose patch mask assumes
  the whole image is seen;
- ``auto`` (default): ``processor`` when the checkpoint has a ``preprocessor_config.json`` and no
  ``resolution`` is asked for, else ``resize``.

float32 on CPU, bfloat16 on CUDA (``dtype`` overrides). Output descriptors are
L2-normalised in float32 and written as a descriptor set (rscale.store.descriptor_set), one
shard at a time: re-running after an interruption skips finished shards.

Query-side interventions (O2I paper, section 5; the gallery is never touched), see
:mod:`rscale.producers.interventions`: ``gp`` (gray-pad averaging), ``msa`` (multi-scale with gray
patches masked out of the CLS token's attention).
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rscale.errors import FormatError, InvalidArgumentError, MissingExtraError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
POOLINGS = ("cls", "mean", "pooled")
PREPROCESSINGS = ("auto", "processor", "resize")
_CLASSES = {"vit": "ViTModel", "dinov2": "Dinov2Model", "clip": "CLIPVisionModel",
            "clip_vision_model": "CLIPVisionModel", "siglip": "SiglipVisionModel",
            "siglip_vision_model": "SiglipVisionModel", "dinov3_vit": "AutoModel",
            "mobilenet_v2": "MobileNetV2Model"}
_CONV = {"mobilenet_v2"}          # feature maps (B, C, H, W), no tokens


def _torch():
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError:
        raise MissingExtraError("torch and transformers", "extract") from None
    return torch


@dataclass
class Backbone:
    model: object
    model_type: str
    resolution: int
    mean: tuple
    std: tuple
    device: str
    dtype: object
    patch_size: int              # 0 for convolutional backbones
    prefix_tokens: int           # CLS + register tokens before the patches
    preprocessing: str = "resize"  # "processor" or "resize" (see the module docstring)
    processor: object = None     # the checkpoint's AutoImageProcessor when preprocessing == "processor"
    conv: bool = False           # convolutional: last_hidden_state is a (B, C, H, W) feature map

    @property
    def grid(self) -> int:
        if not self.patch_size:
            raise InvalidArgumentError(f"{self.model_type} has no patch grid (a convolutional backbone)")
        return self.resolution // self.patch_size


def load_backbone(path, resolution: int | None = None, device: str | None = None, dtype=None,
                  preprocessing: str = "auto", inference: bool = False) -> Backbone:
    """Load a vision backbone from a local checkpoint directory (never from the network).

    ``inference``: fuse each convolution with its eval-mode BatchNorm and activation
    (:func:`fuse_conv_layers`), for extraction only: the model can no longer be trained."""
    torch = _torch()
    import transformers

    from rscale.producers.checkpoint import checkpoint_config
    path = Path(path)
    cfg = checkpoint_config(path, what="backbone")
    cfg_file = path / "config.json"
    if preprocessing not in PREPROCESSINGS:
        raise InvalidArgumentError(f"preprocessing must be one of {', '.join(PREPROCESSINGS)}, got {preprocessing!r}")
    pre = path / "preprocessor_config.json"
    if preprocessing == "auto":
        preprocessing = "processor" if pre.exists() and resolution is None else "resize"
    elif preprocessing == "processor":
        if not pre.exists():
            raise FormatError("no preprocessor_config.json: the checkpoint has no image processor", path=str(path),
                              hint="use preprocessing 'resize' (--preprocessing resize) with a --resolution")
        if resolution is not None:
            raise InvalidArgumentError("the checkpoint's image processor sets the input size: pass a resolution "
                                       "only with preprocessing 'resize'")
    model_type = cfg.get("model_type", "")
    if model_type not in _CLASSES:
        raise InvalidArgumentError(f"unsupported backbone type {model_type!r} in {cfg_file} "
                                   f"(supported: {', '.join(sorted(_CLASSES))})")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = dtype or (torch.bfloat16 if device.startswith("cuda") else torch.float32)
    cls = getattr(transformers, _CLASSES[model_type])
    model = cls.from_pretrained(path, local_files_only=True, torch_dtype=dtype).to(device).eval()
    conv = model_type in _CONV
    if conv:
        # depthwise convolutions run 2-3x faster channels-last on CPU (docs/benchmarks.md, O2I default
        # run); the descriptors are the same up to float rounding
        model = model.to(memory_format=torch.channels_last)
    if inference:
        fuse_conv_layers(model)
    vcfg = getattr(model.config, "vision_config", model.config)
    mean, std = IMAGENET_MEAN, IMAGENET_STD
    if pre.exists():
        p = json.loads(pre.read_text())
        mean, std = tuple(p.get("image_mean", mean)), tuple(p.get("image_std", std))
    res = int(resolution or getattr(vcfg, "image_size", 224))
    processor = None
    if preprocessing == "processor":
        try:
            processor = transformers.AutoImageProcessor.from_pretrained(path, local_files_only=True)
        except Exception as exc:      # an unknown or broken processor config: say so, offer the opt-out
            raise FormatError(f"cannot load the checkpoint's image processor ({type(exc).__name__}: {exc})",
                              path=str(pre), hint="fix preprocessor_config.json, or use preprocessing 'resize' "
                                                  "(--preprocessing resize)") from None
        res = _processor_resolution(processor, path)
    prefix = 1 + int(getattr(vcfg, "num_register_tokens", 0) or 0)
    if model_type.startswith("siglip") or conv:
        prefix = 0                    # SigLIP has no CLS token (all tokens are patches); conv nets have no tokens
    return Backbone(model, model_type, res, mean, std, device, dtype, int(getattr(vcfg, "patch_size", 0) or 0),
                    prefix, preprocessing, processor, conv)


def fuse_conv_layers(model) -> int:
    """Fold every eval-mode BatchNorm into the convolution before it and run the activation after
    it in place; returns how many layers were fused.

    transformers' convolutional layers keep the pair as ``convolution`` and ``normalization``
    (MobileNetV1/V2, ResNet, ConvNeXt's stem and others). BatchNorm in eval mode is an affine map
    per channel, y = (conv(x) - mean) * g / sqrt(var + eps) + b, so it folds into the convolution's
    weight and bias: the same function up to float rounding, without a pass over the feature
    map. The activation then acts on the convolution's own fresh output, which nothing else reads,
    so it may overwrite it. Together they halve MobileNetV2's CPU time (docs/benchmarks.md).
    Inference only: a fused model cannot be trained."""
    torch = _torch()
    nn = torch.nn
    folded = 0
    for layer in model.modules():
        conv, bn = getattr(layer, "convolution", None), getattr(layer, "normalization", None)
        if not (isinstance(conv, nn.Conv2d) and isinstance(bn, nn.BatchNorm2d)) or bn.training \
                or not bn.track_running_stats:
            continue
        with torch.no_grad():                     # in float32, whatever the model's dtype
            scale = torch.rsqrt(bn.running_var.float() + bn.eps)
            if bn.affine:
                scale = scale * bn.weight.float()
            bias = -bn.running_mean.float() * scale + (bn.bias.float() if bn.affine else 0)
            if conv.bias is not None:
                bias = bias + conv.bias.float() * scale
            conv.weight.copy_((conv.weight.float() * scale.reshape(-1, 1, 1, 1)).to(conv.weight.dtype))
            conv.bias = nn.Parameter(bias.to(conv.weight.dtype), requires_grad=False)
        layer.normalization = nn.Identity()
        if hasattr(getattr(layer, "activation", None), "inplace"):
            layer.activation.inplace = True
        folded += 1
    return folded


def _processor_resolution(processor, path) -> int:
    """The square input size an image processor produces (probed on one blank image)."""
    from PIL import Image

    shapes = {tuple(processor(images=[Image.new("RGB", size, (128, 128, 128))], return_tensors="pt")
                    ["pixel_values"].shape[-2:]) for size in ((64, 48), (48, 64))}
    if len(shapes) != 1 or len({*next(iter(shapes))}) != 1:
        raise FormatError(f"the image processor gives inputs of varying or non-square size {sorted(shapes)}",
                          path=str(path), hint="use preprocessing 'resize' (--preprocessing resize) with a --resolution")
    return int(next(iter(shapes))[0])


def to_pixels(bb: Backbone, images) -> object:
    """PIL images -> normalised (B, 3, R, R) tensor on the backbone's device: through the
    checkpoint's image processor, or the plain resize (``bb.preprocessing``)."""
    torch = _torch()
    from PIL import Image

    if bb.processor is not None:
        x = bb.processor(images=[im.convert("RGB") for im in images], return_tensors="pt")["pixel_values"]
        return _layout(bb, x.to(bb.device, bb.dtype))
    arrs = []
    for im in images:
        im = im.convert("RGB").resize((bb.resolution, bb.resolution), Image.BICUBIC)
        arrs.append(np.asarray(im, dtype=np.float32) / 255.0)
    x = (np.stack(arrs) - np.asarray(bb.mean, np.float32)) / np.asarray(bb.std, np.float32)
    return _layout(bb, torch.from_numpy(x.transpose(0, 3, 1, 2).copy()).to(bb.device, bb.dtype))


def _layout(bb: Backbone, x):
    """Channels-last for convolutional backbones (the layout their weights were put in)."""
    torch = _torch()
    return x.contiguous(memory_format=torch.channels_last) if bb.conv else x


def embed(bb: Backbone, pixels, pooling: str = "cls", attention_mask=None) -> np.ndarray:
    """Pooled, L2-normalised float32 descriptors of a pixel batch."""
    torch = _torch()
    if pooling not in POOLINGS:
        raise InvalidArgumentError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
    kwargs = {"pixel_values": pixels}
    if attention_mask is not None:
        kwargs["attention_mask"] = attention_mask
    with torch.inference_mode():
        out = bb.model(**kwargs)
    if pooling == "pooled":
        if getattr(out, "pooler_output", None) is None:
            raise InvalidArgumentError(f"{bb.model_type} has no pooled output; use pooling 'cls' or 'mean'")
        v = out.pooler_output
    elif pooling == "cls":
        if bb.prefix_tokens == 0:
            raise InvalidArgumentError(f"{bb.model_type} has no CLS token; use pooling 'pooled' or 'mean'")
        v = out.last_hidden_state[:, 0]
    elif bb.conv:
        v = out.last_hidden_state.mean(dim=(2, 3))          # spatial mean of the last feature map
    else:
        v = out.last_hidden_state[:, bb.prefix_tokens:].mean(dim=1)
    v = v.float().cpu().numpy()
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def open_image(path, box=None):
    from PIL import Image
    try:
        im = Image.open(path)
        im.load()
    except Exception as exc:
        raise FormatError(f"cannot read image ({type(exc).__name__}: {exc})", path=str(path)) from None
    return im.crop(tuple(int(round(b)) for b in box)) if box is not None else im


@contextmanager
def quiet_weight_loading(quiet: bool):
    """transformers' own "Loading weights" bar off while ``quiet`` (``--no-progress``)."""
    from transformers.utils import logging as tf_logging

    was = tf_logging.is_progress_bar_enabled()
    if quiet and was:
        tf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if quiet and was:
            tf_logging.enable_progress_bar()


def extract(items, model_dir, out_dir, *, role: str, pooling: str = "cls", resolution: int | None = None,
            batch_size: int = 32, shard_size: int = 4096, intervention=None, device=None, progress: bool = True,
            meta: dict | None = None, lineage: bool = True, preprocessing: str = "auto"):
    """Descriptors of ``items`` — (id, image path, optional box) triples — into a descriptor set.

    ``intervention``: None, or a callable (backbone, [PIL images]) -> descriptors, e.g.
    ``interventions.GrayPad()`` (queries only). Finished shards are reused on a re-run with the
    same recipe (weights, image list, parameters); a folder made by another one is refused.
    ``preprocessing``: auto, processor or resize (module docstring); the choice made is recorded.
    The Ray engine (rscale.distributed.extraction) shares everything here but the loop over batches.
    """
    items = list(items)
    if not items:
        raise InvalidArgumentError("no images to extract")
    with quiet_weight_loading(not progress):
        bb = load_backbone(model_dir, resolution, device, preprocessing=preprocessing, inference=True)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plan = ExtractionPlan.of(items, model_dir, bb, role=role, pooling=pooling, batch_size=batch_size,
                             shard_size=shard_size, intervention=intervention, meta=meta)

    def shard_blocks():
        from rich.progress import Progress
        with Progress(disable=not progress, transient=True) as bar:
            task = bar.add_task(f"extracting {role}", total=len(items))
            for s, part in plan.shards():
                ids = np.asarray([it[0] for it in part])
                done = plan.finished(out_dir, s)
                if done is not None:                                # resume: this shard is done
                    bar.advance(task, len(part))
                    yield ids, done
                    continue
                vecs = []
                for b in range(0, len(part), batch_size):
                    batch = part[b:b + batch_size]
                    vecs.append(embed_items(bb, batch, pooling, intervention))
                    bar.advance(task, len(batch))
                yield ids, np.concatenate(vecs)

    return plan.write(out_dir, shard_blocks(), lineage=lineage)


def embed_items(bb: Backbone, batch, pooling: str, intervention=None) -> np.ndarray:
    """Descriptors of a batch of (id, path, optional box) items."""
    images = [open_image(p, box) for _, p, *rest in batch for box in [rest[0] if rest else None]]
    if intervention is None:
        return embed(bb, to_pixels(bb, images), pooling)
    return intervention(bb, images, pooling)


@dataclass
class ExtractionPlan:
    """What an extraction writes, whichever engine computes the vectors: the items cut into shards,
    the set's metadata and recipe, the lineage inputs and parameters."""

    items: list
    role: str
    shard_size: int
    inputs: dict
    record: dict
    recipe: dict
    params: dict

    @classmethod
    def of(cls, items, model_dir, bb: Backbone, *, role: str, pooling: str, batch_size: int, shard_size: int,
           intervention=None, meta: dict | None = None) -> "ExtractionPlan":
        from rscale.producers.lineage import weights_digest
        from rscale.store.hashing import digest_lines
        name = getattr(intervention, "name", "none") if intervention else "none"
        inputs = {"weights": weights_digest(model_dir),
                  "images": digest_lines(f"{it[0]}\t{Path(it[1]).name}\t{it[2] if len(it) > 2 else None}"
                                         for it in items)}
        record = {"backbone": Path(model_dir).name, "model_type": bb.model_type, "pooling": pooling,
                  "resolution": bb.resolution, "preprocessing": bb.preprocessing,
                  "image_processor": type(bb.processor).__name__ if bb.processor is not None else "none",
                  "intervention": name,
                  "intervention_params": getattr(intervention, "params", {}) if intervention else {},
                  "weights_sha256": inputs["weights"], "images_sha256": inputs["images"], **(meta or {})}
        from rscale.producers.lora import merged_lineage
        made_from = merged_lineage(model_dir)
        if made_from is not None:              # a LoRA-merged checkpoint: what it was trained from
            record["model_lineage"] = made_from
        # what determines the vectors: resuming a folder made by another recipe is refused
        recipe = {k: record[k] for k in ("model_type", "pooling", "resolution", "preprocessing", "intervention",
                                         "intervention_params", "weights_sha256", "images_sha256")}
        params = {"role": role, "pooling": pooling, "resolution": bb.resolution, "preprocessing": bb.preprocessing,
                  "intervention": name, "model_type": bb.model_type, "batch_size": batch_size, "count": len(items)}
        return cls(list(items), role, shard_size, inputs, record, recipe, params)

    def shards(self):
        """(shard index, its items) in order."""
        for s, a in enumerate(range(0, len(self.items), self.shard_size)):
            yield s, self.items[a:a + self.shard_size]

    def finished(self, out_dir, s: int, load: bool = True):
        """Shard ``s``'s vectors when an earlier run left it whole (None otherwise); ``load=False``
        answers True instead of reading them."""
        vec_path = Path(out_dir) / f"shard-{s:05d}.npy"
        id_path = Path(out_dir) / f"shard-{s:05d}.ids.parquet"
        if not (vec_path.exists() and id_path.exists()):
            return None
        done = np.load(vec_path, mmap_mode="r")
        if len(done) != len(self.items[s * self.shard_size:(s + 1) * self.shard_size]):
            return None
        return np.asarray(done, dtype=np.float32) if load else True

    def write(self, out_dir, blocks, *, lineage: bool = True):
        """Write the (ids, vectors) blocks as the descriptor set, inside the producer run."""
        from rscale.producers.lineage import digest_file, producer_run
        from rscale.store.descriptor_set import write_descriptor_set
        from rscale.store.run_sidecar import write_run_sidecar
        out_dir = Path(out_dir)
        with producer_run("extract", self.params, self.inputs, enabled=lineage) as run:
            ds = write_descriptor_set(out_dir, blocks, role=self.role, dtype="float32", meta=self.record,
                                      shard_size=self.shard_size, recipe=self.recipe)
            run.output("manifest", digest_file(out_dir / "manifest.json"))
            write_run_sidecar(out_dir / "manifest.json", "extract", run.run_id)
            run.metric("descriptors", ds.count)
        return ds


IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp")


def image_items(src) -> list:
    """(id, path, None) items of an image folder (every image below it, sorted; id = the path
    relative to the folder, without suffix) or of a list file (one path per line; id = the path as
    written, without suffix)."""
    src = Path(src)
    if src.is_dir():
        paths = sorted(p for p in src.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
        return [(str(p.relative_to(src).with_suffix("")), p, None) for p in paths]
    if src.is_file():
        paths = [Path(line.strip()) for line in src.read_text().splitlines() if line.strip()]
        return [(str(p.with_suffix("")), p, None) for p in paths]
    raise InvalidArgumentError(f"{src} is neither an image folder nor a list file")


def ilias_layout(root, crop_queries: bool = False):
    """Queries and positives of an ILIAS-style folder: ``<instance>/query/*.jpg`` (with optional
    ``*_bbox.txt`` holding x1 y1 x2 y2) and ``<instance>/pos/*.jpg`` (rscale.store.ilias_layout,
    docs/formats.md).

    Returns (queries, positives, qrels): item triples (id, path, box or None) and
    (query_id, positive_id) pairs. With ``crop_queries`` each query is cropped to its box (checked
    against the image: a box outside it is a FormatError naming the file).
    """
    from rscale.store import ilias_layout as layout

    queries, positives, qrels = [], [], []
    for inst in layout.instances(root):
        pos_ids = []
        for img in inst.positives:
            pid = layout.item_id(inst.name, "pos", img)
            positives.append((pid, img, None))
            pos_ids.append(pid)
        for img in inst.queries:
            box = None
            bbox_file = layout.box_path(img)
            if crop_queries and bbox_file.exists():
                box = layout.read_box(bbox_file, layout.image_size(img))
            qid = layout.item_id(inst.name, "query", img)
            queries.append((qid, img, box))
            qrels += [(qid, p) for p in pos_ids]
    return queries, positives, qrels
