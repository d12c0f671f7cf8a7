"""The scoring engine's optional top-R candidates by identity (rscale.score.candidates): against a
full sort of every score (score descending, then set position), through every chunking, thread
split, shard split and merge order, ties included; written next to the sample stats by
`rscale score --candidates R`, and absent (the sample stats unchanged) by default."""

import json

import numpy as np
import pytest

from rscale.errors import InvalidArgumentError
from rscale.score.engine import Queries, empty_partial, score_chunk, to_sample_stats
from rscale.sim.descriptors import make_descriptors


@pytest.fixture(scope="module")
def ds():
    d = make_descriptors(n_instances=90, d=16, positives_per_instance=3, n_distractors=6_000, hard_share=0.02, seed=7)
    # exact ties: some distractors repeated (same float32 score, different positions)
    d.distractors[5000:5040] = d.distractors[100:140]
    d.distractors[5900:5910] = d.distractors[3:13]
    return d


@pytest.fixture(scope="module")
def queries(ds):
    return Queries.build(ds.queries, ds.query_ids, ds.positives, ds.positive_ids, ds.positives_of)


def brute_force(ds, r, sizes):
    """Per query, the r best (score, position) under (score desc, position asc): a full sort of
    the scores the same float32 GEMMs give (chunk by chunk: BLAS rounding depends on the shape)."""
    rows = np.arange(len(ds.distractors))
    q = ds.queries.astype(np.float32)
    s = np.concatenate([q @ c.astype(np.float32).T for c in np.split(ds.distractors, np.cumsum(sizes)[:-1])], axis=1)
    pos, val = [], []
    for q in range(len(s)):
        order = sorted(range(len(rows)), key=lambda j: (-s[q, j], rows[j]))[:r]
        pos.append(rows[order])
        val.append(s[q, order])
    return np.array(pos), np.array(val, np.float32)


@pytest.mark.parametrize("r", [1, 25, 300])
def test_top_candidates_equal_a_full_sort_for_every_chunking_and_thread_split(ds, queries, monkeypatch, r):
    from rscale.score import engine
    monkeypatch.setattr(engine, "MIN_ROWS_PER_THREAD", 30)
    sizes = [700, 35, 2500, 1, 1764, 1000]
    want_pos, want_val = brute_force(ds, r, sizes)
    for threads in (1, 3):
        state = empty_partial(queries, 300, candidates=r)
        start = 0
        for size in sizes:
            score_chunk(queries, ds.distractors[start:start + size], state, threads=threads)
            start += size
        np.testing.assert_array_equal(state.cand.positions, want_pos)
        np.testing.assert_array_equal(state.cand.scores, want_val)
        # the kept scores are the top of the engine's own top-K
        np.testing.assert_array_equal(state.cand.scores, to_sample_stats(queries, state).top_scores[:, :r])


def test_ties_keep_the_earlier_row_and_the_duplicates_are_reached(ds, queries):
    state = empty_partial(queries, 50, candidates=50)
    score_chunk(queries, ds.distractors, state)
    # queries whose kept list holds a repeated vector: both copies appear, the earlier first
    tied = 0
    for q in range(len(ds.queries)):
        p = state.cand.positions[q].tolist()
        for a in range(100, 140):
            if a in p and a + 4900 in p:
                assert p.index(a) < p.index(a + 4900)
                tied += 1
    assert tied > 0


