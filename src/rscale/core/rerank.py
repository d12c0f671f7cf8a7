"""Pure math of crop reranking: detector boxes, NMS, max-region scores, reranked ranks.

Arrays in, arrays out (numpy only); :mod:`rscale.producers.rerank` does the I/O and the models.

- :func:`boxes_to_pixels`: OWLv2 predicts boxes as (cx, cy, w, h) in [0, 1] of the image after
  zero-padding it at the bottom and right to a square of side S = max(W, H). The padding keeps the
  origin, so pixel corners are x1 = (cx - w/2) S, y1 = (cy - h/2) S, x2 = (cx + w/2) S,
  y2 = (cy + h/2) S, clipped to [0, W] x [0, H]. Example: W=200, H=100, (0.5, 0.25, 0.2, 0.1)
  -> (80, 40, 120, 60) (S = 200).
- :func:`nms_keep`: greedy non-maximum suppression: visit boxes by descending score, keep one whose
  IoU with every kept box is <= the threshold, stop at ``max_boxes``.
- :func:`max_region_scores`: s(q, g) = max_r <q, v_r> over the regions r of candidate g (unit
  vectors, so this is a max cosine). Per block of queries: one GEMM of the block's queries against
  the regions of the union of their candidates, a segmented max over each image's regions
  (``np.maximum.reduceat``), then a gather of each query's own candidates. Cost per block:
  B x U x D multiply-adds for B queries whose candidates own U regions in all; when the lists
  barely overlap (U >> K R) each query is scored alone (one GEMV, K R x D).
- :func:`combined_scores`: (1 - w) s_region + w s_first (w = 0 by default: pure max-region
  cosine, as in the O2I paper).
- :func:`reranked_ranks`: the exact rank of each positive after reranking the first-stage top K'
  of a fully scored gallery (the reference a reranked-hardness law is checked against).
"""

from __future__ import annotations

import numpy as np

from rscale.errors import InvalidArgumentError


def boxes_to_pixels(cxcywh, width: int, height: int) -> np.ndarray:
    """(n, 4) boxes (cx, cy, w, h) in [0, 1] of the bottom/right zero-padded square -> (n, 4)
    pixel corners (x1, y1, x2, y2) in the original W x H image, clipped to it."""
    b = np.asarray(cxcywh, dtype=np.float64).reshape(-1, 4)
    if width < 1 or height < 1:
        raise InvalidArgumentError(f"image size must be positive, got {width} x {height}")
    side = float(max(width, height))
    cx, cy, w, h = b[:, 0], b[:, 1], b[:, 2], b[:, 3]
    out = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1) * side
    out[:, 0::2] = np.clip(out[:, 0::2], 0.0, float(width))
    out[:, 1::2] = np.clip(out[:, 1::2], 0.0, float(height))
    return out


def box_iou(a, b) -> np.ndarray:
    """(n, m) intersection over union of corner boxes (x1, y1, x2, y2); empty boxes give 0."""
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(rb - lt, 0.0, None), axis=2)
    area_a = np.prod(np.clip(a[:, 2:] - a[:, :2], 0.0, None), axis=1)
    area_b = np.prod(np.clip(b[:, 2:] - b[:, :2], 0.0, None), axis=1)
    union = area_a[:, None] + area_b[None, :] - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(union > 0, inter / union, 0.0)


