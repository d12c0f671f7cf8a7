"""The Ray engine against the local one, on one local Ray instance (2 CPUs) shared by the module:
byte-identical sample stats, a killed worker survived, a crashed run resumed with only its missing
shards, Ray Data extraction giving the local extractor's descriptor sets."""

import json
import logging
import sys

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from rscale import api  # noqa: E402
from rscale.cli import main  # noqa: E402
from rscale.distributed.scoring import FAULT_ENV  # noqa: E402
from rscale.store.descriptor_set import DescriptorSet  # noqa: E402


@pytest.fixture(scope="module")
def ray_local():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    root = tmp_path_factory.mktemp("sets")
    api.make_descriptor_sets(root, instances=24, dim=16, positives=3, distractors=6000, shard_size=1000, seed=3,
                             hard_share=0.02)
    return root


def score_args(sets, out, **kw):
    return dict(queries_dir=sets / "queries", positives_dir=sets / "positives", qrels=sets / "qrels.parquet",
                distractors_dir=sets / "distractors", out=out, fraction=0.5, seed=7, k=40, backend="numpy",
                lineage=False, **kw)


@pytest.fixture(scope="module")
def local_run(sets, tmp_path_factory):
    out = tmp_path_factory.mktemp("local") / "ss.parquet"
    summary = api.score(**score_args(sets, out))
    return out, summary


def test_ray_scoring_is_byte_identical_to_the_local_engine(ray_local, sets, local_run, tmp_path):
    out = tmp_path / "ss.parquet"
    summary = api.score(**score_args(sets, out, engine="ray"))
    assert out.read_bytes() == local_run[0].read_bytes()
    assert summary["shards"] == 6 and summary["resumed_shards"] == 0
    assert summary["drift"] == local_run[1]["drift"] and summary["S"] == local_run[1]["S"]
    assert not (tmp_path / "ss.parquet.partials").exists()      # the resume folder goes once written


def test_a_killed_worker_is_retried_and_its_shard_counted_once(ray_local, sets, local_run, tmp_path, monkeypatch):
    marker = tmp_path / "killed"
    monkeypatch.setenv(FAULT_ENV, f"kill:2:{marker}")
    out = tmp_path / "ss.parquet"
    summary = api.score(**score_args(sets, out, engine="ray"))
    assert marker.exists()                     # the worker scoring shard 2 did die once
    assert out.read_bytes() == local_run[0].read_bytes()
    assert summary["S"] == local_run[1]["S"]


def test_a_rerun_after_a_crash_scores_only_the_missing_shards(ray_local, sets, local_run, tmp_path, monkeypatch):
    out = tmp_path / "ss.parquet"
    monkeypatch.setenv(FAULT_ENV, "raise:4")
    with pytest.raises(Exception, match="injected failure of shard 4"):
        api.score(**score_args(sets, out, engine="ray"))
    assert not out.exists()
    assert len(list((tmp_path / "ss.parquet.partials").glob("*.npz"))) == 5
    monkeypatch.delenv(FAULT_ENV)
    summary = api.score(**score_args(sets, out, engine="ray"))
    assert summary["resumed_shards"] == 5
    assert out.read_bytes() == local_run[0].read_bytes()


def test_candidates_on_ray_resumed_are_the_local_engines(ray_local, sets, tmp_path, monkeypatch):
    # the top-R candidates by id travel with the partials, through the checkpoint of a crashed run
    local = tmp_path / "local.parquet"
    api.score(**score_args(sets, local, candidates=15))
    out = tmp_path / "ss.parquet"
    monkeypatch.setenv(FAULT_ENV, "raise:3")
    with pytest.raises(Exception, match="injected failure of shard 3"):
        api.score(**score_args(sets, out, engine="ray", candidates=15))
    monkeypatch.delenv(FAULT_ENV)
    summary = api.score(**score_args(sets, out, engine="ray", candidates=15))
    assert summary["resumed_shards"] == 5
    assert out.read_bytes() == local.read_bytes()
    import pyarrow.parquet as pq
    a, b = (pq.read_table(tmp_path / f"{n}.candidates.parquet") for n in ("ss", "local"))
    assert a.replace_schema_metadata(None).equals(b.replace_schema_metadata(None)) and a.num_rows == 24 * 15


