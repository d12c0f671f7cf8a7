"""Paired comparison of two runs on the same queries: effect, CI and p-value per measure.

A run is per-query positive ranks (:class:`PerQueryRanks`), from which every measure follows
(rscale.core.metrics): R@k hits, mAP@k, Recall@k, MRR. Three ways to get one:

- an exact evaluation, ``rscale score --fraction 1`` (sample stats whose sampler is
  ``hash(...) < 1``): every distractor was scored, so a positive's sampled count is its exact
  distractor count and its rank is j + K_j (:meth:`PerQueryRanks.from_sample_stats`); a sampled
  evaluation (fraction < 1) is refused: its counts are not ranks (compare hardness predictions
  with ``rscale query`` instead, which reports paired differences);
- one ordered distance pair, or all of them stacked, of the O2I benchmark
  (:meth:`PerQueryRanks.from_cross_distance`);
- any ranks the caller has (:class:`PerQueryRanks` directly).

:func:`compare` aligns the two runs by query id (refusing different query sets), tests each
measure (McNemar's exact test for R@k hits, the paired t-test for mAP@k, Recall@k and MRR:
rscale.core.significance) and applies Holm's correction across the measures.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from rscale.core import metrics, ragged
from rscale.core import significance as sig
from rscale.errors import InvalidArgumentError
from rscale.query.measures import Measure

DEFAULT_MEASURES = ("R@1", "R@10", "mAP@1000", "MRR")


@dataclass(frozen=True)
class PerQueryRanks:
    """1-based ranks of each query's positives (flat + offsets), with the query ids."""

    query_ids: np.ndarray        # (Q,) str, unique
    ranks: np.ndarray            # (P,) int64, query q's are ranks[offsets[q]:offsets[q+1]]
    offsets: np.ndarray          # (Q+1,)
    label: str = "run"
    n_relevant: np.ndarray | None = None   # (Q,) positives per query when some are not ranked
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        ids = np.asarray(self.query_ids).astype(str)
        off = ragged.check_offsets(np.asarray(self.offsets, dtype=np.int64), np.asarray(self.ranks).size)
        if off.size != ids.size + 1:
            raise InvalidArgumentError(f"{self.label}: {ids.size} query ids but {off.size - 1} queries in the offsets")
        if np.unique(ids).size != ids.size:
            srt = np.sort(ids)
            dup = srt[1:][srt[1:] == srt[:-1]][0]
            raise InvalidArgumentError(f"{self.label}: query id {dup!r} appears more than once")
        if np.any(np.diff(off) == 0):
            q = int(np.flatnonzero(np.diff(off) == 0)[0])
            raise InvalidArgumentError(f"{self.label}: query {ids[q]!r} has no ranked positive")
        object.__setattr__(self, "query_ids", ids)
        object.__setattr__(self, "offsets", off)
        object.__setattr__(self, "ranks", np.asarray(self.ranks, dtype=np.int64))

    @property
    def n_queries(self) -> int:
        return int(self.query_ids.size)

    def values(self, measure: Measure) -> np.ndarray:
        """Per-query values of ``measure`` (R@k hits are 0/1)."""
        if measure.name == "R":
            return metrics.hit_at_k(self.ranks, self.offsets, measure.k)
        if measure.name == "mAP":
            return metrics.ap_at_k(self.ranks, self.offsets, measure.k, self.n_relevant)
        if measure.name == "Recall":
            n_rel = np.diff(self.offsets) if self.n_relevant is None else np.asarray(self.n_relevant)
            return ragged.group_sum((self.ranks <= measure.k).astype(float), self.offsets) / n_rel
        return metrics.reciprocal_rank(self.ranks, self.offsets, measure.k)

    def subset(self, order: np.ndarray) -> "PerQueryRanks":
        """The queries at ``order`` (indices), in that order."""
        sizes = np.diff(self.offsets)[order]
        starts = self.offsets[:-1][order]
        idx = np.concatenate([np.arange(s, s + n) for s, n in zip(starts, sizes)]) if order.size else np.zeros(0, int)
        n_rel = None if self.n_relevant is None else np.asarray(self.n_relevant)[order]
        return PerQueryRanks(self.query_ids[order], self.ranks[idx], np.concatenate([[0], np.cumsum(sizes)]),
                             self.label, n_rel, self.meta)

    @classmethod
    def from_sample_stats(cls, ss, label: str | None = None, path: str | None = None) -> "PerQueryRanks":
        """Exact ranks from the sample stats of an exact evaluation (``rscale score --fraction 1``)."""
        where = path or label or "sample stats"
        sampler = str(ss.meta.get("sampler", ""))
        fraction = _sampler_fraction(sampler)
        if fraction is None or fraction < 1.0:
            what = f"sampler {sampler!r}" if sampler else "no sampler recorded"
            raise InvalidArgumentError(
                f"{where} is not an exact evaluation ({what}): its distractor counts are a sample, not ranks. "
                "Score the whole pool with `rscale score --fraction 1`, or compare predictions with `rscale query`")
        ranks = metrics.ranks_from_counts(ss.pos_counts, ss.pos_offsets)
        return cls(ss.query_ids, ranks, ss.pos_offsets, label or str(ss.meta.get("backbone", where)),
                   meta=dict(ss.meta))

    @classmethod
    def from_cross_distance(cls, cd, object_ids=None, pair: tuple[int, int] | None = None,
                            label: str = "o2i") -> "PerQueryRanks":
        """O2I cross-distance ranks (rscale.core.o2i.CrossDistance) as per-query results.

        ``pair`` (query view, target view): that pair's queries, ids ``<object>``; None: every
        ordered pair stacked, ids ``<object>@<d_q>-><d_t>`` (one query per object and pair).
        """
        n_obj = cd.ranks.shape[1]
        obj = np.asarray(object_ids if object_ids is not None else [str(i) for i in range(n_obj)]).astype(str)
        if obj.size != n_obj:
            raise InvalidArgumentError(f"{obj.size} object ids for {n_obj} objects")
        if pair is not None:
            p = cd.pair_index(*pair)
            return cls(obj, cd.ranks[p], np.arange(n_obj + 1), label)
        dq, dt = cd.distances[cd.pairs[:, 0]], cd.distances[cd.pairs[:, 1]]
        ids = np.array([f"{o}@{a:g}->{b:g}" for a, b in zip(dq, dt) for o in obj])
        return cls(ids, cd.ranks.ravel(), np.arange(cd.ranks.size + 1), label)


