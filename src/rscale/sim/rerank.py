"""A rerank-score model with exact truth, for checking the reranked law (rscale.core.rerank_law).

A distractor's first-stage hardness is U ~ Uniform(0, 1) (its first-stage score is any decreasing
function of U; the law only sees ranks), its first-stage normal score Z = Phi^{-1}(1 - U), and its
rerank score E = r Z + sqrt(1 - r^2) eps with eps ~ N(0, 1) independent: r = 1 keeps the
first-stage order, r = 0 reranks at random. The joint tail of a positive with rerank score t is

    G_t(w) = P(U <= w, E >= t) = int_0^w Phi_bar((t - r Phi^{-1}(1 - u)) / sqrt(1 - r^2)) du,

computed by a cumulative trapezoid on a fine log grid (relative error below 1e-6 at w >= 1e-9).
:meth:`GaussianRerankModel.gallery` draws whole galleries for Monte Carlo truth.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rscale.errors import InvalidArgumentError


@dataclass(frozen=True)
class GaussianRerankModel:
    correlation: float = 0.5

    def __post_init__(self):
        if not 0.0 <= self.correlation < 1.0:
            raise InvalidArgumentError(f"correlation must lie in [0, 1), got {self.correlation}")

    def _conditional_tail(self, t, u):
        from scipy.special import ndtr, ndtri
        r = self.correlation
        z = ndtri(1.0 - u)
        return ndtr(-(np.asarray(t)[..., None] - r * z) / np.sqrt(1 - r * r))

    def joint_tail(self, t, grid, fine: int = 20_000) -> np.ndarray:
        """(P, V) G_t(w) for rerank scores ``t`` (P,) on ``grid`` (V,) points in [0, 1]."""
        t = np.atleast_1d(np.asarray(t, np.float64))
        grid = np.asarray(grid, np.float64)
        u = np.unique(np.concatenate([[0.0], np.geomspace(1e-12, 1.0, fine)]))
        mid = np.clip(u, 1e-300, 1 - 1e-16)
        f = self._conditional_tail(t, mid)                     # (P, fine)
        f[:, 0] = f[:, 1]                                      # the integrand's limit at 0
        cum = np.concatenate([np.zeros((t.size, 1)), np.cumsum((f[:, 1:] + f[:, :-1]) / 2 * np.diff(u), axis=1)],
                             axis=1)
        return np.stack([np.interp(grid, u, row) for row in cum])

    def gallery(self, n: int, size, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``size`` independent galleries of ``n`` distractors: (U, E), each of shape (size, n)."""
        from scipy.special import ndtri
        u = rng.random((size, n))
        z = ndtri(1.0 - u)
        r = self.correlation
        return u, r * z + np.sqrt(1 - r * r) * rng.standard_normal((size, n))
