"""O2I analyses against brute-force Python loops on small data (rscale.core.o2i)."""

import math

import numpy as np
import pytest

from rscale.core import o2i
from rscale.errors import InvalidArgumentError

DISTANCES = [1.0, 1.5, 2.2, 3.3]


def descriptors(n_obj=9, n_view=4, dim=6, seed=0, noise=0.8, quantise=None):
    """Objects with a shared identity direction plus view-dependent noise (some ties with quantise)."""
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((n_obj, 1, dim))
    x = base + noise * rng.standard_normal((n_obj, n_view, dim))
    if quantise:
        x = np.round(x * quantise) / quantise
    return x.astype(np.float64)


def brute_rank(desc, i, q, t):
    """Rank of object i's render at t for its render at q: a loop over the masked gallery."""
    query = desc[i, q]
    pos = float(query @ desc[i, t])
    above = 0
    for j in range(desc.shape[0]):
        if j == i:
            continue                                  # the query object's other renders are masked
        for k in range(desc.shape[1]):
            if float(query @ desc[j, k]) >= pos:      # ties rank above the positive
                above += 1
    return 1 + above


@pytest.mark.parametrize("quantise", [None, 2])
def test_cross_distance_ranks_match_a_loop(quantise):
    desc = descriptors(quantise=quantise)
    cd = o2i.cross_distance(desc, DISTANCES, block=4)           # several row blocks
    assert cd.ranks.shape == (12, 9)
    for p, (q, t) in enumerate(cd.pairs):
        assert q != t
        want = [brute_rank(desc, i, q, t) for i in range(desc.shape[0])]
        assert cd.ranks[p].tolist() == want
    if quantise:                                                 # ties exist and were counted pessimistically
        s = np.einsum("id,jkd->ijk", desc[:, 0], desc)
        assert np.any(s[:, None] == s[:, :, None])


def test_metrics_per_pair_match_their_definitions():
    desc = descriptors(n_obj=20, seed=3, noise=1.2)
    cd = o2i.cross_distance(desc, DISTANCES)
    tab = cd.table()
    for p, (q, t) in enumerate(cd.pairs):
        ranks = [brute_rank(desc, i, q, t) for i in range(20)]
        assert tab["R@1"][p] == pytest.approx(sum(r <= 1 for r in ranks) / 20)
        assert tab["R@5"][p] == pytest.approx(sum(r <= 5 for r in ranks) / 20)
        assert tab["R@10"][p] == pytest.approx(sum(r <= 10 for r in ranks) / 20)
        assert tab["MRR"][p] == pytest.approx(sum(1 / r for r in ranks) / 20)
        assert tab["ratio"][p] == pytest.approx(DISTANCES[q] / DISTANCES[t])
    assert cd.hits(1).shape == (12, 20) and set(np.unique(cd.hits(5))) <= {0.0, 1.0}
    # one positive: AP@k (rscale.core.metrics) is the reciprocal rank
    from rscale.core.metrics import ap_at_k
    p = cd.pair_index(2, 0)
    ap = ap_at_k(cd.ranks[p], np.arange(21), k=1000)
    np.testing.assert_allclose(ap, cd.reciprocal_ranks()[p])


def test_identity_descriptors_retrieve_perfectly_and_noise_fails():
    rng = np.random.default_rng(1)
    ident = rng.standard_normal((30, 1, 16))
    same = np.repeat(ident, 5, axis=1) + 1e-3 * rng.standard_normal((30, 5, 16))
    cd = o2i.cross_distance(same, [1, 2, 3, 4, 5])
    assert np.all(cd.recall(1) == 1.0) and cd.pairs.shape == (20, 2)
    noise = rng.standard_normal((30, 5, 16))
    assert o2i.cross_distance(noise, [1, 2, 3, 4, 5]).recall(1).mean() < 0.2


