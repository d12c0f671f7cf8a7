"""O2I render throughput: pybullet TinyRenderer at the default protocol (512 x 512, 5 distances).

Renders N objects x 5 distances into an empty cache (cold: asset read + normalisation, frames,
PNG + mask writes, the manifest), then again (warm: everything read from the cache, nothing
drawn). Reports renders/s and the split between asset loading, TinyRenderer frames and the rest
(PNG encoding, hashing, manifest), and extrapolates linearly to the 1,000 procedural objects.

Run: PYTHONPATH=src .venv/bin/python benchmarks/render_speed.py [--objects 50] [--resolution 512] [--workers 1]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from importlib.metadata import version

from rscale.producers import o2i
from rscale.producers.o2i import assets as assets_mod
from rscale.producers.o2i import render as render_mod


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, default=50)
    ap.add_argument("--resolution", type=int, default=512)
    ap.add_argument("--kind", default="random", choices=("random", "real", "all"))
    ap.add_argument("--workers", type=int, default=1, help="render processes (frame timing only with 1)")
    args = ap.parse_args(argv)

    assets = o2i.pybullet_assets(args.kind, limit=args.objects)
    protocol = o2i.RenderProtocol(resolution=args.resolution)
    n = len(assets) * len(protocol.distances)

    t = time.perf_counter()
    for a in assets:
        o2i.normalisation(a)
    t_assets = time.perf_counter() - t
    assets_mod._normalisation.cache_clear()            # the cold run below reads them again

    frame_time = [0.0]
    original = render_mod.TinyRenderer.render_distances

    def timed(self, *a, **k):
        t0 = time.perf_counter()
        out = original(self, *a, **k)
        frame_time[0] += time.perf_counter() - t0
        return out

    render_mod.TinyRenderer.render_distances = timed
    with tempfile.TemporaryDirectory() as cache:
        t = time.perf_counter()
        rs = o2i.render_set(assets, protocol, cache_dir=cache, progress=False, workers=args.workers)
        t_cold = time.perf_counter() - t
        t = time.perf_counter()
        again = o2i.render_set(assets, protocol, cache_dir=cache, progress=False)
        t_warm = time.perf_counter() - t
    render_mod.TinyRenderer.render_distances = original
    assert rs.rendered == n and again.rendered == 0
    o = rs.o2i_matrix()

    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}, "
          f"pybullet {version('pybullet')}, trimesh {version('trimesh')}")
    print(f"{len(assets)} {args.kind} objects x {len(protocol.distances)} distances = {n} renders "
          f"at {args.resolution}x{args.resolution}, {args.workers} worker(s), load average {os.getloadavg()[0]:.1f}")
    print(f"asset read + normalisation (trimesh): {t_assets:.2f} s ({t_assets / len(assets) * 1e3:.1f} ms/object)")
    rest = t_cold - frame_time[0] - t_assets
    if args.workers > 1:                  # frames are drawn in the workers: no split
        print(f"cold render_set: {t_cold:.2f} s = {n / t_cold:.1f} renders/s")
    else:
        print(f"cold render_set: {t_cold:.2f} s = {n / t_cold:.1f} renders/s; TinyRenderer frames "
              f"{frame_time[0]:.2f} s ({n / frame_time[0]:.1f} frames/s, {frame_time[0] / n * 1e3:.1f} ms/frame), "
              f"asset reads ~{t_assets:.2f} s, PNG + hashing + manifest ~{rest:.2f} s")
    print(f"warm re-run (nothing drawn): {t_warm:.2f} s = {n / t_warm:.0f} renders/s")
    print(f"O2I by distance (mean over objects): {', '.join(f'{x:.4f}' for x in o.mean(axis=0))}")
    per = t_cold / len(assets)
    print(f"extrapolated to 1,000 objects x 5 distances (linear, not measured): {1000 * per:.0f} s cold, "
          f"{1000 * t_warm / len(assets):.1f} s warm")


if __name__ == "__main__":
    main()
