"""An ILIAS-layout folder as the LoRA fine-tune's training source: its gallery side (every
instance's pos/ images, as store/ilias_layout.py reads them), never an evaluation query (by path or
by content), with the source kind and the image-list digest in the run's lineage. A tiny random ViT
and a generated layout."""

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")
from PIL import Image  # noqa: E402

from rscale import api  # noqa: E402
from rscale.cli import main  # noqa: E402
from rscale.errors import InvalidArgumentError  # noqa: E402
from rscale.producers import extract as ex  # noqa: E402
from rscale.producers import lora, lora_data  # noqa: E402
from rscale.store.hashing import digest_lines  # noqa: E402
from test_lora import save  # noqa: E402  (tiny checkpoints, one definition)
from cli_checks import refused_writing_nothing  # noqa: E402
from test_lora_cli import _one_thread, config, run_json  # noqa: E402,F401  (_one_thread: autouse)

FAST = {"rank": 4, "alpha": 8.0, "steps": 3, "batch_size": 4, "lr": 5e-3, "warmup_steps": 1, "checkpoint_every": 3}


def _picture(path, seed, size=32):
    """A coloured square on gray, different bytes for each seed."""
    rng = np.random.default_rng(seed)
    arr = np.full((size, size, 3), 128, np.uint8)
    x, y = rng.integers(2, 14, 2)
    arr[y:y + 14, x:x + 14] = rng.integers(0, 255, 3)
    Image.fromarray(arr).save(path)


def tiny_layout(root: Path, spec=((1, 2), (2, 3), (1, 1))) -> Path:
    """ROOT/<instance>/query/q<k>.jpg (+ a box file) and pos/p<k>.png / .jpg; spec: (queries, positives) per
    instance. Also a folder with no pos/ (not an instance) and a stray text file, which are not images."""
    seed = 0
    for i, (n_q, n_p) in enumerate(spec):
        inst = root / f"inst{i:02d}"
        (inst / "query").mkdir(parents=True)
        (inst / "pos").mkdir()
        for k in range(n_q):
            _picture(inst / "query" / f"q{k}.jpg", seed := seed + 1)
            (inst / "query" / f"q{k}_bbox.txt").write_text("2 2 20 20")
        for k in range(n_p):
            _picture(inst / "pos" / f"p{k}.{'png' if k % 2 else 'jpg'}", seed := seed + 1)
        (inst / "pos" / "notes.txt").write_text("not an image")
    (root / "loose").mkdir()
    _picture(root / "loose" / "x.png", 999)                     # outside any instance: not on the gallery side
    return root


def _globbed(root: Path, role: str) -> list[Path]:
    """Brute force, independent of the reader: every .jpg/.png under <instance>/<role>/."""
    return sorted(p for p in root.glob(f"*/{role}/*") if p.suffix in (".jpg", ".png") and (p.parent.parent / "pos").is_dir()
                  and (p.parent.parent / "query").is_dir())


def _sha256_listing(paths) -> str:
    """digest_lines over name<TAB>sha256 lines, the sha256 computed here with hashlib."""
    return digest_lines(f"{Path(p).name}\tsha256:{hashlib.sha256(Path(p).read_bytes()).hexdigest()}" for p in paths)


def test_an_ilias_root_gives_its_gallery_side_and_never_a_query(tmp_path):
    root = tiny_layout(tmp_path / "ilias")
    src = lora_data.training_source(root)
    assert src.kind == "ilias" and src.location == str(root)
    assert sorted(src.paths) == _globbed(root, "pos") and len(src.paths) == 6
    assert not {p.resolve() for p in src.paths} & {p.resolve() for p in _globbed(root, "query")}
    assert sorted(src.queries) == _globbed(root, "query") and len(src.queries) == 4
    assert lora_data.image_paths(root) == list(src.paths)      # the plain path list is the same gallery side
    # regression: a recursive folder read of the root (what image_paths did before) held the queries
    assert {p for p in root.rglob("*") if p.suffix in (".jpg", ".png")} & set(_globbed(root, "query"))
    rec = src.lineage()
    assert rec["kind"] == "ilias" and rec["images"] == 6 and rec["excluded_queries"] == 4
    assert rec["excluded_queries_sha256"] == _sha256_listing(_globbed(root, "query"))
    # the evaluation side, as a `queries` source: an ILIAS root's query/ images
    assert sorted(lora_data.query_paths(root)) == _globbed(root, "query")