def test_recall_by_ratio_averages_pairs_with_the_same_ratio():
    desc = descriptors(n_obj=15, n_view=3, seed=4)
    cd = o2i.cross_distance(desc, [1.0, 2.0, 4.0])
    out = o2i.recall_by_ratio(cd, k=1)
    r1 = cd.recall(1)
    by = {}
    for (q, t), v in zip(cd.pairs, r1):
        by.setdefault(round([1.0, 2.0, 4.0][q] / [1.0, 2.0, 4.0][t], 6), []).append(v)
    assert out["ratio"].tolist() == sorted(by)
    for x, v, n in zip(out["ratio"], out["R@1"], out["pairs"]):
        assert v == pytest.approx(np.mean(by[round(x, 6)])) and n == len(by[round(x, 6)])
    assert dict(zip(out["ratio"].tolist(), out["pairs"].tolist()))[2.0] == 2   # 2/1 and 4/2


def test_bad_benchmark_shapes_are_refused():
    with pytest.raises(InvalidArgumentError, match="at least 2 distances"):
        o2i.cross_distance(np.zeros((4, 1, 3)), [1.0])
    with pytest.raises(InvalidArgumentError, match="distinct"):
        o2i.cross_distance(descriptors(n_view=3), [1.0, 2.0, 2.0])
    with pytest.raises(InvalidArgumentError, match="expected 3 distances"):
        o2i.cross_distance(descriptors(n_view=3), [1.0, 2.0])
    with pytest.raises(InvalidArgumentError, match="at least 2 objects"):
        o2i.cross_distance(np.ones((1, 3, 2)), [1.0, 2.0, 3.0])
    with pytest.raises(InvalidArgumentError, match="target views"):
        o2i.positive_ranks(np.ones((3, 2)), np.ones((3, 2, 2)), 5)


def test_positive_ranks_on_matched_queries_is_the_decomposition_input():
    """beta's path: caller-supplied (matched) query descriptors against the benchmark gallery."""
    desc = descriptors(n_obj=12, seed=5)
    rng = np.random.default_rng(0)
    matched = desc[:, 1] + 0.1 * rng.standard_normal(desc[:, 1].shape)
    ranks = o2i.positive_ranks(matched, desc, 3)
    for i in range(12):
        pos = matched[i] @ desc[i, 3]
        want = 1 + sum(matched[i] @ desc[j, k] >= pos for j in range(12) if j != i for k in range(4))
        assert ranks[i] == want


def test_decomposition_shares_and_undefined_epsilon():
    alpha = np.array([0.2, 1.0, 0.5, 0.6])
    beta = np.array([0.9, 1.0, 0.5, 0.4])
    dec = o2i.decompose(alpha, beta)
    np.testing.assert_allclose(dec.gamma, [0.8, 0.0, 0.5, 0.4])
    np.testing.assert_allclose(dec.delta, [0.1, 0.0, 0.5, 0.6])
    assert dec.epsilon[0] == pytest.approx(0.125) and dec.epsilon[2] == pytest.approx(1.0)
    assert math.isnan(dec.epsilon[1]) and "undefined" in dec.notes[1]
    assert dec.epsilon[3] == pytest.approx(1.5) and "beta < alpha" in dec.notes[3]
    assert dec.notes[0] == "" and dec.notes[2] == ""
    with pytest.raises(InvalidArgumentError, match="same shape"):
        o2i.decompose([0.1, 0.2], [0.3])
    with pytest.raises(InvalidArgumentError, match=r"\[0, 1\]"):
        o2i.decompose([1.2], [0.3])


def test_canvas_cosine_matrix_matches_a_loop():
    rng = np.random.default_rng(2)
    desc = rng.standard_normal((7, 5, 8)) * rng.uniform(0.5, 3, (7, 5, 1))     # unnormalised on purpose
    m = o2i.canvas_cosine_matrix(desc)
    for a in range(5):
        for b in range(5):
            cos = [desc[i, a] @ desc[i, b] / np.linalg.norm(desc[i, a]) / np.linalg.norm(desc[i, b])
                   for i in range(7)]
            assert m[a, b] == pytest.approx(np.mean(cos))
    np.testing.assert_allclose(np.diag(m), 1.0)
    np.testing.assert_allclose(m, m.T)
    with pytest.raises(InvalidArgumentError, match="all zeros"):
        o2i.canvas_cosine_matrix(np.zeros((2, 2, 3)))


