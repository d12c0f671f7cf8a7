"""OWLv2 crop reranking: the pure math against brute-force loops, and the producer end to end on a
tiny randomly initialised Owlv2ForObjectDetection and a tiny random ViT, both saved to disk and
re-loaded (the real from_pretrained path), on images the tests draw with known object boxes.

Random detector weights find nothing in particular, so the test that a crop-aware rerank recovers
a positive injects the true box as the detector's proposal (``propose_regions`` patched); the
detector's own arithmetic (padding, box mapping, NMS) is checked separately, exactly."""

import json

import numpy as np
import pytest

from rscale.core import rerank as rr
from rscale.errors import FormatError, InvalidArgumentError, RscaleError


torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from PIL import Image  # noqa: E402

from rscale.producers import extract as ex  # noqa: E402
from rscale.producers import rerank as prr  # noqa: E402

VIT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32, patch_size=8)


def save_owlv2(path, seed=0, image_size=64):
    torch.manual_seed(seed)
    text = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, vocab_size=100,
                max_position_embeddings=16, bos_token_id=0, eos_token_id=1, pad_token_id=1)
    vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                  image_size=image_size, patch_size=16)
    transformers.Owlv2ForObjectDetection(transformers.Owlv2Config(text_config=text, vision_config=vision,
                                                                  projection_dim=16)).save_pretrained(path)
    return path


def save_vit(path, seed=0):
    torch.manual_seed(seed)
    transformers.ViTModel(transformers.ViTConfig(**VIT)).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {"owl": save_owlv2(root / "owl"), "owl_b": save_owlv2(root / "owl_b", seed=1),
            "vit": save_vit(root / "vit"), "vit_b": save_vit(root / "vit_b", seed=1)}


