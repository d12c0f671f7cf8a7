"""O2I-robust LoRA fine-tune of a vision backbone (O2I paper, section 5.4, App. M), through peft.

Objective. The student is the backbone with LoRA adapters on; it sees a gray-padded, lower-O2I
view of a training image (the image shrunk by ``s`` on a gray canvas of its size, ``s``
log-uniform on ``scale_range``; for a ViT-family backbone pooled on its CLS token also the MSA
attention mask that hides the gray canvas from the CLS row: :mod:`rscale.producers.lora_data`).
The teacher is the same model with the adapters off (``PeftModel.disable_adapter()``: no second
copy of the weights) on the canonical view, the image itself. With L2-normalised descriptors
u (student) and v (teacher), the loss of a batch is mean(1 - u.v). The target is the frozen
model's own descriptor space, so a gallery indexed with the base model stays usable.

Adapters. LoRA (peft's defaults: A Kaiming-uniform, B = 0, so a fresh adapter changes nothing)
on the modules :data:`TARGETS` names per architecture family. transformers 5 renamed the ViT and
DINOv2 attention projections ``q_proj/k_proj/v_proj/o_proj`` (``query/key/value`` and
``attention.output.dense`` before); each family lists both layouts and the first one the model has
is used. MobileNetV2: the 1x1 convolutions (expand, project, and the last 320 -> 1280 conv that
makes the descriptor): they hold 96% of the weights and all of the channel mixing; the 3x3
depthwise convolutions act per channel (in = 1 per group, so a LoRA update of rank r > 1 is
not a low-rank factor of anything) and are left frozen. BatchNorm statistics stay frozen (the
model is in eval mode; only the LoRA dropout layers train), so the teacher is exactly the base model.

Outputs under ``out_dir``::

    model/         the merged model (``merge_and_unload``): config.json, model.safetensors, the base's
                   preprocessor_config.json and rscale_manifest.json; load it with
                   rscale.producers.extract.load_backbone like any backbone
    adapter/       the peft adapter alone (adapter_config.json, adapter_model.safetensors)
    checkpoints/step-<n>/   adapter weights, optimizer state, step and the run's identity (resumable)
    train_log.tsv  step, loss, lr
    training_list.tsv   the training images: name, sha256, path (relative to ``out_dir``); its
                   name and sha256 columns hash (store.hashing.digest_lines) to the manifest's
                   ``training_list_sha256``
    split.json     the split by object (render-set training only)

Precision. ``precision="float32"`` (the default; CPU) or ``"bfloat16"``: the teacher and student
forward passes run under ``torch.autocast`` in bfloat16 (on a GPU: ``device="cuda"``) while the
base weights, the adapters, the optimizer state and the loss stay float32, so the merge is the
same float32 sum ``W + (alpha / r) B A`` (benchmarks/gpu_check.py compares the two on a GPU).

Every step logs ``loss`` and ``lr`` to MLflow (rscale.producers.lineage) with the params, the
input digests (base weights, training list) and the output digests (merged weights, adapter).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

from rscale.errors import FormatError, InvalidArgumentError, MissingExtraError
from rscale.store.checkpoint_manifest import NAME as CHECKPOINT_MANIFEST

MANIFEST = CHECKPOINT_MANIFEST          # one name for rscale's checkpoint manifests, told apart by kind
MERGED_KIND = "rscale.backbone.lora_merged"
CHECKPOINT_STATE = "state.json"
TRAINING_LIST = "training_list.tsv"
PRECISIONS = ("float32", "bfloat16")       # bfloat16: autocast forward passes, float32 weights (docstring)

# model_type -> alternative target layouts (module-name suffixes, peft's matching rule); the first
# layout whose every name matches some Linear / Conv2d of the model is used.
TARGETS = {
    "vit": (("query", "value"), ("q_proj", "v_proj")),
    "dinov2": (("query", "key", "value", "attention.output.dense"), ("q_proj", "k_proj", "v_proj", "o_proj")),
    "dinov3_vit": (("q_proj", "k_proj", "v_proj", "o_proj"),),
    "clip": (("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj"),),
    "clip_vision_model": (("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj"),),
    "siglip": (("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj"),),
    "siglip_vision_model": (("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj"),),
    "mobilenet_v2": (("expand_1x1.convolution", "reduce_1x1.convolution", "conv_1x1.convolution"),),
}


@dataclass(frozen=True)
class LoraParams:
    """The ``lora:`` section of params.yaml. ``targets`` None: the family's :data:`TARGETS`;
    ``pooling`` None: ``cls`` with a CLS token, else ``pooled``."""

    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    targets: tuple | None = None
    lr: float = 1e-3
    weight_decay: float = 0.0
    warmup_steps: int = 10
    steps: int = 200
    batch_size: int = 16
    scale_range: tuple = (0.25, 1.0)
    mask: bool = True                 # MSA attention mask on the student view (ViT family, CLS pooling)
    pooling: str | None = None
    resolution: int | None = None
    seed: int = 0
    checkpoint_every: int = 50

    def __post_init__(self):
        if self.targets is not None:
            object.__setattr__(self, "targets", tuple(str(t) for t in self.targets))
        object.__setattr__(self, "scale_range", tuple(float(s) for s in self.scale_range))
        self.validate()

    def validate(self) -> None:
        def need(ok, what):
            if not ok:
                raise InvalidArgumentError(f"lora: {what}")
        need(int(self.rank) == self.rank and self.rank >= 1, f"rank must be an integer >= 1, got {self.rank}")
        need(self.alpha > 0, f"alpha must be > 0, got {self.alpha}")
        need(0 <= self.dropout < 1, f"dropout must lie in [0, 1), got {self.dropout}")
        need(self.lr > 0 and np.isfinite(self.lr), f"lr must be > 0, got {self.lr}")
        need(self.steps >= 1 and self.batch_size >= 1, f"steps and batch_size must be >= 1, got {self.steps}, "
             f"{self.batch_size}")
        need(self.warmup_steps >= 0 and self.checkpoint_every >= 1, "warmup_steps must be >= 0 and checkpoint_every >= 1")
        lo, hi = self.scale_range if len(self.scale_range) == 2 else (0, 0)
        need(len(self.scale_range) == 2 and 0 < lo <= hi <= 1,
             f"scale_range must be (low, high) with 0 < low <= high <= 1, got {list(self.scale_range)}")
        need(self.targets is None or len(self.targets) > 0, "targets must name at least one module (or be omitted)")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["targets"] = list(self.targets) if self.targets is not None else None
        d["scale_range"] = list(self.scale_range)
        return d

    @classmethod
    def from_dict(cls, params: dict | None) -> "LoraParams":
        """From params.yaml's ``lora:`` section; unknown keys are refused by name."""
        params = dict(params or {})
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(params) - set(known))
        if unknown:
            raise InvalidArgumentError(f"unknown lora parameter(s) {unknown} (known: {', '.join(known)})")
        return cls(**params)


