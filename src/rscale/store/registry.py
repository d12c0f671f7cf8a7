"""The hardness registry: content-addressed Parquet blobs plus a DuckDB catalog.

Layout of a registry folder::

    catalog.duckdb                      what exists, made from what, under which names (catalog.py)
    catalog.snapshot.json               derived copy of the catalog for cold readers (catalog_cache.py)
    blobs/sha256/<2 hex>/<64 hex>.parquet   immutable, read-only artifacts (sample stats, hardness,
                                        tail fits, reranked inputs, O2I result tables), named by the
                                        sha256 of their bytes (blobs.py)

A *series* is one backbone x benchmark x distractor source x estimator; each registration adds a
version v1, v2, ... to its series, unless the same hardness bytes are already a version of it (then
it is a no-op returning that version). Tags (``released``, or any name) point at a version and
move atomically; ``latest`` is always the highest version.

A registration writes its blobs first (atomic, durable), then adds its catalog rows in one DuckDB
transaction that, under the catalog's write lock, first checks that every blob it references is
still there. A registration that fails or is killed leaves at most unreferenced (orphan) blobs,
which nothing reads and ``rscale gc`` frees; it never deletes a blob, since a concurrent
registration of the same content may have found it present and be about to reference it.
Reading checks every blob against its digest before it is decoded (blobs.py).

Results of other kinds (per-backbone O2I benchmark results) are *artifacts* (artifacts.py): their
own catalog table and series, the same blobs, registration protocol, row digests, verify and gc.

This module keeps ``Registry``, the one object callers use; the concepts live in hashing.py,
atomic.py, blobs.py, catalog.py, catalog_cache.py, resolution.py and integrity.py.
"""

from __future__ import annotations

import os
import time
from functools import lru_cache
from pathlib import Path

import numpy as np

from rscale.errors import FormatError, RegistryError
from rscale.store.blobs import BlobStore, clear_verified_cache
from rscale.store.artifacts import Artifact, add_artifact, read_artifacts, resolve_artifact
from rscale.store.catalog import CATALOG_VERSION, Catalog, Version
from rscale.store.catalog_cache import SNAPSHOT_FORMAT, CatalogCache, clear_memory
from rscale.store.hashing import canonical_digest, sha256_file
from rscale.store.resolution import resolve, resolve_one

DEFAULT_ROOT = "registry"


@lru_cache(maxsize=8)
def _decoded_hardness(path: str, digest: str):
    from rscale.store.hardness_file import read_hardness

    est, info = read_hardness(path)
    for a in [est.x, est.offsets, est.rule, est.n_sampled, est.draws, est.replicates, est.edge_factor,
              *est.tail.values(), *info.values(),
              info["backtest"].columns]:
        if isinstance(a, np.ndarray):
            a.flags.writeable = False
    _keep_sorted_views(est, info)
    return est, info


def _keep_sorted_views(est, info) -> None:
    """Seed the law's memoised views of a read-only decoded table (``est.hardness()``,
    ``est.replicate_hardness()``, the back-test's share stack) from the file's stored ranks
    (hardness format 4, :func:`rscale.store.hardness_file.sorted_views`), so that no query sorts."""
    from rscale.core.law import Hardness
    from rscale.store.hardness_file import sorted_views

    views = sorted_views(est, info)
    for name, view in views.items():
        view.flags.writeable = False
    if "x" not in views:
        return
    # the reader checked every value (finite, in [0, 1]) and sorted_views the order: no second check
    h = est.__dict__["_hardness"] = Hardness.from_flat(views["x"], est.offsets)
    if "replicates" in views:
        est.__dict__["_replicate_hardness"] = Hardness.presorted(views["replicates"], h)
    if "backtest" in views:
        info["backtest"].__dict__["_columns_hardness"] = Hardness.presorted(views["backtest"], h)


