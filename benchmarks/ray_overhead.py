"""What the Ray engine costs against the local one on this machine: start-up, per task, per shard
(scoring) and per actor / per image (extraction). Not a test: figures for docs/benchmarks.md.

Scoring: the same simulated descriptor sets scored by the local engine and by one Ray task per
shard, at two shard counts, so that (ray - local) / shards is the per-shard overhead. Extraction:
a small random ViT on generated images, local against a Ray Data actor pool, at two image counts
(the slope is the per-image cost, the intercept the actor start-up). Both engines write the same
bytes (tests/test_distributed.py); only the time differs.

Run: .venv/bin/python benchmarks/ray_overhead.py [--distractors 400000] [--queries 200]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

import argparse  # noqa: E402
import logging  # noqa: E402
import platform  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from _timing import best_of  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--distractors", type=int, default=400_000)
    ap.add_argument("--shards", type=int, nargs=2, default=[4, 32])
    ap.add_argument("--images", type=int, nargs=2, default=[32, 160])
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)

    import ray

    from rscale import api
    tmp = Path(tempfile.mkdtemp(prefix="rscale-ray-bench-"))
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, "
          f"ray {ray.__version__}, numpy {np.__version__}")
    t_import, _ = best_of(lambda: __import__("ray.data"), 1)
    t_init, _ = best_of(lambda: ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False,
                                         logging_level=logging.ERROR), 1)
    print(f"start-up: import ray.data {t_import:.2f} s, ray.init(num_cpus={args.cpus}) {t_init:.2f} s")

    @ray.remote(num_cpus=1)
    def nothing(x):
        return x

    ray.get([nothing.remote(i) for i in range(20)])                      # workers up
    n = 400
    t_tasks, _ = best_of(lambda: ray.get([nothing.remote(i) for i in range(n)]), 1)
    big = np.zeros((200, 4000), np.float32)                               # a partial's top-K at Q=200, K=4000
    t_big, _ = best_of(lambda: ray.get([nothing.remote(big) for _ in range(50)]), 1)
    print(f"per task: {1e3 * t_tasks / n:.2f} ms (empty, {n} in flight); with a 3.2 MB argument and result "
          f"{1e3 * t_big / 50:.2f} ms")

    rows = []
    for shards in args.shards:
        root = tmp / f"sets{shards}"
        api.make_descriptor_sets(root, instances=args.queries, dim=args.dim, positives=4,
                                 distractors=args.distractors, shard_size=-(-args.distractors // shards), seed=0)
        kw = dict(queries_dir=root / "queries", positives_dir=root / "positives", qrels=root / "qrels.parquet",
                  distractors_dir=root / "distractors", k=1000, backend="numpy", lineage=False)
        for fraction in (1.0, 0.1):
            t_loc, _ = best_of(lambda: api.score(**kw, out=tmp / "l.parquet", fraction=fraction), args.repeats)
            t_ray, _ = best_of(lambda: api.score(**kw, out=tmp / "r.parquet", fraction=fraction, engine="ray"),
                               args.repeats)
            same = (tmp / "l.parquet").read_bytes() == (tmp / "r.parquet").read_bytes()
            rows.append((shards, fraction, t_loc, t_ray, same))
    print(f"\nscoring {args.queries} queries x {args.distractors:,} distractors x d={args.dim}, K=1000 "
          "(wall s, whole api.score: reading, scoring, writing)")
    print("| shards | fraction | local | ray | ray - local per shard | same bytes |")
    print("|---|---|---|---|---|---|")
    for shards, fraction, t_loc, t_ray, same in rows:
        print(f"| {shards} | {fraction:g} | {t_loc:.2f} | {t_ray:.2f} | {1e3 * (t_ray - t_loc) / shards:.0f} ms | "
              f"{same} |")

    import torch
    import transformers
    from PIL import Image
    torch.manual_seed(0)
    transformers.ViTModel(transformers.ViTConfig(hidden_size=192, num_hidden_layers=4, num_attention_heads=3,
                                                 intermediate_size=768, image_size=112, patch_size=16)
                          ).save_pretrained(tmp / "vit")
    rng = np.random.default_rng(0)
    folder = tmp / "imgs"
    folder.mkdir()
    for i in range(max(args.images)):
        Image.fromarray((rng.random((128, 160, 3)) * 255).astype(np.uint8)).save(folder / f"im{i:04d}.png")
    ext = []
    api.extract(folder, tmp / "vit", out=tmp / "warm", batch_size=16, shard_size=64, progress=False)  # torch warm
    for count in args.images:
        sub = tmp / f"imgs{count}"
        sub.mkdir()
        for p in sorted(folder.iterdir())[:count]:
            (sub / p.name).symlink_to(p)
        kw = dict(batch_size=16, shard_size=64, progress=False)
        # a fresh folder per call: a second call into the same one would resume (nothing to do)
        t_loc, _ = best_of(lambda: api.extract(sub, tmp / "vit", out=tempfile.mkdtemp(dir=tmp), **kw), args.repeats)
        t_ray, info = best_of(lambda: api.extract(sub, tmp / "vit", out=tempfile.mkdtemp(dir=tmp), **kw, engine="ray"),
                              args.repeats)
        ext.append((count, t_loc, t_ray, info))
    print(f"\nextraction, random ViT (4 x 192, 112 px, patch 16), batch 16, shards of 64 (wall s)")
    print("| images | local | ray (actors x threads) | ray - local |")
    print("|---|---|---|---|")
    for count, t_loc, t_ray, info in ext:
        print(f"| {count} | {t_loc:.2f} | {t_ray:.2f} ({info['actors']} x {info['threads_per_actor']}) | "
              f"{t_ray - t_loc:.2f} |")
    (c0, l0, r0, _), (c1, l1, r1, _) = ext
    print(f"per image: local {1e3 * (l1 - l0) / (c1 - c0):.1f} ms, ray {1e3 * (r1 - r0) / (c1 - c0):.1f} ms; "
          f"fixed cost of a Ray Data run (actor start, model load, pipeline): {r0 - (r1 - r0) / (c1 - c0) * c0:.1f} s")
    ray.shutdown()


if __name__ == "__main__":
    main()