def _modules():
    try:
        import peft
        import torch
    except ImportError:
        raise MissingExtraError("peft and torch", "lora") from None
    return torch, peft


def merged_lineage(model_dir) -> dict | None:
    """What a merged checkpoint was made from, from its manifest: ``{"kind", "base_weights_sha256",
    "adapter_sha256", "training_list_sha256", "split_sha256", "training_source"}`` (the last the
    source's kind, lora_data.SOURCE_KINDS); None for any other checkpoint.
    The extractor copies it into each descriptor set's manifest and scoring into the sample stats,
    so a registered version names the base weights, adapter and training list without the folders."""
    path = Path(model_dir) / MANIFEST
    try:
        man = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(man, dict) or man.get("kind") != MERGED_KIND:
        return None
    return {"kind": MERGED_KIND, "base_weights_sha256": man.get("base", {}).get("weights_sha256"),
            "adapter_sha256": man.get("adapter_sha256"), "training_list_sha256": man.get("training_list_sha256"),
            "split_sha256": man.get("split_sha256"),
            "training_source": (man.get("training_source") or {}).get("kind")}


def check_device(device: str, precision: str) -> None:
    """Refuse an unknown precision, or a CUDA device where none is visible."""
    if precision not in PRECISIONS:
        raise InvalidArgumentError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if str(device).startswith("cuda"):
        torch, _ = _modules()
        if not torch.cuda.is_available():
            raise InvalidArgumentError(f"device {device!r}: no CUDA device is visible here; use device cpu")


# ---------------------------------------------------------------- targets

def _adaptable(model) -> dict:
    """{module name: module} of the layer types peft's LoRA adapts here (Linear, Conv2d)."""
    torch, _ = _modules()
    return {n: m for n, m in model.named_modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))}


def _matches(name: str, target: str) -> bool:
    return name == target or name.endswith("." + target)      # peft's rule for a list of names


