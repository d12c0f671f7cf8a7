"""Paired differences of two versions (``for A vs B``): replicate r of A minus replicate r of B,
valid when both were made from the same halves of the same distractors (one split key). Checked
on the simulator against the exact difference of one shared gallery, against the unpaired
combination of the two versions' own intervals, and through the command line with its refusals."""

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from rscale import sim
from rscale.cli import main
from rscale.core.backtest import Backtest, backtest_hardness
from rscale.core.estimators.methods import estimate
from rscale.core.interval import difference_intervals, predicted_intervals
from rscale.core.replicates import hardness_replicates, split_key
from rscale.errors import InvalidArgumentError
from rscale.sim.benchmark import HardnessLaw, SimSpec

sys.path.insert(0, str(Path(__file__).parent))
from cli_checks import one_line_exit_2  # noqa: E402

SPEC = SimSpec(name="a", family="gaussian", n_queries=100,
               hardness=HardnessLaw("loguniform", 1.0, 1e-9, 1e-2, immune=0.02))


def harder(bench, factor: float, name: str):
    """The same queries, score laws and hence distractors, with every positive ``factor`` times harder."""
    return sim.with_positives(bench, bench.pos_x * factor, name)


def test_shared_gallery_truth_is_one_gallery_for_every_version():
    bench = sim.simulate(replace(SPEC, n_queries=40), seed=4)
    other = harder(bench, 3.0, "b")
    ss, ss_b = sim.sample(bench, 50_000, k=200, seed=4), sim.sample(other, 50_000, k=200, seed=4)
    assert (ss.top_scores == ss_b.top_scores).all() and (ss_b.pos_counts >= ss.pos_counts).all()
    (alone,) = sim.truth_shared([bench], [ss], 1e7, "AP", 1000, seed=9)
    assert (alone == sim.truth(bench, ss, 1e7, "AP", 1000, seed=9)).all()       # one version: truth itself
    # two: the same unsampled distractors, so every harder positive is outranked at least as often
    a, b = sim.truth_shared([bench, other], [ss, ss_b], 1e7, "R", 1000, seed=9)
    assert (b <= a).all() and b.mean() < a.mean()
    with pytest.raises(InvalidArgumentError, match="ascending"):
        sim.with_positives(bench, bench.pos_x[::-1], "c")


def fitted(ss):
    est = estimate(ss, "evt")
    est = replace(est, replicates=hardness_replicates(ss, method="evt", params=est.params, splits=4))
    cols, factors = backtest_hardness(ss, method="evt", params=est.params, per_factor=2)
    return est, Backtest(counts=ss.pos_counts, columns=cols, column_factors=factors)


