"""Checks shared by the real-embedding sets' tests (tests/test_realset2.py, tests/test_realset3.py)."""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow.parquet as pq
import pytest

from ranking_checks import ap1000_from_scores
from rscale.core.metrics import ap_at_k_from_counts
from rscale.score.sampling import hash_uniform
from rscale.store.sample_stats_file import read_sample_stats


def check_real_set_data(data, man, n_brute=None):
    """A committed real-embedding set (or a stand-in) is what its manifest says: every file's digest,
    the truth's counts and mAP@1000 (recounted from its scores for ``n_brute`` queries, all if None),
    the pool's ids and draw hash, qrels apart from the pool, and disjoint draws consistent with the
    truth (a draw's scores above the truth's K-th are among the truth's top K)."""
    for name, dg in man["files"].items():
        assert hashlib.sha256((data / name).read_bytes()).hexdigest() == dg, name
    assert sorted(p.name for p in data.glob("*.parquet")) == sorted(man["files"])
    truth = read_sample_stats(data / "truth.sample_stats.parquet")
    assert truth.n_queries == man["queries"] and truth.n_positives == man["positives"]
    assert np.all(truth.n_sampled == man["pool"])
    per_query = ap_at_k_from_counts(truth.pos_counts, truth.pos_offsets, 1000)
    assert float(per_query.mean()) == pytest.approx(man["truth_map_at_1000"], abs=1e-12)
    qs = range(truth.n_queries) if n_brute is None else np.linspace(0, truth.n_queries - 1, n_brute).astype(int)
    np.testing.assert_allclose([ap1000_from_scores(truth, q) for q in qs], per_query[list(qs)], atol=1e-12)
    pool = pq.read_table(data / "pool_ids.parquet").to_pandas()
    assert pool["id"].is_unique and len(pool) == man["pool"]
    u = hash_uniform(pool["id"].to_numpy(), man["partition"]["seed"])
    np.testing.assert_array_equal(u, pool["u"].to_numpy())
    qrels = pq.read_table(data / "qrels.parquet").to_pandas()
    assert not set(qrels["positive_id"]) & set(pool["id"]) and len(qrels) == man["positives"]
    kth = truth.top_scores[:, -1]
    for f in man["partition"]["fractions"]:
        um = man.get("u_max", 1.0)          # the icon sets' manifests have none: the whole pool
        members = [(u >= j * f * um) & (u < (j + 1) * f * um) for j in range(man["partition"]["draws"])]
        assert not np.any(np.sum(members, axis=0) > 1)                 # disjoint
        names = [f"draw-{round(f * 100):02d}pct-{j}" for j in range(len(members))]
        draws = [read_sample_stats(data / f"{n}.sample_stats.parquet") for n in names]
        for m, n, ss in zip(members, names, draws):
            assert int(m.sum()) == man["sizes"][n] and np.all(ss.n_sampled == man["sizes"][n])
            assert np.array_equal(ss.query_ids, truth.query_ids) and np.array_equal(ss.pos_ids, truth.pos_ids)
            np.testing.assert_array_equal(ss.pos_scores, truth.pos_scores)
        # disjoint draws never count more distractors above a positive than the whole pool ...
        assert np.all(sum(ss.pos_counts for ss in draws) <= truth.pos_counts)
        # ... and their distractor scores above the truth's K-th are among the truth's top K
        for q in range(truth.n_queries):
            merged = np.sort(np.concatenate([ss.top_scores[q] for ss in draws]))[::-1]
            merged = merged[merged > kth[q] + 1e-6]
            top = truth.top_scores[q]
            j = 0
            for s in merged:
                while j < top.size and top[j] > s + 1e-6:
                    j += 1
                assert j < top.size and abs(top[j] - s) <= 1e-6, (f, q, s)
                j += 1


def check_committed_glyph_set(data, build, pool: int = 230_000) -> dict:
    """A committed glyph set (docs/realset3.md, realset4.md, realset5.md) is its build's: 1,000
    queries, the pool, the build's packages, under 80 MB, whole and consistent
    (:func:`check_real_set_data`), no query codepoint in the pool. Returns its manifest."""
    import json
    man = json.loads((data / "manifest.json").read_text())
    assert man["pool"] == pool and man["queries"] == 1000
    assert man["benchmark"] == getattr(build, "BENCHMARK", man["benchmark"])
    assert sorted(man["packages"]) == sorted(build.PACKAGES)
    assert sum(p.stat().st_size for p in data.iterdir()) < 80e6
    check_real_set_data(data, man, n_brute=100)
    check_no_query_codepoint_in_pool(data)
    return man


def check_no_query_codepoint_in_pool(data):
    """A glyph set (docs/realset3.md): no pool image is a glyph of a query's codepoint (the query ids
    name it, ``q:U+XXXX:FONT``), in any font."""
    queries = pq.read_table(data / "qrels.parquet").column("query_id").to_pylist()
    cps = {int(q.split(":")[1][2:], 16) for q in queries}
    pool = pq.read_table(data / "pool_ids.parquet").column("codepoint").to_numpy()
    assert len(cps) == len(set(queries)) and not np.isin(pool, list(cps)).any()


ICON_EMBED_ARGV = ["embed", "--work", "/nonexistent", "--part", "1", "--parts", "2"]
ICON_SCORE_ARGV = ["score", "--work", "/nonexistent", "--out", "/nowhere"]


def icon_build_calls(build, monkeypatch):
    """What an icon set's build (``benchmarks/realset{6,7,8}/build.py``, loaded) hands the icon
    build of docs/realset.md for ``embed`` (:data:`ICON_EMBED_ARGV`) and ``score``
    (:data:`ICON_SCORE_ARGV`), both stages replaced by recorders: (the recorded arguments, the
    loaded realset/embed.py, whose PACKAGES are realset's own corpus)."""
    six = build.realset6_build() if hasattr(build, "realset6_build") else build
    embed, icons = six.icon_build("embed"), six.icon_build("build")
    seen = {}
    monkeypatch.setattr(six, "icon_build", lambda name: {"embed": embed, "build": icons}[name])
    if six is not build:
        monkeypatch.setattr(build, "realset6_build", lambda: six)
    monkeypatch.setattr(embed, "main", lambda argv, packages, doc, suffix:
                        seen.update(embed=argv, packages=packages, doc=doc, suffix=suffix))
    monkeypatch.setattr(icons, "main", lambda argv, benchmark, not_query_stems, query_from_scaled:
                        seen.update(score=argv, benchmark=benchmark, stems=not_query_stems, scaled=query_from_scaled))
    build.main(list(ICON_EMBED_ARGV))
    build.main(list(ICON_SCORE_ARGV))
    return seen, embed