def _sampler_fraction(sampler: str) -> float | None:
    """The fraction of ``hash(seed=..) < f`` (rscale score's sampler), else None."""
    if "<" not in sampler or not sampler.startswith("hash("):
        return None
    try:
        return float(sampler.rsplit("<", 1)[1])
    except ValueError:
        return None


def load_run(run, label: str | None = None) -> PerQueryRanks:
    """A PerQueryRanks, a SampleStats value, or the path of a sample-stats Parquet file."""
    if isinstance(run, PerQueryRanks):
        return run
    from rscale.core.sample_stats import SampleStats
    if isinstance(run, SampleStats):
        return PerQueryRanks.from_sample_stats(run, label)
    if isinstance(run, (str, os.PathLike)):
        from rscale.store.sample_stats_file import read_sample_stats
        return PerQueryRanks.from_sample_stats(read_sample_stats(run), label or os.fspath(run), path=os.fspath(run))
    raise InvalidArgumentError(f"cannot compare a {type(run).__name__}: pass per-query ranks, sample stats "
                               "or the path of an exact evaluation's sample-stats file")


def align(a: PerQueryRanks, b: PerQueryRanks) -> tuple[PerQueryRanks, PerQueryRanks]:
    """Both runs on the same queries in the same order; different query sets are refused."""
    sa, sb = set(a.query_ids.tolist()), set(b.query_ids.tolist())
    if sa != sb:
        only_a, only_b = sorted(sa - sb), sorted(sb - sa)
        parts = []
        if only_a:
            parts.append(f"{len(only_a)} only in {a.label} (e.g. {only_a[0]!r})")
        if only_b:
            parts.append(f"{len(only_b)} only in {b.label} (e.g. {only_b[0]!r})")
        raise InvalidArgumentError(f"the runs cover different queries: {', '.join(parts)}; "
                                   "a paired comparison needs two runs of the same queries")
    order_b = np.argsort(b.query_ids)[np.searchsorted(np.sort(b.query_ids), a.query_ids)]
    return a, b.subset(order_b)


@dataclass(frozen=True)
class MeasureComparison:
    measure: str
    test: str
    n: int
    value_a: float
    value_b: float
    effect: float          # b - a
    ci_low: float
    ci_high: float
    p_value: float
    p_holm: float          # Holm-adjusted across the compared measures
    discordant: tuple | None = None

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class Comparison:
    label_a: str
    label_b: str
    n_queries: int
    confidence: float
    ci_method: str
    rows: tuple

    def to_dict(self) -> dict:
        return {"a": self.label_a, "b": self.label_b, "queries": self.n_queries, "confidence": self.confidence,
                "ci": self.ci_method, "measures": [r.to_dict() for r in self.rows]}


def compare(run_a, run_b, *, measures=DEFAULT_MEASURES, confidence: float = 0.95, ci: str = "t",
            mcnemar_variant: str = "exact", seed: int = 0, labels: tuple[str, str] | None = None) -> Comparison:
    """Effect (B - A), CI and p-value per measure for two runs of the same queries.

    ``run_a`` / ``run_b``: :class:`PerQueryRanks`, SampleStats of an exact evaluation, or the path
    of its sample-stats file. ``measures``: strings or Measure values (R@k by McNemar's test,
    ``mcnemar_variant`` exact / mid-p / chi2; mAP@k, Recall@k, MRR by the paired t-test).
    ``ci``: "t" (paired t interval) or "bootstrap" (paired, seeded). Holm's correction runs across
    the measures (``p_holm``).
    """
    a = load_run(run_a, labels[0] if labels else None)
    b = load_run(run_b, labels[1] if labels else None)
    if labels:
        a = PerQueryRanks(a.query_ids, a.ranks, a.offsets, labels[0], a.n_relevant, a.meta)
        b = PerQueryRanks(b.query_ids, b.ranks, b.offsets, labels[1], b.n_relevant, b.meta)
    a, b = align(a, b)
    ms = [m if isinstance(m, Measure) else Measure.parse(m) for m in measures]
    if not ms:
        raise InvalidArgumentError("name at least one measure to compare (e.g. R@1, mAP@1000)")
    if len(set(ms)) != len(ms):
        raise InvalidArgumentError(f"a measure is named twice in {[str(m) for m in ms]}")
    tests = []
    for m in ms:
        va, vb = a.values(m), b.values(m)
        if m.name == "R":
            tests.append(sig.mcnemar(va, vb, variant=mcnemar_variant, confidence=confidence, ci=ci, seed=seed))
        else:
            tests.append(sig.paired_t(va, vb, confidence=confidence, ci=ci, seed=seed))
    adj = sig.holm([t.p_value for t in tests])
    rows = tuple(MeasureComparison(str(m), t.test, t.n, t.mean_a, t.mean_b, t.effect, t.ci_low, t.ci_high,
                                   t.p_value, float(p), t.discordant) for m, t, p in zip(ms, tests, adj))
    return Comparison(a.label, b.label, a.n_queries, confidence, ci, rows)
