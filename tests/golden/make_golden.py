"""Writes the golden files of tests/test_golden.py. Run it only when a format's version changes
(then add new files next to the old ones: old versions must keep loading).

    PYTHONPATH=src python tests/golden/make_golden.py
"""

from pathlib import Path

import numpy as np

from rscale.core.estimators.methods import estimate
from rscale.core.sample_stats import SampleStats
from rscale.store.descriptor_set import write_descriptor_set
from rscale.store.hardness_file import write_hardness
from rscale.store.sample_stats_file import write_sample_stats

HERE = Path(__file__).resolve().parent


def sample_stats() -> SampleStats:
    """Three queries, K = 24 top scores each, S = 1000, two or three positives per query."""
    rng = np.random.default_rng(11)
    top = -np.sort(-np.round(rng.normal(0.2, 0.05, (3, 24)), 4), axis=1)
    pos_scores = np.array([0.41, 0.27, 0.19, 0.33, 0.12, 0.30, 0.25, 0.21])
    offsets = np.array([0, 3, 5, 8])
    counts = np.array([int((top[q] >= s).sum()) if s >= top[q, -1] else 40 + 7 * j
                       for q in range(3) for j, s in enumerate(pos_scores[offsets[q]:offsets[q + 1]])])
    return SampleStats(query_ids=np.array(["q0", "q1", "q2"]), n_sampled=np.array([1000, 1000, 1000]),
                       top_scores=top, pos_offsets=offsets,
                       pos_ids=np.array(["p00", "p01", "p02", "p10", "p11", "p20", "p21", "p22"]),
                       pos_scores=pos_scores, pos_counts=counts,
                       meta={"backbone": "golden", "benchmark": "golden_bench", "distractor_source": "golden",
                             "sampler": "hash(seed=0) < 0.001", "seed": "0"})


def hardness_v2():
    """hardness_v2.parquet: the v1 estimate plus four fixed replicates per positive (format version 2)."""
    from dataclasses import replace
    ss = sample_stats()
    est = estimate(ss, "evt", k_top=24, q=0.5, gof_crit=0.0)
    reps = np.clip(est.x[:, None] * np.array([0.5, 2.0, 0.8, 1.25])[None, :], 0.0, 1.0)
    write_hardness(replace(est, replicates=reps), ss, HERE / "hardness_v2.parquet",
                   {"R": 4, "splits": 2, "kind": "half-sample pairs", "seed": 0})


def hardness_v3():
    """hardness_v3.parquet: the v2 file plus four fixed back-test columns (factors 4, 4, 8, 8; format version 3)."""
    from dataclasses import replace

    from rscale.core.backtest import Backtest
    ss = sample_stats()
    est = estimate(ss, "evt", k_top=24, q=0.5, gof_crit=0.0)
    reps = np.clip(est.x[:, None] * np.array([0.5, 2.0, 0.8, 1.25])[None, :], 0.0, 1.0)
    cols = np.clip(est.x[:, None] * np.array([0.7, 1.4, 0.9, 1.1])[None, :], 0.0, 1.0)
    bt = Backtest(counts=ss.pos_counts, columns=cols, column_factors=np.array([4, 4, 8, 8]))
    write_hardness(replace(est, replicates=reps), ss, HERE / "hardness_v3.parquet",
                   {"R": 4, "splits": 2, "kind": "half-sample pairs", "seed": 0}, bt, {"per_factor": 2, "seed": 0})


def _v4_parts():
    """(sample stats, estimate with replicates, back-test) of the version-4 file, which version 5 extends."""
    from dataclasses import replace

    from rscale.core.backtest import Backtest
    ss = sample_stats()
    est = estimate(ss, "evt", k_top=24, q=0.5, gof_crit=0.0)
    reps = np.clip(est.x[:, None] * np.array([0.5, 2.0, 0.8, 1.25])[None, :], 0.0, 1.0)
    reps[5:8, 0] = [0.25, 0.25, 0.125]
    cols = np.clip(est.x[:, None] * np.array([0.7, 1.4, 0.9, 1.1])[None, :], 0.0, 1.0)
    bt = Backtest(counts=ss.pos_counts, columns=cols, column_factors=np.array([4, 4, 8, 8]))
    return ss, replace(est, replicates=reps), bt


REPLICATES_META = {"R": 4, "splits": 2, "kind": "half-sample pairs", "seed": 0}
BACKTEST_META = {"per_factor": 2, "seed": 0}


def hardness_v4():
    """hardness_v4.parquet: the v3 file plus the law's within-query ranks of x, the replicates and the
    back-test columns (format version 4), with two exact ties in a query (q2's replicate 0)."""
    ss, est, bt = _v4_parts()
    write_hardness(est, ss, HERE / "hardness_v4.parquet", REPLICATES_META, bt, BACKTEST_META)


def hardness_v5():
    """hardness_v5.parquet: the v4 file plus three posterior draws per positive (1e-4, 2e-4, 3e-4
    for the positives the sample counts nothing above) and the second edge model's factor (format
    version 5): 2.0 and 0.5 on q0's and q2's such positives, 1 elsewhere, with its rscale.edge
    metadata."""
    from dataclasses import replace
    ss, est, bt = _v4_parts()
    draws = np.clip(est.x[:, None] * np.array([0.8, 1.0, 1.2])[None, :], 0.0, 1.0)
    draws[ss.pos_counts == 0] = [1e-4, 2e-4, 3e-4]          # the tail model's draws past the edge
    factor = np.where(ss.pos_counts == 0, np.array([2.0, 1, 1, 1, 1, 0.5, 1, 1]), 1.0)
    edge_meta = {"bands": [[1e-3, 1e-2], [1e-2, 1e-1], [1e-1, 1.0]], "prior_counts": 1.0, "ratios": [2.0, 1.0, 0.5],
                 "split": 0, "weights": [0.5, 0.5]}
    write_hardness(replace(est, draws=draws, edge_factor=factor), ss, HERE / "hardness_v5.parquet",
                   REPLICATES_META, bt, BACKTEST_META, edge_meta)


def main():
    hardness_v5()


def v1_files():
    """What wrote the version-1 files (with rscale of hardness format 1; kept as their recipe)."""
    ss = sample_stats()
    write_sample_stats(ss, HERE / "sample_stats_v1.parquet")
    est = estimate(ss, "evt", k_top=24, q=0.5, gof_crit=0.0)
    write_hardness(est, ss, HERE / "hardness_v1.parquet")            # + hardness_v1.tail.parquet
    rng = np.random.default_rng(5)
    v = rng.normal(size=(6, 4))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    write_descriptor_set(HERE / "descriptors_v1", [(np.array([f"d{i}" for i in range(6)]), v)], role="distractors",
                         dtype="float16", meta={"backbone": "golden", "pooling": "cls", "resolution": 32,
                                                "source": "golden"}, shard_size=4)


if __name__ == "__main__":
    main()
