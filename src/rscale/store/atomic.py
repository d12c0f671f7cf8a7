"""Atomic, durable file writes: the one home for temp-name-then-rename in rscale.

A file is written under a temporary name in its own folder (``.<name>.tmp-<pid>-<random>``, a
name ``rscale gc`` recognises as a leftover when a writer was killed), flushed to disk, renamed
over the target (atomic on one filesystem) and the folder is fsynced, so that after a power loss
the new name is either there with its full content or not there at all.
"""

from __future__ import annotations

import os
import random
from contextlib import contextmanager
from pathlib import Path

TMP_MARK = ".tmp-"


def temp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}{TMP_MARK}{os.getpid()}-{random.randrange(1 << 30)}")


def is_temp_name(name: str) -> bool:
    return name.startswith(".") and TMP_MARK in name


def fsync_file(path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def fsync_dir(path) -> None:
    """Make a rename or unlink inside ``path`` durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path, *, durable: bool = True, mode: int | None = None):
    """Yield a temporary path next to ``path``; on success it replaces ``path`` atomically.

    ``durable`` fsyncs the file before the rename and the folder after it; ``mode`` is applied
    before the rename (0o444 for blobs). On any error the temporary file is removed.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    try:
        yield tmp
        if durable:
            fsync_file(tmp)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
        if durable:
            fsync_dir(path.parent)
    finally:
        if tmp.exists():
            os.chmod(tmp, 0o644)
            tmp.unlink()


def write_bytes_atomic(path, data: bytes, *, durable: bool = True) -> Path:
    with atomic_path(path, durable=durable) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_text_atomic(path, text: str, *, durable: bool = True) -> Path:
    return write_bytes_atomic(path, text.encode(), durable=durable)


__all__ = ["TMP_MARK", "atomic_path", "fsync_dir", "fsync_file", "is_temp_name", "temp_path",
           "write_bytes_atomic", "write_text_atomic"]
