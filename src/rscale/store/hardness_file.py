"""Read and write hardness tables and per-query tail fits (docs/formats.md).

A hardness table is one Parquet file with **one row per positive**, grouped by query in query
order:

================  =================  =====================================================
column            type               meaning
================  =================  =====================================================
query_id          string             the positive's query
positive_id       string             the positive
n_sampled         int64              S of its query's sample
count             int64              sampled distractors at or above the positive
x                 float64            estimated hardness, in [0, 1]
rule              string             what produced x: count, tail, endpoint
draws             list<float64>      posterior draws of x (evt-eb; absent otherwise)
replicates        list<float64>      R hardness replicates (version 2; rscale.core.replicates)
backtest          list<float64>      C back-test share hardness (version 3; rscale.core.backtest)
x_rank            uint16             place of x in its query sorted ascending (version 4)
replicate_ranks   binary(2R)         the same per replicate, little-endian uint16 (version 4)
backtest_ranks    binary(2C)         the same per back-test column (version 4)
edge_factor       float64            the second edge model's factor on x (version 5; evt-eb)
================  =================  =====================================================

Version 2 adds ``replicates`` (fixed-size list, R per row) and ``rscale.replicates`` (JSON: R,
splits, tail_draws, seed). Version 3 adds ``backtest`` (fixed-size list, C per row: the
re-estimated disjoint 1/m shares of the sample) and ``rscale.backtest`` (JSON: ``factors``, the m
of each column; ``per_factor``, ``seed``). Versions 1 and 2 are still read (no back-test term).

Version 4 adds the law's sort order, so that a query answers from a freshly decoded table without
sorting (:func:`sorted_views`): ``x_rank`` (uint16) and ``replicate_ranks`` / ``backtest_ranks``
(fixed-size binary of 2 bytes per column: little-endian uint16, one per column; a flat column
decodes in 5 ms where a list<uint16> takes 13 ms for 60k rows x 16), the 0-based place of the
row's value in its query sorted ascending (ties in row order). Rows keep the sample's order (a row still joins its
positive, its rerank scores and its in-pool count). Absent when a query has more than 65,535
positives; then the reader sorts, as for versions 1-3. The ranks are checked where they are used:
every slot of the sorted view filled once and the result sorted (else a FormatError).

Version 5 adds ``edge_factor`` (float64, >= 0, 1 for a positive the sample counts) and
``rscale.edge`` (JSON: ``bands``, ``prior_counts``, the measured ``ratios``, the ``split`` they
came from, the two models' ``weights`` where a cell has no back-test band: 1/2 each): a prediction
lies between the tail model as fitted and the same hardness times this factor
(:mod:`rscale.core.edge_models`), placed by the cell's back-test band
(:func:`rscale.core.prediction.edge_weight`). Versions 1-4 are still read (one model, as before).

File metadata: ``rscale.format = hardness``, ``rscale.schema_version``, ``rscale.method``,
``rscale.params`` (JSON), ``rscale.meta`` (JSON, copied from the sample stats).

The per-query tail fits travel in a second file, one row per query: ``query_id`` plus one
float64 column per fitted quantity (u, n_u, xi, sigma, loglik, endpoint, ...).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from rscale.core.estimators.base import HardnessEstimate
from rscale.core.sample_stats import SampleStats
from rscale.errors import FormatError, SchemaVersionError
from rscale.store.atomic import atomic_path
from rscale.store.columns import list_values, numeric, strings

FORMAT = "hardness"
TAIL_FORMAT = "tail-fits"
SCHEMA_VERSION = 5
READABLE_VERSIONS = (1, 2, 3, 4, 5)
MAX_RANKED = 65_535        # positives per query that uint16 ranks can place
TAIL_SCHEMA_VERSION = 1
COLUMNS = ("query_id", "positive_id", "n_sampled", "count", "x", "rule")


def _atomic_write(table, path: Path):
    """zstd; byte-stream-split floats without a dictionary, dictionaries for the other columns:
    the float columns (replicates above all) decode ~25% faster and compress ~10% smaller than
    with pyarrow's defaults, which try a dictionary on every column (docs/benchmarks.md)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    others, floats = [], {}
    for f in table.schema:
        leaf = f.type.value_type if pa.types.is_fixed_size_list(f.type) else f.type
        if pa.types.is_floating(leaf):
            floats[f.name if leaf is f.type else f"{f.name}.list.element"] = "BYTE_STREAM_SPLIT"
        else:
            others.append(f.name)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd", use_dictionary=others, column_encoding=floats)


