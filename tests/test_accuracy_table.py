"""benchmarks/accuracy_table.py (the generated accuracy table) and benchmarks/accuracy.py's row
selection: the table's cells run the shipped path (estimate -> register -> query) and agree with
a direct computation from the registry; the markers are replaced idempotently; the cache skips
unchanged cells and recomputes changed ones."""

from __future__ import annotations

import ast
import itertools
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from benchmark_modules import load_benchmark

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _load(name):
    return load_benchmark(f"{name}.py", f"bench_{name}")


@pytest.fixture(scope="module")
def accuracy():
    return _load("accuracy")


@pytest.mark.parametrize("which", ["holdout", "fresh4", "fresh5"])
def test_core_on_a_non_design_set_runs_count_and_sdm(accuracy, which):
    """Regression: --core on a non-design set silently dropped count and sdm (the set filter ran
    first and kept only the evt variants)."""
    rows, _ = accuracy.selected_estimators(which, core=True)
    labels = [r[0] for r in rows]
    for label in accuracy.CORE_ROWS:
        assert label in labels


def test_every_row_a_run_leaves_out_is_named(accuracy):
    """No estimator row is dropped silently: whatever a selection leaves out, its note names."""
    for which in accuracy.SETS:
        for core in (False, True):
            for shipped in (False, True):
                rows, note = accuracy.selected_estimators(which, core=core, shipped_only=shipped)
                left = [e[0] for e in accuracy.ESTIMATORS if e not in rows]
                if left:
                    assert note is not None and all(label in note for label in left), (which, core, shipped)
                    assert "\n" not in note
                else:
                    assert note is None


# ---------------------------------------------------------------- benchmarks/accuracy_table.py

N_POOL = 40_000
FRACTIONS = (0.05, 0.1)


@pytest.fixture(scope="module")
def table_mod():
    return _load("accuracy_table")


@pytest.fixture(scope="module")
def tiny_set(tmp_path_factory):
    """A folder of the layout of benchmarks/realset/data: 2 fractions x 2 draws of a simulated
    benchmark of 20 queries, the truth its realised mAP@1000 at N (one number, as a real set has)."""
    from rscale import sim
    from rscale.sim.benchmark import HardnessLaw, SimSpec
    from rscale.store.sample_stats_file import write_sample_stats
    d = tmp_path_factory.mktemp("tinyset")
    bench = sim.simulate(SimSpec(name="tiny", family="gaussian", n_queries=20,
                                 hardness=HardnessLaw("loguniform", 1.0, 1e-6, 1e-1, immune=0.05)), seed=3)
    sizes, truths = {}, []
    for f in FRACTIONS:
        for j in range(2):
            ss = sim.sample(bench, int(f * N_POOL), k=1000, seed=10 * j + int(100 * f))
            truths.append(float(sim.truth(bench, ss, N_POOL, "AP", 1000, seed=1).mean()))
            key = f"draw-{round(100 * f):02d}pct-{j}"
            write_sample_stats(ss, d / f"{key}.sample_stats.parquet")
            sizes[key] = int(f * N_POOL)
    (d / "manifest.json").write_text(json.dumps({"pool": N_POOL, "truth_map_at_1000": float(np.mean(truths)),
                                                 "sizes": sizes}))
    return d


