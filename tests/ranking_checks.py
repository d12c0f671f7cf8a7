"""Brute-force ranking checks shared by the real-set tests (independent of rscale's metric code)."""

from __future__ import annotations


def ap1000_from_scores(ss, q: int) -> float:
    """AP@1000 of query q of sample stats ``ss`` from its scores alone: merge its positives with
    the top-1000 distractor scores, a distractor tying a positive ranked first (the engine's rule)."""
    a, b = ss.pos_offsets[q], ss.pos_offsets[q + 1]
    items = [(float(s), 0) for s in ss.top_scores[q]] + [(float(s), 1) for s in ss.pos_scores[a:b]]
    items.sort(key=lambda t: (-t[0], t[1]))
    hits, ap = 0, 0.0
    for rank, (_, is_pos) in enumerate(items[:1000], start=1):
        if is_pos:
            hits += 1
            ap += hits / rank
    return ap / min(b - a, 1000)
