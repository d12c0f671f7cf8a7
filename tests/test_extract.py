"""Feature extraction on tiny randomly initialised transformers models saved to disk first
(the real from_pretrained path), with images the tests draw."""

import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from PIL import Image  # noqa: E402

from rscale.errors import FormatError, InvalidArgumentError  # noqa: E402
from rscale.producers import extract as ex  # noqa: E402
from rscale.producers.interventions import GrayPad, MaskedScales, alpha_query_expansion, gray_pad  # noqa: E402
from rscale.store.descriptor_set import DescriptorSet  # noqa: E402

TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            image_size=32, patch_size=8)


def save(tmp_path, kind):
    torch.manual_seed(0)
    if kind == "vit":
        m = transformers.ViTModel(transformers.ViTConfig(**TINY))
    elif kind == "dinov2":
        m = transformers.Dinov2Model(transformers.Dinov2Config(**TINY))
    elif kind == "clip":
        m = transformers.CLIPVisionModel(transformers.CLIPVisionConfig(**TINY))
    else:
        m = transformers.SiglipVisionModel(transformers.SiglipVisionConfig(**TINY))
    path = tmp_path / kind
    m.save_pretrained(path)
    return path


def images(tmp_path, n=6, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        arr = (rng.random((48, 40, 3)) * 80).astype(np.uint8)
        x, y, s = rng.integers(0, 20), rng.integers(0, 20), rng.integers(10, 20)
        arr[y:y + s, x:x + s] = rng.integers(100, 255, 3)
        p = tmp_path / f"img{i}.png"
        Image.fromarray(arr).save(p)
        out.append((f"id{i}", p, None))
    return out


@pytest.mark.parametrize("kind,pooling", [("vit", "cls"), ("vit", "pooled"), ("dinov2", "cls"),
                                          ("dinov2", "mean"), ("clip", "pooled"), ("siglip", "pooled")])
def test_extract_writes_unit_descriptors(tmp_path, kind, pooling):
    model = save(tmp_path, kind)
    items = images(tmp_path)
    ds = ex.extract(items, model, tmp_path / "out", role="positives", pooling=pooling, batch_size=4,
                    shard_size=4, progress=False)
    assert ds.count == 6 and ds.dim == 32 and len(ds.manifest["shards"]) == 2
    vecs = np.concatenate([np.asarray(v) for _, v in ds.shards()])
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, rtol=1e-5)
    assert ds.manifest["pooling"] == pooling and ds.manifest["model_type"].startswith(kind)
    # batching does not change descriptors
    one = ex.extract(items[:1], model, tmp_path / "one", role="positives", pooling=pooling, batch_size=1,
                     progress=False)
    np.testing.assert_allclose(np.asarray(next(one.shards())[1])[0], vecs[0], atol=1e-5)


def test_resume_skips_finished_shards(tmp_path):
    model = save(tmp_path, "vit")
    items = images(tmp_path, n=8)
    first = ex.extract(items, model, tmp_path / "out", role="queries", shard_size=4, progress=False)
    digests = [s["sha256_vectors"] for s in first.manifest["shards"]]
    (tmp_path / "out" / "manifest.json").unlink()            # as if interrupted before the manifest
    (tmp_path / "out" / "shard-00001.npy").unlink()           # and before the second shard
    calls = []
    original = ex.embed
    ex.embed = lambda *a, **k: (calls.append(1), original(*a, **k))[1]
    try:
        again = ex.extract(items, model, tmp_path / "out", role="queries", shard_size=4, batch_size=4,
                           progress=False)
    finally:
        ex.embed = original
    assert len(calls) == 1                                    # only the missing shard was computed
    assert [s["sha256_vectors"] for s in again.manifest["shards"]] == digests


