"""Content digests: the one home for sha256 in rscale.

An artifact's identity is ``sha256:<64 hex>`` of its bytes (:func:`sha256_file`,
:func:`sha256_bytes`); a record's identity is the digest of its canonical JSON
(:func:`canonical_digest`: sorted keys, no spaces, so equal values hash equally);
a set of lines (an image list, ids) hashes sorted (:func:`digest_lines`).
"""

from __future__ import annotations

import hashlib
import json
import re

PREFIX = "sha256:"
DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")


def sha256_bytes(data: bytes) -> str:
    return PREFIX + hashlib.sha256(data).hexdigest()


def sha256_file(path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return PREFIX + h.hexdigest()


def canonical_json(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()


def canonical_digest(obj) -> str:
    """sha256 of the canonical (sorted, compact) JSON of ``obj``: a lineage or record identity."""
    return sha256_bytes(canonical_json(obj))


def digest_lines(lines) -> str:
    """sha256 of a sorted list of text lines (an image list, a set of ids)."""
    h = hashlib.sha256()
    for line in sorted(lines):
        h.update(line.encode())
        h.update(b"\n")
    return PREFIX + h.hexdigest()


def is_digest(text) -> bool:
    return isinstance(text, str) and DIGEST_RE.fullmatch(text) is not None


def hex_of(digest: str) -> str:
    return digest.split(":", 1)[1]


__all__ = ["PREFIX", "canonical_digest", "canonical_json", "digest_lines", "hex_of", "is_digest",
           "sha256_bytes", "sha256_file"]