def test_any_shard_split_and_merge_order_gives_the_full_sort_of_its_scores(ds, queries):
    """Any shard split, chunking and merge order keeps exactly the R best (score desc, position
    asc) of the scores its chunks' GEMMs gave. Not "the same candidates as one pass": BLAS
    rounding depends on the GEMM's shape and the CPU's kernel (on an AMD EPYC with OpenBLAS
    0.3.31 every chunk of a 6000-row set differs from the one-pass GEMM in some last bit), so two
    copies of one vector in different chunks may score an ulp apart, and the earlier-row tie rule
    then has no tie to break; the regression this replaced asserted one-pass equality and failed
    there (positions 4 and 5901, a copy of 4, swapped)."""
    rng = np.random.default_rng(0)
    q32 = ds.queries.astype(np.float32)
    for _ in range(3):
        perm = rng.permutation(len(ds.distractors))
        parts = []
        scores = np.empty((len(q32), len(ds.distractors)), np.float32)
        for piece in np.array_split(perm, rng.integers(2, 6)):
            state = empty_partial(queries, 120, candidates=60)
            for rows in np.array_split(piece, rng.integers(1, 4)):
                score_chunk(queries, ds.distractors[rows], state, positions=rows)
                scores[:, rows] = q32 @ ds.distractors[rows].astype(np.float32).T     # the same GEMM
            parts.append(state.compact())
        order = rng.permutation(len(parts))
        merged = parts[order[0]]
        for i in order[1:]:
            merged = merged.merge(parts[i])
        best = np.lexsort((np.broadcast_to(np.arange(scores.shape[1]), scores.shape), -scores), axis=1)[:, :60]
        np.testing.assert_array_equal(merged.cand.positions, best)
        np.testing.assert_array_equal(merged.cand.scores, np.take_along_axis(scores, best, axis=1))


def test_candidates_are_off_by_default_and_bounded_by_k(queries):
    assert empty_partial(queries, 10).cand is None
    with pytest.raises(InvalidArgumentError, match=r"candidates must lie in \[0, K=10\]"):
        empty_partial(queries, 10, candidates=11)


def test_candidate_count():
    from rscale.score.candidates import candidate_count
    assert candidate_count(1000, 0.05) == 63 and candidate_count(100, 0.01) == 10


def test_partial_files_keep_the_candidates(tmp_path, ds, queries):
    from rscale.store.partial_file import load_partial, save_partial
    state = empty_partial(queries, 40, candidates=20)
    score_chunk(queries, ds.distractors[:3000], state)
    p = state.compact()
    save_partial(tmp_path, "sha256:ab", p.top, p.n, p.counts, (p.cand.scores, p.cand.positions))
    top, n, counts, cand = load_partial(tmp_path, "sha256:ab", 90, 270, 40, 20)
    np.testing.assert_array_equal(cand[1], p.cand.positions)
    assert load_partial(tmp_path, "sha256:ab", 90, 270, 40, 30) is None          # another R: rescored
    save_partial(tmp_path, "sha256:cd", p.top, p.n, p.counts)
    assert load_partial(tmp_path, "sha256:cd", 90, 270, 40, 20) is None          # none kept: rescored
    assert load_partial(tmp_path, "sha256:cd", 90, 270, 40)[3] is None


# ---------------------------------------------------------------- rscale score --candidates

@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    from rscale.api.scoring import make_descriptor_sets
    root = tmp_path_factory.mktemp("sets")
    make_descriptor_sets(root, instances=30, dim=16, positives=2, distractors=5_000, seed=1, shard_size=1_500)
    return root


def score(sets, out, **kw):
    from rscale import api
    return api.score(sets / "queries", sets / "positives", qrels=sets / "qrels.parquet",
                     distractors_dir=sets / "distractors", out=out, k=100, backend="numpy", lineage=False, **kw)