def test_asymmetry_matches_a_loop_and_measures_the_direction():
    desc = descriptors(n_obj=25, n_view=4, seed=7, noise=1.0)
    cd = o2i.cross_distance(desc, DISTANCES)
    asym = o2i.asymmetry(cd)
    tight, wide, curve_t, curve_w = [], [], {}, {}
    for (q, t), ranks in zip(cd.pairs, cd.ranks):
        rr = list(1.0 / ranks)
        m = round(abs(math.log(DISTANCES[q] / DISTANCES[t])), o2i.RATIO_DECIMALS)
        if DISTANCES[q] < DISTANCES[t]:
            tight += rr
            curve_t.setdefault(m, []).extend(rr)
        else:
            wide += rr
            curve_w.setdefault(m, []).extend(rr)
    assert asym.n_pairs_each == 6
    assert asym.mrr_tight_query == pytest.approx(np.mean(tight))
    assert asym.mrr_wide_query == pytest.approx(np.mean(wide))
    assert asym.difference == pytest.approx(np.mean(tight) - np.mean(wide))
    assert asym.magnitude.tolist() == sorted(curve_t) == sorted(curve_w)
    np.testing.assert_allclose(asym.curve_tight_query, [np.mean(curve_t[m]) for m in sorted(curve_t)])
    np.testing.assert_allclose(asym.curve_wide_query, [np.mean(curve_w[m]) for m in sorted(curve_w)])
    assert asym.per_object_tight.shape == (25,)
    assert asym.per_object_tight.mean() == pytest.approx(asym.mrr_tight_query)


@pytest.mark.parametrize("tight_is_clean", [True, False])
def test_asymmetry_direction_follows_the_data_not_an_assumption(tight_is_clean):
    """A planted asymmetry: queries from one side are noisy; the favoured side must flip with it."""
    rng = np.random.default_rng(11)
    ident = rng.standard_normal((40, 1, 12))
    scale = np.array([0.2, 0.6, 1.0, 1.4])          # noise grows with distance (index order = distance order)
    desc = ident + scale[None, :, None] * rng.standard_normal((40, 4, 12))
    dist = DISTANCES if tight_is_clean else DISTANCES[::-1]
    asym = o2i.asymmetry(o2i.cross_distance(desc, dist))
    # only which end is "tight" changes: the measured direction must flip with it
    flipped = o2i.asymmetry(o2i.cross_distance(desc, dist[::-1]))
    assert asym.difference == pytest.approx(-flipped.difference)
    assert asym.favoured != flipped.favoured and asym.favoured in ("tight query", "wide query")


def test_asymmetry_significance_is_a_paired_t_over_objects():
    from scipy import stats
    desc = descriptors(n_obj=30, n_view=4, seed=8, noise=1.0)
    asym = o2i.asymmetry(o2i.cross_distance(desc, DISTANCES))
    res = o2i.asymmetry_significance(asym)
    ref = stats.ttest_rel(asym.per_object_tight, asym.per_object_wide)
    assert res.p_value == pytest.approx(ref.pvalue) and res.effect == pytest.approx(asym.difference)


def test_box_o2i_and_query_positive_ratio_match_a_loop():
    boxes = [[0, 0, 10, 20], [5, 5, 15, 10], [0, 0, 50, 50], [10, 10, 20, 30]]
    sizes = [[100, 100], [20, 10], [100, 50], [40, 40]]
    o = o2i.box_o2i(boxes, sizes)
    np.testing.assert_allclose(o, [200 / 1e4, 50 / 200, 2500 / 5000, 200 / 1600])
    ratio = o2i.query_positive_ratio([0.5, 0.1], [0.1, 0.3, 0.05], [0, 2, 3])
    np.testing.assert_allclose(ratio, [0.5 / 0.2, 0.1 / 0.05])
    with pytest.raises(InvalidArgumentError, match="no positive"):
        o2i.query_positive_ratio([0.5, 0.1], [0.1, 0.3], [0, 2, 2])
    with pytest.raises(InvalidArgumentError, match="x2 > x1"):
        o2i.box_o2i([[5, 5, 5, 10]], [[10, 10]])


