"""The ILIAS folder layout and its box annotations (docs/formats.md, "ILIAS layout").

::

    ROOT/<instance>/query/<name>.jpg         query images (.jpg or .png)
    ROOT/<instance>/query/<name>_bbox.txt    optional: the query object's box
    ROOT/<instance>/pos/<name>.jpg           the instance's positives
    ROOT/<instance>/pos/<name>_bbox.txt      optional: the object's box in that positive

Every query of an instance has every positive of that instance. Item ids are
``<instance>/query/<name>`` and ``<instance>/pos/<name>`` (what ``rscale extract --layout ilias``
writes into descriptor sets, so sample stats carry them). Folders without both ``query/`` and
``pos/`` are skipped.

A box file holds one box, four numbers ``x1 y1 x2 y2`` separated by spaces, tabs, commas or
newlines, in the image's pixels: origin at the top-left corner, x to the right, y down, x2 and
y2 exclusive (PIL's crop convention), so the box covers (x2 - x1) (y2 - y1) pixels. It must lie
in the image, 0 <= x1 < x2 <= width and 0 <= y1 < y2 <= height; coordinates up to
``EDGE_TOLERANCE`` (1 pixel) outside (tools that write the last pixel inclusively) are clipped to
the image, anything further is refused (FormatError naming the file and the value).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rscale.errors import FormatError, MissingExtraError

BOX_SUFFIX = "_bbox.txt"
IMAGE_SUFFIXES = ("*.jpg", "*.png")
EDGE_TOLERANCE = 1.0
_LAYOUT_HINT = "the ILIAS layout is <instance>/query/*.jpg and <instance>/pos/*.jpg"


@dataclass(frozen=True)
class Instance:
    name: str
    queries: tuple        # image paths, sorted
    positives: tuple


def instances(root) -> list[Instance]:
    """The instances of an ILIAS-layout folder, sorted by name (refused when none has a query)."""
    root = Path(root)
    if not root.is_dir():
        raise FormatError("no such folder", path=str(root), hint=_LAYOUT_HINT)
    out = []
    for inst in sorted(p for p in root.iterdir() if p.is_dir()):
        qdir, pdir = inst / "query", inst / "pos"
        if not qdir.is_dir() or not pdir.is_dir():
            continue
        images = [tuple(p for pattern in IMAGE_SUFFIXES for p in sorted(d.glob(pattern))) for d in (qdir, pdir)]
        out.append(Instance(inst.name, *images))
    if not any(i.queries for i in out):
        raise FormatError("no <instance>/query/*.jpg found", path=str(root), hint=_LAYOUT_HINT)
    return out


def item_id(instance: str, role: str, image: Path) -> str:
    """``<instance>/query/<stem>`` or ``<instance>/pos/<stem>``."""
    return f"{instance}/{role}/{Path(image).stem}"


def box_path(image) -> Path:
    """The box file that belongs to an image: ``<stem>_bbox.txt`` beside it."""
    image = Path(image)
    return image.with_name(f"{image.stem}{BOX_SUFFIX}")


def image_size(image) -> tuple[int, int]:
    """(width, height) of an image, from its header."""
    try:
        from PIL import Image
    except ImportError:
        raise MissingExtraError("pillow", "extract") from None
    try:
        with Image.open(image) as im:
            return im.size
    except (OSError, SyntaxError, ValueError) as exc:
        raise FormatError(f"cannot read image ({exc})", path=str(image)) from None


def read_box(path, size: tuple[int, int] | None = None) -> tuple[float, float, float, float]:
    """The box of a box file (module docstring), checked against the image ``size`` (w, h) if given."""
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise FormatError(f"cannot read box file ({exc.__class__.__name__})", path=str(path)) from None
    fields = text.replace(",", " ").split()
    if len(fields) != 4:
        raise FormatError(f"expected 4 numbers x1 y1 x2 y2, got {len(fields)} ({text.strip()[:60]!r})",
                          path=str(path))
    try:
        x1, y1, x2, y2 = (float(f) for f in fields)
    except ValueError:
        bad = next(f for f in fields if not _is_number(f))
        raise FormatError(f"{bad!r} is not a number (expected x1 y1 x2 y2 in pixels)", path=str(path)) from None
    if not all(np.isfinite(v) for v in (x1, y1, x2, y2)):
        raise FormatError(f"box {text.strip()!r} is not finite", path=str(path))
    if x2 <= x1 or y2 <= y1:
        raise FormatError(f"box {x1:g} {y1:g} {x2:g} {y2:g} is empty: expected x1 y1 x2 y2 with x2 > x1 and y2 > y1",
                          path=str(path))
    if size is not None:
        w, h = size
        for name, v, hi in (("x1", x1, w), ("y1", y1, h), ("x2", x2, w), ("y2", y2, h)):
            if v < -EDGE_TOLERANCE or v > hi + EDGE_TOLERANCE:
                raise FormatError(f"{name} = {v:g} lies outside the {w}x{h} image (0 <= x <= {w}, 0 <= y <= {h})",
                                  path=str(path))
        x1, x2 = max(x1, 0.0), min(x2, float(w))
        y1, y2 = max(y1, 0.0), min(y2, float(h))
        if x2 <= x1 or y2 <= y1:
            raise FormatError(f"box {' '.join(fields)} covers no pixel of the {w}x{h} image", path=str(path))
    return x1, y1, x2, y2


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class LayoutBoxes:
    """The boxes of an ILIAS-layout folder: per query, its own and its positives' (NaN rows: no box file)."""

    query_ids: np.ndarray      # (Q,) str
    query_boxes: np.ndarray    # (Q, 4) x1 y1 x2 y2
    query_sizes: np.ndarray    # (Q, 2) width, height
    pos_offsets: np.ndarray    # (Q+1,): query q's positives are rows pos_offsets[q]:pos_offsets[q+1]
    pos_ids: np.ndarray        # (P,) str (a positive repeats once per query of its instance)
    pos_boxes: np.ndarray      # (P, 4)
    pos_sizes: np.ndarray      # (P, 2)

    @property
    def query_has_box(self) -> np.ndarray:
        return np.isfinite(self.query_boxes[:, 0])

    @property
    def pos_has_box(self) -> np.ndarray:
        return np.isfinite(self.pos_boxes[:, 0])


def read_layout_boxes(root) -> LayoutBoxes:
    """Every query's box and its positives' boxes, with image sizes (each image's header is read)."""
    def boxed(image):
        size = image_size(image)
        f = box_path(image)
        return (read_box(f, size) if f.is_file() else (np.nan,) * 4), size

    qids, qboxes, qsizes, pids, pboxes, psizes, offsets = [], [], [], [], [], [], [0]
    for inst in instances(root):
        pos = [(item_id(inst.name, "pos", p), *boxed(p)) for p in inst.positives]
        for q in inst.queries:
            box, size = boxed(q)
            qids.append(item_id(inst.name, "query", q))
            qboxes.append(box)
            qsizes.append(size)
            for pid, pbox, psize in pos:
                pids.append(pid)
                pboxes.append(pbox)
                psizes.append(psize)
            offsets.append(len(pids))
    return LayoutBoxes(np.array(qids, dtype=str), np.array(qboxes, float).reshape(-1, 4),
                       np.array(qsizes, float).reshape(-1, 2), np.array(offsets, np.int64),
                       np.array(pids, dtype=str), np.array(pboxes, float).reshape(-1, 4),
                       np.array(psizes, float).reshape(-1, 2))
