"""Reading the catalog without opening DuckDB: an in-process cache and ``catalog.snapshot.json``.

Both are derived and never trusted blindly:

- the **snapshot** file is keyed by the sha256 of the catalog's bytes (the file and its WAL), so
  any change of the catalog, even one that keeps its mtime, size and inode, or random bytes
  written over it, invalidates it; and every row in it must carry a matching row digest, so a
  hand-edited snapshot (v1 pointed at v2's hardness) is ignored and the catalog read instead;
- the **memory** cache is keyed by the catalog's file identity (mtime, size, inode of the file
  and its WAL), cheaper than hashing; a catalog modified less than ``STABLE_NS`` before the read
  is not kept in memory (file times are coarse: a write in the same tick could leave the key
  unchanged). The clock is injected, so this rule is tested without sleeping.

A read that finds the snapshot absent or stale fills it with the rows it read, unless they
changed while it read. Inside :func:`deferred_snapshot_fills` (every ``rscale`` command runs in
one) the fill waits for the command to succeed: a refused command (an unknown name, a blob that
fails its digest check, a bad query) writes nothing, and a current snapshot is never rewritten.
"""

from __future__ import annotations

import hashlib
import json
import time
from contextlib import contextmanager
from pathlib import Path

from rscale.store.atomic import write_text_atomic
from rscale.store.catalog import Catalog, Version

SNAPSHOT_FORMAT = "rscale-catalog-snapshot/2"
STABLE_NS = 2_000_000_000

_MEMORY: dict[str, tuple[tuple, tuple]] = {}   # catalog path -> (file identity, versions)
_DEFERRED: list["SnapshotFills"] = []           # open deferral scopes, innermost last


def file_identity(catalog: Catalog) -> tuple:
    parts = []
    for p in (catalog.path, catalog.wal):
        try:
            st = p.stat()
            parts.append((st.st_mtime_ns, st.st_size, st.st_ino))
        except FileNotFoundError:
            parts.append(None)
    return tuple(parts)


def content_key(catalog: Catalog) -> str | None:
    """sha256 over the catalog file and its WAL (None when the catalog cannot be read)."""
    h = hashlib.sha256()
    for p in (catalog.path, catalog.wal):
        try:
            with open(p, "rb") as f:
                h.update(b"present:")
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
        except FileNotFoundError:
            h.update(b"absent;")
        except OSError:
            return None
    return "sha256:" + h.hexdigest()


class CatalogCache:
    def __init__(self, catalog: Catalog, snapshot: Path, clock=time.time_ns):
        self.catalog = catalog
        self.snapshot = Path(snapshot)
        self.clock = clock

    def _stable(self, ident: tuple) -> bool:
        now = self.clock()
        return ident[0] is not None and all(k is None or now - k[0] > STABLE_NS for k in ident)

    def versions(self) -> list[Version]:
        ident = file_identity(self.catalog)
        hit = _MEMORY.get(str(self.catalog.path))
        if hit is not None and hit[0] == ident:
            return list(hit[1])
        key = content_key(self.catalog)
        out = self.read_snapshot(key)
        if out is None:
            out = self.catalog.read_versions()
            if key is not None and content_key(self.catalog) == key:     # nothing changed while reading
                if _DEFERRED:
                    _DEFERRED[-1].pending[str(self.snapshot)] = (self, key, out)
                else:
                    self.write_snapshot(key, out)
            else:
                return out
        if self._stable(ident) and file_identity(self.catalog) == ident:
            _MEMORY[str(self.catalog.path)] = (ident, tuple(out))
        return out

    def read_snapshot(self, key: str | None) -> list[Version] | None:
        if key is None:
            return None
        try:
            data = json.loads(self.snapshot.read_text())
            if data.get("format") != SNAPSHOT_FORMAT or data.get("catalog_sha256") != key:
                return None
            out = [Version(**{**v, "tags": tuple(v["tags"])}) for v in data["versions"]]
        except (OSError, ValueError, TypeError, KeyError):
            return None                                   # absent, stale or damaged: read the catalog
        if not all(v.sealed() for v in out):
            return None                                   # edited by hand (or unsealed rows): read the catalog
        return out

    def write_snapshot(self, key: str, versions: list[Version]) -> None:
        if not all(v.sealed() for v in versions):
            return                                        # a version-1 catalog: no snapshot until migrated
        data = {"format": SNAPSHOT_FORMAT, "catalog_sha256": key,
                "versions": [{**v.__dict__, "tags": list(v.tags)} for v in versions]}
        try:
            write_text_atomic(self.snapshot, json.dumps(data), durable=False)
        except OSError:
            pass                                          # a read-only registry: no snapshot, still correct


class SnapshotFills:
    """The snapshot fills of reads inside one :func:`deferred_snapshot_fills` scope."""

    def __init__(self):
        self.pending: dict[str, tuple[CatalogCache, str, list[Version]]] = {}

    def write(self) -> None:
        """Write each pending fill whose catalog is still the one read (content key unchanged)
        and whose snapshot is not current already."""
        for cache, key, versions in self.pending.values():
            if content_key(cache.catalog) == key and cache.read_snapshot(key) is None:
                cache.write_snapshot(key, versions)
        self.pending.clear()


@contextmanager
def deferred_snapshot_fills():
    """Hold back the snapshot fills of the reads inside; the caller writes them with
    ``fills.write()`` once its work has succeeded. Leaving without it drops them."""
    fills = SnapshotFills()
    _DEFERRED.append(fills)
    try:
        yield fills
    finally:
        _DEFERRED.remove(fills)


def clear_memory() -> None:
    _MEMORY.clear()


__all__ = ["CatalogCache", "SNAPSHOT_FORMAT", "SnapshotFills", "clear_memory", "content_key",
           "deferred_snapshot_fills", "file_identity"]
