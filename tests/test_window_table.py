"""The table of Binomial window sums (rscale.core.window_table) and where rscale.core.law reads it:
its values against every element summed and against scipy's Binomial pmf, the interpolant's own
properties, and the dispatch (what is tabulated and what is still summed, bit for bit)."""

import numpy as np
import pytest
from scipy import stats

from rscale.core import law, window_table


def _inputs(rng, n, cut, size, rows):
    """Hardness over every regime of the window: x = 0, n x from 1e-6 to past the reach, x = 1."""
    lam = 10.0 ** rng.uniform(-6, np.log10(window_table.reach(cut) ** 2 * 1.3), size)
    x = np.minimum(lam / n, 1.0)
    x[rng.random(size) < 0.02] = 0.0
    x[rng.random(size) < 0.01] = 1.0
    j = rng.integers(1, rows + 1, size).astype(np.float64)
    return x, j


@pytest.mark.parametrize("precision", [True, False])
@pytest.mark.parametrize("n,cut,tol", [(10 ** 8, 1000, 5e-12), (10 ** 8, 100, 5e-12), (10 ** 8, 10, 5e-12),
                                       (10 ** 8, 2, 5e-12), (3 * 10 ** 6, 4096, 2e-11), (10 ** 12, 4096, 2e-11),
                                       ("least", 1000, 5e-12), ("least", 10, 5e-12), ("least", 2, 5e-12)])
def test_the_table_gives_the_summed_windows(n, cut, tol, precision):
    """Within 5e-12 of summing each element's window for cut-offs up to 1000, 2e-11 at 4096
    (the window sums' own rounding is of that order there), down to the smallest n the table
    is used at (the least whole n >= 4 reach(cut)^2: 5,527 for cut 1000, 549 for cut 10)."""
    if n == "least":
        n = int(np.ceil(4 * window_table.reach(cut) ** 2))
    assert n >= 4 * window_table.reach(cut) ** 2
    rng = np.random.default_rng(cut + precision)
    x, j = _inputs(rng, n, cut, 20_000, min(cut, law._TABLE_ROWS))
    coef = law._window_table(n, cut, precision)
    got = window_table.evaluate(coef, n, x, (j - 1).astype(np.int64))
    want = law._summed(x, j, n, cut - j, precision)
    assert np.abs(got - want).max() < tol
    np.testing.assert_array_equal(got[x == 0], 1.0)                # g_j(0) = w_j(0), exactly
    np.testing.assert_array_equal(got[x == 1], 0.0)


@pytest.mark.parametrize("precision", [True, False])
def test_the_table_agrees_with_scipys_binomial_pmf(precision):
    """An independent implementation: scipy.stats.binom's pmf summed against the weights."""
    n, cut = 10 ** 7, 200
    coef = law._window_table(n, cut, precision)
    rng = np.random.default_rng(5)
    for _ in range(40):
        j = int(rng.integers(1, 33))
        x = float(rng.uniform(0, 260) / n)
        m = np.arange(cut - j + 1)
        w = j / (j + m) if precision else np.ones(m.size)
        want = float(np.sum(stats.binom.pmf(m, n, x) * w))
        got = float(window_table.evaluate(coef, n, np.array([x]), j - 1)[0])
        assert got == pytest.approx(want, abs=1e-11)


def test_the_interpolant_passes_through_its_nodes_and_is_exact_for_quintics():
    """At a node the table gives the node value itself; a quintic in u is reproduced everywhere
    (six-point Lagrange stencils), mirrored nodes included, so an even quintic is exact on [0, 2h)."""
    cut, n = 50, 10 ** 6
    u = window_table.nodes(cut)
    poly = np.polynomial.Polynomial([0.3, 0.0, 0.2, 0.0, 0.01, 0.0])        # even: g(-u) = g(u); > 0
    rng = np.random.default_rng(0)
    values = np.stack([poly(u), rng.uniform(0.5, 1.5, size=u.size)])
    coef = window_table.coefficients(values)
    assert coef.shape == (6, 2, window_table.intervals(cut) + 1)
    np.testing.assert_array_equal(coef[:, :, -1], 0.0)
    at_nodes = window_table.evaluate(coef, n, u[:-4] ** 2 / n, np.array([[0], [1]]))
    np.testing.assert_allclose(at_nodes, values[:, :-4], rtol=1e-13, atol=1e-12)   # u^2 / n and back: an ulp of u
    us = rng.uniform(0, u[-5], 5000)
    np.testing.assert_allclose(window_table.evaluate(coef, n, us ** 2 / n, 0), poly(us), rtol=1e-12, atol=1e-12)
    # a sum of nonnegative terms: an interpolant's dip below 0 reads as 0
    dip = window_table.coefficients(np.stack([np.where(np.arange(u.size) == 40, -1.0, 0.0)]))
    assert window_table.evaluate(dip, n, np.array([(40 * window_table.STEP) ** 2 / n]), 0)[0] == 0.0
    # past the last interval: zero
    np.testing.assert_array_equal(window_table.evaluate(coef, n, np.array([(u[-4] + 1) ** 2 / n, 1.0]), 1), 0.0)


def test_the_table_is_cached_read_only():
    a = law._window_table(10 ** 8, 1000, True)
    assert law._window_table(10 ** 8, 1000, True) is a
    assert not a.flags.writeable


