"""Half-sample membership recorded by distractor id (rscale.core.halves, ``rscale score --halves``):
the engine's masks and half counts against a brute-force recount from the descriptors, each
recorded half against scoring that half's own distractors, the format (version 3, old files
unchanged), and two different backbones on one sample pairing (``for A vs B``) while another
sample is refused."""

import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from rscale import api
from rscale.core.halves import RULE, id_hashes, membership, recorded_halves
from rscale.core.replicates import SPLIT_RULE, hardness_replicates, split_key
from rscale.errors import FormatError, InvalidArgumentError
from rscale.score.engine import Queries, empty_partial, score_chunk, to_sample_stats
from rscale.score.sampling import in_sample
from rscale.store.descriptor_set import DescriptorSet
from rscale.store.sample_stats_file import read_sample_stats, write_sample_stats

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
K = 40


def make_sets(root, seed, backbone):
    api.make_descriptor_sets(root, instances=24, dim=16, positives=3, distractors=6000, hard_share=0.02,
                             seed=seed, backbone=backbone, shard_size=2500, noise=(0.6, 1.4))
    return root


def score(root, out, *, seed=0, halves=True, fraction=0.5, chunk=700):
    api.score(root / "queries", root / "positives", qrels=root / "qrels.parquet", distractors_dir=root / "distractors",
              out=out, fraction=fraction, seed=seed, k=K, backend="numpy", chunk=chunk, lineage=False, halves=halves)
    return read_sample_stats(out)


def descriptors(root, seed):
    """Query vectors, each query's positive vectors, and the sampled distractors (ids, vectors)."""
    qs, ps, ds = (DescriptorSet.open(root / r) for r in ("queries", "positives", "distractors"))
    qv = np.concatenate([np.asarray(v, np.float32) for _, v in qs.shards()])
    pv = np.concatenate([np.asarray(v, np.float32) for _, v in ps.shards()])
    d_ids = ds.ids().astype(str)
    dv = np.concatenate([np.asarray(v, np.float32) for _, v in ds.shards()])
    keep = in_sample(ds.ids(), 0.5, seed)
    return qs.ids().astype(str), qv, ps.ids().astype(str), pv, d_ids[keep], dv[keep]


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("halves")
    root = make_sets(tmp / "a", 3, "alpha")
    return root, score(root, tmp / "a.parquet")


def test_recorded_masks_and_half_counts_equal_a_brute_force_recount(scored):
    root, ss = scored
    q_ids, qv, p_ids, pv, d_ids, dv = descriptors(root, 0)
    assert ss.schema_version == 3 and ss.meta["halves_rule"] == RULE and ss.meta["sample_ids"].startswith("n=")
    assert (ss.n_sampled == d_ids.size).all()
    bits = (membership(d_ids)[:, None] >> np.arange(8)) & 1                      # (S, 8)
    assert (ss.n_halves == bits.sum(axis=0)).all()                                # half-A sizes, every split
    assert 0.3 < bits.mean() < 0.7
    scores = np.stack([[float(np.dot(qv[i], d)) for d in dv] for i in range(len(q_ids))])   # plain dot products
    where = {p: j for j, p in enumerate(p_ids)}
    pq_ = ss.positive_query()
    checked = 0
    for p in range(ss.n_positives):
        qi = pq_[p]
        assert abs(float(np.dot(qv[qi], pv[where[ss.pos_ids[p]]])) - ss.pos_scores[p]) < 1e-5
        if (np.abs(scores[qi] - ss.pos_scores[p]) < 1e-5).any():
            continue                                   # a float32 rounding apart: the tie rule could flip it
        above = scores[qi] >= ss.pos_scores[p]
        assert ss.pos_counts[p] == above.sum()
        assert (ss.pos_halves[p] == bits[above].sum(axis=0)).all()
        checked += 1
    assert checked > 0.9 * ss.n_positives and (ss.pos_counts > K).sum() > 5   # also beyond the top list
    rows = 0
    for qi in range(ss.n_queries):
        order = np.argsort(-scores[qi], kind="stable")[:K + 1]
        assert np.allclose(ss.top_scores[qi], scores[qi][order[:K]], atol=1e-5)
        if np.diff(scores[qi][order]).max() > -1e-5:
            continue                                   # near-ties (or at the K-th): their masks may swap
        assert (ss.top_halves[qi] == membership(d_ids[order[:K]])).all()
        rows += 1
    assert rows > 0.5 * ss.n_queries