def test_max_region_scores_torch_matches_numpy():
    from rscale.producers.rerank import max_region_scores_torch
    rng = np.random.default_rng(2)
    off = np.concatenate([[0], np.cumsum(rng.integers(1, 6, 40))])
    regions = rng.standard_normal((off[-1], 16)).astype(np.float32)
    regions /= np.linalg.norm(regions, axis=1, keepdims=True)
    q = rng.standard_normal((9, 16)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    cand = np.stack([rng.choice(40, 10, replace=False) for _ in range(9)])
    want = rr.max_region_scores(q, cand, regions, off)
    got = max_region_scores_torch(q, cand, regions, off, device="cpu", dtype=torch.float32, block=4)
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_detector_padding_is_exact(models):
    det = prr.load_detector(models["owl"])
    det.mean, det.std = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
    rng = np.random.default_rng(0)
    arr = rng.integers(0, 256, (60, 90, 3), dtype=np.uint8)       # W=90, H=60
    x1, y1, x2, y2 = 30, 12, 54, 42
    arr[y1:y2, x1:x2] = (255, 0, 255)
    im = Image.fromarray(arr)
    det.resolution = 90                                            # no resize: the padded square itself
    px = prr.detector_pixels(det, [im])[0].numpy().transpose(1, 2, 0)
    assert px.shape == (90, 90, 3)
    np.testing.assert_array_equal(px[:60], arr / np.float32(255))  # the image at the top-left
    assert np.all(px[60:] == 0)                                    # zero padding below
    norm = np.array([[(x1 + x2) / 2 / 90, (y1 + y2) / 2 / 90, (x2 - x1) / 90, (y2 - y1) / 90]])
    np.testing.assert_allclose(rr.boxes_to_pixels(norm, 90, 60), [[x1, y1, x2, y2]], atol=1e-9)
    # at the detector's resolution the object sits at the same normalised place of the square
    det.resolution = 45
    small = prr.detector_pixels(det, [im])[0].numpy().transpose(1, 2, 0)
    magenta = (small[..., 0] > 0.9) & (small[..., 1] < 0.1) & (small[..., 2] > 0.9)
    ys, xs = np.nonzero(magenta)
    found = np.array([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]) / 45 * 90
    np.testing.assert_allclose(found, [x1, y1, x2, y2], atol=2.0)  # bilinear edges: within a pixel of 45


def test_proposals_follow_the_model(models):
    """Our class-agnostic path equals the model's own forward (objectness, boxes), and an injected
    box comes back in the original image's pixels."""
    det = prr.load_detector(models["owl"])
    ims = [Image.fromarray(np.random.default_rng(i).integers(0, 256, (40 + 30 * i, 100, 3), dtype=np.uint8))
           for i in range(2)]
    pixels = prr.detector_pixels(det, ims)
    obj, boxes = prr.raw_proposals(det, pixels)
    with torch.inference_mode():
        out = det.model(input_ids=torch.tensor([[0, 5, 1], [0, 5, 1]]), pixel_values=pixels)
    np.testing.assert_allclose(obj, torch.sigmoid(out.objectness_logits).numpy(), atol=1e-6)
    np.testing.assert_allclose(boxes, out.pred_boxes.numpy(), atol=1e-6)
    props = prr.propose_regions(det, ims, prr.ProposalParams(max_boxes=3, min_side=0))
    for im, (bx, ob) in zip(ims, props):
        assert 1 <= len(bx) <= 3 and np.all(np.diff(ob) <= 0)
        assert np.all(bx[:, 0] >= 0) and np.all(bx[:, 2] <= im.size[0]) and np.all(bx[:, 3] <= im.size[1])
    # inject: patch 5 says (cx, cy, w, h) = the object's box in the padded square, with top objectness
    W, H, box = 100, 40, (20, 10, 60, 30)
    fake = np.tile([0.5, 0.5, 0.01, 0.01], (1, 16, 1)).astype(np.float32)
    fake[0, 5] = [(box[0] + box[2]) / 200, (box[1] + box[3]) / 200, (box[2] - box[0]) / 100, (box[3] - box[1]) / 100]
    logits = torch.zeros(1, 16)
    logits[0, 5] = 5.0
    det.model.box_predictor = lambda *a, **k: torch.from_numpy(fake)
    det.model.objectness_predictor = lambda *a, **k: logits
    (bx, ob), = prr.propose_regions(det, [ims[0].resize((W, H))], prr.ProposalParams(max_boxes=1))
    np.testing.assert_allclose(bx, [box], atol=1e-4)
    assert ob[0] == pytest.approx(1 / (1 + np.exp(-5)), rel=1e-6)


def test_detector_resolution_interpolates(models):
    det = prr.load_detector(models["owl"], resolution=96)
    obj, boxes = prr.raw_proposals(det, prr.detector_pixels(det, [Image.new("RGB", (50, 30))]))
    assert obj.shape == (1, 36) and boxes.shape == (1, 36, 4)


# ---------------------------------------------------------------- end to end

def clutter(rng, h, w):
    return rng.integers(0, 256, (h, w, 3), dtype=np.uint8)


def object_image(rng, side=32):
    arr = np.zeros((side, side, 3), np.uint8)
    arr[:] = rng.integers(0, 256, 3)
    arr[side // 4: 3 * side // 4, side // 4: 3 * side // 4] = rng.integers(0, 256, 3)
    arr[::4, :] = rng.integers(0, 256, 3)
    return arr


@pytest.fixture
def scene(tmp_path, models):
    """One query object; the positive pastes it small into a large cluttered image; distractors are
    noisy copies of the object (globally closer to the query than the cluttered positive)."""
    rng = np.random.default_rng(3)
    obj = object_image(rng)
    gal = tmp_path / "gallery"
    gal.mkdir()
    big = clutter(rng, 150, 200)
    x, y = 120, 70
    big[y:y + 32, x:x + 32] = obj
    Image.fromarray(big).save(gal / "pos.png")
    boxes = {"pos": (x, y, x + 32, y + 32)}
    for i in range(7):
        noisy = np.clip(obj.astype(int) + rng.integers(-60, 60, obj.shape), 0, 255).astype(np.uint8)
        canvas = clutter(rng, 40, 40)
        canvas[4:36, 4:36] = noisy
        Image.fromarray(canvas).save(gal / f"d{i}.png")
        boxes[f"d{i}"] = (4, 4, 36, 36)
    qdir = tmp_path / "q"
    qdir.mkdir()
    Image.fromarray(obj).save(qdir / "q0.png")
    qset = ex.extract([("q0", qdir / "q0.png", None)], models["vit"], tmp_path / "queries", role="queries",
                      progress=False, lineage=False)
    gset = ex.extract([(p.stem, p, None) for p in sorted(gal.glob("*.png"))], models["vit"], tmp_path / "gset",
                      role="positives", progress=False, lineage=False)
    gids, gvec = next(gset.shards())
    qv = np.asarray(next(qset.shards())[1], np.float32)
    s = (qv @ np.asarray(gvec, np.float32).T)[0]
    order = np.argsort(-s)
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"query_id": ["q0"] * len(order), "gallery_id": [str(gids[i]) for i in order],
                             "score": s[order], "rank": np.arange(1, len(order) + 1)}), tmp_path / "cand.parquet")
    pq.write_table(pa.table({"query_id": ["q0"], "positive_id": ["pos"]}), tmp_path / "qrels.parquet")
    first_rank = int(np.flatnonzero(gids[order] == "pos")[0]) + 1
    return {"root": tmp_path, "gallery": gal, "boxes": boxes, "first_rank_of_pos": first_rank,
            "query_image": qdir / "q0.png"}


