"""Read and write the sample-stats Parquet format (docs/formats.md).

One row per query:

=================  =====================  ==============================================
column             type                   meaning
=================  =====================  ==============================================
query_id           string                 unique query id
n_sampled          int64                  S, distractors sampled and scored for the query
top_scores         list<float64|float32>  the top-K sampled distractor scores, descending
positive_ids       list<string>           the query's positives (at least one)
positive_scores    list<float64|float32>  their scores
positive_counts    list<int64>            sampled distractors scoring at or above each one
=================  =====================  ==============================================

Schema version 2 adds two optional columns, together (a file without them is written as version 1,
and version 1 files are read as before):

======================  ===============  =================================================
top_rerank_scores       list<float64>    rerank scores of the top R <= K sampled candidates,
                                         in first-stage order (R the same for every query)
positive_rerank_scores  list<float64>    rerank scores of the positives, parallel to positive_ids
======================  ===============  =================================================

Schema version 3 adds three optional columns, together: the half-sample membership recorded by
distractor id (:mod:`rscale.core.halves`; files without them keep their version, 1 or 2):

======================  ===============  =================================================
top_halves              list<uint8>      per top entry its membership byte (bit i: half A of split i)
positive_halves         list<int64>      per positive, 8 values: half-A distractors at or above it
n_halves                list<int64>      8 values: half-A size of each split
======================  ===============  =================================================

File metadata (Parquet key-value): ``rscale.format = sample-stats``, ``rscale.schema_version``
and ``rscale.meta`` (JSON: backbone, benchmark, distractor_source, sampler, seed, k). A file
written by hand without rscale's metadata is read as schema version 1.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from rscale.core.sample_stats import SCHEMA_VERSION, SampleStats, validate
from rscale.errors import FormatError, SchemaVersionError
from rscale.store.atomic import atomic_path

FORMAT = "sample-stats"
COLUMNS = ("query_id", "n_sampled", "top_scores", "positive_ids", "positive_scores", "positive_counts")
RERANK_COLUMNS = ("top_rerank_scores", "positive_rerank_scores")
HALVES_COLUMNS = ("top_halves", "positive_halves", "n_halves")


def _pa():
    import pyarrow as pa
    import pyarrow.parquet as pq
    return pa, pq


def to_table(ss: SampleStats):
    """The Arrow table of a SampleStats value (with rscale's schema metadata)."""
    pa, _ = _pa()
    off = ss.pos_offsets.astype(np.int32)
    k = ss.k
    q = ss.n_queries
    top_off = (np.arange(q + 1) * k).astype(np.int32)
    table = pa.table({
        "query_id": pa.array(ss.query_ids.astype(str), pa.string()),
        "n_sampled": pa.array(ss.n_sampled.astype(np.int64), pa.int64()),
        "top_scores": pa.ListArray.from_arrays(
            pa.array(top_off), pa.array(np.ascontiguousarray(ss.top_scores, dtype=np.float64).ravel())),
        "positive_ids": pa.ListArray.from_arrays(pa.array(off), pa.array(ss.pos_ids.astype(str), pa.string())),
        "positive_scores": pa.ListArray.from_arrays(pa.array(off), pa.array(ss.pos_scores.astype(np.float64))),
        "positive_counts": pa.ListArray.from_arrays(pa.array(off), pa.array(ss.pos_counts.astype(np.int64))),
    })
    if ss.has_rerank:
        r = ss.top_rerank.shape[1]
        table = table.append_column("top_rerank_scores", pa.ListArray.from_arrays(
            pa.array((np.arange(q + 1) * r).astype(np.int32)),
            pa.array(np.ascontiguousarray(ss.top_rerank, dtype=np.float64).ravel())))
        table = table.append_column("positive_rerank_scores", pa.ListArray.from_arrays(
            pa.array(off), pa.array(ss.pos_rerank.astype(np.float64))))
    if ss.has_halves:
        h = ss.pos_halves.shape[1]
        table = table.append_column("top_halves", pa.ListArray.from_arrays(
            pa.array(top_off), pa.array(np.ascontiguousarray(ss.top_halves, dtype=np.uint8).ravel(), pa.uint8())))
        table = table.append_column("positive_halves", pa.ListArray.from_arrays(
            pa.array((off * h).astype(np.int32)), pa.array(np.ascontiguousarray(ss.pos_halves, dtype=np.int64).ravel())))
        table = table.append_column("n_halves", pa.ListArray.from_arrays(
            pa.array((np.arange(q + 1) * h).astype(np.int32)), pa.array(np.ascontiguousarray(ss.n_halves, dtype=np.int64).ravel())))
    meta = {**{k_: str(v) for k_, v in ss.meta.items()}, "k": str(k)}
    return table.replace_schema_metadata({
        "rscale.format": FORMAT,
        "rscale.schema_version": str(ss.schema_version),
        "rscale.meta": json.dumps(meta, sort_keys=True),
    })


def write_sample_stats(ss: SampleStats, path: str | os.PathLike) -> Path:
    """Validate, then write atomically (temp file in the same folder, then rename)."""
    _, pq = _pa()
    path = Path(path)
    validate(ss, str(path))
    with atomic_path(path) as tmp:
        pq.write_table(to_table(ss), tmp, compression="zstd")
    return path


def schema_version(md: dict, path: str, hint: str) -> int:
    """The ``rscale.schema_version`` of a file's metadata (1 when absent), a FormatError when it is
    not a whole number."""
    raw = md.get("rscale.schema_version", "1")
    try:
        return int(raw)
    except ValueError:
        raise FormatError(f"the rscale.schema_version metadata is {raw!r}, not a whole number", path=path,
                          hint=hint) from None


def meta_object(md: dict, path: str, key: str = "rscale.meta") -> dict:
    """The JSON object stored under ``key`` in a file's metadata ({} when absent)."""
    try:
        meta = json.loads(md.get(key, "{}"))
    except json.JSONDecodeError:
        raise FormatError(f"the {key} metadata is not valid JSON", path=path,
                          hint="rewrite the file with rscale, or store a JSON object there") from None
    if not isinstance(meta, dict):
        raise FormatError(f"the {key} metadata is a JSON {type(meta).__name__}, not a JSON object", path=path,
                          hint="store a JSON object there, e.g. {\"backbone\": \"...\"}")
    return meta


def _list_column(table, name: str, path: str, kind: str):
    """(flat values, offsets) of a list column, with errors naming column and row."""
    pa, _ = _pa()
    from rscale.store.columns import list_flat, numeric

    col = table.column(name)
    if not pa.types.is_list(col.type) and not pa.types.is_large_list(col.type):
        raise FormatError(f"expected a list column, got {col.type}", path=path, column=name,
                          hint="store one list per query row")
    if col.null_count:
        row = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
        raise FormatError("null list", path=path, column=name, row=row)
    flat, offsets = list_flat(col)           # zero-copy views of the table's buffers (no combine_chunks copy)
    if flat.null_count:
        pos = int(np.flatnonzero(flat.is_null().to_numpy(zero_copy_only=False))[0])
        row = int(np.searchsorted(offsets[1:], pos, side="right"))
        raise FormatError("null value inside the list", path=path, column=name, row=row)
    t = flat.type
    if kind == "float" and not (pa.types.is_floating(t) or pa.types.is_integer(t)):
        raise FormatError(f"expected numbers, got {t}", path=path, column=name)
    if kind == "int" and not pa.types.is_integer(t):
        raise FormatError(f"expected integers, got {t}", path=path, column=name)
    if kind == "str":
        values = np.asarray(flat.cast(pa.string()).to_pylist(), dtype=str) if len(flat) else np.zeros(0, str)
    else:
        values = numeric(flat, np.float64 if kind == "float" else np.int64)    # one copy
    return values, offsets


def read_sample_stats(path: str | os.PathLike) -> SampleStats:
    """Read and validate a sample-stats file; every problem is a FormatError naming the file."""
    pa, pq = _pa()
    path = str(path)
    if not os.path.exists(path):
        raise FormatError("file not found", path=path,
                          hint="pass the path of a sample-stats Parquet file (see docs/formats.md)")
    if os.path.isdir(path):
        raise FormatError("is a folder, not a sample-stats file", path=path,
                          hint="pass the sample-stats .parquet file itself (see docs/formats.md)")
    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for a corrupt file
        raise FormatError(f"not a readable Parquet file ({type(exc).__name__}: {exc})", path=path,
                          hint="rewrite the file; see docs/formats.md for the layout") from None
    md = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    fmt = md.get("rscale.format", FORMAT)
    if fmt != FORMAT:
        raise FormatError(f"this is a '{fmt}' file, not sample stats", path=path)
    version = schema_version(md, path, "rewrite it with rscale (rscale simulate / rscale score) or fix the key")
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"written with sample-stats schema version {version}; this rscale reads up to "
            f"{SCHEMA_VERSION}", path=path, hint="upgrade rscale (pip install -U rscale)")
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise FormatError(f"missing column(s): {', '.join(missing)}", path=path,
                          hint=f"a sample-stats file has the columns {', '.join(COLUMNS)}")
    meta = meta_object(md, path)

    qids = table.column("query_id")
    if qids.null_count:
        row = int(np.flatnonzero(qids.is_null().to_numpy(zero_copy_only=False))[0])
        raise FormatError("null query id", path=path, column="query_id", row=row)
    query_ids = np.asarray(qids.cast(pa.string()).to_pylist(), dtype=str)
    ns = table.column("n_sampled")
    if not pa.types.is_integer(ns.type):
        raise FormatError(f"expected integers, got {ns.type}", path=path, column="n_sampled")
    if ns.null_count:
        row = int(np.flatnonzero(ns.is_null().to_numpy(zero_copy_only=False))[0])
        raise FormatError("null sample size", path=path, column="n_sampled", row=row)
    n_sampled = ns.to_numpy().astype(np.int64)

    top_flat, top_off = _list_column(table, "top_scores", path, "float")
    lengths = np.diff(top_off)
    k = int(meta.get("k", lengths.max(initial=0)))
    short = np.flatnonzero(lengths != k)
    if short.size:
        r = int(short[0])
        raise FormatError(f"top_scores has {int(lengths[r])} scores, expected K = {k} "
                          f"(query_id {str(query_ids[r])!r})", path=path, column="top_scores", row=r,
                          hint="every query stores exactly K top scores; S must be at least K")
    top = top_flat.reshape(len(query_ids), k) if k else np.zeros((len(query_ids), 0))
    pids, off = _list_column(table, "positive_ids", path, "str")
    pscores, off_s = _list_column(table, "positive_scores", path, "float")
    pcounts, off_c = _list_column(table, "positive_counts", path, "int")
    for name, o in (("positive_scores", off_s), ("positive_counts", off_c)):
        if not np.array_equal(o, off):
            r = int(np.flatnonzero(np.diff(o) != np.diff(off))[0])
            raise FormatError(f"list length differs from positive_ids (query_id {str(query_ids[r])!r})",
                              path=path, column=name, row=r,
                              hint="positive_ids, positive_scores and positive_counts are parallel lists")
    top_rerank = pos_rerank = None
    present = [c for c in RERANK_COLUMNS if c in table.column_names]
    if present:
        if version < 2 or len(present) == 1:
            missing_col = next(c for c in RERANK_COLUMNS if c not in present) if len(present) == 1 else present[0]
            raise FormatError("rerank score columns need schema version 2 and both of "
                              f"{', '.join(RERANK_COLUMNS)}", path=path, column=missing_col,
                              hint="write the file with rscale (rscale.store.sample_stats_file.write_sample_stats)")
        tr_flat, tr_off = _list_column(table, "top_rerank_scores", path, "float")
        r_len = np.diff(tr_off)
        if r_len.size and np.any(r_len != r_len[0]):
            r = int(np.flatnonzero(r_len != r_len[0])[0])
            raise FormatError(f"top_rerank_scores has {int(r_len[r])} scores, other queries {int(r_len[0])}", path=path,
                              column="top_rerank_scores", row=r, hint="store the same number R of reranked top "
                                                                      "candidates for every query")
        top_rerank = tr_flat.reshape(len(query_ids), int(r_len[0]) if r_len.size else 0)
        pos_rerank, off_r = _list_column(table, "positive_rerank_scores", path, "float")
        if not np.array_equal(off_r, off):
            r = int(np.flatnonzero(np.diff(off_r) != np.diff(off))[0])
            raise FormatError(f"list length differs from positive_ids (query_id {str(query_ids[r])!r})",
                              path=path, column="positive_rerank_scores", row=r)
    halves = _read_halves(table, path, version, query_ids, off, k)
    ss = SampleStats(query_ids=query_ids, n_sampled=n_sampled, top_scores=top, pos_offsets=off,
                     pos_ids=pids, pos_scores=pscores, pos_counts=pcounts, meta=meta,
                     top_rerank=top_rerank, pos_rerank=pos_rerank, **halves)
    return validate(ss, path)


