"""Ragged per-query arrays: a flat array of per-positive values plus ``offsets``.

Query q owns ``values[offsets[q]:offsets[q+1]]``. This is how every per-positive
quantity travels (hardness, counts, scores) so that work is vectorised over queries
instead of looping in Python.
"""

from __future__ import annotations

import numpy as np

from rscale.errors import InvalidArgumentError


def check_offsets(offsets: np.ndarray, n_values: int) -> np.ndarray:
    """Return offsets as int64 after checking they start at 0, end at n_values, never decrease."""
    off = np.asarray(offsets)
    if off.ndim != 1 or off.size < 1:
        raise InvalidArgumentError("offsets must be a 1-D array of length n_queries + 1")
    off = off.astype(np.int64, copy=False)
    if off[0] != 0 or off[-1] != n_values:
        raise InvalidArgumentError(
            f"offsets must start at 0 and end at the number of values ({n_values}); "
            f"got {int(off[0])} .. {int(off[-1])}")
    if np.any(np.diff(off) < 0):
        raise InvalidArgumentError("offsets must be non-decreasing")
    return off


def group_index(offsets: np.ndarray) -> np.ndarray:
    """Query index of every flat value: ``[0,0,1,2,2,2]`` for offsets ``[0,2,3,6]``."""
    sizes = np.diff(offsets)
    return np.repeat(np.arange(sizes.size, dtype=np.int64), sizes)


def position_in_group(offsets: np.ndarray) -> np.ndarray:
    """1-based position of every flat value inside its query: ``[1,2,1,1,2,3]``."""
    sizes = np.diff(offsets)
    n = int(offsets[-1])
    return np.arange(1, n + 1, dtype=np.int64) - np.repeat(offsets[:-1], sizes)


def sort_within_groups(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Permutation that sorts ``values`` ascending inside each query, queries kept in order.

    Already-sorted input (the common case: estimators emit positives best-first) costs one pass.
    """
    n = values.size
    if n > 1:
        same = np.ones(n - 1, dtype=bool)
        starts = offsets[1:-1]
        same[starts[(starts > 0) & (starts < n)] - 1] = False
        if not np.any((np.diff(values) < 0) & same):
            return np.arange(n)
    return np.lexsort((values, group_index(offsets)))


def group_sum(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per-query sum of a flat array (empty queries sum to 0)."""
    q = offsets.size - 1
    return np.bincount(group_index(offsets), weights=values, minlength=q)[:q]