def test_log_ratio_edges_are_log_spaced_with_open_ends():
    e = o2i.log_ratio_edges(1.0, 4.0, 2)
    assert e.tolist() == [0.0, 1.0, 2.0, 4.0, np.inf]
    d = np.asarray(o2i.DEFAULT_RATIO_EDGES)
    assert d[0] == 0 and d[-1] == np.inf and d[1] == 1.0 and d[-2] == 10.0 and d.size == 6
    np.testing.assert_allclose(np.diff(np.log(d[1:-1])), np.log(10) / 3)        # log-even inner edges
    for low, high, bins in ((0, 10, 3), (5, 2, 3), (1, np.inf, 2), (1, 10, 0), (1, 10, 1.5)):
        with pytest.raises(InvalidArgumentError, match="ratio bins"):
            o2i.log_ratio_edges(low, high, bins)


def _stratify_data(seed=4, n=400):
    rng = np.random.default_rng(seed)
    ratio = np.exp(rng.normal(np.log(3.0), 1.0, n))
    base_hit = (rng.random(n) < 0.5).astype(float)
    # the treatment helps moderate mismatches (ratio 2.2-10) only
    helps = (ratio >= 2.2) & (ratio < 10)
    new_hit = np.where(helps & (rng.random(n) < 0.3), 1.0, base_hit)
    base_ap = rng.beta(2, 3, n)
    new_ap = np.clip(base_ap + np.where(helps, 0.05, 0.0) + rng.normal(0, 0.05, n), 0, 1)
    return ratio, {"R@1": base_hit, "mAP@1000": base_ap}, {"R@1": new_hit, "mAP@1000": new_ap}


def test_stratify_matches_a_loop_with_significance():
    from scipy import stats
    from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar
    from statsmodels.stats.multitest import multipletests
    ratio, base, new = _stratify_data()
    n = ratio.size
    res = o2i.stratify(ratio, base, new)
    assert res.median_ratio == pytest.approx(np.median(ratio)) and res.holm_family == "bins"
    edges = o2i.DEFAULT_RATIO_EDGES
    pvals = {"R@1": [], "mAP@1000": []}
    for row in res.rows:
        lo, hi = edges[row["bin"]], edges[row["bin"] + 1]
        sel = [i for i in range(n) if lo <= ratio[i] < hi]
        assert row["n"] == len(sel) and (row["low"], row["high"]) == (lo, hi)
        x, y = base[row["measure"]][sel], new[row["measure"]][sel]
        assert row["baseline"] == pytest.approx(x.mean()) and row["treatment"] == pytest.approx(y.mean())
        assert row["gain"] == pytest.approx(y.mean() - x.mean())
        if row["measure"] == "R@1":
            tab = [[np.sum((x == 1) & (y == 1)), np.sum((x == 1) & (y == 0))],
                   [np.sum((x == 0) & (y == 1)), np.sum((x == 0) & (y == 0))]]
            assert row["p_value"] == pytest.approx(sm_mcnemar(tab, exact=True).pvalue)
            assert (row["only_baseline"], row["only_treatment"]) == (tab[0][1], tab[1][0])
        else:
            assert row["p_value"] == pytest.approx(stats.ttest_rel(y, x).pvalue)
            assert row["only_baseline"] is None
        pvals[row["measure"]].append(row["p_value"])
    for m, ps in pvals.items():                     # Holm across the bins of each measure
        np.testing.assert_allclose([r["p_holm"] for r in res.rows if r["measure"] == m],
                                   multipletests(ps, method="holm")[1])
    every = o2i.stratify(ratio, base, new, holm_family="all")
    np.testing.assert_allclose([r["p_holm"] for r in every.rows],
                               multipletests([r["p_value"] for r in every.rows], method="holm")[1])
    assert res.counts.sum() == n
    helped = [r for r in res.rows if 2.0 < r["low"] < 10.0 and r["measure"] == "R@1"]
    assert len(helped) == 2 and all(r["gain"] > 0 and r["p_holm"] < 0.01 for r in helped)
    reverse = [r for r in res.rows if r["high"] == 1.0 and r["measure"] == "R@1"][0]
    assert reverse["gain"] == 0.0 and reverse["p_value"] == 1.0


