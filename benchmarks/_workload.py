"""The generated descriptor workload of the scoring benchmarks: its size options, one place.

Scripts that score ``rscale.sim.descriptors`` sets (``candidates_speed.py``, ``halves_cost.py``)
take the same four sizes and a repeat count, with the same defaults: Q = 500 queries, a pool of
200,000 distractors, d = 64, K = 1000, best of 2. Import as ``from _workload import add_workload_args``
(benchmarks/ is on a script's path, as for ``_timing``).
"""

from __future__ import annotations


def add_workload_args(ap, *, queries: int = 500, distractors: int = 200_000, dim: int = 64, k: int = 1000,
                      repeats: int = 2):
    """Add --queries, --distractors, --dim, --k and --repeats to the parser ``ap``; returns it."""
    ap.add_argument("--queries", type=int, default=queries)
    ap.add_argument("--distractors", type=int, default=distractors)
    ap.add_argument("--dim", type=int, default=dim)
    ap.add_argument("--k", type=int, default=k)
    ap.add_argument("--repeats", type=int, default=repeats)
    return ap