def test_interventions(tmp_path):
    model = save(tmp_path, "vit")
    bb = ex.load_backbone(model)
    ims = [ex.open_image(p) for _, p, _ in images(tmp_path, n=3)]
    plain = ex.embed(bb, ex.to_pixels(bb, ims))
    gp = GrayPad()(bb, ims)
    msa = MaskedScales()(bb, ims)
    for v in (gp, msa):
        assert v.shape == plain.shape
        np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, rtol=1e-5)
        assert np.abs(v - plain).max() > 1e-3
    # at scale 1 nothing is gray: MSA's masked view equals the plain descriptor
    np.testing.assert_allclose(MaskedScales(scales=(1.0,))(bb, ims), plain, atol=1e-5)
    # GP with one view at scale 1 is the plain descriptor too
    np.testing.assert_allclose(GrayPad(views=1)(bb, ims), plain, atol=1e-5)
    canvas, box = gray_pad(ims[0], 0.25)
    assert canvas.size == ims[0].size and (box[2] - box[0]) == round(ims[0].size[0] * 0.25)
    with pytest.raises(InvalidArgumentError, match="CLS token"):
        MaskedScales()(ex.load_backbone(save(tmp_path, "siglip")), ims, pooling="pooled")


def test_alpha_query_expansion():
    rng = np.random.default_rng(0)
    g = rng.standard_normal((50, 8)).astype(np.float32)
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    q = g[:3] + 0.1
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    out = alpha_query_expansion(q, g, n=1, alpha=3)
    sims = q @ g.T
    nn = sims.argmax(axis=1)
    want = q + (sims[np.arange(3), nn] ** 3)[:, None] * g[nn]
    np.testing.assert_allclose(out, want / np.linalg.norm(want, axis=1, keepdims=True), atol=1e-6)


def test_bad_inputs(tmp_path):
    with pytest.raises(FormatError, match="no config.json"):
        ex.load_backbone(tmp_path)
    model = save(tmp_path, "vit")
    (model / "model.safetensors").unlink()
    with pytest.raises(FormatError, match="no weights file"):
        ex.load_backbone(model)
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"not an image")
    with pytest.raises(FormatError, match="cannot read image"):
        ex.open_image(bad)


def test_ilias_layout(tmp_path):
    root = tmp_path / "ilias"
    for inst in ("obj1", "obj2"):
        (root / inst / "query").mkdir(parents=True)
        (root / inst / "pos").mkdir()
        Image.new("RGB", (40, 30), (200, 10, 10)).save(root / inst / "query" / "q.jpg")
        (root / inst / "query" / "q_bbox.txt").write_text("5 5 25 20")
        for k in range(2):
            Image.new("RGB", (40, 30), (10, 200, 10)).save(root / inst / "pos" / f"p{k}.jpg")
    queries, positives, qrels = ex.ilias_layout(root, crop_queries=True)
    assert [q[0] for q in queries] == ["obj1/query/q", "obj2/query/q"]
    assert queries[0][2] == (5.0, 5.0, 25.0, 20.0) and len(positives) == 4
    assert ("obj1/query/q", "obj1/pos/p0") in qrels and len(qrels) == 4
    assert ex.open_image(queries[0][1], queries[0][2]).size == (20, 15)


def test_extract_cli_ilias_with_intervention(tmp_path):
    from rscale.cli import main
    model = save(tmp_path, "vit")
    root = tmp_path / "ilias"
    for inst in ("a", "b"):
        (root / inst / "query").mkdir(parents=True)
        (root / inst / "pos").mkdir()
        Image.new("RGB", (40, 30), (200, 10 if inst == "a" else 90, 10)).save(root / inst / "query" / "q.jpg")
        Image.new("RGB", (40, 30), (10, 200, 10)).save(root / inst / "pos" / "p.jpg")
    assert main(["extract", str(root), "--model", str(model), "-o", str(tmp_path / "sets"), "--layout", "ilias",
                 "--intervention", "msa"]) == 0
    q = DescriptorSet.open(tmp_path / "sets" / "queries")
    assert q.manifest["intervention"] == "msa" and q.manifest["intervention_params"]["scales"] == [1.0, 0.5, 0.25]
    assert DescriptorSet.open(tmp_path / "sets" / "positives").manifest["intervention"] == "none"
    assert main(["extract", str(root / "a" / "pos"), "--model", str(model), "-o", str(tmp_path / "g"),
                 "--intervention", "gp"]) == 2   # never on the gallery