def test_recorded_halves_on_ray_resumed_are_the_local_engines(ray_local, sets, tmp_path, monkeypatch):
    # the half-sample membership (score --halves) travels with the partials, through the checkpoint
    from rscale.store.sample_stats_file import read_sample_stats
    local = tmp_path / "local.parquet"
    api.score(**score_args(sets, local, halves=True))
    out = tmp_path / "ss.parquet"
    monkeypatch.setenv(FAULT_ENV, "raise:2")
    with pytest.raises(Exception, match="injected failure of shard 2"):
        api.score(**score_args(sets, out, engine="ray", halves=True))
    monkeypatch.delenv(FAULT_ENV)
    summary = api.score(**score_args(sets, out, engine="ray", halves=True))
    assert summary["resumed_shards"] == 5
    assert out.read_bytes() == local.read_bytes() and read_sample_stats(out).has_halves


def test_partials_of_another_run_are_not_reused(ray_local, sets, local_run, tmp_path, monkeypatch):
    # a crashed run with another seed leaves partials; a run with the local run's seed must ignore them
    out = tmp_path / "ss.parquet"
    monkeypatch.setenv(FAULT_ENV, "raise:0")
    with pytest.raises(Exception):
        api.score(**{**score_args(sets, out, engine="ray"), "seed": 8})
    monkeypatch.delenv(FAULT_ENV)
    summary = api.score(**score_args(sets, out, engine="ray"))
    assert summary["resumed_shards"] == 0
    assert out.read_bytes() == local_run[0].read_bytes()


