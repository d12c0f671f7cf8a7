"""The query path's fast evaluation equals the one-at-a-time path it replaced: the law on a stack
(B, P) of hardness vectors, the block-by-size within-query sort, the segment sums, the
replicates and back-test shares evaluated as stacks (random data with ties, single- and
many-positive queries, empty queries where they are allowed)."""

from dataclasses import replace

import numpy as np
import pytest
from scipy import stats

from rscale.core import law, ragged
from rscale.core.backtest import Backtest, factor_errors, sample_metric
from rscale.core.estimators.base import HardnessEstimate
from rscale.core.law import Hardness
from rscale.core.prediction import predict_per_query, replicate_per_query
from rscale.errors import InvalidArgumentError

CELLS = [("AP", 1000, "plugin"), ("AP", None, "plugin"), ("AP", 3, "plugin"), ("AP", 50, "expected"),
         ("R", 1, "plugin"), ("R", 5, "expected"), ("R", 1, "expected"), ("Recall", 4, "plugin"),
         ("Recall", 4, "expected"), ("RR", None, "plugin"), ("RR", 10, "plugin"), ("RR", None, "expected"),
         ("RR", 10, "expected")]


def _offsets(sizes):
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def _ragged(rng, n_queries, max_pos, rows=None, ties=True, empty=False):
    sizes = rng.integers(0 if empty else 1, max_pos + 1, n_queries)
    shape = (sizes.sum(),) if rows is None else (rows, sizes.sum())
    x = rng.random(shape) ** 4 * 1e-3
    if ties:        # many exact ties, zeros and ones
        x = np.round(x, 5)
        x[rng.random(shape) < 0.1] = 0.0
        x[rng.random(shape) < 0.02] = 1.0
    return x, _offsets(sizes)


def _old_sorted(values, offsets):
    """The replaced sort: a lexsort of (value, query) per row."""
    q = ragged.group_index(offsets)
    rows = np.atleast_2d(values)
    out = np.stack([r[np.lexsort((r, q))] for r in rows])
    return out if values.ndim == 2 else out[0]


def _brute_plugin(x, offsets, metric, n, k):
    """Per-query plug-in metric by a Python loop over each query's sorted positives."""
    out = []
    for a, b in zip(offsets[:-1], offsets[1:]):
        xs = np.sort(x[a:b])
        ranks = np.arange(1, b - a + 1) + n * xs
        inside = ranks <= (np.inf if k is None else k * (1 + 1e-12) + 1e-9)
        if metric == "AP":
            out.append(np.sum(np.where(inside, np.arange(1, b - a + 1) / ranks, 0.0)) / min(k or b - a, b - a))
        elif metric == "R":
            out.append(float(ranks[0] <= k * (1 + 1e-12) + 1e-9))
        elif metric == "Recall":
            out.append(np.sum(inside) / (b - a))
        else:
            out.append(1.0 / ranks[0] if inside[0] else 0.0)
    return np.array(out)


def _brute_expected(x, offsets, metric, n, k):
    """Per-query expected metric by full Binomial pmf sums (scipy), each positive on its own."""
    out = []
    for a, b in zip(offsets[:-1], offsets[1:]):
        xs = np.sort(x[a:b])
        m = np.arange(n + 1)
        if metric in ("R", "RR"):
            pmf = stats.binom.pmf(m, n, xs[0])
            w = (m <= (k - 1 if k else n)) * (1.0 / (1 + m) if metric == "RR" else 1.0)
            out.append(np.sum(pmf * w))
            continue
        total = 0.0
        for j, xj in enumerate(xs, start=1):
            pmf = stats.binom.pmf(m, n, xj)
            keep = m <= (k - j if k else n)
            total += np.sum(pmf * keep * (j / (j + m) if metric == "AP" else 1.0))
        out.append(total / (min(k, b - a) if metric == "AP" and k else b - a))
    return np.array(out)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("rows", [None, 7])