def _big(rng, n, cut, rows=17, p=3000, most=40):
    x, _ = _inputs(rng, n, cut, rows * p, 1)
    x = x.reshape(rows, p)
    j = rng.integers(1, most + 1, p).astype(np.float64)
    return x, j


@pytest.mark.parametrize("shape", ["row", "full", "scalar"])
def test_positions_past_the_table_are_summed_bit_for_bit(shape, monkeypatch):
    """A query's positions past _TABLE_ROWS are summed as before (the same bits); the others are
    read off the table; j a row (one position per column), x's shape, or a scalar."""
    monkeypatch.setattr(law, "_TABLE_MIN", 1)
    rng = np.random.default_rng(3)
    n, cut = 10 ** 8, 1000
    x, j = _big(rng, n, cut)
    if shape == "full":
        j = np.broadcast_to(j, x.shape).copy()
        j[::2] = rng.integers(1, 41, j[::2].shape)
    if shape == "scalar":
        for jj in (1.0, 7.0, 33.0, 500.0):
            got = law._binomial_window_sum(x, jj, n, cut - jj, True, cut=cut)
            want = law._summed(x, jj, n, cut - jj, True)
            if jj > law._TABLE_ROWS:
                np.testing.assert_array_equal(got, want)
            else:
                assert np.abs(got - want).max() < 5e-12
        return
    got = law._binomial_window_sum(x, j, n, cut - j, True, cut=cut)
    want = law._summed(x, j, n, cut - j, True)
    past = np.broadcast_to(j > law._TABLE_ROWS, x.shape)
    assert past.any() and (~past).any()
    np.testing.assert_array_equal(got[past], want[past])
    assert np.abs(got[~past] - want[~past]).max() < 5e-12


def test_the_table_is_used_only_where_it_holds(monkeypatch):
    """Summed, bit for bit, without a cut-off, below _TABLE_MIN elements, past _TABLE_MAX_K, at an
    n under 4 reach(cut)^2, where m_max is not cut - j for whole j >= 1 (j = 0 included), and
    where j is neither a scalar, a row nor x's shape (a column) or m_max not j's shape."""
    calls = []
    real = law._tabulated
    monkeypatch.setattr(law, "_tabulated", lambda *a: calls.append(a[3]) or real(*a))
    rng = np.random.default_rng(9)
    n, cut = 10 ** 8, 1000
    x, j = _big(rng, n, cut, p=2000)
    assert x.size >= law._TABLE_MIN

    def summed(x, j, n, m_max, cut):
        got = law._binomial_window_sum(x, j, n, m_max, True, cut=cut)
        np.testing.assert_array_equal(got, law._summed(x, j, n, m_max, True))

    summed(x, j, n, cut - j, None)
    summed(x[:, :100], j[:100], n, cut - j[:100], cut)                        # too few elements
    summed(x, j, 5000, cut - j, cut)                                          # n < 4 reach^2
    summed(x, j + 0.5, n, cut - j - 0.5, cut)                                 # j not whole
    summed(x, j, n, cut - j - 1, cut)                                         # m_max is not cut - j
    j0 = j.copy()
    j0[5] = 0.0
    summed(x, j0, n, cut - j0, cut)                                           # a position 0
    col = rng.integers(1, 5, (x.shape[0], 1)).astype(np.float64)
    summed(x, col, n, cut - col, cut)                                         # a column, not a row
    summed(x, j, n, np.broadcast_to(cut - j, x.shape), cut)                   # m_max not j's shape
    least = int(np.ceil(4 * law.window_table.reach(cut) ** 2))
    summed(x, j, least - 1, cut - j, cut)                                     # just under the least n
    monkeypatch.setattr(law, "_TABLE_MAX_K", 999)
    summed(x, j, n, cut - j, cut)
    assert calls == []
    monkeypatch.setattr(law, "_TABLE_MAX_K", 1000)
    law._binomial_window_sum(x, j, n, cut - j, True, cut=cut)
    law._binomial_window_sum(x, j, least, cut - j, True, cut=cut)
    assert calls == [cut, cut]


@pytest.mark.parametrize("metric,k", [("AP", 1000), ("AP", 100), ("AP", 5), ("Recall", 50), ("Recall", 3),
                                      ("R", 10), ("RR", 1000)])
@pytest.mark.parametrize("layout", ["by position", "query-major"])
def test_metrics_read_the_table_for_large_inputs(metric, k, layout, monkeypatch):
    """Each metric with a cut-off gives, through the table, what summing every window gives, in
    the position-major layout (queries of at most 64 positives) and the query-major one (a query
    of more), with positions past the cut-off and past the table's rows."""
    rng = np.random.default_rng(2)
    sizes = rng.integers(1, 50, 2500)
    if layout == "query-major":
        sizes[7] = 90
    off = np.concatenate([[0], np.cumsum(sizes)])
    x, _ = _inputs(rng, 10 ** 7, k, 16 * int(off[-1]), 1)
    h = law.Hardness.from_flat(x.reshape(16, -1), off)
    assert (h.by_position is None) == (layout == "query-major")
    got = law.per_query(h, metric, 1e7, k, "expected")
    monkeypatch.setattr(law, "_TABLE_MIN", 1 << 62)
    want = law.per_query(h, metric, 1e7, k, "expected")
    assert np.abs(got - want).max() < 5e-12
    assert not np.array_equal(got, want)           # the table was read: not the summed bits
