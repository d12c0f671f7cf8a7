from dataclasses import replace

import numpy as np
import pyarrow.parquet as pq
import pytest

from rscale import sim
from rscale.core.estimators.methods import estimate
from rscale.core.prediction import predict
from rscale.errors import FormatError, SchemaVersionError
from rscale.sim.presets import PRESETS
from rscale.store.hardness_file import hardness_table, read_hardness, tail_path, write_hardness


@pytest.fixture(scope="module")
def ss():
    return sim.sample(sim.simulate(replace(PRESETS["sim_bounded"], n_queries=80), seed=2), 200_000, k=300, seed=2)


@pytest.mark.parametrize("method", ["evt", "evt-paper", "count"])
def test_round_trip_keeps_predictions(tmp_path, ss, method):
    est = estimate(ss, method)
    files = write_hardness(est, ss, tmp_path / "h.parquet")
    assert files[0].exists()
    assert (tail_path(files[0]).exists()) == bool(est.tail)
    back, info = read_hardness(files[0])
    np.testing.assert_array_equal(back.x, est.x)
    np.testing.assert_array_equal(back.offsets, est.offsets)
    assert (back.draws is None) == (est.draws is None)
    assert back.method == est.method and info["meta"]["backbone"] == "sim_bounded"
    assert predict(back, "AP", 1e8) == pytest.approx(predict(est, "AP", 1e8))
    if est.tail:
        tail = pq.read_table(tail_path(files[0]))
        assert tail.num_rows == ss.n_queries and "xi" in tail.column_names


def test_bad_hardness_files(tmp_path, ss):
    est = estimate(ss, "count")
    t = hardness_table(est, ss)
    x = t.column("x").to_numpy().copy()
    x[5] = 1.5
    bad = t.set_column(t.column_names.index("x"), "x", [x])
    pq.write_table(bad, tmp_path / "bad.parquet")
    with pytest.raises(FormatError, match=r"outside \[0, 1\]") as err:
        read_hardness(tmp_path / "bad.parquet")
    assert err.value.row == 5 and err.value.column == "x"
    md = dict(t.schema.metadata)
    md[b"rscale.schema_version"] = b"7"
    pq.write_table(t.replace_schema_metadata(md), tmp_path / "new.parquet")
    with pytest.raises(SchemaVersionError, match="upgrade rscale"):
        read_hardness(tmp_path / "new.parquet")
    # a sample-stats file is not a hardness table
    from rscale.store.sample_stats_file import write_sample_stats
    write_sample_stats(ss, tmp_path / "ss.parquet")
    with pytest.raises(FormatError, match="not a hardness table"):
        read_hardness(tmp_path / "ss.parquet")
    # shuffled rows: a query's positives no longer contiguous
    idx = np.random.default_rng(0).permutation(t.num_rows)
    pq.write_table(t.take(idx), tmp_path / "shuffled.parquet")
    with pytest.raises(FormatError, match="not contiguous"):
        read_hardness(tmp_path / "shuffled.parquet")


def test_estimate_output_is_byte_deterministic(tmp_path, ss):
    # artifacts are content-addressed: re-running a stage on the same input gives the same bytes
    # (run ids of producer runs live in sidecars, not in the file)
    from rscale import api
    from rscale.store.registry import sha256_file
    from rscale.store.sample_stats_file import write_sample_stats
    s = write_sample_stats(ss, tmp_path / "ss.parquet")
    api.estimate(s, "evt", params=(), out=tmp_path / "a.parquet")
    api.estimate(s, "evt", params=(), out=tmp_path / "b.parquet")
    assert sha256_file(tmp_path / "a.parquet") == sha256_file(tmp_path / "b.parquet")


def test_backtest_columns_round_trip_and_bad_ones_are_refused(tmp_path, ss):
    import json

    from rscale.core.backtest import Backtest, backtest_hardness
    est = estimate(ss, "count")
    cols, factors = backtest_hardness(ss, method="count", params={})
    assert factors.tolist() == [4] * 4                     # K = 300: quarters keep 75 top scores
    bt = Backtest(counts=ss.pos_counts, columns=cols, column_factors=factors)
    write_hardness(est, ss, tmp_path / "h.parquet", None, bt, {"per_factor": 4, "seed": 1})
    back, info = read_hardness(tmp_path / "h.parquet")
    got = info["backtest"]
    np.testing.assert_array_equal(got.columns, cols)
    assert got.column_factors.tolist() == factors.tolist()
    assert info["schema_version"] == 5 and got.factors(back) == [4]          # no replicates: no factor 2
    # metadata that no longer matches the columns: one line naming the column, not a traceback
    t = pq.read_table(tmp_path / "h.parquet")
    md = dict(t.schema.metadata)
    meta = json.loads(md[b"rscale.backtest"])
    meta["factors"] = meta["factors"][:-1]
    md[b"rscale.backtest"] = json.dumps(meta).encode()
    pq.write_table(t.replace_schema_metadata(md), tmp_path / "bad.parquet")
    with pytest.raises(FormatError, match="back-test columns do not match") as err:
        read_hardness(tmp_path / "bad.parquet")
    assert err.value.column == "backtest"


