"""`rscale train-lora`, the lineage walk back to the base weights / adapter / training list, and the
DVC pipeline pipelines/lora/dvc.yaml, on tiny random checkpoints and drawn images."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from rscale import api  # noqa: E402
from rscale.cli import main  # noqa: E402
from rscale.producers import extract as ex  # noqa: E402
from rscale.producers import lora  # noqa: E402
from rscale.producers.lineage import weights_digest  # noqa: E402
from rscale.store.hashing import digest_lines  # noqa: E402
from cli_checks import refused_writing_nothing  # noqa: E402
from test_lora import draw_images, save  # noqa: E402  (tiny checkpoints and images, one definition)
from dvc_projects import init_dvc_project, stage_env  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TINY = {"rank": 4, "alpha": 8.0, "steps": 6, "batch_size": 4, "lr": 5e-3, "warmup_steps": 1, "checkpoint_every": 3}


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)            # tiny models on a shared CPU: threads only add overhead
    yield
    torch.set_num_threads(before)


def config(tmp_path, **lora_keys) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"lora": {**TINY, **lora_keys}}))
    return path


def run_json(capsys, argv):
    capsys.readouterr()
    assert main(argv + ["--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_train_lora_reads_params_yaml_with_cli_overrides(tmp_path, capsys):
    base, imgs = save(tmp_path, "vit"), draw_images(tmp_path, n=6)
    cfg = config(tmp_path, base=str(base), data=str(imgs), out=str(tmp_path / "unused"))
    out = tmp_path / "lora"
    capsys.readouterr()
    assert main(["train-lora", "--config", str(cfg), "--out", str(out), "--steps", "4", "--set", "rank=2",
                 "--format", "json"]) == 0
    got = capsys.readouterr()
    summary = json.loads(got.out)
    assert "step 4/4 loss" in got.err                          # progress on stderr, JSON alone on stdout
    assert not (tmp_path / "unused").exists() and summary["out"] == str(out)
    man = json.loads((out / "model" / lora.MANIFEST).read_text())
    assert man["steps"] == 4 == summary["steps"] and man["params"]["rank"] == 2 and man["params"]["alpha"] == 8.0
    assert summary["merged_weights"] == weights_digest(out / "model")
    assert summary["adapter_sha256"] == weights_digest(out / "adapter") == man["adapter_sha256"]
    assert summary["base_weights"] == weights_digest(base)
    # the training list file: one row per image, its name + sha256 columns hash to the manifest's digest
    rows = [ln.split("\t") for ln in (out / lora.TRAINING_LIST).read_text().splitlines()]
    assert rows[0] == ["name", "sha256", "path"] and len(rows) == 7
    assert digest_lines(f"{n}\t{d}" for n, d, _ in rows[1:]) == man["training_list_sha256"]
    assert {(out / p).resolve() for _, _, p in rows[1:]} == {p.resolve() for p in imgs.glob("*.png")}
    # the merged folder is a backbone like any other
    assert ex.load_backbone(out / "model").model_type == "vit"


@pytest.mark.slow
def test_the_same_training_gives_the_same_digests_in_any_process(tmp_path):
    """Regression: peft writes adapter_config.json's target_modules in set (hash) order, so two
    processes with other PYTHONHASHSEEDs wrote different adapter (and merged) digests."""
    base, imgs = save(tmp_path, "mobilenet"), draw_images(tmp_path, n=4)     # 3 targets: 6 orders
    digests = []
    for seed in ("1", "2", "3"):
        out = tmp_path / f"out{seed}"
        env = {**os.environ, "PYTHONHASHSEED": seed, "OMP_NUM_THREADS": "1",
               "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run([sys.executable, "-m", "rscale.cli", "train-lora", "--config", str(config(tmp_path)),
                               "--base", str(base), "--data", str(imgs), "--out", str(out), "--steps", "2",
                               "--no-progress", "--format", "json"], env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr
        got = json.loads(done.stdout)
        digests.append((got["adapter_sha256"], got["merged_weights"]))
    assert len(set(digests)) == 1, digests
    targets = json.loads((tmp_path / "out1" / "adapter" / "adapter_config.json").read_text())["target_modules"]
    assert targets == sorted(lora.TARGETS["mobilenet_v2"][0])


@pytest.mark.parametrize("case", ["targets", "rank", "no_weights", "unreadable", "other_base", "unknown_key",
                                  "no_data", "out_is_file", "unreadable_before_converting", "precision"])
def test_bad_input_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, case):
    base, imgs = save(tmp_path, "vit"), draw_images(tmp_path, n=4)
    argv = ["train-lora", "--config", str(config(tmp_path)), "--base", str(base), "--data", str(imgs),
            "--out", str(tmp_path / "out")]
    want = {"targets": r"\['attn_q'\] match no Linear or Conv2d module of this vit model; its modules include: .*q_proj",
            "rank": r"lora.rank 40 exceeds layer .* = 32\); use rank <= 32",
            "no_weights": "no weights file", "unreadable": "1 of 5 training images cannot be read: .*broken.png",
            "other_base": "was trained from base weights sha256:.*this base model is sha256:",
            "unknown_key": r"unknown lora parameter\(s\) \['ranks'\]",
            "no_data": "no training data", "out_is_file": "is a file",
            "unreadable_before_converting": "1 of 5 training images cannot be read",
            "precision": "precision must be one of float32, bfloat16, got 'fp16'"}[case]
    if case == "targets":
        argv += ["--targets", "attn_q"]
    elif case == "rank":
        argv += ["--rank", "40"]
    elif case == "no_weights":
        (tmp_path / "empty").mkdir()
        shutil.copy(base / "config.json", tmp_path / "empty" / "config.json")
        argv[argv.index("--base") + 1] = str(tmp_path / "empty")
    elif case == "unreadable":
        (imgs / "broken.png").write_bytes(b"not an image")
    elif case == "other_base":
        other = tmp_path / "first"
        assert main(["train-lora", "--config", str(config(tmp_path)), "--base", str(save(tmp_path, "vit", seed=1)),
                     "--data", str(imgs), "--out", str(other), "--no-progress"]) == 0
        argv += ["--resume", str(lora.latest_checkpoint(other / "checkpoints"))]
    elif case == "unknown_key":
        argv += ["--set", "ranks=4"]
    elif case == "no_data":
        argv = [a for a in argv if a not in ("--data", str(imgs))]
    elif case == "out_is_file":
        (tmp_path / "out").write_text("x")
    elif case == "unreadable_before_converting":          # the builtin base would be converted into place
        (imgs / "broken.png").write_bytes(b"not an image")
        argv[argv.index("--base") + 1] = str(tmp_path / "backbones" / "mobilenet_v2_imagenet")
    elif case == "precision":                              # refused before the builtin base is converted
        argv += ["--precision", "fp16"]
        argv[argv.index("--base") + 1] = str(tmp_path / "backbones" / "mobilenet_v2_imagenet")
    refused_writing_nothing(capsys, argv, want, tmp_path)   # no output folder, no MLflow store, nothing


def test_training_on_o2i_renders_never_sees_the_evaluation_objects(tmp_path, capsys):
    pytest.importorskip("pybullet")
    from rscale.producers import o2i

    rs = o2i.render_set(o2i.pybullet_assets("random", limit=5), o2i.RenderProtocol(resolution=64, distances=(3.2, 4.5)),
                        cache_dir=tmp_path / "cache", progress=False)
    out = tmp_path / "lora"
    summary = run_json(capsys, ["train-lora", "--config", str(config(tmp_path)), "--base",
                                str(save(tmp_path, "mobilenet")), "--data", str(rs.manifest), "--evaluation", "2",
                                "--split-seed", "1", "--out", str(out), "--no-progress"])
    split = json.loads((out / "split.json").read_text())
    assert summary["split"] == {"train": 3, "evaluation": 2, "seed": 1} and len(split["evaluation"]) == 2
    rows = [ln.split("\t") for ln in (out / lora.TRAINING_LIST).read_text().splitlines()[1:]]
    trained = {(out / p).resolve() for _, _, p in rows}
    by_object = {r.path.resolve(): r.object_id for r in rs.records}
    assert {by_object[p] for p in trained} == set(split["train"])          # every training object, all distances
    assert len(trained) == 2 * 3 and not {by_object[p] for p in trained} & set(split["evaluation"])


def _extract_score_register(tmp_path, model_dir, imgs, name="lora_vit"):
    """Descriptor sets of the merged model -> sample stats -> hardness -> a registered version."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    paths = sorted(imgs.glob("*.png"))
    sets = tmp_path / "sets"
    ex.extract([(f"q{i}", p, None) for i, p in enumerate(paths[:3])], model_dir, sets / "queries", role="queries",
               progress=False)
    ex.extract([(f"p{i}", p, None) for i, p in enumerate(paths[3:6])], model_dir, sets / "positives",
               role="positives", progress=False)
    ex.extract([(f"d{i}", p, None) for i, p in enumerate(paths * 4)], model_dir, sets / "distractors",
               role="distractors", progress=False)
    pq.write_table(pa.table({"query_id": ["q0", "q1", "q2"], "positive_id": ["p0", "p1", "p2"]}), sets / "qrels.parquet")
    api.score(sets / "queries", sets / "positives", qrels=sets / "qrels.parquet", distractors_dir=sets / "distractors",
              out=tmp_path / "ss.parquet", k=5)
    api.estimate(tmp_path / "ss.parquet", "count", params=(), out=tmp_path / "h.parquet")
    return api.register(tmp_path / "h.parquet", tmp_path / "ss.parquet", registry=tmp_path / "reg", backbone=name), sets