def test_lineage_from_hardness_back_to_weights(tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    from rscale import api
    from rscale.producers.lineage import weights_digest
    model = save(tmp_path, "dinov2")
    items = images(tmp_path, n=6)
    sets = tmp_path / "sets"
    ex.extract(items[:2], model, sets / "queries", role="queries", progress=False)
    ex.extract(items[2:4], model, sets / "positives", role="positives", progress=False)
    ex.extract(items[4:] * 1 + [(f"d{i}", p, None) for i, (_, p, _) in enumerate(items * 3)], model,
               sets / "distractors", role="distractors", progress=False)
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"query_id": ["id0", "id1"], "positive_id": ["id2", "id3"]}), sets / "qrels.parquet")
    api.score(sets / "queries", sets / "positives", qrels=sets / "qrels.parquet", distractors_dir=sets / "distractors",
              out=tmp_path / "ss.parquet", k=5)
    api.estimate(tmp_path / "ss.parquet", "count", params=(), out=tmp_path / "h.parquet")
    out = api.register(tmp_path / "h.parquet", tmp_path / "ss.parquet", registry=tmp_path / "reg")
    lin = api.lineage(out["ref"].split("@")[0], tmp_path / "reg")
    meta = lin["inputs"]["sample"]["meta"]
    assert meta["weights_sha256"] == weights_digest(model)
    assert lin["mlflow_run_id"]                        # the estimate run
    client = mlflow.tracking.MlflowClient()
    score_run = client.get_run(lin["inputs"]["sample"]["mlflow_run_id"])
    assert score_run.data.tags["rscale.stage"] == "score"
    manifest_digest = score_run.data.tags["rscale.input.distractors"]
    dist_manifest = DescriptorSet.open(sets / "distractors").manifest
    from rscale.store.run_sidecar import read_run_id
    assert "mlflow_run_id" not in dist_manifest               # artifacts stay deterministic
    extract_run = client.get_run(read_run_id(sets / "distractors" / "manifest.json"))
    assert extract_run.data.tags["rscale.input.weights"] == weights_digest(model)
    assert extract_run.data.tags["rscale.output.manifest"] == manifest_digest


def test_resume_refuses_a_folder_made_by_another_recipe(tmp_path):
    # issue 11: model B into a folder made (partly) with model A kept A's vectors under B's manifest
    from rscale.cli import main
    from rscale.producers.lineage import weights_digest

    a = save(tmp_path, "vit")
    torch.manual_seed(1)
    b = tmp_path / "vit_b"
    transformers.ViTModel(transformers.ViTConfig(**TINY)).save_pretrained(b)
    items = images(tmp_path, n=8)
    out = tmp_path / "out"
    ex.extract(items, a, out, role="distractors", shard_size=4, progress=False)
    (out / "manifest.json").unlink()                          # interrupted after the shards
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(InvalidArgumentError, match="another recipe.*weights_sha256"):
        ex.extract(items, b, out, role="distractors", shard_size=4, progress=False)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before      # nothing written or removed
    # a complete set of A, re-run with other parameters: refused too (the CLI says so, exit 2)
    ex.extract(items, a, out, role="distractors", shard_size=4, progress=False)
    assert main(["extract", str(tmp_path / "imgs_dir_missing"), "--model", str(a), "-o", str(out)]) == 2
    img_dir = tmp_path / "imgs"
    img_dir.mkdir()
    for _, p, _ in items:
        (img_dir / p.name).write_bytes(p.read_bytes())
    assert main(["extract", str(img_dir), "--model", str(a), "-o", str(out), "--pooling", "mean",
                 "--shard-size", "4"]) == 2
    # the same recipe resumes; another folder for B is fine and holds B's vectors
    ex.extract(items, a, out, role="distractors", shard_size=4, progress=False)
    ds_b = ex.extract(items, b, tmp_path / "out_b", role="distractors", shard_size=4, progress=False)
    assert ds_b.manifest["weights_sha256"] == weights_digest(b) == ds_b.manifest["recipe"]["weights_sha256"]
    va = np.concatenate([np.asarray(v) for _, v in DescriptorSet.open(out).shards()])
    vb = np.concatenate([np.asarray(v) for _, v in ds_b.shards()])
    assert np.abs(va - vb).max() > 1e-3


