import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from rscale.core import law, metrics
from rscale.core.law import Hardness
from rscale.errors import InvalidArgumentError


def H(x, sizes):
    return Hardness.from_flat(np.asarray(x, float), np.concatenate([[0], np.cumsum(sizes)]))


# --- hand-computed cases -------------------------------------------------------------------

def test_two_positives_plugin_by_hand():
    # ranks 1 and 2 + 1e8 * 1e-8 = 3: AP = (1/1 + 2/3) / 2
    h = H([1e-8, 0.0], [2])  # unsorted on purpose: the law sorts easiest-first
    assert law.ap_at_k(h, 1e8, 1000)[0] == pytest.approx((1 + 2 / 3) / 2)
    # cut-off k=2 drops the positive at rank 3; normaliser min(k, |G|) = 2
    assert law.ap_at_k(h, 1e8, 2)[0] == pytest.approx(0.5)
    assert law.hit_at_k(h, 1e8, 1)[0] == 1.0
    assert law.recall_at_k(h, 1e8, 2)[0] == 0.5
    assert law.reciprocal_rank(h, 1e8)[0] == 1.0


def test_normaliser_is_min_k_and_positives():
    # three positives, all at ranks 1..3; k=2 -> normaliser 2 -> AP@2 = (1 + 1) / 2 = 1
    h = H([0, 0, 0], [3])
    assert law.ap_at_k(h, 10, 2)[0] == pytest.approx(1.0)
    assert law.ap_at_k(h, 10, None)[0] == pytest.approx(1.0)


def test_ten_distractor_gallery_expected_by_hand():
    # One positive, N = 10, x = 0.1: E[1/(1+K)] = (1 - 0.9^11) / (11 * 0.1)
    h = H([0.1], [1])
    want = (1 - 0.9 ** 11) / 1.1
    assert law.reciprocal_rank(h, 10, mode="expected")[0] == pytest.approx(want, rel=1e-12)
    assert law.ap_at_k(h, 10, None, mode="expected")[0] == pytest.approx(want, rel=1e-10)
    # P(rank 1) = 0.9^10 and its Poisson form e^-1
    assert law.p_rank1(h, 10)[0] == pytest.approx(0.9 ** 10)
    assert law.p_rank1(h, 10, poisson=True)[0] == pytest.approx(np.exp(-1.0))
    assert law.hit_at_k(h, 10, 1, mode="expected")[0] == pytest.approx(0.9 ** 10)


# --- exactness on realised fractions ---------------------------------------------------------

def test_plugin_on_realised_fractions_is_the_exact_metric():
    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 12, 400)
    n = 10_000_000
    counts = rng.geometric(np.exp(rng.uniform(np.log(1e-4), 0, sizes.sum()))) - 1
    off = np.concatenate([[0], np.cumsum(sizes)])
    h = Hardness.from_counts(counts, off, n)
    ranks = metrics.ranks_from_counts(counts, off)
    for k in (1, 10, 100, 1000, None):
        np.testing.assert_allclose(law.ap_at_k(h, n, k), metrics.ap_at_k(ranks, off, k), rtol=1e-12)
    for k in (1, 5, 100):
        np.testing.assert_array_equal(law.hit_at_k(h, n, k), metrics.hit_at_k(ranks, off, k))
        np.testing.assert_allclose(law.recall_at_k(h, n, k), metrics.recall_at_k(ranks, off, k))
    np.testing.assert_allclose(law.reciprocal_rank(h, n), metrics.reciprocal_rank(ranks, off))


# --- expected mode against an independent implementation (scipy.stats.binom) ---------------------

def _expected_ap_bruteforce(x_sorted, n, k):
    total = 0.0
    for j, x in enumerate(x_sorted, start=1):
        m = np.arange(0, (n if k is None else k - j) + 1)
        if m.size == 0 or (k is not None and k - j < 0):
            continue
        total += np.sum(stats.binom.pmf(m, n, x) * j / (j + m))
    norm = len(x_sorted) if k is None else min(k, len(x_sorted))
    return total / norm


