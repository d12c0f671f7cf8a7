"""O2I render throughput at the default protocol (512 x 512, 5 distances): pybullet's TinyRenderer
and, with ``--renderer pyrender`` or ``both``, pyrender on EGL (the o2i-pbr extra), side by side.

Renders N objects x 5 distances into an empty cache (cold: asset read + normalisation, frames,
PNG + mask writes, the manifest), then again (warm: everything read from the cache, nothing
drawn). Reports renders/s and the split between asset loading, frames and the rest (PNG
encoding, hashing, manifest), and extrapolates linearly to the 1,000 procedural objects. With
``both`` the renderers run one after the other on the same objects, each into its own cache, and
the last line compares their masks' O2I.

Run: PYTHONPATH=src .venv/bin/python benchmarks/render_speed.py [--objects 50] [--resolution 512] [--workers 1]
     [--renderer tinyrenderer|pyrender|both]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from importlib.metadata import version

import numpy as np

from rscale.producers import o2i
from rscale.producers.o2i import assets as assets_mod
from rscale.producers.o2i import render as render_mod


def renderer_class(name: str):
    if name == "pyrender":
        from rscale.producers.o2i import pbr
        return pbr.PyrenderRenderer
    return render_mod.TinyRenderer


def run_one(name: str, assets, protocol, args):
    n = len(assets) * len(protocol.distances)
    assets_mod._normalisation.cache_clear()
    t = time.perf_counter()
    for a in assets:
        o2i.normalisation(a)
    t_assets = time.perf_counter() - t
    cls = renderer_class(name)
    frame_time = [0.0]
    original = cls.render_distances

    def timed(self, *a, **k):
        t0 = time.perf_counter()
        out = original(self, *a, **k)
        frame_time[0] += time.perf_counter() - t0
        return out

    o2i.renderer_version(name)            # pyrender: the EGL probe, outside the timings
    assets_mod._normalisation.cache_clear()            # the cold run reads them again
    cls.render_distances = timed
    try:
        with tempfile.TemporaryDirectory() as cache:
            t = time.perf_counter()
            rs = o2i.render_set(assets, protocol, cache_dir=cache, renderer=name, progress=False,
                                workers=args.workers)
            t_cold = time.perf_counter() - t
            t = time.perf_counter()
            again = o2i.render_set(assets, protocol, cache_dir=cache, renderer=name, progress=False)
            t_warm = time.perf_counter() - t
    finally:
        cls.render_distances = original
    assert rs.rendered == n and again.rendered == 0
    o = rs.o2i_matrix()
    print(f"[{name}] {rs.renderer}")
    print(f"[{name}] asset read + normalisation (trimesh): {t_assets:.2f} s ({t_assets / len(assets) * 1e3:.1f} "
          "ms/object)")
    rest = t_cold - frame_time[0] - t_assets
    if args.workers > 1:                  # frames are drawn in the workers: no split
        print(f"[{name}] cold render_set: {t_cold:.2f} s = {n / t_cold:.1f} renders/s")
    else:
        print(f"[{name}] cold render_set: {t_cold:.2f} s = {n / t_cold:.1f} renders/s; frames "
              f"{frame_time[0]:.2f} s ({n / frame_time[0]:.1f} frames/s, {frame_time[0] / n * 1e3:.1f} ms/frame), "
              f"asset reads ~{t_assets:.2f} s, PNG + hashing + manifest ~{rest:.2f} s")
    print(f"[{name}] warm re-run (nothing drawn): {t_warm:.2f} s = {n / t_warm:.0f} renders/s")
    print(f"[{name}] O2I by distance (mean over objects): {', '.join(f'{x:.4f}' for x in o.mean(axis=0))}")
    per = t_cold / len(assets)
    print(f"[{name}] extrapolated to 1,000 objects x 5 distances (linear, not measured): {1000 * per:.0f} s cold, "
          f"{1000 * t_warm / len(assets):.1f} s warm")
    return o


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, default=50)
    ap.add_argument("--resolution", type=int, default=512)
    ap.add_argument("--kind", default="random", choices=("random", "real", "all"))
    ap.add_argument("--workers", type=int, default=1, help="render processes (frame timing only with 1)")
    ap.add_argument("--renderer", default="tinyrenderer", choices=(*o2i.RENDERERS, "both"))
    args = ap.parse_args(argv)

    assets = o2i.pybullet_assets(args.kind, limit=args.objects)
    protocol = o2i.RenderProtocol(resolution=args.resolution)
    n = len(assets) * len(protocol.distances)

    o2i.normalisation(assets[0])          # trimesh's import (and the writers' below), outside the timings
    import PIL.Image  # noqa: F401
    import pyarrow.parquet  # noqa: F401
    import rich.progress  # noqa: F401

    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}, "
          f"pybullet {version('pybullet')}, trimesh {version('trimesh')}")
    print(f"{len(assets)} {args.kind} objects x {len(protocol.distances)} distances = {n} renders "
          f"at {args.resolution}x{args.resolution}, {args.workers} worker(s), load average {os.getloadavg()[0]:.1f}")
    names = o2i.RENDERERS if args.renderer == "both" else (args.renderer,)
    o2is = [run_one(name, assets, protocol, args) for name in names]
    if len(o2is) == 2:
        rel = np.abs(o2is[1] - o2is[0]) / o2is[0]
        print(f"pyrender vs TinyRenderer O2I per render: median relative difference {np.median(rel):.4f}, "
              f"max {rel.max():.4f}")


if __name__ == "__main__":
    main()
