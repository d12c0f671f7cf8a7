"""benchmarks/edge_transfer.py's band ratios: model-free sums per band of model depth."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmark_modules import load_benchmark

ROOT = Path(__file__).resolve().parent.parent


def _load():
    return load_benchmark("edge_transfer.py")


def test_band_ratios_are_sums_of_counts_over_sums_of_expectations_per_band():
    t = _load()
    depth = np.array([2e-3, 5e-3, 0.05, 0.5, 0.9, 5e-4, 2.0])       # the last two lie outside every band
    obs = np.array([1.0, 0.0, 3.0, 2.0, 4.0, 9.0, 9.0])
    mu = np.array([0.25, 0.25, 1.0, 1.0, 2.0, 1.0, 1.0])
    assert t.band_ratios(obs, mu, depth) == [(2, 2.0), (1, 3.0), (2, 2.0)]
    n, r = t.band_ratios(obs[:2], mu[:2], depth[:2])[1]
    assert n == 0 and np.isnan(r)                                     # an empty band says so


def test_a_simulator_cell_compares_halves_and_truth_on_the_same_positives():
    """One design scenario on a shallow pool runs end to end: every field is there, finite and in
    range, and the bands count only the positives the sample counts nothing above."""
    t = _load()
    name, f, r = next(t.cells("design", "evt-eb", [0.05], None, 20_000.0, 1000))
    assert f == 0.05 and name
    assert len(r["halves"]) == len(r["truth"]) == len(r["quarters"]) == len(t.BANDS)
    assert len(r["oracle_ratios"]) == len(t.BANDS) + 2 and len(r["counted"]) == len(t.COUNTED)
    assert all(np.isfinite(v) for v in r["errors"].values())
    assert 0 < r["k_halves"] and 0 < r["k_truth"] and 0 < r["k_quarters"]
    # the edge positives are fewer than all positives, and most of them sit past 1e-3 of the sample
    assert sum(n for n, _ in r["truth"]) <= r["zero_positives"] and 0 <= r["zero_below_1e-3"] < 1


def test_data_reads_a_derivative_folder_instead_of_the_committed_one(tmp_path):
    """``--data DIR`` (a seen set's derivative, e.g. a build with ``--pool-cut``): the rows come from
    DIR, whatever set is named; the committed folder is read only without it."""
    import json
    t = _load()
    args = ["--method", "evt", "--fractions", "0.1", "--draws", "1"]
    t.main(["--set", "realset", *args, "--json", str(tmp_path / "own.json")])
    t.main(["--set", "realset2", "--data", str(ROOT / "benchmarks" / "realset" / "data"), *args,
            "--json", str(tmp_path / "via_data.json")])
    own, via = (json.loads((tmp_path / f).read_text()) for f in ("own.json", "via_data.json"))
    assert [r["errors"] for r in own] == [r["errors"] for r in via] and len(own) == 1


def test_only_seen_sets_or_a_reserved_held_out_set_run():
    """cov4 and realset4 (measured once by the edge average) and cov5 and realset5 (once by
    edge_backtest_union.py) are seen now and run; a set spent by another script (cov2, cov3) stops
    with one line, even with ``--held-out`` (these scripts have no reserved set now)."""
    import pytest
    t = _load()
    for name in ("cov4", "cov5", "realset4", "realset5", "realset", "design"):
        t.check_set(name, held_out=False)
    assert t.HELD_OUT_SETS == ()
    for name in ("cov3", "cov2", "nonesuch"):
        with pytest.raises(SystemExit, match="none is reserved"):
            t.check_set(name, held_out=True)
    with pytest.raises(SystemExit, match="--set cov3"):
        t.main(["--set", "cov3", "--held-out"])
