"""Half-sample membership by distractor id: which half of each of the 8 splits a sampled
distractor is in, decided by its id alone, so that two backbones scored on the same distractor
sample have the same halves (their replicates pair, :func:`rscale.core.replicates.split_key`).

Rule (:data:`RULE`): b = blake2b(id as UTF-8, digest 16 bytes); the distractor is in half A of
split i (0 <= i < 8) iff bit i of b[0] is set. The scoring engine records, per top-K entry, that
byte; per positive and split, the half-A distractors at or above it; per query and split, the
half-A size (sample stats schema version 3, docs/formats.md). A half is then read off exactly,
no thinning: its top list is the top entries of its side, its counts and S are recorded (or the
full ones minus half A's). The sampled id set is summarised by :func:`id_set_digest` (count and
the sums mod 2^64 of w = b[8:16] and of w (2 w + 1): order free, so shards merge by adding).
"""

from __future__ import annotations

import hashlib

import numpy as np

from rscale.core.sample_stats import HALF_SPLITS, SampleStats, kept_rerank_scores

RULE = "blake2b-16(id)[0] bit i = half A of split i (rscale 4)"
_MASK64 = (1 << 64) - 1


def id_hashes(ids) -> tuple[np.ndarray, np.ndarray]:
    """(membership byte (n,) uint8, 64-bit set words (n,) uint64) of each distractor id."""
    ids = [str(i) for i in np.asarray(ids).ravel()]
    raw = b"".join(hashlib.blake2b(i.encode(), digest_size=16).digest() for i in ids)
    b = np.frombuffer(raw, dtype=np.uint8).reshape(len(ids), 16)
    return b[:, 0].copy(), b[:, 8:16].copy().view("<u8").ravel()


def membership(ids) -> np.ndarray:
    """The membership byte of each id (bit i: half A of split i)."""
    return id_hashes(ids)[0]


def id_set_sums(words: np.ndarray) -> np.ndarray:
    """(3,) uint64 additive summary of a set of id words: count, sum, sum of word * (2 word + 1)."""
    w = np.asarray(words, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return np.array([w.size, int(w.sum(dtype=np.uint64)), int((w * (w * np.uint64(2) + np.uint64(1))).sum(dtype=np.uint64))],
                        dtype=np.uint64)


def id_set_digest(sums: np.ndarray) -> str:
    """The text form of merged :func:`id_set_sums` (what sample stats record as ``sample_ids``)."""
    n, a, b = (int(v) & _MASK64 for v in np.asarray(sums, dtype=np.uint64))
    return f"n={n} s={a:016x} t={b:016x}"


def recorded_halves(ss: SampleStats, split: int) -> tuple[SampleStats, SampleStats]:
    """Halves A and B of split ``split`` read off the recorded membership (same K for both: the
    smallest number of top entries a side keeps over queries)."""
    from dataclasses import replace

    from rscale.errors import InvalidArgumentError

    if not ss.has_halves:
        raise InvalidArgumentError("these sample stats record no half-sample membership (top_halves)")
    if not 0 <= split < HALF_SPLITS:
        raise InvalidArgumentError(f"recorded halves hold splits 0..{HALF_SPLITS - 1}, got {split}")
    in_a = ((ss.top_halves >> np.uint8(split)) & 1).astype(bool)
    k_new = int(min(in_a.sum(axis=1).min(), (~in_a).sum(axis=1).min()))
    if k_new < 1:
        raise InvalidArgumentError(f"a half of split {split} keeps none of some query's top list: store a longer top list")
    out = []
    for keep, n, c in ((in_a, ss.n_halves[:, split], ss.pos_halves[:, split]),
                       (~in_a, ss.n_sampled - ss.n_halves[:, split], ss.pos_counts - ss.pos_halves[:, split])):
        order = np.argsort(~keep, axis=1, kind="stable")[:, :k_new]
        rerank = {"top_rerank": None, "pos_rerank": None}
        if ss.has_rerank:
            rerank.update(kept_rerank_scores(ss, keep, k_new))
        out.append(replace(ss, n_sampled=np.asarray(n, np.int64), top_scores=np.take_along_axis(ss.top_scores, order, axis=1),
                           pos_counts=np.asarray(c, np.int64), top_halves=None, pos_halves=None, n_halves=None,
                           meta={**ss.meta, "half": f"{split}{'AB'[len(out)]}"}, **rerank))
    return out[0], out[1]