def test_score_writes_the_candidate_lists_next_to_the_sample_stats(sets, tmp_path):
    import pyarrow.parquet as pq

    from rscale.store.candidate_lists import read_candidates
    from rscale.store.descriptor_set import DescriptorSet
    from rscale.store.sample_stats_file import read_sample_stats

    plain = score(sets, tmp_path / "plain.parquet", fraction=0.5)
    assert "candidates" not in plain and not (tmp_path / "plain.candidates.parquet").exists()
    got = score(sets, tmp_path / "ss.parquet", fraction=0.5, candidates=40)
    assert got["candidates"] == str(tmp_path / "ss.candidates.parquet")
    a, b = read_sample_stats(tmp_path / "plain.parquet"), read_sample_stats(tmp_path / "ss.parquet")
    np.testing.assert_array_equal(a.top_scores, b.top_scores)
    assert b.meta["candidates"] == "40" and "candidates" not in a.meta
    assert pq.read_table(tmp_path / "plain.parquet").equals(pq.read_table(tmp_path / "ss.parquet")
                                                              .replace_schema_metadata(pq.read_schema(
                                                                  tmp_path / "plain.parquet").metadata))
    qids, gids, scores, ranks = read_candidates(tmp_path / "ss.candidates.parquet", 40)
    assert np.array_equal(ranks, np.tile(np.arange(1, 41), (len(qids), 1)))
    row = {q: i for i, q in enumerate(b.query_ids)}
    np.testing.assert_allclose(scores, b.top_scores[[row[q] for q in qids], :40], atol=1e-7)
    # the ids are the sampled distractors' own: their descriptors give those scores
    d = DescriptorSet.open(sets / "distractors")
    vec = {i: v for i, v in zip(d.ids().astype(str), np.concatenate([np.asarray(v, np.float32) for _, v in d.shards()]))}
    qs = DescriptorSet.open(sets / "queries")
    qvec = dict(zip(qs.ids().astype(str), np.concatenate([np.asarray(v, np.float32) for _, v in qs.shards()])))
    from rscale.score.sampling import in_sample
    assert in_sample(np.asarray(sorted({g for row_ in gids for g in row_}), dtype=d.ids().dtype), 0.5, 0).all()
    for q, g_row, s_row in zip(qids[:5], gids[:5], scores[:5]):
        np.testing.assert_allclose([vec[g] @ qvec[q] for g in g_row], s_row, atol=1e-5)
    meta = pq.read_schema(tmp_path / "ss.candidates.parquet").metadata
    assert meta[b"rscale.format"] == b"candidate-lists" and meta[b"rscale.sample_stats"] == b"ss.parquet"
    with pytest.raises(InvalidArgumentError, match=r"candidates must be a whole number in \[0, k=100\]"):
        score(sets, tmp_path / "bad.parquet", candidates=101)
    assert not list(tmp_path.glob("bad*"))


def test_cli_score_candidates(sets, tmp_path, capsys):
    from rscale.cli import main
    rc = main(["score", "--queries", str(sets / "queries"), "--positives", str(sets / "positives"),
               "--qrels", str(sets / "qrels.parquet"), "--distractors", str(sets / "distractors"),
               "-o", str(tmp_path / "c.parquet"), "--k", "50", "--candidates", "20", "--backend", "numpy",
               "--format", "json"])
    assert rc == 0
    assert json.loads(capsys.readouterr().out)["candidates"].endswith("c.candidates.parquet")


def test_the_candidate_lists_name_the_scoring_run_that_wrote_them(sets, tmp_path, monkeypatch):
    """The lists get the run-id sidecar the sample stats get (the same MLflow run), so `rscale
    rerank` can chain its lineage to the first stage; before, only the sample stats had one."""
    pytest.importorskip("mlflow")
    from rscale import api
    from rscale.store.run_sidecar import read_run_id
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///" + str(tmp_path / "mlruns.db"))
    api.score(sets / "queries", sets / "positives", qrels=sets / "qrels.parquet", distractors_dir=sets / "distractors",
              out=tmp_path / "ss.parquet", k=50, backend="numpy", fraction=0.5, candidates=20)
    run_id = read_run_id(tmp_path / "ss.parquet")
    assert run_id and read_run_id(tmp_path / "ss.candidates.parquet") == run_id


def test_the_fast_merge_order_is_the_lexsort_or_falls_back_to_it(monkeypatch):
    from rscale.score import candidates as c
    rng = np.random.default_rng(3)
    calls = {"lexsort": 0}
    lexsort = np.lexsort

    def counted(keys):
        calls["lexsort"] += 1
        return lexsort(keys)
    monkeypatch.setattr(c.np, "lexsort", counted)
    g = np.repeat(np.arange(50), 40)
    v = rng.standard_normal(g.size).astype(np.float32)
    p = np.tile(np.arange(40), 50)                      # ascending within each row: the fast path holds
    assert np.array_equal(c._ordered(g, v, p), lexsort((p, -v, g))) and calls["lexsort"] == 0
    v[::7] = 0.25                                       # exact ties, positions out of order
    p = rng.permutation(g.size)
    assert np.array_equal(c._ordered(g, v, p), lexsort((p, -v, g))) and calls["lexsort"] == 1
    tiny = np.array([1e-30, 2e-30, 0.0], np.float32)    # distinct scores one float64 key cannot tell apart
    assert np.array_equal(c._ordered(np.array([5, 5, 5]), tiny, np.array([0, 1, 2])), [1, 0, 2])
