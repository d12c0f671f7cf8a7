import os

import pytest


@pytest.fixture(autouse=True)
def _isolated_tracking(tmp_path, monkeypatch):
    """Producer runs log to a throw-away MLflow store, never to the checkout's mlruns.db."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///" + os.path.join(str(tmp_path), "mlruns.db"))
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.delenv("RSCALE_REGISTRY", raising=False)


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` run only where a CUDA device is visible; elsewhere they are skipped
    with the reason (torch is imported only when such a test was collected)."""
    gpu = [item for item in items if item.get_closest_marker("gpu")]
    if gpu and not _cuda_available():
        skip = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is False)")
        for item in gpu:
            item.add_marker(skip)


@pytest.fixture
def torch_threads_kept():
    """For a test whose code sets torch's thread count for its process (an embedding stage's one
    thread per worker): the count is put back after, so later tests run as before."""
    import torch
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)
