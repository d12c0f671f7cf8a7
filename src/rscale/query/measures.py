"""Measures as values with one canonical spelling (after ir_measures' ``AP@1000`` style).

Grammar: ``NAME[@k]``, NAME case-insensitive with aliases folded to the canonical name:

=============  ===========================  =========================================
canonical      aliases                      meaning (rscale.core.law)
=============  ===========================  =========================================
``mAP@k``      map, AP, mAP                 ILIAS AP@k averaged over queries (k required)
``R@k``        r, hit, success              hit rate: a positive in the top k (k required)
``Recall@k``   recall                       fraction of positives in the top k (k required)
``MRR``        mrr, rr                      mean reciprocal rank of the first positive (@k optional)
=============  ===========================  =========================================

``Measure.parse("map@1000") == Measure("mAP", 1000)`` and ``str(Measure("mAP", 1000)) == "mAP@1000"``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rscale.errors import InvalidArgumentError

_ALIASES = {"map": "mAP", "ap": "mAP", "r": "R", "hit": "R", "success": "R", "recall": "Recall",
            "mrr": "MRR", "rr": "MRR"}
_LAW_NAME = {"mAP": "AP", "R": "R", "Recall": "Recall", "MRR": "RR"}
_NEEDS_K = {"mAP", "R", "Recall"}
MAX_CUTOFF = 10**15   # the query grammar's largest gallery size
_PATTERN = re.compile(r"^\s*([A-Za-z]+)\s*(?:@\s*([0-9_]+(?:[eE][0-9]+)?|[0-9.]+[eE][0-9]+))?\s*$")


@dataclass(frozen=True, order=True)
class Measure:
    name: str
    k: int | None = None

    @classmethod
    def parse(cls, text: str) -> "Measure":
        m = _PATTERN.match(text or "")
        if not m:
            raise InvalidArgumentError(f"cannot read measure {text!r}; write e.g. mAP@1000, R@1, Recall@100, MRR")
        raw, k = m.group(1), m.group(2)
        name = _ALIASES.get(raw.lower())
        if name is None:
            from difflib import get_close_matches
            near = get_close_matches(raw.lower(), list(_ALIASES), n=1)
            hint = f" Did you mean '{_ALIASES[near[0]]}'?" if near else ""
            raise InvalidArgumentError(f"unknown measure {raw!r} (known: mAP@k, R@k, Recall@k, MRR).{hint}")
        kk = None
        if k is not None:
            value = float(k.replace("_", ""))
            if not value.is_integer() or not 1 <= value <= MAX_CUTOFF:
                raise InvalidArgumentError(f"cut-off in {text!r} must be a whole number >= 1 and at most "
                                           f"1e15 (the largest gallery size); write e.g. {name}@1000")
            kk = int(value)
        if name in _NEEDS_K and kk is None:
            raise InvalidArgumentError(f"{name} needs a cut-off: write {name}@1000 (or another k)")
        return cls(name, kk)

    @property
    def law_metric(self) -> str:
        """The metric name :func:`rscale.core.law.per_query` understands."""
        return _LAW_NAME[self.name]

    def __str__(self) -> str:
        return self.name if self.k is None else f"{self.name}@{self.k}"