def test_lineage_walks_from_a_registered_version_to_base_adapter_and_training_list(tmp_path, capsys):
    base, imgs = save(tmp_path, "vit"), draw_images(tmp_path, n=8)
    out = tmp_path / "lora"
    trained = run_json(capsys, ["train-lora", "--config", str(config(tmp_path)), "--base", str(base), "--data",
                                str(imgs), "--out", str(out), "--no-progress"])
    reg, sets = _extract_score_register(tmp_path, out / "model", imgs)
    want = {"base_weights": weights_digest(base), "adapter": weights_digest(out / "adapter"),
            "training_list": trained["training_list_sha256"]}
    assert want["base_weights"] == trained["base_weights"] and want["adapter"] == trained["adapter_sha256"]

    # from the registry alone: the digests travel in the descriptor sets' and sample stats' metadata
    lin = run_json(capsys, ["lineage", reg["ref"], "-r", str(tmp_path / "reg"), "--backbone"])
    assert lin["kind"] == "registry version" and lin["version"]["ref"] == reg["ref"]
    (walk,) = lin["backbones"].values()
    assert walk["lora"] and walk["weights"]["sha256"] == trained["merged_weights"]
    assert {k: walk[k]["sha256"] for k in want} == want
    assert not any(walk[k]["verified"] for k in want)         # no folders given: digests only
    # with the folder to search: each one found and re-hashed
    lin = run_json(capsys, ["lineage", reg["ref"], "-r", str(tmp_path / "reg"), "--models", str(tmp_path)])
    (walk,) = lin["backbones"].values()
    assert walk["weights"] == {"sha256": trained["merged_weights"], "path": str(out / "model"), "verified": True}
    assert all(walk[k]["verified"] for k in want) and walk["training_list"]["images"] == 8
    assert Path(walk["base_weights"]["path"]).resolve() == base.resolve()
    assert walk["params"]["rank"] == TINY["rank"]
    # the same walk from the sample stats file, a descriptor set and the model folder
    for source, kind in ((tmp_path / "ss.parquet", "sample stats"), (sets / "queries", "descriptor set"),
                         (out, "model"), (out / "model", "model")):
        got = run_json(capsys, ["lineage", str(source), "--models", str(tmp_path)])
        (w,) = got["backbones"].values()
        assert got["kind"] == kind and {k: w[k]["sha256"] for k in want} == want and w["adapter"]["verified"], source
    # a changed adapter folder no longer verifies (and says what it hashes to now)
    (out / "adapter" / "adapter_config.json").write_text("{}")
    got = api.model_lineage(reg["ref"], registry=tmp_path / "reg", models=(tmp_path,))
    (w,) = got["backbones"].values()
    assert w["adapter"]["verified"] is False and w["adapter"]["found_sha256"] != want["adapter"]
    assert w["base_weights"]["verified"] and w["training_list"]["verified"]
    # a plain (not LoRA) backbone: the walk stops at its weights; a simulated version has none
    plain = api.model_lineage(base)
    assert plain["backbones"][base.name] == {"weights": {"sha256": want["base_weights"], "path": str(base),
                                                          "verified": True}, "lora": False}
    api.register(*_simulated(tmp_path), registry=tmp_path / "reg")
    capsys.readouterr()
    assert main(["lineage", "sim_gaussian", "-r", str(tmp_path / "reg"), "--backbone"]) == 2
    assert "records no backbone weights" in capsys.readouterr().err


