"""Paired tests against statsmodels and scipy (rscale.core.significance)."""

import numpy as np
import pytest
from scipy import stats

from rscale.core import significance as sig
from rscale.errors import InvalidArgumentError

statsmodels = pytest.importorskip("statsmodels")
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar  # noqa: E402
from statsmodels.stats.multitest import multipletests  # noqa: E402


def paired_hits(n, pa, pb, rho, seed):
    rng = np.random.default_rng(seed)
    z = rng.standard_normal(n)
    a = (rho * z + np.sqrt(1 - rho ** 2) * rng.standard_normal(n)) < stats.norm.ppf(pa)
    b = (rho * z + np.sqrt(1 - rho ** 2) * rng.standard_normal(n)) < stats.norm.ppf(pb)
    return a.astype(float), b.astype(float)


def table(a, b):
    return [[np.sum((a == 1) & (b == 1)), np.sum((a == 1) & (b == 0))],
            [np.sum((a == 0) & (b == 1)), np.sum((a == 0) & (b == 0))]]


@pytest.mark.parametrize("seed", range(8))
def test_mcnemar_exact_and_chi2_match_statsmodels(seed):
    n = [20, 50, 200, 1000][seed % 4]
    a, b = paired_hits(n, 0.5, 0.5 + 0.05 * (seed % 3), 0.6, seed)
    res = sig.mcnemar(a, b)
    ref = sm_mcnemar(table(a, b), exact=True)
    assert res.p_value == pytest.approx(ref.pvalue, rel=1e-10, abs=1e-15)
    assert res.statistic == ref.statistic
    assert res.discordant == (table(a, b)[0][1], table(a, b)[1][0])
    chi = sig.mcnemar(a, b, variant="chi2")
    ref2 = sm_mcnemar(table(a, b), exact=False, correction=True)
    assert chi.p_value == pytest.approx(ref2.pvalue, rel=1e-10) and chi.statistic == pytest.approx(ref2.statistic)
    mid = sig.mcnemar(a, b, variant="mid-p")
    b_, c_ = res.discordant
    assert mid.p_value == pytest.approx(res.p_value - stats.binom.pmf(min(b_, c_), b_ + c_, 0.5))
    assert mid.p_value <= res.p_value
    assert res.effect == pytest.approx(b.mean() - a.mean())


def test_mcnemar_hand_example_and_edge_cases():
    res = sig.mcnemar([1, 1, 0, 0, 1], [1, 1, 1, 1, 1])
    assert res.discordant == (0, 2) and res.p_value == pytest.approx(0.5) and res.effect == pytest.approx(0.4)
    same = np.array([1, 0, 1, 1, 0, 0, 1.0])
    ident = sig.mcnemar(same, same)                   # identical runs: no discordant pair
    assert ident.p_value == 1.0 and ident.discordant == (0, 0) and ident.effect == 0.0
    assert ident.ci_low == 0.0 and ident.ci_high == 0.0
    assert sig.mcnemar(same, same, variant="chi2").p_value == 1.0
    # all discordant pairs one way
    lop = sig.mcnemar(np.zeros(12), np.ones(12))
    assert lop.p_value == pytest.approx(2 * 0.5 ** 12)
    with pytest.raises(InvalidArgumentError, match="0 or 1"):
        sig.mcnemar([0.5, 1], [1, 1])
    with pytest.raises(InvalidArgumentError, match="same queries"):
        sig.mcnemar([0, 1, 1], [1, 1])
    with pytest.raises(InvalidArgumentError, match="variant"):
        sig.mcnemar([0, 1], [1, 1], variant="asymptotic")


@pytest.mark.parametrize("seed", range(5))
def test_paired_t_matches_scipy(seed):
    rng = np.random.default_rng(seed)
    n = [5, 30, 300, 2000, 11][seed]
    a = rng.beta(2, 3, n)
    b = np.clip(a + rng.normal(0.02, 0.1, n), 0, 1)
    res = sig.paired_t(a, b)
    ref = stats.ttest_rel(b, a)
    assert res.p_value == pytest.approx(ref.pvalue, rel=1e-10)
    assert res.statistic == pytest.approx(ref.statistic, rel=1e-10)
    ci = ref.confidence_interval(0.95)
    assert (res.ci_low, res.ci_high) == pytest.approx((ci.low, ci.high), rel=1e-10)
    assert res.effect == pytest.approx(np.mean(b - a))


