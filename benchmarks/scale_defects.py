"""Costs that grow with the pool or the query count, at sizes past the tests': the descriptor-set
writer's unique-id check (a Python set of every id before, 8-byte sorted keys now), reading qrels
and building the scorer's query side at 100k queries, hash sampling per 1M ids.

Run: .venv/bin/python benchmarks/scale_defects.py [--ids 2000000] [--queries 100000]
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np


def measured(fn):
    """(seconds of an untraced call, peak traced memory of a second, traced call, result):
    tracemalloc slows every allocation, so time and memory are taken in separate calls."""
    t = time.perf_counter()
    fn()
    secs = time.perf_counter() - t
    tracemalloc.start()
    out = fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return secs, peak, out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--ids", type=int, default=2_000_000)
    ap.add_argument("--block", type=int, default=4096)
    ap.add_argument("--queries", type=int, default=100_000)
    args = ap.parse_args(argv)
    from rscale.store.unique_ids import UniqueIds

    print(f"unique-id check, {args.ids:,} ids in blocks of {args.block} (time, peak traced memory, extrapolated to 100M)")
    for kind in ("int", "str"):
        blocks = [np.arange(a, min(a + args.block, args.ids)) for a in range(0, args.ids, args.block)]
        if kind == "str":
            blocks = [np.array([f"distractors/{x:09d}" for x in b]) for b in blocks]

        def with_set():
            seen = set()
            for b in blocks:
                values = b.tolist()
                if len(set(values)) != len(values) or any(v in seen for v in values):
                    raise AssertionError
                seen.update(values)
            return seen

        def with_keys():
            u = UniqueIds()
            for b in blocks:
                assert u.add(b) is None
            return u

        for name, fn in (("python set (before)", with_set), ("UniqueIds (now)", with_keys)):
            secs, peak, _ = measured(fn)
            scale = 1e8 / args.ids
            print(f"  {kind:3s} {name:20s} {secs:6.2f} s  {peak / 2**20:7.0f} MiB  -> 100M: "
                  f"{secs * scale / 60:5.1f} min, {peak * scale / 2**30:5.1f} GiB")

    import tempfile
    from pathlib import Path

    import pyarrow as pa
    import pyarrow.parquet as pq

    from rscale.api.scoring import read_qrels
    from rscale.score.engine import Queries
    q, per = args.queries, 5
    tmp = Path(tempfile.mkdtemp())
    pq.write_table(pa.table({"query_id": np.repeat([f"q{i}" for i in range(q)], per),
                             "positive_id": [f"p{i}" for i in range(q * per)]}), tmp / "qrels.parquet")
    secs, peak, rel = measured(lambda: read_qrels(tmp / "qrels.parquet"))
    print(f"\nread_qrels, {q:,} queries x {per} positives: {secs:.2f} s, peak {peak / 2**20:.0f} MiB")
    rng = np.random.default_rng(0)
    d = 64
    qv = rng.standard_normal((q, d), dtype=np.float32)
    pv = rng.standard_normal((q * per, d), dtype=np.float32)
    q_ids = np.array([f"q{i}" for i in range(q)])
    p_ids = np.array([f"p{i}" for i in range(q * per)])
    where = {p: i for i, p in enumerate(p_ids)}
    secs, peak, _ = measured(lambda: Queries.build(qv, q_ids, pv, p_ids, lambda i: [where[p] for p in rel[q_ids[i]]]))
    print(f"Queries.build (positive scores, one GEMV per query), {q:,} queries: {secs:.2f} s, peak {peak / 2**20:.0f} MiB")

    from rscale.score.sampling import in_sample
    ints = np.arange(1_000_000)
    strs = np.array([f"distractors/{x:09d}" for x in range(200_000)])
    t = time.perf_counter()
    in_sample(ints, 0.05)
    t_int = time.perf_counter() - t
    t = time.perf_counter()
    in_sample(strs, 0.05)
    t_str = (time.perf_counter() - t) * 5
    print(f"\nhash sampling per 1M ids: integer ids {t_int * 1e3:.0f} ms, string ids {t_str:.2f} s (BLAKE2b per id)")


if __name__ == "__main__":
    main()