def _suffixes(names) -> list[str]:
    """Short names a user can pass: the last two components of each module name, deduplicated."""
    return sorted({".".join(n.split(".")[-2:]) if not n.split(".")[-1].isdigit() else n for n in names})


def resolve_targets(model, model_type: str, targets=None) -> tuple:
    """The target module names for ``model``: ``targets`` when given (each must match a Linear or
    Conv2d), else the family's first layout in :data:`TARGETS` that the model has."""
    layers = _adaptable(model)
    if targets is None:
        layouts = TARGETS.get(model_type)
        if layouts is None:
            raise InvalidArgumentError(f"no default LoRA targets for model type {model_type!r} (defaults for: "
                                       f"{', '.join(sorted(TARGETS))}); name them with lora.targets, e.g. "
                                       f"{_suffixes(layers)[:8]}")
        for layout in layouts:
            if all(any(_matches(n, t) for n in layers) for t in layout):
                return tuple(layout)
        targets = layouts[-1]                                   # report what is missing below
    missing = [t for t in targets if not any(_matches(n, t) for n in layers)]
    if missing:
        raise InvalidArgumentError(f"lora.targets {missing} match no Linear or Conv2d module of this {model_type} "
                                   f"model; its modules include: {', '.join(_suffixes(layers)[:24])}")
    return tuple(targets)


def check_rank(model, targets, rank: int) -> None:
    """Refuse a rank above the smallest matched layer's min(fan-in, fan-out)."""
    torch, _ = _modules()
    for name, m in _adaptable(model).items():
        if not any(_matches(name, t) for t in targets):
            continue
        if isinstance(m, torch.nn.Conv2d):
            fan_in = m.in_channels // m.groups * m.kernel_size[0] * m.kernel_size[1]
            limit = min(fan_in, m.out_channels)
        else:
            limit = min(m.in_features, m.out_features)
        if rank > limit:
            raise InvalidArgumentError(f"lora.rank {rank} exceeds layer {name} ({type(m).__name__}, "
                                       f"min(fan-in, fan-out) = {limit}); use rank <= {limit} or drop that target")


# ---------------------------------------------------------------- the model

def student_descriptors(model, pixels, pooling: str, prefix_tokens: int, attention_mask=None):
    """L2-normalised float32 descriptors with gradients; the same pooling as
    :func:`rscale.producers.extract.embed` (whose inference-mode results the tests compare)."""
    torch, _ = _modules()
    kwargs = {"pixel_values": pixels}
    if attention_mask is not None:
        kwargs["attention_mask"] = attention_mask
    out = model(**kwargs)
    if pooling == "pooled":
        v = out.pooler_output
    elif pooling == "cls":
        v = out.last_hidden_state[:, 0]
    elif out.last_hidden_state.ndim == 4:
        v = out.last_hidden_state.mean(dim=(2, 3))
    else:
        v = out.last_hidden_state[:, prefix_tokens:].mean(dim=1)
    return torch.nn.functional.normalize(v.float(), dim=1)


