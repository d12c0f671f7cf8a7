"""A render set's derived inputs for the analyses, as ``rscale.producers.extract`` items.

extract takes (id, image path, optional box) triples and crops to the box before its own resize
to the backbone's input size, so a crop needs no new file:

* :func:`matched_crop_items` - the decomposition's O2I-matched crops (paper §4.2): the farther
  render of each object cropped to the box whose O2I equals the nearer render's
  (:func:`rscale.producers.o2i.images.o2i_matched_box`), id ``<object>@d<src>~d<tgt>``;
* :func:`box_crop_items` - tight object-box crops (the object-box-crop intervention), id
  ``<object>@d<k>#box``.

The fixed-pixel canvases (§4.3) are new images: :func:`canvas_items` writes them once,
content-addressed like the renders (key: the source render's image digest, canvas size,
object_size, background and code version) under ``<cache>/canvases/``, id ``<object>@d<k>@c<size>``.
"""

from __future__ import annotations

from pathlib import Path

from rscale.errors import InvalidArgumentError
from rscale.producers.o2i.cache import RenderSet, _atomic_png
from rscale.producers.o2i.images import CANVAS_SIZES, NEUTRAL, fixed_pixel_canvases, o2i_matched_box
from rscale.store.hashing import canonical_digest

CANVAS_CODE_VERSION = 1


def _index(rs: RenderSet, k: int, name: str) -> int:
    if not 0 <= k < len(rs.distances):
        raise InvalidArgumentError(f"{name} {k} is not a distance index of this render set (0..{len(rs.distances) - 1})")
    return k


def matched_crop_items(rs: RenderSet, source_index: int, target_index: int) -> list[tuple]:
    """Per object: the render at ``source_index`` (farther, smaller O2I) with the box that gives it
    the O2I of the render at ``target_index`` (nearer)."""
    src, tgt = _index(rs, source_index, "source_index"), _index(rs, target_index, "target_index")
    if rs.distances[src] <= rs.distances[tgt]:
        raise InvalidArgumentError(
            f"source distance {rs.distances[src]:g} must be farther than target distance {rs.distances[tgt]:g}: "
            "a crop only raises O2I, so crop the farther render")
    out = []
    for obj in rs.object_ids:
        s, t = rs.record(obj, src), rs.record(obj, tgt)
        box, _ = o2i_matched_box(s.mask(), t.o2i)
        out.append((f"{obj}@d{src}~d{tgt}", s.path, box))
    return out


def box_crop_items(rs: RenderSet, distance_index: int | None = None) -> list[tuple]:
    """(id, path, tight object box) for every render (or one distance)."""
    return [(f"{r.object_id}@d{r.distance_index}#box", r.path, r.bbox) for r in rs.records
            if distance_index is None or r.distance_index == distance_index]


def canvas_items(rs: RenderSet, cache_dir, distance_index: int = 0, sizes=CANVAS_SIZES, object_size: int | None = 256,
                 background=NEUTRAL) -> list[tuple]:
    """Each object's render at ``distance_index`` pasted, byte for byte, on canvases of ``sizes``
    (written once under ``<cache_dir>/canvases/``); returns (id, path, None) triples."""
    k = _index(rs, distance_index, "distance_index")
    root = Path(cache_dir) / "canvases"
    out = []
    for obj in rs.object_ids:
        r = rs.record(obj, k)
        keys = {s: canonical_digest({"image": r.image_sha256, "size": int(s), "object_size": object_size,
                                     "background": list(background), "code": CANVAS_CODE_VERSION}).split(":", 1)[1]
                for s in sizes}
        paths = {s: root / key[:2] / f"{key}.png" for s, key in keys.items()}
        if not all(p.is_file() for p in paths.values()):
            for cv in fixed_pixel_canvases(r.image(), r.mask(), sizes, object_size, background):
                paths[cv.size].parent.mkdir(parents=True, exist_ok=True)
                if not paths[cv.size].is_file():
                    _atomic_png(cv.image, paths[cv.size])
        out += [(f"{obj}@d{k}@c{s}", paths[s], None) for s in sizes]
    return out

