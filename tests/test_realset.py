"""The committed real-embedding validation set (benchmarks/realset/data, docs/realset.md)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from rscale.core.metrics import ap_at_k_from_counts
from ranking_checks import ap1000_from_scores
from rscale.score.sampling import hash_uniform
from rscale.store.sample_stats_file import read_sample_stats

DATA = Path(__file__).resolve().parent.parent / "benchmarks" / "realset" / "data"
MANIFEST = json.loads((DATA / "manifest.json").read_text())
DRAWS = sorted(k for k in MANIFEST["sizes"] if k.startswith("draw-"))


@pytest.fixture(scope="module")
def truth():
    return read_sample_stats(DATA / "truth.sample_stats.parquet")


@pytest.fixture(scope="module")
def pool():
    return pq.read_table(DATA / "pool_ids.parquet").to_pandas()


def test_committed_files_match_the_manifest_digests():
    on_disk = sorted(p.name for p in DATA.glob("*.parquet"))
    assert on_disk == sorted(MANIFEST["files"])
    for name, digest in MANIFEST["files"].items():
        assert hashlib.sha256((DATA / name).read_bytes()).hexdigest() == digest, name
    assert sum(p.stat().st_size for p in DATA.iterdir()) < 40e6


def test_every_draw_loads_with_the_queries_and_positives_of_the_truth(truth):
    assert len(DRAWS) == len(MANIFEST["partition"]["fractions"]) * MANIFEST["partition"]["draws"]
    assert truth.n_queries == MANIFEST["queries"] and truth.n_positives == MANIFEST["positives"]
    assert np.all(truth.n_sampled == MANIFEST["pool"])
    for name in DRAWS:
        ss = read_sample_stats(DATA / f"{name}.sample_stats.parquet")
        assert np.array_equal(ss.query_ids, truth.query_ids)
        assert np.array_equal(ss.pos_ids, truth.pos_ids)
        assert np.all(ss.n_sampled == MANIFEST["sizes"][name])
        # the positives' scores do not depend on the distractors drawn
        np.testing.assert_array_equal(ss.pos_scores, truth.pos_scores)


def test_the_partition_is_the_documented_hash_and_the_draws_are_disjoint(pool):
    u = hash_uniform(pool["id"].to_numpy(), MANIFEST["partition"]["seed"])
    np.testing.assert_array_equal(u, pool["u"].to_numpy())
    assert pool["id"].is_unique and pool["digest"].is_unique and len(pool) == MANIFEST["pool"]
    for f in MANIFEST["partition"]["fractions"]:
        members = [np.flatnonzero((u >= j * f) & (u < (j + 1) * f)) for j in range(MANIFEST["partition"]["draws"])]
        for j, m in enumerate(members):
            assert m.size == MANIFEST["sizes"][f"draw-{round(f * 100):02d}pct-{j}"]
            for other in members[j + 1:]:
                assert np.intersect1d(m, other).size == 0


def test_disjoint_draws_of_one_fraction_never_count_more_distractors_than_the_whole_pool(truth):
    # draws that overlapped (or were not subsets of the pool) could sum past the full-pool counts
    for f in MANIFEST["partition"]["fractions"]:
        names = [n for n in DRAWS if n.startswith(f"draw-{round(f * 100):02d}pct-")]
        total = sum(read_sample_stats(DATA / f"{n}.sample_stats.parquet").pos_counts for n in names)
        assert np.all(total <= truth.pos_counts)


def test_query_images_are_not_in_the_pool(pool):
    qrels = pq.read_table(DATA / "qrels.parquet").to_pandas()
    assert not set(qrels["positive_id"]) & set(pool["id"])


def test_the_truth_map_equals_a_recomputation_from_the_exact_sample_stats(truth):
    per_query = ap_at_k_from_counts(truth.pos_counts, truth.pos_offsets, 1000)
    assert float(per_query.mean()) == pytest.approx(MANIFEST["truth_map_at_1000"], abs=1e-12)
    brute = np.array([ap1000_from_scores(truth, q) for q in range(truth.n_queries)])
    np.testing.assert_allclose(brute, per_query, atol=1e-12)
