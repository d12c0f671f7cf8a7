"""Analyses of the controlled object-to-image (O2I) benchmark (O2I paper, sections 3-4, App. C-F, P).

Pure numpy: descriptors in, arrays out. The benchmark's descriptors are one array
``desc[object, distance, dim]``: every object rendered at the same ``distances`` (camera
distances, ascending or not), viewpoint, light and background fixed.

Cross-distance retrieval (:func:`cross_distance`, section 3.2). For an ordered pair of distinct
distances (d_q, d_t), object i's render at d_q queries a gallery holding its own render at d_t
(the one positive) and every other object's renders at all distances (the distractors); object
i's renders at the other distances are masked. The positive's rank is

    r_i = 1 + #{(j, k): j != i, s(q_i, g_jk) >= s(q_i, g_it)}

(pessimistic ties: a distractor tied with the positive ranks above it, as in rscale.core.metrics),
so R@k = mean(r <= k), MRR = mean(1 / r) and, with one positive, AP = 1 / r. Scores are dot
products (cosines for L2-normalised descriptors). Example: 2 objects, distances (1, 2), query
(0, d=1) scoring its own d=2 render 0.9 and object 1's renders 0.95 and 0.5 has rank 2.

Decomposition (:func:`decompose`, section 4.2, App. C): alpha = raw cross-distance R@1,
beta = R@1 with O2I-matched crops upsampled to the native input size (computed by the caller with
:func:`matched_cross_distance` on the descriptors of :func:`matched_crop_box` crops), gamma = 1 - alpha (the raw failure),
delta = 1 - beta (the resolution-only residual), epsilon = delta / gamma (the resolution share).

Fixed-pixel canvas (:func:`canvas_cosine_matrix`, section 4.3, App. D), asymmetry
(:func:`asymmetry`, section 4.4, App. E-F) and O2I stratification of a real benchmark
(:func:`stratify`, section 5.3, App. P) follow.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rscale.errors import InvalidArgumentError


DEFAULT_KS = (1, 5, 10)
# Ratios d_q/d_t (and |log| magnitudes) equal to 2 decimals are one point of Fig. 2 / one asymmetry
# level: distances written to 4 decimals (the default 3.0 * 3.3 ** (k / 4)) make "equal" ratios
# differ in the 4th digit (1.3470 / 1.3481), and 6 decimals split every level in two.
RATIO_DECIMALS = 2


def _check_desc(desc) -> np.ndarray:
    desc = np.asarray(desc)
    if desc.ndim != 3:
        raise InvalidArgumentError(f"descriptors must be an (objects, distances, dim) array, got shape {desc.shape}")
    if desc.shape[0] < 2:
        raise InvalidArgumentError(f"cross-distance retrieval needs at least 2 objects, got {desc.shape[0]}")
    if desc.shape[1] < 2:
        raise InvalidArgumentError(f"cross-distance retrieval needs at least 2 distances, got {desc.shape[1]}")
    if not np.issubdtype(desc.dtype, np.floating):
        desc = desc.astype(np.float32)
    if not np.all(np.isfinite(desc)):
        bad = np.argwhere(~np.isfinite(desc))[0]
        raise InvalidArgumentError(f"descriptor of object {bad[0]} at distance index {bad[1]} is not finite (NaN or inf)")
    return desc


def _check_distances(distances, n: int) -> np.ndarray:
    d = np.asarray(distances, dtype=np.float64)
    if d.shape != (n,):
        raise InvalidArgumentError(f"expected {n} distances (one per render), got {d.size}")
    if np.any(~np.isfinite(d)) or np.any(d <= 0):
        raise InvalidArgumentError(f"distances must be finite and > 0, got {d.tolist()}")
    if np.unique(d).size != n:
        raise InvalidArgumentError(f"distances must be distinct, got {d.tolist()}")
    return d


def positive_ranks(queries, gallery, targets, block: int = 512) -> np.ndarray:
    """Rank of each query's positive in the masked cross-distance gallery.

    ``queries`` (O, D): object i's query descriptor. ``gallery`` (O, V, D): every object's renders
    (V views, e.g. distances). ``targets``: one view index or a sequence of T of them.
    Query i's positive for target t is ``gallery[i, t]``; all of object i's other views are
    masked; ``gallery[j, :]`` for j != i are distractors. Returns int64 ranks (T, O) (or (O,)
    for a single target), 1-based, ties pessimistic. Work is one (block x O*V) GEMM per row
    block and a comparison per target: O(O^2 V D) flops, O(block O V) memory.
    """
    q = np.asarray(queries)
    g = np.asarray(gallery)
    if g.ndim != 3 or q.ndim != 2 or q.shape[0] != g.shape[0] or q.shape[1] != g.shape[2]:
        raise InvalidArgumentError(f"queries (O, D) and gallery (O, V, D) do not fit: {q.shape} and {g.shape}")
    single = np.ndim(targets) == 0
    t = np.atleast_1d(np.asarray(targets, dtype=np.int64))
    n_obj, n_view, dim = g.shape
    if np.any((t < 0) | (t >= n_view)):
        raise InvalidArgumentError(f"target views must be in 0..{n_view - 1}, got {t.tolist()}")
    dtype = np.result_type(q.dtype, g.dtype, np.float32)
    flat = np.ascontiguousarray(g.reshape(n_obj * n_view, dim), dtype=dtype)
    q = np.ascontiguousarray(q, dtype=dtype)
    ranks = np.empty((t.size, n_obj), dtype=np.int64)
    for a in range(0, n_obj, block):
        b = min(a + block, n_obj)
        s = (q[a:b] @ flat.T).reshape(b - a, n_obj, n_view)
        rows = np.arange(b - a)
        pos = s[rows, np.arange(a, b)][:, t]                     # (rows, T) positive scores
        s[rows, np.arange(a, b)] = -np.inf                       # the query object's renders leave the gallery
        s = s.reshape(b - a, n_obj * n_view)
        for ti in range(t.size):
            ranks[ti, a:b] = 1 + np.count_nonzero(s >= pos[:, ti:ti + 1], axis=1)
    return ranks[0] if single else ranks


@dataclass(frozen=True)
class CrossDistance:
    """Cross-distance retrieval of one backbone: per ordered pair, per query, the positive's rank."""

    distances: np.ndarray          # (V,) camera distances, in the descriptors' order
    pairs: np.ndarray              # (P, 2) int: (query view, target view), all ordered pairs q != t
    ranks: np.ndarray              # (P, O) int64, 1-based

    @property
    def ratio(self) -> np.ndarray:
        """d_q / d_t per pair (Fig. 2's x axis)."""
        return self.distances[self.pairs[:, 0]] / self.distances[self.pairs[:, 1]]

    def recall(self, k: int) -> np.ndarray:
        """R@k per pair."""
        return (self.ranks <= k).mean(axis=1)

    def hits(self, k: int) -> np.ndarray:
        """(P, O) per-query hits at k (0/1), the input of McNemar's test."""
        return (self.ranks <= k).astype(np.float64)

    def reciprocal_ranks(self) -> np.ndarray:
        """(P, O) per-query 1 / rank = AP with one positive (the input of the paired t-test)."""
        return 1.0 / self.ranks

    def mrr(self) -> np.ndarray:
        return self.reciprocal_ranks().mean(axis=1)

    def pair_index(self, q: int, t: int) -> int:
        hit = np.flatnonzero((self.pairs[:, 0] == q) & (self.pairs[:, 1] == t))
        if hit.size == 0:
            raise InvalidArgumentError(f"no ordered pair ({q}, {t}) among the evaluated pairs")
        return int(hit[0])

    def table(self, ks=DEFAULT_KS) -> dict:
        """Column arrays, one row per ordered pair: d_q, d_t, ratio, R@k..., MRR."""
        out = {"d_q": self.distances[self.pairs[:, 0]], "d_t": self.distances[self.pairs[:, 1]],
               "ratio": self.ratio}
        for k in ks:
            out[f"R@{k}"] = self.recall(k)
        out["MRR"] = self.mrr()
        return out