def _simulated(tmp_path):
    ss = tmp_path / "sim.parquet"
    api.simulate_sample_stats("sim_gaussian", ss, s=20_000, k=100, n_queries=20, seed=0)
    api.estimate(ss, "count", params=(), out=tmp_path / "sim_h.parquet")
    return tmp_path / "sim_h.parquet", ss


def test_lineage_from_an_o2i_output_flags_objects_the_adapter_was_trained_on(tmp_path, capsys):
    pytest.importorskip("pybullet")
    from rscale.api import o2i as api_o2i

    sec = {"objects": 3, "seed": 0, "cache": str(tmp_path / "cache"),
           "render": {"distances": [3.5, 4.5], "resolution": 64},
           "canvas": {"distance_index": 0, "sizes": [64, 96], "object_size": 48}, "batch_size": 16}
    first = api_o2i.run_o2i(api_o2i.load_o2i_config(section={**sec, "backbones": [
        {"name": "mb", "model": str(save(tmp_path, "mobilenet")), "pooling": "pooled"}]}), tmp_path / "o2i",
        progress=False, lineage=False)
    out = tmp_path / "lora"
    run_json(capsys, ["train-lora", "--config", str(config(tmp_path)), "--base", str(save(tmp_path, "mobilenet")),
                      "--data", str(first.out), "--evaluation", "1", "--out", str(out), "--no-progress"])
    split = json.loads((out / "split.json").read_text())
    again = api_o2i.run_o2i(api_o2i.load_o2i_config(section={**sec, "backbones": [
        {"name": "mb_lora", "model": str(out / "model"), "pooling": "pooled"}]}), tmp_path / "o2i_lora",
        progress=False, lineage=False)
    lin = run_json(capsys, ["lineage", str(again.out)])
    walk = lin["backbones"]["mb_lora"]
    assert lin["kind"] == "o2i output" and walk["weights"]["verified"] and walk["adapter"]["verified"]
    assert walk["split"]["verified"] and walk["split"]["evaluation_objects"] == split["evaluation"]
    assert walk["trained_on_evaluated_objects"] == sorted(split["train"]) and len(split["train"]) == 2


