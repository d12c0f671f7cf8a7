"""Golden files: small committed files of every format version this package writes (sample stats,
hardness, tail fits, descriptor sets). They must keep loading, with the same digests and the same
decoded values, so a writer and a reader changed together cannot drift unnoticed. Made once by
tests/golden/make_golden.py; a new format version adds files, it never rewrites these.
(The catalog and bundle manifest goldens live with the store's tests.)"""

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from rscale.store.descriptor_set import DescriptorSet, check_recipe, write_descriptor_set
from rscale.store.hardness_file import read_hardness, tail_path
from rscale.store.registry import sha256_file
from rscale.store.sample_stats_file import read_sample_stats, write_sample_stats

GOLDEN = Path(__file__).resolve().parent / "golden"
DIGESTS = {
    "hardness_v1.parquet": "sha256:cb9831b7846568091b2385c029ef7f2187f15cc93b7818cd449a1939eb6cc018",
    "hardness_v1.tail.parquet": "sha256:63d39e618ce020c6804f1c74c9c25b67d5e85f8c25af244642856987e90283ad",
    "hardness_v2.parquet": "sha256:d13cb0e47b1af6de7cc9633d06d72ea2491b4abccd22013fcce74d3886e9bd25",
    "hardness_v2.tail.parquet": "sha256:63d39e618ce020c6804f1c74c9c25b67d5e85f8c25af244642856987e90283ad",
    "hardness_v3.parquet": "sha256:9b3eee7c2006fa252602bd678bca3e19dc274765602a3a9eeed6170a2b5ea20c",
    "hardness_v3.tail.parquet": "sha256:63d39e618ce020c6804f1c74c9c25b67d5e85f8c25af244642856987e90283ad",
    "hardness_v4.parquet": "sha256:89950802eabc5db7c4b79d4f12dd84ad22adee6bb826e182db03c554f288405e",
    "hardness_v4.tail.parquet": "sha256:ab8c5bc9f7ebca28f4f3a8a3ca0be2912199654625524ae5eedfd5970f30dffb",
    "hardness_v5.parquet": "sha256:bba57ff801f94442568c6bd00061f669618368ef325ac0870f2afe648da05068",
    "hardness_v5.tail.parquet": "sha256:ab8c5bc9f7ebca28f4f3a8a3ca0be2912199654625524ae5eedfd5970f30dffb",
    "sample_stats_v1.parquet": "sha256:d8b7d49bd7b09111d8d4440cccd00ee9bcd4ecb0dffbf0c752dd84bcb3ef4e48",
    "descriptors_v1/manifest.json": "sha256:04f73b9f42c315c51426bfd837d1082dba8a145ab7008e8a47c4de58a7acd2ca",
    "descriptors_v1/recipe.json": "sha256:14adcc5902c2cc596f021e2a0c79786563d27b29d50ecc1be25b2d514faa2e0e",
    "descriptors_v1/shard-00000.ids.parquet": "sha256:468d8ba1004f5b1c29ea1cfe21d8dc0262d4bda38fa9a7d2d0482f73555f1c54",
    "descriptors_v1/shard-00000.npy": "sha256:b1452404a1260572eeb56ef4e9004fbb5a0bcea9a923abf94b60a370a1d05aa5",
    "descriptors_v1/shard-00001.ids.parquet": "sha256:b46a564a52f5a5df2d79f6df8862746d1eb70d25ba4384293567f3f3b9706bf1",
    "descriptors_v1/shard-00001.npy": "sha256:375255fbb75751285761b925a1049dc3fa9f7280baae3675d73dbf9c405a0e36",
}


@pytest.mark.parametrize("name", sorted(DIGESTS))
def test_golden_files_are_the_committed_bytes(name):
    assert sha256_file(GOLDEN / name) == DIGESTS[name]


