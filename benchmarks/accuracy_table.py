"""The accuracy table of docs/benchmarks.md, regenerated through the shipped path (issue 14).

For each set (the simulator sets of benchmarks/accuracy.py ``SETS``, and the committed real-embedding
sets ``realset`` and ``realset2``) x estimator x sample fraction x draw, one *cell*: the sample's
stats file goes through what a user runs, in process through :mod:`rscale.api`:

    api.estimate(sample, METHOD, out=H)            # rscale estimate (replicates and back-test stored)
    api.register(H, sample, registry=R, ...)       # rscale register
    api.query("mAP@1000 at N=... for b using METHOD", R, ci_kind=benchmark | population)

and the answer is compared with the exact truth (the simulator's realised mAP@1000 at N, or the
real set's full-pool mAP@1000 from its manifest). The curve baselines (naive, loguniform,
powerlaw) have no registry path (``rscale estimate`` refuses them): they are computed with
:func:`rscale.core.estimators.methods.estimate` as benchmarks/accuracy.py does, and have no
interval. One markdown table (per set, fraction and estimator: cells, MAE, mean signed error,
coverage and mean width of both intervals) is written between ``<!-- accuracy-table:begin -->``
and ``<!-- accuracy-table:end -->`` in docs/benchmarks.md with ``--write``, stamped with the code
commit and the command; a rerun replaces it.

Cache: each cell's result is a JSON file under --cache (default ~/.cache/rscale/accuracy_table),
named by the cell (set, scenario, estimator, fraction, draw, sample) and holding the sha256 of every
rscale source file the cell imported, except other estimators' own modules (``OWN_FILES``). A
rerun reuses a cell only if none of those files changed, so after a change it recomputes only
the cells that ran the changed code. Simulated samples (and their truth) are cached the same way.
Cells run in a pool of --workers fresh interpreters (spawned, one cell each, single-threaded BLAS).

Run (the full table; ``--quick``: 5% only, draw 0, first two scenarios of each simulator set):

    PYTHONPATH=src .venv/bin/python benchmarks/accuracy_table.py --write
    PYTHONPATH=src .venv/bin/python benchmarks/accuracy_table.py --sets realset,design --estimators evt,evt-eb --write

``--budget-min M`` stops starting cells after M minutes (the table then lists the cells left out);
``--cached-only`` writes the table from the cache without computing anything.
"""

from __future__ import annotations

import argparse
import fcntl
import functools
import importlib.util
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
K_METRIC = 1000
CELL_VERSION = 1          # bump when what a cell computes changes outside src/rscale
REGISTRY_ESTIMATORS = ("evt", "evt-eb", "evt-paper", "count", "sdm")
CURVE_ESTIMATORS = ("naive", "loguniform", "powerlaw")
ESTIMATORS = REGISTRY_ESTIMATORS + CURVE_ESTIMATORS
REAL_SETS = ("realset", "realset2")
SIM_FRACTIONS = (0.01, 0.02, 0.05, 0.10)
SIM_N = 1e8               # the web-scale pool of benchmarks/accuracy.py
SIM_DRAWS = 1
BEGIN, END = "<!-- accuracy-table:begin -->", "<!-- accuracy-table:end -->"
# The source files only one estimator runs (relative to src/rscale). Every estimator module is
# imported by rscale.core.estimators.methods, so imports alone do not tell them apart; a cell's
# digest leaves out the other estimators' own files (tests/test_accuracy_table.py checks that no
# shared module imports them).
OWN_FILES = {
    "evt": ("core/estimators/evt.py", "core/estimators/shape_pooling.py"),
    "evt-eb": ("core/estimators/evt_eb.py", "core/gpd_eb.py"),
    "count": ("core/estimators/count.py",),
    "sdm": ("core/estimators/sdm.py",),
    "curves": ("core/estimators/curves.py",),
}
OWN_GROUP = {"evt": "evt", "evt-paper": "evt", "evt-eb": "evt-eb", "count": "count", "sdm": "sdm",
             "naive": "curves", "loguniform": "curves", "powerlaw": "curves"}