def test_block_sort_gives_the_values_of_the_lexsort(seed, rows):
    rng = np.random.default_rng(seed)
    x, off = _ragged(rng, 300, 1 + 20 * seed, rows=rows, empty=True)
    got = ragged.sorted_within_groups(x, off)
    assert np.array_equal(got, _old_sorted(x, off))
    assert np.array_equal(x, x.copy())                   # input left as it was
    sorted_in = _old_sorted(x, off)
    assert ragged.sorted_within_groups(sorted_in, off) is sorted_in     # already sorted: no copy


def test_block_sort_edges():
    assert ragged.sorted_within_groups(np.zeros(0), np.array([0])).size == 0
    assert ragged.sorted_within_groups(np.array([0.5]), np.array([0, 1]))[0] == 0.5
    x = np.array([[0.3, 0.1, 0.2, 0.9, 0.0]])
    assert ragged.sorted_within_groups(x, np.array([0, 3, 3, 5])).tolist() == [[0.1, 0.2, 0.3, 0.0, 0.9]]
    # a descent across a query boundary is not out of order
    same = np.array([0.9, 0.1])
    assert ragged.sorted_within_groups(same, np.array([0, 1, 2])) is same


@pytest.mark.parametrize("rows", [None, 5])
def test_group_sum_equals_bincount_with_and_without_empty_queries(rows):
    rng = np.random.default_rng(3)
    for empty in (False, True):
        x, off = _ragged(rng, 200, 9, rows=rows, empty=empty)
        q = ragged.group_index(off)
        want = np.stack([np.bincount(q, weights=r, minlength=off.size - 1) for r in np.atleast_2d(x)])
        got = np.atleast_2d(ragged.group_sum(x, off))
        np.testing.assert_allclose(got, want, rtol=1e-14, atol=0)   # the same sums, up to the order of additions
    assert ragged.group_sum(np.zeros((3, 0)), np.array([0])).shape == (3, 0)


@pytest.mark.parametrize("block,layout", [(None, "by position"), (700, "by position"), (700, "segments")])
@pytest.mark.parametrize("metric,k,mode", CELLS)
def test_stack_equals_one_row_at_a_time_and_a_brute_force_loop(metric, k, mode, block, layout, monkeypatch):
    if block:          # a stack larger than one block: evaluated in blocks of rows
        monkeypatch.setattr(law, "_STACK_BLOCK", block)
    if layout == "segments":     # queries with more positives than the position-major layout takes
        monkeypatch.setattr(law, "_MAX_BY_POSITION", 3)
    rng = np.random.default_rng(sum(map(ord, f"{metric}{k}{mode}")))
    n = 40 if mode == "expected" else 1e6
    x, off = _ragged(rng, 25 if mode == "expected" else 400, 8, rows=6)
    if mode == "expected":
        x = np.minimum(x * 200, 1.0)          # N x = O(1) at N = 40: every term of the window matters
    stack = law.per_query(Hardness.from_flat(x, off), metric, n, k, mode)
    rows = np.stack([law.per_query(Hardness.from_flat(r, off), metric, n, k, mode) for r in x])
    assert stack.shape == (6, off.size - 1)
    np.testing.assert_allclose(stack, rows, rtol=0, atol=1e-12)
    brute = _brute_plugin if mode == "plugin" else _brute_expected
    want = np.stack([brute(r, off, metric, n, k) for r in x])
    np.testing.assert_allclose(stack, want, rtol=0, atol=1e-12)


def test_stack_refuses_what_one_row_refuses():
    off = np.array([0, 2, 2, 3])
    with pytest.raises(InvalidArgumentError, match="query 1 has no positives"):
        Hardness.from_flat(np.zeros((3, 3)), off)
    with pytest.raises(InvalidArgumentError, match="positive 2 is 1.5"):
        Hardness.from_flat(np.array([[0, 0, 0], [0, 0, 1.5]]), np.array([0, 3]))
    with pytest.raises(InvalidArgumentError, match="finite"):
        Hardness.from_flat(np.array([[0, np.nan, 0]]), np.array([0, 3]))
    with pytest.raises(InvalidArgumentError, match="flat 1-D"):
        Hardness.from_flat(np.zeros((2, 2, 2)), np.array([0, 2]))


