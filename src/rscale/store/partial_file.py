"""Per-shard partials on disk, so that a scoring run that crashed resumes with the missing shards only.

A checkpoint folder holds one ``<key>.npz`` per finished shard (``top`` (Q, K) float32 unordered,
``n`` (Q,) int64, ``counts`` (P,) int64 and ``key``; with candidates and recorded halves their
arrays too), written atomically: a file is there whole or
not at all. Arrays in, arrays out: the scoring side turns them into partials. The file name is the shard's
:func:`rscale.score.shard.shard_key`, which digests the
query side, the sample, the engine's parameters and the shard's own files, so a partial is reused
only by a run that would compute exactly it; anything else in the folder is ignored. The folder is
removed once the run's sample stats are written.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from rscale.store.atomic import atomic_path


def _name(key: str) -> str:
    return key.split(":")[-1] + ".npz"


HALVES_ARRAYS = ("halves_top_scores", "halves_top_positions", "half_counts", "half_n", "id_sums")


def save_partial(folder, key: str, top: np.ndarray, n: np.ndarray, counts: np.ndarray, candidates=None,
                 halves=None) -> None:
    """``candidates``: None, or (scores (Q, R) float32, positions (Q, R) int64) kept by identity;
    ``halves``: None, or the recorded-halves arrays in :data:`HALVES_ARRAYS` order."""
    extra = {} if candidates is None else {"cand_scores": candidates[0], "cand_positions": candidates[1]}
    if halves is not None:
        extra.update(zip(HALVES_ARRAYS, halves))
    with atomic_path(Path(folder) / _name(key)) as tmp, open(tmp, "wb") as f:
        np.savez(f, top=top, n=n, counts=counts, key=np.array(key), **extra)


def load_partial(folder, key: str, n_queries: int, n_positives: int, k: int, candidates: int = 0):
    """(top, n, counts, candidates or None) stored under ``key``, or None when there is none or it
    does not fit this run (``candidates``: the R the run keeps, 0 for none)."""
    path = Path(folder) / _name(key)
    if not path.exists():
        return None
    try:
        with np.load(path) as z:
            if str(z["key"]) != key:
                return None
            top, n, counts = z["top"], z["n"], z["counts"]
            cand = (z["cand_scores"], z["cand_positions"]) if candidates else None
    except (OSError, ValueError, KeyError):
        return None                       # unreadable (or without the candidates asked for): score it again
    if top.shape != (n_queries, k) or n.shape != (n_queries,) or counts.shape != (n_positives,):
        return None
    if cand is not None:
        if cand[0].shape != (n_queries, candidates) or cand[1].shape != (n_queries, candidates):
            return None
        cand = (cand[0].astype(np.float32), cand[1].astype(np.int64))
    return top.astype(np.float32), n.astype(np.int64), counts.astype(np.int64), cand


def remove_partials(folder) -> None:
    shutil.rmtree(folder, ignore_errors=True)


def load_partial_halves(folder, key: str, n_queries: int, n_positives: int, k: int):
    """The recorded-halves arrays (:data:`HALVES_ARRAYS` order) stored under ``key``, or None when
    they are absent or do not fit."""
    path = Path(folder) / _name(key)
    try:
        with np.load(path) as z:
            if str(z["key"]) != key:
                return None
            arrays = tuple(z[name] for name in HALVES_ARRAYS)
    except (OSError, ValueError, KeyError):
        return None
    shapes = ((n_queries, k), (n_queries, k), (n_positives, 8), (n_queries, 8), (3,))
    if any(a.shape != shape for a, shape in zip(arrays, shapes)):
        return None
    return arrays
