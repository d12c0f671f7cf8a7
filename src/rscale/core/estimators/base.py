"""The common output of every estimator: a hardness table aligned with the sample's positives."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rscale.core.law import Hardness


@dataclass(frozen=True)
class HardnessEstimate:
    """Per positive: estimated hardness ``x`` and the ``rule`` that produced it; per query: the
    sample size and any fitted tail parameters (``tail``: name -> (Q,) array).

    Positives keep the sample stats' order (``offsets`` as in the sample), so a row joins back to
    its positive id.
    """

    method: str
    x: np.ndarray
    offsets: np.ndarray
    rule: np.ndarray
    n_sampled: np.ndarray
    params: dict = field(default_factory=dict)
    tail: dict = field(default_factory=dict)
    draws: np.ndarray | None = None   # (P, D) posterior draws of x, when the estimator has them
    replicates: np.ndarray | None = None   # (P, R) hardness replicates (rscale.core.replicates), when made
    # (P,) the second edge model's factor on each positive's hardness (rscale.core.edge_models), when made
    edge_factor: np.ndarray | None = None

    def hardness(self) -> Hardness:
        """The law's view (positives sorted within queries). Memoised when ``x`` and ``offsets``
        are read-only (registry-cached tables): then they cannot change under the memo."""
        if self.x.flags.writeable or self.offsets.flags.writeable:
            return Hardness.from_flat(self.x, self.offsets)
        memo = self.__dict__.get("_hardness")
        if memo is None:
            memo = self.__dict__["_hardness"] = Hardness.from_flat(self.x, self.offsets)
        return memo

    def replicate_hardness(self) -> Hardness:
        """The law's view of the R replicates as one stack: a :class:`Hardness` whose ``x`` is
        (R, P), each replicate sorted within queries on its own, so that every metric evaluates
        all R in one array operation (``rscale.core.law``). Memoised like :meth:`hardness`."""
        if self.replicates is None:
            raise ValueError("this estimate has no replicates")
        memo = self.__dict__.get("_replicate_hardness")
        if memo is None:
            memo = Hardness.from_flat(self.replicates.T, self.offsets)
            if not (self.replicates.flags.writeable or self.offsets.flags.writeable):
                self.__dict__["_replicate_hardness"] = memo
        return memo


def rule_shares(est: HardnessEstimate) -> dict:
    """Share of positives per rule (a diagnostic printed next to predictions)."""
    rules, counts = np.unique(est.rule, return_counts=True)
    return {str(r): float(c) / est.rule.size for r, c in zip(rules, counts)}
