"""Reranked metrics predicted from a distractor sample against exact full-gallery reranking on
descriptor data small enough to score fully:

- the scoring engine at fraction 1.0 gives the gallery's realised first-stage counts; with the
  gallery's own reranked top list the plug-in law reproduces the exact reranked metric of
  rscale.core.rerank.reranked_ranks (real truth on descriptors);
- from a 10% sample (engine sample stats plus the rerank scores of the sample's top candidates,
  written and re-read as sample-stats schema version 2) `api.predict_reranked` agrees with that
  truth within 3 standard errors of the per-query differences, while the first-stage prediction
  does not."""

import numpy as np
import pytest

from rscale import api
from rscale.core import metrics
from rscale.core import rerank as rr
from rscale.core import rerank_law as law
from rscale.core.sample_stats import SampleStats, validate
from rscale.score.engine import Queries, score_stream
from rscale.store.sample_stats_file import read_sample_stats, write_sample_stats

DEPTH = 200


def unit(a):
    return (a / np.linalg.norm(a, axis=-1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def data():
    """200 queries with 3 positives each in a pool of 20,000 iid distractors (d = 12). Rerank
    descriptors are the first-stage ones plus independent noise, and positives' rerank views keep
    more of the query (what a crop does for a small object)."""
    rng = np.random.default_rng(0)
    q, g, n, d = 200, 3, 20_000, 12
    queries = unit(rng.standard_normal((q, d)))
    pos = unit(queries[:, None, :] + rng.uniform(0.25, 0.6, (q, 1, 1)) * rng.standard_normal((q, g, d)))
    dist = unit(rng.standard_normal((n, d)))
    pos_r = unit(0.5 * pos + 0.8 * queries[:, None, :] + 0.3 * rng.standard_normal((q, g, d)))
    dist_r = unit(dist + 0.9 * rng.standard_normal((n, d)))
    return dict(queries=queries, pos=pos, dist=dist, pos_r=pos_r, dist_r=dist_r, q=q, g=g, n=n)


def engine_stats(data, index, k):
    qs = Queries.build(data["queries"], [f"q{i}" for i in range(data["q"])], data["pos"].reshape(-1, 12),
                       [f"q{i}/p{j}" for i in range(data["q"]) for j in range(data["g"])],
                       lambda i: np.arange(i * data["g"], (i + 1) * data["g"]))
    chunks = (data["dist"][index[a:a + 4096]] for a in range(0, index.size, 4096))
    return score_stream(qs, chunks, k=k)


def with_rerank(ss, data, index, r):
    """The sample stats plus rerank scores of each query's top r sampled candidates and positives."""
    first = data["queries"] @ data["dist"][index].T
    rerank = np.einsum("qd,nd->qn", data["queries"], data["dist_r"][index])
    order = np.argsort(-first, axis=1, kind="stable")[:, :r]
    np.testing.assert_allclose(np.take_along_axis(first, order, axis=1), ss.top_scores[:, :r], atol=1e-6)
    pos_rerank = np.einsum("qd,qgd->qg", data["queries"], data["pos_r"])
    lookup = {f"q{i}/p{j}": pos_rerank[i, j] for i in range(data["q"]) for j in range(data["g"])}
    return validate(SampleStats(**{**ss.__dict__, "top_rerank": np.take_along_axis(rerank, order, axis=1),
                                   "pos_rerank": np.array([lookup[p] for p in ss.pos_ids])}))


def exact_truth(data, metric, k):
    q, g = data["q"], data["g"]
    first = np.concatenate([data["queries"] @ data["dist"].T, np.einsum("qd,qgd->qg", data["queries"], data["pos"])], 1)
    rer = np.concatenate([data["queries"] @ data["dist_r"].T,
                          np.einsum("qd,qgd->qg", data["queries"], data["pos_r"])], 1)
    labels = np.concatenate([np.zeros((q, data["n"]), int), np.ones((q, g), int)], axis=1)
    ranks, off = rr.reranked_ranks(first.astype(np.float64), rer.astype(np.float64), labels, DEPTH)
    if metric == "AP":
        return metrics.ap_at_k(ranks, off, k=k, n_relevant=np.full(q, g))
    return metrics.hit_at_k(ranks, off, k=k)


@pytest.mark.parametrize("metric,k", [("AP", DEPTH), ("R", 1)])
def test_engine_at_fraction_one_and_the_plugin_law_give_the_exact_reranked_metric(data, metric, k):
    full = with_rerank(engine_stats(data, np.arange(data["n"]), DEPTH + 4), data, np.arange(data["n"]), DEPTH + 4)
    grid, joint = law.joint_from_top(full.top_rerank, full.n_sampled, full.pos_rerank, full.pos_offsets)
    h = law.RerankedHardness.build(full.pos_counts / data["n"], full.pos_rerank, full.pos_offsets, grid, joint)
    got = law.reranked_per_query(h, metric, data["n"], k, depth=DEPTH, mode="plugin")
    np.testing.assert_allclose(got, exact_truth(data, metric, k), atol=1e-9)


def test_prediction_from_a_ten_percent_sample(data, tmp_path, monkeypatch):
    rng = np.random.default_rng(1)
    index = np.sort(rng.choice(data["n"], data["n"] // 4, replace=False))
    ss = with_rerank(engine_stats(data, index, 400), data, index, 100)
    write_sample_stats(ss, tmp_path / "ss.parquet")
    back = read_sample_stats(tmp_path / "ss.parquet")
    assert back.schema_version == 2 and np.array_equal(back.top_rerank, ss.top_rerank)
    kw = dict(n=data["n"], depth=DEPTH, measures=["mAP@200", "R@1"], method="count", mode="expected")
    rows = api.predict_reranked(tmp_path / "ss.parquet", **kw)
    population = api.predict_reranked(tmp_path / "ss.parquet", ci_kind="population", bootstrap=400, **kw)
    from rscale.core import rerank_replicates
    monkeypatch.setattr(rerank_replicates, "CORRECTED_METRICS", ())
    monkeypatch.setattr(rerank_replicates, "CORRECTED_IN_EXPECTED_MODE", ())
    uncorrected = api.predict_reranked(tmp_path / "ss.parquet", **kw)
    for row, pop, raw, (metric, k) in zip(rows, population, uncorrected, [("AP", DEPTH), ("R", 1)]):
        truth = exact_truth(data, metric, k)
        per_query = law.reranked_per_query(api.reranked_hardness(back, _count(back)), metric, data["n"], k,
                                           depth=DEPTH)
        assert raw["value"] == pytest.approx(per_query.mean())
        # half-sample corrected, R@1 and (in the expected mode) mAP (docs/rerank.md): overstated
        # uncorrected, closer after
        assert raw["value"] - truth.mean() > abs(row["value"] - truth.mean())
        diff = per_query - truth
        tol = 3 * diff.std(ddof=1) / np.sqrt(diff.size)
        assert abs(row["value"] - truth.mean()) < tol
        assert abs(row["first_stage"] - truth.mean()) > tol       # reranking changed the metric here
        # the benchmark interval (these queries) covers both; uncorrected, R@1 (0.423 for 0.335) and
        # mAP@200 (0.268 for 0.239) are overstated beyond it (docs/rerank.md), corrected they are 0.361
        # inside [0.323, 0.398] and 0.243 inside [0.221, 0.265]
        assert row["ci_kind"] == "benchmark" and pop["ci_kind"] == "population"
        assert pop["ci_low"] < row["ci_low"] and row["ci_high"] < pop["ci_high"]
        assert row["ci_low"] <= truth.mean() <= row["ci_high"]
        if metric == "AP":     # plain counts of the slice (no tail) overshoot: the Jensen bias docs/rerank.md names
            plain = law.reranked_per_query(api.reranked_hardness(back, _count(back), tail=False), metric, data["n"],
                                           k, depth=DEPTH)
            assert plain.mean() - truth.mean() > tol


def _count(ss):
    from rscale.core.estimators.methods import estimate
    return estimate(ss, "count")


def test_sample_estimate_on_the_simulator_matches_the_exact_law():
    """200 independent samples of S = 20,000 from the Gaussian rerank model (one per query, the same
    positives): the mean predicted mAP@1000 at N = 40,000, K' = 1000 (the gallery's top K' is
    about the sample's top 500) is the exact law's value on the model's true joint tail, within 3
    standard errors of the per-query spread. (With only ~50 sample points in the slice the GPD
    tail overshoots here: docs/rerank.md, "Accuracy".)"""
    from rscale.sim.rerank import GaussianRerankModel
    rng = np.random.default_rng(4)
    model = GaussianRerankModel(0.5)
    x, t = np.array([0.002, 0.01, 0.02]), np.array([3.4, 2.9, 3.1])
    q, s, n, depth = 200, 20_000, 40_000, 1000
    u, e = model.gallery(s, q, rng)
    top = np.take_along_axis(e, np.argsort(u, axis=1)[:, :600], axis=1)
    offsets = np.arange(q + 1) * 3
    grid, joint = law.joint_from_top_smoothed(top, np.full(q, s), np.tile(t, q), offsets)
    h = law.RerankedHardness.build(np.tile(x, q), np.tile(t, q), offsets, grid, joint)
    fine = np.concatenate([[0.0], np.geomspace(1e-8, 1.0, 3000)])
    exact = law.RerankedHardness.build(x, t, [0, 3], fine[None, :], model.joint_tail(t, fine))
    per_query = law.reranked_per_query(h, "AP", n, depth, depth=depth)
    want = law.reranked_metric(exact, "AP", n, depth, depth=depth)
    assert abs(per_query.mean() - want) < 3 * per_query.std(ddof=1) / np.sqrt(q) + 1e-3, want
    counts = law.RerankedHardness.build(np.tile(x, q), np.tile(t, q), offsets,
                                        *law.joint_from_top(top, np.full(q, s), np.tile(t, q), offsets))
    assert law.reranked_metric(counts, "AP", n, depth, depth=depth) > want + 0.01   # counts alone overshoot


@pytest.fixture
def files(data, tmp_path):
    """A schema-2 sample-stats file (25% sample, top 100 reranked) and its schema-1 twin."""
    rng = np.random.default_rng(2)
    index = np.sort(rng.choice(data["n"], data["n"] // 4, replace=False))
    plain = engine_stats(data, index, 100)
    write_sample_stats(with_rerank(plain, data, index, 100), tmp_path / "ss2.parquet")
    write_sample_stats(plain, tmp_path / "ss1.parquet")
    return tmp_path


def test_predict_rerank_command(files, capsys, monkeypatch):
    import json

    from rscale.cli import main
    monkeypatch.chdir(files)
    argv = ["predict-rerank", "ss2.parquet", "--n", "20000", "--n", "1e5", "--depth", "200", "--metric", "mAP@200",
            "--metric", "R@1", "--method", "count"]
    assert main(argv + ["--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    want = api.predict_reranked(files / "ss2.parquet", n=[2e4, 1e5], depth=200, measures=["mAP@200", "R@1"],
                                method="count")
    assert [(r["measure"], r["N"]) for r in rows] == [("mAP@200", 2e4), ("mAP@200", 1e5), ("R@1", 2e4), ("R@1", 1e5)]
    for got, w in zip(rows, want):
        assert got["value"] == pytest.approx(w["value"]) and got["first_stage"] == pytest.approx(w["first_stage"])
    assert rows[1]["value"] < rows[0]["value"]            # a larger gallery is harder after reranking too
    assert main(argv) == 0 and "mAP@200" in capsys.readouterr().out     # the table
    import pyarrow.parquet as pq           # first-stage stats alone stay schema version 1, v2 only with rerank
    assert pq.read_schema(files / "ss1.parquet").metadata[b"rscale.schema_version"] == b"1"
    assert pq.read_schema(files / "ss2.parquet").metadata[b"rscale.schema_version"] == b"2"
    assert read_sample_stats(files / "ss1.parquet").top_rerank is None


def _one_rerank_column(w):
    import pyarrow.parquet as pq
    t = pq.read_table(w / "ss2.parquet")
    pq.write_table(t.drop_columns(["positive_rerank_scores"]), w / "bad.parquet")


PREDICT = ["predict-rerank", "ss2.parquet", "--depth", "200", "--method", "count"]
ROWS = [
    ("first-stage-stats-only", ["predict-rerank", "ss1.parquet", "--depth", "200", "--n", "1e5"], None,
     ["no rerank scores", "top_rerank_scores"]),
    ("one-rerank-column", ["predict-rerank", "bad.parquet", "--depth", "200", "--n", "1e5"], _one_rerank_column,
     ["bad.parquet", "positive_rerank_scores", "both"]),
    ("gallery-below-depth", PREDICT + ["--n", "150"], None, ["N=150", "smaller than the rerank depth K'=200"]),
    ("sample-top-too-short", PREDICT + ["--n", "10000"], None, ["rerank more of the sample's top", "half-samples included", "N >= 1.79e+04"]),
    ("cutoff-beyond-depth", PREDICT + ["--n", "1e5", "--metric", "mAP@500"], None, ["k <= the rerank depth", "k=500"]),
    ("mrr-without-cutoff", PREDICT + ["--n", "1e5", "--metric", "MRR"], None, ["MRR@200"]),
    ("unknown-mode", PREDICT + ["--n", "1e5", "--mode", "mean"], None, ["unknown mode 'mean'"]),
    ("depth-zero", ["predict-rerank", "ss2.parquet", "--depth", "0"], None, ["--depth 0"]),
]


@pytest.mark.parametrize("args,setup,fragments", [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_predict_rerank_bad_input(files, capsys, monkeypatch, args, setup, fragments):
    from test_bad_input import tree

    from rscale.cli import main
    if setup is not None:
        setup(files)
    monkeypatch.chdir(files)
    before = tree(files)
    capsys.readouterr()
    rc = main(list(args))
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in: {lines[0]}"
    assert tree(files) == before