def test_paired_interval_covers_the_shared_gallery_difference_and_is_narrower_than_unpaired():
    n, cells, covered, ratios = 1e7, [("AP", 1000, 1e7)], 0, []
    for seed in range(8):
        bench_a = sim.simulate(SPEC, seed=seed)
        bench_b = harder(bench_a, 1.6, "b")
        ss_a, ss_b = sim.sample(bench_a, 100_000, k=400, seed=seed), sim.sample(bench_b, 100_000, k=400, seed=seed)
        assert split_key(ss_a, splits=4) == split_key(ss_b, splits=4)          # the same distractors, halved alike
        assert split_key(sim.sample(bench_b, 100_000, k=400, seed=seed + 50), splits=4) != split_key(ss_a, splits=4)
        (est_a, bt_a), (est_b, bt_b) = fitted(ss_a), fitted(ss_b)
        t_a, t_b = (float(t.mean()) for t in sim.truth_shared([bench_a, bench_b], [ss_a, ss_b], n, "AP", 1000, seed))
        (pa, pb, lo, hi, _, _), = difference_intervals(est_a, est_b, cells, backtest_a=bt_a, backtest_b=bt_b)
        covered += lo <= t_a - t_b <= hi
        # the replicate terms alone: paired against the two versions' own intervals combined
        (_, _, lo0, hi0, _, _), = difference_intervals(est_a, est_b, cells)
        (qa, la, ha, _), = predicted_intervals(est_a, cells)
        (qb, lb, hb, _), = predicted_intervals(est_b, cells)
        assert (pa == qa).all() and (pb == qb).all()
        assert (lo0 + hi0) / 2 == pytest.approx(pa.mean() - pb.mean())
        ratios.append((hi0 - lo0) / np.hypot(ha - la, hb - lb))
    assert covered >= 7, covered
    assert max(ratios) < 1.0 and np.mean(ratios) < 0.6, ratios      # the shared tail-model error cancels


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    """a and b: one sample's distractors, b's positives harder; c: b from another sample; d: a
    re-estimated and stored without its split key (as files written before it was recorded); a@v2:
    a's sample with another threshold quantile; f, g: b's sample without a back-test, g with 6
    replicates."""
    from rscale import api
    from rscale.store.hardness_file import read_hardness, write_hardness
    from rscale.store.sample_stats_file import write_sample_stats
    tmp = tmp_path_factory.mktemp("paired")
    bench_a = sim.simulate(replace(SPEC, n_queries=60), seed=2)
    bench_b = harder(bench_a, 1.6, "b")
    samples = {"a": sim.sample(bench_a, 100_000, k=400, seed=2), "b": sim.sample(bench_b, 100_000, k=400, seed=2),
               "c": sim.sample(bench_b, 100_000, k=400, seed=3)}
    for name, ss in samples.items():
        write_sample_stats(ss, tmp / f"{name}.parquet")
        api.estimate(tmp / f"{name}.parquet", "evt", out=tmp / f"{name}.h.parquet", replicates=4)
        api.register(tmp / f"{name}.h.parquet", tmp / f"{name}.parquet", registry=tmp / "reg", backbone=name,
                     benchmark="sim")
    est, info = read_hardness(tmp / "a.h.parquet")
    old = {k: v for k, v in info["replicates"].items() if k != "split_key"}
    write_hardness(est, samples["a"], tmp / "d.h.parquet", old, info["backtest"], {"per_factor": 4, "seed": 2029})
    api.register(tmp / "d.h.parquet", registry=tmp / "reg", backbone="d", benchmark="sim")
    # e: a's sample again with a threshold quantile that binds on the full sample only (each half keeps
    # 200 top scores, below the minimum excess count either way)
    api.estimate(tmp / "a.parquet", "evt", params=["q=0.98"], out=tmp / "e.h.parquet", replicates=4)
    api.register(tmp / "e.h.parquet", tmp / "a.parquet", registry=tmp / "reg", backbone="a", benchmark="sim")
    # f: b's sample without a back-test; g: with 6 replicates (3 splits) instead of 4
    for name, reps in (("f", 4), ("g", 6)):
        api.estimate(tmp / "b.parquet", "evt", out=tmp / f"{name}.h.parquet", replicates=reps, backtest=False)
        api.register(tmp / f"{name}.h.parquet", tmp / "b.parquet", registry=tmp / "reg", backbone=name, benchmark="sim")
    return str(tmp / "reg")


