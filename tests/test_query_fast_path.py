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


def _reference_window_sum(x, j, n, m_max, precision, cut=None):
    """The Binomial window sum as rscale.core.law computed it before the padded blocks, the
    row de-duplication and the table (commit 39d6b08): one index array per term, a bincount per
    element; every element summed whatever ``cut``."""
    from rscale.core.law import _CHUNK_TERMS, _WINDOW_SD, log_choose
    x, j, m_max = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(j, dtype=np.float64),
                                      np.asarray(m_max, dtype=np.float64))
    if x.ndim != 1:
        return _reference_window_sum(x.ravel(), j.ravel(), n, m_max.ravel(), precision).reshape(x.shape)
    m_max = np.minimum(m_max, n)
    out = np.zeros(x.shape)
    valid = m_max >= 0
    out[valid & (x <= 0)] = 1.0
    one = valid & (x >= 1) & (m_max >= n)
    out[one] = (j[one] / (j[one] + n)) if precision else 1.0
    mid = np.flatnonzero(valid & (x > 0) & (x < 1))
    if mid.size == 0:
        return out
    mu = n * x[mid]
    sd = np.sqrt(mu * (1.0 - x[mid]))
    lo = np.maximum(0.0, np.floor(mu - _WINDOW_SD * sd - _WINDOW_SD))
    hi = np.minimum(m_max[mid], np.ceil(mu + _WINDOW_SD * sd + _WINDOW_SD))
    keep = hi >= lo
    mid, lo, hi = mid[keep], lo[keep].astype(np.int64), hi[keep].astype(np.int64)
    lengths = hi - lo + 1
    top = int(hi.max(initial=-1))
    table = log_choose(n, np.arange(top + 1, dtype=np.float64)) if 0 <= top < int(lengths.sum()) else None
    ends = np.cumsum(lengths)
    start = 0
    while start < mid.size:
        base = ends[start - 1] if start else 0
        stop = max(int(np.searchsorted(ends, base + _CHUNK_TERMS, side="right")), start + 1)
        idx, ln = mid[start:stop], lengths[start:stop]
        seg = np.repeat(np.arange(idx.size), ln)
        first = np.repeat(np.cumsum(ln) - ln, ln)
        mi = np.arange(int(ln.sum())) - first + np.repeat(lo[start:stop], ln)
        m = mi.astype(np.float64)
        xi = x[idx][seg]
        logpmf = (log_choose(n, m) if table is None else table[mi]) + m * np.log(xi) + (n - m) * np.log1p(-xi)
        terms = np.exp(logpmf)
        if precision:
            jj = j[idx][seg]
            terms *= jj / (jj + m)
        out[idx] = np.bincount(seg, weights=terms, minlength=idx.size)
        start = stop
    return out


def _window_inputs(rng, rows, p, n):
    """A stack (rows, P) of hardness with every regime of the window (x = 0, x = 1, N x from 1e-5 to
    well past the cut-off, exact ties) where ~70% of a column repeats the row above (as evt-eb's
    posterior draws do), and the 1-based positions j of AP's cut-off sums."""
    mu = 10.0 ** rng.uniform(-5, 3.5, (rows, p))
    x = np.minimum(mu / n, 1.0)
    x[:, rng.random(p) < 0.03] = 0.0
    x[:, rng.random(p) < 0.01] = 1.0
    for r in range(1, rows):
        again = rng.random(p) < 0.7
        x[r, again] = x[r - 1, again]
    j = np.broadcast_to(rng.integers(1, 12, p).astype(np.float64), x.shape)
    return x, j


@pytest.mark.parametrize("n", [1e8, 3e4, 700])
@pytest.mark.parametrize("precision", [True, False])
@pytest.mark.parametrize("chunk", [None, 500])
def test_window_sum_gives_the_per_term_reference_bit_for_bit(n, precision, chunk, monkeypatch):
    from rscale.core import law
    if chunk:                                 # many blocks per group of windows
        monkeypatch.setattr(law, "_BLOCK_TERMS", chunk)
    rng = np.random.default_rng(int(n) % 97 + precision)
    x, j = _window_inputs(rng, 6, 900, n)
    for m_max in (np.full(x.shape, 1e9), 1000 - j, 40 - j, rng.integers(-2, 60, x.shape).astype(np.float64)):
        want = _reference_window_sum(x, j, int(n), m_max, precision)
        got = law._binomial_window_sum(x, j, int(n), m_max, precision)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(law._binomial_window_sum(x[2], j[2], int(n), m_max[2], precision), want[2])
    # the log-choose table and the direct form give the same terms: few elements, long windows
    few = np.array([0.3, 0.31, 0.3]) if n < 1e4 else np.array([2e-6, 3e-6, 2e-6])
    np.testing.assert_array_equal(law._binomial_window_sum(few, 1.0, int(n), 1e9, precision),
                                  _reference_window_sum(few, 1.0, int(n), 1e9, precision))


