import json
import subprocess
import sys

import pytest

from rscale.cli import main

HEAVY = ("torch", "faiss", "mlflow", "transformers", "timm", "peft", "dvc", "scipy.stats", "duckdb", "pyarrow",
         "numpy", "pandas", "pybullet", "trimesh", "statsmodels", "matplotlib", "ray")


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


def run_json(capsys, argv):
    """Run a command with --format json; its stdout parsed."""
    capsys.readouterr()
    assert main([*argv, "--format", "json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_demo_prints_truth_and_predictions(capsys):
    from rscale import api
    from rscale.cli.output import plain
    rows = run_json(capsys, ["demo", "--queries", "60", "--backbone", "sim_gaussian", "--n", "1e7"])
    assert rows == plain(api.demo(["sim_gaussian"], n=1e7, n_queries=60))
    (row,) = rows
    assert row["backbone"] == "sim_gaussian" and row["n_queries"] == 60 and row["s"] == 500_000
    assert 0 < row["truth"] < row["evaluate_at_s"] <= 1        # the sample alone is optimistic
    assert main(["demo", "--queries", "60", "--backbone", "sim_gaussian", "--n", "1e7"]) == 0
    table = capsys.readouterr().out
    assert f"{row['truth']:.4f}" in table and f"{row['count']:.4f}" in table   # the table shows those values


def test_simulate_then_check(tmp_path, capsys):
    from rscale.store.sample_stats_file import read_sample_stats
    path = tmp_path / "ss.parquet"
    assert run_json(capsys, ["simulate", "sim_neardup", "-o", str(path), "--s", "100k", "--k", "50",
                             "--queries", "20"]) == {"written": str(path)}
    info = run_json(capsys, ["check", str(path)])
    ss = read_sample_stats(path)
    assert (info["queries"], info["K"], info["S_min"], info["S_max"]) == (20, 50, 100_000, 100_000)
    assert (ss.n_queries, ss.k, int(ss.n_sampled.min())) == (20, 50, 100_000)
    assert info["positives"] == ss.n_positives and info["backbone"] == "sim_neardup"


def test_errors_are_messages_not_tracebacks(tmp_path, capsys):
    assert main(["simulate", "sim-bounded", "-o", str(tmp_path / "x.parquet")]) == 2
    err = capsys.readouterr().err
    assert "unknown simulated backbone 'sim-bounded'" in err and "Traceback" not in err
    assert main(["demo", "--n", "0"]) == 2
    assert "--n 0: gallery size '0' must be a whole number between 1 and 1e15" in capsys.readouterr().err
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
    assert summary["method"] == "evt-eb" and summary["cluster_share"] <= 0.05   # a smooth (Gaussian) tail: no clusters
    assert 0.0 <= summary["tail_shape_at_zero_share"] < 0.5
    assert main(["predict", str(h), "--metric", "mAP@1000", "--metric", "R@1", "--n", "1e6", "--n", "1e8",
                 "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    from rscale import api
    assert rows == api.predict(h, measures=["mAP@1000", "R@1"], sizes=[1e6, 1e8])   # the API's numbers, exactly
    assert [r["measure"] for r in rows] == ["mAP@1000", "mAP@1000", "R@1", "R@1"]
    assert main(["predict", str(h), "--metric", "mAP@1000", "--metric", "R@1", "--n", "1e6", "--n", "1e8",
                 "--format", "csv"]) == 0
    import csv
    import io
    table = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [float(r["value"]) for r in table] == [r["value"] for r in rows]
    assert [float(r["ci_low"]) for r in table] == [r["ci_low"] for r in rows]
    assert all(r["ci_low"] <= r["value"] <= r["ci_high"] for r in rows)
    assert rows[0]["value"] >= rows[1]["value"]  # non-increasing in N
    # the interval comes from the file's replicates: the same with --sample (only checked);
    # --ci population adds the query bootstrap, wider on both sides, same value
    assert main(["predict", str(h), "--n", "1e8", "--sample", str(ss), "--format", "json"]) == 0
    same = json.loads(capsys.readouterr().out)[0]
    assert same == rows[1] and same["ci_kind"] == "benchmark" and same["replicates"] == 16
    assert main(["predict", str(h), "--n", "1e8", "--ci", "population", "--format", "json"]) == 0
    wide = json.loads(capsys.readouterr().out)[0]
    assert wide["ci_kind"] == "population" and wide["value"] == rows[1]["value"]
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
    bad = tmp_path / "bad.parquet"
    assert main(["estimate", str(ss), "-o", str(bad), "--replicates", "3"]) == 2
    assert "--replicates must be 0 or an even number" in capsys.readouterr().err and not bad.exists()
    assert main(["predict", str(h), "--ci", "query"]) == 2
    assert "benchmark" in capsys.readouterr().err


def test_registry_commands_end_to_end(tmp_path, capsys):
    from rscale import api
    from rscale.cli.output import plain
    reg = str(tmp_path / "reg")
    ss = tmp_path / "ss.parquet"
    h = tmp_path / "h.parquet"
    assert main(["simulate", "sim_bounded", "-o", str(ss), "--s", "4e5", "--k", "400", "--queries", "40"]) == 0
    assert main(["estimate", str(ss), "-o", str(h)]) == 0
    out = run_json(capsys, ["register", str(h), "--sample", str(ss), "-r", reg, "--receipt", str(tmp_path / "r.json")])
    assert out["ref"] == "sim_bounded@v1" and out["created"] is True
    receipt = json.loads((tmp_path / "r.json").read_text())
    assert receipt == {k: out[k] for k in ("ref", "hardness", "series")}
    listed = run_json(capsys, ["ls", "-r", reg])
    assert [(e.pop("kind"), e.pop("ref")) for e in listed] == [("hardness", "sim_bounded@v1")]
    assert listed == plain(api.list_versions(reg)) and [v["hardness"] for v in listed] == [out["hardness"]]
    assert run_json(capsys, ["tag", "sim_bounded@v1", "released", "-r", reg])["ref"] == "sim_bounded@v1"
    shown = run_json(capsys, ["show", "sim_bounded@released", "-r", reg])
    assert shown == plain(api.show("sim_bounded@released", reg)) and "released" in shown["tags"]
    assert shown["hardness"] == out["hardness"] and shown["summary"]["queries"] == 40
    ans = run_json(capsys, ["query", "mAP@1000 at N=1e8 for sim_bounded@released", "-r", reg])
    assert ans == plain(api.query("mAP@1000 at N=1e8 for sim_bounded@released", reg))
    assert ans["rows"][0]["version"] == "v1"
    assert ans["rows"][0]["ci_low"] < ans["rows"][0]["value"] < ans["rows"][0]["ci_high"]
    point = run_json(capsys, ["query", "mAP@1000 at N=1e8 for sim_bounded", "-r", reg, "--bootstrap", "0",
                              "--ci", "population"])["rows"][0]
    assert point["value"] == ans["rows"][0]["value"] and point["ci_low"] is None      # strict JSON: null
    assert point["ci_kind"] == "population" and ans["rows"][0]["ci_kind"] == "benchmark"
    assert main(["query", "mAP@1000 at N=1e8 for sim_bounded", "-r", reg, "--bootstrap", "-3"]) == 2
    assert "--bootstrap -3" in capsys.readouterr().err
    assert main(["query", "mAP@1000 at N=1e8 fro sim_bounded", "-r", reg]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'for'" in err and "^" in err and "Traceback" not in err
    d = run_json(capsys, ["diff", "sim_bounded@v1", "sim_bounded@released", "-r", reg])
    assert d == plain(api.diff("sim_bounded@v1", "sim_bounded@released", registry=reg))
    assert d["difference"] == 0.0 and d["queries_compared"] == 40          # a version against itself
    lin = run_json(capsys, ["lineage", "sim_bounded", "-r", reg])
    assert lin == plain(api.lineage("sim_bounded", reg)) and lin["outputs"]["hardness"]["digest"] == out["hardness"]
    assert main(["report", "-r", reg, "-o", str(tmp_path / "rep.html")]) == 0
    html = (tmp_path / "rep.html").read_text()
    assert "<pre>" in html and f"{ans['rows'][0]['value']:.4f}" in html     # report's N=1e8 cell
    r0 = ans["rows"][0]                                                       # the same interval as query
    assert f"{r0['value']:.4f} [{r0['ci_low']:.3f}, {r0['ci_high']:.3f}]" in html and "ci_kind benchmark" in html
    assert main(["report", "-r", reg, "-o", str(tmp_path / "pop.md"), "--ci", "population"]) == 0
    assert "ci_kind population" in (tmp_path / "pop.md").read_text()
    capsys.readouterr()
    assert main(["curve", "mAP@1000 for sim_bounded", "-r", reg, "--format", "csv", "--points", "5"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    data = api.curve("mAP@1000 for sim_bounded", points=5, registry=reg)
    assert lines[0] == "backbone,version,measure,N,value,ci_low,ci_high,ci_kind" and len(lines) == 6
    assert {line.split(",")[-1] for line in lines[1:]} == {"benchmark"}
    assert [float(line.split(",")[4]) for line in lines[1:]] == pytest.approx(data["series"][0]["value"], rel=1e-5)
    assert run_json(capsys, ["curve", "mAP@1000 for sim_bounded", "-r", reg, "--points", "5"]) == plain(data)
    exported = run_json(capsys, ["export", "sim_bounded@v1", "-o", str(tmp_path / "b.tar"), "-r", reg])
    assert exported["written"] == str(tmp_path / "b.tar")
    imported = run_json(capsys, ["import", str(tmp_path / "b.tar"), "-r", str(tmp_path / "other")])
    assert imported["created"] is True
    assert [v.hardness for v in api.list_versions(tmp_path / "other")] == [out["hardness"]]
    report = run_json(capsys, ["verify", "-r", reg])
    assert len(report["checked"]) == 3 and not (report["corrupt"] or report["missing"] or report["extra"])
    # damage the registry: verify reports it and exits 1
    from rscale.store.registry import Registry
    r = Registry(reg)
    r.blob_path(r.get("sim_bounded").tail).unlink()
    capsys.readouterr()
    assert main(["verify", "-r", reg, "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert len(report["missing"]) == 1 and r.get("sim_bounded").tail.split(":")[1] in str(report["missing"][0])
    assert main(["verify", "-r", reg]) == 1
    assert "missing: 1" in capsys.readouterr().out


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


def test_api_demo_is_the_function_after_its_module_loaded():
    # importing rscale.api.demo (for simulate_sample_stats) bound the package attribute `demo` to the
    # submodule, so a later api.demo(...) called a module
    code = ("from rscale import api; api.simulate_sample_stats; "
            "print(callable(api.demo) and api.demo.__module__ == 'rscale.api.demos')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_every_printing_command_takes_format_json_and_nothing_else():
    import click
    import typer

    from rscale.cli.app import app
    group = typer.main.get_command(app)
    assert set(group.commands) == {"demo", "simulate", "check", "estimate", "predict", "register", "ls", "show", "tag",
                                   "verify", "gc", "query", "export", "import", "report", "lineage", "diff", "curve",
                                   "score", "score-backbone", "make-descriptors", "extract", "extract-backbone", "compare", "o2i",
                                   "rerank", "rerank-sample", "rerank-backbone", "predict-rerank", "train-lora"}
    commands = {}
    for name, command in group.commands.items():   # sub-apps (rscale o2i run): their commands
        subs = command.commands if isinstance(command, click.Group) else {"": command}
        commands.update({f"{name} {sub}".strip(): c for sub, c in subs.items()})
    assert "o2i run" in commands and "o2i stratify" in commands
    for name, command in commands.items():
        fmt = [p for p in command.params if "--format" in p.opts]
        (option,) = fmt
        assert isinstance(option.type, click.Choice) and "json" in option.type.choices, name
        assert option.default == option.type.choices[0]


def test_one_size_parser_for_cli_and_grammar():
    # --n and N= read sizes with the same parser: same values, same refusals
    from rscale.cli.options import gallery_size
    from rscale.errors import InvalidArgumentError, QuerySyntaxError
    from rscale.query.grammar import parse
    for text in ["1e8", "759k", "5M", "1.2B", "100_000_000", "1", "1e15", "1.5", "1234.5", "1e30", "0", "-3",
                 "1e15.5", "tiny", "2e15", "1.0000001e6"]:
        try:
            want = parse(f"mAP@1000 at N={text} for x").sizes[0]
        except QuerySyntaxError:
            want = None
        try:
            got = gallery_size(text)
        except InvalidArgumentError:
            got = None
        assert got == want, text
    assert gallery_size("1.2B") == 1_200_000_000


@pytest.mark.parametrize("argv", [["predict", "H", "--n", "1.5"], ["predict", "H", "--n", "1234.5"],
                                  ["predict", "H", "--n", "1e30"], ["demo", "--n", "2e15"],
                                  ["report", "--n", "1e5.5"]])
def test_sizes_refused_like_the_grammar(tmp_path, capsys, argv):
    assert main([str(tmp_path / "h.parquet") if a == "H" else a for a in argv]) == 2
    err = capsys.readouterr().err
    assert f"--n {argv[-1]}:" in err and ("whole number between 1 and 1e15" in err or "cannot read" in err)


def test_estimate_help_names_every_estimator(capsys):
    """`rscale estimate --help` listed three of the five estimators (regression)."""
    from rscale.core.estimators.methods import HARDNESS_METHODS
    assert main(["estimate", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for method in HARDNESS_METHODS:
        assert method in text.replace("│", " "), method


def test_the_pipeline_demo_names_the_estimator_that_answered(capsys):
    # regression: the column header said "evt" whatever estimator the registry's rows came from
    # (evt-eb is the default since stop 14)
    from rscale.cli.querying import _print_pipeline_demo

    row = {"query": "mAP@1000 at N=1e8 for sim_x", "version": "v1", "S": 5000, "truth": 0.5,
           "truth_kind": "simulated, exact", "predicted": 0.51, "ci_low": 0.49, "ci_high": 0.53,
           "evaluate_at_s": 0.6, "count": 0.55, "estimator": "evt-eb"}
    _print_pipeline_demo([row], "registry")
    out = capsys.readouterr().out
    assert "evt-eb [95% CI]" in out
    _print_pipeline_demo([row, {**row, "estimator": "evt-paper"}], "registry")
    assert "evt-eb, evt-paper [95% CI]" in capsys.readouterr().out


def test_the_pipeline_demo_prints_its_registry_on_one_line(capsys, tmp_path):
    # regression: the registry path was the rich table's title, which rich wraps to the table's
    # width, so under a long directory "next to the exact value" split across lines (the same
    # mechanism as o2i stratify's summary, fixed in efe49b5)
    from rscale.cli.querying import _print_pipeline_demo

    registry = tmp_path / ("a-long-experiment-directory-name-" * 4) / "registry"
    row = {"query": "mAP@1000 at N=1e8 for sim_x", "version": "v1", "S": 5000, "truth": 0.5,
           "truth_kind": "simulated, exact", "predicted": 0.51, "ci_low": 0.49, "ci_high": 0.53,
           "evaluate_at_s": 0.6, "count": 0.55, "estimator": "evt-eb"}
    _print_pipeline_demo([row], registry)
    lines = capsys.readouterr().out.splitlines()
    heading = [x for x in lines if "next to the exact value" in x]
    assert len(heading) == 1 and str(registry) in heading[0]
