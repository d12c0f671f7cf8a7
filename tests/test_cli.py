import json
import subprocess
import sys

from rscale.cli import main

HEAVY = ("torch", "faiss", "mlflow", "transformers", "timm", "peft", "dvc", "scipy.stats", "pandas")


def test_import_cli_loads_no_heavy_module():
    code = ("import sys, rscale.cli; "
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_help_runs_without_heavy_modules():
    code = ("import sys\nfrom rscale.cli import main\n"
            "rc = main(['--help'])\n"
            f"print('LOADED', ','.join(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "demo" in out.stdout
    assert out.stdout.strip().endswith("LOADED")


def test_demo_prints_truth_and_predictions(capsys):
    assert main(["demo", "--queries", "60", "--backbone", "sim_gaussian"]) == 0
    out = capsys.readouterr().out
    assert "sim_gaussian" in out and "truth" in out and "count" in out


def test_simulate_then_check(tmp_path, capsys):
    path = tmp_path / "ss.parquet"
    assert main(["simulate", "sim_neardup", "-o", str(path), "--s", "100k", "--k", "50",
                 "--queries", "20"]) == 0
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "queries: 20" in out and "K: 50" in out and "S: 100,000" in out


def test_errors_are_messages_not_tracebacks(tmp_path, capsys):
    assert main(["simulate", "sim-bounded", "-o", str(tmp_path / "x.parquet")]) == 2
    err = capsys.readouterr().err
    assert "unknown simulated backbone 'sim-bounded'" in err and "Traceback" not in err
    assert main(["demo", "--n", "0"]) == 2
    assert "N must be >= 1" in capsys.readouterr().err
    assert main(["check", str(tmp_path / "missing.parquet")]) == 2
    assert "file not found" in capsys.readouterr().err


def test_console_script_exit_code(tmp_path):
    out = subprocess.run([sys.executable, "-m", "rscale.cli", "demo", "--n", "tiny"],
                         capture_output=True, text=True)
    assert out.returncode == 2
    assert "cannot read gallery size 'tiny'" in out.stderr and "Traceback" not in out.stderr


def test_estimate_then_predict(tmp_path, capsys):
    ss = tmp_path / "ss.parquet"
    assert main(["simulate", "sim_gaussian", "-o", str(ss), "--s", "1e6", "--k", "500", "--queries", "50"]) == 0
    h = tmp_path / "h.parquet"
    assert main(["estimate", str(ss), "-o", str(h), "--format", "json"]) == 0
    out = capsys.readouterr().out
    summary = json.loads(out[out.index("{"):])
    assert summary["method"] == "evt" and summary["rejected_tail_share"] <= 0.02   # a smooth (Gaussian) tail
    assert 0.0 <= summary["tail_shape_at_zero_share"] < 0.5
    assert main(["predict", str(h), "--metric", "mAP@1000", "--metric", "R@1", "--n", "1e6", "--n", "1e8",
                 "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["measure"] for r in rows] == ["mAP@1000", "mAP@1000", "R@1", "R@1"]
    assert all(r["ci_low"] <= r["value"] <= r["ci_high"] for r in rows)
    assert rows[0]["value"] >= rows[1]["value"]  # non-increasing in N
    # with the sample: the interval rscale query reports, wider than the query CI, same value
    assert main(["predict", str(h), "--n", "1e8", "--sample", str(ss), "--format", "json"]) == 0
    wide = json.loads(capsys.readouterr().out)[0]
    assert wide["ci"] == "query + distractor + convergence + tail-model alternatives" and wide["value"] == rows[1]["value"]
    assert wide["ci_low"] < rows[1]["ci_low"] and wide["ci_high"] > rows[1]["ci_high"]
    other = tmp_path / "other.parquet"
    assert main(["simulate", "sim_gaussian", "-o", str(other), "--s", "1e6", "--k", "500", "--queries", "30"]) == 0
    assert main(["predict", str(h), "--sample", str(other)]) == 2
    assert "not the sample of" in capsys.readouterr().err
    assert main(["predict", str(h), "--metric", "nDCG@10"]) == 2
    assert "unknown measure" in capsys.readouterr().err
    assert main(["estimate", str(ss), "-m", "powerlaw"]) == 2
    assert "does not produce per-positive hardness" in capsys.readouterr().err
    assert main(["estimate", str(ss), "-p", "q0.9"]) == 2
    assert "name=value" in capsys.readouterr().err


def test_registry_commands_end_to_end(tmp_path, capsys):
    reg = str(tmp_path / "reg")
    ss = tmp_path / "ss.parquet"
    h = tmp_path / "h.parquet"
    assert main(["simulate", "sim_bounded", "-o", str(ss), "--s", "4e5", "--k", "400", "--queries", "40"]) == 0
    assert main(["estimate", str(ss), "-o", str(h)]) == 0
    assert main(["register", str(h), "--sample", str(ss), "-r", reg, "--receipt", str(tmp_path / "r.json")]) == 0
    assert json.loads((tmp_path / "r.json").read_text())["ref"] == "sim_bounded@v1"
    assert main(["ls", "-r", reg]) == 0
    assert main(["tag", "sim_bounded@v1", "released", "-r", reg]) == 0
    assert main(["show", "sim_bounded@released", "-r", reg]) == 0
    capsys.readouterr()
    assert main(["query", "mAP@1000 at N=1e8 for sim_bounded@released", "-r", reg, "--format", "json"]) == 0
    ans = json.loads(capsys.readouterr().out)
    assert ans["rows"][0]["version"] == "v1"
    assert ans["rows"][0]["ci_low"] < ans["rows"][0]["value"] < ans["rows"][0]["ci_high"]
    assert main(["query", "mAP@1000 at N=1e8 for sim_bounded", "-r", reg, "--format", "json", "--bootstrap", "0"]) == 0
    point = json.loads(capsys.readouterr().out)["rows"][0]
    assert point["value"] == ans["rows"][0]["value"] and point["ci_low"] is None      # strict JSON: null
    assert main(["query", "mAP@1000 at N=1e8 for sim_bounded", "-r", reg, "--bootstrap", "-3"]) == 2
    assert "--bootstrap -3" in capsys.readouterr().err
    assert main(["query", "mAP@1000 at N=1e8 fro sim_bounded", "-r", reg]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'for'" in err and "^" in err and "Traceback" not in err
    assert main(["diff", "sim_bounded@v1", "sim_bounded@released", "-r", reg]) == 0
    assert main(["lineage", "sim_bounded", "-r", reg]) == 0
    assert main(["report", "-r", reg, "-o", str(tmp_path / "rep.html")]) == 0
    assert "<pre>" in (tmp_path / "rep.html").read_text()
    assert main(["curve", "mAP@1000 for sim_bounded", "-r", reg, "--format", "csv", "--points", "5"]) == 0
    assert main(["export", "sim_bounded@v1", "-o", str(tmp_path / "b.tar"), "-r", reg]) == 0
    assert main(["import", str(tmp_path / "b.tar"), "-r", str(tmp_path / "other")]) == 0
    assert main(["verify", "-r", reg]) == 0
    # damage the registry: verify reports it and exits 1
    from rscale.store.registry import Registry
    r = Registry(reg)
    r.blob_path(r.get("sim_bounded").tail).unlink()
    capsys.readouterr()
    assert main(["verify", "-r", reg]) == 1
    assert "missing:" in capsys.readouterr().out


def test_predict_in_pool_flag(tmp_path, capsys):
    ss = tmp_path / "ss.parquet"
    h = tmp_path / "h.parquet"
    assert main(["simulate", "sim_gaussian", "-o", str(ss), "--s", "2e5", "--k", "300", "--queries", "30"]) == 0
    assert main(["estimate", str(ss), "-o", str(h)]) == 0
    capsys.readouterr()
    assert main(["predict", str(h), "--n", "2e5", "--n", "1e6", "--in-pool", "--format", "json"]) == 0
    at_s, pool = json.loads(capsys.readouterr().out)
    from rscale.core import law
    from rscale.store.sample_stats_file import read_sample_stats
    s = read_sample_stats(ss)
    exact = law.map_at_k(law.Hardness.from_counts(s.pos_counts, s.pos_offsets, 2e5), 2e5, 1000)
    assert abs(at_s["value"] - exact) < 1e-12 and pool["value"] <= at_s["value"]
    assert main(["predict", str(h), "--n", "1e5", "--in-pool"]) == 2   # N < S
    assert "N >= S" in capsys.readouterr().err
