"""producer_run on a fresh local tracking store, from several processes at once."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("mlflow")

# Each worker imports MLflow first (seconds), then waits until every worker is ready, so their
# first touches of the fresh SQLite store overlap.
WORKER = textwrap.dedent("""
    import json, os, sys, time
    import mlflow, mlflow.store.tracking.sqlalchemy_store  # the slow imports, before the start line
    from rscale.producers.lineage import producer_run
    ready, n = sys.argv[1], int(sys.argv[2])
    open(os.path.join(ready, str(os.getpid())), "w").close()
    while len(os.listdir(ready)) < n:
        time.sleep(0.005)
    with producer_run("estimate", {"worker": os.getpid()}, {}) as run:
        run.metric("x", 1.0)
    print(json.dumps({"run_id": run.run_id}))
""")


@pytest.mark.slow
def test_producer_runs_started_at_once_on_a_fresh_store_all_succeed(tmp_path):
    n = 4
    ready = tmp_path / "ready"
    ready.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["MLFLOW_DISABLE_TELEMETRY"] = "true"
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(ready), str(n)], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(n)]
    outs = [p.communicate(timeout=300) for p in procs]
    failed = [[line for line in err.splitlines() if "Error" in line][-1:] or err[-300:]
              for p, (out, err) in zip(procs, outs) if p.returncode]
    assert not failed, failed
    ids = {json.loads(out.strip().splitlines()[-1])["run_id"] for out, _ in outs}
    assert len(ids) == n and None not in ids
    import mlflow
    client = mlflow.tracking.MlflowClient(tracking_uri="sqlite:///" + str(tmp_path / "mlruns.db"))
    exps = [e for e in client.search_experiments() if e.name == "rscale"]
    assert len(exps) == 1
    assert {r.info.run_id for r in client.search_runs([exps[0].experiment_id])} == ids


def test_the_experiment_lookup_alone_uses_the_projects_store_not_mlflows_default(tmp_path):
    """experiment_id outside a run (the accuracy table's warm-up) without $MLFLOW_TRACKING_URI set
    the store up in mlruns.db, as a run does; it used to create MLflow's default mlflow.db in the
    working directory."""
    code = ("import mlflow; from rscale.producers.lineage import experiment_id; "
            "print(experiment_id(mlflow))")
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["MLFLOW_DISABLE_TELEMETRY"] = "true"
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, check=True, capture_output=True, timeout=300)
    assert (tmp_path / "mlruns.db").exists() and not (tmp_path / "mlflow.db").exists()