@pytest.mark.parametrize("n,k", [(50, None), (50, 10), (2000, 100), (10**6, 1000), (10**9, 1000)])
def test_expected_ap_matches_binomial_sum(n, k):
    rng = np.random.default_rng(n)
    x = np.sort(np.exp(rng.uniform(np.log(1e-3 / n), np.log(min(1.0, 3000 / n)), 6)))
    x[0] = 0.0
    h = H(x, [6])
    want = _expected_ap_bruteforce(x, n, k)
    assert law.ap_at_k(h, n, k, mode="expected")[0] == pytest.approx(want, rel=1e-9, abs=1e-13)


@pytest.mark.parametrize("n", [0, 1, 2, 7, 16, 17, 40, 1000, 10**6, 10**8, 10**10])
def test_log_choose_equals_the_log_of_the_exact_integer(n):
    # regression: -log1p(n) - betaln(n - m + 1, m + 1) was off by 5e-8 at n = 1e8, m = 100 and by
    # 1e-5 at n = 1e10, m = 1e4 (cancelling log-gamma terms of size n log n); the pmf inherits it
    import math
    ms = sorted({m for m in (0, 1, 2, 3, 15, 16, 17, 100, 1000, 12_345, n // 3, n - 17, n - 1, n)
                 if 0 <= m <= n and min(m, n - m) <= 20_000})
    want = np.array([math.log(math.comb(n, m)) if 0 < m < n else 0.0 for m in ms])
    got = law.log_choose(n, np.array(ms, dtype=np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("n,x", [(10**8, 1e-6), (10**8, 3e-6), (10**6, 1e-4), (10**10, 1e-7)])
def test_expected_ap_of_one_positive_at_large_n_equals_an_exact_pmf_sum(n, x):
    # E[1{K <= 999} / (1 + K)], K ~ Bin(n, x), the pmf from the exact integer C(n, m): within 1e-12
    # (the log-gamma difference gave 4e-8..6e-8 at n = 1e8), and the window's mass 1 to 1e-12
    import math
    mu, sd = n * x, math.sqrt(n * x * (1 - x))
    ms = range(max(0, int(mu - 12 * sd - 12)), int(mu + 12 * sd + 12) + 1)
    pmf = [math.exp(math.log(math.comb(n, m)) + m * math.log(x) + (n - m) * math.log1p(-x)) for m in ms]
    want = math.fsum(p / (1 + m) for p, m in zip(pmf, ms) if m <= 999)
    assert law.ap_at_k(H([x], [1]), n, 1000, mode="expected")[0] == pytest.approx(want, rel=1e-12)
    mass = law.hit_at_k(H([x], [1]), n, n + 1, mode="expected")[0]
    assert mass == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("n,k", [(100, 1), (100, 7), (10**8, 20)])
def test_expected_hit_and_recall_match_binomial_cdf(n, k):
    x = np.array([1e-9, 3e-8, 2e-2, 0.3])
    h = H(x, [4])
    assert law.hit_at_k(h, n, k, mode="expected")[0] == pytest.approx(stats.binom.cdf(k - 1, n, x[0]), rel=1e-9)
    want = np.mean([stats.binom.cdf(k - j, n, xj) if k - j >= 0 else 0.0 for j, xj in enumerate(x, 1)])
    assert law.recall_at_k(h, n, k, mode="expected")[0] == pytest.approx(want, rel=1e-9, abs=1e-15)


def test_expected_rr_closed_form_equals_sum():
    x = np.array([0.0, 1e-9, 1e-6, 1e-3, 0.5, 1.0])
    h = H(x, [1] * 6)
    closed = law.reciprocal_rank(h, 10**5, mode="expected")
    summed = law.reciprocal_rank(h, 10**5, k=10**5 + 1, mode="expected")
    np.testing.assert_allclose(closed, summed, rtol=1e-10)


def test_expected_mode_matches_monte_carlo_of_realised_galleries():
    # E over galleries of the realised AP equals the expected mode (linearity over positives).
    rng = np.random.default_rng(3)
    x = np.array([2e-9, 1e-8, 4e-8, 3e-7])
    n = 10**8
    h = H(x, [4])
    # nested multinomial counts: draw counts of the N distractors in the intervals between x's
    edges = np.diff(np.concatenate([[0.0], x, [1.0]]))
    draws = rng.multinomial(n, edges, size=200_000)[:, :4].cumsum(axis=1)
    off = np.arange(0, 4 * 200_000 + 1, 4)
    ap = metrics.ap_at_k_from_counts(draws.ravel(), off, 1000)
    se = ap.std() / np.sqrt(ap.size)
    assert abs(ap.mean() - law.ap_at_k(h, n, 1000, "expected")[0]) < 5 * se


# --- properties -------------------------------------------------------------------------------

hardness_lists = st.lists(
    st.lists(st.one_of(st.just(0.0), st.floats(1e-12, 1.0)), min_size=1, max_size=6),
    min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(hardness_lists, st.sampled_from([1, 3, 100, None]), st.sampled_from(["plugin", "expected"]))
def test_metrics_bounded_and_non_increasing_in_n(groups, k, mode):
    h = H(np.concatenate(groups), [len(g) for g in groups])
    prev = None
    for n in (1, 10, 1e3, 1e5, 1e7):
        ap = law.ap_at_k(h, n, k, mode)
        assert np.all((ap >= -1e-12) & (ap <= 1 + 1e-12))
        if prev is not None:
            assert np.all(ap <= prev + 1e-9)
        prev = ap


@settings(max_examples=60, deadline=None)
@given(hardness_lists, st.sampled_from([10, 1e4, 1e7]))
def test_expected_at_least_plugin_without_cutoff(groups, n):
    # j/(j+K) is convex in K, so E[j/(j+K)] >= j/(j+E K) (Jensen) when no cut-off truncates it.
    h = H(np.concatenate(groups), [len(g) for g in groups])
    assert np.all(law.ap_at_k(h, n, None, "expected") >= law.ap_at_k(h, n, None, "plugin") - 1e-12)
    assert np.all(law.reciprocal_rank(h, n, mode="expected") >= law.reciprocal_rank(h, n) - 1e-12)


def test_poisson_form_close_in_rare_event_regime():
    h = H([1e-9, 3e-9, 1e-8], [1, 1, 1])
    np.testing.assert_allclose(law.p_rank1(h, 1e8), law.p_rank1(h, 1e8, poisson=True), rtol=1e-6)


def test_curve_and_vectorised_agree_with_loop():
    rng = np.random.default_rng(1)
    sizes = rng.integers(1, 6, 50)
    x = np.exp(rng.uniform(-25, 0, sizes.sum()))
    h = H(x, sizes)
    ns = [1e5, 1e6, 1e8]
    curve = law.metric_curve(h, "AP", ns, 100)
    loop = []
    for n in ns:
        vals = []
        for q in range(50):
            xs = np.sort(h.x[h.offsets[q]:h.offsets[q + 1]])
            r = np.arange(1, xs.size + 1) + n * xs
            vals.append(np.sum(np.where(r <= 100, np.arange(1, xs.size + 1) / r, 0)) / min(100, xs.size))
        loop.append(np.mean(vals))
    np.testing.assert_allclose(curve, loop, rtol=1e-12)


# --- bad input --------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [0, 0.5, -3, float("nan"), float("inf"), "big"])
def test_bad_gallery_size(n):
    with pytest.raises(InvalidArgumentError, match="gallery size N"):
        law.map_at_k(H([0.1], [1]), n)


@pytest.mark.parametrize("k", [0, -1, 2.5])
def test_bad_cutoff(k):
    with pytest.raises(InvalidArgumentError, match="cut-off k"):
        law.map_at_k(H([0.1], [1]), 100, k)


def test_bad_hardness_and_empty_queries():
    with pytest.raises(InvalidArgumentError, match=r"\[0, 1\]"):
        H([1.5], [1])
    with pytest.raises(InvalidArgumentError, match="finite"):
        H([np.nan], [1])
    with pytest.raises(InvalidArgumentError, match="no positives"):
        H([0.1], [1, 0])
    with pytest.raises(InvalidArgumentError, match="unknown mode"):
        law.ap_at_k(H([0.1], [1]), 10, 5, "exact")
