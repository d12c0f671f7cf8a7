"""The cost of one accuracy-table cell (realset 5% draw 0, evt-eb) in a reused worker: the
worker's one-time set-up (imports, MLflow store: ``accuracy_table.warm_up``), then the cell twice
(estimate with its MLflow run timed apart, register, both queries), and the same estimate traced
as the table traces it (``accuracy_table.traced``).

    PYTHONPATH=src .venv/bin/python benchmarks/accuracy_table_cost.py
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
SAMPLE = HERE / "realset" / "data" / "draw-05pct-0.sample_stats.parquet"


def table_module():
    spec = importlib.util.spec_from_file_location("accuracy_table", HERE / "accuracy_table.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def main():
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    os.environ.setdefault("MLFLOW_TRACKING_URI", "sqlite:///" + tempfile.mkdtemp() + "/mlruns.db")
    table = table_module()
    t = time.perf_counter()
    table.warm_up()
    print(f"warm-up (imports + MLflow store, once per worker): {time.perf_counter() - t:.1f} s", flush=True)
    from rscale import api
    from rscale.producers import lineage
    real, spent = lineage.producer_run, [0.0]

    @contextmanager
    def timed_run(*a, **kw):                 # the MLflow run's own time: opening and closing it
        t = time.perf_counter()
        with real(*a, **kw) as record:
            spent[0] += time.perf_counter() - t
            yield record
            t = time.perf_counter()
        spent[0] += time.perf_counter() - t

    lineage.producer_run = timed_run
    for i in range(2):
        d = Path(tempfile.mkdtemp())
        spent[0] = 0.0
        t = time.perf_counter()
        summary = api.estimate(SAMPLE, "evt-eb", out=d / "h.parquet")
        t_est = time.perf_counter() - t
        t = time.perf_counter()
        api.register(d / "h.parquet", SAMPLE, registry=d / "reg", backbone="b", benchmark="accuracy")
        t_reg = time.perf_counter() - t
        t = time.perf_counter()
        for kind in ("benchmark", "population"):
            api.query(table.query_text("evt-eb", 667_000), d / "reg", ci_kind=kind)
        t_q = time.perf_counter() - t
        with table.traced():
            t = time.perf_counter()
            api.estimate(SAMPLE, "evt-eb", out=d / "h2.parquet")
            t_traced = time.perf_counter() - t
        print(f"cell {i}: estimate {t_est:.1f} s (fits, replicates, back-test {summary['seconds']:.1f} s; MLflow run "
              f"{spent[0]:.2f} s), register {t_reg:.1f} s, 2 queries {t_q:.2f} s; the estimate traced {t_traced:.1f} s; "
              f"load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