# The sets in the order their cells start: the real sets and the design set first.
SET_ORDER = ("realset", "realset2", "design")
FRACTION_ORDER = {0.05: 0, 0.01: 1, 0.1: 2, 0.02: 3}


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def accuracy_module():
    return _load(HERE / "accuracy.py", "accuracy_benchmark")


@functools.lru_cache(maxsize=None)
def query_mode(method: str) -> str | None:
    """The prediction mode a query names for ``method``: as benchmarks/realset/check.py runs it."""
    return _load(HERE / "realset" / "check.py", "realset_check").MODE.get(method)


# ---------------------------------------------------------------- draws and cells

@dataclass(frozen=True)
class Draw:
    """One sample with its truth: a simulator scenario's draw, or a committed real-set draw."""
    set: str
    scenario: str
    fraction: float
    draw: int
    n: float                      # the gallery size predicted
    sim: dict | None = None       # simulator: {"spec": SimSpec repr fields, "s", "k", "seed"}
    sample: str | None = None     # real set: the committed sample-stats file
    truth: float | None = None    # real set: the manifest's truth
    identity: str = field(default="", compare=False)

    @property
    def label(self) -> str:
        return f"{self.set}/{self.scenario}/{self.fraction:.0%}/d{self.draw}"


def sim_draws(set_name: str, fractions, draws: int, scenarios_max: int | None = None) -> list[Draw]:
    acc = accuracy_module()
    scenarios, seed_offset = acc.SETS[set_name]
    out = []
    for name, family, hl, nq in scenarios[:scenarios_max]:
        spec = {"name": name, "family": family, "n_queries": nq, "hardness": dict(vars(hl))}
        for f in fractions:
            for d in range(draws):
                s = int(f * SIM_N)
                sim = {"spec": spec, "s": s, "k": min(4000, s), "seed": 1000 * d + 7 + seed_offset}
                out.append(Draw(set_name, name, f, d, SIM_N, sim=sim,
                                identity=json.dumps(sim, sort_keys=True, default=str)))
    return out


def real_draws(set_name: str, fractions, draws: int | None, data: Path | None = None) -> list[Draw]:
    from rscale.store.hashing import sha256_file
    data = data or HERE / set_name / "data"
    man = json.loads((data / "manifest.json").read_text())
    out = []
    for key in sorted(k for k in man["sizes"] if k.startswith("draw-")):
        _, pct, d = key.split("-")
        f = int(pct.removesuffix("pct")) / 100
        if (fractions is not None and not any(abs(f - g) < 1e-9 for g in fractions)) or \
                (draws is not None and int(d) >= draws):
            continue
        path = data / f"{key}.sample_stats.parquet"
        out.append(Draw(set_name, set_name, f, int(d), float(man["pool"]), sample=str(path),
                        truth=float(man["truth_map_at_1000"]), identity=sha256_file(path)))
    return out


def cell_key(draw: Draw, method: str) -> str:
    from rscale.store.hashing import canonical_digest
    return canonical_digest({"v": CELL_VERSION, "set": draw.set, "scenario": draw.scenario, "fraction": draw.fraction,
                             "draw": draw.draw, "n": draw.n, "sample": draw.identity, "method": method,
                             "mode": query_mode(method)}).split(":")[-1][:32]


# ---------------------------------------------------------------- the cache

def _src_root() -> Path:
    import rscale
    return Path(rscale.__file__).resolve().parent


def source_digests(group: str | None) -> dict:
    """sha256 of every rscale source file imported in this process, less the other estimators'
    own files (``OWN_FILES``; ``group`` is this cell's estimator group, None for a sample)."""
    from rscale.store.hashing import sha256_file
    root = _src_root()
    others = {f for g, files in OWN_FILES.items() if g != group for f in files}
    out = {}
    for mod in list(sys.modules.values()):
        path = getattr(mod, "__file__", None)
        if not path:
            continue
        p = Path(path).resolve()
        if root in p.parents and p.suffix == ".py":
            rel = p.relative_to(root).as_posix()
            if rel not in others:
                out[rel] = sha256_file(p)
    return dict(sorted(out.items()))


def still_valid(deps: dict) -> bool:
    from rscale.store.hashing import sha256_file
    root = _src_root()
    return all((root / rel).is_file() and sha256_file(root / rel) == sha for rel, sha in deps.items())


