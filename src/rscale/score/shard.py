"""One distractor shard -> the engine's :class:`~rscale.score.engine.Partial`: the unit a local run
loops over and a distributed run sends to a worker.

Which rows are scored is decided from the shard's ids alone (:func:`rscale.score.sampling.in_sample`:
hash(seed, id) < fraction), so every worker agrees on the sample without talking to the others, and
a retried shard scores exactly the rows it scored the first time. Each scored row must be a finite
unit vector; the first that is not is named by file and row.

A shard's partial is keyed (:func:`shard_key`) by everything that decides it: the query side
(queries, positives, qrels), the shard's own digests, the sample and the engine's parameters.
Merging partials by that identity, not by arrival, is what keeps a retried or resumed shard from
being counted twice (:mod:`rscale.store.partial_file` keeps them on disk for a resume).
"""

from __future__ import annotations

import numpy as np

from rscale.errors import FormatError
from rscale.score.engine import Partial, Queries, empty_partial, score_chunk
from rscale.score.sampling import in_sample
from rscale.store.descriptor_set import NORM_TOLERANCE, check_vectors


def sampled_chunks(ids, vectors, *, fraction: float, seed: int, chunk: int, where: str):
    """(rows in the shard, float32 block) of at most ``chunk`` of the shard's sampled rows, each checked."""
    mask = None if fraction >= 1.0 else in_sample(ids, fraction, seed)
    for a in range(0, len(ids), chunk):
        rows = None if mask is None else np.flatnonzero(mask[a:a + chunk])
        # a sample reads only its own rows of the memory-mapped shard (a 4 KiB row is a page)
        block = np.asarray(vectors[a:a + chunk] if rows is None else vectors[a + rows], dtype=np.float32)
        # one pass for the squared norms (NaN and inf fail the comparison too); check_vectors names
        # the problem and the row when one is off
        norms = np.sqrt(np.einsum("ij,ij->i", block, block))
        if not np.all(np.abs(norms - 1.0) <= NORM_TOLERANCE):
            try:
                check_vectors(block, None, where)
            except FormatError as exc:
                i = exc.row or 0
                raise FormatError(exc.problem, path=where, row=a + int(i if rows is None else rows[i]),
                                  hint=exc.hint) from None
        yield (np.arange(a, a + len(block), dtype=np.int64) if rows is None else a + rows.astype(np.int64)), block


def score_shard(queries: Queries, ids, vectors, *, k: int, backend: str = "numpy", chunk: int = 16384,
                fraction: float = 1.0, seed: int = 0, where: str = "", threads: int | None = None,
                candidates: int = 0, offset: int = 0, halves: bool = False) -> Partial:
    """The partial of one shard's sampled rows, flushed and without its candidate buffer (compact:
    what travels between processes is the top-K, the sizes and the counts; with ``candidates`` R,
    also each query's R best by position in the set: ``offset`` + row in the shard; with ``halves``,
    the half-sample membership by distractor id, :mod:`rscale.core.halves`)."""
    from rscale.core.halves import id_hashes, id_set_sums
    state = empty_partial(queries, k, candidates, halves=halves)
    for rows, block in sampled_chunks(ids, vectors, fraction=fraction, seed=seed, chunk=chunk, where=where):
        masks = None
        if halves:
            masks, words = id_hashes(np.asarray(ids)[rows])
            with np.errstate(over="ignore"):
                state.id_sums += id_set_sums(words)
        score_chunk(queries, block, state, backend, threads=threads, positions=offset + rows, halves=masks)
    return state.compact()


def shard_offsets(manifest: dict) -> list[int]:
    """Position in the descriptor set of each shard's first row (the shards' counts, summed)."""
    counts = [int(s["count"]) for s in manifest["shards"]]
    return [int(v) for v in np.concatenate([[0], np.cumsum(counts)[:-1]])] if counts else []


def shard_key(common: str, shard: dict) -> str:
    """Identity of one shard's partial: ``common`` (the digest of the query side and the engine's
    parameters) with the shard's file digests."""
    from rscale.store.hashing import canonical_digest
    return canonical_digest({"common": common, "vectors": shard["sha256_vectors"], "ids": shard["sha256_ids"]})
