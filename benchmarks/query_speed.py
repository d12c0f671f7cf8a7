"""Query-path speed: answering from stored hardness in process, and the CLI's cold start.

Targets: issue 4 (a query over a stored hardness table of 10k queries answers in milliseconds in
process; `rscale query` cold start close to the floor of importing duckdb + pyarrow) and issue 14
(`rscale query` within 10 ms in process for 10k queries with the interval: 16 replicates and the
back-test).

The in-process figures are measured in worker processes, each on its own registry holding the
same hardness table (10k queries, ~60k positives, 16 replicates, 4 back-test columns) written by
its own source tree. The table is the default estimator's (``--estimator evt-eb``: 16 posterior
draws per positive stored, predictions in expected mode, the Binomial window sums of
:mod:`rscale.core.law`); ``--estimator evt`` measures the earlier default (no draws stored, mAP in
plug-in mode). The fit itself (~1-2 min for evt-eb on the shared machine) is kept in ``--data``
when given, and reused from there. With ``--before SRC`` (the src/ folder of another checkout, e.g.
``git worktree add /tmp/main main``) the two trees' workers run interleaved, round after round,
so both see the same machine load; the table prints each figure's median over rounds for both and
their ratio, as wall time and as the worker's CPU time. Figures per round (each a median of repeated calls inside the worker):

- ``decode``: reading one version's hardness after clearing every cache (digest check + Parquet decode)
- ``first query``: ``api.query`` with the benchmark interval right after that decode (the per-table
  work: sorted views of the point, the replicates and the back-test shares, the back-test errors)
- ``decode + first query``: the two together (hardness format 4 moves the sort order into the file,
  so part of the old first query's work becomes decode work)
- ``cached query``: the same query again (what every later query of the process pays; since the
  per-query predictions are kept with the cached table, a repeated cell skips the law)
- ``cached table, a new N``: a cell not asked before on the cached table (the law's evaluations
  at that N: the point's draws and the 16 replicates; the back-test's errors per measure are kept
  with the table), ``--slow-repeat`` calls
- ``cached, population --bootstrap 0``: the point prediction alone
- ``first query of a process``: the worker's very first call (lazy imports, catalog, decode, work)

Then the cold CLI of this tree, split into where it goes: interpreter start, ``import rscale.cli``,
the lazy imports made while answering (the first answer minus a second one after clearing the
caches) and the work itself (that second answer), and the slowest imports (``-X importtime``).

Run: PYTHONPATH=src .venv/bin/python benchmarks/query_speed.py [--before OTHER_SRC] [--rounds 7]
     [--estimator evt-eb|evt] [--data /tmp/speed-evt-eb.pkl]
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = str(Path(__file__).resolve().parent.parent / "src")
QUERY = "mAP@1000 at N=1e8 for speed"


def _median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def _timed(fn, repeat: int) -> tuple[float, float]:
    """(median wall ms, median CPU ms of this process) of ``repeat`` calls: on a shared machine the
    CPU time is the steadier figure (waiting for a core is not in it; cache contention still is)."""
    wall, cpu = [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return statistics.median(wall) * 1e3, statistics.median(cpu) * 1e3


def make_data(out: Path, estimator: str = "evt-eb", keep: Path | None = None) -> dict:
    """The table every tree stores: ``estimator`` on a simulated sample of 10k queries, with 16
    replicates and 4 quarter-share back-test columns (log-normal noise around x: their values do
    not change the cost much, and 20 fits of 10k queries would take many minutes). ``keep``: a
    pickle of the result, reused when it holds the same estimator."""
    from rscale.core.estimators.methods import estimate
    from rscale.sim.benchmark import SimSpec, sample, simulate

    if keep is not None and keep.exists():
        with open(keep, "rb") as f:
            d = pickle.load(f)
        if d["method"] == estimator:
            with open(out, "wb") as f:
                pickle.dump(d, f)
            return {"queries": int(d["ss"].n_queries), "positives": int(d["ss"].n_positives)}
    bench = simulate(SimSpec(name="speed", family="gaussian", n_queries=10_000, mean_positives=6.0), seed=0)
    ss = sample(bench, 5_000_000, k=4000, seed=0)
    d = table_data(estimate(ss, estimator), ss)
    for path in [out] + ([keep] if keep is not None else []):
        with open(path, "wb") as f:
            pickle.dump(d, f)
    return {"queries": int(ss.n_queries), "positives": int(ss.n_positives)}


def table_data(est, ss) -> dict:
    """What :func:`setup` stores, from an estimate of the sample ``ss``: the estimate with 16
    replicates and 4 back-test columns drawn around its x (seeded) and, for evt-eb, an edge factor
    of 1.5 on every positive the sample counts nothing above, so that the query evaluates both
    edge models as on a table `rscale estimate` writes (whose factor is a measured ratio per depth
    band, applied where x S is in [1e-3, 1): the same cost)."""
    import numpy as np

    rng = np.random.default_rng(0)
    reps = np.clip(est.x[:, None] * np.exp(rng.normal(0, 0.3, (est.x.size, 16))), 0, 1)
    cols = np.clip(est.x[:, None] * np.exp(rng.normal(0, 0.3, (est.x.size, 4))), 0, 1)
    arrays = {"x": est.x, "offsets": est.offsets, "rule": est.rule, "n_sampled": est.n_sampled,
              "replicates": reps, "columns": cols, "counts": ss.pos_counts, "draws": est.draws,
              "edge_factor": np.where(ss.pos_counts == 0, 1.5, 1.0) if est.method == "evt-eb" else None}
    return {"arrays": arrays, "method": est.method, "params": est.params, "ss": ss}


def setup(data: Path, root: Path) -> None:
    """Write the table with this process's rscale and register it into ``root``/reg."""
    import numpy as np

    from rscale import api
    from rscale.core.backtest import Backtest
    from rscale.core.estimators.base import HardnessEstimate
    from rscale.store.hardness_file import write_hardness

    with open(data, "rb") as f:
        d = pickle.load(f)
    a = d["arrays"]
    est = HardnessEstimate(method=d["method"], x=a["x"], offsets=a["offsets"], rule=a["rule"], n_sampled=a["n_sampled"],
                           params=d["params"], replicates=a["replicates"], draws=a.get("draws"),
                           edge_factor=a.get("edge_factor"))
    bt = Backtest(counts=a["counts"], columns=a["columns"], column_factors=np.array([4, 4, 4, 4]))
    root.mkdir(parents=True, exist_ok=True)
    write_hardness(est, d["ss"], root / "h.parquet", None, bt)
    api.register(root / "h.parquet", None, registry=root / "reg")
    # a catalog not written in the last seconds, as in use (a just-written one is never cached)
    os.utime(root / "reg" / "catalog.duckdb", (time.time() - 60, time.time() - 60))
    api.query(QUERY, root / "reg")                       # writes the catalog snapshot


