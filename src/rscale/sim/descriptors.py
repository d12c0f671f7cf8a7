"""A descriptor-level generator: small sets of unit vectors with instance structure.

For tests and end-to-end runs of the scoring engine, not for accuracy studies (the score-law
simulator in benchmark.py has exact truth at any N; this one is materialised and small).

Each instance has a centre on the unit sphere. Queries and positives are the centre plus
isotropic noise, renormalised; ``noise`` is one level for every instance or a (low, high) range
from which each instance draws its own (some objects are hard to match whatever the gallery).
Distractors are uniform on the sphere, except a share ``hard_share`` that are *near-duplicates*:
vectors near a random instance's centre with noise ``hard_noise`` (> noise), which score high
against that instance's queries without being positives, like near-copies of popular objects in a
web-scale pool.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rscale.errors import InvalidArgumentError


@dataclass(frozen=True)
class SimulatedDescriptors:
    queries: np.ndarray            # (Q, d) float32, unit norm
    query_ids: np.ndarray          # (Q,) str
    query_instance: np.ndarray     # (Q,) int
    positives: np.ndarray          # (P, d) float32, unit norm
    positive_ids: np.ndarray       # (P,) str
    positive_instance: np.ndarray  # (P,) int
    distractors: np.ndarray        # (D, d) float32, unit norm
    distractor_ids: np.ndarray     # (D,) str

    def positives_of(self, q: int) -> np.ndarray:
        """Indices into ``positives`` of query q's positives."""
        return np.flatnonzero(self.positive_instance == self.query_instance[q])


def _unit(v):
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def make_descriptors(n_instances: int = 20, d: int = 32, queries_per_instance: int = 1,
                     positives_per_instance: int = 4, n_distractors: int = 5000,
                     noise=0.6, hard_share: float = 0.01, hard_noise: float = 0.9,
                     seed: int = 0) -> SimulatedDescriptors:
    if min(n_instances, d, queries_per_instance, positives_per_instance) < 1 or n_distractors < 0:
        raise InvalidArgumentError("descriptor generator sizes must be positive")
    rng = np.random.default_rng(seed)
    centres = _unit(rng.standard_normal((n_instances, d)))

    level = (np.full(n_instances, float(noise)) if np.isscalar(noise)
             else rng.uniform(float(noise[0]), float(noise[1]), n_instances))

    def around(inst, scale):
        scale = np.broadcast_to(np.asarray(scale, dtype=np.float64), inst.shape)[:, None]
        return _unit(centres[inst] + scale / np.sqrt(d) * rng.standard_normal((inst.size, d)))

    qi = np.repeat(np.arange(n_instances), queries_per_instance)
    pi = np.repeat(np.arange(n_instances), positives_per_instance)
    n_hard = int(round(hard_share * n_distractors))
    hard = around(rng.integers(0, n_instances, n_hard), hard_noise)
    easy = _unit(rng.standard_normal((n_distractors - n_hard, d)))
    dist = np.concatenate([hard, easy])[rng.permutation(n_distractors)]
    return SimulatedDescriptors(
        queries=around(qi, level[qi]), query_ids=np.array([f"q{i:05d}" for i in range(qi.size)]),
        query_instance=qi, positives=around(pi, level[pi]),
        positive_ids=np.array([f"p{i:06d}" for i in range(pi.size)]), positive_instance=pi,
        distractors=dist, distractor_ids=np.array([f"d{i:08d}" for i in range(n_distractors)]))
