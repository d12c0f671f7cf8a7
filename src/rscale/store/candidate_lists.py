"""Ranked candidate lists: the first stage's top candidates per query, by gallery id (Parquet).

One row per (query, candidate), the columns a reranker reads (``rscale rerank --candidates``):

==========  =======  ====================================================
query_id    string   the query
gallery_id  string   the candidate's id in its descriptor set / image folder
score       float32  first-stage score (the engine's float32 inner product)
rank        int64    1..R within the query: score descending, ties by set order
==========  =======  ====================================================

``rscale score --candidates R`` writes the R best *sampled distractors* of every query next to
the sample stats, as ``<stem>.candidates.parquet`` (:func:`candidates_path`; positives are not
in it: they are the sample stats' own), with file metadata ``rscale.format = candidate-lists``,
``rscale.sample_stats`` (the sample stats' file name) and ``rscale.candidates`` (R). Lists written
by other tools need only the four columns.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from rscale.errors import FormatError, InvalidArgumentError

FORMAT = "candidate-lists"
COLUMNS = ("query_id", "gallery_id", "score", "rank")


def candidates_path(sample_stats_path) -> Path:
    """``x.parquet`` -> ``x.candidates.parquet`` (next to the sample stats)."""
    p = Path(sample_stats_path)
    stem = p.name[:-len(".parquet")] if p.name.endswith(".parquet") else p.name
    return p.with_name(stem + ".candidates.parquet")


def write_candidates(path, query_ids, gallery_ids, scores, *, sample_stats: str = "") -> Path:
    """Write (Q, R) lists, best first, atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rscale.store.atomic import atomic_path
    gid = np.asarray(gallery_ids)
    q, r = gid.shape
    table = pa.table({
        "query_id": pa.array(np.repeat(np.asarray(query_ids).astype(str), r), pa.string()),
        "gallery_id": pa.array(gid.astype(str).ravel(), pa.string()),
        "score": pa.array(np.asarray(scores, np.float32).ravel()),
        "rank": pa.array(np.tile(np.arange(1, r + 1, dtype=np.int64), q)),
    }).replace_schema_metadata({"rscale.format": FORMAT, "rscale.sample_stats": sample_stats,
                                "rscale.candidates": str(r)})
    path = Path(path)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")
    return path


def read_candidates(path, k: int):
    """Candidate lists -> (query ids (Q,), (Q, k) gallery ids, scores, ranks), each query's best k.
    Refused: a missing column, a query with fewer than k candidates, a gallery id listed twice."""
    import pyarrow.parquet as pq
    path = Path(path)
    if not os.path.isfile(path):
        raise FormatError("no candidate lists here", path=str(path),
                          hint="score with --candidates R to write them next to the sample stats")
    try:
        t = pq.read_table(path)
    except (OSError, ValueError) as exc:
        raise FormatError(f"cannot read candidate lists ({exc})", path=str(path)) from None
    for c in COLUMNS:
        if c not in t.column_names:
            raise FormatError(f"missing column (expected {', '.join(COLUMNS)})", path=str(path), column=c)
    if k < 1:
        raise InvalidArgumentError(f"K' must be >= 1, got {k}")
    qid = np.asarray(t.column("query_id").to_pylist(), dtype=object).astype(str)
    gid = np.asarray(t.column("gallery_id").to_pylist(), dtype=object).astype(str)
    score = t.column("score").to_numpy().astype(np.float64)
    rank = t.column("rank").to_numpy().astype(np.int64)
    order = np.lexsort((rank, qid))
    qid, gid, score, rank = qid[order], gid[order], score[order], rank[order]
    queries, starts, counts = np.unique(qid, return_index=True, return_counts=True)
    if counts.min() < k:
        short = int(np.argmin(counts))
        raise InvalidArgumentError(f"K'={k} is larger than the first-stage list of query {str(queries[short])!r} "
                                   f"({counts[short]} candidates in {path}); pass k <= {int(counts.min())}")
    take = (starts[:, None] + np.arange(k)[None, :])
    ids = gid[take]
    dup = np.flatnonzero((np.sort(ids, axis=1)[:, 1:] == np.sort(ids, axis=1)[:, :-1]).any(axis=1))
    if dup.size:
        raise FormatError(f"query {str(queries[dup[0]])!r} lists a gallery id twice in its top {k}",
                          path=str(path), column="gallery_id", hint="one row per (query_id, gallery_id)")
    return queries, ids, score[take], rank[take]


def list_length(path) -> int:
    """The shortest list's length (the largest k :func:`read_candidates` accepts)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    t = pq.read_table(path, columns=["query_id"])
    return int(pc.min(pc.value_counts(t.column("query_id")).field("counts")).as_py()) if t.num_rows else 0
