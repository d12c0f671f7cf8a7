"""Does the halves' edge ratio transfer to the full sample? A diagnostic on seen data (issue 14;
docs/benchmarks.md, "Does the halves' edge ratio transfer"); nothing of it is in ``src/``.

benchmarks/edge_calibration.py multiplies the hardness of the full estimate's positives with no
sampled distractor above (c = 0) by the ratio r(d) = truth / model that the complementary halves
measure at model depth d = x S (half A's model against half B's counts). That is right only if the
full fit's own ratio at depth d is the halves' one. Here both are measured, model-free, in bands of
model depth:

- halves: over the positives a half counts nothing above, sum of the other half's counts / sum of
  their expectation under the half's model (both directions of the first of 8 splits);
- truth: over the full estimate's positives with c = 0, sum of their true counts at N / sum of
  their model counts x N; on a real set the true count is the full pool's (the manifest's truth
  stats), on the simulator the sample's count plus a Poisson draw with mean (N - S) times the true x
  (one pool's counts);
- the spread: the negative-binomial shape k of each side's counts around its log-linear ratio over
  the depths [1e-3, 1) (the halves' k is what edge_calibration's ``mixture`` spreads by), and the
  same at a quarter's scale (half A split in two), to see whether the spread changes with scale;

and, for the truth side, the share of those positives with no distractor above them in the whole
pool. Last, for the positives the sample does count (c >= 1), the truth's ratio to the estimate by
sampled count: where the edge's error may be offset (an estimate too hard for lightly counted
positives, for instance), beside the halves' view of it (a half's positives with that count against
the other half's counts). And the mAP@1000 error of a mean correction with no spread: every edge
positive's draws times its band's ratio, the truth's in every band (an oracle of the mean) or the
halves' in the bands they measure (and, ``halves_mean_counted``, the positives counted 1 and 2-4
times too, each by the halves' ratio for that count); against the manifest's truth on a real set,
the law's value under the true x on the simulator. Last, the oracle again with the edge
positives' posterior draws collapsed to their mean (``oracle_mean_no_draw_spread``): how much of
what exact means leave is the spread of the estimate's own draws.

Run: PYTHONPATH=src .venv/bin/python benchmarks/edge_transfer.py --set realset3 [--fractions 0.01,0.05] [--draws 2]
     PYTHONPATH=src .venv/bin/python benchmarks/edge_transfer.py --set design --pool 20000 --k 1000
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bias_by_depth import mean_metric as mean_ap  # noqa: E402  (mean AP@1000 over hardness draws)
from edge_calibration import DEPTH, N_SIM, fit_ratio, half_counts, pair_counts, point  # noqa: E402

QUARTER_SEED = 9_100        # the split of half A into two quarters (the spread at a third scale)
# realset4 and cov4 were held out until the edge average's single measurement (docs/benchmarks.md,
# "Two edge models, averaged"), realset5 and cov5 until edge_backtest_union.py's ("The back-test
# belongs to model U"); seen since, so any script here may run on them
SEEN_REAL_SETS = ("realset", "realset2", "realset3", "realset4", "realset5", "realset6", "realset7")
SEEN_HELD_OUT = ("cov4", "cov5", "cov6", "cov7")
# sets a round measures once, with --held-out, after writing down its rule: none is reserved for
# these scripts now (the next round writes down a new simulator set and builds a new real set first)
HELD_OUT_SETS: tuple = ()
ERRORS = ("before", "oracle_mean", "halves_mean", "halves_mean_counted", "oracle_mean_no_draw_spread")

BANDS = ((1e-3, 1e-2), (1e-2, 1e-1), (1e-1, 1.0))
COUNTED = ((1, 1), (2, 4), (5, 19), (20, None))     # sampled counts c of the positives the sample does count


def band_ratios(obs, mu, depth, bands=BANDS) -> list:
    """[(positives, sum obs / sum mu)] per band of ``depth``; NaN where a band has no expectation."""
    out = []
    for lo, hi in bands:
        sel = (depth >= lo) & (depth < hi)
        m = float(mu[sel].sum())
        out.append((int(sel.sum()), float(obs[sel].sum()) / m if m > 0 else float("nan")))
    return out


def band_factors(zero, depth, bands, ratios) -> np.ndarray:
    """Per positive: its band's ratio where ``zero`` (the sample counts nothing above it) and its
    model depth lies in a band, else 1 (also where a band's ratio is not finite)."""
    f = np.ones(depth.shape)
    for (lo, hi), (_, r) in zip(bands, ratios):
        f[zero & (depth >= lo) & (depth < hi)] = r if np.isfinite(r) else 1.0
    return f


def halves_band_factors(ss, est, method: str):
    """(factors, band ratios): the second edge model of :mod:`rscale.core.edge_models` (the one
    home of its rule, which rscale estimate stores since it was built), from the halves of the
    first replicate split, as the benchmark of that rule computed it before it was built."""
    from rscale.core.edge_models import edge_factor, halves_band_ratios
    _, _, _, (a_half, xa), (b_half, xb) = half_counts(ss, est, method)
    sizes = np.diff(est.offsets)
    ratios = halves_band_ratios((xa, a_half.pos_counts, np.repeat(a_half.n_sampled, sizes)),
                                (xb, b_half.pos_counts, np.repeat(b_half.n_sampled, sizes)))
    return edge_factor(point(est), ss.pos_counts, np.repeat(ss.n_sampled, sizes), ratios), ratios


def transfer(ss, est, method: str, n: float, true_count, truth_value: float) -> dict:
    """The halves' and the truth's band ratios for one cell; ``true_count``: each positive's count
    (or expected count) of distractors above it at ``n``; ``truth_value``: the mAP@1000 the errors
    are taken against."""
    sizes = np.diff(est.offsets)
    from rscale.core.subsample import split_halves
    obs, mu, log_d, (a_half, xa), (b_half, xb) = half_counts(ss, est, method)
    x = point(est)
    depth = x * np.repeat(ss.n_sampled, sizes)
    zero = ss.pos_counts == 0
    truth = band_ratios(true_count[zero], x[zero] * n, depth[zero])
    halves = band_ratios(obs, mu, np.exp(log_d))
    # the spread of the true x at one model depth: the negative-binomial shape of each side's counts
    # around its log-linear ratio (edge_calibration's mixture uses the halves' one)
    win = zero & (depth >= DEPTH[0]) & (depth < DEPTH[1])
    k_halves = fit_ratio(obs, mu, log_d, negbin=True)[2]
    # the same at a quarter's scale: half A split in two, one quarter's model against the other's counts
    q_obs, q_mu, q_log_d, _, _ = pair_counts(*split_halves(a_half, seed=QUARTER_SEED), est, method)
    k_quarters = fit_ratio(q_obs, q_mu, q_log_d, negbin=True)[2]
    quarters = band_ratios(q_obs, q_mu, np.exp(q_log_d))
    k_truth = fit_ratio(true_count[win], x[win] * n, np.log(depth[win]), negbin=True)[2]
    none_at_n = [float(np.mean(true_count[zero & (depth >= lo) & (depth < hi)] == 0))
                 if np.any(zero & (depth >= lo) & (depth < hi)) else float("nan") for lo, hi in BANDS]
    # the positives the sample counts: the truth's ratio to the estimate, by sampled count (is the
    # edge's error compensated here?)
    counted, counted_halves = [], []
    for lo, hi in COUNTED:
        sel = (ss.pos_counts >= lo) & ((ss.pos_counts <= hi) if hi is not None else True)
        m = float((x[sel] * n).sum())
        counted.append((int(sel.sum()), float(true_count[sel].sum()) / m if m > 0 else float("nan")))
        # the halves' view of the same: a half's lightly counted positives against the other half's counts
        o = m_h = 0.0
        for xh, own, other in ((xa, a_half, b_half), (xb, b_half, a_half)):
            own_sel = (own.pos_counts >= lo) & ((own.pos_counts <= hi) if hi is not None else True)
            o += float(other.pos_counts[own_sel].sum())
            m_h += float((xh * np.repeat(other.n_sampled, sizes))[own_sel].sum())
        counted_halves.append(o / m_h if m_h > 0 else float("nan"))
    # a mean correction without a spread: the edge positives' draws times their band's ratio, the
    # truth's (an oracle: every band, below 1e-3 and above 1 included) or the halves' (the three bands
    # they measure; 1 elsewhere)
    mode = "expected" if method == "evt-eb" else "plugin"
    draws = est.x[None] if est.draws is None else est.draws.T
    oracle_bands = ((0.0, BANDS[0][0]), *BANDS, (BANDS[-1][1], np.inf))
    oracle_r = band_ratios(true_count[zero], x[zero] * n, depth[zero], oracle_bands)

    def scaled(bands, ratios, by_count=(), stack=draws):
        f = band_factors(zero, depth, bands, ratios)
        for (lo, hi), r in by_count:          # lightly counted positives, by sampled count
            f[(ss.pos_counts >= lo) & (ss.pos_counts <= hi)] = r if np.isfinite(r) else 1.0
        return mean_ap(stack * f[None], est.offsets, n, mode) - truth_value
    # the same oracle with the edge positives' posterior draws collapsed to their mean: how much of
    # what the exact band means leave is the spread of the estimate's own draws
    collapsed = np.where(zero[None], x[None], draws)
    light = list(zip(COUNTED[:2], counted_halves[:2]))       # c = 1 and c = 2-4, where the tail model sets x
    errors = {"before": mean_ap(draws, est.offsets, n, mode) - truth_value,
              "oracle_mean": scaled(oracle_bands, oracle_r), "halves_mean": scaled(BANDS, halves),
              "halves_mean_counted": scaled(BANDS, halves, light),
              "oracle_mean_no_draw_spread": scaled(oracle_bands, oracle_r, stack=collapsed)}
    return {"halves": halves, "truth": truth, "none_at_n": none_at_n, "k_halves": k_halves, "k_truth": k_truth,
            "quarters": quarters, "k_quarters": k_quarters,
            "counted": counted, "counted_halves": counted_halves, "errors": errors, "oracle_ratios": oracle_r,
            "zero_positives": int(zero.sum()), "zero_below_1e-3": float(np.mean(depth[zero] < BANDS[0][0]))}


def cells(which: str, method: str, fractions, draws: int, pool: float, k: int, data: Path | None = None):
    from rscale.core.estimators.methods import estimate
    from rscale.store.sample_stats_file import read_sample_stats
    import accuracy_table as T
    if which in SEEN_REAL_SETS:
        data = data or Path(__file__).parent / which / "data"
        truth = read_sample_stats(data / "truth.sample_stats.parquet")
        for d in T.real_draws(which, fractions, draws, data=data):
            ss = read_sample_stats(d.sample)
            assert np.array_equal(ss.pos_ids, truth.pos_ids)
            yield f"draw {d.draw}", d.fraction, transfer(ss, estimate(ss, method), method, d.n,
                                                         truth.pos_counts.astype(np.float64), d.truth)
        return
    import accuracy
    from rscale import sim
    from rscale.sim.benchmark import SimSpec
    from interval_carry import HELD_OUT
    scenarios, offset = HELD_OUT[which] if which in HELD_OUT else accuracy.SETS[which]
    for name, family, hl, nq in scenarios:
        bench = sim.simulate(SimSpec(name=name, family=family, n_queries=nq, hardness=hl), seed=7 + offset)
        for f in fractions:
            s = int(f * pool)
            ss = sim.sample(bench, s, k=min(k, s), seed=7 + offset)
            # one pool's counts, as a real set's truth is: the sample's own plus the rest of the pool's
            # (Poisson, mean x (N - S)); a count drawn apart from the sample would inflate the truth's
            # ratio of the positives the sample counts nothing above by N / (N - S)
            rest = np.random.default_rng(offset).poisson(bench.pos_x * (pool - s))
            counts = (ss.pos_counts + rest).astype(np.float64)
            est = estimate(ss, method)
            law = mean_ap(bench.pos_x[None], est.offsets, pool, "expected" if method == "evt-eb" else "plugin")
            yield name, f, transfer(ss, est, method, pool, counts, law)


def check_set(which: str, held_out: bool) -> None:
    """Stop (one line) unless ``which`` is seen data, or ``held_out`` and a set reserved for these
    scripts' next single measurement (:data:`HELD_OUT_SETS`)."""
    from bias_by_depth import DESIGN_SETS
    seen_sim = (*DESIGN_SETS, *SEEN_HELD_OUT)
    if which not in seen_sim and which not in SEEN_REAL_SETS and not (held_out and which in HELD_OUT_SETS):
        raise SystemExit(f"--set {which}: a seen simulator set ({', '.join(seen_sim)}) or a seen real set "
                         f"({', '.join(SEEN_REAL_SETS)}); a held-out set is measured once, with --held-out, by "
                         "the round that wrote down its rule (none is reserved for these scripts now)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--set", dest="which", required=True)
    ap.add_argument("--method", default="evt-eb")
    ap.add_argument("--fractions", default="0.01,0.05")
    ap.add_argument("--draws", type=int, default=None, help="real sets: the first DRAWS draws per fraction (default all)")
    ap.add_argument("--pool", type=float, default=N_SIM, help="N of the simulator cells")
    ap.add_argument("--k", type=int, default=4000, help="top scores kept per query (simulator)")
    ap.add_argument("--data", default=None,
                    help="real sets: a derivative's data folder instead of the committed one (a seen set's build "
                         "with --pool-cut, for instance)")
    ap.add_argument("--held-out", action="store_true",
                    help=f"allow {' and '.join(HELD_OUT_SETS)}: the single measurement written down before it")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    check_set(a.which, a.held_out)
    fractions = [float(x) for x in a.fractions.split(",")]
    rows = []
    bands = " | ".join(f"[{lo:g}, {hi:g}): halves / truth (n) / none at N" for lo, hi in BANDS)
    cnt = " | ".join(f"c {lo}{'+' if hi is None else '' if hi == lo else f'-{hi}'}: halves / truth (n)" for lo, hi in COUNTED)
    print(f"| set | cell | S/N | {bands} | c = 0 below 1e-3 | k quarters / halves / truth | {cnt} "
          "| error " + " / ".join(ERRORS) + " |")
    print("|---|---|---|" + "---|" * (len(BANDS) + 3 + len(COUNTED)))
    for cell, f, r in cells(a.which, a.method, fractions, a.draws, a.pool, a.k, Path(a.data) if a.data else None):
        rows.append({"set": a.which, "cell": cell, "fraction": f, **r})
        parts = [f"{h[1]:.2f} / {t[1]:.2f} ({t[0]}) / {z:.2f}" for h, t, z in zip(r["halves"], r["truth"], r["none_at_n"])]
        ks = f"{r['k_quarters']:.2f} / {r['k_halves']:.2f} / {r['k_truth']:.2f}"
        print(f"| {a.which} | {cell} | {f:g} | " + " | ".join(parts) + f" | {r['zero_below_1e-3']:.2f} | {ks} | "
              + " | ".join(f"{h:.2f} / {v:.2f} ({m})" for (m, v), h in zip(r["counted"], r["counted_halves"])) + " | "
              + " / ".join(f"{r['errors'][e]:+.4f}" for e in ERRORS) + " |", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