def measure(reg: Path, repeat: int, slow_repeat: int) -> dict:
    """One round of the in-process figures (module docstring), in ms."""
    t, c = time.perf_counter(), time.process_time()
    from rscale import api
    api.query(QUERY, reg)
    first_process = ((time.perf_counter() - t) * 1e3, (time.process_time() - c) * 1e3)
    from rscale.store import registry as registry_module
    from rscale.store.registry import Registry

    decode, first = [], []
    for _ in range(slow_repeat):
        registry_module.clear_caches()
        r = Registry(reg)
        v = r.get("speed")
        decode.append(_timed(lambda: r.read_hardness(v), 1))
        first.append(_timed(lambda: api.query(QUERY, reg), 1))
    med = lambda pairs: tuple(statistics.median(p[i] for p in pairs) for i in (0, 1))   # noqa: E731
    new_n = (f"mAP@1000 at N={100_000_000 + 1000 * i} for speed" for i in range(1, 10**6))   # never asked before
    return {"decode": med(decode), "first query": med(first),
            "decode + first query": med([(d[0] + f[0], d[1] + f[1]) for d, f in zip(decode, first)]),
            "cached query": _timed(lambda: api.query(QUERY, reg), repeat),
            "cached table, a new N": _timed(lambda: api.query(next(new_n), reg), slow_repeat),
            "cached, population --bootstrap 0": _timed(
                lambda: api.query(QUERY, reg, bootstrap=0, ci_kind="population"), repeat),
            "first query of a process": first_process}