def _estimate(rng, n_queries=300, reps=8, draws=None, vary_s=True):
    x, off = _ragged(rng, n_queries, 7)
    p = x.size
    s = rng.integers(50_000, 100_000, n_queries) if vary_s else np.full(n_queries, 80_000)
    noisy = lambda m: np.clip(x[:, None] * np.exp(rng.normal(0, 0.4, (p, m))), 0, 1)   # noqa: E731
    est = HardnessEstimate(method="evt", x=x, offsets=off, rule=np.full(p, "tail"), n_sampled=s,
                           replicates=np.round(noisy(reps), 6), draws=None if draws is None else noisy(draws))
    counts = np.minimum(np.round(x * np.repeat(s, np.diff(off)) * rng.uniform(0.5, 1.5, p)),
                        np.repeat(s, np.diff(off))).astype(np.int64)
    return est, counts


def _read_only(est, bt):
    for a in (est.x, est.offsets, est.n_sampled, est.replicates, est.draws, bt.columns, bt.counts):
        if a is not None:
            a.flags.writeable = False


@pytest.mark.parametrize("cached", [False, True])
def test_replicates_and_draws_as_stacks_equal_the_loop_they_replaced(cached):
    rng = np.random.default_rng(11)
    est, counts = _estimate(rng, draws=5)
    if cached:
        _read_only(est, Backtest(counts=counts, columns=est.replicates[:, :4].copy()))
    for metric, k, mode in CELLS[:3] + CELLS[4:5] + CELLS[7:8] + CELLS[9:10]:
        got = replicate_per_query(est, metric, 1e8, k, mode)
        want = np.stack([law.per_query(Hardness.from_flat(est.replicates[:, r], est.offsets), metric, 1e8, k, mode)
                         for r in range(est.replicates.shape[1])])
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
        got_p = predict_per_query(est, metric, 1e8, k, mode)
        want_p = np.mean([law.per_query(Hardness.from_flat(est.draws[:, d], est.offsets), metric, 1e8, k, mode)
                          for d in range(est.draws.shape[1])], axis=0)
        np.testing.assert_allclose(got_p, want_p, rtol=0, atol=1e-12)
    if cached:      # a registry-cached (read-only) estimate sorts its replicates and draws once
        assert est.replicate_hardness() is est.replicate_hardness()
        assert "_draws_hardness" in est.__dict__


def test_in_pool_stacks_equal_the_loop():
    from rscale.core.prediction import in_pool_hardness
    rng = np.random.default_rng(5)
    est, counts = _estimate(rng, draws=3)
    s = np.repeat(est.n_sampled, np.diff(est.offsets))
    n = 2e5
    got = replicate_per_query(est, "AP", n, 100, "plugin", in_pool_counts=counts)
    want = np.stack([law.per_query(Hardness.from_flat(in_pool_hardness(est.replicates[:, r], counts, s, n),
                                                      est.offsets), "AP", n, 100, "plugin")
                     for r in range(est.replicates.shape[1])])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    got_p = predict_per_query(est, "AP", n, 100, "plugin", in_pool_counts=counts)
    want_p = np.mean([law.per_query(Hardness.from_flat(in_pool_hardness(est.draws[:, d], counts, s, n), est.offsets),
                                    "AP", n, 100, "plugin") for d in range(est.draws.shape[1])], axis=0)
    np.testing.assert_allclose(got_p, want_p, rtol=0, atol=1e-12)


