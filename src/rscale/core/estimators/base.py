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

    def hardness(self) -> Hardness:
        """The law's view (positives sorted within queries). Memoised when ``x`` and ``offsets``
        are read-only (registry-cached tables): then they cannot change under the memo."""
        if self.x.flags.writeable or self.offsets.flags.writeable:
            return Hardness.from_flat(self.x, self.offsets)
        memo = self.__dict__.get("_hardness")
        if memo is None:
            memo = self.__dict__["_hardness"] = Hardness.from_flat(self.x, self.offsets)
        return memo

    def replicate_hardness(self) -> list[Hardness]:
        """The law's view of each of the R replicates (one Hardness per replicate: evaluated one
        at a time, their index arrays shared, so the work stays cache-sized).
        Memoised like :meth:`hardness`; the replicates share this estimate's offsets."""
        if self.replicates is None:
            raise ValueError("this estimate has no replicates")
        memo = self.__dict__.get("_replicate_hardness")
        if memo is None:
            from dataclasses import replace
            # one shared (offsets, query, j, n_pos): positions within a query do not depend on the
            # values, so each replicate adds only its sorted x (cache-sized work per replicate)
            base = Hardness.from_flat(np.ascontiguousarray(self.replicates[:, 0]), self.offsets)
            memo = [base] + [replace(base, x=Hardness.from_flat(np.ascontiguousarray(self.replicates[:, r]),
                                                                 self.offsets).x)
                             for r in range(1, self.replicates.shape[1])]
            if not (self.replicates.flags.writeable or self.offsets.flags.writeable):
                self.__dict__["_replicate_hardness"] = memo
        return memo


def rule_shares(est: HardnessEstimate) -> dict:
    """Share of positives per rule (a diagnostic printed next to predictions)."""
    rules, counts = np.unique(est.rule, return_counts=True)
    return {str(r): float(c) / est.rule.size for r, c in zip(rules, counts)}
