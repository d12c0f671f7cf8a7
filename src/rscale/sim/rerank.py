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


def positive_rerank_scores(model: GaussianRerankModel, x, rng: np.random.Generator, lift: float = 1.0) -> np.ndarray:
    """Rerank scores of positives of first-stage hardness ``x``: the model's score of a distractor
    at that hardness plus ``lift`` (what a crop-aware reranker adds to a true match)."""
    from scipy.special import ndtri
    r = model.correlation
    x = np.clip(np.asarray(x, np.float64), 1e-300, 1.0)
    return r * ndtri(1.0 - x) + np.sqrt(1 - r * r) * rng.standard_normal(x.size) + lift


def with_rerank_scores(bench, ss, model: GaussianRerankModel, *, top: int, pos_rerank, seed: int = 0):
    """Sample stats ``ss`` of the simulated benchmark ``bench`` (:func:`rscale.sim.benchmark.sample`)
    plus the model's rerank scores of each query's top ``top`` sampled candidates (a candidate's U is
    its first-stage score's survival under the query's law) and the positives' ``pos_rerank``:
    schema-version-2 sample stats whose exact reranked truth is :func:`exact_reranked_hardness`."""
    from dataclasses import replace

    from scipy.special import ndtri

    from rscale.core.sample_stats import validate
    if not 1 <= top <= ss.k:
        raise InvalidArgumentError(f"top must lie in [1, K={ss.k}], got {top}")
    rng = np.random.default_rng([seed, 5])
    q = ss.n_queries
    u = bench.law.sf(ss.top_scores[:, :top], np.broadcast_to(np.arange(q)[:, None], (q, top)))
    z = ndtri(1.0 - np.clip(u, 1e-300, 1.0))
    r = model.correlation
    e = r * z + np.sqrt(1 - r * r) * rng.standard_normal((q, top))
    return validate(replace(ss, top_rerank=e, pos_rerank=np.asarray(pos_rerank, np.float64)))


def exact_reranked_hardness(bench, pos_rerank, model: GaussianRerankModel, points: int = 3000):
    """The reranked law's exact input for ``bench``: the true first-stage hardness and the model's
    joint tail of each positive on a fine grid (every query the same grid, 1e-12 to 1)."""
    from rscale.core.rerank_law import RerankedHardness
    grid = np.concatenate([[0.0], np.geomspace(1e-12, 1.0, points)])
    joint = model.joint_tail(pos_rerank, grid)
    q = bench.pos_offsets.size - 1
    return RerankedHardness.build(bench.pos_x, pos_rerank, bench.pos_offsets, np.tile(grid, (q, 1)), joint)
