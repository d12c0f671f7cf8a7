import numpy as np

from rscale.core import law, metrics
from rscale.score.bruteforce import sample_stats_dense
from rscale.sim.descriptors import make_descriptors


def test_unit_norm_and_structure():
    ds = make_descriptors(n_instances=10, d=16, n_distractors=2000, seed=1)
    for arr in (ds.queries, ds.positives, ds.distractors):
        np.testing.assert_allclose(np.linalg.norm(arr, axis=1), 1.0, rtol=1e-5)
    # positives score higher against their query than random distractors do
    q = 0
    pos = ds.positives[ds.positives_of(q)] @ ds.queries[q]
    assert np.median(pos) > np.quantile(ds.distractors @ ds.queries[q], 0.99)


def test_near_duplicates_are_hard():
    easy = make_descriptors(n_instances=10, d=16, n_distractors=3000, hard_share=0.0, seed=2)
    hard = make_descriptors(n_instances=10, d=16, n_distractors=3000, hard_share=0.05, seed=2)
    top_easy = np.max(easy.queries @ easy.distractors.T, axis=1).mean()
    top_hard = np.max(hard.queries @ hard.distractors.T, axis=1).mean()
    assert top_hard > top_easy + 0.05


def test_dense_sample_stats_reproduce_bruteforce_metric():
    ds = make_descriptors(n_instances=15, d=16, positives_per_instance=3, n_distractors=3000, seed=3)
    ss = sample_stats_dense(ds.queries, ds.query_ids, ds.positives_of, ds.positives, ds.positive_ids,
                            ds.distractors, k=100)
    # full-gallery brute-force ranking of positives among distractors
    labels, scores = [], []
    for q in range(len(ds.queries)):
        lab = np.concatenate([np.ones(len(ds.positives_of(q)), int), np.zeros(len(ds.distractors), int)])
        sc = np.concatenate([ds.positives[ds.positives_of(q)] @ ds.queries[q].astype(np.float64),
                             ds.distractors.astype(np.float64) @ ds.queries[q].astype(np.float64)])
        labels.append(lab)
        scores.append(sc)
    ranks, off = metrics.ranks_from_scores(np.array(scores), np.array(labels))
    exact = metrics.ap_at_k(ranks, off, 1000)
    via_counts = law.ap_at_k(law.Hardness.from_counts(ss.pos_counts, ss.pos_offsets, 3000), 3000, 1000)
    np.testing.assert_allclose(via_counts, exact, rtol=1e-12)
