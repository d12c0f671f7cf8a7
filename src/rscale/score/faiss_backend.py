"""faiss for the GEMM when it is installed (the ``score`` extra); imported only when asked for."""

from __future__ import annotations

import numpy as np

from rscale.errors import MissingExtraError


def _faiss():
    try:
        import faiss
    except ImportError:
        raise MissingExtraError("faiss", "score") from None
    return faiss


def inner_products(q: np.ndarray, d: np.ndarray) -> np.ndarray:
    """All Q x C inner products through faiss' BLAS wrapper (pairwise_distances, METRIC_INNER_PRODUCT)."""
    faiss = _faiss()
    return faiss.pairwise_distances(np.ascontiguousarray(q, dtype=np.float32),
                                    np.ascontiguousarray(d, dtype=np.float32),
                                    metric=faiss.METRIC_INNER_PRODUCT)


def knn_top(q: np.ndarray, d: np.ndarray, k: int) -> np.ndarray:
    """faiss' own exact k-NN (IndexFlatIP search), for the side-by-side benchmark."""
    faiss = _faiss()
    index = faiss.IndexFlatIP(d.shape[1])
    index.add(np.ascontiguousarray(d, dtype=np.float32))
    scores, _ = index.search(np.ascontiguousarray(q, dtype=np.float32), k)
    return scores
