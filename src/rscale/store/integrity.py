"""Checking a registry (``verify``) and freeing what crashed writers left behind (``gc``).

``verify`` tells damage from harmless leftovers:

- damage (``corrupt``, ``missing``, ``extra``): a referenced blob (of a hardness version or of an
  artifact such as an O2I result) whose bytes do not hash to its
  name, that is not a regular file, or that is gone; a catalog row whose content no longer
  matches its row digest; a snapshot that disagrees with the catalog it is keyed to; a file in
  the blob folder that is neither a blob nor a leftover;
- ``leftovers``: orphan blobs (named by their digest, referenced by no version: a registration
  killed between writing its blobs and committing), ``.tmp-`` files and ``.import-*`` folders of
  killed writers. ``rscale gc`` frees them; queries never read them.
- ``unsealed``: rows of a version-1 catalog without a row digest (sealed by the next write).

``gc`` is a dry run unless asked, and frees only leftovers older than a grace period (a writer
still running touches what it uses). It decides and deletes while holding the catalog's write
lock; a registration re-checks its blobs under the same lock before committing, so neither can
commit a version whose blob the other removes.
"""

from __future__ import annotations

import os
import shutil
import stat as stat_
import time
from pathlib import Path

from rscale.errors import RegistryError
from rscale.store.atomic import fsync_dir, is_temp_name
from rscale.store.hashing import is_digest, sha256_file

IMPORT_PREFIX = ".import-"
DEFAULT_GRACE_S = 3600.0


def _blob_name_digest(path: Path) -> str | None:
    name = path.name
    if name.endswith(".parquet") and path.parent.name == name[:2]:
        d = "sha256:" + name[:-len(".parquet")]
        return d if is_digest(d) else None
    return None


def referenced_digests(versions) -> set[str]:
    return {str(d) for v in versions for d in v.blob_digests().values() if d}


def verify(reg) -> dict:
    from rscale.store.artifacts import read_artifacts

    versions = reg.catalog.read_versions()
    artifacts = read_artifacts(reg.catalog)
    known = reg.catalog.blob_rows()
    referenced = referenced_digests(versions) | {str(d) for a in artifacts for d in a.blobs.values()}
    report = {"checked": [], "corrupt": [], "missing": [], "extra": [], "leftovers": [], "unsealed": []}
    for d in sorted(referenced):
        if not is_digest(d):                      # a damaged row: its row digest check names it too
            report["corrupt"].append(d)
            continue
        p = reg.blobs.path(d)
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            report["missing"].append(d)
            continue
        if not stat_.S_ISREG(st.st_mode) or (d in known and known[d][1] != st.st_size):
            report["corrupt"].append(d)
        elif sha256_file(p) != d:
            report["corrupt"].append(d)
        else:
            report["checked"].append(d)
    for v in versions:
        if v.row_digest is None:
            report["unsealed"].append(f"{v.ref} [{'/'.join(v.series)}]")
        elif not v.sealed():
            report["corrupt"].append(f"catalog row {v.ref} [{'/'.join(v.series)}]")
    for a in artifacts:
        if not a.sealed():
            report["corrupt"].append(f"catalog row {a.ref} [{'/'.join(a.series)}]")
    from rscale.store.catalog_cache import content_key
    snap = reg.cache.read_snapshot(content_key(reg.catalog))
    if snap is not None and snap != versions:
        report["corrupt"].append(reg.snapshot.name)
    expected = {reg.blobs.path(d) for d in referenced if is_digest(d)}
    for p in reg.blobs.files():
        if p in expected:
            continue
        if is_temp_name(p.name) or _blob_name_digest(p) is not None:
            report["leftovers"].append(str(p.relative_to(reg.root)))
        else:
            report["extra"].append(str(p.relative_to(reg.root)))
    for p in _root_leftovers(reg):
        report["leftovers"].append(str(p.relative_to(reg.root)))
    return report


def _root_leftovers(reg) -> list[Path]:
    if not reg.root.is_dir():
        return []
    return sorted(p for p in reg.root.iterdir() if p.name.startswith(IMPORT_PREFIX) or is_temp_name(p.name))


def _age_s(path: Path, now: float) -> float:
    """Seconds since anything in ``path`` last changed (a folder: its newest entry)."""
    newest = path.lstat().st_mtime
    if path.is_dir() and not path.is_symlink():
        for p in path.rglob("*"):
            try:
                newest = max(newest, p.lstat().st_mtime)
            except FileNotFoundError:
                pass
    return now - newest


def _size(path: Path) -> int:
    if path.is_dir() and not path.is_symlink():
        return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file())
    return path.lstat().st_size


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        for p in [path, *path.rglob("*")]:
            if p.is_dir():
                os.chmod(p, 0o755)
        shutil.rmtree(path)
    else:
        try:
            os.chmod(path, 0o644)
        except OSError:
            pass
        path.unlink()


def gc(reg, *, grace_s: float = DEFAULT_GRACE_S, dry_run: bool = True, clock=time.time) -> dict:
    """Free leftovers older than ``grace_s`` seconds: {'freed', 'kept', 'bytes', 'dry_run'}.

    Never removes a blob any version references: references are read, and files removed, while
    this process holds the catalog's write lock.
    """
    if not reg.exists():
        raise RegistryError(f"no registry at {reg.root} (no catalog.duckdb): nothing to collect")
    out = {"freed": [], "kept": [], "bytes": 0, "dry_run": dry_run}
    from rscale.store.artifacts import artifact_digests

    with reg.catalog.connect(write=True) as con:
        referenced = artifact_digests(con)
        from rscale.store.catalog import has_rerank_column
        rerank = "rerank" if has_rerank_column(con) else "NULL"
        for row in con.execute(f"SELECT hardness, tail, sample, {rerank} FROM versions").fetchall():
            referenced.update(d for d in row if d)
        now = clock()
        candidates = [p for p in reg.blobs.files()
                      if is_temp_name(p.name) or (_blob_name_digest(p) is not None
                                                  and _blob_name_digest(p) not in referenced)]
        candidates += _root_leftovers(reg)
        touched = set()
        for p in candidates:
            rel = str(p.relative_to(reg.root))
            if _age_s(p, now) < grace_s:
                out["kept"].append(rel)
                continue
            out["bytes"] += _size(p)
            out["freed"].append(rel)
            if not dry_run:
                _remove(p)
                touched.add(p.parent)
        if not dry_run:
            forgotten = [d for (d,) in con.execute("SELECT digest FROM blobs").fetchall() if d not in referenced]
            for d in forgotten:
                if not reg.blobs.present(d):
                    con.execute("DELETE FROM blobs WHERE digest = ?", [d])
            for d in touched:
                fsync_dir(d)
                if d != reg.blobs.root and d.parent == reg.blobs.root and not any(d.iterdir()):
                    d.rmdir()
    return out


__all__ = ["DEFAULT_GRACE_S", "IMPORT_PREFIX", "gc", "referenced_digests", "verify"]
