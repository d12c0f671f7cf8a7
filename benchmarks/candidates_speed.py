"""Cost of keeping each query's top-R candidates by id in the scoring engine, side by side.

One process, the same queries and distractor chunks, the engine with ``candidates`` 0 (off, the
default), R = 63 (K' 1000 of a 5% sample) and R = 1000; best of ``--repeats`` runs each.

Run: PYTHONPATH=src python benchmarks/candidates_speed.py [--queries 500 --distractors 200000 --dim 64]
"""

from __future__ import annotations

import argparse
import os
import platform

os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

import numpy as np  # noqa: E402

from _timing import best_of  # noqa: E402
from _workload import add_workload_args  # noqa: E402


def main(argv=None):
    args = add_workload_args(argparse.ArgumentParser(description=__doc__.splitlines()[0])).parse_args(argv)
    from rscale.score.engine import Queries, empty_partial, score_chunk
    from rscale.sim.descriptors import make_descriptors

    d = make_descriptors(n_instances=args.queries, d=args.dim, positives_per_instance=3,
                         n_distractors=args.distractors, hard_share=0.001, seed=0)
    q = Queries.build(d.queries, d.query_ids, d.positives, d.positive_ids, d.positives_of)
    chunks = [d.distractors[a:a + 16384] for a in range(0, args.distractors, 16384)]
    rows = []
    def run(r):
        state = empty_partial(q, args.k, candidates=r)
        start = 0
        for c in chunks:
            score_chunk(q, c, state, positions=np.arange(start, start + len(c)) if r else None)
            start += len(c)
        state.flush()

    for r in (0, 63, 1000):
        rows.append((r, best_of(lambda: run(r), args.repeats)[0]))
    base = rows[0][1]
    print(f"{platform.machine()} numpy {np.__version__}; Q={args.queries} N={args.distractors} d={args.dim} K={args.k}")
    print("| candidates R | seconds | vs off |\n|---|---|---|")
    for r, s in rows:
        print(f"| {r or 'off'} | {s:.2f} | {s / base:.2f}x |")


if __name__ == "__main__":
    main()