def _run(src: str, *args, capture=True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": src}
    return subprocess.run([sys.executable, __file__, *args], env=env, check=True, capture_output=capture, text=True)


def cold_cli(reg: Path, repeat: int) -> list[str]:
    """Cold `rscale query` of this tree, split into interpreter start, ``import rscale.cli``, lazy
    imports while answering, and the work; the slowest imports from ``-X importtime``."""
    env = {**os.environ, "RSCALE_REGISTRY": str(reg), "PYTHONPATH": HERE}
    py = sys.executable

    def timed(cmd):
        return _median_ms(lambda: subprocess.run(cmd, env=env, check=True, capture_output=True), repeat)

    argv = ["query", QUERY, "--format", "json"]
    probe = ("import time, json, sys; t0 = time.perf_counter(); import rscale.cli; t1 = time.perf_counter(); "
             "from rscale.store.registry import clear_caches; import io, contextlib; "
             "out = io.StringIO()\n"
             "with contextlib.redirect_stdout(out): rscale.cli.main(%r)\n"
             "t2 = time.perf_counter(); clear_caches()\n"
             "with contextlib.redirect_stdout(out): rscale.cli.main(%r)\n"
             "t3 = time.perf_counter(); print(json.dumps([t1 - t0, t2 - t1, t3 - t2]), file=sys.stderr)"
             % (argv, argv))
    splits = []
    for _ in range(repeat):
        p = subprocess.run([py, "-c", probe], env=env, capture_output=True, text=True)
        splits.append(json.loads(p.stderr.strip().splitlines()[-1]))
    imp_cli, first, second = (statistics.median(s[i] for s in splits) * 1e3 for i in range(3))
    t_start = timed([py, "-c", "pass"])
    t_floor = timed([py, "-c", "import duckdb, pyarrow.parquet"])
    t_cli = timed([py, "-m", "rscale.cli", *argv])
    t_cli0 = timed([py, "-m", "rscale.cli", *argv, "--bootstrap", "0"])
    p = subprocess.run([py, "-X", "importtime", "-c", "import rscale.cli; rscale.cli.main(%r)" % (argv,)],
                       env=env, capture_output=True, text=True)
    top = []
    for line in p.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cum, name = (s.strip() for s in line[len("import time:"):].split("|"))
            if cum.isdigit() and not name.startswith(" ") and "." not in name.strip():
                top.append((int(cum) / 1e3, name.strip()))
    top = sorted(top, reverse=True)[:8]
    return [
        f"cold: python -c pass (interpreter start)          {t_start:8.0f} ms",
        f"cold: python -c 'import duckdb, pyarrow.parquet'  {t_floor:8.0f} ms (floor)",
        f"cold: rscale query ... --format json               {t_cli:8.0f} ms ({t_cli / t_floor:.2f}x floor)",
        f"cold: rscale query ... --format json --bootstrap 0 {t_cli0:8.0f} ms",
        f"  where it goes (one process): import rscale.cli {imp_cli:.0f} ms; answering {first:.0f} ms, of which "
        f"lazy imports {first - second:.0f} ms and the work {second:.0f} ms (a second answer after clearing the caches)",
        "  slowest top-level imports (cumulative, -X importtime): "
        + ", ".join(f"{name} {ms:.0f} ms" for ms, name in top),
    ]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", help="src/ folder of another checkout, measured interleaved with this one")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=15, help="calls per figure inside one round")
    ap.add_argument("--slow-repeat", type=int, default=3,
                    help="calls per round of the figures that evaluate the law (decode + first query, a new N)")
    ap.add_argument("--estimator", default="evt-eb", choices=("evt-eb", "evt"), help="the stored table's estimator")
    ap.add_argument("--data", type=Path, help="keep the fitted table here (a pickle) and reuse it on the next run")
    ap.add_argument("--no-cli", action="store_true", help="skip the cold CLI figures")
    ap.add_argument("--setup", nargs=2, metavar=("DATA", "ROOT"), help=argparse.SUPPRESS)
    ap.add_argument("--measure", metavar="REG", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.setup:
        return setup(Path(a.setup[0]), Path(a.setup[1]))
    if a.measure:
        print(json.dumps(measure(Path(a.measure), a.repeat, a.slow_repeat)))
        return None
    import numpy as np

    tmp = Path(tempfile.mkdtemp())
    size = make_data(tmp / "data.pkl", a.estimator, a.data)
    trees = {"after": HERE, **({"before": str(Path(a.before).resolve())} if a.before else {})}
    for name, src in trees.items():
        _run(src, "--setup", str(tmp / "data.pkl"), str(tmp / name))
    load0 = os.getloadavg()
    rows = {name: [] for name in trees}
    for i in range(a.rounds):
        for name in (list(trees) if i % 2 else list(trees)[::-1]):          # alternate who goes first
            out = _run(trees[name], "--measure", str(tmp / name / "reg"), "--repeat", str(a.repeat),
                       "--slow-repeat", str(a.slow_repeat)).stdout
            rows[name].append(json.loads(out.strip().splitlines()[-1]))
    load1 = os.getloadavg()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"numpy {np.__version__}")
    print(f"hardness table: {a.estimator}, {size['queries']} queries, {size['positives']} positives, "
          f"{'16 posterior draws, ' if a.estimator == 'evt-eb' else ''}16 replicates, 4 back-test columns; "
          f"query {QUERY!r} (benchmark interval, the default; mode "
          f"{'expected' if a.estimator == 'evt-eb' else 'plugin'})")
    print(f"load average (1/5/15 min) before the rounds {load0[0]:.1f}/{load0[1]:.1f}/{load0[2]:.1f}, "
          f"after {load1[0]:.1f}/{load1[1]:.1f}/{load1[2]:.1f}; {a.rounds} rounds, medians over rounds "
          f"of per-round medians of {a.repeat} calls ({a.slow_repeat} for decode / first query / a new N)")
    keys = list(rows["after"][0])
    med = {name: {k: [statistics.median(r[k][i] for r in rs) for i in (0, 1)] for k in keys}
           for name, rs in rows.items()}
    spread = {name: {k: (min(r[k][0] for r in rs), max(r[k][0] for r in rs)) for k in keys} for name, rs in rows.items()}
    if "before" in trees:
        print(f"{'in process (ms)':34s} {'wall: before':>12s} {'after':>7s} {'ratio':>6s}   {'CPU: before':>11s} "
              f"{'after':>7s} {'ratio':>6s}   after wall min..max")
        for k in keys:
            (bw, bc), (aw, ac) = med["before"][k], med["after"][k]
            lo, hi = spread["after"][k]
            print(f"{k:34s} {bw:12.1f} {aw:7.1f} {bw / aw:5.1f}x   {bc:11.1f} {ac:7.1f} {bc / ac:5.1f}x   {lo:.1f}..{hi:.1f}")
    else:
        for k in keys:
            lo, hi = spread["after"][k]
            print(f"{k:34s} wall {med['after'][k][0]:8.1f} ms, CPU {med['after'][k][1]:8.1f} ms "
                  f"(wall min..max over rounds {lo:.1f}..{hi:.1f})")
    if not a.no_cli:
        for line in cold_cli(tmp / "after" / "reg", max(5, a.rounds)):
            print(line)
    return None


if __name__ == "__main__":
    main()