def _pooling(bb, params: LoraParams) -> str:
    from rscale.producers.extract import POOLINGS
    pooling = params.pooling or ("cls" if bb.prefix_tokens else "pooled")
    if pooling not in POOLINGS:
        raise InvalidArgumentError(f"lora.pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
    if pooling == "cls" and bb.prefix_tokens == 0:
        raise InvalidArgumentError(f"{bb.model_type} has no CLS token; set lora.pooling to 'pooled' or 'mean'")
    return pooling


def adapt(bb, params: LoraParams):
    """Wrap ``bb.model`` in a peft LoRA model (in place: ``bb.model`` becomes the PeftModel)."""
    torch, peft = _modules()
    targets = resolve_targets(bb.model, bb.model_type, params.targets)
    check_rank(bb.model, targets, int(params.rank))
    torch.manual_seed(int(params.seed))                        # the A matrices' initialisation
    config = peft.LoraConfig(r=int(params.rank), lora_alpha=float(params.alpha), lora_dropout=float(params.dropout),
                             target_modules=list(targets), bias="none")
    import warnings
    with warnings.catch_warnings():            # peft asks transformers 5 a deprecated question; not ours to fix
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing", category=FutureWarning)
        bb.model = peft.get_peft_model(bb.model, config)
    bb.model.eval()
    return targets


def _train_mode(model) -> None:
    """Eval mode everywhere (frozen BatchNorm statistics, no backbone dropout) but LoRA's dropout."""
    model.eval()
    for name, m in model.named_modules():
        if name.endswith("lora_dropout") or ".lora_dropout." in name:
            m.train()


def adapter_state(model) -> dict:
    from peft import get_peft_model_state_dict
    return {k: v.detach().cpu().contiguous() for k, v in get_peft_model_state_dict(model).items()}


def learning_rate(step: int, params: LoraParams) -> float:
    """Linear warm-up over ``warmup_steps``, then cosine decay to 0 at ``steps`` (step is 0-based)."""
    if step < params.warmup_steps:
        return float(params.lr * (step + 1) / params.warmup_steps)
    span = max(1, params.steps - params.warmup_steps)
    return float(0.5 * params.lr * (1 + np.cos(np.pi * min(1.0, (step - params.warmup_steps) / span))))


# ---------------------------------------------------------------- checkpoints

def _atomic_dir(final: Path, write) -> None:
    """Build a folder next to ``final`` with ``write(tmp)``, then rename it into place."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        write(tmp)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _identity(base_digest: str, list_digest: str, params: LoraParams) -> dict:
    """What a checkpoint must share with the run that resumes it (steps may grow)."""
    p = params.to_dict()
    for k in ("steps", "checkpoint_every"):
        p.pop(k)
    return {"base_weights": base_digest, "training_list": list_digest, "params": p}


def save_checkpoint(folder: Path, model, optimizer, step: int, identity: dict, log: list) -> None:
    torch, _ = _modules()
    from safetensors.torch import save_file

    def write(tmp):
        save_file(adapter_state(model), str(tmp / "adapter.safetensors"))
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        (tmp / CHECKPOINT_STATE).write_text(json.dumps({"step": step, **identity, "log": log}, sort_keys=True) + "\n")
    _atomic_dir(folder / f"step-{step:06d}", write)
    for old in sorted(folder.glob("step-*")):                  # keep the newest only
        if old.name != f"step-{step:06d}":
            shutil.rmtree(old, ignore_errors=True)


def latest_checkpoint(folder: Path) -> Path | None:
    found = sorted(p for p in Path(folder).glob("step-*") if (p / CHECKPOINT_STATE).is_file())
    return found[-1] if found else None


def read_checkpoint(path: Path, identity: dict) -> dict:
    """The checkpoint's state; refuses one made from other base weights, data or adapter params."""
    try:
        state = json.loads((Path(path) / CHECKPOINT_STATE).read_text())
    except (OSError, ValueError) as exc:
        raise FormatError(f"not a LoRA checkpoint ({type(exc).__name__})", path=str(path)) from None
    if state.get("base_weights") != identity["base_weights"]:
        raise InvalidArgumentError(f"checkpoint {path} was trained from base weights {state.get('base_weights')}, "
                                   f"this base model is {identity['base_weights']}: resume with the same base "
                                   "model, or start afresh in another output folder")
    for key in ("training_list", "params"):
        if state.get(key) != identity[key]:
            raise InvalidArgumentError(f"checkpoint {path} has another {key.replace('_', ' ')} than this run "
                                       f"({state.get(key)} vs {identity[key]}); resume with the same inputs "
                                       "or start afresh in another output folder")
    return state


# ---------------------------------------------------------------- training

@dataclass(frozen=True)
class LoraResult:
    model_dir: Path               # merged checkpoint, loadable by extract.load_backbone
    adapter_dir: Path
    manifest: dict
    losses: tuple                 # per step, from step 0 (resumed runs include the earlier steps)
    run_id: str | None
    resumed_from: int             # 0 for a fresh run


def train_lora(base_dir, images, out_dir, params: LoraParams | dict | None = None, *, render_set=None,
               split=None, queries=None, resume_from=None, device: str = "cpu", precision: str = "float32",
               lineage: bool = True, progress=False) -> LoraResult:
    """Train LoRA adapters on ``base_dir`` (a transformers checkpoint folder) and write the merged
    model, the adapter and a manifest under ``out_dir`` (module docstring).

    ``images``: an image folder, a list file, a list of paths or an ILIAS-layout folder (its
    gallery side); or None with ``render_set`` (an O2I RenderSet) and ``split`` (an ObjectSplit):
    the renders of ``split.train`` only. ``queries``: evaluation query images to keep out (an
    ILIAS-layout folder's queries, or a folder / list); a training image that is one of them (or an
    ILIAS root's own query) by path or content is refused (:func:`lora_data.training_source`).
    ``resume_from``: a checkpoint folder; default the newest under ``out_dir/checkpoints``, if any.
    ``device``: a torch device ("cpu", "cuda"); ``precision``: one of :data:`PRECISIONS` (the
    module docstring). Bad input (targets, rank, weights, unreadable images, a checkpoint of
    another base) raises an RscaleError before anything is written. ``progress``: True prints a line per step; a callable
    gets ``(step, steps, loss, lr)`` after each step (step counted from 1).
    """
    torch, _ = _modules()
    from rscale.producers import lora_data
    from rscale.producers.extract import quiet_weight_loading, load_backbone, to_pixels
    from rscale.producers.lineage import digest_lines, producer_run, weights_digest

    params = params if isinstance(params, LoraParams) else LoraParams.from_dict(params)
    base_dir, out_dir = Path(base_dir), Path(out_dir)
    check_device(device, precision)
    if render_set is not None:
        if split is None:
            raise InvalidArgumentError("training on a render set needs a split by object (lora_data.split_objects)")
        source = lora_data.render_source(render_set, split, queries)
    elif images is None:
        raise InvalidArgumentError("give training images (a folder, a list file, paths or an ILIAS-layout folder) "
                                   "or a render set")
    else:
        source = lora_data.training_source(images, queries)
    paths = list(source.paths)

    # Everything that can refuse the run comes before the first write.
    with quiet_weight_loading(True):                 # transformers' progress bars: a refused run prints one line
        bb = load_backbone(base_dir, params.resolution, device, dtype=torch.float32)
    pooling = _pooling(bb, params)
    mask = bool(params.mask and pooling == "cls" and bb.prefix_tokens > 0)
    pictures = lora_data.training_images(paths)
    base_digest = weights_digest(base_dir)
    list_lines = lora_data.list_digest_lines(paths)
    list_digest = digest_lines(list_lines)
    identity = _identity(base_digest, list_digest, params)
    resume = Path(resume_from) if resume_from is not None else latest_checkpoint(out_dir / "checkpoints")
    state = read_checkpoint(resume, identity) if resume is not None else None
    if state is not None and state["step"] > params.steps:
        raise InvalidArgumentError(f"checkpoint {resume} is at step {state['step']}, beyond lora.steps = {params.steps}")
    targets = adapt(bb, params)
    model = bb.model
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=params.lr, weight_decay=params.weight_decay)
    start, log = 0, []
    if state is not None:
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file
        set_peft_model_state_dict(model, load_file(str(resume / "adapter.safetensors")))
        optimizer.load_state_dict(torch.load(resume / "optimizer.pt", weights_only=True))
        start, log = int(state["step"]), [tuple(r) for r in state["log"]]

    run_params = {**params.to_dict(), "targets": list(targets), "pooling": pooling, "mask": mask,
                  "model_type": bb.model_type, "images": len(paths), "source": source.kind, "resumed_from": start,
                  "precision": precision, "device": str(device)}
    import contextlib
    autocast = ((lambda: torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16))
                if precision == "bfloat16" else contextlib.nullcontext)
    inputs = {"base_weights": base_digest, "training_list": list_digest}
    source_record = source.lineage()
    if source_record["location"]:                # seen from out_dir, like the training list's paths
        source_record["location"] = os.path.relpath(Path(source_record["location"]).resolve(), out_dir.resolve())
    if source_record["excluded_queries_sha256"]:
        inputs["excluded_queries"] = source_record["excluded_queries_sha256"]
    if split is not None:
        inputs["split"] = digest_lines(f"{side}\t{o}" for side, ids in (("train", split.train),
                                                                        ("evaluation", split.evaluation)) for o in ids)
    out_dir.mkdir(parents=True, exist_ok=True)
    with producer_run("train-lora", run_params, inputs, enabled=lineage) as run:
        for step in range(start, params.steps):
            lr = learning_rate(step, params)
            for g in optimizer.param_groups:
                g["lr"] = lr
            rng = np.random.default_rng([int(params.seed), step])   # a step's batch depends on (seed, step) only
            idx = rng.integers(0, len(pictures), size=params.batch_size)
            scales = lora_data.draw_scales(rng, params.batch_size, params.scale_range)
            torch.manual_seed(int(rng.integers(2**31)))             # LoRA dropout: the same on a resumed run
            canonical = [pictures[i] for i in idx]
            views = [lora_data.student_view(bb, im, s, mask) for im, s in zip(canonical, scales)]
            with torch.no_grad(), model.disable_adapter(), autocast():
                teacher = student_descriptors(model, to_pixels(bb, canonical), pooling, bb.prefix_tokens)
            masks = torch.cat([m for _, m in views]).to(device) if mask else None
            _train_mode(model)
            with autocast():
                student = student_descriptors(model, to_pixels(bb, [v for v, _ in views]), pooling, bb.prefix_tokens,
                                              masks)
            loss = (1.0 - (student * teacher).sum(dim=1)).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            model.eval()
            log.append((step, float(loss.detach()), float(lr)))
            run.metric("loss", log[-1][1], step=step)
            run.metric("lr", lr, step=step)
            if callable(progress):
                progress(step + 1, params.steps, log[-1][1], lr)
            elif progress:
                print(f"step {step + 1}/{params.steps} loss {log[-1][1]:.5f} lr {lr:.2e}", flush=True)
            if (step + 1) % params.checkpoint_every == 0 or step + 1 == params.steps:
                save_checkpoint(out_dir / "checkpoints", model, optimizer, step + 1, identity, log)
        with quiet_weight_loading(True):
            manifest = _write_outputs(out_dir, base_dir, bb, model, params, run_params, inputs, log, split,
                                      list(zip(list_lines, paths)), source_record)
        run.output("merged_weights", manifest["merged_weights"])
        run.output("adapter", manifest["adapter"])
        run.metric("final_loss", log[-1][1])
    return LoraResult(out_dir / "model", out_dir / "adapter", manifest, tuple(r[1] for r in log), run.run_id, start)


