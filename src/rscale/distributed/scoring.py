"""Scoring on Ray: one task per distractor shard, each producing the engine's partial of that shard.

- The query side (:class:`~rscale.score.engine.Queries`) is put in the object store once and shared
  by every task. A task memory-maps its shard from the shared filesystem, checks the shard's
  digests, draws the hash sample from the shard's ids (every worker agrees on it without
  coordination) and returns a compact partial (top-K, sizes, counts).
- Partials are kept by shard identity, never by arrival: shard i contributes exactly once to the
  merge, whatever retries happened, and the merge (exact in any order) runs in shard order.
- A task whose worker dies is retried by Ray (``max_retries``), as is one that hit an ``OSError``
  (a flaky mount); other errors (a damaged shard) are the user's to fix and surface as they are.
- With a checkpoint folder, every finished partial is written there as it arrives
  (:mod:`rscale.store.partial_file`), so a rerun after a crash scores only the missing shards.

Fault injection for the tests of those paths: ``RSCALE_RAY_FAULT=kill:<shard>:<marker file>`` kills
the worker scoring that shard once (the marker records that it happened); ``raise:<shard>`` makes
that shard fail for good, as a crash would.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from rscale.errors import RscaleError
from rscale.score.engine import Partial, Queries
from rscale.score.candidates import TopCandidates
from rscale.score.shard import score_shard, shard_key, shard_offsets
from rscale.store.descriptor_set import DescriptorSet

FAULT_ENV = "RSCALE_RAY_FAULT"


class InjectedFault(RuntimeError):
    """The permanent failure ``RSCALE_RAY_FAULT=raise:<shard>`` asks for."""


def _fault_for(index: int):
    spec = os.environ.get(FAULT_ENV, "")
    parts = spec.split(":", 2)
    if len(parts) >= 2 and parts[1] == str(index):
        return parts[0], parts[2] if len(parts) > 2 else ""
    return None


def shard_partial(queries: Queries, root: str, index: int, *, k: int, backend: str, chunk: int,
                  fraction: float, seed: int, threads: int, fault=None, candidates: int = 0, halves: bool = False):
    """Body of one task: verify shard ``index`` of the set at ``root`` and score its sample."""
    from rscale.errors import FormatError

    if fault is not None:
        mode, marker = fault
        if mode == "kill" and not os.path.exists(marker):
            Path(marker).touch()
            os._exit(1)                                  # the worker process dies mid-shard
        if mode == "raise":
            raise InjectedFault(f"injected failure of shard {index}")
    ds = DescriptorSet.open(root)
    stale = ds.verify_shard(index)
    if stale:
        raise FormatError(f"{stale[0]} does not match its digest in the manifest", path=str(ds.root / stale[0]),
                          hint="the set changed after it was written; re-extract it (finished shards are kept)")
    ids, vectors = ds.shard(index)
    return score_shard(queries, ids, vectors, k=k, backend=backend, chunk=chunk, fraction=fraction, seed=seed,
                       where=str(ds.root / ds.manifest["shards"][index]["vectors"]), threads=threads,
                       candidates=candidates, offset=shard_offsets(ds.manifest)[index], halves=halves)


def score_on_ray(ray, queries: Queries, distractors: DescriptorSet, *, k: int, backend: str, chunk: int,
                 fraction: float, seed: int, common: str, checkpoint=None, cpus_per_task: int = 1,
                 max_retries: int = 3, progress: bool = False, candidates: int = 0, halves: bool = False):
    """Score every shard of ``distractors`` in a Ray task -> (merged partial, DriftReport or None,
    number of shards taken from the checkpoint).

    ``common`` digests the query side and the parameters (:func:`rscale.score.shard.shard_key`);
    ``checkpoint``: a folder for finished partials (None: keep them in the object store only)."""
    from rscale.score.engine import merge_shard_partials

    shards = distractors.manifest["shards"]
    keys = [shard_key(common, s) for s in shards]
    q, p = queries.vectors.shape[0], queries.pos_scores.size

    from rscale.store.partial_file import load_partial, load_partial_halves, save_partial

    def stored(i):
        arrays = None if checkpoint is None else load_partial(checkpoint, keys[i], q, p, k, candidates)
        if arrays is None:
            return None
        extra = {}
        if halves:
            h = load_partial_halves(checkpoint, keys[i], q, p, k)
            if h is None:
                return None
            extra = dict(top_halves=TopCandidates(h[0].astype(np.float32), h[1].astype(np.int64)),
                         half_counts=h[2].astype(np.int64), half_n=h[3].astype(np.int64), id_sums=h[4].astype(np.uint64))
        top, n, counts, cand = arrays
        return Partial(top, top.min(axis=1), np.empty((q, 0), dtype=np.float32), np.zeros(q, dtype=np.int64),
                       n, counts, None if cand is None else TopCandidates(*cand), **extra)

    resumed = {i for i in range(len(shards)) if stored(i) is not None}
    task = ray.remote(shard_partial).options(max_retries=max_retries, retry_exceptions=[OSError],
                                              num_cpus=cpus_per_task)
    qref = ray.put(queries)
    pending = {task.remote(qref, str(distractors.root), i, k=k, backend=backend, chunk=chunk, fraction=fraction,
                           seed=seed, threads=cpus_per_task, fault=_fault_for(i), candidates=candidates,
                           halves=halves): i
               for i in range(len(shards)) if i not in resumed}
    refs, first_error = {}, None
    from rich.console import Console
    from rich.progress import Progress
    with Progress(console=Console(stderr=True), disable=not progress, transient=True) as bar:
        job = bar.add_task("scoring shards on Ray", total=len(shards), completed=len(resumed))
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                i = pending.pop(ref)
                try:
                    part = ray.get(ref)
                except Exception as exc:            # keep collecting: the finished shards are saved
                    first_error = first_error or exc
                    continue
                if checkpoint is not None:
                    save_partial(checkpoint, keys[i], part.top, part.n, part.counts,   # then the object can go
                                 None if part.cand is None else (part.cand.scores, part.cand.positions),
                                 None if part.top_halves is None else (part.top_halves.scores, part.top_halves.positions,
                                                                       part.half_counts, part.half_n, part.id_sums))
                else:
                    refs[i] = ref
                bar.advance(job)
    if first_error is not None:
        raise _unwrap(ray, first_error)

    def in_shard_order():
        for i in range(len(shards)):
            yield stored(i) if checkpoint is not None else ray.get(refs[i])

    merged, report = merge_shard_partials(in_shard_order)
    return merged, report, len(resumed)


def _unwrap(ray, exc):
    """A task's own error (a FormatError naming the shard) rather than Ray's wrapper around it."""
    cause = getattr(exc, "cause", None)
    if isinstance(exc, ray.exceptions.RayTaskError) and isinstance(cause, RscaleError):
        return cause
    return exc
