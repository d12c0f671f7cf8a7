"""Lineage of producer runs: MLflow when it is installed, the artifacts' own metadata always.

Every producer stage (extract, score, estimate) opens a :func:`producer_run`: it logs the stage's
parameters, the digests of its inputs (``rscale.input.<name>`` tags), the digests of its outputs
(``rscale.output.<name>``), the code version and timings to MLflow, and returns the run id, which
the stage writes next to what it produces, in a sidecar ``<file>.run.json``. The artifacts
themselves carry only deterministic provenance (input digests such as the weights' and the image
list's), so their bytes, and hence their content addresses and DVC hashes, depend on the inputs
alone, never on which execution made them; run ids live in sidecars and in the registry's catalog.
So the registry and ``rscale lineage`` can walk from a hardness table back to the backbone
weights' digest and the image lists without asking MLflow.

Tracking store: ``$MLFLOW_TRACKING_URI`` when set, else a local SQLite file
``mlruns.db`` in the working directory, with artifacts under ``mlartifacts/`` (an explicit location,
so nothing lands in odd places). MLflow is optional (the ``lineage`` extra): without it the run
id is None and the digests still travel in the artifacts' metadata.
"""

from __future__ import annotations

import hashlib
import os
import time
from contextlib import contextmanager
from pathlib import Path

EXPERIMENT = "rscale"


def digest_file(path) -> str:
    from rscale.store.registry import sha256_file
    return sha256_file(path)


def digest_lines(lines) -> str:
    """sha256 of a sorted list of text lines (an image list, a set of ids)."""
    h = hashlib.sha256()
    for line in sorted(lines):
        h.update(line.encode())
        h.update(b"\n")
    return "sha256:" + h.hexdigest()


def weights_digest(model_dir) -> str:
    """Digest of a checkpoint's weights (and config), independent of the folder's location."""
    model_dir = Path(model_dir)
    parts = [f"{p.name}\t{digest_file(p)}" for p in sorted(model_dir.iterdir())
             if p.is_file() and p.suffix in (".safetensors", ".bin", ".json")]
    return digest_lines(parts)


def _mlflow():
    try:
        import mlflow
    except ImportError:
        return None
    return mlflow


class RunRecord:
    """What a producer reports while it runs; ``run_id`` is None without MLflow."""

    def __init__(self, mlflow, run_id):
        self._mlflow = mlflow
        self.run_id = run_id
        self.outputs: dict = {}
        self.metrics: dict = {}

    def output(self, name: str, digest: str):
        self.outputs[name] = digest
        if self._mlflow:
            self._mlflow.set_tag(f"rscale.output.{name}", digest)

    def metric(self, name: str, value: float, step: int | None = None):
        """Log a value (the last one is kept in ``metrics``); ``step`` for a per-step series."""
        self.metrics[name] = float(value)
        if self._mlflow:
            self._mlflow.log_metric(name, float(value), step=step)


@contextmanager
def producer_run(stage: str, params: dict, inputs: dict, enabled: bool = True):
    """Context manager around one producer stage; yields a RunRecord."""
    mlflow = _mlflow() if enabled else None
    if mlflow is None:
        yield RunRecord(None, None)
        return
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    import logging
    logging.getLogger("mlflow").setLevel(logging.WARNING)   # no INFO chatter on every stage
    if not os.environ.get("MLFLOW_TRACKING_URI"):
        mlflow.set_tracking_uri("sqlite:///" + os.path.abspath("mlruns.db"))
    exp = mlflow.get_experiment_by_name(EXPERIMENT)
    exp_id = exp.experiment_id if exp else mlflow.create_experiment(
        EXPERIMENT, artifact_location=Path("mlartifacts").resolve().as_uri())
    from rscale.api import code_version
    start = time.perf_counter()
    with mlflow.start_run(experiment_id=exp_id, run_name=stage) as run:
        mlflow.log_params({k: str(v)[:500] for k, v in params.items()})
        mlflow.set_tags({"rscale.stage": stage, "rscale.code_version": code_version(),
                         **{f"rscale.input.{k}": str(v) for k, v in inputs.items()}})
        record = RunRecord(mlflow, run.info.run_id)
        yield record
        mlflow.log_metric("seconds", time.perf_counter() - start)


def sidecar(path) -> Path:
    return Path(str(path) + ".run.json")


def write_run_sidecar(path, stage: str, run_id) -> None:
    """Record which producer run made ``path`` (nothing when there was no MLflow run)."""
    import json
    if run_id:
        sidecar(path).write_text(json.dumps({"stage": stage, "mlflow_run_id": run_id}, sort_keys=True) + "\n")


def read_run_id(path) -> str | None:
    import json
    p = sidecar(path)
    if not p.exists():
        return None
    try:
        return json.loads(p.read_text()).get("mlflow_run_id")
    except (OSError, ValueError):
        return None
