"""The simulator scenario sets of the benchmarks: a held-out set must be new data, never a copy of
a design scenario or of another held-out set (a reused law and seed would make a check of a rule
a re-measurement of the data it was chosen on)."""
import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _load(name):
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(f"sets_{name}", BENCHMARKS / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(BENCHMARKS))


def _all_sets():
    sets = dict(_load("accuracy").SETS)
    sets.update(_load("interval_carry").HELD_OUT)
    return sets


def test_every_set_has_its_own_seed_offset_and_scenario_names():
    sets = _all_sets()
    offsets = [offset for _, offset in sets.values()]
    assert len(set(offsets)) == len(offsets), "two scenario sets share a seed offset"
    for set_name, (scenarios, _) in sets.items():     # a cell is named set/scenario
        names = [name for name, *_ in scenarios]
        assert len(set(names)) == len(names), f"a scenario name appears twice in {set_name}"


def test_no_held_out_scenario_repeats_a_law_of_another_set():
    sets = _all_sets()
    seen = {}
    for set_name, (scenarios, _) in sets.items():
        for name, family, law, queries in scenarios:
            key = (family, tuple(sorted(vars(law).items())), queries)
            assert key not in seen, f"{set_name}/{name} repeats {seen[key]}"
            seen[key] = f"{set_name}/{name}"


def test_held_out_sets_are_not_design_sets():
    held_out = _load("interval_carry").HELD_OUT
    assert set(held_out) == {"cov1", "cov2", "cov3", "cov4", "cov5", "cov6", "cov7", "cov8"}
    design = set(_load("accuracy").SETS)
    assert not set(held_out) & design
    assert all(len(scenarios) == 8 for scenarios, _ in held_out.values())
