"""The O2I LoRA fine-tune on tiny random ViT / DINOv2 / MobileNetV2 checkpoints saved to disk first
(the real from_pretrained path) and images the tests draw."""

import json
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
from PIL import Image  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from rscale.errors import FormatError, InvalidArgumentError, RscaleError  # noqa: E402
from rscale.producers import extract as ex  # noqa: E402
from rscale.producers import lora  # noqa: E402
from rscale.producers import lora_data  # noqa: E402
from rscale.producers.lineage import weights_digest  # noqa: E402

TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            image_size=32, patch_size=8)
FAST = dict(rank=4, alpha=8.0, steps=12, batch_size=6, lr=5e-3, warmup_steps=2, checkpoint_every=4)


@pytest.fixture(autouse=True)
def _one_thread():
    """One intra-op thread: on a shared, oversubscribed CPU torch's thread pool makes these tiny
    convolutions 100x slower (0.13 ms vs 80 ms for a 1x1 conv measured at load ~10 on 2 cores)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def save(tmp_path, kind, seed=0):
    torch.manual_seed(seed)
    if kind == "vit":
        m = transformers.ViTModel(transformers.ViTConfig(**TINY))
    elif kind == "dinov2":
        m = transformers.Dinov2Model(transformers.Dinov2Config(**TINY))
    else:
        m = transformers.MobileNetV2Model(transformers.MobileNetV2Config(
            image_size=32, depth_multiplier=0.35, min_depth=4, tf_padding=False, layer_norm_eps=1e-5,
            finegrained_output=False))
        with torch.no_grad():            # a signal that survives the depth, and non-trivial BatchNorm statistics
            for mod in m.modules():
                if isinstance(mod, torch.nn.Conv2d):
                    torch.nn.init.kaiming_normal_(mod.weight, mode="fan_in")
                if isinstance(mod, torch.nn.BatchNorm2d):
                    mod.running_mean.normal_(0, 0.1)
                    mod.running_var.uniform_(0.5, 1.5)
                    mod.bias.normal_(0, 0.1)
    path = tmp_path / f"{kind}-{seed}"
    m.save_pretrained(path)
    return path


def draw_images(tmp_path, n=8, seed=0, size=32):
    """An object (a bright square) on a gray background, like a render."""
    rng = np.random.default_rng(seed)
    folder = tmp_path / f"images-{seed}"
    folder.mkdir()
    for i in range(n):
        arr = np.full((size, size, 3), 128, np.uint8)
        s = rng.integers(size // 3, size // 2)
        x, y = rng.integers(2, size - s - 2, 2)
        arr[y:y + s, x:x + s] = rng.integers(0, 255, 3)
        arr[y + s // 3:y + 2 * s // 3, x:x + s] = rng.integers(0, 255, 3)
        Image.fromarray(arr).save(folder / f"img{i}.png")
    return folder


def pictures(folder):
    return [ex.open_image(p) for p in sorted(folder.glob("*.png"))]


@pytest.mark.parametrize("kind", ["vit", "dinov2", "mobilenet"])
def test_zero_initialised_adapter_leaves_descriptors_unchanged(tmp_path, kind):
    base = save(tmp_path, kind)
    ims = pictures(draw_images(tmp_path, n=4))
    bb = ex.load_backbone(base)
    pooling = "cls" if bb.prefix_tokens else "pooled"
    before = ex.embed(bb, ex.to_pixels(bb, ims), pooling)
    targets = lora.adapt(bb, lora.LoraParams(rank=2))
    assert targets == lora.TARGETS[bb.model_type][-1]            # transformers 5 layout (q_proj ... / 1x1 convs)
    trainable = {n for n, p in bb.model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)   # the optimiser's only params
    np.testing.assert_allclose(ex.embed(bb, ex.to_pixels(bb, ims), pooling), before, atol=1e-6)
    # the training-time pooling (with gradients) is the extractor's
    with torch.no_grad():
        mine = lora.student_descriptors(bb.model, ex.to_pixels(bb, ims), pooling, bb.prefix_tokens).numpy()
    np.testing.assert_allclose(mine, before, atol=1e-6)
    # a non-zero B does change them (so the check above could fail)
    with torch.no_grad():
        for name, p in bb.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    assert np.abs(ex.embed(bb, ex.to_pixels(bb, ims), pooling) - before).max() > 1e-3


def _delta(a, b, scaling):
    if a.ndim == 4:                      # Conv2d: (r, in, kh, kw) and (out, r, 1, 1)
        return scaling * torch.einsum("or,rikl->oikl", b[:, :, 0, 0], a)
    return scaling * b @ a


@pytest.mark.parametrize("kind", ["vit", "mobilenet"])
def test_training_changes_only_the_adapter_and_the_merged_model_reproduces_it(tmp_path, kind):
    base = save(tmp_path, kind)
    base_digest = weights_digest(base)
    params = lora.LoraParams(**FAST)
    res = lora.train_lora(base, draw_images(tmp_path), tmp_path / "out", params)
    assert weights_digest(base) == base_digest                          # the base checkpoint is untouched
    assert res.losses[-1] < res.losses[0]
    # merged = base + (alpha / r) B A on the adapted layers, and base everywhere else (BatchNorm buffers too)
    base_sd = ex.load_backbone(base).model.state_dict()
    merged_sd = ex.load_backbone(res.model_dir).model.state_dict()
    adapter = load_file(str(res.adapter_dir / "adapter_model.safetensors"))
    assert set(merged_sd) == set(base_sd)
    adapted = {}
    for key, a in adapter.items():
        if ".lora_A." in key:
            module = key.split("base_model.model.", 1)[1].split(".lora_A.")[0]
            adapted[module + ".weight"] = _delta(a, adapter[key.replace("lora_A", "lora_B")], params.alpha / params.rank)
    assert adapted and set(adapted) <= set(base_sd) and all(torch.abs(d).max() > 0 for d in adapted.values())
    for key, w in base_sd.items():
        if key in adapted:
            torch.testing.assert_close(merged_sd[key], w + adapted[key], rtol=1e-5, atol=1e-6, msg=key)
        else:
            assert torch.equal(merged_sd[key], w), key
    # the merged checkpoint loads like any backbone and gives the adapted model's descriptors
    ims = pictures(draw_images(tmp_path, n=5, seed=1))
    bb = ex.load_backbone(res.model_dir)
    pooling = "cls" if bb.prefix_tokens else "pooled"
    merged_desc = ex.embed(bb, ex.to_pixels(bb, ims), pooling)
    ref = ex.load_backbone(base)
    plain = ex.embed(ref, ex.to_pixels(ref, ims), pooling)
    ref.model = peft.PeftModel.from_pretrained(ref.model, res.adapter_dir).eval()
    adapted_desc = ex.embed(ref, ex.to_pixels(ref, ims), pooling)
    np.testing.assert_allclose(merged_desc, adapted_desc, atol=1e-5)
    assert np.abs(merged_desc - plain).max() > 1e-4
    man = json.loads((res.model_dir / lora.MANIFEST).read_text())
    assert man["base"]["weights_sha256"] == base_digest and man["adapter_sha256"] == weights_digest(res.adapter_dir)
    assert (res.model_dir / "config.json").exists() and man["steps"] == params.steps


@pytest.mark.parametrize("kind", ["vit", "mobilenet"])
def test_bfloat16_autocast_trains_float32_adapters_that_track_the_float32_run(tmp_path, kind):
    """precision="bfloat16" (the GPU setting; CPU autocast runs the same code here): the forward
    passes in bfloat16, the adapter, optimizer and merged weights float32; the loss curve follows
    the float32 run's to bfloat16's resolution, and the merged model still reproduces its adapter."""
    base, folder = save(tmp_path, kind), draw_images(tmp_path)
    params = dict(FAST, steps=6)
    full = lora.train_lora(base, folder, tmp_path / "f32", params)
    half = lora.train_lora(base, folder, tmp_path / "bf16", params, precision="bfloat16")
    a, b = np.asarray(full.losses), np.asarray(half.losses)
    assert np.all(np.isfinite(b))
    # step 0 (B = 0: the same adapter in both) differs by forward precision alone: bfloat16 keeps ~3
    # digits (0.3-0.4% measured); later steps follow diverging adapters, to within 6-9% (measured)
    assert abs(a[0] - b[0]) <= 0.02 * a[0] + 1e-4, (a, b)
    assert np.abs(a - b).max() <= 0.15 * a.max() + 1e-3, (a, b)
    assert not np.array_equal(a, b)                                   # the forward passes did run in bfloat16
    assert half.manifest["params"]["precision"] == "bfloat16" and full.manifest["params"]["precision"] == "float32"
    adapter = load_file(str(half.adapter_dir / "adapter_model.safetensors"))
    merged = load_file(str(half.model_dir / "model.safetensors"))
    assert {v.dtype for v in adapter.values()} == {torch.float32} == {v.dtype for v in merged.values()
                                                                      if v.is_floating_point()}
    ims = pictures(draw_images(tmp_path, n=4, seed=1))
    bb, ref = ex.load_backbone(half.model_dir), ex.load_backbone(base)
    pooling = "cls" if bb.prefix_tokens else "pooled"
    ref.model = peft.PeftModel.from_pretrained(ref.model, half.adapter_dir).eval()
    np.testing.assert_allclose(ex.embed(bb, ex.to_pixels(bb, ims), pooling),
                               ex.embed(ref, ex.to_pixels(ref, ims), pooling), atol=1e-5)
    with pytest.raises(InvalidArgumentError, match="precision must be one of float32, bfloat16"):
        lora.train_lora(base, folder, tmp_path / "x", params, precision="float16")
    if not torch.cuda.is_available():
        with pytest.raises(InvalidArgumentError, match="no CUDA device"):
            lora.train_lora(base, folder, tmp_path / "x", params, device="cuda")
    assert not (tmp_path / "x").exists()


@pytest.mark.gpu
def test_bfloat16_on_cuda_tracks_float32_on_cpu(tmp_path):
    """The GPU setting itself (skipped where no CUDA device is visible; benchmarks/gpu_check.py has
    the larger version with timings)."""
    base, folder = save(tmp_path, "vit"), draw_images(tmp_path)
    params = dict(FAST, steps=6)
    full = lora.train_lora(base, folder, tmp_path / "cpu", params)
    half = lora.train_lora(base, folder, tmp_path / "cuda", params, device="cuda", precision="bfloat16")
    a, b = np.asarray(full.losses), np.asarray(half.losses)
    assert np.all(np.isfinite(b)) and abs(a[0] - b[0]) <= 0.02 * a[0] + 1e-4, (a, b)
    assert np.abs(a - b).max() <= 0.15 * a.max() + 1e-3, (a, b)
    assert half.manifest["params"]["device"] == "cuda"
    bb = ex.load_backbone(half.model_dir, device="cpu")           # the merged model is a plain float32 checkpoint
    assert bb.dtype == torch.float32


def test_loss_decreases_on_a_toy_set(tmp_path):
    base = save(tmp_path, "dinov2")
    res = lora.train_lora(base, draw_images(tmp_path, n=6), tmp_path / "out",
                          dict(FAST, steps=30, checkpoint_every=30, dropout=0.1))
    losses = np.asarray(res.losses)
    assert losses.size == 30 and np.all(np.isfinite(losses))
    assert losses[-5:].mean() < 0.7 * losses[:5].mean()
    log = (tmp_path / "out" / "train_log.tsv").read_text().splitlines()
    assert log[0] == "step\tloss\tlr" and len(log) == 31


def test_resume_continues_from_the_saved_step(tmp_path, monkeypatch):
    base = save(tmp_path, "vit")
    folder = draw_images(tmp_path)
    params = dict(FAST, steps=10, checkpoint_every=4, dropout=0.1)
    whole = lora.train_lora(base, folder, tmp_path / "whole", params)

    original = lora.learning_rate

    def interrupted(step, p):
        if step == 6:
            raise KeyboardInterrupt
        return original(step, p)
    monkeypatch.setattr(lora, "learning_rate", interrupted)
    with pytest.raises(KeyboardInterrupt):
        lora.train_lora(base, folder, tmp_path / "part", params)
    assert [p.name for p in (tmp_path / "part" / "checkpoints").iterdir()] == ["step-000004"]
    assert not (tmp_path / "part" / "model").exists()                   # nothing half-written
    monkeypatch.setattr(lora, "learning_rate", original)
    again = lora.train_lora(base, folder, tmp_path / "part", params)
    assert again.resumed_from == 4 and len(again.losses) == 10
    np.testing.assert_allclose(again.losses, whole.losses, rtol=1e-4, atol=1e-6)
    a = load_file(str(again.model_dir / "model.safetensors"))
    b = load_file(str(whole.model_dir / "model.safetensors"))
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5)


def test_resume_refuses_a_checkpoint_of_another_base(tmp_path):
    folder = draw_images(tmp_path)
    base = save(tmp_path, "vit", seed=0)
    first = lora.train_lora(base, folder, tmp_path / "a", dict(FAST, steps=4))
    ckpt = lora.latest_checkpoint(first.model_dir.parent / "checkpoints")
    other = save(tmp_path, "vit", seed=1)
    with pytest.raises(InvalidArgumentError, match="trained from base weights sha256:.*this base model is"):
        lora.train_lora(other, folder, tmp_path / "b", dict(FAST, steps=4), resume_from=ckpt)
    assert not (tmp_path / "b").exists()
    # and a checkpoint of other params is refused too
    with pytest.raises(InvalidArgumentError, match="another params"):
        lora.train_lora(base, folder, tmp_path / "a", dict(FAST, steps=8, rank=2))


def test_lineage_reaches_the_base_weights(tmp_path):
    from mlflow.tracking import MlflowClient

    base = save(tmp_path, "vit")
    folder = draw_images(tmp_path)
    res = lora.train_lora(base, folder, tmp_path / "out", dict(FAST, steps=5))
    client = MlflowClient()
    run = client.get_run(res.run_id)
    assert run.data.tags["rscale.input.base_weights"] == weights_digest(base)
    assert run.data.tags["rscale.output.merged_weights"] == weights_digest(res.model_dir)
    assert run.data.tags["rscale.output.adapter"] == weights_digest(res.adapter_dir)
    assert run.data.tags["rscale.input.training_list"] == res.manifest["training_list_sha256"]
    assert [m.step for m in client.get_metric_history(res.run_id, "loss")] == list(range(5))
    assert len(client.get_metric_history(res.run_id, "lr")) == 5
    assert run.data.params["rank"] == "4"
    # a descriptor set extracted with the merged model -> its weights -> the merged manifest -> the base
    items = [(f"q{i}", p, None) for i, p in enumerate(sorted(folder.glob("*.png")))]
    ds = ex.extract(items, res.model_dir, tmp_path / "desc", role="queries", progress=False)
    assert ds.manifest["weights_sha256"] == res.manifest["merged_weights"]
    man = json.loads((res.model_dir / lora.MANIFEST).read_text())
    assert man["base"]["weights_sha256"] == weights_digest(base)


def test_render_set_training_uses_only_the_training_objects(tmp_path):
    pytest.importorskip("pybullet")
    from rscale.producers import o2i

    rs = o2i.render_set(o2i.pybullet_assets("random", limit=6), o2i.RenderProtocol(resolution=64, distances=(3.2, 4.5)),
                        cache_dir=tmp_path / "cache", progress=False)
    split = lora_data.split_objects(rs.object_ids, 2, seed=3)
    again = lora_data.split_objects(list(reversed(rs.object_ids)), 2, seed=3)
    assert set(again.evaluation) == set(split.evaluation) and len(split.evaluation) == 2
    assert not set(split.train) & set(split.evaluation) and set(split.train) | set(split.evaluation) == set(rs.object_ids)
    paths = lora_data.render_set_paths(rs, split)
    assert len(paths) == 2 * len(split.train)
    assert {r.object_id for r in rs.records if r.path in paths} == set(split.train)
    res = lora.train_lora(save(tmp_path, "mobilenet"), None, tmp_path / "out", dict(FAST, steps=3),
                          render_set=rs, split=split)
    recorded = json.loads((tmp_path / "out" / "split.json").read_text())
    assert recorded["evaluation"] == list(split.evaluation) and recorded["seed"] == 3
    from rscale.producers.lineage import digest_lines
    assert res.manifest["training_list_sha256"] == digest_lines(lora_data.list_digest_lines(paths))
    with pytest.raises(InvalidArgumentError, match="needs a split"):
        lora.train_lora(save(tmp_path, "mobilenet", 1), None, tmp_path / "x", FAST, render_set=rs)


def test_split_by_object_is_seeded_and_disjoint():
    ids = [f"o{i}" for i in range(120)]
    a = lora_data.split_objects(ids, 40, seed=0)
    assert len(a.train) == 80 and len(a.evaluation) == 40 and not set(a.train) & set(a.evaluation)
    assert lora_data.split_objects(ids[::-1], 40, seed=0).evaluation == tuple(reversed(a.evaluation))
    assert lora_data.split_objects(ids, 40, seed=1).evaluation != a.evaluation
    assert len(lora_data.split_objects(ids, 0.25).evaluation) == 30
    with pytest.raises(InvalidArgumentError, match="evaluation side"):
        lora_data.split_objects(ids, 120)


def test_student_view_masks_the_gray_canvas_for_a_vit(tmp_path):
    bb = ex.load_backbone(save(tmp_path, "vit"))
    im = pictures(draw_images(tmp_path, n=1))[0]
    view, mask = lora_data.student_view(bb, im, 0.5, mask=True)
    assert view.size == im.size and mask.shape == (1, 1, 17, 17)
    cls_row = mask[0, 0, 0, 1:].reshape(4, 4).numpy()
    assert cls_row[1:3, 1:3].all() and cls_row.sum() == 4                # the 16 px centre of a 32 px canvas
    assert mask[0, 0, 1:].all()                                         # only the CLS row is masked
    assert lora_data.student_view(bb, im, 1.0, mask=True)[1].all()
    assert lora_data.student_view(bb, im, 0.5, mask=False)[1] is None
    s = lora_data.draw_scales(np.random.default_rng(0), 1000, (0.25, 1.0))
    assert s.min() >= 0.25 and s.max() <= 1.0 and abs(np.median(s) - 0.5) < 0.05   # log-uniform: median sqrt(lo*hi)


def test_bad_input_is_refused_before_anything_is_written(tmp_path):
    base = save(tmp_path, "vit")
    folder = draw_images(tmp_path)
    out = tmp_path / "out"
    with pytest.raises(InvalidArgumentError, match=r"\['query_proj'\] match no Linear.*attention.q_proj"):
        lora.train_lora(base, folder, out, dict(FAST, targets=["query_proj"]))
    with pytest.raises(InvalidArgumentError, match="rank 64 exceeds layer .*min\\(fan-in, fan-out\\) = 32"):
        lora.train_lora(base, folder, out, dict(FAST, rank=64))
    (tmp_path / "noweights").mkdir()
    (tmp_path / "noweights" / "config.json").write_text((base / "config.json").read_text())
    with pytest.raises(FormatError, match="no weights file"):
        lora.train_lora(tmp_path / "noweights", folder, out, FAST)
    with pytest.raises(FormatError, match="no config.json"):
        lora.train_lora(tmp_path / "missing", folder, out, FAST)
    (folder / "broken.png").write_bytes(b"not a png")
    listing = tmp_path / "list.txt"
    listing.write_text("images-0/img0.png\nimages-0/broken.png\nimages-0/gone.png\n")
    with pytest.raises(FormatError, match="2 of 3 training images cannot be read: .*broken.png.*gone.png"):
        lora.train_lora(base, listing, out, FAST)
    with pytest.raises(InvalidArgumentError, match=r"unknown lora parameter\(s\) \['ranks'\]"):
        lora.LoraParams.from_dict({"ranks": 4})
    with pytest.raises(InvalidArgumentError, match="scale_range"):
        lora.LoraParams(scale_range=(0.5, 2.0))
    with pytest.raises(InvalidArgumentError, match="no CLS token"):
        lora.train_lora(save(tmp_path, "mobilenet"), folder, out, dict(FAST, pooling="cls"))
    assert not out.exists()
    assert all(isinstance(e, RscaleError) for e in (InvalidArgumentError("x"), FormatError("y")))


def test_importing_the_trainer_loads_no_heavy_module():
    code = ("import sys, rscale.producers.lora, rscale.producers.lora_data; "
            "print(','.join(m for m in ('torch', 'peft', 'transformers', 'mlflow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_params_yaml_lora_section_maps_onto_the_dataclass():
    import yaml
    from pathlib import Path

    from rscale.api.lora import DATA_KEYS, load_lora_config

    path = Path(__file__).parents[1] / "params.yaml"
    section = yaml.safe_load(path.read_text())["lora"]
    cfg = load_lora_config(path)               # the data keys (base, data, out, ...) and the trainer's
    assert set(section) == set(DATA_KEYS) | set(cfg.params.to_dict()) - {"weight_decay", "pooling", "resolution"}
    assert (cfg.base, cfg.data, str(cfg.out)) == (section["base"], section["data"], section["out"])
    p = cfg.params
    assert p.to_dict()["scale_range"] == section["scale_range"] and p.rank == section["rank"]
    assert lora.LoraParams.from_dict(p.to_dict()) == p
    assert lora.learning_rate(0, p) == pytest.approx(p.lr / p.warmup_steps)
    assert lora.learning_rate(p.warmup_steps, p) == pytest.approx(p.lr) and lora.learning_rate(p.steps, p) == 0.0