def _write_outputs(out_dir, base_dir, bb, model, params, run_params, inputs, log, split, listed, source) -> dict:
    """The adapter, the train log, the training list, then the merged model with its manifest
    (each folder atomic)."""
    from rscale.producers.lineage import digest_file, weights_digest

    def write_adapter(tmp):
        model.save_pretrained(tmp)
        # peft keeps target_modules as a set and writes it in hash order, which differs from process
        # to process (PYTHONHASHSEED): sorted, the same training gives the same adapter digest
        config = tmp / "adapter_config.json"
        cfg = json.loads(config.read_text())
        if isinstance(cfg.get("target_modules"), list):
            cfg["target_modules"] = sorted(cfg["target_modules"])
        config.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    _atomic_dir(out_dir / "adapter", write_adapter)
    adapter_digest = weights_digest(out_dir / "adapter")
    (out_dir / "train_log.tsv").write_text("step\tloss\tlr\n" + "".join(f"{s}\t{l:.8g}\t{r:.8g}\n" for s, l, r in log))
    listing = [f"{line}\t{os.path.relpath(Path(p).resolve(), out_dir.resolve())}"
               for line, p in listed]
    (out_dir / TRAINING_LIST).write_text("name\tsha256\tpath\n" + "".join(f"{line}\n" for line in listing))
    if split is not None:
        (out_dir / "split.json").write_text(json.dumps(split.to_dict(), indent=1, sort_keys=True) + "\n")
    merged = model.merge_and_unload()
    bb.model = merged

    def write(tmp):
        merged.save_pretrained(tmp)       # transformers' own layout (its key renames included)
        pre = base_dir / "preprocessor_config.json"
        if pre.exists():
            shutil.copyfile(pre, tmp / "preprocessor_config.json")
        files = {p.name: digest_file(p) for p in sorted(tmp.iterdir()) if p.is_file()}
        manifest = {"schema": 1, "kind": MERGED_KIND, "model_type": bb.model_type,
                    "base": {"folder": base_dir.name, "weights_sha256": inputs["base_weights"],
                             # where the base was, seen from this folder (lineage re-hashes it there)
                             "path": os.path.relpath(base_dir.resolve(), (out_dir / "model").resolve())},
                    "adapter_sha256": adapter_digest, "training_list_sha256": inputs["training_list"],
                    "split_sha256": inputs.get("split"), "training_source": source, "params": run_params,
                    "files": files,
                    "steps": len(log), "loss": {"first": log[0][1], "last": log[-1][1]}}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    _atomic_dir(out_dir / "model", write)
    manifest = json.loads((out_dir / "model" / MANIFEST).read_text())
    manifest["merged_weights"] = weights_digest(out_dir / "model")
    manifest["adapter"] = adapter_digest
    return manifest
