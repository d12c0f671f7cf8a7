"""`rscale rerank` end to end on a tiny random OWLv2 and a tiny random ViT, both saved and re-loaded,
on generated images; and its bad-input rows (one line, exit 2, nothing written), in the style of
tests/test_bad_input.py."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from PIL import Image  # noqa: E402

from test_bad_input import tree  # noqa: E402
from test_rerank import clutter, object_image, save_owlv2, save_vit  # noqa: E402

from rscale.cli import main  # noqa: E402


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """Two queries (two objects), a gallery of 10 images (each query's positive pastes its object
    small into clutter), first-stage lists from the query set's own backbone, qrels, the models."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rscale.producers import extract as ex
    root = tmp_path_factory.mktemp("rerank_cli")
    save_owlv2(root / "owl")
    save_owlv2(root / "owl_b", seed=1)
    save_vit(root / "vit")
    save_vit(root / "vit_b", seed=1)
    rng = np.random.default_rng(5)
    gal, qdir = root / "gallery", root / "qimages"
    gal.mkdir()
    qdir.mkdir()
    for q in range(2):
        obj = object_image(rng)
        Image.fromarray(obj).save(qdir / f"q{q}.png")
        big = clutter(rng, 120, 160)
        big[40:72, 60:92] = obj
        Image.fromarray(big).save(gal / f"pos{q}.png")
    for i in range(8):
        Image.fromarray(clutter(rng, 48, 48)).save(gal / f"d{i}.png")
    qset = ex.extract([(p.stem, p, None) for p in sorted(qdir.glob("*.png"))], root / "vit", root / "queries",
                      role="queries", progress=False, lineage=False)
    gset = ex.extract([(p.stem, p, None) for p in sorted(gal.glob("*.png"))], root / "vit", root / "gset",
                      role="positives", progress=False, lineage=False)
    ex.extract([(p.stem, p, None) for p in sorted(qdir.glob("*.png"))], root / "vit_b", root / "queries_b",
               role="queries", progress=False, lineage=False)
    shutil.rmtree(qdir)
    gids, gvec = next(gset.shards())
    shutil.rmtree(root / "gset")
    qids, qv = next(qset.shards())
    s = np.asarray(qv, np.float32) @ np.asarray(gvec, np.float32).T
    cols = {"query_id": [], "gallery_id": [], "score": [], "rank": []}
    for qi, row in zip(qids, s):
        order = np.argsort(-row)
        cols["query_id"] += [str(qi)] * len(order)
        cols["gallery_id"] += [str(gids[i]) for i in order]
        cols["score"] += row[order].tolist()
        cols["rank"] += list(range(1, len(order) + 1))
    pq.write_table(pa.table(cols), root / "cand.parquet")
    pq.write_table(pa.table({"query_id": ["q0", "q1"], "positive_id": ["pos0", "pos1"]}), root / "qrels.parquet")
    (root / "params.yaml").write_text("rerank:\n  k: 6\n  max_boxes: 3\n  min_side: 4\n")
    return root


def argv(**changes):
    args = {"--queries": "queries", "--candidates": "cand.parquet", "--gallery": "gallery", "--detector": "owl",
            "--backbone": "vit", "--cache": "cache", "-o": "out", "--qrels": "qrels.parquet", "--k": "6"}
    args.update(changes)
    out = ["rerank"]
    for key, value in args.items():
        if value is not None:
            out += [key, value]
    return out


@pytest.fixture
def work(base, tmp_path, monkeypatch):
    w = tmp_path / "w"
    shutil.copytree(base, w)
    monkeypatch.chdir(w)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///" + str(tmp_path / "mlruns.db"))
    return w