def hardness_table(est: HardnessEstimate, ss: SampleStats, replicates_meta: dict | None = None,
                   backtest=None, backtest_meta: dict | None = None, edge_meta: dict | None = None):
    import pyarrow as pa
    pq_ = ss.positive_query()
    cols = {
        "query_id": pa.array(ss.query_ids[pq_].astype(str), pa.string()),
        "positive_id": pa.array(ss.pos_ids.astype(str), pa.string()),
        "n_sampled": pa.array(ss.n_sampled[pq_].astype(np.int64)),
        "count": pa.array(ss.pos_counts.astype(np.int64)),
        "x": pa.array(est.x.astype(np.float64)),
        "rule": pa.array(est.rule.astype(str), pa.string()),
    }
    if est.draws is not None:
        d = est.draws.shape[1]
        cols["draws"] = pa.FixedSizeListArray.from_arrays(pa.array(est.draws.astype(np.float64).ravel()), d)
    if est.replicates is not None:
        cols["replicates"] = pa.FixedSizeListArray.from_arrays(
            pa.array(est.replicates.astype(np.float64).ravel()), est.replicates.shape[1])
    if est.edge_factor is not None:
        cols["edge_factor"] = pa.array(est.edge_factor.astype(np.float64))
    if backtest is not None and backtest.columns is not None:
        if backtest.columns.shape[1]:      # none: only the halves (the replicates) back-test, said by the metadata
            cols["backtest"] = pa.FixedSizeListArray.from_arrays(
                pa.array(backtest.columns.astype(np.float64).ravel()), backtest.columns.shape[1])
        backtest_meta = {**(backtest_meta or {}), "factors": [int(m) for m in backtest.column_factors]}
    else:
        backtest_meta = None
    if est.n_sampled.size and int(np.diff(est.offsets).max(initial=0)) <= MAX_RANKED:
        cols["x_rank"] = pa.array(_within_query_ranks(est.x[:, None], est.offsets)[:, 0])
        for name, values in (("replicate_ranks", est.replicates),
                             ("backtest_ranks", None if "backtest" not in cols else backtest.columns)):
            if values is not None:
                ranks = _within_query_ranks(values, est.offsets).astype("<u2")
                cols[name] = pa.FixedSizeBinaryArray.from_buffers(pa.binary(2 * ranks.shape[1]), ranks.shape[0],
                                                                  [None, pa.py_buffer(ranks.tobytes())])
    table = pa.table(cols)
    extra = {"rscale.replicates": json.dumps(replicates_meta, sort_keys=True)} if replicates_meta else {}
    if backtest_meta:
        extra["rscale.backtest"] = json.dumps(backtest_meta, sort_keys=True)
    if edge_meta and est.edge_factor is not None:
        extra["rscale.edge"] = json.dumps(edge_meta, sort_keys=True)
    return table.replace_schema_metadata({**extra,
        "rscale.format": FORMAT,
        "rscale.schema_version": str(SCHEMA_VERSION),
        "rscale.method": est.method,
        "rscale.params": json.dumps(est.params, sort_keys=True, default=str),
        "rscale.meta": json.dumps({k: str(v) for k, v in ss.meta.items()}, sort_keys=True),
    })


