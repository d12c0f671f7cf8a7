"""The benchmarks' one timer: call a function a few times and keep the fastest or the median.

Scripts in benchmarks/ run as ``python benchmarks/NAME.py``, so this folder is on their path and
they import it as ``from _timing import best_of, median_of``.
"""

from __future__ import annotations

import statistics
import time


def _times(fn, repeat: int):
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return times, out


def best_of(fn, repeat: int = 5):
    """(fastest wall time in seconds of ``repeat`` calls of ``fn``, the last call's result).
    On a shared machine the fastest call is the one least disturbed by other work."""
    times, out = _times(fn, repeat)
    return min(times), out


def median_of(fn, repeat: int = 20):
    """(median wall time in seconds of ``repeat`` calls of ``fn``, the last call's result): for
    what is meant to include the machine's usual noise (process starts, cold caches)."""
    times, out = _times(fn, repeat)
    return statistics.median(times), out