def test_rerank_command_writes_the_artifact_and_reuses_the_cache(work, capsys):
    import pyarrow.parquet as pq

    from rscale.producers.lineage import digest_file, weights_digest
    from rscale.store.run_sidecar import read_run_id
    assert main(argv() + ["--format", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["queries"] == 2 and summary["k"] == 6 and summary["images_computed"] == summary["images"] > 0
    out = work / "out"
    lists = pq.read_table(out / "reranked.parquet").to_pydict()
    assert len(lists["query_id"]) == 12 and sorted(set(lists["query_id"])) == ["q0", "q1"]
    for q in ("q0", "q1"):                           # each list is the first stage's top 6, reordered
        rows = [i for i, x in enumerate(lists["query_id"]) if x == q]
        assert [lists["rank"][i] for i in rows] == list(range(1, 7))
        assert sorted(lists["first_stage_rank"][i] for i in rows) == list(range(1, 7))
        scores = [lists["score"][i] for i in rows]
        assert scores == sorted(scores, reverse=True)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "rscale-rerank" and manifest["params"]["k"] == 6
    for name in ("reranked.parquet", "metrics.parquet"):
        assert manifest["files"][name] == digest_file(out / name)
    assert manifest["inputs"]["detector"] == weights_digest(work / "owl")
    assert manifest["inputs"]["first_stage"] == digest_file(work / "cand.parquet")
    metrics = pq.read_table(out / "metrics.parquet").to_pydict()
    assert set(metrics) >= {"query_id", "R@1", "mAP@6", "first_stage_R@1", "first_stage_mAP@6"}
    assert summary["mAP@6"] == pytest.approx(np.mean(metrics["mAP@6"]))
    assert read_run_id(out / "manifest.json")             # lineage: an MLflow run
    # a second run computes nothing (the region cache) and writes the same lists
    assert main(argv(**{"-o": "again"}) + ["--format", "json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["images_computed"] == 0
    assert pq.read_table(work / "again" / "reranked.parquet").equals(pq.read_table(out / "reranked.parquet"))


def test_config_section_sets_the_defaults_and_arguments_win(work, capsys):
    from rscale import api
    s = api.rerank_settings(work / "params.yaml")
    assert (s["k"], s["max_boxes"], s["min_side"], s["nms_iou"]) == (6, 3, 4, 0.5)
    assert api.rerank_settings(work / "params.yaml", k=4)["k"] == 4
    assert main(argv(**{"--k": None, "--config": "params.yaml", "-o": "cfg"}) + ["--format", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["k"] == 6
    manifest = json.loads((work / "cfg" / "manifest.json").read_text())
    assert manifest["params"]["max_boxes"] == 3 and manifest["params"]["min_side"] == 4


def test_rerank_registers_its_output_as_an_artifact_with_lineage(work, capsys):
    """`rscale rerank --registry`: the lists, metrics and the record of what made them as
    rerank:NAME@vN, inputs = the digests of the candidate file, detector, backbone and region cache
    (and the first-stage scoring run when the candidate file has a sidecar); a rerun with the
    same inputs is the same version, a changed setting a new one; ls, show, lineage, tag read it."""
    from rscale.producers.lineage import digest_file, weights_digest
    from rscale.store.registry import Registry
    from rscale.store.run_sidecar import read_run_id

    def rerank_json(*extra, **changes):
        assert main(argv(**changes) + ["--registry", "reg", "--format", "json", *extra]) == 0
        return json.loads(capsys.readouterr().out)

    # the default name: the backbone the query set records (its checkpoint folder's name)
    assert json.loads((work / "queries" / "manifest.json").read_text())["backbone"] == "vit"
    first = rerank_json()
    r = first["registered"]
    assert (r["ref"], r["created"], r["series"]) == ("rerank:vit@v1", True, "rerank/vit/unknown")
    a = Registry(work / "reg").artifact("rerank", "vit")
    manifest = json.loads((work / "out" / "manifest.json").read_text())
    cache_digest = json.loads((work / "cache" / "cache.json").read_text())["digest"]
    assert a.inputs["first_stage"] == digest_file(work / "cand.parquet")
    assert a.inputs["detector"] == weights_digest(work / "owl") and a.inputs["backbone"] == weights_digest(work / "vit")
    assert a.inputs["region_cache"] == cache_digest and a.inputs["qrels"] == digest_file(work / "qrels.parquet")
    assert a.inputs["queries"] == digest_file(work / "queries" / "manifest.json")
    assert "first_stage_run" not in a.inputs                       # the lists carry no sidecar: digest only
    assert a.inputs["run"]["manifest"] == digest_file(work / "out" / "manifest.json")
    assert a.params == manifest["params"] and a.params["k"] == 6
    assert a.mlflow_run_id == read_run_id(work / "out" / "manifest.json") and a.mlflow_run_id
    assert set(a.blobs) == {"reranked", "metrics", "record"}
    assert a.blobs["reranked"] == manifest["files"]["reranked.parquet"]
    assert a.blobs["metrics"] == manifest["files"]["metrics.parquet"]
    assert a.summary["mAP@6"] == pytest.approx(first["mAP@6"]) and "images_computed" not in a.summary
    # the same inputs again (a warm cache, another folder): the same version, no duplicate
    again = rerank_json(**{"-o": "again"})
    assert again["images_computed"] == 0 and again["registered"]["ref"] == "rerank:vit@v1"
    assert again["registered"]["created"] is False
    assert [e["ref"] for e in _ls(capsys) if e["kind"] == "rerank"] == ["rerank:vit@v1"]
    # a changed setting: a new version, with its params
    w = rerank_json("--first-stage-weight", "0.5", **{"-o": "w05"})
    assert (w["registered"]["ref"], w["registered"]["created"]) == ("rerank:vit@v2", True)
    assert Registry(work / "reg").artifact("rerank", "vit", "v2").params["first_stage_weight"] == 0.5
    # lists a scoring run wrote (its sidecar): the first-stage run id joins the lineage
    (work / "cand.parquet.run.json").write_text(json.dumps({"stage": "score", "mlflow_run_id": "f00dcafe"}))
    chained = rerank_json(**{"-o": "chained", "--name": "vit_chain", "--benchmark": "toy"})
    assert chained["registered"]["ref"] == "rerank:vit_chain@v1"
    assert Registry(work / "reg").artifact("rerank", "vit_chain").inputs["first_stage_run"] == "f00dcafe"
    # read back as other artifacts are
    assert sorted(e["ref"] for e in _ls(capsys) if e["kind"] == "rerank") == \
        ["rerank:vit@v1", "rerank:vit@v2", "rerank:vit_chain@v1"]
    assert main(["ls", "-r", "reg"]) == 0
    assert "2 queries x K'=6" in capsys.readouterr().out
    assert main(["show", "rerank:vit@v1", "-r", "reg"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["inputs"]["detector"] == a.inputs["detector"] and shown["version"] == 1
    assert main(["lineage", "rerank:vit_chain", "-r", "reg"]) == 0
    lin = json.loads(capsys.readouterr().out)
    assert lin["inputs"]["first_stage_run"] == "f00dcafe" and set(lin["outputs"]) == {"reranked", "metrics", "record"}
    assert main(["tag", "rerank:vit@v2", "released", "-r", "reg", "--format", "json"]) == 0
    capsys.readouterr()
    assert Registry(work / "reg").artifact("rerank", "vit", "released").version == 2
    assert main(["verify", "-r", "reg"]) == 0
    capsys.readouterr()
    # a bundle: exported, imported elsewhere with its blobs checked by content, the same artifact
    assert main(["export", "rerank:vit@v1", "-r", "reg", "-o", "vit.tar"]) == 0
    assert main(["import", "vit.tar", "-r", "reg2"]) == 0
    capsys.readouterr()
    b = Registry(work / "reg2").artifact("rerank", "vit")
    assert (b.content, b.lineage, b.params) == (a.content, a.lineage, a.params)
    assert b.summary["mAP@6"] == a.summary["mAP@6"] and b.summary["queries"] == 2 and b.summary["k"] == 6
    # a bundle whose manifest claims other settings than its record: refused, nothing imported
    import io
    import tarfile
    with tarfile.open(work / "vit.tar") as t:
        members = [(m, t.extractfile(m).read()) for m in t.getmembers()]
    with tarfile.open(work / "edited.tar", "w") as t:
        for m, data in members:
            if m.name == "manifest.json":
                man = json.loads(data)
                man["artifact"]["params"]["max_boxes"] = 99
                data = json.dumps(man).encode()
                m.size = len(data)
            t.addfile(m, io.BytesIO(data))
    assert main(["import", "edited.tar", "-r", "reg3"]) == 2
    assert "record's params or inputs are not the bundle's" in capsys.readouterr().err
    assert not (work / "reg3" / "catalog.duckdb").exists() or not Registry(work / "reg3").artifacts()


def _ls(capsys):
    assert main(["ls", "-r", "reg", "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def _write(path, text):
    path.write_text(text)


def _drop_weights(w):
    (w / "owl" / "model.safetensors").unlink()


def _ghost_gallery_id(w):
    import pyarrow as pa
    import pyarrow.parquet as pq
    t = pq.read_table(w / "cand.parquet").to_pydict()
    t["gallery_id"][2] = "ghost"
    pq.write_table(pa.table(t), w / "cand.parquet")


def _broken_image(w):
    (w / "gallery" / "d3.png").write_bytes(b"not a png")


def _foreign_cache(w):
    assert main(argv(**{"--detector": "owl_b", "-o": "first"})) == 0
    shutil.rmtree(w / "first")


def _foreign_backbone_cache(w):
    """A valid run of another backbone (its own query set, the same detector) fills ./cache first."""
    assert main(argv(**{"--queries": "queries_b", "--backbone": "vit_b", "-o": "first"})) == 0
    shutil.rmtree(w / "first")


def _backbone_digests():
    from rscale.producers.lineage import weights_digest
    return weights_digest(Path("vit_b"))[:19], weights_digest(Path("vit"))[:19]


ROWS = [
    ("no-detector-folder", argv(**{"--detector": "nowhere"}), None, ["nowhere", "does not exist"]),
    ("detector-without-weights", argv(), _drop_weights, ["no weights file", "detector folder", "owl"]),
    ("detector-not-owlv2", argv(**{"--detector": "vit"}), None, ["model_type 'vit'", "OWLv2"]),
    ("unknown-gallery-id", argv(), _ghost_gallery_id, ["cand.parquet", "gallery_id", "'ghost'"]),
    ("image-fails-to-decode", argv(), _broken_image, ["d3.png", "cannot read image"]),
    ("cache-of-another-detector", argv(), _foreign_cache, ["region cache was made with detector", "never mixed"]),
    ("cache-of-another-backbone", argv(), _foreign_backbone_cache,
     ["region cache was made with detector", "never mixed", _backbone_digests]),
    ("k-beyond-the-lists", argv(**{"--k": "11"}), None, ["K'=11", "first-stage list", "k <= 10"]),
    ("k-zero", argv(**{"--k": "0"}), None, ["k must be a whole number >= 1", "0"]),
    ("unknown-config-key", argv(**{"--config": "bad.yaml"}), lambda w: _write(w / "bad.yaml", "rerank:\n  boxes: 3\n"),
     ["bad.yaml", "rerank.boxes", "max_boxes"]),
    ("config-value-not-a-number", argv(**{"--config": "bad.yaml"}),
     lambda w: _write(w / "bad.yaml", "rerank:\n  nms_iou: abc\n"), ["rerank nms_iou must be a number", "'abc'"]),
    ("registry-name-not-nameable", argv(**{"--registry": "reg", "--name": "my model"}), None,
     ["--name", "my model"]),
    ("registry-benchmark-not-nameable", argv(**{"--registry": "reg", "--benchmark": "a@b"}), None, ["--benchmark"]),
    ("name-without-registry", argv(**{"--name": "vit2"}), None, ["--name and --benchmark", "--registry DIR"]),
    ("out-is-a-file", argv(**{"-o": "cand.parquet"}), None, ["--out cand.parquet is a file"]),
    ("missing-qrels", argv(**{"--qrels": "nope.parquet"}), None, ["qrels nope.parquet"]),
]


@pytest.mark.parametrize("args,setup,fragments", [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_bad_input_is_one_line_exit_2_nothing_written(work, capsys, monkeypatch, args, setup, fragments):
    if setup is not None:
        setup(work)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)     # a producer run would create ./mlruns.db
    before = tree(work)
    capsys.readouterr()
    try:
        rc = main(list(args))
    except Exception as exc:                     # a traceback for the user
        pytest.fail(f"raised {type(exc).__name__}: {exc}")
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for fragment in fragments:
        if callable(fragment):                   # the cache's backbone, then this run's, in that order
            made, uses = fragment()
            assert f"backbone {made}" in lines[0].split("this run uses")[0], lines[0]
            assert f"backbone {uses}" in lines[0].split("this run uses")[1], lines[0]
            continue
        assert fragment in lines[0], f"{fragment!r} not in: {lines[0]}"
    after = tree(work)
    assert after == before, sorted(set(after.items()) ^ set(before.items()))
