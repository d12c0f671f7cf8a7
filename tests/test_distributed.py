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
    assert not (tmp_path / "b.parquet").exists()


def test_engine_input_errors_are_one_line(sets, tmp_path, capsys, monkeypatch):
    argv = ["score", "--queries", str(sets / "queries"), "--positives", str(sets / "positives"),
            "--qrels", str(sets / "qrels.parquet"), "--distractors", str(sets / "distractors"),
            "-o", str(tmp_path / "ss.parquet")]
    cases = [(["--engine", "spark"], "unknown engine 'spark'"),
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