def cache_lookup(cache: Path, kind: str, key: str):
    """The cached entry of ``key`` whose source files are unchanged, or None."""
    for path in sorted((cache / kind).glob(f"{key}-*.json")):
        try:
            entry = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if still_valid(entry["deps"]):
            return entry
    return None


def cache_store(cache: Path, kind: str, key: str, entry: dict) -> Path:
    from rscale.store.hashing import canonical_digest
    from rscale.store.atomic import write_text_atomic
    tag = canonical_digest(entry["deps"]).split(":")[-1][:16]
    path = cache / kind / f"{key}-{tag}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(entry, indent=1, sort_keys=True), durable=False)
    return path


# ---------------------------------------------------------------- one cell (runs in a worker)

def prepared_sample(draw: Draw, cache: Path) -> tuple[Path, float]:
    """(sample-stats file, truth) of a draw; a simulated one is generated once and cached."""
    if draw.sample is not None:
        return Path(draw.sample), draw.truth
    from rscale.store.hashing import canonical_digest
    key = canonical_digest({"v": CELL_VERSION, "n": draw.n, **draw.sim}).split(":")[-1][:32]
    (cache / "samples").mkdir(parents=True, exist_ok=True)
    with open(cache / "samples" / f"{key}.lock", "w") as lock:   # two workers on one draw make it once
        fcntl.flock(lock, fcntl.LOCK_EX)
        entry = cache_lookup(cache, "samples", key)
        if entry is not None and Path(entry["sample"]).is_file():
            return Path(entry["sample"]), entry["truth"]
        return _simulated_sample(draw, cache, key)


def _simulated_sample(draw: Draw, cache: Path, key: str) -> tuple[Path, float]:
    from rscale.store.hashing import canonical_digest
    from rscale import sim
    from rscale.sim.benchmark import HardnessLaw, SimSpec
    from rscale.store.sample_stats_file import write_sample_stats
    spec = dict(draw.sim["spec"])
    spec = SimSpec(name=spec["name"], family=spec["family"], n_queries=spec["n_queries"],
                   hardness=HardnessLaw(**spec["hardness"]))
    seed = draw.sim["seed"]
    bench = sim.simulate(spec, seed=seed)
    ss = sim.sample(bench, draw.sim["s"], k=draw.sim["k"], seed=seed)
    truth = float(sim.truth(bench, ss, draw.n, "AP", K_METRIC, seed=seed).mean())
    deps = source_digests(None)
    tag = canonical_digest(deps).split(":")[-1][:16]
    path = cache / "samples" / f"{key}-{tag}.sample_stats.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_sample_stats(ss, path)
    cache_store(cache, "samples", key, {"deps": deps, "sample": str(path), "truth": truth, "draw": draw.label})
    return path, truth


def shipped_answer(sample: Path, method: str, n: float, workdir: Path) -> dict:
    """What a user gets: rscale estimate -> register -> query (both interval kinds), in process."""
    from rscale import api
    from rscale.query.grammar import format_size
    api.estimate(sample, method, out=workdir / "h.parquet")
    api.register(workdir / "h.parquet", sample, registry=workdir / "reg", backbone="b", benchmark="accuracy")
    mode = query_mode(method)
    text = f"mAP@{K_METRIC} at N={format_size(int(n))} for b using {method}" + (f" {mode}" if mode else "")
    out = {"query": text}
    for kind, pre in (("benchmark", ""), ("population", "pop_")):
        row = api.query(text, workdir / "reg", ci_kind=kind)["rows"][0]
        out.update({"value": row["value"], pre + "lo": row["ci_low"], pre + "hi": row["ci_high"],
                    pre + "ci_kind": row.get("ci_kind")})
    return out


def curve_answer(sample: Path, method: str, n: float) -> dict:
    """A curve baseline (no registry path): its extrapolated value at n, no interval."""
    from rscale.core.estimators.methods import estimate
    from rscale.store.sample_stats_file import read_sample_stats
    ss = read_sample_stats(sample)
    return {"value": float(estimate(ss, method, metric="AP", k=K_METRIC).value(n))}