def test_each_recorded_half_is_the_half_of_its_own_distractors(scored):
    """Half A / B of split i equal the engine run on that half's distractors alone (S, counts,
    top list cut to the halves' K), and so do the replicates estimated from them."""
    root, ss = scored
    q_ids, qv, p_ids, pv, d_ids, dv = descriptors(root, 0)
    qs, ps = DescriptorSet.open(root / "queries"), DescriptorSet.open(root / "positives")
    import pyarrow.parquet as pq_
    rel = {}
    t = pq_.read_table(root / "qrels.parquet")
    for a, b in zip(t.column("query_id").to_pylist(), t.column("positive_id").to_pylist()):
        rel.setdefault(a, []).append(b)
    where = {p: j for j, p in enumerate(p_ids)}
    queries = Queries.build(qv, q_ids, pv, p_ids, lambda i: [where[p] for p in rel[q_ids[i]]])
    reps = hardness_replicates(ss, method="count", params={}, splits=8)
    for split in (0, 5):
        in_a = ((membership(d_ids) >> split) & 1).astype(bool)
        for side, half in zip((in_a, ~in_a), recorded_halves(ss, split)):
            state = empty_partial(queries, half.k)
            score_chunk(queries, dv[side], state)
            direct = to_sample_stats(queries, state)
            assert (half.n_sampled == direct.n_sampled).all() and (half.pos_counts == direct.pos_counts).all()
            # up to BLAS rounding: the half's own GEMM has another shape than the full set's, and a
            # float32 score's last bit can depend on it (tests/test_scoring.py, split and merge)
            np.testing.assert_allclose(half.top_scores, direct.top_scores, rtol=0, atol=1e-6)
        from rscale.core.estimators.methods import estimate
        for j, half in enumerate(recorded_halves(ss, split)):
            assert np.array_equal(reps[:, 2 * split + j], estimate(half, "count").x)


def test_the_format_round_trips_version_3_and_old_files_keep_their_splits(scored, tmp_path):
    _, ss = scored
    out = write_sample_stats(ss, tmp_path / "v3.parquet")
    back = read_sample_stats(out)
    assert pq.read_metadata(out).metadata[b"rscale.schema_version"] == b"3"
    for f in ("top_halves", "pos_halves", "n_halves", "top_scores", "pos_counts"):
        assert np.array_equal(getattr(back, f), getattr(ss, f))
    # without the columns: version 1 as before, RNG halves and their old key
    from dataclasses import replace
    old = replace(ss, top_halves=None, pos_halves=None, n_halves=None)
    write_sample_stats(old, tmp_path / "v1.parquet")
    assert pq.read_metadata(tmp_path / "v1.parquet").metadata[b"rscale.schema_version"] == b"1"
    back = read_sample_stats(tmp_path / "v1.parquet")
    assert not back.has_halves
    assert split_key(back, splits=8) != split_key(ss, splits=8)
    assert not np.array_equal(hardness_replicates(back, method="count", params={}, splits=4),
                              hardness_replicates(ss, method="count", params={}, splits=4))
    # more splits than a byte holds: the seeded thinning, keyed as before
    assert split_key(ss, splits=9) == split_key(back, splits=9)
    assert SPLIT_RULE and RULE


