import os

import pytest


@pytest.fixture(autouse=True)
def _isolated_tracking(tmp_path, monkeypatch):
    """Producer runs log to a throw-away MLflow store, never to the checkout's mlruns.db."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///" + os.path.join(str(tmp_path), "mlruns.db"))
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.delenv("RSCALE_REGISTRY", raising=False)
