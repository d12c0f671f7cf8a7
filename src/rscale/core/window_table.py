"""A table of Binomial window sums, read off by piecewise quintic interpolation.

The expected mode of :mod:`rscale.core.law` sums, for each positive at position j with hardness
x, the Binomial(n, x) pmf against a weight over m = 0..cut - j:

    g_j(x) = sum_{m=0}^{cut-j} P(K = m) w_j(m),   w_j(m) = j / (j + m) (AP, RR) or 1 (a CDF),

a window of up to ~20 sqrt(n x) terms per element. At a fixed n and cut, g_j is a smooth function
of one variable, so it can be computed once at nodes and interpolated: this module holds that
interpolation, and law.py computes the node values (the exact sums) and decides when to use it.

Variable: u = sqrt(n x). g_j depends on x through the pmf, whose mean n x = u^2 and width sqrt(n x) =
u make it vary on a scale of about 1/2 in u wherever it varies at all (its cut-off transition near
n x = cut - j is sqrt(cut) wide in n x, so 1/2 wide in u); g_j is even in u (a function of u^2), so
the nodes below 0 mirror those above it. Nodes: u_i = i * STEP, i = 0..I + 3, where I * STEP
reaches past ``reach(cut)``: beyond it, where n x - 10 sqrt(n x) - 10 >= cut, every window term
is below 1e-15 of 1 and g_j is 0 to double precision.

Interpolant: on [u_i, u_{i+1}] the quintic through the six nodes u_{i-2}..u_{i+3}, in powers of
t = u / STEP - i in [0, 1), stored power-major as ``coefficients[p, row, i]`` (6, rows, I + 1);
interval I is all zeros, and every u at or past I * STEP reads it (g = 0). The constant term is
the node value itself, so x = 0 gives g_j(0) = w_j(0) exactly. The interpolation error is of
order (STEP / 0.5)^6 times g's sixth-derivative scale: below 5e-12 for cut <= 1000 and 2e-11 at
cut = 4096 against the summed windows (tests/test_window_table.py; docs/benchmarks.md,
"Tabulated window sums, shipped").
"""

from __future__ import annotations

import math

import numpy as np

STEP = 0.01
# Interval i's stencil: nodes i - 2 .. i + 3; power coefficients = _TO_POWERS @ node values.
_STENCIL = np.arange(-2, 4, dtype=np.float64)
_TO_POWERS = np.linalg.inv(np.vander(_STENCIL, 6, increasing=True))


def reach(cut: int) -> float:
    """The u = sqrt(n x) past which every term of the window sum up to ``cut`` is below 1e-15:
    the root of u^2 - 10 u - 10 = cut."""
    return 5.0 + math.sqrt(35.0 + float(cut))


def intervals(cut: int) -> int:
    """Number I of interpolation intervals, [0, I * STEP) covering [0, reach(cut))."""
    return int(math.ceil(reach(cut) / STEP))


def nodes(cut: int) -> np.ndarray:
    """The non-negative nodes u_0..u_{I+3} at which the sums are computed (the stencils of the
    last intervals reach three past I)."""
    return np.arange(intervals(cut) + 4, dtype=np.float64) * STEP


def coefficients(values: np.ndarray) -> np.ndarray:
    """Power coefficients (6, rows, I + 1) from node values (rows, I + 4) at :func:`nodes`;
    the last interval is all zeros (g = 0 there)."""
    values = np.asarray(values, dtype=np.float64)
    rows, count = values.shape
    n_int = count - 4
    mirrored = np.concatenate([values[:, 2:0:-1], values], axis=1)      # u = -2 STEP, -STEP, 0, ...
    from numpy.lib.stride_tricks import sliding_window_view
    stencils = sliding_window_view(mirrored, 6, axis=1)[:, :n_int]          # (rows, I, 6)
    out = np.zeros((6, rows, n_int + 1))
    out[:, :, :n_int] = np.einsum("pa,ria->pri", _TO_POWERS, stencils)
    out[0, :, :n_int] = values[:, :n_int]                                  # the node value itself
    return out


def evaluate(coef: np.ndarray, n: int, x: np.ndarray, row) -> np.ndarray:
    """g_{row + 1}(x) at ``n`` from :func:`coefficients` ``coef``; ``row`` (0-based) broadcasts
    against ``x`` (a whole-number array or an int). g is a sum of nonnegative terms: a value the
    interpolant puts below 0 (~1e-26, near the reach) is returned as 0."""
    n_int = coef.shape[2] - 1
    s = np.sqrt(np.asarray(x, dtype=np.float64) * float(n))
    s /= STEP
    idx = np.minimum(s, float(n_int)).astype(np.int64)        # floor for s >= 0; past the reach: I
    s -= idx                                                   # t in [0, 1) (anything past I: zeros)
    flat = idx
    if not (np.ndim(row) == 0 and int(row) == 0):
        flat = idx + np.asarray(row, dtype=np.int64) * (n_int + 1)
    c = coef.reshape(6, -1)
    v = c[5].take(flat)
    for p in range(4, -1, -1):
        v *= s
        v += c[p].take(flat)
    return np.maximum(v, 0.0, out=v)        # near the reach a quintic may dip below 0 by ~1e-26
