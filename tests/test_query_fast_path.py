"""The query path's caches and shortcuts give the answers of the path without them, bit for bit:
the per-query predictions kept with a registry-cached estimate (rscale.core.prediction), the
one-copy column read (rscale.store.columns) and the two-reduction range check of a hardness file (random tables)."""

from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rscale import sim
from rscale.core import prediction
from rscale.core.backtest import Backtest
from rscale.core.estimators.methods import estimate
from rscale.core.interval import predicted_intervals
from rscale.errors import FormatError
from rscale.sim.presets import PRESETS
from rscale.store.columns import numeric
from rscale.store.hardness_file import read_hardness, write_hardness

CELLS = [("AP", 1000, 1e7), ("AP", 100, 3e6), ("R", 1, 1e7), ("RR", None, 2e8), ("Recall", 10, 1e6)]


@pytest.fixture(scope="module")
def ss():
    return sim.sample(sim.simulate(replace(PRESETS["sim_bounded"], n_queries=120), seed=4), 200_000, k=300, seed=4)


def _write(path, ss, seed=0):
    """A hardness file with 8 replicates and 4 back-test columns, random around the estimate."""
    est = estimate(ss, "count")
    rng = np.random.default_rng(seed)
    reps = np.round(np.clip(est.x[:, None] * rng.uniform(0.3, 1.7, (est.x.size, 8)), 0, 1), 6)   # ties too
    cols = np.clip(est.x[:, None] * rng.uniform(0.5, 1.5, (est.x.size, 4)), 0, 1)
    write_hardness(replace(est, replicates=reps), ss, path, None,
                   Backtest(counts=ss.pos_counts, columns=cols, column_factors=np.array([4, 4, 4, 4])))
    return path


def _read_only(est):
    for a in (est.x, est.offsets, est.replicates):
        a.flags.writeable = False
    return est


@pytest.mark.parametrize("seed", [0, 1])
def test_repeated_queries_answer_what_an_uncached_evaluation_answers(tmp_path, ss, seed):
    from rscale import api
    from rscale.store.registry import clear_caches
    path = _write(tmp_path / "h.parquet", ss, seed)
    api.register(path, None, registry=tmp_path / "reg", backbone="b", benchmark="sim")
    text = "mAP@1000, mAP@100, R@1, MRR at N=1e6, 1e7, 3e8 for b using count"
    plain, info = read_hardness(path)                    # writable: no memo, no stored views, sorts
    assert plain.x.flags.writeable
    cells = [(m, k, n) for m, k in (("AP", 1000), ("AP", 100), ("R", 1), ("RR", None)) for n in (1e6, 1e7, 3e8)]
    for ci in ("benchmark", "population"):
        want = predicted_intervals(plain, cells, ci_kind=ci, bootstrap=200, seed=3, backtest=info["backtest"])
        clear_caches()
        answers = [api.query(text, tmp_path / "reg", ci_kind=ci, bootstrap=200, seed=3) for _ in range(3)]
        assert answers[0] == answers[1] == answers[2]      # the memo's answers are the first evaluation's
        rows = answers[0]["rows"]
        assert len(rows) == len(cells)
        for row, (pq_, lo, hi, bt) in zip(rows, want):
            assert row["ci_kind"] == ci
            assert (row["value"], row["ci_low"], row["ci_high"]) == (float(pq_.mean()), lo, hi)
            assert row["backtest_at_n"] == (None if bt is None else bt.at_n)


def test_memo_keeps_read_only_cells_evicts_the_oldest_and_skips_writable_estimates(tmp_path, ss, monkeypatch):
    path = _write(tmp_path / "h.parquet", ss)
    fresh, _ = read_hardness(path)
    est = _read_only(read_hardness(path)[0])
    got = {c: prediction.predict_per_query(est, c[0], c[2], c[1]) for c in CELLS}
    for (metric, k, n), v in got.items():
        assert not v.flags.writeable
        assert prediction.predict_per_query(est, metric, n, k) is v            # kept
        np.testing.assert_array_equal(v, prediction.predict_per_query(fresh, metric, n, k))
        reps = prediction.replicate_per_query(est, metric, n, k)
        assert reps.shape == (8, est.offsets.size - 1)
        np.testing.assert_array_equal(reps, prediction.replicate_per_query(fresh, metric, n, k))
    assert "_per_query_memo" not in fresh.__dict__
    # N = 1e7 and N = 1e7 + 1 are different cells
    assert not np.array_equal(prediction.predict_per_query(est, "RR", 1e7, None),
                              prediction.predict_per_query(est, "RR", 1e7 + 1e6, None))
    # bounded: with room for two replicate cells, the oldest goes first
    small = _read_only(read_hardness(path)[0])
    monkeypatch.setattr(prediction, "_MEMO_BYTES", 2 * 8 * (small.offsets.size - 1) * 8)
    for n in (1e6, 2e6, 3e6):
        prediction.replicate_per_query(small, "AP", n, 100)
    kept = [key[2] for key in small.__dict__["_per_query_memo"]]
    assert kept == [2e6, 3e6]