def test_bad_recorded_halves_are_named(scored, tmp_path):
    from dataclasses import replace
    _, ss = scored
    inside = int(np.flatnonzero((ss.pos_counts > 0) & (ss.pos_counts < K))[0])
    bad = ss.pos_halves.copy()
    bad[inside, 3] += 1 if bad[inside, 3] < ss.pos_counts[inside] else -1
    with pytest.raises(FormatError, match="positive_halves"):
        write_sample_stats(replace(ss, pos_halves=bad), tmp_path / "bad.parquet")
    with pytest.raises(FormatError, match="n_halves"):
        write_sample_stats(replace(ss, n_halves=None), tmp_path / "bad.parquet")
    assert not (tmp_path / "bad.parquet").exists()
    with pytest.raises(InvalidArgumentError, match="splits 0..7"):
        recorded_halves(ss, 8)


def test_id_hashes_are_the_documented_rule():
    import hashlib
    masks, words = id_hashes(["a", "17"])
    for i, s in enumerate(("a", "17")):
        b = hashlib.blake2b(s.encode(), digest_size=16).digest()
        assert masks[i] == b[0] and int(words[i]) == int.from_bytes(b[8:16], "little")


def test_two_backbones_on_one_sample_pair_and_another_sample_is_refused(scored, tmp_path):
    root_a, ss_a = scored
    root_b = make_sets(tmp_path / "b", 11, "beta")              # other vectors, the same distractor ids
    ss_b = score(root_b, tmp_path / "b.parquet")
    ss_c = score(root_b, tmp_path / "c.parquet", seed=5)        # another sample of the pool
    assert not np.array_equal(ss_a.top_scores, ss_b.top_scores)
    assert ss_a.meta["sample_ids"] == ss_b.meta["sample_ids"] != ss_c.meta["sample_ids"]
    assert (ss_a.n_halves == ss_b.n_halves).all()
    assert split_key(ss_a, splits=4) == split_key(ss_b, splits=4) != split_key(ss_c, splits=4)
    reg = tmp_path / "reg"
    for name, path in (("alpha", "a"), ("beta", "b"), ("gamma", "c")):
        src = (root_a.parent if path == "a" else tmp_path) / f"{path}.parquet"
        api.estimate(src, "evt", out=tmp_path / f"{path}.h.parquet", replicates=8, backtest=False)
        api.register(tmp_path / f"{path}.h.parquet", src, registry=reg, backbone=name)
    from rscale.store.hardness_file import read_hardness
    info = read_hardness(tmp_path / "b.h.parquet")[1]["replicates"]
    assert info["halves"] == "by distractor id" and info["split_key"] == split_key(ss_a, splits=4)
    ans = api.query("mAP@100 at N=1e5 for alpha vs beta", reg)
    (row,) = ans["rows"]
    assert row["paired"] == "replicates" and row["ci_low"] <= row["value"] <= row["ci_high"]
    assert row["value"] == pytest.approx(row["value_a"] - row["value_b"])
    with pytest.raises(InvalidArgumentError, match="do not pair"):
        api.query("mAP@100 at N=1e5 for alpha vs gamma", reg)


def test_reranked_replicates_use_the_recorded_halves_of_the_hardness_replicates(scored):
    """With rerank scores and recorded halves, the reranked input's half i is the joint tail of the
    same recorded half the hardness replicates are estimated from."""
    from dataclasses import replace

    from rscale.core.rerank_law import joint_from_top_smoothed
    from rscale.core.rerank_replicates import reranked_input
    from rscale.core.replicates import SEED
    _, ss = scored
    rr = replace(ss, top_rerank=ss.top_scores[:, :12] * 0.5 + 0.1, pos_rerank=ss.pos_scores * 0.5 + 0.1)
    inp = reranked_input(rr, splits=4, seed=SEED)
    for i in range(4):
        for j, half in enumerate(recorded_halves(rr, i)):
            grid, joint = joint_from_top_smoothed(half.top_rerank, half.n_sampled, half.pos_rerank, half.pos_offsets)
            assert np.array_equal(inp.halves[2 * i + j].grid, grid) and np.array_equal(inp.halves[2 * i + j].joint, joint)


