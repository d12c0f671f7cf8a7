"""Read and write the reranked-input Parquet format: what a registered version keeps for
reranked predictions (:mod:`rscale.core.rerank_replicates`; docs/formats.md).

One row per (set, query): set -1 is the whole sample, set r >= 0 the half-sample of hardness
replicate r (2 per split, in the order of the hardness file's replicates):

=======================  ==============  ====================================================
column                   type            meaning
=======================  ==============  ====================================================
replicate                int16           -1 (the sample) or the replicate index r
query_id                 string          the query, in the sample's query order
grid                     list<float64>   the points w of the first-stage law (0 first, increasing)
joint                    list<float64>   G_p(w) on the grid, one block of len(grid) per positive
positive_ids             list<string>    the query's positives, in the sample's order
positive_rerank_scores   list<float64>   their rerank scores
=======================  ==============  ====================================================

File metadata: ``rscale.format = reranked-input``, ``rscale.schema_version = 1`` and
``rscale.meta`` (JSON): ``hardness_sha256`` (the hardness table this input goes with; a reader
checks it against the version's), ``splits`` and ``seed`` (the half-sample splits), ``tail``
(GPD-smoothed slices), ``top`` (R, the sample's reranked candidates per query) and ``lineage``
(the rerank run's ``rerank_*`` keys of the sample stats' metadata: detector and backbone digests).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from rscale.core.rerank_replicates import JointTails, RerankedInput
from rscale.errors import FormatError, SchemaVersionError
from rscale.store.atomic import atomic_path

FORMAT = "reranked-input"
SCHEMA_VERSION = 1
COLUMNS = ("replicate", "query_id", "grid", "joint", "positive_ids", "positive_rerank_scores")


def reranked_input_table(inp: RerankedInput, query_ids, pos_ids, meta: dict):
    import pyarrow as pa

    q = inp.offsets.size - 1
    sizes = np.diff(inp.offsets)
    sets = inp.sets
    v = np.array([s.grid.shape[1] for s in sets])

    def lists(values, lengths, typ=pa.float64()):
        off = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        return pa.LargeListArray.from_arrays(pa.array(off), pa.array(values, typ))

    n_sets = len(inp.sets)
    table = pa.table({
        "replicate": pa.array(np.repeat(np.arange(-1, n_sets - 1), q), pa.int16()),
        "query_id": pa.array(np.tile(np.asarray(query_ids, dtype=str), n_sets), pa.string()),
        "grid": lists(np.concatenate([s.grid.ravel() for s in sets]), np.repeat(v, q)),
        "joint": lists(np.concatenate([s.joint.ravel() for s in sets]), np.concatenate([sizes * vi for vi in v])),
        "positive_ids": lists(np.tile(np.asarray(pos_ids, dtype=str), n_sets), np.tile(sizes, n_sets), pa.string()),
        "positive_rerank_scores": lists(np.tile(inp.pos_rerank, n_sets), np.tile(sizes, n_sets)),
    })
    return table.replace_schema_metadata({"rscale.format": FORMAT, "rscale.schema_version": str(SCHEMA_VERSION),
                                          "rscale.meta": json.dumps(meta, sort_keys=True)})


def write_reranked_input(inp: RerankedInput, path, *, query_ids, pos_ids, meta: dict) -> Path:
    """Write atomically (temp file in the same folder, then rename)."""
    import pyarrow.parquet as pq

    path = Path(path)
    with atomic_path(path) as tmp:
        pq.write_table(reranked_input_table(inp, query_ids, pos_ids, meta), tmp, compression="zstd")
    return path


def _lists(table, name: str, path: str, kind: str = "float"):
    """(flat values, lengths) of a list column."""
    import pyarrow as pa

    from rscale.store.columns import list_flat, numeric, strings

    col = table.column(name)
    if not (pa.types.is_list(col.type) or pa.types.is_large_list(col.type)) or col.null_count:
        raise FormatError(f"expected a list column without nulls, got {col.type}", path=path, column=name)
    flat, off = list_flat(col)               # zero-copy views of the table's buffers (no combine_chunks copy)
    try:
        values = strings(flat) if kind == "str" else numeric(flat, np.float64)
    except TypeError as exc:
        raise FormatError(str(exc), path=path, column=name) from None
    return values, np.diff(off)


def read_reranked_input(path) -> tuple[RerankedInput, dict]:
    """(RerankedInput, info) with info: ``query_ids``, ``positive_ids``, ``meta``; every problem
    is a FormatError naming the file and column."""
    import pyarrow.parquet as pq

    from rscale.store.columns import numeric, strings
    from rscale.store.sample_stats_file import meta_object, schema_version

    path = str(path)
    if not os.path.isfile(path):
        raise FormatError("file not found", path=path)
    try:
        table = pq.ParquetFile(path).read()       # not read_table: pyarrow.dataset pulls in pandas (~1 s)
    except Exception as exc:  # pyarrow raises several types for a corrupt file
        raise FormatError(f"not a readable Parquet file ({type(exc).__name__})", path=path) from None
    md = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    if md.get("rscale.format") != FORMAT:
        raise FormatError(f"this is a '{md.get('rscale.format', 'unknown')}' file, not a reranked input", path=path)
    version = schema_version(md, path, "rewrite it with rscale register")
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(f"written with reranked-input schema version {version}; this rscale reads up to "
                                 f"{SCHEMA_VERSION}", path=path, hint="upgrade rscale (pip install -U rscale)")
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise FormatError(f"missing column(s): {', '.join(missing)}", path=path)
    meta = meta_object(md, path)
    rep = numeric(table.column("replicate"), np.int64)
    qids = strings(table.column("query_id")).astype(str)
    grid, grid_len = _lists(table, "grid", path)
    joint, joint_len = _lists(table, "joint", path)
    pids, pos_len = _lists(table, "positive_ids", path, "str")
    scores, score_len = _lists(table, "positive_rerank_scores", path)
    sets = np.unique(rep)
    n_sets = sets.size
    if rep.size == 0 or not np.array_equal(sets, np.arange(-1, n_sets - 1)) or rep.size % n_sets:
        raise FormatError("replicate must run -1, 0, 1, ... with the same queries in each", path=path,
                          column="replicate")
    q = rep.size // n_sets
    if not (np.array_equal(rep, np.repeat(sets, q)) and np.array_equal(qids, np.tile(qids[:q], n_sets))
            and np.array_equal(pos_len, np.tile(pos_len[:q], n_sets))):
        raise FormatError("every set must list the same queries and positives in the same order", path=path,
                          column="query_id")
    if not (np.array_equal(score_len, pos_len) and np.all(pos_len >= 1)):
        raise FormatError("positive_rerank_scores must be parallel to positive_ids, at least one per query",
                          path=path, column="positive_rerank_scores")
    n_pos = int(pos_len[:q].sum())
    offsets = np.concatenate([[0], np.cumsum(pos_len[:q])]).astype(np.int64)
    out, g0, j0 = [], 0, 0
    for i in range(n_sets):
        rows = slice(i * q, (i + 1) * q)
        v = grid_len[rows]
        if np.any(v != v[0]) or v[0] < 2 or not np.array_equal(joint_len[rows], pos_len[rows] * v[0]):
            raise FormatError(f"set {i - 1}: every query needs the same grid length (>= 2) and len(grid) values of "
                              "joint per positive", path=path, column="joint")
        g = grid[g0:g0 + q * int(v[0])].reshape(q, int(v[0]))
        j = joint[j0:j0 + n_pos * int(v[0])].reshape(n_pos, int(v[0]))
        g0, j0 = g0 + g.size, j0 + j.size
        if not (np.all(np.isfinite(g)) and np.all(np.isfinite(j))):
            raise FormatError(f"set {i - 1}: NaN or infinite values", path=path, column="joint")
        out.append(JointTails(g, j))
    first = slice(0, n_pos)
    for i in range(1, n_sets):
        same = slice(i * n_pos, (i + 1) * n_pos)
        if not (np.array_equal(pids[same], pids[first]) and np.array_equal(scores[same], scores[first])):
            raise FormatError(f"set {i - 1}: positives or rerank scores differ from the sample's", path=path,
                              column="positive_rerank_scores")
    inp = RerankedInput(scores[first], offsets, out[0], tuple(out[1:]))
    return inp, {"query_ids": qids[:q], "positive_ids": pids[first].astype(str), "meta": meta}


__all__ = ["FORMAT", "SCHEMA_VERSION", "read_reranked_input", "reranked_input_table", "write_reranked_input"]
