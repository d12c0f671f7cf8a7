import json
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rscale import sim
from rscale.errors import FormatError, SchemaVersionError
from rscale.sim.presets import PRESETS
from rscale.store.sample_stats_file import read_sample_stats, to_table, write_sample_stats


@pytest.fixture(scope="module")
def ss():
    bench = sim.simulate(replace(PRESETS["sim_bounded"], n_queries=30), seed=1)
    return sim.sample(bench, 50_000, k=64, seed=1)


def test_round_trip(tmp_path, ss):
    path = write_sample_stats(ss, tmp_path / "s.parquet")
    back = read_sample_stats(path)
    np.testing.assert_array_equal(back.query_ids, ss.query_ids)
    np.testing.assert_array_equal(back.top_scores, ss.top_scores)
    np.testing.assert_array_equal(back.pos_counts, ss.pos_counts)
    np.testing.assert_array_equal(back.pos_ids, ss.pos_ids)
    np.testing.assert_array_equal(back.pos_offsets, ss.pos_offsets)
    assert back.meta["backbone"] == "sim_bounded" and back.meta["k"] == "64"
    assert not list(tmp_path.glob(".*tmp*")), "no temp file left behind"


def test_user_written_file_without_metadata_reads(tmp_path):
    # What a user writes from their own kNN results, with float32 scores and no rscale metadata.
    table = pa.table({
        "query_id": ["a", "b"],
        "n_sampled": pa.array([10, 10], pa.int64()),
        "top_scores": pa.array([[0.9, 0.5, 0.2], [0.8, 0.7, 0.1]], pa.list_(pa.float32())),
        "positive_ids": [["a1", "a2"], ["b1"]],
        "positive_scores": pa.array([[0.95, 0.6], [0.3]], pa.list_(pa.float32())),
        "positive_counts": pa.array([[0, 1], [2]], pa.list_(pa.int64())),
    })
    pq.write_table(table, tmp_path / "mine.parquet")
    ss = read_sample_stats(tmp_path / "mine.parquet")
    assert ss.k == 3 and ss.n_positives == 3


def _write(tmp_path, table, name="bad.parquet"):
    path = tmp_path / name
    pq.write_table(table, path)
    return path


def _table(ss, **changes):
    t = to_table(ss)
    for col, values in changes.items():
        i = t.column_names.index(col)
        t = t.set_column(i, col, pa.array(values, t.schema.field(col).type))
    return t


def _bad(tmp_path, ss, match, column=None, row=None, **changes):
    path = _write(tmp_path, _table(ss, **changes))
    with pytest.raises(FormatError, match=match) as err:
        read_sample_stats(path)
    assert str(path) in str(err.value)
    if column:
        assert err.value.column == column
    if row is not None:
        assert err.value.row == row
    return err.value


def test_nan_score(tmp_path, ss):
    top = ss.top_scores.copy()
    top[4, 10] = np.nan
    _bad(tmp_path, ss, "NaN", "top_scores", 4, top_scores=list(top))


def test_unsorted_top(tmp_path, ss):
    top = ss.top_scores.copy()
    top[2, [3, 4]] = top[2, [4, 3]]
    _bad(tmp_path, ss, "descending", "top_scores", 2, top_scores=list(top))


def test_short_top_list(tmp_path, ss):
    top = [list(r) for r in ss.top_scores]
    top[5] = top[5][:-1]
    _bad(tmp_path, ss, "expected K = 64", "top_scores", 5, top_scores=top)


def test_s_smaller_than_k(tmp_path, ss):
    n = ss.n_sampled.copy()
    n[3] = 10
    _bad(tmp_path, ss, "fewer than K", "n_sampled", 3, n_sampled=n)


def test_inconsistent_counts(tmp_path, ss):
    counts = [list(ss.pos_counts[a:b]) for a, b in zip(ss.pos_offsets[:-1], ss.pos_offsets[1:])]
    # find a positive inside the top list and shift its count
    q = next(i for i, c in enumerate(counts) if c[0] < 60)
    counts[q][0] += 1
    _bad(tmp_path, ss, "disagrees with top_scores", "positive_counts", q, positive_counts=counts)


def test_duplicate_ids(tmp_path, ss):
    qids = ss.query_ids.copy()
    qids[7] = qids[2]
    _bad(tmp_path, ss, "duplicate query_id", "query_id", 7, query_id=list(qids))
    pids = [list(ss.pos_ids[a:b]) for a, b in zip(ss.pos_offsets[:-1], ss.pos_offsets[1:])]
    q = next(i for i, p in enumerate(pids) if len(p) >= 2)
    pids[q][1] = pids[q][0]
    _bad(tmp_path, ss, "duplicate positive id", "positive_ids", q, positive_ids=pids)


def test_empty_query(tmp_path, ss):
    cols = {}
    for col, arr in (("positive_ids", ss.pos_ids), ("positive_scores", ss.pos_scores),
                     ("positive_counts", ss.pos_counts)):
        lists = [list(arr[a:b]) for a, b in zip(ss.pos_offsets[:-1], ss.pos_offsets[1:])]
        lists[6] = []
        cols[col] = lists
    _bad(tmp_path, ss, "no positives", "positive_ids", 6, **cols)


def test_missing_column_and_not_parquet(tmp_path, ss):
    t = to_table(ss).drop_columns(["positive_counts"])
    with pytest.raises(FormatError, match="missing column.*positive_counts"):
        read_sample_stats(_write(tmp_path, t))
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"not parquet at all")
    with pytest.raises(FormatError, match="not a readable Parquet"):
        read_sample_stats(junk)
    with pytest.raises(FormatError, match="file not found"):
        read_sample_stats(tmp_path / "nope.parquet")


