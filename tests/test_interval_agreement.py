"""Issue 14's 'done when': every command gives the same interval for the same version, measure
and N, and every row says its ci_kind. One registered version, asked through the command line
(JSON outputs) by rscale query, predict, curve and report, at an N on the report's and a curve's
grid and at one on neither."""

import json

import numpy as np
import pytest

from rscale import sim
from rscale.cli import main
from rscale.sim.benchmark import HardnessLaw, SimSpec

MEASURES = ("mAP@1000", "mAP@100", "R@1")


def _json(capsys, argv):
    capsys.readouterr()
    assert main([*argv, "--format", "json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def registered(tmp_path_factory):
    from rscale import api
    from rscale.store.sample_stats_file import write_sample_stats
    tmp = tmp_path_factory.mktemp("agree")
    spec = SimSpec(name="b", family="gaussian", n_queries=50, hardness=HardnessLaw("loguniform", 1.0, 1e-9, 1e-2))
    write_sample_stats(sim.sample(sim.simulate(spec, seed=5), 100_000, k=400, seed=5), tmp / "s.parquet")
    api.estimate(tmp / "s.parquet", "evt", out=tmp / "h.parquet", replicates=4)
    api.register(tmp / "h.parquet", tmp / "s.parquet", registry=tmp / "reg", backbone="b", benchmark="sim")
    return tmp


@pytest.mark.parametrize("ci", ["benchmark", "population"])
def test_query_predict_curve_and_report_give_the_same_interval_on_every_row(registered, capsys, ci):
    reg, h = str(registered / "reg"), str(registered / "h.parquet")
    # an N on a grid (the report's 1e7, a curve's end point) and one on none (between a 25-point
    # curve's points, not a round number)
    grid = np.unique(np.round(np.geomspace(1e6, 1e8, 25)))
    n_off = int((grid[7] + grid[8]) / 2) + 1
    sizes = [10_000_000, n_off]
    size_words = ["1e7", str(n_off)]
    rows = {}                                          # (command, measure, N) -> (value, lo, hi, ci_kind)

    def keep(command, measure, n, value, lo, hi, kind):
        rows[(command, measure, int(n))] = (value, lo, hi, kind)

    ans = _json(capsys, ["query", f"{', '.join(MEASURES)} at N={','.join(size_words)} for b", "-r", reg, "--ci", ci])
    for r in ans["rows"]:
        keep("query", r["measure"], r["N"], r["value"], r["ci_low"], r["ci_high"], r["ci_kind"])
    argv = ["predict", h, "--ci", ci]
    for m in MEASURES:
        argv += ["--metric", m]
    for w in size_words:
        argv += ["--n", w]
    for r in _json(capsys, argv):
        keep("predict", r["measure"], r["N"], r["value"], r["ci_low"], r["ci_high"], r["ci_kind"])
    for m in MEASURES:
        for n, w in zip(sizes, size_words):       # a curve ending at N
            data = _json(capsys, ["curve", f"{m} for b", "--n", f"1e6..{w}", "--points", "2", "-r", reg, "--ci", ci])
            (s,) = data["series"]
            assert s["N"][-1] == n
            keep("curve", s["measure"], n, s["value"][-1], s["ci_low"][-1], s["ci_high"][-1], s["ci_kind"])
    argv = ["report", "-r", reg, "--ci", ci]
    for m in MEASURES:
        argv += ["--metric", m]
    for w in size_words:
        argv += ["--n", w]
    for r in _json(capsys, argv)["rows"]:
        keep("report", r["measure"], r["N"], r["value"], r["ci_low"], r["ci_high"], r["ci_kind"])
    for m in MEASURES:
        for n in sizes:
            got = {c: rows[(c, m, n)] for c in ("query", "predict", "curve", "report")}
            assert len(set(got.values())) == 1, (m, n, got)
            value, lo, hi, kind = got["query"]
            assert kind == ci and lo <= value <= hi and lo < hi, (m, n, got)


def test_report_json_prints_rows_and_refuses_an_output_file(registered, capsys, tmp_path):
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from cli_checks import refused_writing_nothing
    refused_writing_nothing(capsys, ["report", "-r", str(registered / "reg"), "--format", "json", "-o",
                                     str(tmp_path / "r.md")], r"--format json prints the rows; --out writes", tmp_path)