def test_a_sample_too_small_for_quarters_keeps_its_halves_back_test(tmp_path):
    # regression: with no share column to store, the file used to say nothing of the back-test,
    # and the halves' factor 2 was lost (the real set's 1% draws had no back-test term)
    from rscale import api
    from rscale.store.sample_stats_file import write_sample_stats
    small = sim.sample(sim.simulate(replace(PRESETS["sim_bounded"], n_queries=30), seed=4), 100_000, k=150, seed=4)
    write_sample_stats(small, tmp_path / "s.parquet")
    summary = api.estimate(tmp_path / "s.parquet", "count", out=tmp_path / "h.parquet", replicates=4)
    assert summary["backtest_factors"] == [2] and summary["fits"] == 5           # K / 4 = 37 < 50: no quarters
    est, info = read_hardness(tmp_path / "h.parquet")
    assert info["backtest"].factors(est) == [2] and info["backtest"].columns.shape == (small.n_positives, 0)
    row = api.predict(tmp_path / "h.parquet", sizes=[1e6])[0]
    assert row["backtest_factor"] == 2


def _v4(tmp_path, ss):
    from rscale.core.backtest import Backtest
    est = estimate(ss, "count")
    rng = np.random.default_rng(2)
    reps = np.round(np.clip(est.x[:, None] * rng.uniform(0.5, 1.5, (est.x.size, 4)), 0, 1), 4)
    cols = np.clip(est.x[:, None] * rng.uniform(0.5, 1.5, (est.x.size, 2)), 0, 1)
    bt = Backtest(counts=ss.pos_counts, columns=cols, column_factors=np.array([4, 4]))
    write_hardness(replace(est, replicates=reps), ss, tmp_path / "h.parquet", None, bt)
    return tmp_path / "h.parquet"


def test_version_4_ranks_give_the_laws_sorted_views_and_bad_ranks_are_refused(tmp_path, ss):
    from rscale.core.law import Hardness
    from rscale.store.hardness_file import sorted_views
    path = _v4(tmp_path, ss)
    est, info = read_hardness(path)
    views = sorted_views(est, info)
    np.testing.assert_array_equal(views["x"], Hardness.from_flat(est.x, est.offsets).x)
    np.testing.assert_array_equal(views["replicates"], Hardness.from_flat(est.replicates.T, est.offsets).x)
    np.testing.assert_array_equal(views["backtest"], Hardness.from_flat(info["backtest"].columns.T, est.offsets).x)
    t = pq.read_table(path)
    stored = t.column("replicate_ranks").combine_chunks()
    assert str(stored.type) == "fixed_size_binary[8]"                  # 4 little-endian uint16 per row
    ranks = np.frombuffer(stored.buffers()[1], "<u2").reshape(-1, 4).copy()
    q0 = slice(0, int(est.offsets[1]))
    import pyarrow as pa

    def with_ranks(r, name):
        col = pa.FixedSizeBinaryArray.from_buffers(pa.binary(8), r.shape[0], [None, pa.py_buffer(r.astype("<u2").tobytes())])
        pq.write_table(t.set_column(t.schema.get_field_index("replicate_ranks"), "replicate_ranks", col),
                       tmp_path / name)
        e, i = read_hardness(tmp_path / name)
        return lambda: sorted_views(e, i)
    repeated = ranks.copy()
    repeated[q0, 1] = 0                                   # every positive of query 0 in one slot
    with pytest.raises(FormatError, match="do not sort") as err:
        with_ranks(repeated, "repeated.parquet")()
    assert err.value.column == "replicate_ranks"
    # a permutation, but not the sorting one: the ranks of a query with distinct values, reversed
    q = next(q for q in range(est.offsets.size - 1)
             if len(set(est.replicates[est.offsets[q]:est.offsets[q + 1], 2].tolist())) > 1)
    rows = slice(int(est.offsets[q]), int(est.offsets[q + 1]))
    swapped = ranks.copy()
    swapped[rows, 2] = (est.offsets[q + 1] - est.offsets[q] - 1) - ranks[rows, 2]
    with pytest.raises(FormatError, match="do not sort"):
        with_ranks(swapped, "swapped.parquet")()
    beyond = ranks.copy()
    beyond[0, 0] = 60_000
    with pytest.raises(FormatError, match="beyond its query") as err:
        with_ranks(beyond, "beyond.parquet")()
    assert err.value.row == 0


def test_registry_answers_from_the_stored_order_and_equals_a_sorting_read(tmp_path, ss):
    from rscale import api
    from rscale.core.prediction import predict_per_query, replicate_per_query
    from rscale.store.registry import Registry, clear_caches
    path = _v4(tmp_path, ss)
    api.register(path, None, registry=tmp_path / "reg")
    clear_caches()
    reg = Registry(tmp_path / "reg")
    v = reg.versions()[0]
    est, info = reg.read_hardness(v)
    assert "_hardness" in est.__dict__ and "_replicate_hardness" in est.__dict__   # seeded from the ranks
    assert "_columns_hardness" in info["backtest"].__dict__
    plain, _ = read_hardness(path)                           # writable: sorts on every call
    for metric, k in (("AP", 100), ("RR", None), ("R", 1)):
        np.testing.assert_array_equal(predict_per_query(est, metric, 1e7, k), predict_per_query(plain, metric, 1e7, k))
        np.testing.assert_array_equal(replicate_per_query(est, metric, 1e7, k),
                                      replicate_per_query(plain, metric, 1e7, k))


def test_reading_replicates_and_back_test_does_not_import_pyarrow_compute(tmp_path, ss):
    # flatten() of a list column imports pyarrow.compute (~70-100 ms of a cold `rscale query`)
    import subprocess
    import sys
    path = _v4(tmp_path, ss)
    code = ("import sys; from rscale.store.hardness_file import read_hardness, sorted_views; "
            f"est, info = read_hardness({str(path)!r}); views = sorted_views(est, info); "
            "print(est.replicates.shape[1], info['backtest'].columns.shape[1], sorted(views), "
            "'pyarrow.compute' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip().split(maxsplit=2)
    assert out == ["4", "2", "['backtest', 'replicates', 'x'] False"]