def test_make_descriptor_sets_refuses_a_folder_of_other_parameters(tmp_path):
    from rscale import api
    api.make_descriptor_sets(tmp_path / "d", instances=5, dim=8, distractors=300, seed=0, shard_size=100)
    with pytest.raises(InvalidArgumentError, match="another recipe.*seed"):
        api.make_descriptor_sets(tmp_path / "d", instances=5, dim=8, distractors=300, seed=1, shard_size=100)
    api.make_descriptor_sets(tmp_path / "d", instances=5, dim=8, distractors=300, seed=0, shard_size=100)


def save_with_processor(tmp_path, kind="vit"):
    """A tiny random checkpoint saved with an image processor that resizes the shortest edge and
    centre-crops (the crop recipe the plain resize skips)."""
    torch.manual_seed(0)
    if kind == "mobilenet_v2":
        model = transformers.MobileNetV2Model(transformers.MobileNetV2Config(image_size=64, depth_multiplier=0.35))
        with torch.no_grad():                   # the default init's activations vanish by the last layer
            for p in model.parameters():
                if p.dim() == 4:
                    torch.nn.init.kaiming_normal_(p)
        # 64 px in: a 2 x 2 last feature map, so 'mean' is a real spatial mean
        proc = transformers.MobileNetV2ImageProcessor(size={"shortest_edge": 72}, crop_size={"height": 64, "width": 64})
    else:
        model = transformers.ViTModel(transformers.ViTConfig(**TINY))
        proc = transformers.CLIPImageProcessor(size={"shortest_edge": 40}, crop_size={"height": 32, "width": 32},
                                               image_mean=[0.4, 0.5, 0.6], image_std=[0.2, 0.25, 0.3])
    path = tmp_path / f"{kind}_proc"
    model.save_pretrained(path)
    proc.save_pretrained(path)
    assert (path / "preprocessor_config.json").exists()
    return path


def _reference(path, items, pool):
    """Descriptors computed with transformers alone: its processor, its model, then L2."""
    proc = transformers.AutoImageProcessor.from_pretrained(path, local_files_only=True)
    model = transformers.AutoModel.from_pretrained(path, local_files_only=True).eval()
    ims = [ex.open_image(p).convert("RGB") for _, p, _ in items]
    with torch.inference_mode():
        out = model(pixel_values=proc(images=ims, return_tensors="pt")["pixel_values"])
    v = pool(out).float().numpy()
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_extract_preprocesses_through_the_checkpoints_image_processor(tmp_path):
    model = save_with_processor(tmp_path)
    items = images(tmp_path, n=5)
    ds = ex.extract(items, model, tmp_path / "out", role="positives", batch_size=2, progress=False)
    assert ds.manifest["preprocessing"] == "processor" and ds.manifest["recipe"]["preprocessing"] == "processor"
    assert ds.manifest["image_processor"].startswith("CLIPImageProcessor") and ds.manifest["resolution"] == 32
    got = np.concatenate([np.asarray(v) for _, v in ds.shards()])
    np.testing.assert_allclose(got, _reference(model, items, lambda o: o.last_hidden_state[:, 0]), atol=1e-5)
    # the opt-out for fixed-resolution protocols: a plain resize, recorded, and not the same vectors
    plain = ex.extract(items, model, tmp_path / "plain", role="positives", preprocessing="resize", progress=False)
    assert plain.manifest["preprocessing"] == "resize" and plain.manifest["image_processor"] == "none"
    assert np.abs(np.concatenate([np.asarray(v) for _, v in plain.shards()]) - got).max() > 1e-3
    # a resolution asks for the plain resize under auto; with an explicit processor it is refused
    assert ex.load_backbone(model, resolution=48).preprocessing == "resize"
    with pytest.raises(InvalidArgumentError, match="only with preprocessing 'resize'"):
        ex.load_backbone(model, resolution=48, preprocessing="processor")
    with pytest.raises(FormatError, match="no preprocessor_config.json"):
        ex.load_backbone(save(tmp_path, "vit"), preprocessing="processor")
    assert ex.load_backbone(save(tmp_path, "vit")).preprocessing == "resize"    # nothing else to use
    # a broken processor config is a clear error naming the opt-out
    broken = tmp_path / "broken"
    shutil.copytree(model, broken)
    (broken / "preprocessor_config.json").write_text('{"image_processor_type": "NoSuchImageProcessor"}')
    with pytest.raises(FormatError, match="cannot load the checkpoint's image processor.*--preprocessing resize"):
        ex.load_backbone(broken)
    # MSA's patch mask assumes the whole image is seen: not through a centre crop
    with pytest.raises(InvalidArgumentError, match="use preprocessing 'resize'"):
        MaskedScales()(ex.load_backbone(model), [ex.open_image(items[0][1])])
    # the same folder, another preprocessing: another recipe, refused
    with pytest.raises(InvalidArgumentError, match="another recipe.*preprocessing"):
        ex.extract(items, model, tmp_path / "out", role="positives", preprocessing="resize", progress=False)