@pytest.mark.parametrize("metric,k", [("AP", 1000), ("AP", 100), ("AP", None), ("Recall", 50), ("R", 10),
                                      ("RR", 1000), ("RR", None)])
def test_expected_mode_of_a_stack_with_repeated_rows_equals_one_row_at_a_time(metric, k, monkeypatch):
    from rscale.core import law
    monkeypatch.setattr(law, "_STACK_BLOCK", 500)    # a stack larger than a block: before, evaluated in blocks
    rng = np.random.default_rng(11)
    off = np.concatenate([[0], np.cumsum(rng.integers(1, 9, 300))])
    x, _ = _window_inputs(rng, 8, int(off[-1]), 1e7)
    stack = law.per_query(law.Hardness.from_flat(x, off), metric, 1e7, k, "expected")
    rows = np.stack([law.per_query(law.Hardness.from_flat(r, off), metric, 1e7, k, "expected") for r in x])
    np.testing.assert_array_equal(stack, rows)
    # laid out as the blocks' concatenation was (C order): a mean over the rows (the point over
    # posterior draws) adds in the same order, to the same bits
    assert stack.flags.c_contiguous


def _close(got, want, tol):
    """Equal structure, numbers within ``tol``."""
    if isinstance(want, dict):
        assert got.keys() == want.keys()
        for key in want:
            _close(got[key], want[key], tol)
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for a, b in zip(got, want):
            _close(a, b, tol)
    elif isinstance(want, float) and not isinstance(want, bool):
        assert got == pytest.approx(want, abs=tol, rel=0), (got, want)
    else:
        assert got == want


@pytest.mark.parametrize("tabulated", [False, True])
def test_expected_mode_query_answers_what_the_per_term_window_sums_answered(tmp_path, ss, monkeypatch, tabulated):
    """End to end, an evt-eb-like table (posterior draws that repeat a positive's value, the
    default expected mode): every field of every row is what the window sums of 39d6b08 give,
    bit for bit where every element is summed, and within 1e-11 where the sums are read off
    the table of rscale.core.window_table (here made to apply to these small stacks)."""
    from rscale import api
    from rscale.core import law
    from rscale.store.registry import clear_caches
    est = estimate(ss, "count")
    rng = np.random.default_rng(8)
    draws = np.clip(est.x[:, None] * rng.uniform(0.5, 1.5, (est.x.size, 8)), 0, 1)
    for c in range(1, 8):
        again = rng.random(est.x.size) < 0.7
        draws[again, c] = draws[again, c - 1]
    reps = np.clip(est.x[:, None] * rng.uniform(0.3, 1.7, (est.x.size, 8)), 0, 1)
    cols = np.clip(est.x[:, None] * rng.uniform(0.5, 1.5, (est.x.size, 4)), 0, 1)
    path = tmp_path / "h.parquet"
    write_hardness(replace(est, method="evt-eb", draws=draws, replicates=reps), ss, path, None,
                   Backtest(counts=ss.pos_counts, columns=cols, column_factors=np.array([4, 4, 4, 4])))
    api.register(path, None, registry=tmp_path / "reg", backbone="b", benchmark="sim")
    monkeypatch.setattr(law, "_STACK_BLOCK", 500)          # the table's stacks are larger than one block
    monkeypatch.setattr(law, "_TABLE_MIN", 1 if tabulated else 1 << 62)
    used = []
    real = law._tabulated
    monkeypatch.setattr(law, "_tabulated", lambda *a: used.append((a[3], a[4], np.ndim(a[1]))) or real(*a))
    text = "mAP@1000, mAP@100, R@1, MRR@1000, Recall@10 at N=1e6, 3e8 for b"
    for ci in ("benchmark", "population"):
        clear_caches()
        got = api.query(text, tmp_path / "reg", ci_kind=ci, bootstrap=200, seed=3)
        assert {r["mode"] for r in got["rows"]} == {"expected"}
        with monkeypatch.context() as m:
            m.setattr(law, "_binomial_window_sum", _reference_window_sum)
            clear_caches()
            want = api.query(text, tmp_path / "reg", ci_kind=ci, bootstrap=200, seed=3)
        if tabulated:
            _close(got, want, 1e-11)
            # (cut, AP-like, j's ndim): AP@1000, AP@100, MRR@1000 (a scalar j), Recall@10 tabulated
            assert {(1000, True, 1), (100, True, 1), (1000, True, 0), (10, False, 1)} <= set(used)
        else:
            assert got == want and not used