def test_sample_stats_v1_decodes_to_its_values(tmp_path):
    ss = read_sample_stats(GOLDEN / "sample_stats_v1.parquet")
    assert ss.query_ids.tolist() == ["q0", "q1", "q2"] and ss.n_sampled.tolist() == [1000, 1000, 1000]
    assert ss.k == 24 and ss.top_scores.dtype == np.float64
    assert ss.top_scores[:, :3].tolist() == [[0.2783, 0.268, 0.2612], [0.2549, 0.2521, 0.2449],
                                             [0.2693, 0.2543, 0.2478]]
    assert ss.top_scores[:, -1].tolist() == [0.1076, 0.104, 0.1116]
    assert ss.pos_offsets.tolist() == [0, 3, 5, 8]
    assert ss.pos_ids.tolist() == ["p00", "p01", "p02", "p10", "p11", "p20", "p21", "p22"]
    assert ss.pos_scores.tolist() == [0.41, 0.27, 0.19, 0.33, 0.12, 0.30, 0.25, 0.21]
    assert ss.pos_counts.tolist() == [0, 1, 15, 0, 22, 0, 2, 15]
    assert ss.meta == {"backbone": "golden", "benchmark": "golden_bench", "distractor_source": "golden", "k": "24",
                       "sampler": "hash(seed=0) < 0.001", "seed": "0"}
    # today's writer and reader agree with the golden value
    again = read_sample_stats(write_sample_stats(ss, tmp_path / "again.parquet"))
    for field in ("query_ids", "n_sampled", "top_scores", "pos_offsets", "pos_ids", "pos_scores", "pos_counts"):
        np.testing.assert_array_equal(getattr(again, field), getattr(ss, field))
    assert again.meta == ss.meta


def test_hardness_v1_and_its_tail_fits_decode_to_their_values():
    est, info = read_hardness(GOLDEN / "hardness_v1.parquet")
    assert est.method == "evt" and est.params["q"] == 0.5 and est.params["k_top"] == 24
    assert est.params["gof_crit"] == 0.0 and est.params["pool_xi"] == "average"
    assert info["query_ids"].tolist() == ["q0", "q1", "q2"] and est.offsets.tolist() == [0, 3, 5, 8]
    assert info["positive_ids"].to_pylist() == ["p00", "p01", "p02", "p10", "p11", "p20", "p21", "p22"]
    assert info["counts"].tolist() == [0, 1, 15, 0, 22, 0, 2, 15] and est.n_sampled.tolist() == [1000] * 3
    assert est.x.tolist() == [0.0, 0.001272856452644985, 0.015, 0.0, 0.022, 0.0, 0.002436798816154156, 0.015]
    assert est.rule.tolist() == ["endpoint", "tail", "count", "endpoint", "count", "endpoint", "tail", "count"]
    assert est.draws is None and info["meta"]["backbone"] == "golden"
    tail = pq.read_table(tail_path(GOLDEN / "hardness_v1.parquet"))
    md = {k.decode(): v.decode() for k, v in tail.schema.metadata.items()}
    assert md["rscale.format"] == "tail-fits" and md["rscale.schema_version"] == "1" and md["rscale.method"] == "evt"
    assert tail.column_names == ["query_id", "endpoint", "loglik", "n_u", "sigma", "sigma_shared", "u", "xi",
                                 "xi_shared"]
    cols = tail.to_pydict()
    assert cols["query_id"] == ["q0", "q1", "q2"] and cols["n_u"] == [12.0, 12.0, 12.0]
    assert cols["u"] == [0.19619999999999999, 0.18664999999999998, 0.22235]
    assert cols["xi"] == [-0.9999999927578634, -0.9999999841236068, -0.28668035222882987]
    assert cols["sigma"] == [0.08303360016127335, 0.0707267400729551, 0.020180337615845007]
    assert cols["endpoint"] == [0.279233600762614, 0.25737674119584064, 0.2927431659737077]


def test_hardness_v2_carries_its_replicates_and_v1_has_none():
    v1, info1 = read_hardness(GOLDEN / "hardness_v1.parquet")
    v2, info2 = read_hardness(GOLDEN / "hardness_v2.parquet")
    assert (info1["schema_version"], info2["schema_version"]) == (1, 2)
    assert v1.replicates is None and info1["replicates"] == {}
    assert info2["replicates"] == {"R": 4, "splits": 2, "kind": "half-sample pairs", "seed": 0}
    assert v2.x.tolist() == v1.x.tolist() and v2.replicates.shape == (8, 4)
    assert v2.replicates[1].tolist() == [0.0006364282263224925, 0.00254571290528997, 0.001018285162115988,
                                         0.0015910705658062313]
    assert v2.replicates[:, 1].tolist() == [min(2 * x, 1.0) for x in v1.x.tolist()]