def test_lora_pipeline_lists_every_lora_parameter_and_the_code_it_runs():
    """A new key in params.yaml's lora: section must rerun train_lora: the stage lists each one dotted."""
    stage = yaml.safe_load((ROOT / "pipelines" / "lora" / "dvc.yaml").read_text())["stages"]["train_lora"]
    (listed,) = [p["params.yaml"] for p in stage["params"]]
    section = yaml.safe_load((ROOT / "params.yaml").read_text())["lora"]
    assert sorted(listed) == sorted(f"lora.{k}" for k in section)
    code = {d for d in stage["deps"] if d.startswith("src/")}
    assert {"src/rscale/api/lora.py", "src/rscale/cli/lora.py", "src/rscale/producers/lora.py",
            "src/rscale/producers/lora_data.py"} <= code and all((ROOT / d).exists() for d in code)
    root = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    assert "train_lora" not in root                  # off the default `dvc repro` path (make demo)


def test_lora_queries_is_a_dependency_of_train_lora_and_its_default_names_none(tmp_path):
    """lora.queries names data the stage reads (the queries it refuses to train on, whose digest the
    run records): a dep, not only a param. DVC cannot depend on null, so the default is a committed
    list file with no entries, which reads as no queries; an empty training list is still refused."""
    from rscale.errors import InvalidArgumentError
    from rscale.producers import lora_data
    stage = yaml.safe_load((ROOT / "pipelines" / "lora" / "dvc.yaml").read_text())["stages"]["train_lora"]
    assert "${lora.queries}" in stage["deps"]
    default = yaml.safe_load((ROOT / "params.yaml").read_text())["lora"]["queries"]
    assert (ROOT / default).is_file() and lora_data.query_paths(ROOT / default) == []
    (tmp_path / "empty.txt").write_text("# nothing\n")
    with pytest.raises(InvalidArgumentError, match="the list is empty"):
        lora_data.training_source(tmp_path / "empty.txt")


