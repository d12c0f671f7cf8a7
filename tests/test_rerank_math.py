"""Pure math of crop reranking (rscale.core.rerank) against brute-force loops; numpy only, so
it runs without the extract extra."""

import numpy as np
import pytest

from rscale.core import metrics
from rscale.core import rerank as rr
from rscale.errors import InvalidArgumentError

# ---------------------------------------------------------------- pure math


def test_boxes_to_pixels_hand_example():
    got = rr.boxes_to_pixels([[0.5, 0.25, 0.2, 0.1], [0.9, 0.9, 0.4, 0.4]], 200, 100)
    np.testing.assert_allclose(got[0], [80, 40, 120, 60])
    np.testing.assert_allclose(got[1], [140, 100, 200, 100])   # clipped to the image, not the padded square
    tall = rr.boxes_to_pixels([[0.25, 0.5, 0.5, 1.0]], 50, 100)     # side 100: the padding is on the right
    np.testing.assert_allclose(tall[0], [0, 0, 50, 100])


def brute_nms(boxes, scores, thr, max_boxes, min_score, min_side):
    idx = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    kept = []
    for i in idx:
        w, h = boxes[i, 2] - boxes[i, 0], boxes[i, 3] - boxes[i, 1]
        if scores[i] < min_score or min(w, h) < min_side or min(w, h) <= 0:
            continue
        ok = True
        for j in kept:
            ix = max(0, min(boxes[i, 2], boxes[j, 2]) - max(boxes[i, 0], boxes[j, 0]))
            iy = max(0, min(boxes[i, 3], boxes[j, 3]) - max(boxes[i, 1], boxes[j, 1]))
            inter = ix * iy
            union = w * h + (boxes[j, 2] - boxes[j, 0]) * (boxes[j, 3] - boxes[j, 1]) - inter
            if inter / union > thr:
                ok = False
                break
        if ok:
            kept.append(i)
        if len(kept) == max_boxes:
            break
    return kept


@pytest.mark.parametrize("seed", range(4))
def test_nms_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = 600                                              # more than one 256-box chunk
    xy = rng.uniform(0, 100, (n, 2))
    wh = rng.uniform(0, 40, (n, 2))
    boxes = np.concatenate([xy, xy + wh], axis=1)
    scores = np.round(rng.random(n), 2)                  # ties
    for thr, mb, ms, side in [(0.5, 10, 0.0, 0.0), (0.3, 50, 0.2, 5.0), (0.0, 1000, 0.0, 0.0), (1.0, 7, 0.0, 0.0)]:
        assert rr.nms_keep(boxes, scores, thr, mb, ms, side).tolist() == brute_nms(boxes, scores, thr, mb, ms, side)


def unit(x):
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def random_regions(rng, n_images, d):
    sizes = rng.integers(1, 6, n_images)
    off = np.concatenate([[0], np.cumsum(sizes)])
    return unit(rng.standard_normal((off[-1], d))), off


@pytest.mark.parametrize("block,share", [(1, 2.0), (3, 2.0), (100, 2.0), (3, 0.0), (100, float("inf"))])
def test_max_region_scores_matches_loop(block, share):
    rng = np.random.default_rng(1)
    regions, off = random_regions(rng, 30, 8)
    q = unit(rng.standard_normal((7, 8)))
    cand = np.stack([rng.choice(30, 12, replace=False) for _ in range(7)])
    got = rr.max_region_scores(q, cand, regions, off, block=block, share=share)
    want = np.array([[max(float(q[i] @ regions[r]) for r in range(off[g], off[g + 1])) for g in row]
                     for i, row in enumerate(cand)])
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_max_region_scores_rejects_bad_input():
    regions, off = random_regions(np.random.default_rng(0), 3, 4)
    q = unit(np.ones((1, 4)))
    with pytest.raises(InvalidArgumentError, match="out of range"):
        rr.max_region_scores(q, [[5]], regions, off)
    with pytest.raises(InvalidArgumentError, match="at least one region"):
        rr.max_region_scores(q, [[0]], regions, np.array([0, 0, off[-1]]))


def test_combined_scores_and_order():
    s = rr.combined_scores([[0.2, 0.9, 0.9]], [[0.8, 0.1, 0.5]], 0.5)
    np.testing.assert_allclose(s, [[0.5, 0.5, 0.7]])
    assert rr.rerank_order(s, [[1, 2, 3]]).tolist() == [[2, 0, 1]]   # tie 0.5: first-stage order
    np.testing.assert_allclose(rr.combined_scores([[0.3]], [[0.9]]), [[0.3]])
    with pytest.raises(InvalidArgumentError, match="weight"):
        rr.combined_scores([[0.3]], [[0.9]], 1.5)


def brute_reranked_ranks(first, rerank, labels, k):
    """Literal definition: sort the gallery by first-stage score (distractors first on ties, then
    column), reorder the first k by rerank score (same tie rule, then first-stage position)."""
    ranks, sizes = [], []
    for f, r, lab in zip(first, rerank, labels):
        items = [i for i in range(len(f)) if lab[i] != -1]
        first_order = sorted(items, key=lambda i: (-f[i], lab[i] == 1, i))
        pos_in_first = {i: p for p, i in enumerate(first_order)}
        top = sorted(first_order[:k], key=lambda i: (-r[i], lab[i] == 1, pos_in_first[i]))
        order = top + first_order[k:]
        rk = sorted(order.index(i) + 1 for i in items if lab[i] == 1)
        ranks += rk
        sizes.append(len(rk))
    return np.array(ranks, np.int64), np.concatenate([[0], np.cumsum(sizes)])


@pytest.mark.parametrize("seed", range(5))
def test_reranked_ranks_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    q, n = 6, 40
    first = np.round(rng.random((q, n)), 1)             # many ties
    rerank = np.round(rng.random((q, n)), 1)
    labels = rng.choice([0, 0, 0, 1, -1], (q, n))
    labels[:, 0] = 1
    for k in (1, 5, 17, n):
        got = rr.reranked_ranks(first, rerank, labels, k)
        want = brute_reranked_ranks(first, rerank, labels, k)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


def test_reranked_ranks_limits_agree_with_metrics():
    rng = np.random.default_rng(9)
    first, rerank = rng.random((5, 30)), rng.random((5, 30))
    labels = (rng.random((5, 30)) < 0.2).astype(int)
    labels[:, 3] = 1
    # rerank everything: the ranking of the rerank scores; rerank by the first-stage scores: unchanged
    np.testing.assert_array_equal(rr.reranked_ranks(first, rerank, labels, 30)[0],
                                  metrics.ranks_from_scores(rerank, labels)[0])
    np.testing.assert_array_equal(rr.reranked_ranks(first, first, labels, 7)[0],
                                  metrics.ranks_from_scores(first, labels)[0])
    # the docstring's example; NaN rerank scores outside the top k are never read
    assert rr.reranked_ranks([[0.9, 0.8, 0.7]], [[0.1, 0.5, np.nan]], [[0, 0, 1]], 2)[0].tolist() == [3]
    assert rr.reranked_ranks([[0.9, 0.8, 0.7]], [[0.1, 0.5, 0.9]], [[0, 0, 1]], 3)[0].tolist() == [1]
