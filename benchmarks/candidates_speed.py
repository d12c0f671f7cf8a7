"""Cost of keeping each query's top-R candidates by id in the scoring engine, side by side.

One process, the same queries and distractor chunks, the engine with ``candidates`` 0 (off, the
default), R = 63 (K' 1000 of a 5% sample) and R = 1000; best of ``--repeats`` runs each.

Run: PYTHONPATH=src python benchmarks/candidates_speed.py [--queries 500 --distractors 200000 --dim 64]
"""

from __future__ import annotations

import argparse
import os
import platform
import time

os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

import numpy as np  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--distractors", type=int, default=200_000)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--k", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)
    from rscale.score.engine import Queries, empty_partial, score_chunk
    from rscale.sim.descriptors import make_descriptors

    d = make_descriptors(n_instances=args.queries, d=args.dim, positives_per_instance=3,
                         n_distractors=args.distractors, hard_share=0.001, seed=0)
    q = Queries.build(d.queries, d.query_ids, d.positives, d.positive_ids, d.positives_of)
    chunks = [d.distractors[a:a + 16384] for a in range(0, args.distractors, 16384)]
    rows = []
    for r in (0, 63, 1000):
        best = float("inf")
        for _ in range(args.repeats):
            t = time.perf_counter()
            state = empty_partial(q, args.k, candidates=r)
            start = 0
            for c in chunks:
                score_chunk(q, c, state, positions=np.arange(start, start + len(c)) if r else None)
                start += len(c)
            state.flush()
            best = min(best, time.perf_counter() - t)
        rows.append((r, best))
    base = rows[0][1]
    print(f"{platform.machine()} numpy {np.__version__}; Q={args.queries} N={args.distractors} d={args.dim} K={args.k}")
    print("| candidates R | seconds | vs off |\n|---|---|---|")
    for r, s in rows:
        print(f"| {r or 'off'} | {s:.2f} | {s / base:.2f}x |")


if __name__ == "__main__":
    main()
