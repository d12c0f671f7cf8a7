"""Deterministic uniform sampling of a distractor pool by hashing (seed, id).

Each id gets u = hash(seed, id) / 2^64, uniform on [0, 1) and independent across ids; the sample of
share f is {id : u < f}. So any share is reproducible from the ids alone, before a descriptor is
read; samples of growing shares are nested (the 1% sample lies inside the 5% one, which the
sufficient-budget diagnostic needs); and a different seed gives an independent sample.

Integer ids hash with splitmix64 (vectorised); other ids (strings) with BLAKE2b-64 of
``seed:id`` (one call per id, ~1 us).
"""

from __future__ import annotations

import hashlib

import numpy as np

from rscale.errors import InvalidArgumentError

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def hash_uniform(ids, seed: int = 0) -> np.ndarray:
    """u in [0, 1) per id, a deterministic function of (seed, id)."""
    ids = np.asarray(ids)
    if ids.dtype.kind in "iu":
        with np.errstate(over="ignore"):
            x = ids.astype(np.uint64) ^ _splitmix64(np.full(ids.shape, seed, dtype=np.uint64))
        return (_splitmix64(x) >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    prefix = f"{int(seed)}:".encode()
    out = np.empty(ids.shape[0], dtype=np.float64)
    for i, v in enumerate(ids.astype(str)):
        h = hashlib.blake2b(prefix + v.encode(), digest_size=8).digest()
        out[i] = (int.from_bytes(h, "little") >> 11) / float(1 << 53)
    return out


def in_sample(ids, fraction: float, seed: int = 0) -> np.ndarray:
    """Boolean mask of the ids in the ``fraction`` sample (nested in fraction for a fixed seed)."""
    if not 0.0 < fraction <= 1.0:
        raise InvalidArgumentError(f"sample fraction must lie in (0, 1], got {fraction}")
    if fraction == 1.0:
        return np.ones(np.asarray(ids).shape[0], dtype=bool)
    return hash_uniform(ids, seed) < fraction
