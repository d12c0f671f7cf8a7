"""The DVC pipeline end to end on small simulated data (dvc is installed by `make test`)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from dvc_projects import init_dvc_project, stage_env

pytest.importorskip("dvc")
pytestmark = pytest.mark.slow          # DVC end to end: a minute or more

ROOT = Path(__file__).resolve().parents[1]


def run(cmd, cwd, env):
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"{cmd} failed:\n{out.stdout}\n{out.stderr}"
    return out.stdout


@pytest.fixture()
def project(tmp_path):
    for name in ("dvc.yaml", "params.yaml", ".dvcignore"):
        shutil.copy(ROOT / name, tmp_path / name)
    # the stages depend on the code they run
    shutil.copytree(ROOT / "src" / "rscale", tmp_path / "src" / "rscale", ignore=shutil.ignore_patterns("__pycache__"))
    params = yaml.safe_load((tmp_path / "params.yaml").read_text())
    params["sample"].update({"s": 200_000, "k": 400, "queries": 60})
    params["estimate"]["evt"]["k_top"] = 400
    params["backbones"] = ["sim_gaussian", "sim_neardup"]
    params["descriptors"].update({"instances": 40, "distractors": 20_000, "fraction": 0.25, "k": 300})
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    stages = yaml.safe_load((tmp_path / "dvc.yaml").read_text())
    stages["stages"].pop("o2i")            # the O2I benchmark's stage: tests/test_o2i_pipeline.py runs it
    stages["stages"].pop("real_example")   # the real-backbone example's inputs (real MobileNetV2 weights)
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump(stages, sort_keys=False))
    # the stages run the copied sources (their dependencies), not whichever rscale the venv has
    env = stage_env(tmp_path)
    init_dvc_project(tmp_path, env)
    return tmp_path, env


def test_the_stages_run_the_sources_under_test(project):
    # without PYTHONPATH the stages' `rscale` ran whatever rscale the venv had installed (another
    # checkout's sources), not the copy under src/ that they list as dependencies
    path, env = project
    where = run([sys.executable, "-c", "import rscale.cli; print(rscale.cli.__file__)"], path, env).strip()
    assert Path(where).resolve() == (path / "src" / "rscale" / "cli" / "__init__.py").resolve(), where


def test_repro_fills_the_registry_and_exp_run_ablates(project):
    path, env = project
    dvc = [sys.executable, "-m", "dvc"]
    run(dvc + ["repro"], path, env)
    receipts = sorted((path / "out" / "registered").glob("*.json"))
    assert [p.stem for p in receipts] == ["sim_desc", "sim_gaussian", "sim_neardup"]
    assert [json.loads(p.read_text())["ref"] for p in receipts] == ["sim_desc@v1", "sim_gaussian@v1", "sim_neardup@v1"]
    assert "sim_neardup" in (path / "out" / "report.md").read_text()
    rscale = [sys.executable, "-m", "rscale.cli"]
    out = json.loads(run(rscale + ["query", "mAP@1000 at N=1e8 for *", "-r", "registry", "--format", "json"],
                         path, env))
    assert {r["backbone"] for r in out["rows"]} == {"sim_desc", "sim_gaussian", "sim_neardup"}
    # nothing changed: a second repro runs no stage
    assert "didn't change" in run(dvc + ["repro"], path, env)
    # parameters no stage reads (the demo's N, another method's parameters) rerun nothing ...
    params_file = path / "params.yaml"
    original = params_file.read_text()
    params = yaml.safe_load(original)
    params["report"]["n"] = 1e9
    params["estimate"]["sdm"] = {"bins": 3}
    params_file.write_text(yaml.safe_dump(params, sort_keys=False))
    assert "up to date" in run(dvc + ["status"], path, env)
    # ... one a stage reads reruns exactly the stages that read it
    params["sample"]["seed"] = 1
    params_file.write_text(yaml.safe_dump(params, sort_keys=False))
    changed = {line.strip().rstrip(":") for line in run(dvc + ["status"], path, env).splitlines()
               if line and not line.startswith((" ", "\t"))}
    assert changed == {"sample@sim_gaussian", "sample@sim_neardup"}, changed
    # and the code a stage runs is one of its dependencies
    params_file.write_text(original)
    code = path / "src" / "rscale" / "api" / "querying.py"
    code.write_text(code.read_text() + "\n# touched\n")
    changed = {line.strip().rstrip(":") for line in run(dvc + ["status"], path, env).splitlines()
               if line and not line.startswith((" ", "\t"))}
    assert changed == {"report"}, changed
    code.write_text(code.read_text().replace("\n# touched\n", ""))
    # an estimator ablation through dvc experiments
    run(["git", "add", "-A"], path, env)
    run(["git", "commit", "-qm", "lock"], path, env)
    run(dvc + ["exp", "run", "--set-param", "estimate.method=evt-paper"], path, env)
    versions = json.loads(run(rscale + ["ls", "-r", "registry", "--format", "json"], path, env))
    assert {v["estimator"] for v in versions} == {"evt-eb", "evt-paper"}
    # the pipeline demo prints the registry's answers next to simulated truth
    demo = run(rscale + ["demo", "--registry", "registry", "--config", "params.yaml"], path, env)
    assert "exact value" in demo and "sim_neardup" in demo and "full-pool evaluation" in demo


def test_registry_travels_through_a_dvc_remote(project, tmp_path_factory):
    # the README's second way to share: `dvc add` the registry's data, `dvc push` to any remote,
    # a collaborator clones the git repo, `dvc pull`s and gets the same verified answers
    from dataclasses import replace

    from rscale import api, sim
    from rscale.core.estimators.methods import estimate
    from rscale.sim.presets import PRESETS
    from rscale.store.hardness_file import write_hardness
    from rscale.store.sample_stats_file import write_sample_stats

    path, env = project
    dvc = [sys.executable, "-m", "dvc"]
    rscale = [sys.executable, "-m", "rscale.cli"]
    for preset in ("sim_gaussian", "sim_bounded"):
        ss = sim.sample(sim.simulate(replace(PRESETS[preset], n_queries=40), seed=0), 300_000, k=300, seed=0)
        write_sample_stats(ss, path / f"{preset}.ss.parquet")
        write_hardness(estimate(ss), ss, path / f"{preset}.h.parquet")
        api.register(path / f"{preset}.h.parquet", path / f"{preset}.ss.parquet", registry=path / "registry")
    question = ["query", "mAP@1000 at N=1e8 for *", "-r", "registry", "--format", "json"]
    before = json.loads(run(rscale + question, path, env))
    remote = tmp_path_factory.mktemp("remote")
    run(dvc + ["remote", "add", "-d", "shared", str(remote)], path, env)
    run(dvc + ["add", "registry/catalog.duckdb", "registry/blobs"], path, env)
    run(dvc + ["push"], path, env)
    run(["git", "add", "-A"], path, env)
    run(["git", "commit", "-qm", "registry via dvc"], path, env)

    clone = tmp_path_factory.mktemp("collaborator") / "repo"
    run(["git", "clone", "-q", str(path), str(clone)], clone.parent, env)
    assert not (clone / "registry" / "blobs").exists()         # git carries only the .dvc pointers
    run(dvc + ["pull", "registry/catalog.duckdb.dvc", "registry/blobs.dvc"], clone, env)
    verified = json.loads(run(rscale + ["verify", "-r", "registry", "--format", "json"], clone, env))
    assert len(verified["checked"]) >= 4 and not (verified["corrupt"] or verified["missing"] or verified["extra"])
    after = json.loads(run(rscale + question, clone, env))
    assert after["rows"] == before["rows"] and after["query"] == before["query"]
