import numpy as np
import pytest

from rscale.core import law, metrics
from rscale.errors import FormatError, InvalidArgumentError
from rscale.score.bruteforce import sample_stats_dense
from rscale.score.engine import Queries, empty_partial, score_chunk, score_shards, score_stream, to_sample_stats
from rscale.score.sampling import hash_uniform, in_sample
from rscale.sim.descriptors import make_descriptors
from rscale.store.descriptor_set import DescriptorSet, write_descriptor_set


@pytest.fixture(scope="module")
def ds():
    return make_descriptors(n_instances=25, d=24, positives_per_instance=4, n_distractors=12_000,
                            hard_share=0.02, seed=3)


@pytest.fixture(scope="module")
def queries(ds):
    return Queries.build(ds.queries, ds.query_ids, ds.positives, ds.positive_ids, ds.positives_of)


def by_id(ss):
    return dict(zip(ss.pos_ids, ss.pos_counts))


def test_engine_matches_dense_reference(ds, queries):
    ss = score_stream(queries, [ds.distractors[i:i + 1700] for i in range(0, 12_000, 1700)], k=300)
    ref = sample_stats_dense(ds.queries, ds.query_ids, ds.positives_of, ds.positives, ds.positive_ids,
                             ds.distractors, k=300)
    np.testing.assert_allclose(ss.top_scores, ref.top_scores, atol=1e-6)
    assert by_id(ss) == by_id(ref)
    assert np.all(ss.n_sampled == 12_000)


@pytest.mark.parametrize("buffer", [4, 64, 2048])
def test_every_engine_path_and_threading_match_the_dense_reference(monkeypatch, buffer):
    # small buffers force flushes, the over-full-buffer merge and mid-stream dense merges;
    # a small row floor splits 150 queries over 3 threads
    from rscale.score import engine

    d = make_descriptors(n_instances=150, d=16, positives_per_instance=3, n_distractors=9_000,
                         hard_share=0.02, seed=5)
    q = Queries.build(d.queries, d.query_ids, d.positives, d.positive_ids, d.positives_of)
    calls = {"dense": 0, "buffer": 0}

    def spy(name, fn):
        def wrapped(*a, **kw):
            calls[name] += 1
            return fn(*a, **kw)
        return wrapped

    monkeypatch.setattr(engine, "BUFFER", buffer)
    monkeypatch.setattr(engine, "MIN_ROWS_PER_THREAD", 50)
    monkeypatch.setattr(engine, "_dense_merge", spy("dense", engine._dense_merge))
    monkeypatch.setattr(engine, "_buffer", spy("buffer", engine._buffer))
    sizes = [400, 150, 2500, 60, 900, 5000 - 10, 10]
    chunks = np.split(d.distractors, np.cumsum(sizes)[:-1])
    ref = sample_stats_dense(d.queries, d.query_ids, d.positives_of, d.positives, d.positive_ids,
                             d.distractors, k=120)
    for threads in (1, 3):
        state = empty_partial(q, 120)
        for c in chunks:
            score_chunk(q, c, state, threads=threads)
        ss = to_sample_stats(q, state)
        np.testing.assert_allclose(ss.top_scores, ref.top_scores, atol=1e-6)
        assert by_id(ss) == by_id(ref)
    assert calls["dense"] >= 2 and calls["buffer"] >= 2


def test_tie_rule_duplicate_of_a_positive_counts_above(ds, queries):
    # a distractor identical to a positive scores exactly the same: it counts as above the positive
    q = 0
    p_idx = ds.positives_of(q)[0]
    dup = np.repeat(ds.positives[p_idx][None, :], 3, axis=0)
    base = score_stream(queries, [ds.distractors], k=100)
    with_dup = score_stream(queries, [ds.distractors, dup], k=100)
    pid = ds.positive_ids[p_idx]
    assert by_id(with_dup)[pid] == by_id(base)[pid] + 3


