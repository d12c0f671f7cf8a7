"""The content-addressed blob store: ``blobs/sha256/<2 hex>/<64 hex>.parquet``, read-only files
named by the sha256 of their bytes.

Writing (:meth:`BlobStore.put`) copies to a temporary name in the blob's folder, re-hashes the
copy, makes it read-only, renames it into place and fsyncs the folder. A blob that is already
present and intact is not rewritten, only touched: its mtime restarts ``rscale gc``'s grace
period, so a registration about to reference it is not racing a collection. A damaged one is
replaced, so registering or importing the content again repairs it.

Reading (:meth:`BlobStore.verified`) never trusts a file by its name: the first read of a blob in
a process checks that it is a regular file (not a symlink), of the recorded size, whose sha256 is
its name; the result is cached by (path, inode, mtime, ctime, size), so later reads cost one
``stat`` and a blob swapped, edited or relinked afterwards is checked again.
"""

from __future__ import annotations

import os
import shutil
import stat as stat_
from pathlib import Path

from rscale.errors import RegistryError
from rscale.store.atomic import atomic_path
from rscale.store.hashing import hex_of, is_digest, sha256_file

_VERIFIED: dict[str, tuple] = {}   # blob path -> (inode, mtime_ns, size) of the file that hashed right


def corrupt_error(digest: str, owner: str, problem: str) -> RegistryError:
    return RegistryError(f"blob {digest} ({owner}) corrupt: {problem}. Run 'rscale verify' and restore it "
                         "(rscale import BUNDLE, or dvc pull)")


class BlobStore:
    def __init__(self, root: Path):
        self.root = Path(root)          # .../blobs/sha256

    def path(self, digest: str) -> Path:
        if not is_digest(digest):
            raise RegistryError(f"{digest!r} is not a sha256 digest; the catalog is damaged: run 'rscale verify'")
        hexd = hex_of(digest)
        return self.root / hexd[:2] / f"{hexd}.parquet"

    def put(self, src) -> tuple[str, bool]:
        """Copy a file in (atomic, durable, read-only): (digest, whether this call created it)."""
        digest = sha256_file(src)
        dest = self.path(digest)
        if self.present(digest, os.path.getsize(src)) and sha256_file(dest) == digest:
            try:
                os.utime(dest)          # restart gc's grace period: someone is about to reference it
            except OSError:
                pass
            return digest, False
        with atomic_path(dest, mode=0o444) as tmp:
            shutil.copyfile(src, tmp)
            if sha256_file(tmp) != digest:
                raise RegistryError(f"copy of {src} changed while being written; try again")
        return digest, True

    def present(self, digest: str, size: int | None = None) -> bool:
        """A regular file of the right size (no hashing): the pre-commit check of a registration."""
        try:
            st = os.lstat(self.path(digest))
        except FileNotFoundError:
            return False
        return stat_.S_ISREG(st.st_mode) and (size is None or st.st_size == size)

    def verified(self, digest: str, owner: str = "", size: int | None = None) -> Path:
        """The path of a blob whose bytes were checked against its digest (once per file identity)."""
        p = self.path(digest)
        owner = owner or "this version"
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            raise RegistryError(f"the blob {digest} of {owner} is missing from {self.root.parent.parent}. "
                                "Run 'rscale verify' and restore it (rscale import BUNDLE, or dvc pull)") from None
        if stat_.S_ISLNK(st.st_mode):
            raise corrupt_error(digest, owner, "it is a symbolic link, not a stored file")
        if not stat_.S_ISREG(st.st_mode):
            raise corrupt_error(digest, owner, "it is not a regular file")
        if size is not None and st.st_size != size:
            raise corrupt_error(digest, owner, f"{st.st_size} bytes, the catalog records {size}")
        key = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)    # ctime: a utime() cannot fake it
        if _VERIFIED.get(str(p)) != key:
            try:
                actual = sha256_file(p)
            except OSError as exc:
                raise corrupt_error(digest, owner, f"unreadable ({exc.strerror})") from None
            if actual != digest:
                _VERIFIED.pop(str(p), None)
                raise corrupt_error(digest, owner, "its bytes do not hash to its name")
            _VERIFIED[str(p)] = key
        return p

    def files(self):
        """Every file under the blob folder (stored blobs, leftovers, strays), sorted."""
        if not self.root.exists():
            return []
        return sorted(p for p in self.root.rglob("*") if p.is_file() or p.is_symlink())


def clear_verified_cache() -> None:
    _VERIFIED.clear()


__all__ = ["BlobStore", "clear_verified_cache", "corrupt_error"]
