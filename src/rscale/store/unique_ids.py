"""Uniqueness of ids across a stream of blocks in 8 bytes per id (a Python set of 100M ids takes
gigabytes: docs/benchmarks.md, "Descriptor-set writer").

Each id becomes a 64-bit key: an integer id is its own key (exact); a string id its FNV-1a hash
over its code points, computed for a whole block at once. Keys live in one sorted array plus a few
smaller sorted runs merged into it as they grow (amortised O(n log n)). A key seen twice is only a
*candidate* duplicate for string ids (at 100M ids two distinct strings share a 64-bit hash with
probability ~3e-4): the caller's ``earlier()`` then gives back the ids already added, and the
candidate is confirmed or dismissed on the ids themselves, so the answer is exact.
"""

from __future__ import annotations

import numpy as np

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


def id_keys(ids) -> np.ndarray:
    """(n,) uint64 keys: integers as themselves, strings by FNV-1a over their code points."""
    ids = np.asarray(ids)
    if ids.dtype.kind in "iu":
        return ids.astype(np.int64).view(np.uint64)
    text = ids.astype(str)
    n, width = text.shape[0], text.dtype.itemsize // 4
    codes = text.view(np.uint32).reshape(n, width) if n else np.zeros((0, width), np.uint32)
    lengths = np.char.str_len(text)
    h = np.full(n, _FNV_OFFSET, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for col in range(width):                 # padding past a string's end is not hashed
            mixed = (h ^ codes[:, col].astype(np.uint64)) * _FNV_PRIME
            h = np.where(col < lengths, mixed, h)
    return h


class UniqueIds:
    """Ids added block by block; :meth:`add` returns the first id already present, or None."""

    def __init__(self):
        self._runs: list[np.ndarray] = []        # sorted key arrays, largest first
        self.count = 0

    @property
    def nbytes(self) -> int:
        return sum(r.nbytes for r in self._runs)

    def add(self, ids, earlier=None):
        """Add a block of ids. ``earlier()`` yields the blocks added before (only called to confirm
        a string-hash match). Returns the first duplicate id (within the block or against the
        earlier ones), else None; nothing is added when there is a duplicate."""
        ids = np.asarray(ids)
        keys = id_keys(ids)
        exact = ids.dtype.kind in "iu"
        order = np.argsort(keys, kind="stable")
        sk = keys[order]
        same = np.flatnonzero(sk[1:] == sk[:-1])
        if same.size and exact:                  # within the block
            return ids[order[same[0]]]
        if same.size:                            # string keys shared: compare the strings of each group
            seen: dict = {}
            for j in np.unique(order[np.concatenate([same, same + 1])]):
                v = str(ids[j])
                if v in seen.setdefault(keys[j], set()):
                    return v
                seen[keys[j]].add(v)
        if keys.size == 0:
            return None
        hits = np.zeros(keys.size, dtype=bool)
        for run in self._runs:                   # runs are never empty
            hits |= run[np.minimum(np.searchsorted(run, keys), run.size - 1)] == keys
        if hits.any():
            if exact:
                return ids[np.flatnonzero(hits)[0]]
            wanted = set(ids[hits].astype(str).tolist())
            for block in (earlier() if earlier is not None else ()):
                for v in np.asarray(block).astype(str).tolist():
                    if v in wanted:
                        return v
        self._runs.append(sk)
        self.count += keys.size
        self._runs.sort(key=len, reverse=True)
        while len(self._runs) > 1 and self._runs[-1].size * 4 >= self._runs[-2].size:
            small, big = self._runs.pop(), self._runs.pop()
            self._runs.append(np.sort(np.concatenate([big, small]), kind="stable"))
            self._runs.sort(key=len, reverse=True)
        return None