def test_rows_of_a_run_of_indices_are_a_view_with_the_values_of_a_copy():
    from rscale.core import law
    rng = np.random.default_rng(5)
    off = np.concatenate([[0], np.cumsum(rng.integers(1, 6, 50))])
    h = law.Hardness.from_flat(rng.random((6, int(off[-1]))) * 1e-3, off)
    h.x_by_position
    for which in (np.array([2, 3, 4]), np.array([0]), np.array([1, 3]), np.array([4, 3]), slice(1, 3)):
        got = h.rows(which)
        np.testing.assert_array_equal(got.x, h.x[which])
        np.testing.assert_array_equal(got.x_by_position, h.x_by_position[which])
        np.testing.assert_array_equal(law.per_query(got, "AP", 1e5, 100), law.per_query(h, "AP", 1e5, 100)[which])
    assert np.shares_memory(h.rows(np.array([2, 3, 4])).x, h.x)          # a run: a view
    assert not np.shares_memory(h.rows(np.array([1, 3])).x, h.x)          # otherwise: a copy


def test_from_flat_like_shares_index_arrays_and_still_checks_and_sorts():
    from rscale.core import law
    from rscale.errors import InvalidArgumentError
    rng = np.random.default_rng(6)
    off = np.concatenate([[0], np.cumsum(rng.integers(1, 7, 80))])
    base = law.Hardness.from_flat(rng.random(int(off[-1])) * 1e-3, off)
    x = rng.integers(0, 50, int(off[-1])) / 100.0                    # unsorted within queries, with ties
    got, want = law.Hardness.from_flat(x, off.copy(), like=base), law.Hardness.from_flat(x, off)
    np.testing.assert_array_equal(got.x, want.x)
    assert got.by_position is base.by_position and got.j is base.j and got.query is base.query
    for metric, k in (("AP", 10), ("R", 1), ("Recall", 3)):
        np.testing.assert_array_equal(law.per_query(got, metric, 50.0, k), law.per_query(want, metric, 50.0, k))
    other = law.Hardness.from_flat(x[:off[-2]], off[:-1], like=base)  # other offsets: its own index arrays
    assert other.by_position is not base.by_position and other.offsets.size == off.size - 1
    with pytest.raises(InvalidArgumentError, match=r"\[0, 1\]"):
        law.Hardness.from_flat(x + 1.0, off, like=base)


def test_numeric_reads_one_and_many_chunks_as_owned_copies():
    one = pa.array(np.arange(10, dtype=np.int64)).slice(3, 5)          # a chunk with an offset
    got = numeric(one, np.float64)
    assert got.dtype == np.float64 and got.tolist() == [3.0, 4.0, 5.0, 6.0, 7.0]
    same = numeric(pa.chunked_array([pa.array([1.5, 2.5])]))
    assert same.flags.writeable and same.flags.owndata and same.tolist() == [1.5, 2.5]
    same[0] = 9.0                                                      # a copy: the Arrow buffer is untouched
    many = numeric(pa.chunked_array([[1, 2], [3], []]), np.int64)
    assert many.tolist() == [1, 2, 3] and many.dtype == np.int64
    assert numeric(pa.chunked_array([[1, 2], [3]]), np.float32).dtype == np.float32
    assert numeric(pa.chunked_array([], pa.float64())).size == 0
    with pytest.raises(TypeError, match="null"):
        numeric(pa.array([1.0, None]))


@pytest.mark.parametrize("column,value", [("replicates", np.nan), ("replicates", -1e-9), ("replicates", 1.5),
                                          ("backtest", np.inf), ("backtest", np.nan)])
def test_a_bad_replicate_or_back_test_value_is_refused_with_its_row(tmp_path, ss, column, value):
    path = _write(tmp_path / "h.parquet", ss)
    t = pq.read_table(path)
    col = t.column(column).combine_chunks()
    width = col.type.list_size
    flat = col.values.to_numpy().copy()
    flat[7 * width + 1] = value
    bad = t.set_column(t.schema.get_field_index(column), column,
                       pa.FixedSizeListArray.from_arrays(pa.array(flat), width))
    pq.write_table(bad, tmp_path / "bad.parquet")
    with pytest.raises(FormatError, match="outside") as err:
        read_hardness(tmp_path / "bad.parquet")
    assert err.value.column == column and err.value.row == 7