def run(scene, models, **kw):
    r = scene["root"]
    args = dict(k=8, qrels=r / "qrels.parquet", progress=False, lineage=False)
    args.update(kw)
    return prr.rerank(r / "queries", r / "cand.parquet", scene["gallery"], args.pop("detector", models["owl"]),
                      models["vit"], args.pop("cache", r / "cache"), args.pop("out", r / "out"), **args)


def inject_true_boxes(monkeypatch, scene):
    """Replace the random detector's proposals by each image's true object box (plus a decoy)."""
    sizes = {}

    def fake(det, images, params=prr.ProposalParams()):
        out = []
        for im in images:
            key = [k for k, v in sizes.items() if v == im.size]
            box = scene["boxes"][key[0]] if key else (0, 0, 8, 8)
            out.append((np.array([box, (0, 0, im.size[0] / 2, im.size[1] / 2)], np.float32),
                        np.array([0.9, 0.1], np.float32)))
        return out
    for p in scene["gallery"].glob("*.png"):
        sizes[p.stem] = Image.open(p).size
    monkeypatch.setattr(prr, "propose_regions", fake)


def test_crop_rerank_recovers_a_small_object(scene, models, monkeypatch):
    assert scene["first_rank_of_pos"] == 8                     # the global descriptor ranks it last
    inject_true_boxes(monkeypatch, scene)
    out = run(scene, models)
    import pyarrow.parquet as pq
    lists = pq.read_table(scene["root"] / "out" / "reranked.parquet").to_pydict()
    assert lists["gallery_id"][0] == "pos" and lists["rank"][:3] == [1, 2, 3]
    assert lists["region_score"][0] == pytest.approx(1.0, abs=2e-3)   # the crop is the query's pixels
    assert lists["first_stage_rank"][0] == 8
    m = pq.read_table(scene["root"] / "out" / "metrics.parquet").to_pydict()
    assert m["first_stage_R@1"] == [0.0] and m["R@1"] == [1.0]
    assert m["first_stage_mAP@8"] == [pytest.approx(1 / 8)] and m["mAP@8"] == [1.0]
    assert out["R@1"] == 1.0 and out["images_computed"] == 8 and out["regions"] == 8 * 3
    manifest = json.loads((scene["root"] / "out" / "manifest.json").read_text())
    from rscale.producers.lineage import digest_file, weights_digest
    assert manifest["inputs"]["detector"] == weights_digest(models["owl"])
    assert manifest["inputs"]["backbone"] == weights_digest(models["vit"])
    assert manifest["inputs"]["first_stage"] == digest_file(scene["root"] / "cand.parquet")
    assert manifest["files"]["reranked.parquet"] == digest_file(scene["root"] / "out" / "reranked.parquet")
    # weight 1: the first-stage score alone, so the first-stage order (and the cache is reused)
    w1 = run(scene, models, first_stage_weight=1.0, out=scene["root"] / "o1")
    lists1 = pq.read_table(scene["root"] / "o1" / "reranked.parquet").to_pydict()
    assert w1["images_computed"] == 0 and lists1["first_stage_rank"] == list(range(1, 9))
    np.testing.assert_allclose(lists1["score"], lists1["first_stage_score"], atol=1e-6)
    # the whole image is region 0: with it alone (no boxes kept) the rerank is the first stage's order
    monkeypatch.undo()
    out0 = run(scene, models, params=prr.ProposalParams(max_boxes=0), cache=scene["root"] / "c0", out=scene["root"] / "o0")
    lists0 = pq.read_table(scene["root"] / "o0" / "reranked.parquet").to_pydict()
    assert lists0["first_stage_rank"] == list(range(1, 9)) and out0["regions"] == 8
    np.testing.assert_allclose(lists0["region_score"], lists0["first_stage_score"], atol=2e-3)