def _doc(tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n## Estimator accuracy (hand-kept)\n\n| a | b |\n|---|---|\n| 1 | 2 |\n")
    return doc


_FRESH = itertools.count()      # a run not given a ledger gets an empty one: the cache under test alone


def _run(table_mod, tiny_set, cache, doc, estimators="evt,naive", keep=None, ledger=None):
    return table_mod.main(["--data", f"tiny={tiny_set}", "--sets", "tiny", "--estimators", estimators,
                           "--workers", "0", "--cache", str(cache), "--doc", str(doc), "--write",
                           "--ledger", str(ledger or Path(cache).parent / f"ledger-{next(_FRESH)}.jsonl"),
                           *(["--keep-registries", str(keep)] if keep else [])])


def _row(text, label, fraction):
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 10 and cells[0] == "tiny" and cells[1] == fraction and cells[2] == label:
            return cells
    raise AssertionError(f"no row {label} {fraction} in:\n{text}")


@pytest.fixture(scope="module")
def first_run(table_mod, tiny_set, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("run")
    doc = _doc(tmp)
    with pytest.MonkeyPatch.context() as mp:      # no MLflow run per estimate: lineage is not under test
        mp.setattr("rscale.producers.lineage._mlflow", lambda: None)
        results = _run(table_mod, tiny_set, tmp / "cache", doc, keep=tmp / "kept")
    return tmp, doc, results


def test_the_table_agrees_with_a_direct_computation_from_the_registry(first_run, tiny_set):
    """Each evt cell went through estimate -> register -> query: its value and both intervals equal
    what the hardness in the cell's registry gives through rscale.core.interval directly; the
    table's MAE, signed error, coverage and width are those of the cells."""
    from rscale.core.estimators.methods import estimate
    from rscale.core.interval import predicted_intervals
    from rscale.store.registry import Registry
    from rscale.store.sample_stats_file import read_sample_stats
    tmp, doc, results = first_run
    truth = json.loads((tiny_set / "manifest.json").read_text())["truth_map_at_1000"]
    text = doc.read_text()
    for f, label in ((0.05, "5%"), (0.1, "10%")):
        direct = []
        for j in range(2):
            got = next(r for r in results if r["method"] == "evt" and r["fraction"] == f and r["draw"] == j)
            assert got["query"] == "mAP@1000 at N=40k for b using evt"
            reg = Registry.locate(Path(got["kept"]) / "reg")
            (version,) = reg.versions()
            assert version.estimator == "evt"
            est, info = reg.read_hardness(version)
            assert est.replicates is not None and info["backtest"] is not None
            cell = {}
            for kind in ("benchmark", "population"):
                pq, lo, hi, _ = predicted_intervals(est, [("AP", 1000, float(N_POOL))], ci_kind=kind,
                                                    backtest=info["backtest"])[0]
                cell[kind] = (float(pq.mean()), lo, hi)
            direct.append(cell)
            assert got["value"] == pytest.approx(cell["benchmark"][0], abs=1e-12)
            assert (got["lo"], got["hi"]) == pytest.approx(cell["benchmark"][1:], abs=1e-12)
            assert (got["pop_lo"], got["pop_hi"]) == pytest.approx(cell["population"][1:], abs=1e-9)
            sample = tiny_set / f"draw-{round(100 * f):02d}pct-{j}.sample_stats.parquet"
            naive = next(r for r in results if r["method"] == "naive" and r["fraction"] == f and r["draw"] == j)
            assert naive["value"] == pytest.approx(estimate(read_sample_stats(sample), "naive", metric="AP",
                                                            k=1000).value(N_POOL))
        err = np.array([c["benchmark"][0] - truth for c in direct])
        row = _row(text, "evt", label)
        assert row[3] == "2"
        assert float(row[4]) == pytest.approx(np.abs(err).mean(), abs=6e-5)
        assert float(row[5]) == pytest.approx(err.mean(), abs=6e-5)
        for col, kind in ((6, "benchmark"), (8, "population")):
            cov = sum(c[kind][1] <= truth <= c[kind][2] for c in direct)
            assert row[col].startswith(f"{cov}/2")
            assert float(row[col + 1]) == pytest.approx(np.mean([c[kind][2] - c[kind][1] for c in direct]), abs=6e-5)
        assert _row(text, "naive (curve, no registry path)", label)[6] == "n/a"


def test_the_markers_are_replaced_and_the_rest_of_the_doc_kept(first_run, table_mod, tiny_set):
    tmp, doc, _ = first_run
    before = doc.read_text()
    assert before.startswith("# Benchmarks\n\n## Estimator accuracy (hand-kept)\n\n| a | b |")
    assert before.count(table_mod.BEGIN) == 1 and before.count(table_mod.END) == 1
    _run(table_mod, tiny_set, tmp / "cache", doc)
    after = doc.read_text()
    assert after.count(table_mod.BEGIN) == 1 and after.count(table_mod.END) == 1
    strip = lambda t: [ln for ln in t.splitlines() if not ln.startswith("Generated by")]   # noqa: E731 (wall time)
    assert strip(after) == strip(before)
    doc.write_text(after + "\n## Later section\n\nkept\n")
    _run(table_mod, tiny_set, tmp / "cache", doc)
    assert doc.read_text().endswith("## Later section\n\nkept\n")


@pytest.fixture
def stages(table_mod, monkeypatch):
    """The stages a rerun computes: (stage, fraction, draw, method)."""
    monkeypatch.setattr("rscale.producers.lineage._mlflow", lambda: None)
    ran = []
    for name in ("fit_stage", "answer_stage", "curve_stage"):
        real = getattr(table_mod, name)

        def spy(sample, method, *a, _real=real, _name=name, **kw):
            ran.append((_name.removesuffix("_stage"), Path(sample).name, method))
            return _real(sample, method, *a, **kw)
        monkeypatch.setattr(table_mod, name, spy)
    return ran


def _entries(cache, kind):
    return [(p, json.loads(p.read_text())) for p in sorted((cache / kind).glob("*.json"))]


def _poison(path, entry, rel):
    """What a cached entry sees after an edit to the file ``rel``: its recorded digests differ."""
    keys = [k for k in entry["deps"] if k.split("::")[0] == rel]
    assert keys
    for k in keys:
        entry["deps"][k] = "sha256:" + "0" * 64
    path.write_text(json.dumps(entry))


def _files(entry):
    return {k.split("::")[0] for k in entry["deps"]}


def test_an_unchanged_rerun_computes_nothing(first_run, table_mod, tiny_set, stages):
    tmp, doc, results = first_run
    again = _run(table_mod, tiny_set, tmp / "cache", doc)
    assert stages == []
    assert all(r["cached"] for r in again)
    key = lambda r: (r["fraction"], r["draw"], r["method"])            # noqa: E731
    strip = lambda r: {k: v for k, v in r.items() if k not in ("cached", "computed", "kept", "sample_secs")}  # noqa: E731
    assert sorted(map(strip, again), key=key) == sorted(map(strip, results), key=key)


def test_a_query_only_file_reruns_only_the_query_stage(first_run, table_mod, tiny_set, stages):
    """core/interval.py runs in register/query, not in api.estimate: an edit to it reruns every
    registry cell's answer stage and no fit (the fit's output is reused by its digest)."""
    tmp, doc, _ = first_run
    cache = tmp / "cache"
    fits, answers = _entries(cache, "fits"), _entries(cache, "answers")
    assert fits and len(answers) == len(fits)
    for _, e in fits:
        assert "core/interval.py" not in _files(e) and "api/querying.py" not in _files(e)
        assert "api/estimation.py::estimate" in e["deps"] and "api/estimation.py::predict" not in e["deps"]
    for path, e in answers:
        assert "core/interval.py" in _files(e)
        _poison(path, e, "core/interval.py")
    _run(table_mod, tiny_set, cache, doc)
    assert sorted(s for s, _, _ in stages) == ["answer"] * len(fits)


def test_an_edit_to_the_estimators_file_reruns_its_fit(first_run, table_mod, tiny_set, stages):
    """core/estimators/evt.py is evt's own file: an edit reruns that cell's fit; the fit gives the
    same hardness bytes, so the answer is taken from the cache by the hardness digest."""
    tmp, doc, _ = first_run
    cache = tmp / "cache"
    path, entry = _entries(cache, "fits")[0]
    assert "core/estimators/evt.py" in _files(entry)          # ran in the fit
    assert "core/estimators/evt_eb.py" not in _files(entry)   # another estimator's own module
    _poison(path, entry, "core/estimators/evt.py")
    _run(table_mod, tiny_set, cache, doc)
    assert [s for s, _, _ in stages] == ["fit"]
    assert table_mod.still_valid(json.loads(path.read_text())["deps"])       # stored afresh
    # an edit to a file the curve baselines ran reruns them, not the evt cells
    stages.clear()
    for path, e in _entries(cache, "curves"):
        assert "core/estimators/curves.py" in _files(e) and "core/estimators/evt.py" not in _files(e)
        _poison(path, e, "core/estimators/curves.py")
    _run(table_mod, tiny_set, cache, doc)
    assert sorted(stages) == sorted(("curve", f"draw-{p}pct-{j}.sample_stats.parquet", "naive")
                                    for p in ("05", "10") for j in (0, 1))


def test_a_fresh_machine_takes_unchanged_cells_from_the_ledger(table_mod, tiny_set, tmp_path, stages):
    """The committed ledger carries the cells to a machine without the cache: an empty cache with
    the ledger computes nothing and gives the same rows; a cell whose recorded code differs from
    the checkout's (here: evt's own file) reruns, the others still come from the ledger."""
    ledger, doc = tmp_path / "cells.jsonl", _doc(tmp_path)
    first = _run(table_mod, tiny_set, tmp_path / "cache1", doc, ledger=ledger)
    assert sorted({s for s, _, _ in stages}) == ["answer", "curve", "fit"]
    stages.clear()
    again = _run(table_mod, tiny_set, tmp_path / "cache2", doc, ledger=ledger)
    assert stages == [] and not (tmp_path / "cache2" / "fits").exists()
    key = lambda r: (r["fraction"], r["draw"], r["method"])            # noqa: E731
    strip = lambda r: {k: v for k, v in r.items() if k not in table_mod.LEDGER_VOLATILE}  # noqa: E731
    assert sorted(map(strip, again), key=key) == sorted(map(strip, first), key=key)
    lines = ledger.read_text().splitlines()
    sets = [json.loads(ln) for ln in lines if '"deps_id"' in ln]
    assert len(lines) - len(sets) == 8                    # 2 fractions x 2 draws x (evt, naive)
    for rec in sets:                                       # what an edit to evt.py does to its cells
        for k in rec["deps"]:
            if k.startswith("core/estimators/evt.py::"):
                rec["deps"][k] = "0" * table_mod.LEDGER_DIGEST
    ledger.write_text("\n".join([json.dumps(r) for r in sets] + [ln for ln in lines if '"deps_id"' not in ln]) + "\n")
    _run(table_mod, tiny_set, tmp_path / "cache3", doc, ledger=ledger)
    assert sorted(stages) == sorted((s, f"draw-{p}pct-{j}.sample_stats.parquet", "evt")
                                    for s in ("fit", "answer") for p in ("05", "10") for j in (0, 1))
    stages.clear()
    _run(table_mod, tiny_set, tmp_path / "cache4", doc, ledger=ledger)     # the rerun was recorded
    assert stages == []


def test_simulator_cells_are_planned_and_looked_up(table_mod, tmp_path):
    """Regression: the ledger's lookup keyed cells by their Draw, which holds the simulator's
    parameters as dicts (unhashable): every run with a simulator set failed before computing."""
    doc = _doc(tmp_path)
    results = table_mod.main(["--sets", "design", "--quick", "--estimators", "evt-eb", "--cached-only",
                              "--cache", str(tmp_path / "cache"), "--ledger", str(tmp_path / "cells.jsonl"),
                              "--doc", str(doc), "--write"])
    assert results == []
    assert "design: 2 cells each of evt-eb (5%; not computed yet)" in doc.read_text()


def test_answers_only_reanswers_what_was_fitted_here_and_fits_nothing(first_run, table_mod, tiny_set, stages,
                                                                     tmp_path):
    """--answers-only after a query-path edit: the answers rerun from the cached fits; a cell with
    no fit here is left out, not fitted."""
    tmp, doc, _ = first_run
    cache = tmp / "cache"
    for path, e in _entries(cache, "answers"):
        _poison(path, e, "core/interval.py")
    args = ["--data", f"tiny={tiny_set}", "--sets", "tiny", "--estimators", "evt,count", "--workers", "0",
            "--cache", str(cache), "--doc", str(doc), "--ledger", str(tmp_path / "cells.jsonl"), "--answers-only"]
    results = table_mod.main(args)
    assert sorted(s for s, _, _ in stages) == ["answer"] * 4            # evt's 4 cells; count never fitted here
    assert {r["method"] for r in results} == {"evt"}


def test_a_damaged_ledger_is_one_line_naming_it(table_mod, tmp_path):
    bad = tmp_path / "cells.jsonl"
    bad.write_text('{"deps_id": "a", "deps": {}}\nnot json\n')
    with pytest.raises(SystemExit, match=r"cells.jsonl:2: not a ledger record"):
        table_mod.ledger_read(bad)
    bad.write_text('{"cell": "k", "deps": "missing", "libraries": {}, "result": {}}\n')
    with pytest.raises(SystemExit, match=r"cell k names dependency set 'missing'"):
        table_mod.ledger_read(bad)


def test_an_estimators_own_files_are_imported_by_no_shared_module(table_mod):
    """The cache leaves other estimators' own modules out of a cell's digest; that is sound only if
    no shared module imports them (the table of estimators, methods.py, dispatches to them)."""
    src = BENCHMARKS.parent / "src" / "rscale"
    owner = {f: g for g, files in table_mod.OWN_FILES.items() for f in files}
    dispatch = {"core/estimators/methods.py", "core/estimators/__init__.py"}
    bad = []
    for path in src.rglob("*.py"):
        rel = path.relative_to(src).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            for name in names:
                target = name.removeprefix("rscale.").replace(".", "/") + ".py"
                if target in owner and rel not in dispatch and owner.get(rel) != owner[target]:
                    bad.append(f"{rel} imports {target} ({owner[target]}'s own file)")
    assert not bad, "\n".join(bad)


def test_a_stage_depends_on_what_it_ran_and_the_values_it_imported(table_mod, tmp_path, monkeypatch):
    """stage_deps on a package of its own: the files whose functions ran, the modules whose
    constants, classes or instances a covered file imports (at module level or lazily while the
    stage ran, along a chain of re-exports), a module imported whole; not a file whose imported
    function never ran, nor a module only a function that did not run imports."""
    pkg = tmp_path / "depspkg"
    pkg.mkdir()
    files = {
        "__init__.py": "",
        "entry.py": "from depspkg.consts import LIMIT\nfrom depspkg.unused import never\nimport depspkg.whole as whole\n"
                    "from depspkg import helper\n\n"
                    "def run():\n    from depspkg.lazy import FACTOR\n    return helper.twice(LIMIT) * FACTOR + whole.X\n\n"
                    "def other():\n    from depspkg.untouched import Y\n    return Y\n",
        "consts.py": "from depspkg.base import BASE as LIMIT\n",
        "base.py": "BASE = 3\n",
        "lazy.py": "FACTOR = 2\n",
        "whole.py": "X = 1\n\n\nclass K:\n    y = 2\n",
        "helper.py": "def twice(v):\n    return 2 * v\n",
        "unused.py": "def never():\n    return 0\n",
        "untouched.py": "Y = 5\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib
    entry = importlib.import_module("depspkg.entry")
    with table_mod.traced("depspkg") as trace:
        assert entry.run() == 13
    deps = table_mod.stage_deps(trace, None, package="depspkg")
    assert sorted(table_mod.dep_files(deps)) == ["base.py", "consts.py", "entry.py", "helper.py", "lazy.py", "whole.py"]
    assert {"entry.py::run", "entry.py::<module>", "helper.py::twice", "base.py::<module>"} <= set(deps)
    assert "entry.py::other" not in deps                      # did not run
    # real edits, each checked against the entry, then undone
    valid = lambda: table_mod.still_valid(deps, root=pkg)     # noqa: E731
    assert valid()
    edits = [("entry.py", "    from depspkg.untouched import Y\n    return Y\n", "    return 6\n", True),   # not run
             ("entry.py", "# nothing\n", "# a comment\n", True),
             ("entry.py", "from depspkg.consts", '"""A module docstring."""\nfrom depspkg.consts', True),
             ("entry.py", "def run():\n", 'def run():\n    """Docstrings are not code."""\n', True),
             ("helper.py", "def twice(v):\n", 'def twice(v):\n    """Twice v."""\n', True),
             ("entry.py", "def other():\n", 'def other():\n    """Never ran."""\n', True),
             ("whole.py", "class K:\n", 'class K:\n    """A class docstring: its file\'s skeleton."""\n', True),
             ("entry.py", "    return helper", '    "not a docstring: a statement"\n    return helper', False),
             ("helper.py", "return 2 * v", "return v + v  # same value, other code", False),                 # ran
             ("base.py", "BASE = 3", "BASE = 4", False),                  # a constant at the end of a chain
             ("lazy.py", "FACTOR = 2", "FACTOR = 2.0", False),            # imported lazily while it ran
             ("unused.py", "return 0", "return 1", True),                  # its function never ran
             ("entry.py", "def other():", "def other(z=1):", False)]       # the signature is module-level code
    (pkg / "entry.py").write_text(files["entry.py"] + "# nothing\n")
    deps = table_mod.stage_deps(trace, None, package="depspkg")
    for name, old, new, still in edits:
        text = (pkg / name).read_text()
        assert old in text, (name, old)
        (pkg / name).write_text(text.replace(old, new))
        os.utime(pkg / name, ns=(1, time.time_ns() + 10**9))       # a new mtime even within one tick
        assert valid() is still, (name, old, new)
        (pkg / name).write_text(text)
        os.utime(pkg / name, ns=(1, time.time_ns() + 2 * 10**9))
        assert valid()


def test_workers_set_up_a_fresh_tracking_store_together(tmp_path):
    """Regression: on a fresh cache every worker's warm-up created MLflow's SQLite schema, and two
    at once failed ("duplicate column name: step"), so a run with --workers 2 on a new machine
    broke its pool before the first cell. They now take turns on a lock beside the store."""
    import subprocess
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlruns.db'}",
           "PYTHONPATH": os.pathsep.join([str(BENCHMARKS.parent / "src"), str(BENCHMARKS)]),
           "MLFLOW_DISABLE_TELEMETRY": "true"}
    # each warm-up records the locks it takes: every one must take the lock beside the store
    code = ("import fcntl, accuracy_table\n"
            "taken, flock = [], fcntl.flock\n"
            "fcntl.flock = lambda f, op: (taken.append(f.name), flock(f, op))[1]\n"
            "accuracy_table.warm_up()\n"
            "print(*taken, sep='\\n')")
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
             for _ in range(3)]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], "\n".join(e[-600:] for _, e in outputs)
    assert all(f"{tmp_path / 'mlruns.db'}.lock" in out.split("\n") for out, _ in outputs)
    import sqlite3
    with sqlite3.connect(tmp_path / "mlruns.db") as db:
        assert db.execute("select count(*) from experiments where name = 'rscale'").fetchone() == (1,)
