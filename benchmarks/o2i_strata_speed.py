"""`rscale o2i stratify` cost at ILIAS-like size: box files and image headers, then the statistics.

Writes an ILIAS layout of INSTANCES instances (one query and POSITIVES positives each, small
JPEGs with box files) under a temporary folder, then times, side by side in one run:
rscale.store.ilias_layout.read_layout_boxes (one header read and one box file per image), the
query / positive ratio (rscale.api.o2i_strata.query_ratios) and rscale.core.o2i.stratify on
random paired hits and AP (3 measures, 5 bins, McNemar / t / Holm).

    PYTHONPATH=src python benchmarks/o2i_strata_speed.py [INSTANCES] [POSITIVES]
"""

from __future__ import annotations

import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def main(instances: int = 1000, positives: int = 5) -> None:
    from PIL import Image

    from rscale.api.o2i_strata import query_ratios
    from rscale.core import o2i
    from rscale.store.ilias_layout import read_layout_boxes

    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ilias"
        t0 = time.perf_counter()
        img = Image.new("RGB", (64, 48), (128, 128, 128))
        for i in range(instances):
            for role, n in (("query", 1), ("pos", positives)):
                d = root / f"i{i:05d}" / role
                d.mkdir(parents=True)
                for k in range(n):
                    img.save(d / f"x{k}.jpg")
                    w, h = rng.integers(4, 48, 2)
                    (d / f"x{k}_bbox.txt").write_text(f"0 0 {w} {h}")
        t_make = time.perf_counter() - t0
        t0 = time.perf_counter()
        boxes = read_layout_boxes(root)
        t_read = time.perf_counter() - t0
        t0 = time.perf_counter()
        keep, ratio, _ = query_ratios(boxes, boxes.query_ids)
        t_ratio = time.perf_counter() - t0
    q = ratio.size
    base = {"R@1": (rng.random(q) < 0.5).astype(float), "R@10": (rng.random(q) < 0.8).astype(float),
            "mAP@1000": rng.random(q)}
    treat = {k: np.where(rng.random(q) < 0.1, 1 - v if k != "mAP@1000" else rng.random(q), v) for k, v in base.items()}
    t0 = time.perf_counter()
    o2i.stratify(ratio, base, treat)
    t_cold = time.perf_counter() - t0            # includes the first import of scipy.stats
    t0 = time.perf_counter()
    o2i.stratify(ratio, base, treat)
    t_strat = time.perf_counter() - t0
    images = instances * (1 + positives)
    print(f"python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}")
    print(f"{instances} instances x (1 query + {positives} positives) = {images} images, {q} queries")
    print(f"write layout (not part of stratify): {t_make:.2f} s")
    print(f"read_layout_boxes: {t_read:.2f} s ({images / t_read:,.0f} images/s)")
    print(f"query_ratios: {t_ratio * 1e3:.1f} ms")
    print(f"core stratify, 3 measures x 5 bins: {t_strat * 1e3:.1f} ms (first call, importing scipy.stats: "
          f"{t_cold:.2f} s)")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