def _within_query_ranks(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """(P, C) uint16: the 0-based place of each row's value of column c in its query sorted
    ascending (a stable sort: ties keep row order)."""
    from rscale.core import ragged
    q = ragged.group_index(offsets)
    out = np.empty(values.shape, dtype=np.uint16)
    place = np.empty(values.shape[0], dtype=np.int64)
    for c in range(values.shape[1]):
        place[np.lexsort((values[:, c], q))] = np.arange(values.shape[0])
        out[:, c] = place - offsets[q]
    return out


def sorted_views(est: HardnessEstimate, info: dict) -> dict:
    """The law's sorted views of a version-4 table, from its stored ranks, without a sort:
    ``{"x": (P,), "replicates": (R, P), "backtest": (C, P)}`` (a key only where the file has the
    values and their ranks). Checked: each rank places its value inside its own query, every slot
    is filled (so each query's ranks are a permutation) and each view is sorted within queries; a
    file that fails is refused (FormatError naming the column)."""
    from rscale.core import ragged
    ranks, path = info.get("ranks") or {}, info.get("path", "")
    off = est.offsets
    sizes = np.diff(off)
    row_start, row_size = np.repeat(off[:-1], sizes), np.repeat(sizes, sizes)
    values = {"x": est.x[:, None], "replicates": est.replicates, "backtest": info["backtest"].columns}
    out = {}
    for name, column in (("x", "x_rank"), ("replicates", "replicate_ranks"), ("backtest", "backtest_ranks")):
        v, r = values[name], ranks.get(column)
        if v is None or r is None or v.shape[1] == 0:
            continue
        outside = (r < 0) | (r >= row_size[:, None])
        if np.any(outside):
            row = int(np.flatnonzero(np.any(outside, axis=1))[0])
            raise FormatError("a within-query rank is beyond its query's positives", path=path, column=column,
                              row=row, hint="re-run 'rscale estimate' to rewrite it")
        c = v.shape[1]
        view = np.full((c, v.shape[0]), np.nan)
        it = np.int32 if c * v.shape[0] < 2 ** 31 else np.int64
        dest = r.astype(it)
        dest += row_start.astype(it)[:, None]
        dest += (np.arange(c, dtype=it) * v.shape[0])[None, :]
        view.ravel()[dest.ravel()] = v.ravel()
        if np.isnan(view).any() or ragged._unsorted_groups(view, off).size:
            raise FormatError("the within-query ranks do not sort the values (a slot repeated or out of order)",
                              path=path, column=column, hint="re-run 'rscale estimate' to rewrite it")
        out[name] = view[0] if name == "x" else view
    return out


def tail_table(est: HardnessEstimate, ss: SampleStats):
    import pyarrow as pa
    cols = {"query_id": pa.array(ss.query_ids.astype(str), pa.string())}
    for name, values in sorted(est.tail.items()):
        cols[name] = pa.array(np.asarray(values, dtype=np.float64))
    return pa.table(cols).replace_schema_metadata({
        "rscale.format": TAIL_FORMAT, "rscale.schema_version": str(TAIL_SCHEMA_VERSION),
        "rscale.method": est.method})


def tail_path(path: str | os.PathLike) -> Path:
    """Where the tail fits of a hardness file live: ``name.parquet`` -> ``name.tail.parquet``."""
    p = Path(path)
    return p.with_name(p.name[:-len(".parquet")] + ".tail.parquet" if p.name.endswith(".parquet")
                       else p.name + ".tail.parquet")


def write_hardness(est: HardnessEstimate, ss: SampleStats, path: str | os.PathLike,
                   replicates_meta: dict | None = None, backtest=None, backtest_meta: dict | None = None,
                   edge_meta: dict | None = None) -> list[Path]:
    """Write the hardness table (and its tail fits when the estimator has any), atomically;
    ``backtest`` a :class:`rscale.core.backtest.Backtest` (its columns and factors are stored);
    ``edge_meta`` what made ``est.edge_factor`` (stored as ``rscale.edge``)."""
    path = Path(path)
    _atomic_write(hardness_table(est, ss, replicates_meta, backtest, backtest_meta, edge_meta), path)
    written = [path]
    if est.tail:
        _atomic_write(tail_table(est, ss), tail_path(path))
        written.append(tail_path(path))
    return written


def _numbers(table, name: str | None, dtype, path: str) -> np.ndarray:
    """Column ``name`` of ``table`` (or ``table`` itself, an Arrow array, when ``name`` is None)."""
    try:
        return numeric(table if name is None else table.column(name), dtype)
    except TypeError as exc:
        raise FormatError(str(exc), path=path, column=name) from None


def _list_numbers(col, name: str, path: str) -> np.ndarray:
    """The float64 values of a fixed-size list column, row by row (FormatError on nulls)."""
    try:
        return numeric(list_values(col), np.float64)
    except TypeError as exc:
        raise FormatError(str(exc), path=path, column=name) from None


def _in_unit_interval(values: np.ndarray) -> bool:
    """Every value finite and in [0, 1]: two reductions, no temporaries (a NaN makes both
    comparisons false); the caller finds the offending row only when this fails."""
    return values.size == 0 or bool(values.min() >= 0.0 and values.max() <= 1.0)


def read_hardness(path: str | os.PathLike) -> tuple[HardnessEstimate, dict]:
    """Read a hardness table; returns the estimate (query order kept) and its metadata."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = str(path)
    if not os.path.exists(path):
        raise FormatError("file not found", path=path, hint="pass a hardness Parquet file written by 'rscale estimate'")
    if os.path.isdir(path):
        raise FormatError("is a folder, not a hardness table", path=path,
                          hint="pass the hardness .parquet file written by 'rscale estimate'")
    try:
        # ParquetFile avoids importing pyarrow.dataset (~45 ms) on the query path; the string
        # columns come dictionary-encoded, decoded by _strings without pandas
        names = set(pq.ParquetFile(path).schema_arrow.names)
        table = pq.ParquetFile(path, read_dictionary=[c for c in ("query_id", "rule") if c in names]).read()
    except Exception as exc:
        raise FormatError(f"not a readable Parquet file ({type(exc).__name__}: {exc})", path=path) from None
    md = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    fmt = md.get("rscale.format")
    if fmt != FORMAT:
        raise FormatError(f"this is a '{fmt or 'plain Parquet'}' file, not a hardness table", path=path,
                          hint="create one with: rscale estimate SAMPLE_STATS --out hardness.parquet")
    from rscale.store.sample_stats_file import meta_object, schema_version
    version = schema_version(md, path, "re-run 'rscale estimate' to rewrite it")
    if version not in READABLE_VERSIONS:
        raise SchemaVersionError(
            f"hardness schema version {version}; this rscale reads versions "
            f"{', '.join(map(str, READABLE_VERSIONS))}", path=path,
            hint="upgrade rscale" if version > SCHEMA_VERSION else "re-run 'rscale estimate' to rewrite it")
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise FormatError(f"missing column(s): {', '.join(missing)}", path=path)
    # group boundaries from the query ids; object arrays, not dictionary_encode, which would
    # import pyarrow.compute (~70 ms) on the query path
    qid = strings(table.column("query_id"))
    n_rows = qid.size
    starts = np.concatenate([[0], np.flatnonzero(qid[1:] != qid[:-1]) + 1]) if n_rows else np.zeros(0, np.int64)
    firsts = qid[starts]
    if len(set(firsts.tolist())) != firsts.size:          # a set, not np.unique: 20x faster on strings
        seen, row, dup = set(), 0, None
        for s_, q in zip(starts, firsts):
            if q in seen:
                row, dup = int(s_), q
                break
            seen.add(q)
        raise FormatError(f"rows of query {str(dup)!r} are not contiguous", path=path, column="query_id", row=row,
                          hint="keep each query's positives together")
    offsets = np.concatenate([starts, [n_rows]]).astype(np.int64)
    x = _numbers(table, "x", np.float64, path)
    bad = np.flatnonzero(~np.isfinite(x) | (x < 0) | (x > 1))
    if bad.size:
        raise FormatError(f"hardness {x[bad[0]]} is outside [0, 1]", path=path, column="x", row=int(bad[0]))
    draws = None
    if "draws" in table.column_names:
        col = table.column("draws").combine_chunks()
        d = col.type.list_size if pa.types.is_fixed_size_list(col.type) else None
        flat = _list_numbers(col, "draws", path) if d else numeric(col.flatten(), np.float64)
        draws = flat.reshape(n_rows, d if d else flat.size // max(n_rows, 1))
    replicates = None
    if version >= 2 and "replicates" in table.column_names:
        col = table.column("replicates").combine_chunks()
        if not pa.types.is_fixed_size_list(col.type):
            raise FormatError(f"expected a fixed-size list, got {col.type}", path=path, column="replicates")
        replicates = _list_numbers(col, "replicates", path).reshape(n_rows, col.type.list_size)
        if not _in_unit_interval(replicates):
            bad = np.flatnonzero(~np.all(np.isfinite(replicates) & (replicates >= 0) & (replicates <= 1), axis=1))
            raise FormatError("a hardness replicate is outside [0, 1]", path=path, column="replicates",
                              row=int(bad[0]), hint="re-run 'rscale estimate' to rewrite it")
    backtest_cols, backtest_meta = None, {}
    if version >= 3 and ("backtest" in table.column_names or "rscale.backtest" in md):
        backtest_meta = meta_object(md, path, "rscale.backtest") if "rscale.backtest" in md else {}
        factors = backtest_meta.get("factors")
        col = table.column("backtest").combine_chunks() if "backtest" in table.column_names else None
        width = 0 if col is None else col.type.list_size if pa.types.is_fixed_size_list(col.type) else -1
        if not isinstance(factors, list) or len(factors) != width or not all(isinstance(m, int) and m > 2
                                                                            for m in factors):
            raise FormatError("the back-test columns do not match their factors (rscale.backtest)", path=path,
                              column="backtest", hint="re-run 'rscale estimate' to rewrite it")
        backtest_cols = (np.empty((n_rows, 0)) if col is None
                         else _list_numbers(col, "backtest", path).reshape(n_rows, width))
        if not _in_unit_interval(backtest_cols):
            bad = np.flatnonzero(~np.all(np.isfinite(backtest_cols) & (backtest_cols >= 0) & (backtest_cols <= 1),
                                         axis=1))
            raise FormatError("a back-test hardness is outside [0, 1]", path=path, column="backtest",
                              row=int(bad[0]), hint="re-run 'rscale estimate' to rewrite it")
    edge = None
    if version >= 5 and "edge_factor" in table.column_names:
        edge = _numbers(table, "edge_factor", np.float64, path)
        bad = np.flatnonzero(~np.isfinite(edge) | (edge < 0))
        if bad.size:
            raise FormatError(f"edge factor {edge[bad[0]]} is not a finite number >= 0", path=path,
                              column="edge_factor", row=int(bad[0]), hint="re-run 'rscale estimate' to rewrite it")
        counted = np.flatnonzero((_numbers(table, "count", np.int64, path) > 0) & (edge != 1.0))
        if counted.size:
            raise FormatError(f"edge factor {edge[counted[0]]} on a positive the sample counts (the factor is 1 there)",
                              path=path, column="edge_factor", row=int(counted[0]),
                              hint="re-run 'rscale estimate' to rewrite it")
    n_sampled_rows = _numbers(table, "n_sampled", np.int64, path)
    low = np.flatnonzero(n_sampled_rows < 1)
    if low.size:
        raise FormatError(f"sample size {int(n_sampled_rows[low[0]])} is below 1", path=path, column="n_sampled",
                          row=int(low[0]), hint="n_sampled is S, the number of distractors sampled for the query")
    n_sampled = n_sampled_rows[offsets[:-1]]
    rule = strings(table.column("rule"))
    est = HardnessEstimate(
        method=md.get("rscale.method", "unknown"), x=x, offsets=offsets, rule=rule, n_sampled=n_sampled,
        params=meta_object(md, path, "rscale.params"), draws=draws, replicates=replicates, edge_factor=edge)
    from rscale.core.backtest import Backtest
    counts = _numbers(table, "count", np.int64, path)
    backtest = Backtest(counts=counts) if backtest_cols is None else Backtest(
        counts=counts, columns=backtest_cols, column_factors=np.asarray(backtest_meta["factors"], dtype=np.int64))
    ranks = {}
    if version >= 4:
        for name in ("x_rank", "replicate_ranks", "backtest_ranks"):
            if name not in table.column_names:
                continue
            col = table.column(name).combine_chunks()
            if name == "x_rank":
                ranks[name] = _numbers(table, name, None, path)[:, None]
                if not np.issubdtype(ranks[name].dtype, np.integer):
                    raise FormatError(f"expected integer ranks, got {ranks[name].dtype}", path=path, column=name)
            elif not (pa.types.is_fixed_size_binary(col.type) and col.type.byte_width % 2 == 0) or col.null_count:
                raise FormatError(f"expected fixed-size binary of little-endian uint16, got {col.type}", path=path,
                                  column=name)
            else:
                width = col.type.byte_width // 2
                ranks[name] = (np.frombuffer(col.buffers()[1], dtype="<u2", count=n_rows * width,
                                             offset=col.offset * 2 * width).reshape(n_rows, width)
                               if n_rows else np.zeros((0, width), np.uint16))
        widths = {"replicate_ranks": None if replicates is None else replicates.shape[1],
                  "backtest_ranks": None if backtest_cols is None else backtest_cols.shape[1]}
        for name, width in widths.items():
            if name in ranks and ranks[name].shape[1] != width:
                raise FormatError(f"{ranks[name].shape[1]} ranks per row for {width or 0} values", path=path,
                                  column=name, hint="re-run 'rscale estimate' to rewrite it")
    info = {"query_ids": firsts.astype(str), "positive_ids": table.column("positive_id"), "ranks": ranks,
            "counts": counts, "backtest": backtest,
            "meta": meta_object(md, path), "path": path, "schema_version": version,
            "replicates": meta_object(md, path, "rscale.replicates") if "rscale.replicates" in md else {},
            "edge": meta_object(md, path, "rscale.edge") if edge is not None and "rscale.edge" in md else {}}
    return est, info


def read_tail_fits(path: str | os.PathLike) -> tuple[np.ndarray, dict]:
    """Read a tail-fits file: (query ids, {quantity: float64 array}); FormatError when it is not one."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = str(path)
    try:
        table = pq.ParquetFile(path).read()
    except Exception as exc:
        raise FormatError(f"not a readable Parquet file ({type(exc).__name__}: {exc})", path=path) from None
    md = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    fmt = md.get("rscale.format")
    if fmt != TAIL_FORMAT:
        raise FormatError(f"this is a '{fmt or 'plain Parquet'}' file, not tail fits", path=path)
    version = int(md.get("rscale.schema_version", "1"))
    if version != TAIL_SCHEMA_VERSION:
        raise SchemaVersionError(f"tail-fits schema version {version}; this rscale reads version {TAIL_SCHEMA_VERSION}",
                                 path=path, hint="upgrade rscale" if version > TAIL_SCHEMA_VERSION else "re-estimate")
    if "query_id" not in table.column_names or not pa.types.is_string(table.schema.field("query_id").type):
        raise FormatError("missing column(s): query_id (string)", path=path)
    qids = np.asarray(table.column("query_id").to_pylist(), dtype=str)
    fits = {}
    for name in table.column_names:
        if name == "query_id":
            continue
        if not pa.types.is_floating(table.schema.field(name).type):
            raise FormatError(f"expected float64, got {table.schema.field(name).type}", path=path, column=name)
        fits[name] = numeric(table.column(name), np.float64)
    return qids, fits