def _old_factor_errors(est, bt, metric, k, mode, m):
    """The replaced back-test: every share re-scaled, re-sorted and evaluated on its own."""
    s_ref = float(np.max(est.n_sampled))
    truth = float(sample_metric(est, bt.counts, metric, k).mean())
    cols = ([est.replicates[:, j] for j in range(est.replicates.shape[1])] if m == 2
            else [bt.columns[:, j] for j in np.flatnonzero(bt.column_factors == m)])
    scale = np.repeat(est.n_sampled / s_ref, np.diff(est.offsets))
    out = []
    for x in cols:
        xx = x if np.all(scale == 1.0) else np.clip(x * scale, 0.0, 1.0)
        out.append(float(law.per_query(Hardness.from_flat(np.ascontiguousarray(xx), est.offsets), metric, s_ref, k,
                                       mode).mean()))
    return np.array(out) - truth


@pytest.mark.parametrize("vary_s", [True, False])
@pytest.mark.parametrize("cached", [False, True])
def test_back_test_errors_equal_the_per_share_loop(vary_s, cached):
    rng = np.random.default_rng(7)
    est, counts = _estimate(rng, vary_s=vary_s)
    cols = np.clip(est.x[:, None] * np.exp(rng.normal(0, 0.5, (est.x.size, 6))), 0, 1)
    bt = Backtest(counts=counts, columns=cols, column_factors=np.array([4, 4, 4, 4, 8, 8]))
    if cached:
        _read_only(est, bt)
    for metric, k, mode in [("AP", 1000, "plugin"), ("AP", 10, "plugin"), ("RR", None, "plugin"),
                            ("R", 1, "expected"), ("Recall", 5, "expected")]:
        for m in (2, 4, 8):
            got = factor_errors(est, bt, metric, k, mode, m)
            np.testing.assert_allclose(got, _old_factor_errors(est, bt, metric, k, mode, m), rtol=0, atol=1e-12)
    assert ("_columns_hardness" in bt.__dict__) == cached       # the shares' sort kept only when immutable


def test_presorted_shares_index_arrays_and_keeps_values():
    h = Hardness.from_flat(np.array([[0.2, 0.1, 0.3], [0.0, 0.5, 0.4]]), np.array([0, 2, 3]))
    g = Hardness.presorted(np.clip(h.x * 2.0, 0, 1), h)
    assert g.j is h.j and g.query is h.query
    np.testing.assert_array_equal(g.x, [[0.2, 0.4, 0.6], [0.0, 1.0, 0.8]])
    assert replace(h, x=h.x[:1]).x.shape == (1, 3)


def test_position_major_layout_sums_each_query_in_order():
    off = np.array([0, 2, 5, 6, 10])               # sizes 2, 3, 1, 4
    h = Hardness.from_flat(np.linspace(0, 1e-3, 10), off)
    bp = h.by_position
    assert bp.starts == (0, 4, 7, 9, 10)            # queries with > 0, > 1, > 2, > 3 positives
    assert bp.jf.tolist() == [1] * 4 + [2] * 3 + [3] * 2 + [4]
    v = np.arange(10.0) ** 2
    np.testing.assert_array_equal(bp.sums(v[bp.perm]), np.bincount(ragged.group_index(off), weights=v))
    np.testing.assert_array_equal(bp.sums(np.stack([v, -v])[:, bp.perm]),
                                  np.stack([np.bincount(ragged.group_index(off), weights=w) for w in (v, -v)]))
    assert h.x_by_position.flags.c_contiguous
    big = Hardness.from_flat(np.zeros(65), np.array([0, 65]))
    assert big.by_position is None                  # beyond _MAX_BY_POSITION: segment sums
    assert law.ap_at_k(big, 10, None)[0] == 1.0


def test_a_sorted_writable_input_is_copied_and_a_read_only_one_shared():
    x = np.array([0.1, 0.2, 0.05])
    h = Hardness.from_flat(x, np.array([0, 2, 3]))
    x[0] = 0.9                                      # the caller's array changes; the law's view does not
    assert h.x.tolist() == [0.1, 0.2, 0.05]
    ro = np.array([0.1, 0.2, 0.05])
    ro.flags.writeable = False
    assert Hardness.from_flat(ro, np.array([0, 2, 3])).x is ro     # immutable: no copy needed