def test_paired_t_degenerate_differences():
    a = np.array([0.1, 0.5, 0.9, 0.3])
    ident = sig.paired_t(a, a)
    assert ident.p_value == 1.0 and ident.effect == 0.0 and ident.statistic == 0.0
    shift = sig.paired_t(a, a + 0.1)                 # constant non-zero difference: sd 0
    assert shift.p_value == 0.0 and shift.statistic == np.inf and shift.effect == pytest.approx(0.1)
    with pytest.raises(InvalidArgumentError, match="at least 2"):
        sig.paired_t([0.1], [0.2])
    with pytest.raises(InvalidArgumentError, match="finite"):
        sig.paired_t([0.1, np.nan], [0.2, 0.3])


@pytest.mark.parametrize("seed", range(6))
def test_holm_matches_statsmodels(seed):
    rng = np.random.default_rng(seed)
    p = rng.uniform(0, 0.2, size=[1, 3, 7, 20, 4, 10][seed]) ** rng.uniform(0.5, 3)
    if seed == 4:
        p[1] = p[2]                                   # ties
    reject, adj, _, _ = multipletests(p, alpha=0.05, method="holm")
    np.testing.assert_allclose(sig.holm(p), adj, rtol=1e-12)
    np.testing.assert_array_equal(sig.holm(p) <= 0.05, reject)


def test_holm_edges():
    assert sig.holm([]).size == 0
    assert sig.holm([0.3]).tolist() == [0.3]
    np.testing.assert_allclose(sig.holm([0.01, 0.04, 0.03]), [0.03, 0.06, 0.06])
    with pytest.raises(InvalidArgumentError, match=r"\[0, 1\]"):
        sig.holm([0.1, 1.5])


def test_bootstrap_interval_covers_and_is_seeded():
    a, b = paired_hits(400, 0.5, 0.6, 0.5, 3)
    t = sig.mcnemar(a, b)
    boot = sig.mcnemar(a, b, ci="bootstrap", seed=1)
    assert boot.ci_low < boot.effect < boot.ci_high
    assert abs((boot.ci_high - boot.ci_low) - (t.ci_high - t.ci_low)) < 0.25 * (t.ci_high - t.ci_low)
    assert sig.mcnemar(a, b, ci="bootstrap", seed=1) == boot
    with pytest.raises(InvalidArgumentError, match="ci must be"):
        sig.paired_t(a, b, ci="wald")


def test_t_interval_covers_the_true_difference_about_95_percent():
    """Simulated truth: paired AP-like values with a known mean difference of 0.03."""
    rng = np.random.default_rng(0)
    cover = 0
    for _ in range(400):
        a = rng.beta(2, 3, 60)
        b = a + 0.03 + rng.normal(0, 0.1, 60)
        r = sig.paired_t(a, b)
        cover += r.ci_low <= 0.03 <= r.ci_high
    assert 0.92 <= cover / 400 <= 0.98


# ---- rscale.api.compare ------------------------------------------------------------------------

from rscale.api import compare as cmp  # noqa: E402
from rscale.core import metrics  # noqa: E402
from rscale.query.measures import Measure  # noqa: E402


def random_run(ids, seed, label, n_pos=3, gallery=200):
    rng = np.random.default_rng(seed)
    ranks, sizes = [], []
    for _ in ids:
        k = rng.integers(1, n_pos + 1)
        ranks.append(np.sort(rng.choice(np.arange(1, gallery), size=k, replace=False)))
        sizes.append(k)
    return cmp.PerQueryRanks(np.asarray(ids), np.concatenate(ranks), np.concatenate([[0], np.cumsum(sizes)]), label)


