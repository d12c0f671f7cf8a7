"""Real backbones through the DVC pipeline: a params.yaml `real_backbones:` entry -> `dvc repro`
(extract -> score -> rerank, estimate -> register), on a tiny random ViT checkpoint, a tiny random
OWLv2 detector and drawn images, in a temporary copy of the pipeline; then an intervention
ablation with `dvc exp run`."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

pytest.importorskip("dvc")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from PIL import Image  # noqa: E402

from rscale.errors import FormatError, InvalidArgumentError  # noqa: E402

from test_rerank import save_owlv2  # noqa: E402
from dvc_projects import init_dvc_project, stage_env  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            image_size=32, patch_size=8)


def run(cmd, cwd, env):
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, f"{cmd} failed:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def changed(text):
    """Stage names `dvc status` reports as changed."""
    return {line.strip().rstrip(":") for line in text.splitlines() if line and not line.startswith((" ", "\t"))}


def tiny_vit(path):
    torch.manual_seed(0)
    transformers.ViTModel(transformers.ViTConfig(**TINY)).save_pretrained(path)
    return path


def draw(path, colour, rng, noise=30):
    arr = np.clip(np.asarray(colour, float) + rng.normal(0, noise, (40, 48, 3)), 0, 255).astype(np.uint8)
    x, y = rng.integers(0, 24, 2)
    arr[y:y + 16, x:x + 16] = 255 - np.asarray(colour)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).save(path)


def images(root, instances=10, positives=3, distractors=120, seed=0):
    """An ILIAS tree (root/ilias) and a distractor folder (root/distractors)."""
    rng = np.random.default_rng(seed)
    for i in range(instances):
        colour = rng.integers(0, 256, 3)
        draw(root / "ilias" / f"obj{i:02d}" / "query" / "q.png", colour, rng)
        for j in range(positives):
            draw(root / "ilias" / f"obj{i:02d}" / "pos" / f"p{j}.png", colour, rng)
    for d in range(distractors):
        draw(root / "distractors" / f"d{d:03d}.png", rng.integers(0, 256, 3), rng, noise=60)


def entry(root, model, candidates=None, **queries):
    return {"backbone": {"model": str(model), "pooling": "cls", "preprocessing": "resize", "resolution": 32,
                         "batch_size": 16},
            "images": {"layout": "ilias", "root": f"{root}/ilias", "distractors": f"{root}/distractors"},
            "queries": {"intervention": "none", "crop": False, **queries},
            "score": {"fraction": 0.5, "k": 40, "seed": 0, **({"candidates": candidates} if candidates else {})}}


RERANK = {"detector": "ckpt/tiny_owl", "max_boxes": 2}
CANDIDATES = 25            # real_backbones.<name>.score.candidates of the reranked entry


@pytest.fixture()
def project(tmp_path):
    for name in ("dvc.yaml", "params.yaml", ".dvcignore"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "src" / "rscale", tmp_path / "src" / "rscale", ignore=shutil.ignore_patterns("__pycache__"))
    stages = yaml.safe_load((tmp_path / "dvc.yaml").read_text())["stages"]
    # the real stages and the report; the simulated ones are tests/test_pipeline.py's
    keep = {k: v for k, v in stages.items() if k.startswith("real_") and k != "real_example" or k == "report"}
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": keep}, sort_keys=False))
    tiny_vit(tmp_path / "ckpt" / "tiny_vit")
    save_owlv2(tmp_path / "ckpt" / "tiny_owl")
    images(tmp_path / "data")
    params = yaml.safe_load((tmp_path / "params.yaml").read_text())
    assert params["real_backbones"] == {}          # the committed default keeps `make demo` short
    params["estimate"]["evt"]["k_top"] = 40
    params["real_backbones"] = {"tiny": entry("data", "ckpt/tiny_vit", candidates=CANDIDATES)}
    assert params["rerank_backbones"] == {}
    params["rerank_backbones"] = {"tiny": dict(RERANK)}
    # params.yaml's rerank: section holds the reranker's defaults; a group's own keys win over it
    assert params["rerank"]["max_boxes"] == 10 and params["rerank"]["nms_iou"] == 0.5
    params["rerank"]["nms_iou"] = 0.4
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    env = stage_env(tmp_path)
    init_dvc_project(tmp_path, env)
    return tmp_path, env


def brute_force_counts(path, fraction, seed):
    """Per positive, the sampled distractors scoring at or above it: a plain loop over the sets."""
    from rscale.api.scoring import read_qrels
    from rscale.score.sampling import in_sample
    from rscale.store.descriptor_set import DescriptorSet

    def load(p):
        ds = DescriptorSet.open(p)
        return ds.ids().astype(str), np.concatenate([np.asarray(v, np.float64) for _, v in ds.shards()])
    q_ids, q = load(path / "queries")
    p_ids, p = load(path / "gallery" / "positives")
    d_ids, d = load(path / "gallery" / "distractors")
    d = d[in_sample(d_ids, fraction, seed)]
    rel = read_qrels(path / "gallery" / "qrels.parquet")
    where = {pid: i for i, pid in enumerate(p_ids)}
    out = {}
    for qi, qid in enumerate(q_ids):
        scores = d @ q[qi]
        for pid in rel[qid]:
            out[(qid, pid)] = int(np.sum(scores >= float(p[where[pid]] @ q[qi])))
    return out, len(d)


def test_one_entry_and_dvc_repro_registers_a_real_backbone_and_exp_run_ablates_interventions(project):
    from rscale.store.descriptor_set import DescriptorSet
    from rscale.store.sample_stats_file import read_sample_stats

    path, env = project
    dvc = [sys.executable, "-m", "dvc"]
    rscale = [sys.executable, "-m", "rscale.cli"]
    run(dvc + ["repro"], path, env)
    assert json.loads((path / "out" / "registered" / "tiny.json").read_text())["ref"] == "tiny@v1"
    assert json.loads((path / "out" / "registered" / "tiny.reranked.json").read_text())["ref"] == "tiny@v2"
    queries = DescriptorSet.open(path / "out" / "real" / "tiny" / "queries")
    distractors = DescriptorSet.open(path / "out" / "real" / "tiny" / "gallery" / "distractors")
    assert (queries.count, distractors.count) == (10, 120)
    assert queries.manifest["backbone"] == "tiny" and queries.manifest["intervention"] == "none"
    assert distractors.manifest["source"] == "data/distractors" and distractors.manifest["resolution"] == 32
    # the sample stats are those of the entry's fraction and seed: the same counts as a plain loop
    ss = read_sample_stats(path / "out" / "sample_stats" / "tiny.parquet")
    truth, s = brute_force_counts(path / "out" / "real" / "tiny", 0.5, 0)
    got = {(str(ss.query_ids[qi]), str(ss.pos_ids[j])): int(ss.pos_counts[j])
           for qi in range(ss.n_queries) for j in range(ss.pos_offsets[qi], ss.pos_offsets[qi + 1])}
    assert got == truth and set(ss.n_sampled.tolist()) == {s} and 30 < s < 90
    assert ss.meta["backbone"] == "tiny" and ss.meta["distractor_source"] == "data/distractors"
    assert "tiny" in (path / "out" / "report.md").read_text()
    # the reranked sample: each query's top 25 sampled candidates (kept by id by real_score as it
    # scored: the sample is scored once) and its positives rescored by the crop reranker, in sample
    # stats schema 2 next to the first stage's
    from rscale.store.candidate_lists import read_candidates
    assert not (path / "out" / "rerank").exists()                 # no second scoring pass
    assert ss.meta["candidates"] == str(CANDIDATES)
    # the halves are recorded by distractor id (score --halves), so two entries scored on these
    # images pair in 'for A vs B', and the reranked input's halves are the hardness replicates'
    assert ss.has_halves and ss.meta["sample_ids"].startswith("n=")
    rr = read_sample_stats(path / "out" / "sample_stats" / "tiny.reranked.parquet")
    assert rr.schema_version == 3 and rr.top_rerank.shape == (10, 25) and rr.pos_rerank.shape == (30,)
    assert np.array_equal(rr.top_halves, ss.top_halves)
    np.testing.assert_array_equal(rr.top_scores, ss.top_scores)
    # the whole image is a region: no rerank score is below its first-stage score (fp16 regions)
    assert np.all(rr.pos_rerank >= rr.pos_scores - 2e-3) and np.all(rr.top_rerank >= rr.top_scores[:, :25] - 2e-3)
    # its regions were made with the rerank: section's nms_iou and the group's max_boxes (the cache identity)
    identity = json.loads((path / "out" / "region_cache" / "tiny" / "cache.json").read_text())["identity"]
    assert identity["proposals"] == {"max_boxes": 2, "nms_iou": 0.4, "min_objectness": 0.0, "min_side": 8.0}
    qids, gids, scores, _ = read_candidates(path / "out" / "sample_stats" / "tiny.candidates.parquet", 25)
    row = {q: i for i, q in enumerate(ss.query_ids)}
    np.testing.assert_allclose(scores, ss.top_scores[[row[q] for q in qids], :25], atol=1e-7)
    from rscale.score.sampling import in_sample
    assert in_sample(np.unique(gids), 0.5, 0).all() and np.all(np.char.startswith(gids.astype(str), "d"))
    predicted = json.loads(run(rscale + ["predict-rerank", "out/sample_stats/tiny.reranked.parquet", "--n", "120",
                                         "--depth", "20", "--metric", "mAP@20", "--method", "count", "--format",
                                         "json"], path, env))
    assert 0 <= predicted[0]["value"] <= 1
    assert (path / "out" / "region_cache" / "tiny" / "cache.json").exists()
    # real_register_reranked registers the reranked sample as the next version: `dvc repro` gives a
    # latest version that answers both stages, and the report shows both
    both = json.loads(run(rscale + ["query", "mAP@20 at N=120 for tiny reranked@20", "-r", "registry",
                                    "--format", "json"], path, env))
    assert both["rows"][0]["reranked"] == 20 and 0 <= both["rows"][0]["value"] <= 1
    assert "reranked@" in (path / "out" / "report.md").read_text()

    # dotted params: what no stage reads reruns nothing; each sub-mapping reruns its own stages
    params_file = path / "params.yaml"
    original = params_file.read_text()
    params = yaml.safe_load(original)
    params["estimate"]["sdm"] = {"bins": 3}
    params["report"]["n"] = 1e9
    params_file.write_text(yaml.safe_dump(params, sort_keys=False))
    assert "up to date" in run(dvc + ["status"], path, env)
    params["real_backbones"]["tiny"]["score"]["fraction"] = 0.25
    params_file.write_text(yaml.safe_dump(params, sort_keys=False))
    assert changed(run(dvc + ["status"], path, env)) == {"real_score@tiny"}     # real_rerank: once its input changes
    params["real_backbones"]["tiny"]["score"]["fraction"] = 0.5
    params["real_backbones"]["tiny"]["queries"]["intervention"] = "gp"
    params_file.write_text(yaml.safe_dump(params, sort_keys=False))
    assert changed(run(dvc + ["status"], path, env)) == {"real_queries@tiny"}
    params["real_backbones"]["tiny"]["queries"]["intervention"] = "none"
    (path / "data" / "distractors.txt").write_text("".join(f"{p}\n" for p in sorted((path / "data" / "distractors").iterdir())))
    params["real_backbones"]["tiny"]["images"]["distractors"] = "data/distractors.txt"
    params_file.write_text(yaml.safe_dump(params, sort_keys=False))
    assert changed(run(dvc + ["status"], path, env)) == {"real_gallery@tiny"}
    params = yaml.safe_load(original)
    params["rerank"]["k"] = 50                     # rscale rerank's K': no stage reads it
    params_file.write_text(yaml.safe_dump(params, sort_keys=False))
    assert "up to date" in run(dvc + ["status"], path, env)
    params["rerank"]["min_side"] = 4.0             # a default real_rerank reads
    params_file.write_text(yaml.safe_dump(params, sort_keys=False))
    assert changed(run(dvc + ["status"], path, env)) == {"real_rerank@tiny"}
    params = yaml.safe_load(original)
    params["rerank_backbones"]["tiny"]["max_boxes"] = 3
    params_file.write_text(yaml.safe_dump(params, sort_keys=False))
    assert changed(run(dvc + ["status"], path, env)) == {"real_rerank@tiny"}
    params = yaml.safe_load(original)
    params["real_backbones"]["tiny"]["score"]["candidates"] = 20      # kept by the scoring itself now
    params_file.write_text(yaml.safe_dump(params, sort_keys=False))
    assert changed(run(dvc + ["status"], path, env)) == {"real_score@tiny"}
    params_file.write_text(original)
    # and the code a stage runs is one of its dependencies
    code = path / "src" / "rscale" / "producers" / "interventions.py"
    code.write_text(code.read_text() + "\n# touched\n")
    assert changed(run(dvc + ["status"], path, env)) == {"real_queries@tiny"}
    code.write_text(code.read_text().replace("\n# touched\n", ""))
    code = path / "src" / "rscale" / "producers" / "rerank_sample.py"
    code.write_text(code.read_text() + "\n# touched\n")
    assert changed(run(dvc + ["status"], path, env)) == {"real_rerank@tiny"}
    code.write_text(code.read_text().replace("\n# touched\n", ""))
    weights = path / "ckpt" / "tiny_vit" / "config.json"
    weights.write_text(weights.read_text() + "\n")
    assert changed(run(dvc + ["status"], path, env)) == {"real_gallery@tiny", "real_queries@tiny"}
    weights.write_text(weights.read_text()[:-1])

    # adding a backbone is one entry: the folders layout, list files and a qrels CSV; without a
    # rerank_backbones entry it gets the first-stage stages only, registered from the plain sample
    lists = path / "data" / "lists"
    lists.mkdir()
    inst = sorted((path / "data" / "ilias").iterdir())
    (lists / "queries.txt").write_text("".join(f"{p / 'query' / 'q.png'}\n" for p in inst))
    (lists / "positives.txt").write_text("".join(f"{p / 'pos' / 'p0.png'}\n" for p in inst))
    (lists / "qrels.csv").write_text("query_id,positive_id\n" + "".join(
        f"{p / 'query' / 'q'},{p / 'pos' / 'p0'}\n" for p in inst))
    second = entry("data", "ckpt/tiny_vit")
    second["images"].update({"layout": "folders", "root": "data/lists"})
    params = yaml.safe_load(original)
    params["real_backbones"]["tiny_lists"] = second
    params_file.write_text(yaml.safe_dump(params, sort_keys=False))
    assert changed(run(dvc + ["status"], path, env)) == {f"{s}@tiny_lists" for s in (
        "real_gallery", "real_queries", "real_score", "real_estimate", "real_register")}
    run(dvc + ["repro"], path, env)
    assert "up to date" in run(dvc + ["status"], path, env)
    assert not (path / "out" / "sample_stats" / "tiny_lists.reranked.parquet").exists()
    import pyarrow.parquet as pq
    assert pq.read_metadata(path / "out" / "sample_stats" / "tiny_lists.candidates.parquet").num_rows == 0
    plain = json.loads(run(rscale + ["query", "mAP@20 at N=120 for tiny_lists", "-r", "registry", "--format",
                                     "json"], path, env))
    assert 0 <= plain["rows"][0]["value"] <= 1
    done = subprocess.run(rscale + ["query", "mAP@20 at N=120 for tiny_lists reranked@20", "-r", "registry"],
                          cwd=path, env=env, capture_output=True, text=True)
    assert done.returncode == 2 and "has no rerank data" in done.stderr
    ss2 = read_sample_stats(path / "out" / "sample_stats" / "tiny_lists.parquet")
    assert ss2.n_queries == 10 and ss2.n_positives == 10 and ss2.meta["backbone"] == "tiny_lists"
    # the same images and model: each query's one positive scores as the ILIAS entry's p0 did
    by_pos = {str(p).split("/pos/")[0].rsplit("/", 1)[-1]: c for p, c in zip(ss2.pos_ids, ss2.pos_counts)}
    assert by_pos == {q.split("/")[0]: c for (q, p), c in truth.items() if p.endswith("/p0")}

    # the intervention ablation through dvc experiments: baseline, GP and MSA on the same backbone
    run(["git", "add", "-A"], path, env)
    run(["git", "commit", "-qm", "lock"], path, env)
    for intervention in ("gp", "msa"):
        out = run(dvc + ["exp", "run", "--set-param", f"real_backbones.tiny.queries.intervention={intervention}"],
                  path, env)
        assert "real_gallery@tiny' didn't change" in out        # only the queries are extracted again
        q = DescriptorSet.open(path / "out" / "real" / "tiny" / "queries")
        assert q.manifest["intervention"] == intervention
    versions = json.loads(run(rscale + ["ls", "-r", "registry", "--format", "json"], path, env))
    assert {v["backbone"] for v in versions} == {"tiny", "tiny-gp", "tiny-msa", "tiny_lists"}
    run(rscale + ["report", "-r", "registry", "-o", "report.md"], path, env)
    report = (path / "report.md").read_text()
    rows = {line.split("|")[1].strip() for line in report.splitlines()
            if line.startswith("| tiny")}
    assert {"tiny", "tiny-gp", "tiny-msa"} <= rows, report


def test_entry_mistakes_are_one_line_errors(tmp_path):
    from rscale.api.real_backbones import load_real_backbone, load_rerank_group
    from rscale.cli import main

    tiny_vit(tmp_path / "ckpt")
    cfg = tmp_path / "params.yaml"

    def write(**overrides):
        e, rr = entry("data", "ckpt", candidates=CANDIDATES), dict(RERANK)
        for dotted, value in overrides.items():
            group, key = dotted.split("__")
            (rr if group == "rerank" else e[group])[key] = value
        cfg.write_text(yaml.safe_dump({"real_backbones": {"b": e}, "rerank_backbones": {"b": rr}}))

    write()
    got = load_real_backbone(cfg, "b")
    assert got.model == tmp_path / "ckpt" and got.root == tmp_path / "data" / "ilias" and got.registered_name == "b"
    write(queries__intervention="gp")
    assert load_real_backbone(cfg, "b").registered_name == "b-gp"
    with pytest.raises(InvalidArgumentError, match="no entry 'c' under real_backbones.*entries: b"):
        load_real_backbone(cfg, "c")
    for override, message in ((dict(queries__intervention="qe"), "intervention must be one of none, gp, msa"),
                              (dict(images__layout="tree"), "layout must be one of ilias, folders"),
                              (dict(score__fraction=1.5), r"fraction must lie in \(0, 1\]"),
                              (dict(score__k=0), "score.k must be a whole number >= 1"),
                              (dict(backbone__pooling="max"), "pooling must be one of"),
                              (dict(queries__intervention="msa", backbone__pooling="mean"), "msa .* with pooling cls"),
                              (dict(backbone__model="mobilenet_v2_imagenet"), "is a builtin name: give a checkpoint"),
                              (dict(images__bogus=1), r"unknown key\(s\) \['bogus'\]")):
        write(**override)
        with pytest.raises(FormatError, match=message):
            load_real_backbone(cfg, "b")
    # the optional rerank group, rerank_backbones.b: checked when the rerank stage reads it
    write()
    got, rr = load_rerank_group(cfg, "b")
    assert got.name == "b" and rr["detector"] == tmp_path / "ckpt" / "tiny_owl" and rr["candidates"] == 25
    assert rr["cache"] == tmp_path / "out" / "region_cache" / "b"
    for override, message in ((dict(score__candidates=41), r"real_backbones.b.score.candidates must be a whole "
                                                            r"number in \[0, score.k=40\]"),
                              (dict(score__candidates=0), r"rerank_backbones.b reranks each query's top "
                                                          r"real_backbones.b.score.candidates"),
                              (dict(rerank__candidates=25), r"rerank_backbones.b.candidates moved to "
                                                            r"real_backbones.b.score.candidates"),
                              (dict(rerank__detector=None), "rerank_backbones.b: give detector"),
                              (dict(rerank__boxes=3), r"rerank_backbones.b: unknown key\(s\) \['boxes'\]")):
        write(**override)
        with pytest.raises(FormatError, match=message):
            load_rerank_group(cfg, "b")
    e = entry("data", "ckpt")
    for doc, load, message in (
            ({"real_backbones": {"b": {**e, "rerank": dict(RERANK)}}}, load_real_backbone,
             "real_backbones.b.rerank: the rerank group is an entry of its own, rerank_backbones.b"),
            ({"real_backbones": {"b": e}, "rerank_backbones": {"b": [1]}}, load_rerank_group,
             "rerank_backbones.b must be a mapping"),
            ({"real_backbones": {"b": e}, "rerank_backbones": {"c": dict(RERANK)}}, load_rerank_group,
             "no entry 'b' under rerank_backbones"),
            ({"real_backbones": {"a": e}, "rerank_backbones": {"b": dict(RERANK)}}, load_rerank_group,
             "rerank_backbones.b names no real_backbones entry")):
        cfg.write_text(yaml.safe_dump(doc))
        with pytest.raises((FormatError, InvalidArgumentError), match=message):
            load(cfg, "b")
        rc = main(["rerank-backbone", "b", "--config", str(cfg), "-o", str(tmp_path / "rr.parquet")])
        assert rc == 2 and not (tmp_path / "rr.parquet").exists()
    write()
    out = tmp_path / "out"
    rc = main(["extract-backbone", "b", "--part", "gallery", "--config", str(cfg), "-o", str(out)])
    assert rc == 2 and not out.exists()               # data/ilias is missing: refused, nothing written
    assert main(["extract-backbone", "b", "--part", "all", "--config", str(cfg), "-o", str(out)]) == 2
    # reranking before the entry was extracted: one line naming the missing descriptor sets, nothing written
    rc = main(["rerank-backbone", "b", "--config", str(cfg), "-o", str(tmp_path / "rr.parquet")])
    assert rc == 2 and not (tmp_path / "rr.parquet").exists()
    # and so is scoring it (score-backbone, the stage real_score), and scoring an entry that is not there
    for name in ("b", "c"):
        rc = main(["score-backbone", name, "--config", str(cfg), "-o", str(tmp_path / "ss.parquet")])
        assert rc == 2 and not list(tmp_path.glob("ss*"))


def test_scored_backbone_names_the_query_intervention():
    from rscale.api.scoring import scored_backbone
    assert scored_backbone({"intervention": "none"}, {"backbone": "vit"}) == "vit"
    assert scored_backbone({"intervention": "gp"}, {"backbone": "vit"}) == "vit-gp"
    assert scored_backbone({}, {}) == "unknown"         # simulated sets record no intervention


def test_the_commented_example_in_params_yaml_is_a_valid_entry(tmp_path):
    # the README's ready example lives commented out under `real_backbones: {}`: uncommented, it
    # must read as an entry (its checkpoint folder is what the stage real_example writes)
    from rscale.api.real_backbones import load_real_backbone

    lines = (ROOT / "params.yaml").read_text().splitlines()
    start = lines.index("# real_backbones:")
    block = []
    for line in lines[start:]:
        if not line.startswith("#"):
            break
        block.append(line[2:])
    cfg = yaml.safe_load("\n".join(block))
    (name, e), = cfg["real_backbones"].items()
    tiny_vit(tmp_path / e["backbone"]["model"])
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(cfg))
    got = load_real_backbone(tmp_path / "params.yaml", name)
    assert (got.name, got.pooling, got.layout, got.fraction) == ("mobilenet_v2_photos", "pooled", "ilias", 0.5)
    from rscale.api.real_backbones import load_rerank_group
    assert got.candidates == 32 and load_rerank_group(tmp_path / "params.yaml", name)[1]["candidates"] == 32
    assert got.root == tmp_path / "out" / "examples" / "photos" / "instances"


def test_the_example_photo_set_is_an_ilias_tree_with_distractors(tmp_path):
    import importlib.util

    pytest.importorskip("skimage")
    from rscale.producers.extract import ilias_layout, image_items

    spec = importlib.util.spec_from_file_location("real_backbone_inputs", ROOT / "examples" / "real_backbone_inputs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    counts = module.write_photo_set(tmp_path)
    queries, positives, qrels = ilias_layout(tmp_path / "instances")
    distractors = image_items(tmp_path / "distractors")
    assert (len(queries), len(positives), len(qrels), len(distractors)) == (32, 96, 96, 400)
    assert counts == {"instances": 32, "positives": 96, "distractors": 400}
    # no distractor is cut from a photo that gives an instance
    assert not {d.split("-")[0] for d, *_ in distractors} & set(module.INSTANCE_PHOTOS)
    assert max(max(Image.open(p).size) for _, p, _ in distractors[:20]) <= module.MAX_SIDE


def test_an_entrys_sets_name_its_benchmark_after_the_images_root(tmp_path):
    # registered as benchmark 'unknown' before: the sets recorded no benchmark for scoring to carry
    from rscale.api.real_backbones import extract_real_backbone
    from rscale.store.descriptor_set import DescriptorSet

    tiny_vit(tmp_path / "ckpt")
    images(tmp_path / "data", instances=3, positives=1, distractors=4)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"real_backbones": {"tiny": entry("data", "ckpt")}}))
    extract_real_backbone(tmp_path / "params.yaml", "tiny", part="gallery", out=tmp_path / "g", progress=False)
    extract_real_backbone(tmp_path / "params.yaml", "tiny", part="queries", out=tmp_path / "q", progress=False)
    assert DescriptorSet.open(tmp_path / "q").manifest["benchmark"] == "ilias"
    assert DescriptorSet.open(tmp_path / "g" / "positives").manifest["benchmark"] == "ilias"
