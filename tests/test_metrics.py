import numpy as np
import pytest
from sklearn.metrics import average_precision_score

from rscale.core import metrics


def test_ap_by_hand():
    # positives at ranks 1 and 3 of a query with 2 positives
    assert metrics.ap_at_k([1, 3], [0, 2], k=1000)[0] == pytest.approx((1 + 2 / 3) / 2)
    # positives at ranks 2 and 5, k = 4: only the first counts, normaliser min(4, 2) = 2
    assert metrics.ap_at_k([5, 2], [0, 2], k=4)[0] == pytest.approx(0.5 / 2)
    # a positive missing from the list still counts in the normaliser
    assert metrics.ap_at_k([1], [0, 1], k=10, n_relevant=[2])[0] == pytest.approx(0.5)


def _random_gallery(rng, n_queries=30, n_gallery=300, ties=False):
    scores = rng.normal(size=(n_queries, n_gallery))
    if ties:
        scores = np.round(scores, 1)
    labels = np.zeros_like(scores, dtype=int)
    for q in range(n_queries):
        pos = rng.choice(n_gallery, size=rng.integers(1, 15), replace=False)
        labels[q, pos] = 1
        scores[q, pos] += rng.uniform(0, 3)
    return scores, labels


@pytest.mark.parametrize("k", [None, 1000, 50, 10])
def test_ap_matches_sklearn_with_ilias_rescaling(k):
    rng = np.random.default_rng(0)
    scores, labels = _random_gallery(rng)
    ranks, off = metrics.ranks_from_scores(scores, labels)
    ours = metrics.ap_at_k(ranks, off, k)
    ref = []
    for s, lab in zip(scores, labels):
        order = np.argsort(-s, kind="stable")
        top = order if k is None else order[:k]
        n_top = lab[top].sum()
        if n_top == 0:
            ref.append(0.0)
            continue
        # sklearn's AP over the top-k list, rescaled from its own normaliser (positives in the
        # list) to ILIAS's min(k, |G|)
        ap = average_precision_score(lab[top], s[top]) if n_top < top.size else 1.0
        ref.append(ap * n_top / (lab.sum() if k is None else min(k, lab.sum())))
    np.testing.assert_allclose(ours, ref, rtol=1e-10)


def test_ranking_bruteforce_matches_counts():
    rng = np.random.default_rng(1)
    scores, labels = _random_gallery(rng)
    ranks, off = metrics.ranks_from_scores(scores, labels)
    # brute force: sort the whole gallery, read positions of positives
    for q in range(scores.shape[0]):
        order = np.argsort(-scores[q], kind="stable")
        want = np.sort(np.flatnonzero(labels[q][order] == 1) + 1)
        np.testing.assert_array_equal(np.sort(ranks[off[q]:off[q + 1]]), want)


def test_tie_rule_is_pessimistic():
    # a distractor tied with the positive ranks above it
    ranks, off = metrics.ranks_from_scores(np.array([[0.5, 0.5, 0.1]]), np.array([[1, 0, 0]]))
    assert ranks.tolist() == [2]
    # tied positives with each other: ranks 1, 2 whatever their order
    ranks, off = metrics.ranks_from_scores(np.array([[0.5, 0.5, 0.1]]), np.array([[1, 1, 0]]))
    assert ranks.tolist() == [1, 2]
    assert metrics.ap_at_k(ranks, off, 10)[0] == 1.0


def _revisitop_compute_ap(ranks, nres):
    # The published revisited Oxford/Paris loop, written independently as the reference.
    ap = 0.0
    step = 1.0 / nres
    for j, rank in enumerate(ranks):
        p0 = 1.0 if rank == 0 else j / rank
        p1 = (j + 1) / (rank + 1)
        ap += (p0 + p1) * step / 2.0
    return ap


def test_revisited_ap_with_junk_removed():
    rng = np.random.default_rng(2)
    scores, labels = _random_gallery(rng)
    # mark a few distractors as junk: they are removed before ranking
    junk = (labels == 0) & (rng.random(labels.shape) < 0.05)
    labels = np.where(junk, -1, labels)
    ranks, off = metrics.ranks_from_scores(scores, labels)
    ours = metrics.revisited_ap(ranks - 1, off)
    for q in range(scores.shape[0]):
        keep = labels[q] >= 0
        order = np.argsort(-scores[q][keep], kind="stable")
        pos0 = np.flatnonzero(labels[q][keep][order] == 1)
        assert ours[q] == pytest.approx(_revisitop_compute_ap(pos0, pos0.size))


def test_hit_recall_rr():
    ranks, off = np.array([3, 7, 1, 2]), np.array([0, 2, 4])
    assert metrics.hit_at_k(ranks, off, 1).tolist() == [0.0, 1.0]
    assert metrics.hit_at_k(ranks, off, 3).tolist() == [1.0, 1.0]
    assert metrics.recall_at_k(ranks, off, 3).tolist() == [0.5, 1.0]
    assert metrics.reciprocal_rank(ranks, off).tolist() == [1 / 3, 1.0]
    assert metrics.reciprocal_rank(ranks, off, k=2).tolist() == [0.0, 1.0]


def test_ranks_must_be_positions():
    from rscale.errors import InvalidArgumentError
    with pytest.raises(InvalidArgumentError):
        metrics.ap_at_k([1, 1], [0, 2])
    with pytest.raises(InvalidArgumentError):
        metrics.ap_at_k([2, 2], [0, 2])
    with pytest.raises(InvalidArgumentError):
        metrics.ap_at_k([0], [0, 1])


@pytest.mark.parametrize("k", [15, 50, 1000])
def test_ap_matches_ir_measures_where_all_positives_fit_in_k(k):
    # trec_eval's AP@k (pytrec_eval through ir_measures) normalises by |G|, ILIAS's by
    # min(k, |G|): the two agree exactly when |G| <= k, positives beyond rank k counting 0 in both
    ir_measures = pytest.importorskip("ir_measures")
    rng = np.random.default_rng(k)
    scores, labels = _random_gallery(rng, n_queries=40, n_gallery=200)
    qrels, run, ranks, offsets = [], [], [], [0]
    for q in range(scores.shape[0]):
        order = np.argsort(-scores[q], kind="stable")
        pos_rank = np.flatnonzero(labels[q][order]) + 1
        assert len(pos_rank) <= k
        ranks += pos_rank.tolist()
        offsets.append(len(ranks))
        qrels += [ir_measures.Qrel(f"q{q}", f"d{d}", 1) for d in np.flatnonzero(labels[q])]
        # scores as rank-derived floats: trec_eval then ranks exactly as argsort did (no ties)
        run += [ir_measures.ScoredDoc(f"q{q}", f"d{d}", float(len(order) - i)) for i, d in enumerate(order)]
    ours = metrics.ap_at_k(np.asarray(ranks), np.asarray(offsets), k=k)
    theirs = {m.query_id: m.value for m in ir_measures.iter_calc([ir_measures.AP @ k], qrels, run)}
    np.testing.assert_allclose(ours, [theirs[f"q{q}"] for q in range(scores.shape[0])], rtol=1e-12, atol=1e-12)
    assert ours.min() < 1.0 and (k > 15 or ours.min() < ours.max())   # not a degenerate case