def _json(capsys, argv):
    capsys.readouterr()
    assert main([*argv, "--format", "json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_the_split_key_is_recorded_in_each_versions_summary(registry):
    from rscale import api
    key = {name: api.show(name, registry).summary.get("split_key") for name in ("a@v1", "b", "c", "d", "a@v2")}
    assert key["a@v1"].startswith("sha256:") and key["a@v1"] == key["b"] == key["a@v2"]   # one sample's distractors
    assert key["c"] != key["b"] and key["d"] is None                                      # another sample; none stored


def test_query_a_vs_b_answers_the_paired_difference(registry, capsys):
    own = {r["backbone"]: r for r in _json(capsys, ["query", "mAP@1000 at N=1e7 for a@v1, b", "-r", registry])["rows"]}
    ans = _json(capsys, ["query", "mAP@1000 at N=1e7 for a@v1 vs b", "-r", registry])
    assert ans["query"] == "mAP@1000 at N=1e7 for a@v1 vs b"
    (row,) = ans["rows"]
    assert (row["backbone"], row["versus"], row["ci_kind"], row["paired"]) == ("a", "b", "benchmark", "replicates")
    assert row["value_a"] == own["a"]["value"] and row["value_b"] == own["b"]["value"]
    assert row["value"] == pytest.approx(row["value_a"] - row["value_b"]) and row["value"] > 0   # b is harder
    assert row["ci_low"] <= row["value"] <= row["ci_high"]
    # the back-test term of the difference is the difference of the two back-test terms
    assert row["backtest_at_n"] == pytest.approx(own["a"]["backtest_at_n"] - own["b"]["backtest_at_n"])
    assert row["backtest_error"] == pytest.approx(own["a"]["backtest_error"] - own["b"]["backtest_error"])
    # (the point is linear in the share errors; the band is the regression's on their differences)
    assert row["backtest_low"] <= row["backtest_at_n"] <= row["backtest_high"]
    assert own["a"]["backtest_low"] < own["a"]["backtest_at_n"] < own["a"]["backtest_high"]
    # narrower than the two own intervals combined (shared error cancels); '-' is the same query
    assert row["ci_high"] - row["ci_low"] < np.hypot(own["a"]["ci_high"] - own["a"]["ci_low"],
                                                    own["b"]["ci_high"] - own["b"]["ci_low"])
    assert _json(capsys, ["query", "mAP@1000 at N=1e7 for a@v1 - b", "-r", registry])["rows"] == [row]
    (pop,) = _json(capsys, ["query", "mAP@1000 at N=1e7 for a@v1 vs b", "-r", registry, "--ci", "population"])["rows"]
    assert pop["ci_kind"] == "population" and pop["ci_low"] < row["ci_low"] and pop["ci_high"] > row["ci_high"]
    (flip,) = _json(capsys, ["query", "mAP@1000 at N=1e7 for b vs a@v1", "-r", registry])["rows"]
    assert flip["value"] == pytest.approx(-row["value"]) and flip["ci_low"] == pytest.approx(-row["ci_high"])
    assert main(["query", "mAP@1000, R@1 at N=1e6,1e7 for a@v1 vs b", "-r", registry]) == 0
    out = capsys.readouterr().out
    assert "versus" in out and "back-test, a@v1 - b@v1" in out
    assert main(["query", "mAP@1000 at N=1e7 for b", "-r", registry]) == 0
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("back-test, b@v1")][0]
    b = own["b"]
    assert f"carried to {b['extrapolation']:.3g}x that is {b['backtest_at_n']:+.4f} " \
           f"({b['backtest_low']:+.4f}..{b['backtest_high']:+.4f})" in line


@pytest.mark.parametrize("text,needles", [
    ("mAP@1000 at N=1e7 for a@v1 vs c", ["do not pair", "for a@v1, c"]),                  # another sample
    ("mAP@1000 at N=1e7 for a@v1 vs d", ["split_key", "re-run 'rscale estimate'"]),     # recorded before the key
    ("mAP@1000 at N=1e7 for a@v1 vs a@v1", ["same version"]),
    ("mAP@1000 at N=1e7 for a vs *", ["names 6 versions"]),
    ("mAP@1000 at N=1e7 for a@v1 vs g", ["different half-sample splits", "4 replicates", "6 replicates",
                                         "the same --replicates"]),
    ("mAP@100 at N=1e7 for a@v1 vs b reranked@100", ["first-stage metrics only"]),
    ("mAP@1000 at N=1e7 for a@v1 vs nothere", ["nothere"]),
])
def test_pairs_that_do_not_pair_are_refused_in_one_line(registry, capsys, text, needles):
    one_line_exit_2(capsys, ["query", text, "-r", registry], *needles)


def test_a_difference_the_halves_cannot_see_is_said(registry, capsys):
    # two estimates of one sample pair (one split key); where their halves coincide the replicate
    # term of the difference is 0 and a warning says why
    from rscale import api
    ans = api.query("mAP@1000 at N=1e7 for a@v2 vs a@v1", registry)
    (row,) = ans["rows"]
    assert row["value"] != 0.0 and row["ci_low"] <= row["value"] <= row["ci_high"]
    assert any("identical half-sample replicates" in w for w in ans["warnings"])
    assert not any("identical" in w for w in api.query("mAP@1000 at N=1e7 for a@v1 vs b", registry)["warnings"])


def test_no_back_test_term_unless_both_sides_have_one(registry):
    from rscale import api
    (row,) = api.query("mAP@1000 at N=1e7 for a@v1 vs f", registry)["rows"]     # f: estimated without one
    assert row["backtest_at_n"] is None and row["backtest_factor"] is None
    own = {r["backbone"]: r for r in api.query("mAP@1000 at N=1e7 for a@v1, f", registry)["rows"]}
    assert own["a"]["backtest_at_n"] is not None and own["f"]["backtest_at_n"] is None
    (pairs,) = api.query("mAP@1000 at N=1e7 for b vs a@v1", registry)["rows"]
    assert pairs["backtest_at_n"] is not None


def test_each_versions_warnings_hold_for_the_difference(registry):
    from rscale import api
    warned = api.query("mAP@1000 at N=1e9 for a@v1 vs b", registry)["warnings"]
    for name in ("a", "b"):
        assert f"{name}: N=1e+09 is 10000x the sample; predictions this far out are not validated" in warned
    assert not any("10000x" in w for w in api.query("mAP@1000 at N=1e7 for a@v1 vs b", registry)["warnings"])


def test_curve_refuses_a_paired_query(registry, capsys):
    one_line_exit_2(capsys, ["curve", "mAP@1000 for a@v1 vs b", "-r", registry, "--format", "json"], "paired difference")


def test_diff_is_the_paired_row_of_b_vs_a(registry, capsys):
    # `rscale diff A B` (what changed from A to B, B - A) reports the difference and interval of the
    # row `for B vs A` answers: paired replicates, its ci_kind, not a query bootstrap of its own
    for ci in ("benchmark", "population"):
        d = _json(capsys, ["diff", "a@v1", "b", "--ci", ci, "-r", registry])
        (row,) = _json(capsys, ["query", "mAP@1000 at N=1e8 for b vs a@v1", "--ci", ci, "-r", registry])["rows"]
        assert (d["difference"], d["ci_low"], d["ci_high"], d["ci_kind"]) == \
            (row["value"], row["ci_low"], row["ci_high"], ci)
        assert (d["value_a"], d["value_b"], d["backtest_at_n"]) == (row["value_b"], row["value_a"], row["backtest_at_n"])
        assert d["queries_compared"] == 60 and d["resolved"] == (row["ci_low"] > 0 or row["ci_high"] < 0)
        assert d["difference"] == pytest.approx(np.mean([r["delta"] for r in
                                                         _json(capsys, ["diff", "a@v1", "b", "--top", "60", "-r",
                                                                        registry])["largest_query_changes"]]))
    (flip,) = _json(capsys, ["query", "mAP@1000 at N=1e8 for a@v1 vs b", "-r", registry])["rows"]
    assert _json(capsys, ["diff", "a@v1", "b", "-r", registry])["difference"] == pytest.approx(-flip["value"])


@pytest.mark.parametrize("b,needles", [
    ("c", ["do not pair", "for c, a@v1"]),                              # another sample
    ("d", ["split_key", "re-run 'rscale estimate'"]),                   # recorded before the key
    ("g", ["different half-sample splits", "the same --replicates"]),
])
def test_diff_refuses_what_the_paired_query_refuses(registry, capsys, b, needles):
    one_line_exit_2(capsys, ["diff", "a@v1", b, "-r", registry], *needles)


def test_simulated_backbones_with_recorded_halves_pair(tmp_path, capsys):
    """`rscale simulate --halves`: the simulator's distractors are identified by (seed, query, rank),
    so two presets simulated with the same --seed, --s and --k record the same halves (one split
    key) and `for A vs B` answers; without --halves, or with another seed, they are refused."""
    from rscale.core.halves import recorded_halves
    from rscale.core.sample_stats import validate
    from rscale.sim.presets import PRESETS
    from rscale.store.sample_stats_file import read_sample_stats
    a = sim.sample(sim.simulate(replace(PRESETS["sim_gaussian"], n_queries=30), seed=1), 100_000, k=200, seed=1,
                   halves=True)
    b = sim.sample(sim.simulate(replace(PRESETS["sim_neardup"], n_queries=30), seed=1), 100_000, k=200, seed=1,
                   halves=True)
    assert validate(a) is a and a.schema_version == 3 and (a.n_halves == b.n_halves).all()
    assert (a.top_halves == b.top_halves).all() and split_key(a, splits=8) == split_key(b, splits=8)
    again = sim.sample(sim.simulate(replace(PRESETS["sim_bounded"], n_queries=30), seed=1), 100_000, k=200, seed=2,
                       halves=True)
    assert split_key(again, splits=8) != split_key(a, splits=8)
    # beyond the top list a positive's half-A share is about a half, nested within its query
    far = a.pos_counts > 200
    share = a.pos_halves[far] / a.pos_counts[far, None]
    assert far.sum() > 5 and abs(share.mean() - 0.5) < 0.05
    order = np.lexsort((a.pos_counts, a.positive_query()))
    same_q = np.diff(a.positive_query()[order]) == 0
    step_h, step_c = np.diff(a.pos_halves[order], axis=0)[same_q], np.diff(a.pos_counts[order])[same_q]
    assert (step_h >= 0).all() and (step_h <= step_c[:, None]).all()       # nested: more distractors, more in A
    for split in range(8):
        ha, hb = recorded_halves(a, split)
        assert (ha.n_sampled + hb.n_sampled == a.n_sampled).all() and (ha.pos_counts + hb.pos_counts == a.pos_counts).all()
    reg = str(tmp_path / "reg")
    for name, extra in (("sim_bounded", ["--halves"]), ("sim_neardup", ["--halves"]), ("sim_gaussian", [])):
        ss = tmp_path / f"{name}.parquet"
        assert main(["simulate", name, "-o", str(ss), "--s", "2e5", "--k", "300", "--queries", "30", "--seed", "3",
                     *extra]) == 0
        assert read_sample_stats(ss).has_halves == bool(extra)
        assert main(["estimate", str(ss), "-o", str(tmp_path / f"{name}.h.parquet"), "--replicates", "4"]) == 0
        assert main(["register", str(tmp_path / f"{name}.h.parquet"), "--sample", str(ss), "-r", reg]) == 0
    (row,) = _json(capsys, ["query", "mAP@1000 at N=1e8 for sim_bounded vs sim_neardup", "-r", reg])["rows"]
    assert row["ci_kind"] == "benchmark" and row["paired"] == "replicates" and row["ci_low"] <= row["value"] <= row["ci_high"]
    one_line_exit_2(capsys, ["query", "mAP@1000 at N=1e8 for sim_bounded vs sim_gaussian", "-r", reg], "do not pair")