def test_cli_score_on_ray_and_a_damaged_shard(ray_local, sets, local_run, tmp_path, capsys):
    argv = ["score", "--queries", str(sets / "queries"), "--positives", str(sets / "positives"),
            "--qrels", str(sets / "qrels.parquet"), "--distractors", str(sets / "distractors"),
            "--fraction", "0.5", "--seed", "7", "--k", "40", "--backend", "numpy", "--engine", "ray"]
    out = tmp_path / "ss.parquet"
    capsys.readouterr()
    assert main([*argv, "-o", str(out), "--format", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["engine"] == "ray" and summary["S"] == local_run[1]["S"]
    assert out.read_bytes() == local_run[0].read_bytes()
    # a shard damaged after writing: the task that reads it names the file, one line, exit 2
    import shutil
    bad = tmp_path / "bad"
    shutil.copytree(sets / "distractors", bad)
    v = np.load(bad / "shard-00003.npy")
    v[0] = -v[0]
    np.save(bad / "shard-00003.npy", v)
    argv[argv.index(str(sets / "distractors"))] = str(bad)
    assert main([*argv, "-o", str(tmp_path / "b.parquet")]) == 2
    err = capsys.readouterr().err.strip()
    assert "shard-00003.npy does not match its digest" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "b.parquet").exists() and not (tmp_path / "b.parquet.partials").exists()


def test_engine_input_errors_are_one_line(sets, tmp_path, capsys, monkeypatch):
    argv = ["score", "--queries", str(sets / "queries"), "--positives", str(sets / "positives"),
            "--qrels", str(sets / "qrels.parquet"), "--distractors", str(sets / "distractors"),
            "-o", str(tmp_path / "ss.parquet")]
    cases = [(["--engine", "spark"], "unknown engine 'spark'"),
             (["--engine", "ray", "--address", "127.0.0.1:1"], "cannot reach a Ray cluster at '127.0.0.1:1'"),
             (["--address", "auto"], "--address names a Ray cluster: pass it with --engine ray")]
    for extra, message in cases:
        capsys.readouterr()
        assert main([*argv, *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1
    monkeypatch.setitem(sys.modules, "ray", None)            # as if the extra were not installed
    for cmd in (argv, ["extract", str(tmp_path), "--model", str(tmp_path), "-o", str(tmp_path / "x")]):
        assert main([*cmd, "--engine", "ray"]) == 2
        err = capsys.readouterr().err.strip()
        assert "pip install 'rscale[distributed]'" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "ss.parquet").exists() and not (tmp_path / "x").exists()


# ---- extraction on Ray Data ---------------------------------------------------------------------------

def _tiny_vit(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    m = transformers.ViTModel(transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                                     intermediate_size=64, image_size=32, patch_size=8))
    m.save_pretrained(tmp_path / "vit")
    return tmp_path / "vit"


def _images(folder, n, seed=0):
    from PIL import Image
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(n):
        arr = (rng.random((40, 48, 3)) * 90).astype(np.uint8)
        x, y, s = rng.integers(0, 24), rng.integers(0, 20), rng.integers(8, 20)
        arr[y:y + s, x:x + s] = rng.integers(100, 255, 3)
        Image.fromarray(arr).save(folder / f"im{i:02d}.png")
    return folder


def _without_digests(manifest):
    return {**manifest, "shards": [{k: v for k, v in s.items() if not k.startswith("sha256")}
                                   for s in manifest["shards"]]}


@pytest.mark.slow
def test_ray_data_extraction_writes_the_local_sets(ray_local, tmp_path, capsys):
    model = _tiny_vit(tmp_path)
    imgs = _images(tmp_path / "imgs", 11)
    local = api.extract(imgs, model, out=tmp_path / "local", batch_size=4, shard_size=4, progress=False)
    capsys.readouterr()
    assert main(["extract", str(imgs), "--model", str(model), "-o", str(tmp_path / "ray"), "--batch-size", "4",
                 "--shard-size", "4", "--engine", "ray", "--format", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["engine"] == "ray" and summary["distractors"] == local["distractors"] == 11
    assert summary["actors"] * summary["threads_per_actor"] <= 2
    a, b = DescriptorSet.open(tmp_path / "local"), DescriptorSet.open(tmp_path / "ray")
    assert _without_digests(b.manifest) == _without_digests(a.manifest)        # same recipe, shards, meta
    assert (tmp_path / "ray" / "recipe.json").read_text() == (tmp_path / "local" / "recipe.json").read_text()
    np.testing.assert_array_equal(b.ids(), a.ids())
    va = np.concatenate([np.asarray(v) for _, v in a.shards()])
    vb = np.concatenate([np.asarray(v) for _, v in b.shards()])
    np.testing.assert_allclose(vb, va, atol=1e-5)
    # resume: the manifest and one shard lost, as after a crash; only that shard goes to Ray again
    (tmp_path / "ray" / "manifest.json").unlink()
    (tmp_path / "ray" / "shard-00001.npy").unlink()
    again = api.extract(imgs, model, out=tmp_path / "ray", batch_size=4, shard_size=4, progress=False, engine="ray")
    assert again["shards_extracted"] == 1
    c = DescriptorSet.open(tmp_path / "ray")
    assert _without_digests(c.manifest) == _without_digests(a.manifest)
    np.testing.assert_allclose(np.concatenate([np.asarray(v) for _, v in c.shards()]), va, atol=1e-5)


@pytest.mark.slow
def test_ray_extraction_of_an_ilias_layout_with_a_query_intervention(ray_local, tmp_path):
    model = _tiny_vit(tmp_path)
    for inst, seed in (("a", 1), ("b", 2)):
        _images(tmp_path / "ilias" / inst / "query", 1, seed=seed)
        _images(tmp_path / "ilias" / inst / "pos", 2, seed=seed + 10)
    kw = dict(layout="ilias", intervention="gp", progress=False)
    local = api.extract(tmp_path / "ilias", model, out=tmp_path / "local", **kw)
    ray_ = api.extract(tmp_path / "ilias", model, out=tmp_path / "ray", engine="ray", **kw)
    assert ray_["shards_extracted"] == 2 and {k: ray_[k] for k in local if k != "written"} == \
        {k: local[k] for k in local if k != "written"}
    for role, intervention in (("queries", "gp"), ("positives", "none")):    # GP on the queries only
        a, b = DescriptorSet.open(tmp_path / "local" / role), DescriptorSet.open(tmp_path / "ray" / role)
        assert _without_digests(b.manifest) == _without_digests(a.manifest)
        assert b.manifest["intervention"] == intervention
        np.testing.assert_allclose(np.concatenate([np.asarray(v) for _, v in b.shards()]),
                                   np.concatenate([np.asarray(v) for _, v in a.shards()]), atol=1e-5)
    assert (tmp_path / "ray" / "qrels.parquet").read_bytes() == (tmp_path / "local" / "qrels.parquet").read_bytes()


def test_actor_sets_torch_threads_to_its_cpus(tmp_path):
    from rscale.distributed.extraction import BatchEmbedder
    model = _tiny_vit(tmp_path)
    import torch
    before = torch.get_num_threads()
    try:
        one = BatchEmbedder(str(model), resolution=None, preprocessing="auto", pooling="cls", intervention=None,
                            threads=1, device="cpu")
        assert one.threads == 1 == torch.get_num_threads()
        imgs = _images(tmp_path / "imgs", 3)
        batch = {"id": np.array(["a", "b", "c"]), "path": np.array([str(p) for p in sorted(imgs.iterdir())]),
                 "box": np.array(["", "0,0,20,20", ""])}
        out = one(batch)
        assert out["vector"].shape == (3, 32) and list(out["id"]) == ["a", "b", "c"]
        from rscale.producers import extract as ex
        bb = ex.load_backbone(model, inference=True)
        ims = [ex.open_image(p) for p in sorted(imgs.iterdir())]
        ims[1] = ims[1].crop((0, 0, 20, 20))
        np.testing.assert_allclose(out["vector"], ex.embed(bb, ex.to_pixels(bb, ims)), atol=1e-5)
    finally:
        torch.set_num_threads(before)
