"""The O2I LoRA fine-tune (`rscale train-lora`) and the walk from an artifact back to what trained
its backbone (`rscale lineage`).

Configuration: the ``lora:`` section of params.yaml. Its data keys (:data:`DATA_KEYS`) say what to
train on and where to write; every other key is a trainer parameter
(:class:`rscale.producers.lora.LoraParams`). Command-line options override both.

    lora:
      base: out/o2i-cache/backbones/mobilenet_v2_imagenet   # a local checkpoint folder (a missing folder
                                    # named mobilenet_v2_imagenet is converted there from the builtin weights)
      data: out/o2i                 # an image folder or list file, an ILIAS-layout folder (its gallery
                                    # side: every instance's pos/ images), or the O2I benchmark's renders:
                                    # an O2I output folder or render manifest (split by object)
      queries: null                 # evaluation queries kept out of training: an ILIAS-layout folder (its
                                    # query/ images) or an image folder / list file; refused by path and content
      evaluation: 40                # renders: objects held out of training (a count, or a share in (0, 1))
      split_seed: 0
      out: out/lora
      rank: 8                       # ... trainer parameters (docs/lora.md)

Lineage (:func:`model_lineage`): a registered version, a sample-stats file, a descriptor set, an
O2I output folder or a model folder -> the weights digest of the backbone that made it -> for a
LoRA-merged backbone, the base weights, adapter and training image list digests (carried in the
artifacts' metadata, so the registry alone reaches them) and, when the folders are found (the
O2I manifest's model path, or ``models=`` search folders), each re-hashed against them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from rscale.errors import FormatError, InvalidArgumentError

DATA_KEYS = ("base", "data", "queries", "evaluation", "split_seed", "out")
DATA_DEFAULTS = {"base": None, "data": None, "queries": None, "evaluation": 40, "split_seed": 0, "out": "out/lora"}


@dataclass(frozen=True)
class TrainLoraConfig:
    """What `rscale train-lora` runs: data and output (the section's :data:`DATA_KEYS`) and the
    trainer parameters (a LoraParams)."""

    base: str
    data: str                 # an image folder / list file, an ILIAS-layout folder, or an O2I output folder / render manifest
    evaluation: float
    split_seed: int
    out: Path
    params: object            # rscale.producers.lora.LoraParams
    queries: str | None = None   # evaluation queries never trained on (an ILIAS-layout folder, image folder or list)


def _value(text: str):
    """A ``key=value`` override's value, read as YAML (numbers, lists, null)."""
    import yaml
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def load_lora_config(path=None, *, overrides: dict | None = None, sets=()) -> TrainLoraConfig:
    """The ``lora:`` section of ``path`` (none: the defaults), then ``sets`` (``"key=value"``
    strings) and ``overrides`` (a dict; None values are ignored) on top."""
    from rscale.api.config import load_config
    from rscale.producers.lora import LoraParams

    section = {}
    if path is not None:
        section = load_config(path).get("lora") or {}
        if not isinstance(section, dict):
            raise FormatError("'lora:' must be a mapping of parameters", path=str(path))
        section = dict(section)
    for item in sets:
        key, eq, text = str(item).partition("=")
        if not eq or not key.strip():
            raise InvalidArgumentError(f"--set {item!r}: write key=value, e.g. --set rank=4")
        section[key.strip()] = _value(text)
    section.update({k: v for k, v in (overrides or {}).items() if v is not None})
    data_part = {**DATA_DEFAULTS, **{k: section.pop(k) for k in DATA_KEYS if k in section}}
    params = LoraParams.from_dict(section)           # unknown keys are refused by name here
    if not data_part["base"]:
        raise InvalidArgumentError("no base model: set lora.base in params.yaml or pass --base (a local "
                                   "transformers checkpoint folder)")
    if not data_part["data"]:
        raise InvalidArgumentError("no training data: set lora.data in params.yaml or pass --data (an image folder "
                                   "or list file, an ILIAS-layout folder, or an O2I output folder or render manifest)")
    evaluation = data_part["evaluation"]
    if isinstance(evaluation, bool) or not isinstance(evaluation, (int, float)) or evaluation <= 0:
        raise InvalidArgumentError(f"lora.evaluation must be a count >= 1 or a share in (0, 1) of the objects held "
                                   f"out of training, got {evaluation!r}")
    seed = data_part["split_seed"]
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InvalidArgumentError(f"lora.split_seed must be a whole number, got {seed!r}")
    queries = data_part["queries"]
    return TrainLoraConfig(str(data_part["base"]), str(data_part["data"]), evaluation, seed,
                           Path(str(data_part["out"])), params, None if queries in (None, "") else str(queries))


def resolve_base(base) -> Path:
    """A base checkpoint folder. A missing folder named after the builtin backbone
    (``mobilenet_v2_imagenet``, e.g. ``out/o2i-cache/backbones/mobilenet_v2_imagenet`` where
    `rscale o2i run` converts it) is converted there from the installed torchvision weights."""
    from rscale.api.o2i import BUILTIN_BACKBONES
    path = Path(base)
    if not path.exists() and path.name in BUILTIN_BACKBONES:
        from rscale.producers.mobilenet import convert_mobilenet_v2
        return convert_mobilenet_v2(path).path
    if not path.is_dir():
        raise FormatError("base model folder not found", path=str(path),
                          hint=f"give a local transformers checkpoint folder (or a folder named "
                               f"{', '.join(BUILTIN_BACKBONES)}: converted from the builtin weights)")
    return path


def render_manifest(data) -> Path | None:
    """The render manifest ``data`` names (an O2I output folder's, or a render manifest file), or
    None when ``data`` is an image folder or list file."""
    path = Path(data)
    if path.is_dir():
        if not (path / "manifest.json").is_file():
            return None
        from rscale.api.o2i import read_manifest
        return Path(read_manifest(path)["renders"]["manifest"])
    return path if path.suffix == ".parquet" else None


def train_lora(config: TrainLoraConfig, *, resume=None, progress=False, lineage: bool = True, device: str = "cpu",
               precision: str = "float32") -> dict:
    """Train and merge per ``config`` (see :func:`load_lora_config`); a summary of what was written.
    ``device`` / ``precision``: :func:`rscale.producers.lora.train_lora`'s (bfloat16 on a GPU).

    Every input is checked before anything is written: the base folder, the training images (all
    opened, none an evaluation query: :func:`rscale.producers.lora_data.training_source`), the
    targets and rank against the model, and a resumed checkpoint's base weights."""
    from rscale.producers import lora, lora_data

    out = config.out
    lora.check_device(device, precision)
    if out.exists() and not out.is_dir():
        raise InvalidArgumentError(f"--out {out} is a file; name a folder to write the model and adapter into")
    split, rs, images = None, None, config.data
    renders = render_manifest(config.data)
    if renders is not None:
        from rscale.producers.o2i import read_render_set
        rs = read_render_set(renders)
        split = lora_data.split_objects(rs.object_ids, config.evaluation, seed=config.split_seed)
        images = None
    if not Path(config.base).exists():
        # the builtin base is converted into place below: check the training images first, so a
        # refused run writes nothing (the trainer checks everything else before its first write)
        source = (lora_data.render_source(rs, split, config.queries) if rs is not None
                  else lora_data.training_source(images, config.queries))
        lora_data.training_images(source.paths)
    base = resolve_base(config.base)
    res = lora.train_lora(base, images, out, config.params, render_set=rs, split=split, queries=config.queries,
                          resume_from=resume,
                          lineage=lineage, progress=progress, device=device, precision=precision)
    man = res.manifest
    summary = {"out": str(out), "model": str(res.model_dir), "adapter": str(res.adapter_dir),
               "base": str(base), "steps": man["steps"], "resumed_from": res.resumed_from,
               "loss_first": man["loss"]["first"], "loss_last": man["loss"]["last"],
               "merged_weights": man["merged_weights"], "adapter_sha256": man["adapter"],
               "base_weights": man["base"]["weights_sha256"], "training_list_sha256": man["training_list_sha256"],
               "images": man["params"]["images"], "source": man["training_source"],
               "targets": man["params"]["targets"], "mlflow_run_id": res.run_id,
               "device": device, "precision": precision}
    if split is not None:
        summary["split"] = {"train": len(split.train), "evaluation": len(split.evaluation), "seed": split.seed}
    return summary


# ---------------------------------------------------------------- lineage

def _split_digest(split: dict) -> str:
    """The digest train_lora records for a split.json (``side<TAB>object`` lines)."""
    from rscale.store.hashing import digest_lines
    return digest_lines(f"{side}\t{o}" for side in ("train", "evaluation") for o in split.get(side, []))


def _find_models(roots, digest: str) -> Path | None:
    """The first folder under ``roots`` (depth <= 3) whose weights digest is ``digest``."""
    from rscale.producers.lineage import weights_digest
    from rscale.producers.lora import MANIFEST
    for root in roots:
        root = Path(root)
        candidates = [root] + [p.parent for depth in ("*", "*/*", "*/*/*") for p in root.glob(f"{depth}/{MANIFEST}")]
        for folder in candidates:
            if (folder / "config.json").is_file() and weights_digest(folder) == digest:
                return folder
    return None


def _check(entry: dict, path: Path | None, digest_of) -> dict:
    """``entry`` with ``path`` and ``verified`` (the file/folder re-hashed) when ``path`` exists."""
    if path is None or not path.exists():
        return {**entry, "path": None, "verified": False}
    got = digest_of(path)
    out = {**entry, "path": str(path), "verified": got == entry.get("sha256")}
    if not out["verified"]:
        out["found_sha256"] = got
    return out


def _walk_model(digest: str, folder: Path | None, embedded: dict | None, roots=()) -> dict:
    """One backbone's lineage: its weights, and for a LoRA-merged one the base, adapter, list, split."""
    from rscale.producers.lineage import weights_digest
    from rscale.producers.lora import MANIFEST, TRAINING_LIST, MERGED_KIND
    from rscale.store.hashing import digest_lines

    if folder is None and roots:
        folder = _find_models(roots, digest)
    out = _check({"sha256": digest}, folder, weights_digest)
    man = None
    if folder is not None and (folder / MANIFEST).is_file():
        try:
            man = json.loads((folder / MANIFEST).read_text())
        except ValueError:
            man = None
        if not isinstance(man, dict) or man.get("kind") != MERGED_KIND:
            man = None
    if man is None and not embedded:
        return {"weights": out, "lora": False}
    made = {"base_weights_sha256": (man or {}).get("base", {}).get("weights_sha256"),
            "adapter_sha256": (man or {}).get("adapter_sha256"),
            "training_list_sha256": (man or {}).get("training_list_sha256"),
            "split_sha256": (man or {}).get("split_sha256")} if man else dict(embedded)
    result = {"weights": out, "lora": True}
    if man and embedded:
        differ = sorted(k for k in made if k in embedded and embedded[k] != made[k])
        if differ:
            result["conflict"] = (f"the artifact's metadata and {folder / MANIFEST} disagree on {', '.join(differ)}: "
                                  "the folder is not the model that made this artifact")
    train_dir = folder.parent if folder is not None else None
    base_path = None
    if man and man.get("base", {}).get("path"):
        base_path = Path(os.path.normpath(folder / man["base"]["path"]))
    result["base_weights"] = _check({"sha256": made["base_weights_sha256"]}, base_path, weights_digest)
    result["adapter"] = _check({"sha256": made["adapter_sha256"]},
                               train_dir / "adapter" if train_dir is not None else None, weights_digest)

    def list_digest(path):
        rows = [ln.split("\t") for ln in path.read_text().splitlines()[1:] if ln]
        return digest_lines(f"{r[0]}\t{r[1]}" for r in rows if len(r) >= 2)
    listing = train_dir / TRAINING_LIST if train_dir is not None else None
    result["training_list"] = _check({"sha256": made["training_list_sha256"]}, listing, list_digest)
    source = (man or {}).get("training_source") or ({"kind": made["training_source"]}
                                                    if made.get("training_source") else None)
    if source:
        result["training_list"]["source"] = source
    if result["training_list"]["path"]:
        rows = [ln.split("\t") for ln in listing.read_text().splitlines()[1:] if ln]
        result["training_list"]["images"] = len(rows)
        result["training_list"]["first"] = [os.path.normpath(train_dir / r[2]) if len(r) > 2 else r[0]
                                            for r in rows[:3]]
    if made.get("split_sha256"):
        split_file = train_dir / "split.json" if train_dir is not None else None
        result["split"] = _check({"sha256": made["split_sha256"]}, split_file,
                                 lambda p: _split_digest(json.loads(p.read_text())))
        if result["split"]["verified"]:
            split = json.loads(split_file.read_text())
            result["split"].update({"train_objects": split["train"], "evaluation_objects": split["evaluation"]})
    if man:
        result["manifest"] = str(folder / MANIFEST)
        result["params"] = man.get("params", {})
    return result


def _embedded(meta: dict) -> dict | None:
    raw = meta.get("model_lineage")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return None
    return raw if isinstance(raw, dict) else None


def model_lineage(source, *, registry=None, models=(), benchmark=None, estimator=None) -> dict:
    """From an artifact back to the backbone that made it and, for a LoRA-merged backbone, to its
    base weights, adapter and training image list.

    ``source``: a registry reference (``NAME[@VERSION]``), a sample-stats Parquet file, a
    descriptor-set folder, an O2I output folder or a model folder. ``models``: folders searched
    (depth <= 3) for the checkpoint whose weights digest the artifact names, to re-hash the base,
    adapter and list folders next to it. Returns ``{"source", "kind", "backbones": {name: walk}}``;
    each walk has ``weights`` and, when ``lora`` is true, ``base_weights``, ``adapter``,
    ``training_list`` (and ``split``), each ``{"sha256", "path", "verified"}``.
    """
    from rscale.producers.lora import MANIFEST

    path = Path(str(source))
    if not path.exists():
        from rscale.api.registry import lineage
        lin = lineage(str(source), registry, benchmark=benchmark, estimator=estimator)
        meta = lin["inputs"].get("sample", {}).get("meta")
        if not meta or not meta.get("weights_sha256"):
            raise InvalidArgumentError(f"{lin['ref']} records no backbone weights (registered without sample stats "
                                       "from `rscale score`, or from simulated descriptors): nothing to walk back to")
        return {"source": lin["ref"], "kind": "registry version", "version": lin,
                "backbones": {meta.get("backbone", "distractors"):
                              _walk_model(meta["weights_sha256"], None, _embedded(meta), models)}}
    if path.is_file():
        from rscale.store.sample_stats_file import meta_object
        import pyarrow.parquet as pq
        try:
            md = {k.decode(): v.decode() for k, v in (pq.read_schema(path).metadata or {}).items()}
        except Exception as exc:
            raise FormatError(f"not a Parquet file ({type(exc).__name__})", path=str(path),
                              hint="give a sample-stats file, a descriptor set, an O2I output or a model folder") from None
        meta = meta_object(md, str(path))
        if not meta.get("weights_sha256"):
            raise FormatError("no weights_sha256 in the file's rscale.meta: not sample stats scored from an "
                              "extracted descriptor set", path=str(path))
        return {"source": str(path), "kind": "sample stats",
                "backbones": {meta.get("backbone", "distractors"):
                              _walk_model(meta["weights_sha256"], None, _embedded(meta), models)}}
    if (path / "config.json").is_file() or (path / "model" / MANIFEST).is_file():
        from rscale.producers.lineage import weights_digest
        folder = path if (path / "config.json").is_file() else path / "model"
        return {"source": str(path), "kind": "model",
                "backbones": {folder.parent.name if folder.name == "model" else folder.name:
                              _walk_model(weights_digest(folder), folder, None, models)}}
    manifest = path / "manifest.json"
    try:
        man = json.loads(manifest.read_text())
    except (OSError, ValueError):
        raise FormatError("no readable manifest.json: not a descriptor set, O2I output or model folder",
                          path=str(path)) from None
    if man.get("format") == "rscale-o2i":
        walks = {}
        for name, b in sorted(man.get("backbones", {}).items()):
            folder = Path(b["path"]) if b.get("path") else None
            walks[name] = _walk_model(b["weights"], folder if folder is not None and folder.is_dir() else None,
                                      None, models)
            split = walks[name].get("split", {})
            if split.get("train_objects") is not None:
                overlap = sorted(set(split["train_objects"]) & set(man.get("assets", {})))
                walks[name]["trained_on_evaluated_objects"] = overlap
        return {"source": str(path), "kind": "o2i output", "backbones": walks}
    if man.get("weights_sha256"):
        return {"source": str(path), "kind": "descriptor set",
                "backbones": {man.get("backbone", path.name):
                              _walk_model(man["weights_sha256"], None, _embedded(man), models)}}
    raise FormatError("the manifest names no backbone weights (weights_sha256)", path=str(manifest))