def _read_halves(table, path: str, version: int, query_ids, pos_offsets, k: int) -> dict:
    """The recorded-halves columns (schema version 3), as SampleStats fields ({} when absent)."""
    from rscale.core.sample_stats import HALF_SPLITS
    present = [c for c in HALVES_COLUMNS if c in table.column_names]
    if not present:
        return {}
    if version < 3 or len(present) < len(HALVES_COLUMNS):
        column = next((c for c in HALVES_COLUMNS if c not in present), present[0])
        raise FormatError(f"recorded-halves columns need schema version 3 and all of {', '.join(HALVES_COLUMNS)}",
                          path=path, column=column, hint="write the file with rscale score --halves, or drop them")
    h, q = HALF_SPLITS, len(query_ids)
    out = {}
    for name, field, want in (("top_halves", "top_halves", np.full(q, k)),
                              ("positive_halves", "pos_halves", np.diff(pos_offsets) * h),
                              ("n_halves", "n_halves", np.full(q, h))):
        values, offsets = _list_column(table, name, path, "int")
        bad = np.flatnonzero(np.diff(offsets) != want)
        if bad.size:
            r = int(bad[0])
            raise FormatError(f"{name} has {int(np.diff(offsets)[r])} values, expected {int(want[r])} "
                              f"(query_id {str(query_ids[r])!r})", path=path, column=name, row=r)
        if name == "top_halves":
            if values.size and (values.min() < 0 or values.max() > 255):
                r = int(np.searchsorted(offsets, int(np.flatnonzero((values < 0) | (values > 255))[0]), side="right") - 1)
                raise FormatError("membership byte outside 0..255", path=path, column=name, row=r)
            out[field] = values.astype(np.uint8).reshape(q, k)
        else:
            out[field] = values.reshape(-1, h)
    return out