@pytest.mark.slow
def test_dvc_pipeline_trains_merges_and_is_cached(tmp_path):
    """`dvc repro pipelines/lora/dvc.yaml` with the repository's pipeline file and tiny params; the
    default `dvc repro` never runs it; a second repro changes nothing; a param change reruns it."""
    pytest.importorskip("dvc")
    shutil.copytree(ROOT / "src", tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "pipelines" / "lora").mkdir(parents=True)
    for name in ("dvc.yaml", "evaluation_queries.txt"):
        shutil.copy(ROOT / "pipelines" / "lora" / name, tmp_path / "pipelines" / "lora" / name)
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    save(tmp_path, "vit")
    draw_images(tmp_path, n=6)
    params["lora"].update({**TINY, "base": "vit-0", "data": "images-0", "out": "out/lora"})
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"lora": params["lora"]}))
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"hello": {"cmd": "echo hi > hi.txt",
                                                                            "outs": ["hi.txt"]}}}))
    env = stage_env(tmp_path, OMP_NUM_THREADS="1")

    def sh(*cmd):
        done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{cmd}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    dvc = [sys.executable, "-m", "dvc"]
    init_dvc_project(tmp_path, env, commit=False)
    sh(*dvc, "repro")                                          # the default path: not the LoRA pipeline
    assert (tmp_path / "hi.txt").exists() and not (tmp_path / "out" / "lora").exists()
    sh(*dvc, "repro", "pipelines/lora/dvc.yaml")
    man = json.loads((tmp_path / "out" / "lora" / "model" / lora.MANIFEST).read_text())
    assert man["steps"] == TINY["steps"] and man["base"]["weights_sha256"] == weights_digest(tmp_path / "vit-0")
    assert (tmp_path / "out" / "lora" / "adapter" / "adapter_model.safetensors").is_file()
    lock = yaml.safe_load((tmp_path / "pipelines" / "lora" / "dvc.lock").read_text())["stages"]["train_lora"]
    assert lock["params"]["params.yaml"]["lora.rank"] == TINY["rank"]
    assert {d["path"] for d in lock["deps"]} >= {"vit-0", "images-0", "src/rscale/producers/lora.py"}
    assert "didn't change" in sh(*dvc, "repro", "pipelines/lora/dvc.yaml")
    assert "up to date" in sh(*dvc, "status", "pipelines/lora/dvc.yaml")
    # lora.queries names data the stage reads: a dependency, so new evaluation queries rerun it
    assert {d["path"] for d in lock["deps"]} >= {params["lora"]["queries"]}
    queries = tmp_path / params["lora"]["queries"]
    listed = queries.read_text()
    queries.write_text(listed + "../../elsewhere/q0.png\n")
    assert "modified:" in sh(*dvc, "status", "pipelines/lora/dvc.yaml") and queries.name in \
        sh(*dvc, "status", "pipelines/lora/dvc.yaml")
    queries.write_text(listed)
    assert "up to date" in sh(*dvc, "status", "pipelines/lora/dvc.yaml")
    params["lora"]["steps"] = TINY["steps"] + 2                 # a trainer param: the stage reruns from scratch
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"lora": params["lora"]}))
    assert "lora.steps" in sh(*dvc, "status", "pipelines/lora/dvc.yaml")
    sh(*dvc, "repro", "pipelines/lora/dvc.yaml")
    man = json.loads((tmp_path / "out" / "lora" / "model" / lora.MANIFEST).read_text())
    assert man["steps"] == TINY["steps"] + 2 and man["params"]["resumed_from"] == 0