def cross_distance(desc, distances, block: int = 256) -> CrossDistance:
    """Cross-distance retrieval over every ordered pair of distinct distances (module docstring).

    ``desc`` (O, V, D): object o's render at distance v. Queries and gallery are the same O*V
    renders, so the similarity is symmetric: each block of ``block`` objects x ``block`` objects
    is one GEMM, computed once and counted for the rows of both blocks (half the flops of
    :func:`positive_ranks` per distance). 3,000 objects x 5 distances x 1280-d is a
    15k x 15k similarity (benchmarks/o2i_eval_speed.py).
    """
    desc = _check_desc(desc)
    d = _check_distances(distances, desc.shape[1])
    n_obj, n_view, dim = desc.shape
    x = np.ascontiguousarray(desc, dtype=np.result_type(desc.dtype, np.float32))
    starts = list(range(0, n_obj, block))
    counts = np.zeros((n_obj, n_view, n_view), dtype=np.int64)     # [i, q, t]: distractors >= positive
    pos = np.empty((n_obj, n_view, n_view), dtype=x.dtype)

    def count(rows, sim, positives):
        # rows: object slice; sim (r*V, C) similarities of those renders; positives (r, V, V)
        flat = positives.reshape(-1, n_view)
        for t in range(n_view):
            counts[rows, :, t] += np.count_nonzero(sim >= flat[:, t:t + 1], axis=1).reshape(-1, n_view)

    for a in starts:                                  # diagonal blocks first: they hold the positives
        rows = slice(a, min(a + block, n_obj))
        xa = x[rows].reshape(-1, dim)
        sim = (xa @ xa.T).reshape(xa.shape[0] // n_view, n_view, -1, n_view)
        own = np.arange(sim.shape[0])
        pos[rows] = sim[own, :, own, :]               # (r, V, V): each object's render-to-render scores
        sim[own, :, own, :] = -np.inf                 # the query object's renders leave the gallery
        count(rows, sim.reshape(xa.shape[0], -1), pos[rows])
    for i, a in enumerate(starts):                    # off-diagonal blocks, each once, counted both ways
        ra = slice(a, min(a + block, n_obj))
        xa = x[ra].reshape(-1, dim)
        for b in starts[i + 1:]:
            rb = slice(b, min(b + block, n_obj))
            xb = x[rb].reshape(-1, dim)
            sim = xa @ xb.T
            count(ra, sim, pos[ra])
            count(rb, np.ascontiguousarray(sim.T), pos[rb])     # a copy counts faster than the strided view
    pairs = np.asarray([(q, t) for q in range(n_view) for t in range(n_view) if q != t], dtype=np.int64)
    ranks = 1 + counts[:, pairs[:, 0], pairs[:, 1]].T
    return CrossDistance(d, pairs, np.ascontiguousarray(ranks))


def recall_by_ratio(cd: CrossDistance, k: int = 1, decimals: int = RATIO_DECIMALS) -> dict:
    """R@k against d_q / d_t (paper Fig. 2): pairs with the same ratio (to ``decimals``) averaged.

    Returns {"ratio", "R@k", "pairs"} sorted by ratio, with the self-retrieval point left out
    (every pair here has d_q != d_t).
    """
    r = np.round(cd.ratio, decimals)
    uniq, inv = np.unique(r, return_inverse=True)
    rec = cd.recall(k)
    return {"ratio": uniq, f"R@{k}": np.bincount(inv, weights=rec) / np.bincount(inv),
            "pairs": np.bincount(inv)}


# ---- decomposition (section 4.2) -----------------------------------------------------------------

def matched_crop_box(center, image_size, o2i_far: float, o2i_near: float) -> tuple[float, float, float, float]:
    """Square crop of the farther render whose O2I equals the nearer render's.

    Cropping a W x W image to side s = W sqrt(o2i_far / o2i_near) around the object multiplies its
    O2I by (W / s)^2 = o2i_near / o2i_far; upsampled back to the native input size, the object
    then fills the image as at the nearer distance, with fewer source pixels (resolution loss
    only). The box is shifted, not shrunk, to stay inside the image. Returns (x1, y1, x2, y2).
    Example: a 512 px render with O2I 0.04 matched to 0.16 is cropped to 256 px.
    """
    w, h = (float(v) for v in image_size)
    if w <= 0 or h <= 0 or w != h:
        raise InvalidArgumentError(f"matched crops need a square render, got {w:g} x {h:g}")
    if not (0 < o2i_far <= o2i_near <= 1):
        raise InvalidArgumentError(f"need 0 < o2i_far <= o2i_near <= 1, got {o2i_far:g} and {o2i_near:g}")
    side = w * float(np.sqrt(o2i_far / o2i_near))
    cx, cy = (float(v) for v in center)
    x1 = min(max(cx - side / 2, 0.0), w - side)
    y1 = min(max(cy - side / 2, 0.0), h - side)
    return x1, y1, x1 + side, y1 + side


def matched_cross_distance(desc, distances, matched: dict, block: int = 512) -> CrossDistance:
    """Cross-distance retrieval with the farther render of each pair replaced by its O2I-matched crop.

    ``matched[(far, near)]`` (O, D): every object's render at view ``far`` cropped to the O2I of
    its render at view ``near`` (:func:`matched_crop_box`) and upsampled to the native input size,
    for each ordered pair of views with distances[far] > distances[near]. For the pair (q, t):
    when the query is farther, the matched crops are the queries; when the target is farther,
    they replace the gallery's view t for every object (distractors included). The R@1 of the
    result is the decomposition's beta.
    """
    desc = _check_desc(desc)
    d = _check_distances(distances, desc.shape[1])
    n_obj, n_view, dim = desc.shape
    pairs, ranks = [], []
    for q in range(n_view):
        for t in range(n_view):
            if q == t:
                continue
            far, near = (q, t) if d[q] > d[t] else (t, q)
            if (far, near) not in matched:
                raise InvalidArgumentError(f"no matched crops for views ({far}, {near}): distance {d[far]:g} "
                                           f"cropped to the O2I at {d[near]:g}")
            m = np.asarray(matched[(far, near)])
            if m.shape != (n_obj, dim):
                raise InvalidArgumentError(f"matched crops ({far}, {near}) have shape {m.shape}, expected {(n_obj, dim)}")
            if far == q:
                r = positive_ranks(m, desc, t, block=block)
            else:
                gallery = desc.copy()
                gallery[:, t] = m
                r = positive_ranks(desc[:, q], gallery, t, block=block)
            pairs.append((q, t))
            ranks.append(r)
    return CrossDistance(d, np.asarray(pairs, dtype=np.int64), np.stack(ranks))



@dataclass(frozen=True)
class Decomposition:
    alpha: np.ndarray      # raw cross-distance R@1
    beta: np.ndarray       # R@1 with O2I-matched crops
    gamma: np.ndarray      # 1 - alpha: raw failure
    delta: np.ndarray      # 1 - beta: resolution-only residual
    epsilon: np.ndarray    # delta / gamma: resolution share (NaN where undefined)
    notes: tuple = field(default_factory=tuple)   # per entry: "" or why epsilon is NaN / outside [0, 1]


def decompose(alpha, beta) -> Decomposition:
    """gamma = 1 - alpha, delta = 1 - beta, epsilon = delta / gamma, elementwise (per pair).

    epsilon is undefined when gamma = 0 (no raw failure: nothing to attribute): NaN, with the
    reason in ``notes``. It is not clipped: beta < alpha (matching the crop hurt more than the
    mismatch) gives epsilon > 1, and the note says so. Example: alpha 0.2, beta 0.9 ->
    gamma 0.8, delta 0.1, epsilon 0.125 (one eighth of the failure is resolution).
    """
    a = np.asarray(alpha, dtype=np.float64)
    b = np.asarray(beta, dtype=np.float64)
    if a.shape != b.shape:
        raise InvalidArgumentError(f"alpha and beta must have the same shape, got {a.shape} and {b.shape}")
    if np.any((a < 0) | (a > 1)) or np.any((b < 0) | (b > 1)):
        raise InvalidArgumentError("alpha and beta are R@1 values and must lie in [0, 1]")
    gamma, delta = 1.0 - a, 1.0 - b
    with np.errstate(divide="ignore", invalid="ignore"):
        eps = np.where(gamma > 0, delta / np.where(gamma > 0, gamma, 1.0), np.nan)
    notes = []
    for g, e in zip(np.ravel(gamma), np.ravel(eps)):
        if g == 0:
            notes.append("undefined: alpha = 1, no raw failure to attribute")
        elif e > 1:
            notes.append("beta < alpha: the matched crops failed more than the raw mismatch")
        else:
            notes.append("")
    return Decomposition(a, b, gamma, delta, eps, tuple(notes))


# ---- fixed-pixel canvas (section 4.3) ------------------------------------------------------------

def canvas_cosine_matrix(desc) -> np.ndarray:
    """Mean over objects of cos(desc[i, a], desc[i, b]): (C, C) for C canvas sizes.

    ``desc`` (O, C, D): object i's byte-identical pixels pasted on canvas a. Rows are normalised
    here, so raw descriptors are fine. The diagonal is 1.
    """
    desc = np.asarray(desc, dtype=np.float64)
    if desc.ndim != 3 or desc.shape[0] < 1:
        raise InvalidArgumentError(f"descriptors must be an (objects, canvases, dim) array, got shape {desc.shape}")
    norm = np.linalg.norm(desc, axis=2, keepdims=True)
    if np.any(norm == 0):
        raise InvalidArgumentError("a descriptor is all zeros; its cosine is undefined")
    u = desc / norm
    return np.einsum("iad,ibd->ab", u, u) / desc.shape[0]


# ---- asymmetry (section 4.4, App. E-F) -----------------------------------------------------------

@dataclass(frozen=True)
class Asymmetry:
    """Tight query (closer than its target) against wide query (farther), on equal mismatches."""

    mrr_tight_query: float         # MRR over the ordered pairs with d_q < d_t
    mrr_wide_query: float          # MRR over the pairs with d_q > d_t
    difference: float              # tight - wide
    favoured: str                  # "tight query", "wide query" or "neither"
    magnitude: np.ndarray          # curve x: |log(d_q / d_t)|, unique values ascending
    curve_tight_query: np.ndarray  # MRR of tight-query pairs at each magnitude
    curve_wide_query: np.ndarray
    per_object_tight: np.ndarray   # (O,) per-object mean RR over the tight-query pairs (paired tests)
    per_object_wide: np.ndarray
    n_pairs_each: int


def asymmetry(cd: CrossDistance, decimals: int = RATIO_DECIMALS) -> Asymmetry:
    """MRR of tight-query -> wide-gallery pairs against the reverse (the mirrored pairs).

    "Tight" is the closer camera (the object fills more of the image). Each unordered pair of
    distances contributes one ordered pair to each side, so both sides average the same
    mismatch magnitudes |log(d_q / d_t)|; the direction is measured, not assumed.
    """
    dq, dt = cd.distances[cd.pairs[:, 0]], cd.distances[cd.pairs[:, 1]]
    tight, wide = dq < dt, dq > dt
    rr = cd.reciprocal_ranks()
    mag = np.round(np.abs(np.log(dq / dt)), decimals)
    levels = np.unique(mag)
    ct = np.array([rr[tight & (mag == m)].mean() for m in levels])
    cw = np.array([rr[wide & (mag == m)].mean() for m in levels])
    a, b = float(rr[tight].mean()), float(rr[wide].mean())
    diff = a - b
    fav = "tight query" if diff > 0 else "wide query" if diff < 0 else "neither"
    return Asymmetry(a, b, diff, fav, levels, ct, cw, rr[tight].mean(axis=0), rr[wide].mean(axis=0),
                     int(tight.sum()))


def asymmetry_significance(asym: Asymmetry, confidence: float = 0.95):
    """Paired t-test over objects of per-object mean RR, tight-query side against wide-query side.

    Effect = tight - wide (the sign of ``asym.difference``); returns a
    :class:`rscale.core.significance.PairedTest`.
    """
    from rscale.core import significance as sig
    return sig.paired_t(asym.per_object_wide, asym.per_object_tight, confidence=confidence)


# ---- O2I stratification of a real benchmark (section 5.3, App. P) -----------------------------

def log_ratio_edges(low: float = 1.0, high: float = 10.0, bins: int = 3) -> np.ndarray:
    """Bin edges of the query / positive O2I ratio: ``bins`` log-spaced bins from ``low`` to
    ``high``, with one open bin on each side, (0, low) and [high, inf).

    edges = [0, low * (high / low) ** (i / bins) for i = 0..bins, inf]. The defaults follow the
    paper's App. P / section 5.3 reading: a reverse-direction bin (query object smaller than in
    its positives, ratio < 1), moderate mismatches 1-10x in three log-even steps
    (1, 2.15, 4.64, 10) and the extreme bin above 10x. Example: ``log_ratio_edges(1, 4, 2)`` is
    [0, 1, 2, 4, inf].
    """
    if not (np.isfinite(low) and np.isfinite(high) and 0 < low < high):
        raise InvalidArgumentError(f"ratio bins need 0 < low < high, got low {low:g}, high {high:g}")
    if int(bins) != bins or bins < 1:
        raise InvalidArgumentError(f"ratio bins: bins must be a whole number >= 1, got {bins}")
    inner = low * (high / low) ** (np.arange(int(bins) + 1) / int(bins))
    inner[-1] = high                   # exact, not high * (1 +- 1 ulp)
    return np.concatenate([[0.0], inner, [np.inf]])


DEFAULT_RATIO_EDGES = tuple(float(e) for e in log_ratio_edges())
HOLM_FAMILIES = ("bins", "all")


def box_o2i(boxes, image_sizes) -> np.ndarray:
    """O2I of boxes: (x2 - x1)(y2 - y1) / (width * height); ``boxes`` (n, 4), ``image_sizes`` (n, 2)."""
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    wh = np.asarray(image_sizes, dtype=np.float64).reshape(-1, 2)
    if b.shape[0] != wh.shape[0]:
        raise InvalidArgumentError(f"{b.shape[0]} boxes against {wh.shape[0]} image sizes")
    area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    if np.any(area <= 0) or np.any(wh <= 0):
        raise InvalidArgumentError("boxes must be x1 y1 x2 y2 with x2 > x1, y2 > y1, on images of positive size")
    return area / (wh[:, 0] * wh[:, 1])


def query_positive_ratio(query_area, positive_area, positive_offsets) -> np.ndarray:
    """Per query: its box area over the mean box area of its positives (App. P).

    Pass O2I fractions (:func:`box_o2i`) for an image-size-independent ratio, or pixel areas
    for the paper's literal definition. ``positive_offsets`` (Q + 1,): query q's positives are
    ``positive_area[off[q]:off[q+1]]``. Above 1: the query's object is larger than in its
    positives (the usual ILIAS case: tight product shots against in-the-wild photos).
    """
    qa = np.asarray(query_area, dtype=np.float64)
    pa = np.asarray(positive_area, dtype=np.float64)
    off = np.asarray(positive_offsets, dtype=np.int64)
    if off.shape != (qa.size + 1,) or off[0] != 0 or off[-1] != pa.size or np.any(np.diff(off) < 0):
        raise InvalidArgumentError("positive_offsets must run from 0 to the number of positive areas, "
                                   "one step per query")
    sizes = np.diff(off)
    if np.any(sizes == 0):
        raise InvalidArgumentError(f"query {int(np.flatnonzero(sizes == 0)[0])} has no positive box")
    if np.any(qa <= 0) or np.any(pa <= 0):
        raise InvalidArgumentError("box areas must be > 0")
    mean_pos = np.add.reduceat(pa, off[:-1]) / sizes
    return qa / mean_pos


@dataclass(frozen=True)
class Stratification:
    edges: np.ndarray        # bin edges of the query / positive ratio: bin b is [edges[b], edges[b+1])
    counts: np.ndarray       # queries per bin
    median_ratio: float
    rows: list               # one dict per (bin, measure): bin, low, high, n, measure, test, baseline,
                             # treatment, gain, ci_low, ci_high, p_value, p_holm, only_baseline,
                             # only_treatment (McNemar's discordant hits; None for the t-test)
    holm_family: str = "bins"


def _is_binary_measure(name: str) -> bool:
    return name.startswith(("R@", "hit"))


def stratify(ratio, baseline: dict, treatment: dict, edges=DEFAULT_RATIO_EDGES, confidence: float = 0.95,
             holm_family: str = "bins") -> Stratification:
    """Gains of a treatment run over a baseline run per bin of query / positive O2I ratio (App. P).

    ``ratio`` (Q,): per query, :func:`query_positive_ratio`. ``baseline`` and ``treatment``:
    {measure name: per-query values}, the same queries in the order of ``ratio``. Bin b holds the
    queries with edges[b] <= ratio < edges[b+1] (:func:`log_ratio_edges`). Per bin and measure:
    gain = mean(treatment) - mean(baseline) with its paired CI; measures named ``R@k`` (binary
    hits) are tested by McNemar's exact test, the others (``mAP@k``, ``MRR``) by the paired
    t-test (rscale.core.significance). Holm's correction (``p_holm``) runs, per measure, across
    its bins (``holm_family="bins"``: one family per measure, as ``compare`` has one per run
    pair) or across every (bin, measure) cell (``"all"``); cells of fewer than 2 queries are left
    out of it and have NaN statistics.

    Example: ratios [0.5, 3, 3.5], R@1 hits [1, 0, 1] -> [1, 1, 1], edges [0, 1, 10]: bin 0 gain 0
    (one query, no test), bin 1 gain +0.5, McNemar b = 0, c = 1, p = 1.
    """
    from rscale.core import significance as sig

    if holm_family not in HOLM_FAMILIES:
        raise InvalidArgumentError(f"holm_family must be one of {', '.join(HOLM_FAMILIES)}, got {holm_family!r}")
    r = np.asarray(ratio, dtype=np.float64)
    e = np.asarray(edges, dtype=np.float64)
    if e.ndim != 1 or e.size < 2 or np.any(np.diff(e) <= 0):
        raise InvalidArgumentError(f"bin edges must be increasing, got {e.tolist()}")
    if r.ndim != 1 or r.size == 0:
        raise InvalidArgumentError(f"stratify needs one ratio per query (a non-empty 1-D array), got shape {r.shape}")
    if np.any(~np.isfinite(r)) or np.any(r <= 0):
        raise InvalidArgumentError("ratios must be finite and > 0")
    if set(baseline) != set(treatment):
        raise InvalidArgumentError(f"baseline measures {sorted(baseline)} differ from treatment measures "
                                   f"{sorted(treatment)}")
    if not baseline:
        raise InvalidArgumentError("name at least one measure to stratify (e.g. R@1, mAP@1000)")
    for name in baseline:
        for side, vals in (("baseline", baseline[name]), ("treatment", treatment[name])):
            if np.shape(vals) != r.shape:
                raise InvalidArgumentError(f"{side} {name} has {np.size(vals)} values for {r.size} queries")
    b = np.searchsorted(e, r, side="right") - 1
    outside = (b < 0) | (b >= e.size - 1)
    if np.any(outside):
        raise InvalidArgumentError(f"{int(outside.sum())} ratio(s) fall outside the bin edges "
                                   f"[{e[0]:g}, {e[-1]:g}), e.g. {r[outside][0]:g}")
    rows = []
    for k in range(e.size - 1):
        sel = b == k
        for name in sorted(baseline):
            x, y = np.asarray(baseline[name], float)[sel], np.asarray(treatment[name], float)[sel]
            binary = _is_binary_measure(name)
            row = {"bin": k, "low": float(e[k]), "high": float(e[k + 1]), "n": int(sel.sum()), "measure": name,
                   "test": "mcnemar-exact" if binary else "paired-t",
                   "baseline": float(x.mean()) if x.size else np.nan,
                   "treatment": float(y.mean()) if y.size else np.nan}
            row["gain"] = row["treatment"] - row["baseline"]
            row.update(ci_low=np.nan, ci_high=np.nan, p_value=np.nan, only_baseline=None, only_treatment=None)
            if x.size >= 2:
                t = sig.mcnemar(x, y, confidence=confidence) if binary else sig.paired_t(x, y, confidence=confidence)
                row.update(ci_low=t.ci_low, ci_high=t.ci_high, p_value=t.p_value)
                if t.discordant is not None:
                    row.update(only_baseline=int(t.discordant[0]), only_treatment=int(t.discordant[1]))
            rows.append(row)
    ps = np.array([row["p_value"] for row in rows])
    family = np.array([row["measure"] if holm_family == "bins" else "" for row in rows])
    adj = np.full(ps.size, np.nan)
    for f in np.unique(family):
        cell = (family == f) & np.isfinite(ps)
        adj[cell] = sig.holm(ps[cell])
    for row, p in zip(rows, adj):
        row["p_holm"] = float(p)
    return Stratification(e, np.bincount(b, minlength=e.size - 1), float(np.median(r)), rows, holm_family)


# ---- tables for the registry and the report --------------------------------------------------

def decomposition_table(raw: CrossDistance, matched: CrossDistance) -> dict:
    """Per ordered pair: d_q, d_t, alpha, beta, gamma, delta, epsilon, note (columns)."""
    if not (np.array_equal(raw.pairs, matched.pairs) and np.array_equal(raw.distances, matched.distances)):
        raise InvalidArgumentError("the raw and matched runs must cover the same distances and pairs")
    dec = decompose(raw.recall(1), matched.recall(1))
    return {"d_q": raw.distances[raw.pairs[:, 0]], "d_t": raw.distances[raw.pairs[:, 1]], "alpha": dec.alpha,
            "beta": dec.beta, "gamma": dec.gamma, "delta": dec.delta, "epsilon": dec.epsilon,
            "note": np.asarray(dec.notes, dtype=object)}


def asymmetry_table(asym: Asymmetry) -> dict:
    """The Fig. 7 curves: per mismatch magnitude |log(d_q/d_t)|, MRR of each direction (columns)."""
    return {"magnitude": asym.magnitude, "mrr_tight_query": asym.curve_tight_query,
            "mrr_wide_query": asym.curve_wide_query,
            "difference": asym.curve_tight_query - asym.curve_wide_query}


def intervention_table(baseline: CrossDistance, intervention: CrossDistance, ks=(1,), confidence: float = 0.95) -> dict:
    """An intervention against the baseline per ordered pair (paired over objects).

    Columns per pair: d_q, d_t, then per measure (R@k for ``ks``, McNemar's exact test; MRR, the
    paired t-test) baseline, intervention, gain, CI and p, and p_holm with Holm's correction over
    every (pair, measure) cell.
    """
    from rscale.core import significance as sig

    if not (np.array_equal(baseline.pairs, intervention.pairs) and baseline.ranks.shape == intervention.ranks.shape):
        raise InvalidArgumentError("baseline and intervention must be runs of the same objects and pairs")
    out = {"d_q": baseline.distances[baseline.pairs[:, 0]], "d_t": baseline.distances[baseline.pairs[:, 1]]}
    ps = []
    measures = [(f"R@{k}", lambda cd, k=k: cd.hits(k), sig.mcnemar) for k in ks]
    measures.append(("MRR", lambda cd: cd.reciprocal_ranks(), sig.paired_t))
    for name, values, test in measures:
        va, vb = values(baseline), values(intervention)
        res = [test(a, b, confidence=confidence) for a, b in zip(va, vb)]
        out[f"{name}_baseline"] = np.array([r.mean_a for r in res])
        out[f"{name}_intervention"] = np.array([r.mean_b for r in res])
        out[f"{name}_gain"] = np.array([r.effect for r in res])
        out[f"{name}_ci_low"] = np.array([r.ci_low for r in res])
        out[f"{name}_ci_high"] = np.array([r.ci_high for r in res])
        out[f"{name}_p"] = np.array([r.p_value for r in res])
        ps.append(out[f"{name}_p"])
    adj = sig.holm(np.concatenate(ps)).reshape(len(ps), -1)
    for (name, _, _), p in zip(measures, adj):
        out[f"{name}_p_holm"] = p
    return out


# ---- query-side interventions on the benchmark ------------------------------------------------

def _pairs(n_view: int) -> np.ndarray:
    """Every ordered pair (q, t), q != t, q-major: the order of :func:`cross_distance`."""
    return np.asarray([(q, t) for q in range(n_view) for t in range(n_view) if q != t], dtype=np.int64)


def query_side_cross_distance(query_desc, gallery_desc, distances, block: int = 512) -> CrossDistance:
    """Cross-distance retrieval with the queries replaced: object i's query at view q is
    ``query_desc[i, q]`` (an intervention's descriptor: gray-pad, box crop), the gallery is the
    untouched ``gallery_desc`` (O, V, D), masked as in :func:`cross_distance`. With
    ``query_desc = gallery_desc`` it equals :func:`cross_distance`."""
    g = _check_desc(gallery_desc)
    q = _check_desc(query_desc)
    if q.shape != g.shape:
        raise InvalidArgumentError(f"query descriptors {q.shape} and gallery descriptors {g.shape} differ in shape")
    d = _check_distances(distances, g.shape[1])
    pairs = _pairs(g.shape[1])
    ranks = np.empty((len(pairs), g.shape[0]), dtype=np.int64)
    for v in range(g.shape[1]):
        sel = np.flatnonzero(pairs[:, 0] == v)
        ranks[sel] = positive_ranks(q[:, v], g, pairs[sel, 1], block=block)
    return CrossDistance(d, pairs, ranks)


def alpha_qe_cross_distance(desc, distances, n: int = 2, alpha: float = 3.0) -> CrossDistance:
    """Cross-distance retrieval after alpha-QE of every query (O2I paper §5; Radenović et al.).

    For the pair (q, t), query i's gallery is the masked one of :func:`cross_distance` (its own
    render at t plus every other object's renders); the query becomes
    q' = normalise(q + sum_{top n} max(s, 0)^alpha g) over its top-n neighbours in that gallery
    (as :func:`rscale.producers.interventions.alpha_query_expansion`, which takes one shared
    gallery), then searches the same gallery again; ties pessimistic.
    """
    desc = _check_desc(desc)
    d = _check_distances(distances, desc.shape[1])
    n_obj, n_view, dim = desc.shape
    if not 1 <= int(n) <= (n_obj - 1) * n_view + 1:
        raise InvalidArgumentError(f"alpha-QE needs 1 <= n <= gallery size ({(n_obj - 1) * n_view + 1}), got n={n}")
    x = np.ascontiguousarray(desc, dtype=np.result_type(desc.dtype, np.float32))
    flat = x.reshape(n_obj * n_view, dim)
    own = np.arange(n_obj)
    pairs = _pairs(n_view)
    ranks = np.empty((len(pairs), n_obj), dtype=np.int64)
    for p, (q, t) in enumerate(pairs):
        hide = np.zeros(n_view, dtype=bool)
        hide[np.arange(n_view) != t] = True

        def masked(s):
            s = s.reshape(n_obj, n_obj, n_view)
            s[own[:, None], own[:, None], np.flatnonzero(hide)[None, :]] = -np.inf
            return s.reshape(n_obj, n_obj * n_view)

        s = masked(x[:, q] @ flat.T)
        top = np.argpartition(-s, int(n) - 1, axis=1)[:, :int(n)]
        w = np.maximum(np.take_along_axis(s, top, axis=1), 0.0) ** float(alpha)
        qe = x[:, q] + np.einsum("on,ond->od", w, flat[top])
        qe /= np.linalg.norm(qe, axis=1, keepdims=True)
        s2 = masked(qe @ flat.T)
        pos = s2[own, own * n_view + t]
        ranks[p] = 1 + np.count_nonzero(s2 >= pos[:, None], axis=1) - 1     # the positive itself is >= pos
    return CrossDistance(d, pairs, ranks)
