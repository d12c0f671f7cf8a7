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