def commented_lora_entry(root=ROOT) -> tuple[str, dict]:
    """params.yaml's commented real_backbones entry on the merged model (under the lora: section)."""
    lines = (root / "params.yaml").read_text().splitlines()
    start = lines.index("#   mobilenet_v2_lora:")
    block = []
    for line in lines[start:]:
        if not line.startswith("#"):
            break
        block.append(line[2:])
    (name, entry), = yaml.safe_load("\n".join(block)).items()
    return name, entry


def test_the_commented_lora_entry_points_at_the_merged_model(tmp_path):
    from rscale.api.real_backbones import load_real_backbone

    name, entry = commented_lora_entry()
    lora_section = yaml.safe_load((ROOT / "params.yaml").read_text())["lora"]
    assert name == "mobilenet_v2_lora" and entry["backbone"]["model"] == f"{lora_section['out']}/model"
    assert entry["backbone"]["pooling"] == "pooled"            # as the O2I benchmark pools the base MobileNetV2
    # uncommented under real_backbones:, it reads as an entry once train_lora has written the folder
    merged = tmp_path / entry["backbone"]["model"]
    shutil.copytree(save(tmp_path, "mobilenet"), merged)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"real_backbones": {name: entry}}))
    got = load_real_backbone(tmp_path / "params.yaml", name)
    assert got.model == merged and got.registered_name == name and got.root == tmp_path / entry["images"]["root"]
    # and the real stages' graph reaches train_lora through it: the model folder is one of their deps
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    assert "${item.backbone.model}" in stages["real_gallery"]["do"]["deps"]
    assert "${item.backbone.model}" in stages["real_queries"]["do"]["deps"]