def test_hardness_v3_carries_its_backtest_and_older_versions_read_without_one():
    v1, info1 = read_hardness(GOLDEN / "hardness_v1.parquet")
    v2, info2 = read_hardness(GOLDEN / "hardness_v2.parquet")
    v3, info3 = read_hardness(GOLDEN / "hardness_v3.parquet")
    assert info3["schema_version"] == 3 and v3.x.tolist() == v1.x.tolist()
    assert v3.replicates.tolist() == v2.replicates.tolist()
    bt = info3["backtest"]
    assert bt.column_factors.tolist() == [4, 4, 8, 8] and bt.columns.shape == (8, 4)
    assert bt.columns[:, 1].tolist() == [min(1.4 * x, 1.0) for x in v1.x.tolist()]
    assert bt.counts.tolist() == [0, 1, 15, 0, 22, 0, 2, 15] and bt.factors(v3) == [2, 4, 8]
    # older versions: the counts alone, no back-test term (a v2 file's halves are not used alone)
    assert info1["backtest"].columns is None and info1["backtest"].factors(v1) == []
    assert info2["backtest"].columns is None and info2["backtest"].factors(v2) == []


def test_hardness_v4_carries_the_laws_sort_order_and_older_versions_sort_on_read():
    from rscale.core.law import Hardness
    from rscale.store.hardness_file import sorted_views
    v3, info3 = read_hardness(GOLDEN / "hardness_v3.parquet")
    v4, info4 = read_hardness(GOLDEN / "hardness_v4.parquet")
    assert info4["schema_version"] == 4 and v4.x.tolist() == v3.x.tolist()
    assert v4.replicates[:5].tolist() == v3.replicates[:5].tolist() and v4.replicates[5:, 0].tolist() == [0.25, 0.25, 0.125]
    assert info4["backtest"].columns.tolist() == info3["backtest"].columns.tolist()
    assert info4["ranks"]["replicate_ranks"][5:, 0].tolist() == [1, 2, 0]      # ties in row order
    views = sorted_views(v4, info4)
    assert views["x"].tolist() == Hardness.from_flat(v4.x, v4.offsets).x.tolist()
    assert views["replicates"].tolist() == Hardness.from_flat(v4.replicates.T, v4.offsets).x.tolist()
    assert views["backtest"].tolist() == Hardness.from_flat(info4["backtest"].columns.T, v4.offsets).x.tolist()
    assert info3["ranks"] == {} and sorted_views(v3, info3) == {}        # version 3: nothing stored, the law sorts


def test_descriptor_set_v1_manifest_and_shards(tmp_path):
    ds = DescriptorSet.open(GOLDEN / "descriptors_v1")
    manifest = json.loads((GOLDEN / "descriptors_v1" / "manifest.json").read_text())
    assert ds.manifest == manifest and manifest["format"] == "rscale-descriptors" and manifest["version"] == 1
    assert (ds.count, ds.dim, manifest["dtype"], manifest["role"]) == (6, 4, "float16", "distractors")
    assert [s["count"] for s in manifest["shards"]] == [4, 2]
    assert ds.verify() == []                                  # every shard matches its manifest digests
    assert ds.ids().tolist() == [f"d{i}" for i in range(6)]
    rng = np.random.default_rng(5)
    want = rng.normal(size=(6, 4))
    want = (want / np.linalg.norm(want, axis=1, keepdims=True)).astype(np.float16)
    got = np.concatenate([np.asarray(v) for _, v in ds.shards()])
    assert got.dtype == np.float16 and np.array_equal(got, want)
    # the recipe is part of the format: the same recipe resumes the folder, another is refused
    recipe = {"role": "distractors", "dtype": "float16", "shard_size": 4, "backbone": "golden", "pooling": "cls",
              "resolution": 32, "source": "golden"}
    assert manifest["recipe"] == recipe == json.loads((GOLDEN / "descriptors_v1" / "recipe.json").read_text())
    check_recipe(GOLDEN / "descriptors_v1", recipe)
    copy = tmp_path / "copy"
    shutil.copytree(GOLDEN / "descriptors_v1", copy)
    again = write_descriptor_set(copy, [(ds.ids(), got)], role="distractors", dtype="float16", shard_size=4,
                                 meta={k: recipe[k] for k in ("backbone", "pooling", "resolution", "source")})
    assert again.manifest["shards"] == manifest["shards"]
    from rscale.errors import InvalidArgumentError
    with pytest.raises(InvalidArgumentError, match="another recipe"):
        check_recipe(GOLDEN / "descriptors_v1", {**recipe, "pooling": "mean"})