def test_compare_aligns_queries_and_matches_the_reference_tests():
    ids = [f"q{i:03d}" for i in range(300)]
    a = random_run(ids, 0, "A")
    b = random_run(ids, 1, "B")
    shuffled = b.subset(np.random.default_rng(2).permutation(300))      # same queries, another order
    res = cmp.compare(a, shuffled, measures=["R@1", "R@10", "mAP@100", "MRR", "Recall@50"])
    assert res.n_queries == 300 and (res.label_a, res.label_b) == ("A", "B")
    rows = {r.measure: r for r in res.rows}
    # references on the unshuffled runs, per query by brute force
    def per_query(run, fn):
        return np.array([fn(run.ranks[run.offsets[q]:run.offsets[q + 1]]) for q in range(run.n_queries)])
    hit10_a, hit10_b = per_query(a, lambda r: float(r.min() <= 10)), per_query(b, lambda r: float(r.min() <= 10))
    tab = [[np.sum((hit10_a == 1) & (hit10_b == 1)), np.sum((hit10_a == 1) & (hit10_b == 0))],
           [np.sum((hit10_a == 0) & (hit10_b == 1)), np.sum((hit10_a == 0) & (hit10_b == 0))]]
    assert rows["R@10"].p_value == pytest.approx(sm_mcnemar(tab, exact=True).pvalue)
    assert rows["R@10"].effect == pytest.approx(hit10_b.mean() - hit10_a.mean())

    def ap100(r):
        r = np.sort(r)
        return sum((j + 1) / x for j, x in enumerate(r) if x <= 100) / min(len(r), 100)
    ap_a, ap_b = per_query(a, ap100), per_query(b, ap100)
    assert rows["mAP@100"].value_a == pytest.approx(ap_a.mean())
    assert rows["mAP@100"].p_value == pytest.approx(stats.ttest_rel(ap_b, ap_a).pvalue)
    rr_a, rr_b = per_query(a, lambda r: 1 / r.min()), per_query(b, lambda r: 1 / r.min())
    assert rows["MRR"].p_value == pytest.approx(stats.ttest_rel(rr_b, rr_a).pvalue)
    rec_b = per_query(b, lambda r: np.mean(r <= 50))
    assert rows["Recall@50"].value_b == pytest.approx(rec_b.mean())
    assert rows["R@1"].test == "mcnemar-exact" and rows["mAP@100"].test == "paired-t"
    ps = [r.p_value for r in res.rows]
    np.testing.assert_allclose([r.p_holm for r in res.rows], multipletests(ps, method="holm")[1])
    d = res.to_dict()
    assert d["measures"][0]["measure"] == "R@1" and d["ci"] == "t"


def test_compare_identical_runs_and_refusals():
    ids = [f"q{i}" for i in range(20)]
    a = random_run(ids, 0, "A")
    same = cmp.compare(a, a, measures=[Measure("R", 1), "mAP@1000"])
    assert all(r.effect == 0 and r.p_value == 1.0 and r.p_holm == 1.0 for r in same.rows)
    other = random_run(ids[:18] + ["x1", "x2"], 1, "B")
    with pytest.raises(InvalidArgumentError, match=r"different queries: 2 only in A \(e.g. 'q18'\), 2 only in B"):
        cmp.compare(a, other)
    with pytest.raises(InvalidArgumentError, match="unknown measure"):
        cmp.compare(a, a, measures=["nDCG@10"])
    with pytest.raises(InvalidArgumentError, match="twice"):
        cmp.compare(a, a, measures=["R@1", "hit@1"])
    with pytest.raises(InvalidArgumentError, match="appears more than once"):
        cmp.PerQueryRanks(np.array(["q", "q"]), np.array([1, 2]), np.array([0, 1, 2]))
    with pytest.raises(InvalidArgumentError, match="cannot compare"):
        cmp.compare([1, 2], a)