def test_recorded_halves_do_not_depend_on_the_chunking(scored, tmp_path):
    """Another chunking records the same halves: every count and size exactly, every score up to
    BLAS rounding (its last bit can depend on the GEMM's shape and the CPU, so the files need not
    be byte-identical; on an AMD EPYC with OpenBLAS 0.3.31 they are not)."""
    root, ss = scored
    score(root, tmp_path / "b.parquet", chunk=4096)
    other = read_sample_stats(tmp_path / "b.parquet")
    for f in ("n_sampled", "pos_counts", "n_halves", "pos_halves"):
        np.testing.assert_array_equal(getattr(other, f), getattr(ss, f), err_msg=f)
    for f in ("top_scores", "top_halves", "pos_scores"):
        np.testing.assert_allclose(getattr(other, f), getattr(ss, f), rtol=0, atol=1e-6, err_msg=f)
    assert other.meta == ss.meta


def test_score_halves_on_the_command_line(tmp_path, capsys):
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from cli_checks import one_line_exit_2

    from rscale.cli import main
    root = tmp_path / "sets"
    api.make_descriptor_sets(root, instances=6, dim=8, positives=2, distractors=400, seed=0)
    args = ["score", "--queries", str(root / "queries"), "--positives", str(root / "positives"), "--qrels",
            str(root / "qrels.parquet"), "--distractors", str(root / "distractors"), "--k", "20", "--backend", "numpy"]
    assert main([*args, "--out", str(tmp_path / "o.parquet"), "--halves"]) == 0
    got = read_sample_stats(tmp_path / "o.parquet")
    assert got.has_halves and got.meta["sample_ids"].startswith("n=400 ")
    capsys.readouterr()
    one_line_exit_2(capsys, [*args, "--out", str(tmp_path / "r.parquet"), "--halves", "--k", "0"], "k must be")
    assert not (tmp_path / "r.parquet").exists()


def _kept_by_loop(top_rerank, keep, k):
    """Brute force: each query's rerank scores of its kept top entries, in order, cut to one R."""
    rows = [[top_rerank[q, j] for j in range(top_rerank.shape[1]) if keep[q, j]] for q in range(keep.shape[0])]
    r = min(k, min(len(row) for row in rows))
    return np.array([row[:r] for row in rows]).reshape(len(rows), r) if r else None


def test_kept_rerank_scores_is_the_one_home_of_subsamples_and_recorded_halves_rerank_scores(scored):
    """Sub-samples and recorded halves keep the rerank scores of their kept top entries through
    one function (rscale.core.sample_stats.kept_rerank_scores); each agrees with a loop."""
    from dataclasses import replace

    from rscale.core.sample_stats import kept_rerank_scores
    from rscale.core.subsample import subsample
    _, ss = scored
    rng = np.random.default_rng(5)
    for r in (3, 12, K):
        rr = replace(ss, top_rerank=rng.random((ss.n_queries, r)), pos_rerank=rng.random(ss.n_positives))
        for p in (0.9, 0.5, 0.1):
            keep = rng.random(ss.top_scores.shape) < p
            got, want = kept_rerank_scores(rr, keep, 7), _kept_by_loop(rr.top_rerank, keep, 7)
            assert (got == {}) if want is None else (np.array_equal(got["top_rerank"], want)
                                                     and got["pos_rerank"] is rr.pos_rerank)
            sub = subsample(rr, p, seed=3)           # its keep mask: the original top entries it kept
            kept = np.array([np.isin(rr.top_scores[q], sub.top_scores[q]) for q in range(ss.n_queries)])
            want = _kept_by_loop(rr.top_rerank, kept, sub.k)
            assert (sub.top_rerank is None) if want is None else \
                np.array_equal(sub.top_rerank, want[:, :sub.top_rerank.shape[1]])
        for split in (0, 5):
            for half, in_half in zip(recorded_halves(rr, split), (True, False)):
                keep = ((rr.top_halves >> np.uint8(split)) & 1).astype(bool) == in_half
                want = _kept_by_loop(rr.top_rerank, keep, half.k)
                assert (half.top_rerank is None) if want is None else np.array_equal(half.top_rerank, want)
    assert kept_rerank_scores(replace(ss, top_rerank=None, pos_rerank=None), np.ones(ss.top_scores.shape, bool), 5) == {}