@pytest.mark.slow
def test_fresh_clone_trains_merges_extracts_and_registers_the_adapted_model(tmp_path):
    """From a `git clone` of this repository (its committed dvc.yaml, pipelines/lora/dvc.yaml and
    params.yaml): a tiny ViT as lora.base and params.yaml's commented real_backbones entry on the
    merged model switched on -> `dvc repro real_register@NAME` trains and merges (train_lora), extracts,
    scores, estimates and registers; the registered version's lineage reaches the base weights,
    the adapter and the training list, and `dvc status` is clean. It tests the committed tree:
    uncommitted changes are not in the clone."""
    pytest.importorskip("dvc")
    from test_real_pipeline import images        # an ILIAS tree and distractors, one definition

    repo = tmp_path / "clone"
    env = stage_env(repo, OMP_NUM_THREADS="1", MLFLOW_DISABLE_TELEMETRY="true")   # the clone's code, as DVC's stages run it

    def sh(*cmd, cwd):
        done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{cmd}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    sh("git", "clone", "-q", str(ROOT), str(repo), cwd=tmp_path)
    base = save(repo, "vit")                                     # repo/vit-0, tiny random ViT
    draw_images(repo, n=6)                                       # repo/images-0: the training images
    images(repo / "data", instances=6, positives=2, distractors=120)
    name, entry = commented_lora_entry(repo)                     # the clone's own params.yaml
    assert entry["backbone"]["model"] == "out/lora/model"
    entry["backbone"].update({"pooling": "cls", "preprocessing": "resize", "resolution": 32, "batch_size": 16})
    entry["images"].update({"root": "data/ilias", "distractors": "data/distractors"})
    entry["score"].update({"fraction": 0.5, "k": 40})
    params_file = repo / "params.yaml"
    params = yaml.safe_load(params_file.read_text())
    params["lora"].update({**TINY, "base": "vit-0", "data": "images-0"})
    params["real_backbones"] = {"tiny_lora": entry}
    params["estimate"]["evt"]["k_top"] = 40
    params_file.write_text(yaml.safe_dump(params, sort_keys=False))
    dvc, rscale = [sys.executable, "-m", "dvc"], [sys.executable, "-m", "rscale.cli"]

    sh(*dvc, "repro", "real_register@tiny_lora", cwd=repo)
    out = repo / params["lora"]["out"]
    man = json.loads((out / "model" / lora.MANIFEST).read_text())
    assert man["steps"] == TINY["steps"] and man["base"]["weights_sha256"] == weights_digest(base)
    receipt = json.loads((repo / "out" / "registered" / "tiny_lora.json").read_text())
    assert receipt["ref"] == "tiny_lora@v1"
    versions = json.loads(sh(*rscale, "ls", "-r", "registry", "--format", "json", cwd=repo))
    assert [v["backbone"] for v in versions] == ["tiny_lora"]
    # the descriptor sets came from the merged model (its digest), and carry the manifest's lineage
    from rscale.store.descriptor_set import DescriptorSet
    queries = DescriptorSet.open(repo / "out" / "real" / "tiny_lora" / "queries")
    assert queries.count == 6 and queries.manifest["weights_sha256"] == weights_digest(out / "model")

    lin = json.loads(sh(*rscale, "lineage", "tiny_lora", "-r", "registry", "--models", str(out), "--format",
                        "json", cwd=repo))
    assert lin["version"]["ref"] == "tiny_lora@v1"
    (walk,) = lin["backbones"].values()
    assert walk["lora"] and walk["weights"]["verified"] and walk["weights"]["sha256"] == weights_digest(out / "model")
    assert walk["base_weights"]["sha256"] == weights_digest(base) and walk["base_weights"]["verified"]
    assert Path(walk["base_weights"]["path"]).resolve() == base.resolve()
    assert walk["adapter"] == {"sha256": weights_digest(out / "adapter"), "path": str(out / "adapter"),
                               "verified": True}
    assert walk["training_list"]["verified"] and walk["training_list"]["images"] == 6
    assert walk["training_list"]["sha256"] == man["training_list_sha256"]

    # every stage of the chain is recorded and up to date: train_lora in pipelines/lora/dvc.lock,
    # the real_* stages in dvc.lock; nothing reruns
    lock = yaml.safe_load((repo / "pipelines" / "lora" / "dvc.lock").read_text())["stages"]
    assert {d["path"] for d in lock["train_lora"]["deps"]} >= {"vit-0", "images-0"}
    root_lock = yaml.safe_load((repo / "dvc.lock").read_text())["stages"]
    assert {f"{s}@tiny_lora" for s in ("real_gallery", "real_queries", "real_score", "real_estimate",
                                       "real_register")} <= set(root_lock)
    assert "real_rerank@tiny_lora" not in root_lock            # no rerank_backbones entry: first stage only
    assert "out/lora/model" in {d["path"] for d in root_lock["real_gallery@tiny_lora"]["deps"]}
    assert "up to date" in sh(*dvc, "status", "--with-deps", "real_register@tiny_lora", cwd=repo)
    assert "up to date" in sh(*dvc, "status", "pipelines/lora/dvc.yaml", cwd=repo)
    # a trainer parameter reruns the training and, through the merged model, everything after it
    params["lora"]["rank"] = 2
    params_file.write_text(yaml.safe_dump(params, sort_keys=False))
    stale = sh(*dvc, "status", "--with-deps", "real_register@tiny_lora", cwd=repo)
    assert "train_lora" in stale and "lora.rank" in stale