def test_cache_is_reused_and_resumable(scene, models, monkeypatch):
    calls = {"embed": 0, "detect": 0}
    embed, raw = ex.embed, prr.raw_proposals

    def count_embed(*a, **k):
        calls["embed"] += 1
        return embed(*a, **k)

    def count_detect(*a, **k):
        calls["detect"] += 1
        return raw(*a, **k)
    monkeypatch.setattr(ex, "embed", count_embed)
    monkeypatch.setattr(prr, "raw_proposals", count_detect)
    first = run(scene, models, shard_size=3, batch_size=2)
    assert first["images_computed"] == 8 and calls["detect"] == 5 and len(list((scene["root"] / "cache").glob("*.parquet"))) == 3
    import pyarrow.parquet as pq
    a = pq.read_table(scene["root"] / "out" / "reranked.parquet")
    calls.update(embed=0, detect=0)
    second = run(scene, models, shard_size=3, batch_size=2)
    assert second["images_computed"] == 0 and calls["detect"] == 0
    assert calls["embed"] == 1                        # only the query-dimension check, no region
    assert pq.read_table(scene["root"] / "out" / "reranked.parquet").equals(a)
    # an interrupted run: one shard missing -> only its images are computed again
    shard = sorted((scene["root"] / "cache").glob("*.parquet"))[0]
    lost = pq.read_table(shard, columns=["image_sha256"]).column("image_sha256").unique()
    shard.unlink()
    calls.update(embed=0, detect=0)
    third = run(scene, models, shard_size=3, batch_size=8)
    assert third["images_computed"] == len(lost) and calls["detect"] == 1
    assert pq.read_table(scene["root"] / "out" / "reranked.parquet").equals(a)


def test_lineage_is_logged(scene, models, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    from rscale.store.run_sidecar import read_run_id
    inject_true_boxes(monkeypatch, scene)
    run(scene, models, lineage=True)
    out = scene["root"] / "out"
    run_id = read_run_id(out / "manifest.json")
    assert run_id
    got = mlflow.tracking.MlflowClient().get_run(run_id)
    manifest = json.loads((out / "manifest.json").read_text())
    assert got.data.tags["rscale.stage"] == "rerank"
    for name in ("first_stage", "detector", "backbone", "region_cache", "qrels"):
        assert got.data.tags[f"rscale.input.{name}"] == manifest["inputs"][name]
    assert got.data.tags["rscale.output.reranked.parquet"] == manifest["files"]["reranked.parquet"]
    assert got.data.params["k"] == "8" and got.data.metrics["R_at_1"] == 1.0


def test_cache_rows_round_trip(scene, models):
    run(scene, models)
    import pyarrow.parquet as pq
    import pyarrow as pa
    t = pa.concat_tables([pq.read_table(p) for p in sorted((scene["root"] / "cache").glob("*.parquet"))])
    assert set(t.column_names) >= {"image_id", "image_sha256", "region", "x1", "y1", "x2", "y2", "objectness",
                                   "descriptor"}
    assert str(t.schema.field("descriptor").type) == "fixed_size_list<element: halffloat>[32]"
    whole = t.filter(pq_eq(t, "region", 0)).to_pydict()
    i = whole["image_id"].index("pos")
    assert (whole["x1"][i], whole["y1"][i], whole["x2"][i], whole["y2"][i]) == (0, 0, 200, 150)
    assert np.isnan(whole["objectness"][i])
    v = np.asarray(t.column("descriptor").combine_chunks().flatten(), np.float32).reshape(-1, 32)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=2e-3)


def pq_eq(t, col, value):
    import pyarrow.compute as pc
    return pc.equal(t.column(col), value)


# ---------------------------------------------------------------- bad input


def _no_weights(scene, models, tmp):
    d = tmp / "owl_noweights"
    d.mkdir()
    (d / "config.json").write_text((models["owl"] / "config.json").read_text())
    return {"detector": d}


def _no_folder(scene, models, tmp):
    return {"detector": tmp / "nowhere"}


def _unknown_gallery(scene, models, tmp):
    import pyarrow.parquet as pq
    t = pq.read_table(scene["root"] / "cand.parquet").to_pydict()
    t["gallery_id"][3] = "ghost"
    import pyarrow as pa
    pq.write_table(pa.table(t), scene["root"] / "cand.parquet")
    return {}


def _bad_image(scene, models, tmp):
    (scene["gallery"] / "d3.png").write_bytes(b"not a png")
    return {}


def _foreign_cache(scene, models, tmp):
    run(scene, models, detector=models["owl_b"], out=tmp / "other_out")
    import shutil
    shutil.rmtree(tmp / "other_out")
    return {}


