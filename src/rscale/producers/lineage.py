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
so nothing lands in odd places). A fresh SQLite store is set up under a file lock
(:func:`experiment_id`), so stages started at once on a fresh directory do not race. MLflow is
optional (the ``lineage`` extra): without it the run id is None and the digests still travel in
the artifacts' metadata.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path

from rscale.store.hashing import digest_lines, sha256_file

EXPERIMENT = "rscale"


def code_version() -> str:
    """The version of the rscale package that is running: ``rscale <version>``, plus
    `` git <commit>[+dirty]`` when the package directory itself is a tracked part of a git checkout.

    Taken from the imported package (its ``__version__`` and its own directory), never from the
    working directory: run from another repository it must not record that repository's commit.
    ``+dirty`` means uncommitted changes to tracked files of the package directory.
    """
    import subprocess

    import rscale

    pkg = Path(rscale.__file__).resolve().parent

    def git(*args) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(pkg), *args], capture_output=True, text=True, timeout=5)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    version = f"rscale {rscale.__version__}"
    # a wheel installed into a virtualenv inside some other checkout is not tracked there
    if git("ls-files", "--error-unmatch", "--", "__init__.py") is None:
        return version
    commit = git("rev-parse", "--short=12", "HEAD")
    if not commit:
        return version
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".")
    return f"{version} git {commit}{'+dirty' if dirty else ''}"


def digest_file(path) -> str:
    return sha256_file(path)


def weights_digest(model_dir) -> str:
    """Digest of what makes a checkpoint's model: its weight files (``.safetensors``, ``.bin``)
    and config files (``.json``: model, image processor, adapter), by name and content, wherever
    the folder is. rscale's own manifest (store/checkpoint_manifest.py) says what made the folder,
    not what the model is, so it is left out: the same weights have one digest with or without it."""
    from rscale.store.checkpoint_manifest import NAME as CHECKPOINT_MANIFEST

    model_dir = Path(model_dir)
    parts = [f"{p.name}\t{digest_file(p)}" for p in sorted(model_dir.iterdir())
             if p.is_file() and p.suffix in (".safetensors", ".bin", ".json") and p.name != CHECKPOINT_MANIFEST]
    return digest_lines(parts)


def _mlflow():
    try:
        import mlflow
    except ImportError:
        return None
    return mlflow


def use_default_store(mlflow) -> None:
    """Point MLflow at the project's default store (``mlruns.db`` in the working directory) unless
    ``$MLFLOW_TRACKING_URI`` names one; MLflow's own default would be ``mlflow.db``."""
    if not os.environ.get("MLFLOW_TRACKING_URI"):
        mlflow.set_tracking_uri("sqlite:///" + os.path.abspath("mlruns.db"))


def experiment_id(mlflow) -> str:
    """The id of the ``rscale`` experiment in the current tracking store, created on first use.

    A local SQLite store (``sqlite:///<file>``, the default) is first touched under an exclusive
    lock on ``<file>.lock``: MLflow creates the schema of a fresh file on first touch, and two
    processes doing that at once (parallel stages on a fresh working directory) fail with
    "duplicate column name", or both create the experiment. The lock serialises only that first
    touch per process and store; runs are logged without it. Other stores (a tracking server)
    set themselves up. A new experiment keeps its artifacts in ``mlartifacts/`` next to the
    store's file (the working directory for other stores). The store is the project's default
    unless ``$MLFLOW_TRACKING_URI`` names one (:func:`use_default_store`), also when this is called
    before any run (a warm-up)."""
    use_default_store(mlflow)
    uri = mlflow.get_tracking_uri()
    if not uri.startswith("sqlite:///"):
        return _get_or_create_experiment(mlflow, Path("mlartifacts").resolve())
    db = Path(uri.removeprefix("sqlite:///"))
    try:
        import fcntl
    except ImportError:                      # no POSIX locks (Windows): unguarded, as before
        return _get_or_create_experiment(mlflow, db.parent / "mlartifacts")
    db.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{db}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _get_or_create_experiment(mlflow, db.parent / "mlartifacts")


def _get_or_create_experiment(mlflow, artifacts: Path) -> str:
    exp = mlflow.get_experiment_by_name(EXPERIMENT)
    return exp.experiment_id if exp else mlflow.create_experiment(EXPERIMENT, artifact_location=artifacts.resolve().as_uri())


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
    exp_id = experiment_id(mlflow)
    start = time.perf_counter()
    with mlflow.start_run(experiment_id=exp_id, run_name=stage) as run:
        mlflow.log_params({k: str(v)[:500] for k, v in params.items()})
        mlflow.set_tags({"rscale.stage": stage, "rscale.code_version": code_version(),
                         **{f"rscale.input.{k}": str(v) for k, v in inputs.items()}})
        record = RunRecord(mlflow, run.info.run_id)
        yield record
        mlflow.log_metric("seconds", time.perf_counter() - start)