def test_a_query_in_the_training_list_is_refused_by_path_and_by_content(tmp_path):
    root = tiny_layout(tmp_path / "ilias")
    q = root / "inst01" / "query" / "q1.jpg"
    # by content: a positive that is a byte copy of a query
    shutil.copyfile(q, root / "inst00" / "pos" / "copy.jpg")
    with pytest.raises(InvalidArgumentError, match=r"^1 of 7 training images are evaluation query images .*"
                                                   r"copy.jpg has the bytes of query .*inst01/query/q1.jpg"):
        lora_data.training_source(root)
    (root / "inst00" / "pos" / "copy.jpg").unlink()
    # by path: a positive that is a link to a query
    (root / "inst02" / "pos" / "link.jpg").symlink_to(q)
    with pytest.raises(InvalidArgumentError, match=r"link.jpg is query .*inst01/query/q1.jpg"):
        lora_data.training_source(root)
    (root / "inst02" / "pos" / "link.jpg").unlink()
    # a list file naming a query of a layout: the layout says it is a query, no `queries` needed
    listing = tmp_path / "train.txt"
    listing.write_text("ilias/inst00/pos/p0.jpg\nilias/inst01/query/q1.jpg\n")
    with pytest.raises(InvalidArgumentError, match=r"^1 of 2 .*q1.jpg is query"):
        lora_data.training_source(listing)
    # a separate training folder, checked against the evaluation queries by content
    sep = tmp_path / "separate"
    sep.mkdir()
    _picture(sep / "a.png", 500)
    assert lora_data.training_source(sep, queries=root).queries      # disjoint: fine, and the queries recorded
    shutil.copyfile(root / "inst00" / "query" / "q0.jpg", sep / "renamed.jpg")
    with pytest.raises(InvalidArgumentError, match="renamed.jpg has the bytes of query"):
        lora_data.training_source(sep, queries=root)
    assert lora_data.training_source(sep).queries == ()                # no queries named: nothing to check against


def test_training_on_an_ilias_root_records_the_source_and_the_list_digest(tmp_path, capsys):
    from mlflow.tracking import MlflowClient

    root = tiny_layout(tmp_path / "ilias")
    base, out = save(tmp_path, "vit"), tmp_path / "lora"
    summary = run_json(capsys, ["train-lora", "--config", str(config(tmp_path, **FAST)), "--base", str(base),
                                "--data", str(root), "--out", str(out), "--no-progress"])
    positives, queries = _globbed(root, "pos"), _globbed(root, "query")
    assert summary["images"] == 6 and summary["source"]["kind"] == "ilias"
    assert summary["training_list_sha256"] == _sha256_listing(positives)
    rows = [ln.split("\t") for ln in (out / lora.TRAINING_LIST).read_text().splitlines()[1:]]
    assert sorted((out / p).resolve() for _, _, p in rows) == [p.resolve() for p in positives]
    man = json.loads((out / "model" / lora.MANIFEST).read_text())
    src = man["training_source"]
    assert src == {"kind": "ilias", "location": "../ilias", "images": 6, "excluded_queries": 4,
                   "excluded_queries_sha256": _sha256_listing(queries)}
    assert man["params"]["source"] == "ilias"
    run = MlflowClient().get_run(summary["mlflow_run_id"])
    assert run.data.params["source"] == "ilias"
    assert run.data.tags["rscale.input.training_list"] == _sha256_listing(positives)
    assert run.data.tags["rscale.input.excluded_queries"] == _sha256_listing(queries)
    # lineage: from the model folder (the manifest's record) and from a descriptor set (the embedded kind)
    walk = api.model_lineage(out)["backbones"]["lora"]
    assert walk["training_list"]["verified"] and walk["training_list"]["source"] == src
    ds = ex.extract([("q0", queries[0], None)], out / "model", tmp_path / "desc", role="queries", progress=False)
    assert ds.manifest["model_lineage"]["training_source"] == "ilias"
    (walk,) = api.model_lineage(tmp_path / "desc")["backbones"].values()
    assert walk["training_list"]["source"] == {"kind": "ilias"}
    assert walk["training_list"]["sha256"] == _sha256_listing(positives)


@pytest.mark.parametrize("case", ["copied_query", "listed_query", "separate_copy", "missing_queries",
                                  "before_converting"])
def test_training_on_a_query_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, case):
    root = tiny_layout(tmp_path / "ilias")
    base = save(tmp_path, "vit")
    data, extra = root, []
    want = r"training images are evaluation query images \(never train on them\)"
    if case in ("copied_query", "before_converting"):
        shutil.copyfile(root / "inst02" / "query" / "q0.jpg", root / "inst02" / "pos" / "dup.jpg")
        if case == "before_converting":                 # the builtin base would be converted into place first
            base = tmp_path / "backbones" / "mobilenet_v2_imagenet"
    elif case == "listed_query":
        data = tmp_path / "train.txt"
        data.write_text("ilias/inst00/pos/p0.jpg\nilias/inst00/query/q0.jpg\n")
    elif case == "separate_copy":
        data = tmp_path / "separate"
        data.mkdir()
        shutil.copyfile(root / "inst01" / "query" / "q0.jpg", data / "x.jpg")
        extra = ["--queries", str(root)]
    elif case == "missing_queries":
        extra, want = ["--queries", str(tmp_path / "nowhere")], "evaluation queries not found"
    argv = ["train-lora", "--config", str(config(tmp_path, **FAST)), "--base", str(base), "--data", str(data),
            "--out", str(tmp_path / "out"), *extra]
    refused_writing_nothing(capsys, argv, want, tmp_path)   # no output folder, no MLflow store, no converted base


def test_lora_queries_is_read_from_params_yaml(tmp_path):
    cfg = api.load_lora_config(config(tmp_path, base="b", data="d", queries="data/ilias"))
    assert cfg.queries == "data/ilias"
    assert api.load_lora_config(config(tmp_path, base="b", data="d")).queries is None
    assert api.load_lora_config(config(tmp_path, base="b", data="d", queries="q"),
                                overrides={"queries": "other"}).queries == "other"
