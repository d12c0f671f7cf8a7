"""A probe of a duplicate floor past the sample's top on the seen real sets (design data, not a
candidate; docs/benchmarks.md, "Where the real sets' error lives: depth past the sample").

The halves of a draw's first replicate split measure how many more distractors the other half
counts above the positives one half counts nothing above, far above its top (g >= G0 top-10
spreads, bias_by_depth_real.py's gap), than the first half's evt-eb model expects: that excess per
positive, over the half's size, is a hardness floor rho. The probe adds it to the full sample's
uncounted positives with g >= G0 and prints model U's mAP@1000 error against the realised truth
(draw 0, at the pool), with the floor spread three ways over each query's 16 posterior draws: in
every draw (pi = 1), or rho / pi in a share pi of them (the same draws for all positives of a
query, rotated from query to query): the same mean, more queries with nothing above.

Seen sets only (edge_transfer.SEEN_REAL_SETS).

Run: PYTHONPATH=src .venv/bin/python benchmarks/edge_floor_probe.py [--g0 2] [--sets realset,realset3]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bias_by_depth import mean_metric  # noqa: E402
from edge_transfer import SEEN_REAL_SETS  # noqa: E402

SHARES = (1.0, 0.25, 1.0 / 16)


def gap(ss) -> np.ndarray:
    """Each positive's height above its query's top sampled score, in spreads of the top ten."""
    pq = ss.positive_query()
    top = ss.top_scores[pq, 0]
    return (ss.pos_scores - top) / np.maximum(top - ss.top_scores[pq, min(9, ss.top_scores.shape[1] - 1)], 1e-12)


def halves_floor(ss, g0: float, method: str = "evt-eb") -> float:
    """rho (module docstring), >= 0, from the first replicate split, both directions pooled."""
    from rscale.core.estimators.methods import estimate
    from rscale.core.replicates import replicate_halves
    a, b = replicate_halves(ss, 0, splits=8)
    excess, positives = 0.0, 0
    for x, y in ((a, b), (b, a)):
        est = estimate(x, method)
        x_hat = est.x if est.draws is None else est.draws.mean(axis=1)
        pq = x.positive_query()
        far = (x.pos_counts == 0) & (gap(x) >= g0)
        excess += float(np.sum(y.pos_counts[far] - x_hat[far] * y.n_sampled[pq][far]) / np.mean(y.n_sampled))
        positives += int(far.sum())
    return max(excess / max(positives, 1), 0.0)


def with_floor(draws: np.ndarray, far: np.ndarray, pq: np.ndarray, n_queries: int, rho: float, share: float):
    """(P, D) draws with rho / share added to the ``far`` positives in round(share D) of the D draws
    (the same draws for every positive of a query, rotated by 7 per query), clipped to [0, 1]."""
    d = draws.shape[1]
    k = max(int(round(share * d)), 1)
    shift = (np.arange(n_queries) * 7) % d
    which = ((np.arange(d)[None, :] - shift[pq][:, None]) % d) < k
    out = draws.copy()
    out[far] += np.where(which[far], rho * d / k, 0.0)
    return np.clip(out, 0.0, 1.0)


def main(argv=None):
    from rscale.core.estimators.methods import estimate
    from rscale.store.sample_stats_file import read_sample_stats
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--g0", type=float, default=2.0)
    ap.add_argument("--sets", default=",".join(SEEN_REAL_SETS))
    a = ap.parse_args(argv)
    print(f"| set | S/N | rho S (halves) | U | floor, pi = " + " | pi = ".join(f"{p:g}" for p in SHARES) + " |")
    print("|---|---|---|---|" + "---|" * len(SHARES))
    for name in a.sets.split(","):
        if name not in SEEN_REAL_SETS:
            raise SystemExit(f"--sets {name}: not a seen real set ({', '.join(SEEN_REAL_SETS)})")
        data = HERE / name / "data"
        man = json.loads((data / "manifest.json").read_text())
        n, truth = float(man["pool"]), float(man["truth_map_at_1000"])
        for f in (1, 5):
            ss = read_sample_stats(data / f"draw-{f:02d}pct-0.sample_stats.parquet")
            rho = halves_floor(ss, a.g0)
            est = estimate(ss, "evt-eb")
            far = (ss.pos_counts == 0) & (gap(ss) >= a.g0)
            errs = [mean_metric(est.draws.T, est.offsets, n, "expected") - truth]
            errs += [mean_metric(with_floor(est.draws, far, ss.positive_query(), ss.n_queries, rho, p).T,
                                 est.offsets, n, "expected") - truth for p in SHARES]
            print(f"| {name} | {f}% | {rho * float(np.mean(ss.n_sampled)):.3f} | " + " | ".join(f"{e:+.4f}" for e in errs) + " |",
                  flush=True)


if __name__ == "__main__":
    main()