def test_stratify_small_bins_and_bad_input():
    res = o2i.stratify([0.5, 3.0, 3.5], {"R@1": [1, 0, 1]}, {"R@1": [1, 1, 1]}, edges=[0, 1, 10])
    first, second = res.rows
    assert first["n"] == 1 and np.isnan(first["p_value"]) and np.isnan(first["p_holm"])
    assert second["n"] == 2 and second["p_holm"] == second["p_value"] == 1.0 and second["gain"] == 0.5
    with pytest.raises(InvalidArgumentError, match="outside the bin edges"):
        o2i.stratify([0.5, 30.0], {"R@1": [1, 0]}, {"R@1": [1, 1]}, edges=[0, 1, 10])
    with pytest.raises(InvalidArgumentError, match="differ"):
        o2i.stratify([0.5, 3.0], {"R@1": [1, 0]}, {"R@5": [1, 1]})
    with pytest.raises(InvalidArgumentError, match="increasing"):
        o2i.stratify([0.5, 3.0], {"R@1": [1, 0]}, {"R@1": [1, 1]}, edges=[0, 5, 5])
    with pytest.raises(InvalidArgumentError, match="non-empty"):
        o2i.stratify([], {"R@1": []}, {"R@1": []})
    with pytest.raises(InvalidArgumentError, match="at least one measure"):
        o2i.stratify([0.5, 3.0], {}, {})
    with pytest.raises(InvalidArgumentError, match="holm_family"):
        o2i.stratify([0.5, 3.0], {"R@1": [1, 0]}, {"R@1": [1, 1]}, holm_family="measures")


def test_matched_crop_box_matches_the_o2i():
    x1, y1, x2, y2 = o2i.matched_crop_box((256, 256), (512, 512), 0.04, 0.16)
    assert (x1, y1, x2, y2) == (128, 128, 384, 384)
    # the object's pixel area over the crop's area is the nearer O2I
    assert 0.04 * 512 ** 2 / ((x2 - x1) * (y2 - y1)) == pytest.approx(0.16)
    # near a border the box shifts inside the image and keeps its size
    x1, y1, x2, y2 = o2i.matched_crop_box((20, 500), (512, 512), 0.04, 0.16)
    assert (x1, y2, x2 - x1, y2 - y1) == (0, 512, 256, 256)
    with pytest.raises(InvalidArgumentError, match="o2i_far <= o2i_near"):
        o2i.matched_crop_box((1, 1), (512, 512), 0.2, 0.1)


def test_matched_cross_distance_replaces_the_farther_side_by_a_loop():
    desc = descriptors(n_obj=10, n_view=3, seed=9)
    dist = [2.0, 1.0, 3.0]                         # not sorted: "farther" comes from the distances
    rng = np.random.default_rng(1)
    matched = {}
    for far in range(3):
        for near in range(3):
            if dist[far] > dist[near]:
                matched[(far, near)] = desc[:, far] + 0.3 * rng.standard_normal(desc[:, far].shape)
    res = o2i.matched_cross_distance(desc, dist, matched)
    for p, (q, t) in enumerate(res.pairs):
        for i in range(10):
            g = desc.copy()
            query = desc[i, q]
            if dist[q] > dist[t]:
                query = matched[(q, t)][i]
            else:
                g[:, t] = matched[(t, q)]
            pos = query @ g[i, t]
            want = 1 + sum(query @ g[j, k] >= pos for j in range(10) if j != i for k in range(3))
            assert res.ranks[p, i] == want
    with pytest.raises(InvalidArgumentError, match=r"no matched crops for views \(2, 1\)"):
        o2i.matched_cross_distance(desc, dist, {k: v for k, v in matched.items() if k != (2, 1)})
    # beta from the matched run feeds the decomposition
    dec = o2i.decompose(o2i.cross_distance(desc, dist).recall(1), res.recall(1))
    assert dec.epsilon.shape == (6,)


