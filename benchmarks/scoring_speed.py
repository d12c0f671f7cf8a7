"""Scoring-engine throughput against a bare matrix multiply of the same shape, side by side.

Issue 5 target: Q=1,000 queries, d=768, 1M distractors; throughput (distractors scored per second,
top-K selection and positive counts included) as a ratio to the bare float32 GEMM measured in the
same run, >= 0.8; peak memory that does not grow with S; faiss vs the BLAS path.
Chunks are generated outside the timed region.

Run: .venv/bin/python benchmarks/scoring_speed.py [--distractors 1000000] [--k 4000]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")  # as the rscale command does; set 28 to see OpenBLAS' default

import argparse  # noqa: E402
import platform  # noqa: E402
import time
import tracemalloc

import numpy as np  # noqa: E402


def unit(rng, n, d):
    v = rng.standard_normal((n, d), dtype=np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--distractors", type=int, default=1_000_000)
    ap.add_argument("--chunk", type=int, default=16384)
    ap.add_argument("--k", type=int, default=4000)
    args = ap.parse_args(argv)
    from rscale.score.engine import Queries, empty_partial, score_chunk

    rng = np.random.default_rng(0)
    q = unit(rng, args.queries, args.dim)
    pos = unit(rng, args.queries * 5, args.dim) * 0.3 + np.repeat(q, 5, axis=0)
    pos /= np.linalg.norm(pos, axis=1, keepdims=True)
    queries = Queries.build(q, np.arange(args.queries).astype(str), pos, np.arange(len(pos)).astype(str),
                            lambda i: np.arange(5 * i, 5 * i + 5))
    n_chunks = args.distractors // args.chunk

    def chunks(seed=1):
        r = np.random.default_rng(seed)
        for _ in range(n_chunks):
            yield unit(r, args.chunk, args.dim)

    results = {}

    def run(name, fn, memory=False):
        total = 0.0
        if memory:
            tracemalloc.start()
        for c in chunks():
            t = time.perf_counter()
            fn(c)
            total += time.perf_counter() - t
        peak = tracemalloc.get_traced_memory()[1] if memory else 0
        if memory:
            tracemalloc.stop()
        results[name] = (total, peak)

    # the target ratio: bare GEMM and engine alternate on the same chunks (no drift between passes)
    state = empty_partial(queries, args.k)
    t_gemm = t_engine = 0.0
    tracemalloc.start()
    for c in chunks():
        t = time.perf_counter()
        q @ c.T
        t_gemm += time.perf_counter() - t
        t = time.perf_counter()
        score_chunk(queries, c, state)
        t_engine += time.perf_counter() - t
    results["bare GEMM (numpy q @ d.T)"] = (t_gemm, 0)
    results["rscale engine, numpy/BLAS"] = (t_engine, tracemalloc.get_traced_memory()[1])
    tracemalloc.stop()
    naive_top = {"t": np.full((args.queries, args.k), -np.inf, np.float32)}

    def naive(c):
        s = q @ c.T
        both = np.concatenate([naive_top["t"], s], axis=1)
        naive_top["t"] = -np.partition(-both, args.k - 1, axis=1)[:, :args.k]
    run("naive GEMM + argpartition", naive)
    try:
        import faiss  # noqa: F401

        from rscale.score.faiss_backend import knn_top
        state_f = empty_partial(queries, args.k)
        run("rscale engine, faiss GEMM", lambda c: score_chunk(queries, c, state_f, backend="faiss"))
        run(f"faiss IndexFlatIP search k={args.k}", lambda c: knn_top(q, c, args.k))
    except ImportError:
        pass
    # peak memory at a quarter of S (must not grow with S)
    state_small = empty_partial(queries, args.k)
    tracemalloc.start()
    for i, c in enumerate(chunks(2)):
        if i >= max(n_chunks // 4, 1):
            break
        score_chunk(queries, c, state_small)
    peak_small = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()

    s = n_chunks * args.chunk
    base = results["bare GEMM (numpy q @ d.T)"][0]
    print(f"machine: {platform.machine()}, Python {platform.python_version()}, numpy {np.__version__}, "
          f"OPENBLAS_THREAD_TIMEOUT={os.environ['OPENBLAS_THREAD_TIMEOUT']}; "
          f"Q={args.queries}, d={args.dim}, S={s:,}, chunk={args.chunk}, K={args.k}")
    for name, (t, peak) in results.items():
        mem = f"  peak {peak / 2**20:7.0f} MiB" if peak else ""
        print(f"{name:34s} {t:7.2f} s  {s / t / 1e3:9.0f}k distractors/s  ratio to GEMM {base / t:5.2f}{mem}")
    print(f"engine peak memory at S/4: {peak_small / 2**20:.0f} MiB (at S: "
          f"{results['rscale engine, numpy/BLAS'][1] / 2**20:.0f} MiB)")


if __name__ == "__main__":
    main()
