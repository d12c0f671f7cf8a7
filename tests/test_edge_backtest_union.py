"""benchmarks/edge_backtest_union.py (docs/benchmarks.md, "The back-test belongs to model U"): its
U-band rule is what rscale.core.interval ships since the measurement, it never widens the union
shipped before and differs from it only where the back-test's band reaches to the side C lies from
U; held-out sets need --held-out."""

from __future__ import annotations

import numpy as np
import pytest

from benchmark_modules import load_benchmark

ebu = load_benchmark("edge_backtest_union.py", "edge_backtest_union")


@pytest.mark.parametrize("u, c, band", [(0.40, 0.37, (0.01, 0.03)), (0.40, 0.43, (0.01, 0.03)),
                                        (0.40, 0.37, (-0.03, -0.01)), (0.40, 0.37, (-0.02, 0.02)),
                                        (0.02, 0.01, (0.02, 0.05)), (0.40, 0.37, None)])
def test_the_u_band_rule_is_the_maximum_join_that_shipped_until_the_quadrature_round(u, c, band):
    # metric_intervals joins the two reaches past U in quadrature since the round of
    # benchmarks/interval_quadrature.py; its "max" join is the U-band rule this script measured
    iq = load_benchmark("interval_quadrature.py", "interval_quadrature")
    half = 0.007
    got = ebu.intervals(u, c, half, None if band is None else np.array(band))["u_band"]
    assert got == pytest.approx(iq.joined(u, c, (u + c) / 2, band, half, "max"), abs=1e-12)


def test_the_candidate_is_never_wider_and_differs_only_on_the_side_c_lies_from_u():
    rng = np.random.default_rng(0)
    for _ in range(2000):
        u, c = rng.uniform(0.05, 0.95, 2)
        e = np.sort(rng.normal(0, 0.05, 2))
        h = rng.uniform(0, 0.05)
        iv = ebu.intervals(u, c, h, e)
        (s_lo, s_hi), (a_lo, a_hi) = iv["union"], iv["u_band"]
        assert a_lo >= s_lo - 1e-12 and a_hi <= s_hi + 1e-12
        if e[1] <= 0 or c >= u:                         # the lower end moves only for C < U, U optimistic
            assert a_lo == pytest.approx(s_lo, abs=1e-12)
        elif s_lo > 0:
            assert a_lo > s_lo                          # U's optimism is no longer taken off C
            assert a_lo == pytest.approx(max(0.0, min(u - e[1], c) - h), abs=1e-12)
        if e[0] >= 0 or c <= u:                         # the upper end: the mirror case
            assert a_hi == pytest.approx(s_hi, abs=1e-12)
        elif s_hi < 1:
            assert a_hi < s_hi
            assert a_hi == pytest.approx(min(1.0, max(u - e[0], c) + h), abs=1e-12)


def test_the_spent_held_out_sets_are_seen_and_others_stop():
    """cov5 and realset5, measured once by this script, run as seen sets; a set no round reserved
    for it (cov3, spent by another script) stops with one line, even with --held-out."""
    assert ebu.HELD_OUT_SETS == ()
    for name in ("design", "fresh3", "realset4", "cov4", "cov5", "realset5"):
        ebu.check_set(name, held_out=False)
    for name in ("cov3", "nonesuch"):
        with pytest.raises(SystemExit, match=f"--set {name}: .*none is reserved"):
            ebu.check_set(name, held_out=True)