def test_newer_schema_version(tmp_path, ss):
    t = to_table(ss)
    md = dict(t.schema.metadata)
    md[b"rscale.schema_version"] = b"99"
    with pytest.raises(SchemaVersionError, match="upgrade rscale"):
        read_sample_stats(_write(tmp_path, t.replace_schema_metadata(md)))


def test_write_refuses_invalid_and_leaves_old_file(tmp_path, ss):
    path = write_sample_stats(ss, tmp_path / "s.parquet")
    before = path.read_bytes()
    bad = replace(ss, n_sampled=np.full(ss.n_queries, 3))
    with pytest.raises(FormatError):
        write_sample_stats(bad, path)
    assert path.read_bytes() == before


def test_meta_is_json(tmp_path, ss):
    md = pq.read_schema(write_sample_stats(ss, tmp_path / "m.parquet")).metadata
    meta = json.loads(md[b"rscale.meta"])
    assert meta["sampler"] == "sim-order-statistics"


def test_list_columns_read_the_same_from_many_row_groups_without_copying_them(tmp_path, ss):
    """The list readers take zero-copy views of each chunk's values (store.columns.list_flat), not
    combine_chunks() + flatten(): files of one row group and of many (many chunks per column) read
    to the same arrays, a null inside a later chunk's list is named by its row, and the reranked-
    input reader agrees."""
    from rscale.core.rerank_replicates import reranked_input
    from rscale.store.columns import list_flat
    from rscale.store.reranked_input_file import read_reranked_input, write_reranked_input
    rng = np.random.default_rng(3)
    rr = replace(ss, top_rerank=rng.random((ss.n_queries, 9)), pos_rerank=rng.random(ss.n_positives))
    one, many = tmp_path / "one.parquet", tmp_path / "many.parquet"
    pq.write_table(to_table(rr), one)
    pq.write_table(to_table(rr), many, row_group_size=7)
    assert pq.read_table(many).column("top_scores").num_chunks == 5
    a, b = read_sample_stats(one), read_sample_stats(many)
    for f in ("query_ids", "n_sampled", "top_scores", "pos_offsets", "pos_ids", "pos_scores", "pos_counts",
              "top_rerank", "pos_rerank"):
        assert np.array_equal(getattr(a, f), getattr(rr, f)) and np.array_equal(getattr(b, f), getattr(rr, f)), f
        assert getattr(b, f).flags.writeable and getattr(b, f).dtype == getattr(a, f).dtype, f
    # a sliced chunk (offsets not starting at 0) against pyarrow's own flatten
    col = pa.chunked_array([to_table(rr).column("positive_ids").combine_chunks().slice(3, 11)] * 2)
    values, off = list_flat(col)
    assert values.to_pylist() == pa.concat_arrays([c.flatten() for c in col.chunks]).to_pylist()
    assert off.tolist() == np.concatenate([[0], np.cumsum([len(x) for x in col.to_pylist()])]).tolist()
    # a null value inside row 23's list (the fourth chunk): named by its row
    scores = [list(map(float, rr.pos_scores[s:e])) for s, e in zip(rr.pos_offsets[:-1], rr.pos_offsets[1:])]
    scores[23][1] = None
    t = to_table(rr)
    t = t.set_column(t.column_names.index("positive_scores"), "positive_scores", pa.array(scores, pa.list_(pa.float64())))
    pq.write_table(t, tmp_path / "null.parquet", row_group_size=7)
    with pytest.raises(FormatError, match="null value inside the list") as err:
        read_sample_stats(tmp_path / "null.parquet")
    assert err.value.row == 23 and err.value.column == "positive_scores"
    # the reranked input, written in one row group and re-written in many, reads the same
    inp = reranked_input(rr, splits=2, seed=0)
    path = write_reranked_input(inp, tmp_path / "rr.parquet", query_ids=rr.query_ids, pos_ids=rr.pos_ids, meta={})
    pq.write_table(pq.read_table(path), tmp_path / "rr_many.parquet", row_group_size=5)
    (x, ix), (y, iy) = read_reranked_input(path), read_reranked_input(tmp_path / "rr_many.parquet")
    assert pq.read_table(tmp_path / "rr_many.parquet").column("grid").num_chunks > 1
    for s, t_ in zip(x.sets, y.sets):
        for f in ("grid", "joint", "reach"):
            assert np.array_equal(getattr(s, f), getattr(t_, f)), f
    assert np.array_equal(ix["positive_ids"], iy["positive_ids"]) and np.array_equal(ix["query_ids"], iy["query_ids"])


def test_list_readers_allocate_no_arrow_copy_of_the_column(ss):
    # combine_chunks() copied even a one-chunk column into new Arrow memory; the views do not
    from rscale.store.reranked_input_file import _lists
    from rscale.store.sample_stats_file import _list_column
    big = replace(ss, top_scores=np.tile(ss.top_scores, (1, 20)), meta={**ss.meta, "k": str(ss.k * 20)})
    table = to_table(big)
    default = pa.default_memory_pool()
    for read in (lambda: _list_column(table, "top_scores", "x", "float"), lambda: _lists(table, "top_scores", "x")):
        pool = pa.proxy_memory_pool(default)
        pa.set_memory_pool(pool)
        try:
            values, _ = read()
        finally:
            pa.set_memory_pool(default)
        assert np.array_equal(values, big.top_scores.ravel()) and pool.max_memory() < values.nbytes / 10
