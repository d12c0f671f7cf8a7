"""Query-side O2I interventions (O2I-mismatch paper, section 5). The gallery is never touched.

``GrayPad`` (GP)
    The query is shown at ``views`` apparent sizes over a ``span``x range of linear scale (five sizes
    over 4x in the paper): the image shrunk by s and pasted at the centre of a gray canvas of the
    original size. The descriptors are averaged and renormalised: the query covers the object
    fractions gallery images may show it at.

``MaskedScales`` (MSA)
    Three scales (1, 1/2, 1/4 by default) of the same gray-padded query, but the patches that are
    entirely gray are masked out of the CLS token's attention (an attention mask on the CLS row
    only, not a pixel edit), so the descriptor is not diluted by the canvas. ViT-family backbones
    with a CLS token only. Same dimension as a plain query; 3x the query-time FLOPs.

``alpha_query_expansion`` (alpha-QE)
    q' = normalise(q + sum_{i<=n} max(s_i, 0)^alpha d_i) over the query's top-n gallery neighbours
    (s_i their similarities); then search again with q'.

Each intervention has a ``name`` and ``params`` recorded in the descriptor set's manifest.
"""

from __future__ import annotations

import numpy as np

from rscale.errors import InvalidArgumentError

GRAY = (128, 128, 128)


def gray_pad(image, scale: float, fill=GRAY):
    """The image shrunk by ``scale`` at the centre of a gray canvas of its original size, and the
    box (x1, y1, x2, y2) it occupies."""
    from PIL import Image

    if not 0 < scale <= 1:
        raise InvalidArgumentError(f"gray-pad scale must lie in (0, 1], got {scale}")
    image = image.convert("RGB")
    w, h = image.size
    sw, sh = max(1, round(w * scale)), max(1, round(h * scale))
    canvas = Image.new("RGB", (w, h), fill)
    x0, y0 = (w - sw) // 2, (h - sh) // 2
    canvas.paste(image.resize((sw, sh), Image.BICUBIC), (x0, y0))
    return canvas, (x0, y0, x0 + sw, y0 + sh)


class GrayPad:
    name = "gp"

    def __init__(self, views: int = 5, span: float = 4.0):
        if views < 1 or span < 1:
            raise InvalidArgumentError("GrayPad needs views >= 1 and span >= 1")
        self.scales = tuple(float(s) for s in np.geomspace(1.0, 1.0 / span, views))
        self.params = {"views": views, "span": span}

    def __call__(self, bb, images, pooling: str = "cls") -> np.ndarray:
        from rscale.producers.extract import embed, to_pixels
        acc = None
        for s in self.scales:
            v = embed(bb, to_pixels(bb, [gray_pad(im, s)[0] for im in images]), pooling)
            acc = v if acc is None else acc + v
        return (acc / np.linalg.norm(acc, axis=1, keepdims=True)).astype(np.float32)


def cls_mask_for_box(bb, box, size):
    """Boolean attention mask (1, 1, T, T): the CLS row cannot see patches outside ``box``.

    A patch is masked when it lies entirely outside the pasted image (pure gray canvas)."""
    torch = __import__("torch")
    w, h = size
    g = bb.grid
    x1, y1, x2, y2 = (box[0] / w * g, box[1] / h * g, box[2] / w * g, box[3] / h * g)
    cols = np.arange(g)
    inside_x = (cols + 1 > x1) & (cols < x2)
    inside_y = (cols + 1 > y1) & (cols < y2)
    keep = (inside_y[:, None] & inside_x[None, :]).ravel()          # row-major patch order
    t = bb.prefix_tokens + g * g
    mask = torch.ones(1, 1, t, t, dtype=torch.bool)
    mask[0, 0, 0, bb.prefix_tokens:] = torch.from_numpy(keep)
    return mask


class MaskedScales:
    name = "msa"

    def __init__(self, scales=(1.0, 0.5, 0.25)):
        self.scales = tuple(float(s) for s in scales)
        self.params = {"scales": list(self.scales)}

    def __call__(self, bb, images, pooling: str = "cls") -> np.ndarray:
        from rscale.producers.extract import embed, to_pixels
        torch = __import__("torch")
        if bb.prefix_tokens == 0 or pooling != "cls":
            raise InvalidArgumentError("MSA masks the CLS token's attention: it needs a ViT-family backbone "
                                       "with a CLS token and pooling 'cls'")
        if bb.preprocessing != "resize":
            raise InvalidArgumentError("MSA maps the gray canvas onto the patch grid, which assumes the whole image "
                                       "is seen: use preprocessing 'resize' (a processor's centre crop cuts it)")
        acc = None
        for s in self.scales:
            padded = [gray_pad(im, s) for im in images]
            masks = torch.cat([cls_mask_for_box(bb, box, im.size) for (im, box) in padded]).to(bb.device)
            v = embed(bb, to_pixels(bb, [im for im, _ in padded]), pooling, attention_mask=masks)
            acc = v if acc is None else acc + v
        return (acc / np.linalg.norm(acc, axis=1, keepdims=True)).astype(np.float32)


def alpha_query_expansion(queries: np.ndarray, gallery: np.ndarray, n: int = 2, alpha: float = 3.0) -> np.ndarray:
    """alpha-QE: each query plus its top-n gallery neighbours weighted by similarity^alpha."""
    q = np.asarray(queries, dtype=np.float32)
    g = np.asarray(gallery, dtype=np.float32)
    if n < 1 or n > g.shape[0]:
        raise InvalidArgumentError(f"alpha-QE needs 1 <= n <= gallery size, got n={n}")
    sims = q @ g.T
    top = np.argpartition(-sims, n - 1, axis=1)[:, :n]
    w = np.maximum(np.take_along_axis(sims, top, axis=1), 0.0) ** alpha
    out = q + np.einsum("qn,qnd->qd", w, g[top])
    return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)