def test_any_split_and_merge_order_gives_the_same_result(ds, queries):
    """Any split and merge order gives exactly the top-K and counts of the scores its chunks'
    GEMMs gave (a full sort of them), and agrees with one pass up to BLAS rounding: the last bit
    of a float32 score can depend on the GEMM's shape and the CPU (every chunk differs somewhere
    on an AMD EPYC with OpenBLAS 0.3.31), which the bit-equality this replaced assumed away."""
    rng = np.random.default_rng(0)
    one = score_stream(queries, [ds.distractors], k=200)
    q32 = ds.queries.astype(np.float32)
    for trial in range(3):
        cuts = np.sort(rng.choice(np.arange(1, 12_000), size=rng.integers(2, 7), replace=False))
        perm = rng.permutation(12_000)
        partials, scores = [], []
        for piece in np.split(perm, cuts):
            state = empty_partial(queries, 200)
            for rows in np.array_split(piece, rng.integers(1, 4)):
                c = ds.distractors[rows]
                score_chunk(queries, c, state)
                scores.append(q32 @ c.astype(np.float32).T)           # the same GEMM as the engine's
            partials.append(state)
        order = rng.permutation(len(partials))
        merged = partials[order[0]]
        for i in order[1:]:
            merged = merged.merge(partials[i])
        ss = to_sample_stats(queries, merged)
        s = np.concatenate(scores, axis=1)
        np.testing.assert_array_equal(ss.top_scores, -np.sort(-s, axis=1)[:, :200])
        qpos = np.repeat(np.arange(len(q32)), np.diff(queries.pos_offsets))
        np.testing.assert_array_equal(ss.pos_counts, (s[qpos] >= queries.pos_scores[:, None]).sum(axis=1))
        np.testing.assert_allclose(ss.top_scores, one.top_scores, rtol=0, atol=1e-6)
        assert np.abs(ss.pos_counts - one.pos_counts).max() <= 1


def test_faiss_backend_agrees(ds, queries):
    pytest.importorskip("faiss")
    a = score_stream(queries, [ds.distractors[:6000], ds.distractors[6000:]], k=150)
    b = score_stream(queries, [ds.distractors[:6000], ds.distractors[6000:]], k=150, backend="faiss")
    np.testing.assert_allclose(a.top_scores, b.top_scores, atol=1e-6)
    np.testing.assert_array_equal(a.pos_counts, b.pos_counts)


def test_torch_backend_agrees_and_keeps_the_tie_rule(ds):
    pytest.importorskip("torch")
    # positives are scored by the same routine as distractors, so a duplicate still ties exactly
    q_np = Queries.build(ds.queries, ds.query_ids, ds.positives, ds.positive_ids, ds.positives_of)
    q_t = Queries.build(ds.queries, ds.query_ids, ds.positives, ds.positive_ids, ds.positives_of, backend="torch")
    p_idx = ds.positives_of(0)[0]
    dup = np.repeat(ds.positives[p_idx][None, :], 2, axis=0)
    chunks = [ds.distractors[:5000], ds.distractors[5000:], dup]
    a = score_stream(q_np, chunks, k=150)
    b = score_stream(q_t, chunks, k=150, backend="torch")
    np.testing.assert_allclose(a.top_scores, b.top_scores, atol=1e-5)
    pid = ds.positive_ids[p_idx]
    base = score_stream(q_t, chunks[:2], k=150, backend="torch")
    assert by_id(b)[pid] == by_id(base)[pid] + 2
    # counts can differ only where a distractor and a positive agree to float32 rounding
    diff = np.flatnonzero(a.pos_counts != b.pos_counts)
    assert diff.size <= 2


def test_backend_choice():
    from rscale.score import engine

    assert engine.choose_backend("faiss", 10, 10, 8) == "faiss"
    assert engine.choose_backend("auto", 1000, 100_000, 768) == "numpy"      # small: no device start-up
    with pytest.raises(InvalidArgumentError, match="unknown scoring backend 'cuda'.*numpy, faiss, torch, auto"):
        engine.choose_backend("cuda", 10, 10, 8)


def test_backend_choice_prefers_a_gpu_for_large_jobs(monkeypatch):
    from rscale.score import engine, torch_backend

    monkeypatch.setattr(torch_backend, "cuda_available", lambda: True)
    assert engine.choose_backend("auto", 1000, 100_000_000, 768) == "torch"
    monkeypatch.setattr(torch_backend, "cuda_available", lambda: False)
    assert engine.choose_backend("auto", 1000, 100_000_000, 768) == "numpy"


def test_full_gallery_exact_evaluation(ds, queries):
    # the engine over the whole gallery gives the exact metric; a sample feeds the estimators
    ss = score_stream(queries, [ds.distractors], k=100)
    via_counts = law.ap_at_k(law.Hardness.from_counts(ss.pos_counts, ss.pos_offsets, 12_000), 12_000, 100)
    labels, scores = [], []
    for q in range(len(ds.queries)):
        pos = ds.positives_of(q)
        scores.append(np.concatenate([ds.positives[pos] @ ds.queries[q], ds.distractors @ ds.queries[q]]))
        labels.append(np.concatenate([np.ones(len(pos), int), np.zeros(12_000, int)]))
    ranks, off = metrics.ranks_from_scores(np.array(scores, dtype=np.float32), np.array(labels))
    np.testing.assert_allclose(via_counts, metrics.ap_at_k(ranks, off, 100), rtol=1e-12)


