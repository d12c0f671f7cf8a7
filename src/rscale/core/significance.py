"""Paired significance tests for two systems run on the same queries (O2I paper, App. O).

- :func:`mcnemar`: per-query binary hits (R@k). With b = #{A hit, B miss} and c = #{A miss,
  B hit} (the discordant pairs), the exact test is two-sided binomial on them:
  p = min(1, 2 P(X <= min(b, c))), X ~ Binomial(b + c, 1/2), as statsmodels'
  ``mcnemar(exact=True)``. ``variant="mid-p"`` subtracts P(X = min(b, c)) (less conservative,
  Fagerland et al. 2013); ``variant="chi2"`` is the continuity-corrected chi-square,
  (|b - c| - 1)^2 / (b + c) on 1 df. No discordant pair: p = 1 (the runs agree on every query).
- :func:`paired_t`: per-query continuous values (AP, RR): t = mean(d) / (sd(d) / sqrt(n)) on
  d = B - A, n - 1 df, as scipy's ``ttest_rel``. Identical runs (every d = 0): p = 1; a constant
  non-zero difference (sd = 0 up to rounding, 1e-12 relative): p = 0.
- :func:`holm`: Holm's step-down adjustment across a family of m p-values:
  p_(i)' = max_{j <= i} min(1, (m - j + 1) p_(j)), p sorted ascending (as statsmodels'
  ``multipletests(method="holm")``).

Effect and interval: effect = mean(B) - mean(A) (for hits the difference of hit rates). Its CI is
the paired t interval on per-query differences, mean(d) +- t_{n-1, 1-a/2} sd(d) / sqrt(n) (for
binary hits, the Wald interval for paired proportions up to n / (n - 1)); ``ci="bootstrap"``
gives the percentile interval of a paired bootstrap over queries (seeded) instead.

Example: hits A = [1, 1, 0, 0, 1], B = [1, 1, 1, 1, 1]: b = 0, c = 2, p = 2 * 0.25 = 0.5,
effect +0.4.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rscale.errors import InvalidArgumentError

MCNEMAR_VARIANTS = ("exact", "mid-p", "chi2")
CI_METHODS = ("t", "bootstrap")


@dataclass(frozen=True)
class PairedTest:
    test: str               # "mcnemar-exact", "mcnemar-mid-p", "mcnemar-chi2" or "paired-t"
    n: int                  # queries
    mean_a: float
    mean_b: float
    effect: float           # mean_b - mean_a
    ci_low: float
    ci_high: float
    p_value: float
    statistic: float        # min(b, c) for the exact variants, chi-square, or t
    discordant: tuple | None = None   # (b, c): A-only hits, B-only hits (McNemar)
    confidence: float = 0.95

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _paired(a, b, binary: bool):
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise InvalidArgumentError(f"paired values need the same queries: {a.size} values against {b.size}")
    if a.size < 2:
        raise InvalidArgumentError(f"a paired test needs at least 2 queries, got {a.size}")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise InvalidArgumentError("per-query values must be finite (no NaN)")
    if binary and not (np.all((a == 0) | (a == 1)) and np.all((b == 0) | (b == 1))):
        raise InvalidArgumentError("McNemar's test takes per-query hits, 0 or 1")
    return a, b


def difference_interval(a, b, confidence: float = 0.95, method: str = "t", n_boot: int = 2000,
                        seed: int = 0) -> tuple[float, float]:
    """CI of mean(b - a) over paired queries (module docstring)."""
    from scipy import stats

    if method not in CI_METHODS:
        raise InvalidArgumentError(f"ci must be one of {', '.join(CI_METHODS)}, got {method!r}")
    if not 0 < confidence < 1:
        raise InvalidArgumentError(f"confidence must be in (0, 1), got {confidence}")
    d = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    n, m = d.size, float(d.mean())
    if method == "t":
        half = stats.t.ppf(0.5 + confidence / 2, n - 1) * d.std(ddof=1) / np.sqrt(n)
        return m - half, m + half
    rng = np.random.default_rng(seed)
    means = np.empty(n_boot)
    for s in range(0, n_boot, 256):             # blocks keep the index matrix small
        e = min(s + 256, n_boot)
        means[s:e] = d[rng.integers(0, n, size=(e - s, n))].mean(axis=1)
    lo, hi = np.quantile(means, [0.5 - confidence / 2, 0.5 + confidence / 2])
    return float(lo), float(hi)


def mcnemar(hits_a, hits_b, variant: str = "exact", confidence: float = 0.95, ci: str = "t",
            seed: int = 0) -> PairedTest:
    """McNemar's test on paired per-query hits of runs A and B (module docstring)."""
    from scipy import stats

    if variant not in MCNEMAR_VARIANTS:
        raise InvalidArgumentError(f"McNemar variant must be one of {', '.join(MCNEMAR_VARIANTS)}, got {variant!r}")
    a, b = _paired(hits_a, hits_b, binary=True)
    only_a = int(np.sum((a == 1) & (b == 0)))
    only_b = int(np.sum((a == 0) & (b == 1)))
    n_disc, low = only_a + only_b, min(only_a, only_b)
    if n_disc == 0:
        p, stat = 1.0, 0.0
    elif variant == "chi2":
        stat = (abs(only_a - only_b) - 1.0) ** 2 / n_disc
        p = float(stats.chi2.sf(stat, 1))
    else:
        stat = float(low)
        p = min(1.0, 2.0 * float(stats.binom.cdf(low, n_disc, 0.5)))
        if variant == "mid-p":
            p = min(1.0, p - float(stats.binom.pmf(low, n_disc, 0.5)))
    lo, hi = difference_interval(a, b, confidence, ci, seed=seed)
    return PairedTest(f"mcnemar-{variant}", a.size, float(a.mean()), float(b.mean()), float(b.mean() - a.mean()),
                      float(lo), float(hi), float(p), float(stat), (only_a, only_b), confidence)


def paired_t(values_a, values_b, confidence: float = 0.95, ci: str = "t", seed: int = 0) -> PairedTest:
    """Paired t-test on per-query values (AP) of runs A and B (module docstring)."""
    from scipy import stats

    a, b = _paired(values_a, values_b, binary=False)
    d = b - a
    sd = float(d.std(ddof=1))
    if np.ptp(d) <= 1e-12 * max(1.0, float(np.abs(d).max())):     # constant up to rounding
        m = float(np.mean(d))
        zero = abs(m) <= 1e-12
        t = 0.0 if zero else float(np.sign(m) * np.inf)
        p = 1.0 if zero else 0.0
    else:
        t = float(d.mean() / (sd / np.sqrt(d.size)))
        p = float(2.0 * stats.t.sf(abs(t), d.size - 1))
    lo, hi = difference_interval(a, b, confidence, ci, seed=seed)
    return PairedTest("paired-t", a.size, float(a.mean()), float(b.mean()), float(d.mean()),
                      float(lo), float(hi), p, t, None, confidence)


def holm(p_values) -> np.ndarray:
    """Holm-adjusted p-values, in the input order (module docstring)."""
    p = np.asarray(p_values, dtype=np.float64)
    if p.ndim != 1:
        raise InvalidArgumentError("holm() takes a 1-D family of p-values")
    if np.any(~np.isfinite(p)) or np.any((p < 0) | (p > 1)):
        raise InvalidArgumentError("p-values must lie in [0, 1]")
    m = p.size
    if m == 0:
        return p.copy()
    order = np.argsort(p, kind="stable")
    adj = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = adj
    return out