def test_extract_mobilenet_v2_pooled_output(tmp_path):
    model = save_with_processor(tmp_path, "mobilenet_v2")
    items = images(tmp_path, n=4)
    ds = ex.extract(items, model, tmp_path / "out", role="distractors", pooling="pooled", progress=False)
    assert ds.manifest["model_type"] == "mobilenet_v2" and ds.manifest["preprocessing"] == "processor"
    got = np.concatenate([np.asarray(v) for _, v in ds.shards()])
    assert got.shape[1] == 1280                     # MobileNetV2's last 1x1 conv (not scaled below 1.0)
    np.testing.assert_allclose(got, _reference(model, items, lambda o: o.pooler_output), atol=1e-5)
    # mean pooling is the spatial mean of the last feature map: the same global average pool
    mean = ex.extract(items, model, tmp_path / "mean", role="distractors", pooling="mean", progress=False)
    np.testing.assert_allclose(np.concatenate([np.asarray(v) for _, v in mean.shards()]), got, atol=1e-5)
    with pytest.raises(InvalidArgumentError, match="no CLS token"):
        ex.extract(items, model, tmp_path / "cls", role="distractors", pooling="cls", progress=False)
    bb = ex.load_backbone(model, preprocessing="resize")
    with pytest.raises(InvalidArgumentError, match="ViT-family backbone"):
        MaskedScales()(bb, [ex.open_image(items[0][1])], "pooled")
    with pytest.raises(InvalidArgumentError, match="no patch grid"):
        bb.grid


def test_extract_cli_records_the_preprocessing_choice(tmp_path):
    from rscale.cli import main
    model = save_with_processor(tmp_path)
    folder = tmp_path / "imgs"
    folder.mkdir()
    for _, p, _ in images(tmp_path, n=3):
        (folder / p.name).write_bytes(p.read_bytes())
    assert main(["extract", str(folder), "--model", str(model), "-o", str(tmp_path / "a")]) == 0
    assert main(["extract", str(folder), "--model", str(model), "-o", str(tmp_path / "b"),
                 "--preprocessing", "resize", "--resolution", "32"]) == 0
    assert DescriptorSet.open(tmp_path / "a").manifest["preprocessing"] == "processor"
    assert DescriptorSet.open(tmp_path / "b").manifest["preprocessing"] == "resize"
    assert main(["extract", str(folder), "--model", str(model), "-o", str(tmp_path / "c"),
                 "--preprocessing", "crop"]) == 2


