"""Stage 1 of the real-embedding validation set: embed every raster image the corpus packages ship.

Deterministic and offline. Lists the PNG files of the Debian packages in PACKAGES (``dpkg -L``),
resolves symlinks and keeps each real file once, decodes it (RGBA), records the digest of its
decoded pixels (sha256 of width, height and the RGBA bytes: the *content digest*), and embeds each
new content digest once with torchvision's ImageNet MobileNetV2 (the project's default backbone,
``rscale.producers.mobilenet.convert_mobilenet_v2``), pooled 1280-d output, L2-normalised.

Preprocessing: composite the RGBA image over white, pad it to a square with white (centred), then
``rscale.producers.extract.to_pixels`` (bicubic resize to RESOLUTION, ImageNet mean/std).

An SVG corpus (``suffix=".svg"``, docs/realset8.md) is rasterised first: each file by librsvg's
``rsvg-convert`` at the pixel size its folder names (``48x48`` or ``48``: 48 px; ``24@2x``: 48 px),
aspect ratio kept, into RGBA; a file whose folders name no size (``symbolic``, ``scalable``) is
not listed. Everything after the decode is the same.

Run (part i of n, one torch thread each; see docs/realset.md):
  PYTHONPATH=src .venv/bin/python benchmarks/realset/embed.py --work /tmp/realset --part 0 --parts 2
Writes WORK/embed-part{i}.npz (digests, vectors) and WORK/files-part{i}.parquet (one row per file).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from protocol import package_versions

PACKAGES = ["oxygen-icon-theme", "mate-icon-theme", "gnome-icon-theme", "tango-icon-theme",
            "elementary-xfce-icon-theme", "adwaita-icon-theme", "openclipart-png"]
RESOLUTION = 96
BATCH = 64


_SIZE_FOLDER = re.compile(r"^(\d+)(?:x\d+)?(?:@(\d+)x?)?$")     # 48, 48x48, 24@2x, 24x24@2x


def folder_size(path: str) -> int | None:
    """The pixel size the first size-naming folder of ``path`` gives (``24@2x``: 48), else None."""
    for part in Path(path).parts[:-1]:
        m = _SIZE_FOLDER.match(part)
        if m:
            return int(m.group(1)) * int(m.group(2) or 1)
    return None


def list_files(packages=PACKAGES, suffix: str = ".png") -> list[tuple[str, str, str]]:
    """(package, listed path, real path) of every ``suffix`` file, each real file once, sorted by
    listed path; an SVG only where its real path's folders name a size (:func:`folder_size`)."""
    seen, rows = set(), []
    for p in packages:
        listed = subprocess.run(["dpkg", "-L", p], capture_output=True, text=True, check=True).stdout.split("\n")
        for f in sorted(x for x in listed if x.endswith(suffix)):
            if not os.path.isfile(f):
                continue
            if suffix == ".svg" and folder_size(os.path.realpath(f)) is None:
                continue
            real = os.path.realpath(f)
            if real in seen:
                continue
            seen.add(real)
            rows.append((p, f, real))
    return sorted(rows, key=lambda r: r[1])


def load_rgba(path):
    """The decoded RGBA image of a raster file, or of an SVG rasterised at its folder's size."""
    from PIL import Image
    if str(path).endswith(".svg"):
        size = str(folder_size(path))
        png = subprocess.run(["rsvg-convert", "-w", size, "-h", size, "-a", "-f", "png", str(path)],
                             capture_output=True, check=True).stdout
        im = Image.open(io.BytesIO(png))
    else:
        im = Image.open(path)
    im.load()
    return im.convert("RGBA")


def renderer_version() -> str:
    """``rsvg-convert --version`` (an SVG corpus' renderer, recorded with the embedding)."""
    try:
        return subprocess.run(["rsvg-convert", "--version"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        sys.exit("rsvg-convert is not installed: apt-get install librsvg2-bin (see docs/realset8.md)")


def content_digest(im) -> str:
    h = hashlib.sha256(f"{im.width}x{im.height}:".encode())
    h.update(im.tobytes())
    return h.hexdigest()


def on_white_square(im):
    from PIL import Image
    side = max(im.width, im.height)
    canvas = Image.new("RGBA", (side, side), (255, 255, 255, 255))
    canvas.alpha_composite(im, ((side - im.width) // 2, (side - im.height) // 2))
    return canvas.convert("RGB")


def main(argv=None, packages=PACKAGES, doc="docs/realset.md", suffix=".png"):
    """Embed part --part of --parts of ``packages``' PNG files (another icon set passes its own
    packages and design document: benchmarks/realset6/build.py; ``suffix`` ".svg": their SVG
    files, rasterised, docs/realset8.md)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--part", type=int, default=0)
    ap.add_argument("--parts", type=int, default=1)
    ap.add_argument("--limit", type=int, default=0, help="first N files of the part only (speed check)")
    a = ap.parse_args(argv)
    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch

    from rscale.producers.extract import embed, load_backbone, to_pixels
    from rscale.producers.mobilenet import convert_mobilenet_v2

    torch.set_num_threads(1)
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    versions = package_versions(packages, doc)
    renderer = renderer_version() if suffix == ".svg" else None
    files = list_files(packages, suffix)[a.part::a.parts]
    if a.limit:
        files = files[:a.limit]
    conv = convert_mobilenet_v2(work / "mobilenet_v2")
    bb = load_backbone(conv.path, RESOLUTION, "cpu")
    rows, digests, vecs, pending, pend_d, seen = [], [], [], [], [], set()
    t0 = time.perf_counter()

    def flush():
        if pending:
            vecs.append(embed(bb, to_pixels(bb, pending), "pooled"))
            digests.extend(pend_d)
            pending.clear()
            pend_d.clear()

    for i, (pkg, listed, real) in enumerate(files):
        try:
            im = load_rgba(real)
        except Exception as exc:  # an unreadable file is recorded, not embedded
            rows.append((pkg, listed, real, 0, 0, "", f"{type(exc).__name__}"))
            continue
        d = content_digest(im)
        rows.append((pkg, listed, real, im.width, im.height, d, ""))
        if d not in seen:
            seen.add(d)
            pending.append(on_white_square(im))
            pend_d.append(d)
            if len(pending) == BATCH:
                flush()
        if i % 2000 == 0:
            print(f"part {a.part}: {i}/{len(files)} files, {len(seen)} unique, "
                  f"{time.perf_counter() - t0:.0f}s", flush=True)
    flush()
    secs = time.perf_counter() - t0
    tag = f"part{a.part}" if not a.limit else f"check{a.part}"
    np.savez(work / f"embed-{tag}.npz", digests=np.asarray(digests), vectors=np.concatenate(vecs).astype(np.float32))
    cols = list(zip(*rows))
    table = pa.table({"package": list(cols[0]), "path": list(cols[1]), "real_path": list(cols[2]),
                      "width": pa.array(cols[3], pa.int32()), "height": pa.array(cols[4], pa.int32()),
                      "digest": list(cols[5]), "error": list(cols[6])})
    meta = {"versions": versions, "resolution": RESOLUTION, "seconds": secs, "unique": len(seen),
            "files": len(files), "weights": conv.manifest["source"]["sha256"],
            **({"renderer": renderer} if renderer else {})}
    import json
    table = table.replace_schema_metadata({"realset.embed": json.dumps(meta, sort_keys=True)})
    pq.write_table(table, work / f"files-{tag}.parquet")
    print(f"part {a.part}: {len(files)} files, {len(seen)} unique images embedded in {secs:.0f}s "
          f"({len(seen) / secs:.1f} img/s)", flush=True)


if __name__ == "__main__":
    main()
