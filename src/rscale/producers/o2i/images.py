"""Pure image derivations for the O2I analyses: arrays in, arrays out (numpy, PIL for resizing).

Images are uint8 arrays (H, W, 3), masks boolean arrays (H, W); boxes are (x0, y0, x1, y1) with
x1, y1 exclusive (PIL's crop convention, as in ``rscale.producers.extract``).

* :func:`object_o2i` - object pixels / image pixels, from the mask (the benchmark's O2I);
* :func:`object_bbox` - the tight box of the mask;
* :func:`o2i_matched_crop` - the decomposition's beta condition (paper §4.2, App. C): a square
  window of the far render around the object whose O2I equals a target (the near render's O2I,
  up to one pixel of side; :func:`o2i_matched_box`), resized up to the backbone's input size;
* :func:`fixed_pixel_canvases` - the fixed-pixel experiment (§4.3, App. D): the object's own
  pixels (tight crop, masked) pasted, byte for byte, at the centre of neutral canvases from 256 to
  1536 px, so only the fraction of the image the object covers changes;
* :func:`object_box_crop` - the tight object-box crop (the object-box-crop intervention);
* :func:`contact_sheet` - a grid of images (objects x distances) for figures.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rscale.errors import InvalidArgumentError

CANVAS_SIZES = (256, 384, 512, 768, 1024, 1536)
NEUTRAL = (128, 128, 128)          # rscale.producers.interventions.GRAY


def object_o2i(mask: np.ndarray) -> float:
    """O2I = (object pixels) / (image pixels). Example: a 2 x 2 object in a 4 x 4 image -> 0.25."""
    mask = np.asarray(mask, dtype=bool)
    return float(mask.sum()) / mask.size


def object_bbox(mask: np.ndarray) -> tuple[int, int, int, int]:
    """Tight box (x0, y0, x1, y1), x1 / y1 exclusive, of the True pixels. Example: a mask with
    rows 1-2 and columns 3-5 set -> (3, 1, 6, 3)."""
    mask = np.asarray(mask, dtype=bool)
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    if rows.size == 0:
        raise InvalidArgumentError("the mask is empty: the image shows no object, so it has no box")
    return int(cols[0]), int(rows[0]), int(cols[-1]) + 1, int(rows[-1]) + 1


def touches_border(mask: np.ndarray) -> bool:
    """Whether any object pixel lies on the first/last row or column (the object may be clipped)."""
    mask = np.asarray(mask, dtype=bool)
    return bool(mask[0].any() or mask[-1].any() or mask[:, 0].any() or mask[:, -1].any())


def _resize(rgb: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    from PIL import Image
    if rgb.shape[1] == size[0] and rgb.shape[0] == size[1]:
        return rgb.copy()
    return np.asarray(Image.fromarray(rgb).resize(size, Image.BICUBIC))


def _resize_mask(mask: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    from PIL import Image
    if mask.shape[1] == size[0] and mask.shape[0] == size[1]:
        return mask.copy()
    return np.asarray(Image.fromarray(mask.astype(np.uint8) * 255).resize(size, Image.NEAREST)) > 127


@dataclass(frozen=True)
class MatchedCrop:
    image: np.ndarray        # the window resized to out_size x out_size
    box: tuple               # the window in the source image
    o2i: float               # the window's exact O2I (object pixels / window pixels), before resizing


def o2i_matched_box(mask: np.ndarray, target_o2i: float) -> tuple[tuple, float]:
    """The square window around the object whose O2I is closest to ``target_o2i``, and that O2I.

    With n object pixels, the side is L = sqrt(n / target) rounded to whichever of floor / ceil
    gives the O2I nearer the target (so |O2I - target| <= about 2 target / L), centred on the
    object's box and shifted inside the image; the whole object stays in the window (an object
    whose box is longer than that side gets the box's length as side, and an O2I below the target:
    the returned O2I is always the window's exact one).
    Example: a 10 x 10 object in a 100 x 100 image, target 0.25 -> a 20 x 20 window, O2I 0.25.
    """
    mask = np.asarray(mask, dtype=bool)
    h, w = mask.shape
    if not 0 < target_o2i <= 1:
        raise InvalidArgumentError(f"target O2I must lie in (0, 1], got {target_o2i}")
    n = int(mask.sum())
    x0, y0, x1, y1 = object_bbox(mask)
    need = max(x1 - x0, y1 - y0)
    ideal = np.sqrt(n / target_o2i)
    if ideal > min(h, w) + 1:
        raise InvalidArgumentError(
            f"target O2I {target_o2i:.4g} is below this {w}x{h} image's own O2I ({n / min(h, w) ** 2:.4g}): "
            "a crop only raises O2I; crop the render with the smaller O2I (the farther one) to the larger one's")
    sides = {min(max(int(np.floor(ideal)), need, 1), min(h, w)), min(max(int(np.ceil(ideal)), need, 1), min(h, w))}
    side = min(sides, key=lambda L: (abs(n / L ** 2 - target_o2i), L))
    cx = min(max((x0 + x1 - side) // 2, 0), w - side)
    cy = min(max((y0 + y1 - side) // 2, 0), h - side)
    return (cx, cy, cx + side, cy + side), float(mask[cy:cy + side, cx:cx + side].sum()) / side ** 2


def o2i_matched_crop(rgb: np.ndarray, mask: np.ndarray, target_o2i: float, out_size: int | None = None) -> MatchedCrop:
    """The :func:`o2i_matched_box` window of ``rgb``, resized (bicubic) to ``out_size`` x
    ``out_size`` (default: the source's width), the backbone's input size."""
    box, o2i = o2i_matched_box(mask, target_o2i)
    x0, y0, x1, y1 = box
    out = int(out_size) if out_size is not None else np.asarray(mask).shape[1]
    image = _resize(np.ascontiguousarray(np.asarray(rgb)[y0:y1, x0:x1]), (out, out))
    return MatchedCrop(image, box, o2i)


def object_box_crop(rgb: np.ndarray, mask: np.ndarray, margin: float = 0.0) -> tuple[np.ndarray, tuple]:
    """The object's tight box (grown by ``margin`` x its size on each side, within the image) and
    the crop of ``rgb`` to it."""
    if margin < 0:
        raise InvalidArgumentError(f"crop margin must be >= 0, got {margin}")
    mask = np.asarray(mask, dtype=bool)
    h, w = mask.shape
    x0, y0, x1, y1 = object_bbox(mask)
    mx, my = int(round(margin * (x1 - x0))), int(round(margin * (y1 - y0)))
    box = (max(x0 - mx, 0), max(y0 - my, 0), min(x1 + mx, w), min(y1 + my, h))
    return np.ascontiguousarray(np.asarray(rgb)[box[1]:box[3], box[0]:box[2]]), box


def object_patch(rgb: np.ndarray, mask: np.ndarray, object_size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The object's pixels and mask cut to its tight box; with ``object_size`` resized once
    (bicubic; mask nearest) so the longer side is object_size px."""
    patch, box = object_box_crop(rgb, mask)
    pmask = np.asarray(mask, dtype=bool)[box[1]:box[3], box[0]:box[2]]
    if object_size is not None:
        if object_size < 1:
            raise InvalidArgumentError(f"object_size must be >= 1 px, got {object_size}")
        ph, pw = pmask.shape
        f = object_size / max(ph, pw)
        size = (max(1, round(pw * f)), max(1, round(ph * f)))
        patch, pmask = _resize(patch, size), _resize_mask(pmask, size)
    return patch, pmask


@dataclass(frozen=True)
class Canvas:
    size: int
    image: np.ndarray        # size x size x 3
    box: tuple               # where the patch sits
    o2i: float               # object pixels / canvas pixels


def paste_on_canvas(patch: np.ndarray, patch_mask: np.ndarray, size: int, background=NEUTRAL) -> Canvas:
    """A size x size canvas of ``background`` with the patch's object pixels (mask True) pasted at
    the centre (offset ((size - w) // 2, (size - h) // 2)), unchanged."""
    ph, pw = patch_mask.shape
    if size < max(ph, pw):
        raise InvalidArgumentError(
            f"canvas {size} px is smaller than the object ({pw}x{ph} px): use canvases of at least "
            f"{max(ph, pw)} px or a smaller object_size")
    canvas = np.empty((size, size, 3), dtype=np.uint8)
    canvas[:] = np.asarray(background, dtype=np.uint8)
    x0, y0 = (size - pw) // 2, (size - ph) // 2
    window = canvas[y0:y0 + ph, x0:x0 + pw]
    window[patch_mask] = patch[patch_mask]
    return Canvas(size, canvas, (x0, y0, x0 + pw, y0 + ph), float(patch_mask.sum()) / size ** 2)


def fixed_pixel_canvases(rgb: np.ndarray, mask: np.ndarray, sizes=CANVAS_SIZES, object_size: int | None = None,
                         background=NEUTRAL) -> list[Canvas]:
    """The same object pixels on canvases of each size (paper §4.3, App. D).

    The patch is cut (and, with ``object_size``, resized) once, so its pixels are byte-identical on
    every canvas. With object_size = min(sizes) = 256 the object's box fills the smallest canvas
    (box O2I 1) and 1/36 of the 1536 px one, the paper's range."""
    sizes = [int(s) for s in sizes]
    if not sizes:
        raise InvalidArgumentError("canvas sizes: give at least one size, e.g. 256 384 512 768 1024 1536")
    dup = sorted({s for s in sizes if sizes.count(s) > 1})
    if dup:
        raise InvalidArgumentError(f"canvas sizes: duplicate size(s) {dup}; give each size once")
    patch, pmask = object_patch(rgb, mask, object_size)
    too_small = [s for s in sizes if s < max(pmask.shape)]
    if too_small:
        raise InvalidArgumentError(
            f"canvas {too_small[0]} px is smaller than the object ({pmask.shape[1]}x{pmask.shape[0]} px): use "
            f"canvases of at least {max(pmask.shape)} px or object_size <= {min(sizes)}")
    return [paste_on_canvas(patch, pmask, s, background) for s in sizes]


def contact_sheet(rows, tile: int = 128, gap: int = 4, background=(255, 255, 255)) -> np.ndarray:
    """The images of ``rows`` (a list of lists of uint8 (H, W, 3) arrays) resized to tile x tile
    and laid out in a grid with ``gap`` px between tiles (rows may differ in length)."""
    rows = [list(r) for r in rows]
    if not rows or not any(rows):
        raise InvalidArgumentError("contact sheet: give at least one image")
    ncol = max(len(r) for r in rows)
    sheet = np.empty((len(rows) * (tile + gap) - gap, ncol * (tile + gap) - gap, 3), dtype=np.uint8)
    sheet[:] = np.asarray(background, dtype=np.uint8)
    for i, r in enumerate(rows):
        for j, im in enumerate(r):
            y, x = i * (tile + gap), j * (tile + gap)
            sheet[y:y + tile, x:x + tile] = _resize(np.asarray(im, dtype=np.uint8), (tile, tile))
    return sheet