def test_fused_conv_layers_give_the_unfused_models_descriptors(tmp_path):
    """extract fuses BatchNorm into each convolution (and runs ReLU6 in place): the descriptors
    must be transformers' own, unfused ones, with BatchNorm statistics far from the identity."""
    model = save_with_processor(tmp_path, "mobilenet_v2")
    m = transformers.MobileNetV2Model.from_pretrained(model)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for bn in (x for x in m.modules() if isinstance(x, torch.nn.BatchNorm2d)):
            bn.running_mean.copy_(torch.randn(bn.num_features, generator=g) * 0.5)
            bn.running_var.copy_(torch.rand(bn.num_features, generator=g) * 3 + 0.2)
            bn.weight.copy_(torch.rand(bn.num_features, generator=g) + 0.5)
            bn.bias.copy_(torch.randn(bn.num_features, generator=g) * 0.2)
    m.save_pretrained(model)
    items = images(tmp_path, n=4)
    ds = ex.extract(items, model, tmp_path / "out", role="distractors", pooling="pooled", progress=False)
    got = np.concatenate([np.asarray(v) for _, v in ds.shards()])
    np.testing.assert_allclose(got, _reference(model, items, lambda o: o.pooler_output), atol=2e-5)
    # fusing is for inference only: a plain load (the LoRA trainer's) keeps every BatchNorm
    plain = ex.load_backbone(model).model
    assert sum(isinstance(x, torch.nn.BatchNorm2d) for x in plain.modules()) == 52
    fused = ex.load_backbone(model, inference=True).model
    assert not any(isinstance(x, torch.nn.BatchNorm2d) for x in fused.modules())
    assert ex.fuse_conv_layers(plain.train()) == 0          # training-mode BatchNorm is left alone


def test_no_progress_means_no_weight_loading_bar_either(tmp_path, capfd):
    """--no-progress (DVC logs) silences transformers' own "Loading weights" bar as well."""
    import transformers.utils.logging as tf_logging
    model = save(tmp_path, "vit")
    items = images(tmp_path, n=2)
    ex.extract(items, model, tmp_path / "out", role="positives", progress=False)
    assert "Loading weights" not in capfd.readouterr().err
    assert tf_logging.is_progress_bar_enabled()          # restored for everything after


def test_extracted_and_simulated_sets_register_under_their_benchmark_not_unknown(tmp_path):
    # the registry listed benchmark 'unknown' for every descriptor-set backbone: scoring never
    # carried a benchmark into the sample stats. The query set records it (an ILIAS tree: its
    # folder's name made nameable; make-descriptors: sim-descriptors) and scoring passes it on
    from rscale import api
    from rscale.cli import main
    model = save(tmp_path, "vit")
    root = tmp_path / "my ilias"
    for inst in ("a", "b", "c"):
        (root / inst / "query").mkdir(parents=True)
        (root / inst / "pos").mkdir()
        Image.new("RGB", (40, 30), (200, 10 if inst == "a" else 90, 10)).save(root / inst / "query" / "q.jpg")
        Image.new("RGB", (40, 30), (10, 200, 10)).save(root / inst / "pos" / "p.jpg")
    sets = tmp_path / "sets"
    assert main(["extract", str(root), "--model", str(model), "-o", str(sets), "--layout", "ilias"]) == 0
    (tmp_path / "dis").mkdir()
    images(tmp_path / "dis", n=6)
    assert main(["extract", str(tmp_path / "dis"), "--model", str(model), "-o", str(sets / "distractors")]) == 0
    assert DescriptorSet.open(sets / "queries").manifest["benchmark"] == "my_ilias"
    assert "benchmark" not in DescriptorSet.open(sets / "queries").manifest["recipe"]   # resumes still match
    api.score(sets / "queries", sets / "positives", qrels=sets / "qrels.parquet", distractors_dir=sets / "distractors",
              out=tmp_path / "ss.parquet", k=5, lineage=False)
    api.estimate(tmp_path / "ss.parquet", "count", params=(), out=tmp_path / "h.parquet")
    api.register(tmp_path / "h.parquet", tmp_path / "ss.parquet", registry=tmp_path / "reg")
    api.make_descriptor_sets(tmp_path / "sim", instances=6, dim=8, positives=2, distractors=500, seed=0)
    sim = tmp_path / "sim"
    api.score(sim / "queries", sim / "positives", qrels=sim / "qrels.parquet", distractors_dir=sim / "distractors",
              out=tmp_path / "sim.ss.parquet", k=5, lineage=False)
    api.estimate(tmp_path / "sim.ss.parquet", "count", params=(), out=tmp_path / "sim.h.parquet")
    api.register(tmp_path / "sim.h.parquet", tmp_path / "sim.ss.parquet", registry=tmp_path / "reg")
    got = {v.backbone: v.benchmark for v in api.list_versions(tmp_path / "reg")}
    assert got == {"vit": "my_ilias", "sim_desc": "sim-descriptors"}, got
