"""What `rscale score`'s input checks cost, side by side with the scoring they guard.

Before scoring, every shard of the three descriptor sets is re-hashed against its manifest
(a stale or edited set is refused), and while streaming, the scored rows' norms are checked (one
einsum per chunk: NaN, inf and non-unit vectors are refused with their file and row). This run
times both passes alone and api.score at fraction 1 and 0.05, on the same simulated sets.

Run: .venv/bin/python benchmarks/score_input_checks.py [--distractors 400000] [--dim 64]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

import argparse  # noqa: E402
import platform  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from _timing import best_of  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--instances", type=int, default=200)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--distractors", type=int, default=400_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    from rscale import api
    from rscale.store.descriptor_set import DescriptorSet

    with tempfile.TemporaryDirectory() as tmp:
        sets = Path(tmp) / "sets"
        api.make_descriptor_sets(sets, instances=args.instances, dim=args.dim, distractors=args.distractors, seed=0)
        names = ("queries", "positives", "distractors")
        opened = [DescriptorSet.open(sets / n) for n in names]
        verify, _ = best_of(lambda: [d.verify() for d in opened], args.repeat)

        def norms():
            for _, v in opened[2].shards():
                for a in range(0, len(v), 16384):
                    b = np.asarray(v[a:a + 16384], dtype=np.float32)
                    np.sqrt(np.einsum("ij,ij->i", b, b))
        norm, _ = best_of(norms, args.repeat)
        print(f"python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}, "
              f"{os.cpu_count()} cpus; Q={args.instances}, d={args.dim}, distractors={args.distractors:,}")
        print(f"digest check of the three sets: {verify:.3f} s; norm check of every distractor row: {norm:.3f} s "
              "(an upper bound: it includes the float32 conversion scoring does anyway)")
        for fraction in (1.0, 0.05):
            total, _ = best_of(lambda: api.score(*(sets / n for n in names[:2]), qrels=sets / "qrels.parquet",
                                                 distractors_dir=sets / "distractors", out=Path(tmp) / "ss.parquet",
                                                 fraction=fraction, k=200, backend="numpy", lineage=False),
                               args.repeat)
            share = fraction * norm
            print(f"api.score fraction {fraction:g}: {total:.3f} s, of which digests {verify / total:.0%} and "
                  f"norms ~{share / total:.0%} (scored rows only)")


if __name__ == "__main__":
    main()
