"""Run-id sidecars: ``<file>.run.json`` next to a producer's output, naming the MLflow run that made it.

Format: one JSON object ``{"stage": "extract" | "score" | "estimate", "mlflow_run_id": "<id>"}``
(sorted keys). The artifacts themselves stay deterministic (their bytes depend on their inputs
alone), so run ids live here and in the registry's catalog (:mod:`rscale.producers.lineage`).
No sidecar is written when there was no MLflow run.
"""

from __future__ import annotations

import json
from pathlib import Path


def sidecar(path) -> Path:
    return Path(str(path) + ".run.json")


def write_run_sidecar(path, stage: str, run_id) -> None:
    """Record which producer run made ``path`` (nothing when there was no MLflow run)."""
    if run_id:
        sidecar(path).write_text(json.dumps({"stage": stage, "mlflow_run_id": run_id}, sort_keys=True) + "\n")


def read_run_id(path) -> str | None:
    p = sidecar(path)
    if not p.exists():
        return None
    try:
        return json.loads(p.read_text()).get("mlflow_run_id")
    except (OSError, ValueError):
        return None