def run_cell(draw: Draw, method: str, cache: str, keep: str | None = None) -> dict:
    """One cell: its answer against the truth, cached under the digests of the code it ran
    (``keep``: a folder to keep each registry cell's files in, under its cell key)."""
    cache = Path(cache)
    key = cell_key(draw, method)
    hit = cache_lookup(cache, "cells", key)
    if hit is not None:
        return {**hit["result"], "cached": True}
    t = time.perf_counter()
    sample, truth = prepared_sample(draw, cache)
    t_sample = time.perf_counter() - t
    t = time.perf_counter()
    try:
        if method in REGISTRY_ESTIMATORS:
            if keep is not None:
                (Path(keep) / key).mkdir(parents=True, exist_ok=True)
                ans = {**shipped_answer(sample, method, draw.n, Path(keep) / key), "kept": str(Path(keep) / key)}
            else:
                with tempfile.TemporaryDirectory(prefix="accuracy-table-") as tmp:
                    ans = shipped_answer(sample, method, draw.n, Path(tmp))
        else:
            ans = curve_answer(sample, method, draw.n)
    except Exception as exc:          # a failing cell is reported in the table, not hidden
        ans = {"value": None, "failed": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"}
    result = {"set": draw.set, "scenario": draw.scenario, "fraction": draw.fraction, "draw": draw.draw,
              "method": method, "n": draw.n, "truth": truth, "secs": time.perf_counter() - t,
              "sample_secs": t_sample, **ans}
    cache_store(cache, "cells", key, {"deps": source_digests(OWN_GROUP[method]), "result": result})
    return {**result, "cached": False}


# ---------------------------------------------------------------- the table

def _fmt_cov(rows, lo, hi):
    rs = [r for r in rows if r.get(lo) is not None]
    if not rs:
        return "n/a", "n/a"
    cov = sum(r[lo] <= r["truth"] <= r[hi] for r in rs)
    width = sum(r[hi] - r[lo] for r in rs) / len(rs)
    return f"{cov}/{len(rs)} ({cov / len(rs):.0%})", f"{width:.4f}"


def table(results: list[dict], *, sets, estimators, missing: list, seconds: dict, stamp: str) -> str:
    import numpy as np
    lines = [stamp, "",
             "| set | fraction | estimator | cells | MAE | mean signed error | benchmark interval: covered | width "
             "| population interval: covered | width |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    failed = {}          # (set, fraction, estimator, message) -> the draws that failed with it
    for s in sets:
        for f in sorted({r["fraction"] for r in results if r["set"] == s}):
            for m in estimators:
                rows = [r for r in results if r["set"] == s and r["fraction"] == f and r["method"] == m]
                if not rows:
                    continue
                ok = [r for r in rows if r.get("value") is not None]
                for r in rows:
                    if r.get("value") is None:
                        failed.setdefault((s, f"{f:.0%}", m, r["failed"]), []).append(f"{r['scenario']}/d{r['draw']}")
                err = np.array([r["value"] - r["truth"] for r in ok])
                label = m if m in REGISTRY_ESTIMATORS else f"{m} (curve, no registry path)"
                if query_mode(m):
                    label += f" ({query_mode(m)})"
                b_cov, b_w = _fmt_cov(ok, "lo", "hi")
                p_cov, p_w = _fmt_cov(ok, "pop_lo", "pop_hi")
                mae = f"{np.abs(err).mean():.4f}" if err.size else "-"
                mse = f"{err.mean():+.4f}" if err.size else "-"
                n_text = f"{len(ok)}" + (f" ({len(rows) - len(ok)} failed)" if len(ok) < len(rows) else "")
                lines.append(f"| {s} | {f:.0%} | {label} | {n_text} | {mae} | {mse} | {b_cov} | {b_w} | {p_cov} | {p_w} |")
    lines += ["", "Compute per set (sum of the cells' own seconds, sample generation included; a cached "
              "cell counts the seconds it took when it ran): " +
              "; ".join(f"{s} {seconds.get(s, 0.0) / 60:.1f} min" for s in sets) + "."]
    if failed:
        lines += ["", "Failed cells: " + "; ".join(f"{s} {f} {m}, {len(ds)} cells ({', '.join(ds)}): {msg}"
                                            for (s, f, m, msg), ds in failed.items()) + "."]
    lines += ["", "Cells not run: " + (missing_text(missing) if missing else "none") + "."]
    return "\n".join(lines)


def missing_text(missing: list[tuple[Draw, str, str]]) -> str:
    """Cells not run, counted per set, estimator and reason (fractions named)."""
    per_method = {}
    for d, m, why in missing:
        per_method.setdefault((d.set, m, why), []).append(d.fraction)
    groups = {}          # estimators missing the same cells of a set, named together
    for (s, m, why), fs in per_method.items():
        groups.setdefault((s, why, len(fs), tuple(sorted(set(fs)))), []).append(m)
    return "; ".join(f"{s}: {n} cells each of {', '.join(ms)} ({', '.join(f'{f:.0%}' for f in fs)}; {why})"
                     for (s, why, n, fs), ms in sorted(groups.items(), key=lambda g: g[0][0]))


def write_block(path: Path, block: str) -> None:
    """Replace the text between the markers (append a section with them if absent)."""
    text = path.read_text()
    body = f"{BEGIN}\n{block}\n{END}"
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + body + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n## Accuracy table, generated (`benchmarks/accuracy_table.py`)\n\n" + body + "\n"
    path.write_text(text)


def code_commit() -> str:
    """The checkout's commit and the last commit that changed src/ (the code the cells ran), with
    ``+dirty`` for uncommitted changes under src/."""
    def git(*a):
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = "+dirty" if git("status", "--porcelain", "--", "src") else ""
    return f"{git('rev-parse', '--short', 'HEAD') or 'unknown'} (src/ last changed in {git('log', '-1', '--format=%h', '--', 'src') or 'unknown'}{dirty})"


# ---------------------------------------------------------------- main

def plan(args) -> tuple[list[Draw], list[str]]:
    acc_sets = list(accuracy_module().SETS)
    folders = {name: HERE / name / "data" for name in REAL_SETS}
    for item in args.data:
        name, sep, folder = item.partition("=")
        if not sep or not (Path(folder) / "manifest.json").is_file():
            sys.exit(f"--data {item}: expected NAME=FOLDER, a folder with manifest.json like benchmarks/realset/data")
        folders[name] = Path(folder)
    sets = args.sets.split(",") if args.sets else [*SET_ORDER, *[s for s in acc_sets if s not in SET_ORDER],
                                                   *[s for s in folders if s not in SET_ORDER]]
    unknown = [s for s in sets if s not in acc_sets and s not in folders]
    if unknown:
        sys.exit(f"unknown set {', '.join(unknown)} (known: {', '.join([*folders, *acc_sets])})")
    fractions = [float(f) for f in args.fractions.split(",")] if args.fractions else None
    if args.quick:
        fractions = [0.05]
    draws = []
    for s in sets:
        if s in folders:
            draws += real_draws(s, fractions, 1 if args.quick else args.draws, folders[s])
        else:
            draws += sim_draws(s, fractions or SIM_FRACTIONS, 1 if args.quick else (args.draws or SIM_DRAWS),
                               2 if args.quick else None)
    return draws, sets


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", default=None, help="comma-separated sets (default: realset, realset2 and every "
                    "simulator set of benchmarks/accuracy.py)")
    ap.add_argument("--estimators", default=",".join(ESTIMATORS), help="comma-separated (default: all)")
    ap.add_argument("--fractions", default=None, help="comma-separated sample fractions (default 0.01,0.02,0.05,0.1)")
    ap.add_argument("--draws", type=int, default=None, help="draws per cell (default: simulator 1, real sets all 5)")
    ap.add_argument("--quick", action="store_true", help="5%% only, draw 0, two scenarios per simulator set")
    ap.add_argument("--data", action="append", default=[], metavar="NAME=FOLDER",
                    help="one more real set: a folder of the layout of benchmarks/realset/data")
    ap.add_argument("--workers", type=int, default=2, help="worker processes (0: in this process)")
    ap.add_argument("--cache", default=os.path.expanduser("~/.cache/rscale/accuracy_table"))
    ap.add_argument("--keep-registries", default=None, metavar="DIR",
                    help="keep each registry cell's hardness file and registry under DIR/<cell key>")
    ap.add_argument("--budget-min", type=float, default=None, help="start no cell after this many minutes")
    ap.add_argument("--cached-only", action="store_true", help="compute nothing: the table from the cache")
    ap.add_argument("--write", action="store_true", help="write the table into --doc")
    ap.add_argument("--doc", default=str(ROOT / "docs" / "benchmarks.md"))
    args = ap.parse_args(argv)
    estimators = args.estimators.split(",")
    bad = [m for m in estimators if m not in ESTIMATORS]
    if bad:
        sys.exit(f"unknown estimator {', '.join(bad)} (known: {', '.join(ESTIMATORS)})")
    cache = Path(args.cache)
    os.environ.setdefault("MLFLOW_TRACKING_URI", "sqlite:///" + str(cache / "mlruns.db"))
    cache.mkdir(parents=True, exist_ok=True)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    draws, sets = plan(args)
    # 5% of every set first (then 1%, 10%, 2%), the sets in order; sdm last (its cells are the slowest)
    cells = [(d, m) for d in draws for m in estimators]
    cells.sort(key=lambda c: (c[1] == "sdm", FRACTION_ORDER.get(round(c[0].fraction, 4), 9), sets.index(c[0].set),
                              c[0].draw))
    t0 = time.time()
    results, missing = [], []
    todo = []
    for d, m in cells:
        hit = cache_lookup(cache, "cells", cell_key(d, m))
        if hit is not None:
            results.append(hit["result"])
        elif args.cached_only:
            missing.append((d, m, "not computed yet"))
        else:
            todo.append((d, m))
    print(f"{len(cells)} cells: {len(results)} cached, {len(todo)} to run", file=sys.stderr, flush=True)
    if todo and args.workers == 0:
        for d, m in todo:
            if args.budget_min is not None and time.time() - t0 > 60 * args.budget_min:
                missing.append((d, m, "time budget"))
                continue
            results.append(run_cell(d, m, str(cache), args.keep_registries))
    elif todo:
        import multiprocessing
        with ProcessPoolExecutor(args.workers, mp_context=multiprocessing.get_context("spawn"),
                                 max_tasks_per_child=1) as pool:
            pending, queue = {}, list(todo)
            while queue or pending:
                while queue and len(pending) < args.workers:
                    d, m = queue.pop(0)
                    if args.budget_min is not None and time.time() - t0 > 60 * args.budget_min:
                        missing.append((d, m, "time budget"))
                        continue
                    pending[pool.submit(run_cell, d, m, str(cache), args.keep_registries)] = (d, m)
                if not pending:
                    break
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    d, m = pending.pop(fut)
                    r = fut.result()
                    results.append(r)
                    err = "failed" if r.get("value") is None else f"{r['value'] - r['truth']:+.4f}"
                    print(f"[{time.time() - t0:6.0f}s] {d.label} {m}: {err} ({r['secs']:.0f}s)", file=sys.stderr,
                          flush=True)
    seconds = {}
    for r in results:
        seconds[r["set"]] = seconds.get(r["set"], 0.0) + r["secs"] + r.get("sample_secs", 0.0)
    cmd = "PYTHONPATH=src .venv/bin/python benchmarks/accuracy_table.py " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    stamp = (f"Generated by `{cmd.strip()}` at code commit {code_commit()} ({time.strftime('%Y-%m-%d')}, "
             f"{platform.machine()}, Python {platform.python_version()}; {len(todo)} cells computed by this "
             f"invocation with {args.workers} workers in {(time.time() - t0) / 60:.1f} min wall, "
             f"{len(cells) - len(todo)} from the cache). mAP@{K_METRIC}; simulator sets at N = 1e8 "
             f"({SIM_DRAWS if args.draws is None else args.draws} draw(s) per scenario and fraction), real sets at "
             "their full pool (5 disjoint draws per fraction); error = prediction - exact truth. Intervals: "
             "what `rscale query --ci benchmark|population` reports after `rscale estimate` and `rscale "
             "register`; both are scored against the same truth (the realised value on these queries).")
    out = table(results, sets=[s for s in sets if any(r["set"] == s for r in results)] or sets,
                estimators=estimators, missing=missing, seconds=seconds, stamp=stamp)
    print(out)
    if args.write:
        write_block(Path(args.doc), out)
    return results


if __name__ == "__main__":
    main()
