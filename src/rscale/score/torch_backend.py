"""torch for the GEMM (the ``extract`` extra): on a CUDA device when one is present.

Only the Q x C inner products run on the device; the engine's fold (threshold filter, top-K,
positive counts) stays on the host, so the result is bit-compatible with the numpy path up to
the GEMM's own rounding. The engine never uses a k-selection kernel, so faiss-gpu's k <= 2048
cap does not apply to any backend here: top-K is kept by the engine for any K.

Scores must be full float32: with TF32 or bf16 matmuls a distractor identical to a positive
could score differently from it and the tie rule would break. Positive scores go through the
same routine (:meth:`rscale.score.engine.Queries.build` with the same backend).
"""

from __future__ import annotations

import numpy as np

from rscale.errors import InvalidArgumentError, MissingExtraError

_query_cache: dict = {}


def _torch():
    try:
        import torch
    except ImportError:
        raise MissingExtraError("torch", "extract") from None
    return torch


def device_name(prefer: str | None = None) -> str:
    """``prefer`` if given, else ``cuda`` when a CUDA device is visible, else ``cpu``."""
    torch = _torch()
    if prefer:
        return prefer
    return "cuda" if torch.cuda.is_available() else "cpu"


def inner_products(q: np.ndarray, d: np.ndarray, device: str | None = None) -> np.ndarray:
    """All Q x C float32 inner products, computed on ``device``; the query block is uploaded once."""
    torch = _torch()
    if torch.get_float32_matmul_precision() != "highest":
        raise InvalidArgumentError(
            f"torch float32 matmul precision is {torch.get_float32_matmul_precision()!r}; scoring needs full "
            "float32 (ties with positives must be exact): call torch.set_float32_matmul_precision('highest')")
    dev = device_name(device)
    # the cache holds the array itself, so identity cannot be reused by another array while cached
    if _query_cache.get("src") is not q or _query_cache.get("device") != dev:
        _query_cache.clear()
        _query_cache.update(src=q, device=dev,
                            tensor=torch.from_numpy(np.ascontiguousarray(q, dtype=np.float32)).to(dev))
    qt = _query_cache["tensor"]
    dt = torch.from_numpy(np.ascontiguousarray(d, dtype=np.float32)).to(dev, non_blocking=True)
    with torch.no_grad():
        s = qt @ dt.T
    return s.cpu().numpy()


def cuda_available() -> bool:
    """True when torch is installed and sees a CUDA device (imports torch: call only when it matters)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return False
    return bool(_torch().cuda.is_available())