@pytest.mark.parametrize("block", [1, 3, 7, 64])
def test_symmetric_blocked_evaluation_equals_the_per_distance_path(block):
    """cross_distance (symmetric blocks) against positive_ranks (one GEMM per query distance)."""
    rng = np.random.default_rng(block)
    desc = rng.standard_normal((23, 5, 12)).astype(np.float32)
    cd = o2i.cross_distance(desc, [1, 2, 3, 4, 5], block=block)
    for q in range(5):
        targets = [t for t in range(5) if t != q]
        ref = o2i.positive_ranks(desc[:, q], desc, targets)
        for t, r in zip(targets, ref):
            np.testing.assert_array_equal(cd.ranks[cd.pair_index(q, t)], r)


def test_tables_for_the_report():
    from scipy import stats
    from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar
    from statsmodels.stats.multitest import multipletests
    rng = np.random.default_rng(3)
    ident = rng.standard_normal((30, 1, 10))
    base = ident + 1.2 * rng.standard_normal((30, 3, 10))
    better = ident + 0.6 * rng.standard_normal((30, 3, 10))
    cb, ci = o2i.cross_distance(base, [1, 2, 3]), o2i.cross_distance(better, [1, 2, 3])
    tab = o2i.intervention_table(cb, ci, ks=(1, 5))
    pvals = []
    for p in range(6):
        x, y = cb.hits(1)[p], ci.hits(1)[p]
        assert tab["R@1_gain"][p] == pytest.approx(y.mean() - x.mean())
        t2 = [[np.sum((x == 1) & (y == 1)), np.sum((x == 1) & (y == 0))],
              [np.sum((x == 0) & (y == 1)), np.sum((x == 0) & (y == 0))]]
        assert tab["R@1_p"][p] == pytest.approx(sm_mcnemar(t2, exact=True).pvalue)
        rr_b, rr_i = cb.reciprocal_ranks()[p], ci.reciprocal_ranks()[p]
        if np.ptp(rr_i - rr_b) > 0:
            assert tab["MRR_p"][p] == pytest.approx(stats.ttest_rel(rr_i, rr_b).pvalue)
    pvals = np.concatenate([tab["R@1_p"], tab["R@5_p"], tab["MRR_p"]])
    np.testing.assert_allclose(np.concatenate([tab["R@1_p_holm"], tab["R@5_p_holm"], tab["MRR_p_holm"]]),
                               multipletests(pvals, method="holm")[1])
    assert tab["MRR_gain"].mean() > 0
    dec = o2i.decomposition_table(cb, ci)
    np.testing.assert_allclose(dec["gamma"], 1 - cb.recall(1))
    np.testing.assert_allclose(dec["delta"], 1 - ci.recall(1))
    at = o2i.asymmetry_table(o2i.asymmetry(cb))
    assert at["magnitude"].size == 3 and np.allclose(at["difference"], at["mrr_tight_query"] - at["mrr_wide_query"])
    with pytest.raises(InvalidArgumentError, match="same objects"):
        o2i.intervention_table(cb, o2i.cross_distance(better[:20], [1, 2, 3]))


def test_non_finite_descriptors_are_refused_not_ranked_first():
    desc = descriptors(n_obj=4, n_view=3)
    desc[2, 1, 0] = np.nan
    with pytest.raises(InvalidArgumentError, match="object 2 at distance index 1 is not finite"):
        o2i.cross_distance(desc, [1, 2, 3])