@lru_cache(maxsize=8)
def _decoded_reranked(path: str, digest: str):
    from rscale.store.reranked_input_file import read_reranked_input

    inp, info = read_reranked_input(path)
    for a in [inp.pos_rerank, inp.offsets, *(a for s in inp.sets for a in (s.grid, s.joint))]:
        a.flags.writeable = False            # read-only: queries memoise on it (rscale.core.rerank_replicates)
    return inp, info


def clear_caches() -> None:
    """Forget every in-process cache (catalog rows, verified blobs, decoded tables)."""
    clear_memory()
    clear_verified_cache()
    _decoded_hardness.cache_clear()
    _decoded_reranked.cache_clear()


class Registry:
    def __init__(self, root: str | os.PathLike, clock=time.time_ns):
        self.root = Path(root)
        self.catalog = Catalog(self.root / "catalog.duckdb")
        self.blob_dir = self.root / "blobs" / "sha256"
        self.blobs = BlobStore(self.blob_dir)
        self.cache = CatalogCache(self.catalog, self.root / "catalog.snapshot.json", clock=clock)

    # -- opening ---------------------------------------------------------------------------
    @classmethod
    def locate(cls, root: str | os.PathLike | None = None) -> "Registry":
        """The registry at ``root``, else $RSCALE_REGISTRY, else ./registry."""
        reg = cls(root or os.environ.get("RSCALE_REGISTRY") or DEFAULT_ROOT)
        if reg.root.exists() and not reg.root.is_dir():
            raise RegistryError(f"{reg.root} is a file, not a registry folder: pass a folder to --registry "
                                "(or RSCALE_REGISTRY)")
        return reg

    @property
    def snapshot(self) -> Path:
        return self.cache.snapshot

    def exists(self) -> bool:
        return self.catalog.exists()

    def init(self) -> "Registry":
        self.blob_dir.mkdir(parents=True, exist_ok=True)
        self.catalog.init()
        return self

    def connect(self, write: bool = False, timeout: float = 60.0):
        return self.catalog.connect(write=write, timeout=timeout)

    # -- blobs -----------------------------------------------------------------------------
    def blob_path(self, digest: str) -> Path:
        return self.blobs.path(digest)

    def existing_blob(self, digest: str, owner: str = "", size: int | None = None) -> Path:
        """The path of a blob that must exist and whose bytes match its digest; a clear error otherwise."""
        return self.blobs.verified(digest, owner, size)

    def read_hardness(self, v: Version):
        """A version's hardness table, decoded: (HardnessEstimate, info). The blob is checked against
        its digest first (once per file identity); decoded tables are cached by digest with
        read-only arrays (blobs are immutable)."""
        path = self.existing_blob(v.hardness, f"hardness of {v.ref}", v.sizes.get("hardness"))
        try:
            return _decoded_hardness(str(path), v.hardness)
        except FormatError as exc:
            raise RegistryError(f"blob {v.hardness} (hardness of {v.ref}) matches its digest but cannot be read "
                                f"as a hardness table ({exc.problem}); it was registered by a broken writer: "
                                "re-register or restore it") from None

    def read_sample(self, v: Version):
        """A version's sample stats (None when it was registered without them), digest-checked."""
        if not v.sample:
            return None
        from rscale.store.sample_stats_file import read_sample_stats
        path = self.existing_blob(v.sample, f"sample stats of {v.ref}", v.sizes.get("sample"))
        try:
            return read_sample_stats(path)
        except FormatError as exc:
            raise RegistryError(f"blob {v.sample} (sample stats of {v.ref}) cannot be read as sample stats "
                                f"({exc.problem}): re-register or restore it") from None

    def read_reranked(self, v: Version):
        """A version's reranked-law input, decoded: (RerankedInput, info), or None when it was
        registered without one. The blob is checked against its digest first, and its
        ``hardness_sha256`` against the version's hardness (a row pointing at another version's
        input is refused)."""
        if not v.rerank:
            return None
        path = self.existing_blob(v.rerank, f"reranked input of {v.ref}", v.sizes.get("rerank"))
        try:
            inp, info = _decoded_reranked(str(path), v.rerank)
        except FormatError as exc:
            raise RegistryError(f"blob {v.rerank} (reranked input of {v.ref}) matches its digest but cannot be read "
                                f"as a reranked input ({exc.problem}): re-register or restore it") from None
        if info["meta"].get("hardness_sha256") != v.hardness:
            raise RegistryError(f"blob {v.rerank} (reranked input of {v.ref}) was made for hardness "
                                f"{info['meta'].get('hardness_sha256')}, not this version's {v.hardness}: "
                                "run 'rscale verify' and re-register")
        return inp, info

    # -- registration ----------------------------------------------------------------------
    def register(self, *, backbone: str, benchmark: str, source: str, estimator: str,
                 hardness_file, tail_file=None, sample_file=None, rerank_file=None, params: dict | None = None,
                 code_version: str = "", mlflow_run_id: str | None = None, summary: dict | None = None,
                 blob_rows: dict | None = None) -> tuple[Version, bool]:
        """Add a version (or find the identical one: the same hardness and reranked input).
        Returns (version, created)."""
        files = {"hardness": hardness_file, "tail": tail_file, "sample": sample_file, "rerank": rerank_file}
        key = (backbone, benchmark, source, estimator)

        def commit(digests, sizes, before_commit):
            lineage = canonical_digest({"inputs": {"sample": digests.get("sample")}, "estimator": estimator,
                                        "params": params or {}, "code_version": code_version})
            return self.catalog.add_version(
                key, digests, sizes, blob_rows or {}, lineage=lineage, params=params, code_version=code_version,
                mlflow_run_id=mlflow_run_id, summary=summary, before_commit=before_commit)

        number, created = self._store_and_commit(files, commit)
        return self.get(backbone, f"v{number}", benchmark, source, estimator), created

    def _store_and_commit(self, files: dict, commit):
        """Put every file of ``files`` (role -> path or None) into the blob store, then run
        ``commit(digests, sizes, before_commit)`` (one catalog transaction), whose
        ``before_commit`` re-checks under the write lock that the blobs are still there; a gc
        that took one in between makes it put them again (three tries)."""
        self.init()
        for _attempt in range(3):
            try:
                digests = {role: self.blobs.put(f)[0] for role, f in files.items() if f}
                sizes = {role: self.blobs.path(d).stat().st_size for role, d in digests.items()}
            except FileNotFoundError as exc:
                if any(exc.filename == str(f) for f in files.values() if f):
                    raise                                             # an input file is missing
                continue                                              # a gc took a blob or its folder

            def blobs_still_there(con, digests=digests, sizes=sizes):
                # under the write lock: a gc that ran since our put may have removed a blob we found
                gone = [d for k, d in digests.items() if not self.blobs.present(d, sizes[k])]
                if gone:
                    raise _BlobsGone(gone)

            try:
                return commit(digests, sizes, blobs_still_there)
            except _BlobsGone:
                continue                                          # put them again, then retry the commit
        raise RegistryError(f"the blobs of this registration keep disappearing from {self.blob_dir} "
                            "(is 'rscale gc --grace 0' running in a loop?); try again")

    # -- other artifact kinds (artifacts.py: per-backbone O2I results) ----------------------
    def register_artifact(self, *, kind: str, name: str, benchmark: str, files: dict, inputs: dict,
                          params: dict | None = None, code_version: str = "", mlflow_run_id: str | None = None,
                          summary: dict | None = None, rows: dict | None = None) -> tuple[Artifact, bool]:
        """Store an artifact's blobs (role -> file) and add its catalog row, or find the one with
        the same content in its series. Returns (artifact, created)."""
        key = (kind, name, benchmark)

        def commit(digests, sizes, before_commit):
            return add_artifact(self.catalog, key, digests, sizes, rows or {}, inputs=inputs, params=params,
                                code_version=code_version, mlflow_run_id=mlflow_run_id, summary=summary,
                                before_commit=before_commit)

        number, created = self._store_and_commit(files, commit)
        return self.artifact(kind, name, f"v{number}", benchmark), created

    def artifacts(self, kind: str | None = None) -> list[Artifact]:
        """Every artifact row of ``kind`` (all kinds: None), each checked against its row digest."""
        if not self.exists():
            raise RegistryError(f"no registry at {self.root} (no catalog.duckdb). Create one with 'rscale register "
                                "...' or 'rscale o2i register ...'")
        return [self._checked_artifact(a) for a in read_artifacts(self.catalog) if kind is None or a.kind == kind]

    def artifact(self, kind: str, name: str, version: str | None = None, benchmark: str | None = None) -> Artifact:
        return resolve_artifact(self.artifacts(kind), kind, name, version, benchmark)

    def artifact_blob(self, a: Artifact, role: str) -> Path:
        """The path of one of an artifact's blobs, checked against its digest (once per file identity)."""
        if role not in a.blobs:
            raise RegistryError(f"{a.ref} has no {role!r} blob (has: {', '.join(sorted(a.blobs))})")
        return self.existing_blob(a.blobs[role], f"{role} of {a.ref}", a.sizes.get(role))

    def _checked_artifact(self, a: Artifact) -> Artifact:
        if not a.sealed():
            raise RegistryError(f"the catalog row of {a.ref} [{'/'.join(a.series)}] does not match its row digest "
                                f"(edited or damaged): run 'rscale verify' and restore {self.catalog.path.name}")
        return a

    def tag(self, version: Version | Artifact, tag: str) -> None:
        """Point ``tag`` at a hardness version or an artifact version (one tags table, artifacts.py)."""
        if tag == "latest" or tag.startswith("v") and tag[1:].isdigit():
            raise RegistryError(f"'{tag}' is reserved (latest is always the highest version; vN names versions)")
        series = version.tag_series if isinstance(version, Artifact) else version.series
        self.catalog.set_tag(series, tag, version.version)

    # -- reading ---------------------------------------------------------------------------
    def versions(self) -> list[Version]:
        """Every version with its tags (cached: catalog_cache.py)."""
        return self.cache.versions()

    def _read_versions(self) -> list[Version]:
        return self.catalog.read_versions()

    def backbones(self) -> list[str]:
        return sorted({v.backbone for v in self.versions()})

    def resolve(self, name: str, version: str | None = None, benchmark: str | None = None,
                source: str | None = None, estimator: str | None = None,
                catalog: list[Version] | None = None) -> list[Version]:
        """Versions matching a name or glob, a version (vN or tag; default latest) and filters
        (resolution.py); pass ``catalog`` to resolve many names over one catalog read."""
        found = resolve(self.versions() if catalog is None else catalog, name, version, benchmark, source, estimator)
        return [self._checked_row(v) for v in found]

    def get(self, name, version=None, benchmark=None, source=None, estimator=None) -> Version:
        return self._checked_row(resolve_one(self.versions(), name, version, benchmark, source, estimator))

    def _checked_row(self, v: Version) -> Version:
        """A version whose catalog row still matches its row digest (rows of a version-1 catalog have none)."""
        if v.row_digest is not None and not v.sealed():
            raise RegistryError(f"the catalog row of {v.ref} [{'/'.join(v.series)}] does not match its row digest "
                                f"(edited or damaged): run 'rscale verify' and restore {self.catalog.path.name}")
        return v

    # -- integrity -------------------------------------------------------------------------
    def verify(self) -> dict:
        """Re-hash every blob and catalog row: integrity.verify's report."""
        from rscale.store.integrity import verify
        return verify(self)

    def gc(self, **kw) -> dict:
        from rscale.store.integrity import gc
        return gc(self, **kw)


class _BlobsGone(Exception):
    pass


__all__ = ["CATALOG_VERSION", "DEFAULT_ROOT", "SNAPSHOT_FORMAT", "Registry", "Version", "canonical_digest",
           "clear_caches", "sha256_file"]