def test_hardness_v5_carries_the_edge_factor_and_places_its_point_between_the_two_edge_models():
    """Version 5: the second edge model's factor and what made it (rscale.edge); without a band the
    prediction is the mean of the model without it and the model with every draw times it; with the
    file's back-test, the point its band places between them (here C: the band's centre says U is
    off by more than C - U) and the benchmark interval past model U (the back-test band is its
    error) by the band's reach and the distance to C joined in quadrature. Versions 1-4 carry one model."""
    from dataclasses import replace

    from rscale.core.interval import predicted_intervals
    from rscale.core.prediction import edge_weight, predict_per_query
    v4, _ = read_hardness(GOLDEN / "hardness_v4.parquet")
    v5, info5 = read_hardness(GOLDEN / "hardness_v5.parquet")
    assert info5["schema_version"] == 5 and v5.x.tolist() == v4.x.tolist()
    assert v5.edge_factor.tolist() == [2.0, 1, 1, 1, 1, 0.5, 1, 1] and v5.draws.shape == (8, 3)
    assert info5["edge"]["ratios"] == [2.0, 1.0, 0.5] and info5["edge"]["weights"] == [0.5, 0.5]
    for name in ("hardness_v1.parquet", "hardness_v2.parquet", "hardness_v3.parquet", "hardness_v4.parquet"):
        est, info = read_hardness(GOLDEN / name)
        assert est.edge_factor is None and info["edge"] == {}
    one = replace(v5, edge_factor=None)                                   # model U
    corrected = replace(v5, edge_factor=None, draws=v5.draws * v5.edge_factor[:, None])   # model C
    for metric, k, n in (("AP", 100, 1e4), ("R", 1, 1e4)):
        u, c = (predict_per_query(e, metric, n, k, "expected") for e in (one, corrected))
        np.testing.assert_allclose(predict_per_query(v5, metric, n, k, "expected"), (u + c) / 2, rtol=0, atol=1e-15)
        assert abs(c.mean() - u.mean()) > 1e-4                            # the two models differ here
        bt = info5["backtest"]
        [(_, lo_u, hi_u, _)] = predicted_intervals(one, [(metric, k, n)], mode="expected", backtest=bt)
        [(_, lo_0, hi_0, _)] = predicted_intervals(one, [(metric, k, n)], mode="expected")   # no band
        [(pq, lo, hi, err)] = predicted_intervals(v5, [(metric, k, n)], mode="expected", backtest=bt)
        w = edge_weight(float(u.mean()), float(c.mean()), (err.low, err.high))
        assert w == 1.0                                                   # this file's bands: the point is C
        np.testing.assert_allclose(pq, c, rtol=0, atol=1e-15)
        assert pq.mean() == pytest.approx({"AP": 0.2051846601379245, "R": 0.2118340671039187}[metric], abs=1e-12)
        assert lo <= pq.mean() <= hi
        assert hi_0 < 1.0
        half = hi_0 - u.mean()                                            # the replicate and gallery half-width
        # past U: the band's reach (U's error) and the distance to C, joined in quadrature
        um, cm = float(u.mean()), float(c.mean())
        down, up = np.hypot(max(err.high, 0.0), max(um - cm, 0.0)), np.hypot(max(-err.low, 0.0), max(cm - um, 0.0))
        assert lo == pytest.approx(max(0.0, min(um - down, pq.mean()) - half), abs=1e-12)
        assert hi == pytest.approx(min(1.0, max(um + up, pq.mean()) + half), abs=1e-12)
        assert lo <= lo_u + 1e-12 and hi >= hi_u - 1e-12                  # never narrower than U's own