def nms_keep(boxes, scores, iou_threshold: float = 0.5, max_boxes: int = 10, min_score: float = 0.0,
             min_side: float = 0.0) -> np.ndarray:
    """Indices of the boxes greedy NMS keeps, best score first.

    Boxes scoring below ``min_score`` or with a side shorter than ``min_side`` pixels are dropped
    first. Ties in score keep the lower index first (a stable order).
    """
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    scores = np.asarray(scores, dtype=np.float64).ravel()
    if scores.size != len(boxes):
        raise InvalidArgumentError(f"{len(boxes)} boxes but {scores.size} scores")
    if not 0.0 <= iou_threshold <= 1.0 or max_boxes < 0:
        raise InvalidArgumentError("iou_threshold must be in [0, 1] and max_boxes >= 0")
    sides = np.minimum(boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1])
    ok = np.flatnonzero((scores >= min_score) & (sides >= min_side) & (sides > 0))
    order = ok[np.argsort(-scores[ok], kind="stable")]
    kept: list[int] = []
    # visit in chunks: one IoU matrix per chunk against the kept boxes, then a short scan
    for a in range(0, order.size, 256):
        if len(kept) >= max_boxes:
            break
        chunk = order[a:a + 256]
        iou = box_iou(boxes[chunk], boxes[chunk])
        against = box_iou(boxes[chunk], boxes[kept]).max(axis=1) if kept else np.zeros(chunk.size)
        alive = against <= iou_threshold
        for i in range(chunk.size):
            if len(kept) >= max_boxes:
                break
            if not alive[i]:
                continue
            kept.append(int(chunk[i]))
            alive &= iou[i] <= iou_threshold
            alive[i] = False
    return np.asarray(kept, dtype=np.int64)


