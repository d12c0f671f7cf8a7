"""benchmarks/edge_average.py: the two edge models' average and the union of their intervals,
computed from a cell's stored fit beside what the shipped path answered for it."""

from __future__ import annotations

import pytest

from benchmark_modules import load_benchmark


def _load():
    return load_benchmark("edge_average.py")


@pytest.mark.slow
def test_a_real_cell_through_the_shipped_path(tmp_path):
    """realset's first 1% draw through the shipped path, which averages the two edge models since
    the rule is built: the script's own average is the query's answer (an implementation apart
    from src's: the benchmark's draws times the stored factor), and the answer and its interval's
    width are the figures measured before the rule was built."""
    ea = _load()
    import accuracy_table as T
    draw = T.real_draws("realset", [0.01], 1)[0]
    r = ea.cell(draw, tmp_path / "cache")
    assert r["built"] and r["u_check"] < 1e-12 and r["truth"] == draw.truth
    assert len(r["band_ratios"]) == 3 and all(b > 0 for b in r["band_ratios"])     # the prior keeps them positive
    # the measured figures of this cell (benchmarks/edge_average_rows/design.json, before the rule was built)
    assert r["err_average"] == pytest.approx(0.027231334344281155, abs=1e-12)
    assert r["width_union"] == pytest.approx(0.1408798803541309, abs=1e-12)
    text = ea.summary([r])
    assert "| realset | 1% | 1 |" in text


def test_the_set_guard_is_edge_transfers():
    ea = _load()
    for name in ("cov3", "nonesuch"):
        with pytest.raises(SystemExit, match="none is reserved"):
            ea.main(["--set", name, "--held-out"])


def test_a_held_out_simulator_set_has_the_tables_draw_zero():
    """cov4's cells are what the accuracy table's draws would be: N = 1e8, K = min(4000, S), seed 7 +
    the set's offset, one per scenario and fraction."""
    ea = _load()
    from interval_carry import HELD_OUT
    draws = ea.draws_of("cov4", [0.01, 0.05])
    scenarios, offset = HELD_OUT["cov4"]
    assert len(draws) == 2 * len(scenarios)
    assert all(d.n == 1e8 and d.sim["seed"] == 7 + offset and d.sim["k"] == 4000 and d.draw == 0 for d in draws)
    assert sorted({d.sim["s"] for d in draws}) == [1_000_000, 5_000_000]