def test_compare_two_exact_evaluations_from_rscale_score(tmp_path):
    """Two `rscale score --fraction 1` runs (simulated descriptor sets, two noise levels)."""
    from rscale.api.scoring import make_descriptor_sets, score
    from rscale.store.descriptor_set import DescriptorSet
    paths = {}
    for name, noise in (("a", (0.5, 0.5)), ("b", (0.9, 0.9))):
        root = tmp_path / name
        make_descriptor_sets(root, instances=40, dim=16, positives=3, distractors=3000, seed=0, noise=noise,
                             backbone=f"sim_{name}")
        score(root / "queries", root / "positives", qrels=root / "qrels.parquet", distractors_dir=root / "distractors",
              out=root / "ss.parquet", fraction=1.0, k=50, backend="numpy", lineage=False)
        paths[name] = root
    res = cmp.compare(paths["a"] / "ss.parquet", paths["b"] / "ss.parquet", measures=["R@1", "mAP@1000"])
    # brute force: dense scores over positives + distractors, ranks by rscale.core.metrics
    ref = {}
    for name, root in paths.items():
        load = lambda p: (DescriptorSet.open(p).ids().astype(str),  # noqa: E731
                          np.concatenate([np.asarray(v) for _, v in DescriptorSet.open(p).shards()]))
        qid, q = load(root / "queries")
        pid, p = load(root / "positives")
        _, d = load(root / "distractors")
        from rscale.api.scoring import read_qrels
        rel = read_qrels(root / "qrels.parquet")
        s = q.astype(np.float32) @ np.concatenate([p, d]).T.astype(np.float32)   # the engine scores in float32
        labels = np.zeros(s.shape, int)
        labels[:, :len(pid)] = -1                             # other queries' positives are not in the gallery
        for i, qi in enumerate(qid):
            labels[i, [int(np.flatnonzero(pid == x)[0]) for x in rel[qi]]] = 1
        ranks, off = metrics.ranks_from_scores(s, labels)
        ref[name] = (metrics.hit_at_k(ranks, off, 1), metrics.ap_at_k(ranks, off, 1000))
    rows = {r.measure: r for r in res.rows}
    assert rows["R@1"].value_a == pytest.approx(ref["a"][0].mean())
    assert rows["R@1"].value_b == pytest.approx(ref["b"][0].mean())
    assert rows["mAP@1000"].value_a == pytest.approx(ref["a"][1].mean(), rel=1e-6)
    assert rows["mAP@1000"].p_value == pytest.approx(stats.ttest_rel(ref["b"][1], ref["a"][1]).pvalue, rel=1e-5)
    assert rows["mAP@1000"].effect < 0                      # more noise, worse retrieval
    # a sampled evaluation is refused
    root = paths["a"]
    score(root / "queries", root / "positives", qrels=root / "qrels.parquet", distractors_dir=root / "distractors",
          out=root / "half.parquet", fraction=0.5, k=50, backend="numpy", lineage=False)
    with pytest.raises(InvalidArgumentError, match=r"not an exact evaluation \(sampler 'hash\(seed=0\) < 0.5'\)"):
        cmp.compare(root / "half.parquet", paths["b"] / "ss.parquet")


def test_cross_distance_runs_compare_backbones_per_pair():
    from rscale.core import o2i
    rng = np.random.default_rng(0)
    ident = rng.standard_normal((40, 1, 8))
    good = ident + 0.5 * rng.standard_normal((40, 3, 8))
    bad = ident + 1.5 * rng.standard_normal((40, 3, 8))
    cg, cb = o2i.cross_distance(good, [1, 2, 3]), o2i.cross_distance(bad, [1, 2, 3])
    one = cmp.compare(cmp.PerQueryRanks.from_cross_distance(cb, pair=(0, 2), label="bad"),
                      cmp.PerQueryRanks.from_cross_distance(cg, pair=(0, 2), label="good"), measures=["R@1"])
    p = cg.pair_index(0, 2)
    assert one.rows[0].effect == pytest.approx(cg.recall(1)[p] - cb.recall(1)[p])
    stacked = cmp.PerQueryRanks.from_cross_distance(cg)
    assert stacked.n_queries == 6 * 40 and stacked.query_ids[0] == "0@1->2"
    allp = cmp.compare(cmp.PerQueryRanks.from_cross_distance(cb), stacked, measures=["R@1", "MRR"])
    assert allp.rows[0].effect == pytest.approx(cg.recall(1).mean() - cb.recall(1).mean())
    assert allp.rows[0].p_holm < 0.01


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=30))
def test_holm_properties(p):
    adj = sig.holm(p)
    p = np.asarray(p)
    assert np.all(adj >= p - 1e-15) and np.all(adj <= 1)
    order = np.argsort(p, kind="stable")
    assert np.all(np.diff(adj[order]) >= -1e-15)          # the ordering of p-values is kept


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 1)), min_size=2, max_size=60))
def test_mcnemar_is_symmetric_in_its_runs(pairs):
    a = np.array([x for x, _ in pairs], float)
    b = np.array([y for _, y in pairs], float)
    ab, ba = sig.mcnemar(a, b), sig.mcnemar(b, a)
    assert ab.p_value == pytest.approx(ba.p_value) and ab.effect == pytest.approx(-ba.effect)
    assert 0 <= ab.p_value <= 1 and ab.ci_low <= ab.effect + 1e-12 <= ab.ci_high + 2e-12