def test_hash_sampling_is_uniform_nested_and_reproducible():
    ids = np.arange(200_000)
    u = hash_uniform(ids, seed=1)
    assert abs(u.mean() - 0.5) < 0.005 and 0 <= u.min() and u.max() < 1
    s1, s5 = in_sample(ids, 0.01, 1), in_sample(ids, 0.05, 1)
    assert np.all(s5[s1]) and abs(s5.mean() - 0.05) < 0.002
    assert np.array_equal(in_sample(ids, 0.05, 1), s5)
    assert (in_sample(ids, 0.05, 2) & s5).mean() == pytest.approx(0.0025, abs=0.0006)  # independent seeds
    strs = np.array([f"img_{i}" for i in range(20_000)])
    a, b = in_sample(strs, 0.02, 7), in_sample(strs, 0.1, 7)
    assert np.all(b[a]) and abs(b.mean() - 0.1) < 0.01
    with pytest.raises(InvalidArgumentError):
        in_sample(ids, 0.0)


def test_descriptor_store_round_trip_sample_and_drift(tmp_path, ds, queries):
    ids = np.arange(12_000)
    blocks = [(ids[i:i + 2500], ds.distractors[i:i + 2500]) for i in range(0, 12_000, 2500)]
    store = write_descriptor_set(tmp_path / "d", blocks, role="distractors", dtype="float32",
                                 meta={"backbone": "sim"}, shard_size=4000)
    assert [s["count"] for s in store.manifest["shards"]] == [4000, 4000, 4000]
    again = DescriptorSet.open(tmp_path / "d")
    assert again.count == 12_000 and again.verify() == []
    np.testing.assert_array_equal(again.ids(), ids)
    keep = lambda i: in_sample(i, 0.5, seed=0)  # noqa: E731
    sampled = np.concatenate(list(again.chunks(1000, keep=keep)))
    np.testing.assert_array_equal(sampled, ds.distractors[keep(ids)])
    shards = [[np.asarray(v, dtype=np.float32)] for _, v in again.shards()]
    ss, report = score_shards(queries, shards, k=100)
    assert not report.drifting, report.message()
    # a shard of near-duplicates of the queries' instances drifts
    hard = make_descriptors(n_instances=25, d=24, n_distractors=4000, hard_share=0.5, seed=3).distractors
    _, bad = score_shards(queries, shards[:2] + [[hard]], k=100)
    assert bad.drifting and "NOT exchangeable" in bad.message()


def test_descriptor_store_bad_input(tmp_path, ds):
    v = ds.distractors[:10].copy()
    with pytest.raises(FormatError, match="not L2-normalised"):
        write_descriptor_set(tmp_path / "a", [(np.arange(10), v * 2)], role="distractors")
    v2 = v.copy()
    v2[3, 0] = np.nan
    with pytest.raises(FormatError, match="NaN") as err:
        write_descriptor_set(tmp_path / "b", [(np.arange(10), v2)], role="distractors")
    assert err.value.row == 3
    with pytest.raises(FormatError, match="duplicate id"):
        write_descriptor_set(tmp_path / "c", [(np.arange(10), v), (np.arange(5), v[:5])], role="distractors")
    with pytest.raises(FormatError, match="dimension"):
        write_descriptor_set(tmp_path / "d", [(np.arange(10), v), (np.arange(10, 20), v[:, :10])],
                             role="distractors")
    assert not (tmp_path / "d" / "manifest.json").exists()     # nothing half-visible
    store = write_descriptor_set(tmp_path / "e", [(np.arange(10), v)], role="distractors")
    shard = store.root / store.manifest["shards"][0]["vectors"]
    shard.write_bytes(shard.read_bytes()[:100])
    assert store.verify() == [shard.name]
    with pytest.raises(FormatError, match="corrupt shard|shape"):
        list(DescriptorSet.open(tmp_path / "e").chunks())
    with pytest.raises(FormatError, match="no manifest"):
        DescriptorSet.open(tmp_path / "nothing")


def test_query_without_positives_is_refused(ds):
    with pytest.raises(InvalidArgumentError, match="has no positives"):
        Queries.build(ds.queries[:2], ds.query_ids[:2], ds.positives, ds.positive_ids,
                      lambda q: [] if q == 1 else ds.positives_of(q))