def region_index(images: np.ndarray, region_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of the regions of ``images`` (image g owns rows region_offsets[g]:region_offsets[g+1]),
    concatenated, and where each image's segment starts in that concatenation."""
    lo, hi = region_offsets[images], region_offsets[images + 1]
    sizes = hi - lo
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    rows = np.arange(int(sizes.sum()), dtype=np.int64) + np.repeat(lo - starts, sizes)
    return rows, starts


def max_region_scores(queries, candidates, region_vectors, region_offsets, block: int = 8,
                      share: float = 2.0) -> np.ndarray:
    """(Q, K) max cosine between each query and the regions of each of its K candidates.

    ``queries`` (Q, D) and ``region_vectors`` (M, D) are unit vectors; ``candidates`` (Q, K) holds
    image indices; image g owns ``region_vectors[region_offsets[g]:region_offsets[g+1]]`` and needs
    at least one region. float32 GEMMs, ``block`` queries at a time; a block whose candidates
    span more than ``share`` x K distinct images (lists that barely overlap) is scored one query
    at a time instead, so no more than ``share`` times the needed multiply-adds are ever spent.
    Pass float32 ``region_vectors`` when scoring many blocks (fp16 rows are converted per block).
    """
    q = np.asarray(queries, dtype=np.float32)
    cand = np.asarray(candidates, dtype=np.int64)
    off = np.asarray(region_offsets, dtype=np.int64)
    region_vectors = np.asarray(region_vectors)
    if q.ndim != 2 or cand.ndim != 2 or len(cand) != len(q):
        raise InvalidArgumentError(f"queries must be (Q, D) and candidates (Q, K); got {q.shape} and {cand.shape}")
    n_images = off.size - 1
    if cand.size and (cand.min() < 0 or cand.max() >= n_images):
        raise InvalidArgumentError(f"candidate image index out of range [0, {n_images})")
    if np.any(np.diff(off) < 1):
        raise InvalidArgumentError("every image needs at least one region (the whole image)")
    out = np.empty(cand.shape, dtype=np.float32)
    block = max(1, block)
    vectors = region_vectors if region_vectors.dtype == np.float32 else None
    chunk = 512                                           # rows gathered at a time: ~2 MB at D = 1024
    buffer = np.empty((chunk, q.shape[1]), np.float32)

    def similarities(qs, rows):
        # gather a cache-sized chunk of region rows, multiply while it is hot: the gathered copy
        # never goes to main memory, so the traffic is one read of each region (as a GEMV's)
        # (rows, B): each chunk's product lands in a contiguous slice (BLAS, no strided output)
        sims = np.empty((rows.size, len(qs)), np.float32)
        qt = np.ascontiguousarray(qs.T)
        for c in range(0, rows.size, chunk):
            part = rows[c:c + chunk]
            view = buffer[:part.size]
            if vectors is not None:
                np.take(vectors, part, axis=0, out=view)
            else:
                view[...] = region_vectors[part]
            np.matmul(view, qt, out=sims[c:c + part.size])
        return sims

    for a in range(0, len(q), block):
        cb = cand[a:a + block]
        images, inverse = np.unique(cb, return_inverse=True)
        if images.size <= share * cand.shape[1] or len(cb) == 1:
            # the block's queries share their candidates: one GEMM against the union's regions
            rows, starts = region_index(images, off)
            per_image = np.maximum.reduceat(similarities(q[a:a + block], rows), starts, axis=0).T
            out[a:a + block] = np.take_along_axis(per_image, inverse.reshape(cb.shape), axis=1)
        else:
            # little sharing: a block GEMM would cost B x U >> B x K; one GEMV per query instead
            for i, row in enumerate(cb):
                rows, starts = region_index(row, off)
                out[a + i] = np.maximum.reduceat(similarities(q[a + i:a + i + 1], rows)[:, 0], starts)
    return out


def combined_scores(region_scores, first_stage_scores, weight: float = 0.0) -> np.ndarray:
    """(1 - weight) * max-region cosine + weight * first-stage score (weight in [0, 1])."""
    if not 0.0 <= weight <= 1.0:
        raise InvalidArgumentError(f"first-stage weight must be in [0, 1], got {weight}")
    r = np.asarray(region_scores, dtype=np.float64)
    return r if weight == 0.0 else (1.0 - weight) * r + weight * np.asarray(first_stage_scores, dtype=np.float64)


def rerank_order(scores, first_stage_rank) -> np.ndarray:
    """Per row, the permutation sorting candidates by descending score, ties by first-stage rank."""
    s = np.asarray(scores, dtype=np.float64)
    r = np.broadcast_to(np.asarray(first_stage_rank), s.shape)
    return np.lexsort((r, -s), axis=-1)


def reranked_ranks(first_scores, rerank_scores, labels, k: int):
    """Exact 1-based rank of every positive after reranking the first-stage top ``k`` of a fully
    scored gallery; returns ``(ranks, offsets)`` like :func:`rscale.core.metrics.ranks_from_scores`.

    Per query (a row): the gallery is ordered by first-stage score, descending, with the
    pessimistic tie rule (a distractor tied with a positive goes first; ties among items of one
    label keep column order). The first ``k`` items are reordered by ``rerank_scores`` with the same
    tie rule (ties in rerank score fall back to first-stage order); items beyond ``k`` keep their
    first-stage position, so a positive outside the top k keeps its first-stage rank (> k).
    ``labels``: 1 positive, 0 distractor, -1 junk (removed before ranking). Rerank scores are read
    only inside the top k (others may be NaN).

    Example: first (0.9, 0.8, 0.7), rerank (0.1, 0.5, 0.9), labels (0, 0, 1), k = 2: the positive
    is outside the top 2 and keeps rank 3; with k = 3 it moves to rank 1.
    """
    f = np.asarray(first_scores, dtype=np.float64)
    r = np.asarray(rerank_scores, dtype=np.float64)
    lab = np.asarray(labels)
    if f.ndim != 2 or f.shape != r.shape or f.shape != lab.shape:
        raise InvalidArgumentError("first_scores, rerank_scores and labels must be 2-D arrays of one shape")
    if k < 1:
        raise InvalidArgumentError(f"k must be >= 1, got {k}")
    ranks, sizes = [], []
    for fs, rs, lb in zip(f, r, lab):
        keep = np.flatnonzero(lb != -1)
        fs, rs, pos = fs[keep], rs[keep], (lb[keep] == 1)
        first = np.lexsort((pos, -fs))                    # score desc, distractors before positives
        top = first[:k]
        rerank_key = rs[top]
        if np.isnan(rerank_key).any():
            raise InvalidArgumentError("rerank scores are NaN inside the first-stage top k")
        new_top = top[np.lexsort((np.arange(top.size), pos[top], -rerank_key))]
        order = np.concatenate([new_top, first[k:]])
        rank_of = np.empty(order.size, dtype=np.int64)
        rank_of[order] = np.arange(1, order.size + 1)
        rk = np.sort(rank_of[pos])
        ranks.append(rk)
        sizes.append(rk.size)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    flat = np.concatenate(ranks).astype(np.int64) if ranks else np.zeros(0, np.int64)
    return flat, offsets