def _foreign_backbone_cache(scene, models, tmp):
    """The cache was filled by a run of another backbone (with its own query set, so that run is
    valid), same detector: this run's backbone differs from the cache's."""
    import shutil
    r = scene["root"]
    ex.extract([("q0", scene["query_image"], None)], models["vit_b"], tmp / "queries_b", role="queries",
               progress=False, lineage=False)
    prr.rerank(tmp / "queries_b", r / "cand.parquet", scene["gallery"], models["owl"], models["vit_b"], r / "cache",
               tmp / "other_out", k=8, progress=False, lineage=False)
    shutil.rmtree(tmp / "other_out")
    return {}


def _k_too_large(scene, models, tmp):
    return {"k": 9}


def _foreign_shard(scene, models, tmp):
    run(scene, models, detector=models["owl_b"], cache=tmp / "c_b", out=tmp / "other_out")
    import shutil
    shutil.rmtree(tmp / "other_out")
    (scene["root"] / "cache").mkdir()
    run(scene, models, out=tmp / "other_out")             # a good cache ...
    shutil.rmtree(tmp / "other_out")
    for p in (tmp / "c_b").glob("*.parquet"):            # ... with a shard of another one copied in
        shutil.copy(p, scene["root"] / "cache" / ("regions-ffff" + p.name[12:]))
    return {}


def _duplicate_candidate(scene, models, tmp):
    import pyarrow as pa
    import pyarrow.parquet as pq
    t = pq.read_table(scene["root"] / "cand.parquet").to_pydict()
    t["gallery_id"][2] = t["gallery_id"][1]
    pq.write_table(pa.table(t), scene["root"] / "cand.parquet")
    return {}


def _not_owlv2(scene, models, tmp):
    return {"detector": models["vit"]}


def _missing_column(scene, models, tmp):
    import pyarrow.parquet as pq
    pq.write_table(pq.read_table(scene["root"] / "cand.parquet").drop_columns(["rank"]), scene["root"] / "cand.parquet")
    return {}


def _queries_of_another_backbone(scene, models, tmp):
    manifest = scene["root"] / "queries" / "manifest.json"
    m = json.loads(manifest.read_text())
    m["weights_sha256"] = "sha256:" + "0" * 64
    manifest.write_text(json.dumps(m))
    return {}


@pytest.mark.parametrize("case,error,message", [
    (_duplicate_candidate, FormatError, "column 'gallery_id': query 'q0' lists a gallery id twice"),
    (_not_owlv2, InvalidArgumentError, "model_type 'vit'.*needs an OWLv2 checkpoint"),
    (_missing_column, FormatError, "cand.parquet, column 'rank': missing column"),
    (_queries_of_another_backbone, InvalidArgumentError, "extracted with backbone weights sha256:0000"),
    (_no_weights, FormatError, "no weights file .* in the detector folder"),
    (_no_folder, FormatError, "no config.json: not a transformers detector checkpoint"),
    (_unknown_gallery, FormatError, "column 'gallery_id'.*'ghost' is not in the gallery"),
    (_bad_image, FormatError, "d3.png.*cannot read image"),
    (_foreign_cache, FormatError, "region cache was made with detector .* never mixed"),
    (_foreign_shard, FormatError, "shard identity .* differs"),
    # the same detector digest on both sides, another backbone digest: refused for the backbone
    (_foreign_backbone_cache, FormatError, r"region cache was made with detector ([^,]+), backbone ([^,]+), .*; "
                                           r"this run uses detector \1, backbone (?!\2)[^,]+, .*never mixed"),
    (_k_too_large, InvalidArgumentError, "K'=9 is larger than the first-stage list of query 'q0' \\(8 candidates"),
])
def test_bad_input_is_refused_and_nothing_is_written(scene, models, tmp_path, case, error, message):
    kw = case(scene, models, tmp_path)
    cache = scene["root"] / "cache"
    before = sorted(p.name for p in cache.iterdir()) if cache.exists() else None
    with pytest.raises(error, match=message) as info:
        run(scene, models, **kw)
    assert isinstance(info.value, RscaleError) and info.value.exit_code == 2
    assert "\n" not in str(info.value)
    assert not (scene["root"] / "out").exists()
    assert not [p for p in scene["root"].iterdir() if ".tmp-" in p.name]
    after = sorted(p.name for p in cache.iterdir()) if cache.exists() else None
    assert after == before or (before is None and after in (None, ["cache.json"]))


def test_rerank_module_imports_no_torch():
    import subprocess
    import sys
    code = ("import sys, rscale.producers.rerank, rscale.producers.rerank_cache, rscale.core.rerank; "
            "print('torch' in sys.modules or 'transformers' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"
