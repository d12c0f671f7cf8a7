"""Calibrating the tail model beyond the sample's edge from complementary halves: an exploration on
design data only (docs/benchmarks.md, "Where the bias lives"); nothing of it is in ``src/``.

The half-sample fits the estimate already makes for its replicates give, for free, a model-free
check of the tail model where the sample has no counts: for a positive that half A sees no
distractor above (c_A = 0), A's estimate x_A predicts the count in the other, independent half B
as x_A S_B; B's actual count c_B is Binomial(S_B, x) with the true x. Pooled over a cell's
positives with model depth d = x_A S_A in [1e-3, 1) (both directions of one split), a negative-
binomial regression c_B ~ NB(mean x_A S_B exp(a + b log d), shape k) gives the rate ratio r(d) of
truth over model at that depth (Poisson: the ratio alone) and, through k, how much the true x of
positives at one model depth varies around it. Applied to the full estimate's positives with no
sampled distractor above (c = 0) at their own model depth (clamped to [1e-3, 1]):

- ``ratio``: every posterior draw times r(d) (the Poisson fit);
- ``mixture``: every draw times r(d) G, G ~ Gamma(k, 1 / k) independent per positive and draw
  (mean 1; the NB fit), since the AP map is convex and a spread of x at one mean changes it;
- ``ratio1`` / ``mixture1``: the same, with no correction below the measured depths (a positive
  whose model depth is under 1e-3 keeps its hardness); ``mixture2k`` / ``mixture1_2k``: the
  spread at the full sample's scale (Gamma shape 2k: half the half's variance of log x);
  ``mixtureF`` / ``mixture1F``: the spread at the full scale from the data, trigamma(k_F) =
  trigamma(k) - v / 2, v the half-model's own noise in log x (half the variance of log x_A -
  log x_B over positives both halves see no distractor above, both in the window).

Printed per cell: the error of mAP@1000 at N = 1e8 before and after each, against the law's value
under the true x on design sets (no gallery noise), against the realised truth on the held-out
sets (cov3: the gallery's mAP; the real sets: the manifest's full-pool truth at N = the pool); the
ratio at d = 1e-3 and at d = 1; k; the MAE per fraction.

Run: PYTHONPATH=src .venv/bin/python benchmarks/edge_calibration.py --set design [--method evt-eb] [--json rows.json]
     PYTHONPATH=src .venv/bin/python benchmarks/edge_calibration.py --set design --pool 20000 --k 1000   # shallow samples
     PYTHONPATH=src .venv/bin/python benchmarks/edge_calibration.py --set cov3 --held-out     # once, written down first
     PYTHONPATH=src .venv/bin/python benchmarks/edge_calibration.py --set realset --held-out  # and realset2, realset3
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bias_by_depth import DESIGN_SETS  # noqa: E402  (the seen simulator sets)
from bias_by_depth import mean_metric as mean_ap  # noqa: E402  (mean AP@1000 over hardness draws)

DEPTH = (1e-3, 1.0)        # model depths x S the halves calibrate (c = 0 below 1e-3 carries almost no count)
N_SIM = 1e8
VARIANTS = ("before", "ratio", "mixture", "ratio1", "mixture1", "mixture2k", "mixture1_2k", "mixtureF", "mixture1F")


def point(est):
    return est.x if est.draws is None else est.draws.mean(axis=1)


def fit_ratio(obs, mu, log_d, negbin: bool):
    """(a, b, k): obs ~ Poisson or NegBin(mean mu exp(a + b log_d), shape k) by maximum likelihood
    (k = inf for Poisson)."""
    from scipy.optimize import minimize
    from scipy.special import gammaln

    def nll(p):
        m = np.maximum(mu * np.exp(p[0] + p[1] * log_d), 1e-300)
        if not negbin:
            return float(np.sum(m - obs * np.log(m)))
        k = np.exp(p[2])
        return float(-np.sum(gammaln(obs + k) - gammaln(k) + k * np.log(k / (k + m)) + obs * np.log(m / (k + m))))
    r = minimize(nll, [0.0, 0.0, 0.0] if negbin else [0.0, 0.0], method="Nelder-Mead",
                 options={"xatol": 1e-6, "fatol": 1e-9, "maxiter": 4000})
    return float(r.x[0]), float(r.x[1]), float(np.exp(r.x[2])) if negbin else float("inf")


def full_scale_shape(k: float, v: float) -> float:
    """The Gamma shape k_F with trigamma(k_F) = trigamma(k) - v / 2 (module docstring, "F"); a very
    large shape (no spread) where that is not positive."""
    from scipy.optimize import brentq
    from scipy.special import polygamma
    target = float(polygamma(1, min(k, 1e8))) - v / 2.0
    if target <= 1e-8:
        return 1e8
    return float(np.exp(brentq(lambda t: float(polygamma(1, np.exp(t))) - target, -20.0, 20.0)))


def half_counts(ss, est, method: str):
    """What the halves measure (module docstring): for both directions of the first of 8 splits, the
    other half's counts ``obs``, their expectation under the own half's model ``mu`` and the model
    depth ``log_d``, for the positives the own half counts nothing above, in the window DEPTH; and
    (half, its point hardness) for the two halves."""
    from rscale.core.replicates import SEED as REP_SEED
    from rscale.core.replicates import replicate_halves
    a_half, b_half = replicate_halves(ss, 0, splits=8, seed=REP_SEED)
    return pair_counts(a_half, b_half, est, method)


def pair_counts(a_half, b_half, est, method: str):
    """:func:`half_counts` for any two disjoint parts of a sample (``est``: the full estimate, for
    its parameters and positive offsets)."""
    from rscale.core.estimators.methods import estimate, stored_params
    kwargs = stored_params(method, est.params)
    sizes = np.diff(est.offsets)
    xa, xb = point(estimate(a_half, method, **kwargs)), point(estimate(b_half, method, **kwargs))
    obs, mu, log_d = [], [], []
    for x, own, other in ((xa, a_half, b_half), (xb, b_half, a_half)):
        d = x * np.repeat(own.n_sampled, sizes)
        sel = (own.pos_counts == 0) & (d >= DEPTH[0]) & (d < DEPTH[1])
        obs.append(other.pos_counts[sel])
        mu.append(x[sel] * np.repeat(other.n_sampled, sizes)[sel])
        log_d.append(np.log(d[sel]))
    obs, mu, log_d = (np.concatenate(v).astype(np.float64) for v in (obs, mu, log_d))
    return obs, mu, log_d, (a_half, xa), (b_half, xb)


def calibrated(ss, est, method: str, n: float, mode: str) -> dict:
    """The estimate's mean mAP@1000 at ``n`` before and after each calibration (module docstring),
    with the fitted r(d) and k."""
    sizes = np.diff(est.offsets)
    obs, mu, log_d, (a_half, xa), (b_half, xb) = half_counts(ss, est, method)
    a, b, _ = fit_ratio(obs, mu, log_d, negbin=False)
    a2, b2, k = fit_ratio(obs, mu, log_d, negbin=True)
    # the spread at the full sample's scale, from the data ("F"): the NB's spread of log x around the
    # half's model, trigamma(k), is the half-model's own noise plus the truth's spread at one model
    # depth; the two halves' estimates of one positive both beyond their edges differ by two such
    # noises, var(log x_A - log x_B) = 2 v; the full fit has half the noise: trigamma(k_F) = trigamma(k) - v / 2
    da, db = xa * np.repeat(a_half.n_sampled, sizes), xb * np.repeat(b_half.n_sampled, sizes)
    both = ((a_half.pos_counts == 0) & (b_half.pos_counts == 0) & (da >= DEPTH[0]) & (da < DEPTH[1])
            & (db >= DEPTH[0]) & (db < DEPTH[1]))
    v = float(np.var(np.log(xa[both]) - np.log(xb[both])) / 2.0) if both.sum() > 1 else 0.0
    k_full = full_scale_shape(k, v)
    draws = est.x[None] if est.draws is None else est.draws.T
    depth = point(est) * np.repeat(ss.n_sampled, sizes)
    d_full = np.log(np.clip(depth, *DEPTH))
    inside = depth >= DEPTH[0]                 # the depths the halves measured (the variants' "1": none below)
    zero = ss.pos_counts == 0
    before = mean_ap(draws, est.offsets, n, mode)
    many = np.tile(draws, (int(np.ceil(16 / draws.shape[0])), 1))     # every draw equally often, >= 16 rows

    def ratio_of(where, a_, b_):
        return np.where(zero & where, np.exp(a_ + b_ * d_full), 1.0)[None]

    def spread(where, k_):
        return np.where((zero & where)[None], np.random.default_rng(0).gamma(k_, 1.0 / k_, size=many.shape), 1.0)
    out = {"before": before,
           "ratio": mean_ap(draws * ratio_of(True, a, b), est.offsets, n, mode),
           "mixture": mean_ap(many * ratio_of(True, a2, b2) * spread(True, k), est.offsets, n, mode),
           # variants of the next round's design (docs/benchmarks.md): no correction below the measured
           # depths ("1"), the dispersion at the full sample's scale (a variance of log x half the half's: 2k)
           "ratio1": mean_ap(draws * ratio_of(inside, a, b), est.offsets, n, mode),
           "mixture1": mean_ap(many * ratio_of(inside, a2, b2) * spread(inside, k), est.offsets, n, mode),
           "mixture2k": mean_ap(many * ratio_of(True, a2, b2) * spread(True, 2 * k), est.offsets, n, mode),
           "mixture1_2k": mean_ap(many * ratio_of(inside, a2, b2) * spread(inside, 2 * k), est.offsets, n, mode),
           "mixtureF": mean_ap(many * ratio_of(True, a2, b2) * spread(True, k_full), est.offsets, n, mode),
           "mixture1F": mean_ap(many * ratio_of(inside, a2, b2) * spread(inside, k_full), est.offsets, n, mode)}
    return {**out, "r_at_1e-3": float(np.exp(a + b * np.log(DEPTH[0]))),
            "r_at_1": float(np.exp(a)), "k": k, "k_full": k_full, "half_noise": v, "points": int(obs.size), "counts": float(obs.sum())}


def sim_cell(spec, f, seed, method, mode, truth: str, n: float = N_SIM, k: int = 4000) -> dict:
    """One simulator cell; errors against the law's value under the true x (``truth="law"``, no
    gallery noise: the design rows) or the realised mAP of the gallery (``"realised"``, as the
    accuracy table scores)."""
    from rscale import sim
    from rscale.core.estimators.methods import estimate
    bench = sim.simulate(spec, seed=seed)
    s = int(f * n)
    ss = sim.sample(bench, s, k=min(k, s), seed=seed)
    est = estimate(ss, method)
    r = calibrated(ss, est, method, n, mode)
    t = (mean_ap(bench.pos_x[None], est.offsets, n, mode) if truth == "law"
         else float(sim.truth(bench, ss, n, "AP", 1000, seed=seed).mean()))
    return {**r, **{key: r[key] - t for key in VARIANTS}, "truth": t}


def real_cells(set_name: str, method: str, mode: str):
    """Every committed draw of a real set: its sample stats, the pool as N, the manifest's truth."""
    import accuracy_table as T
    from rscale.core.estimators.methods import estimate
    from rscale.store.sample_stats_file import read_sample_stats
    for d in T.real_draws(set_name, None, None):
        ss = read_sample_stats(d.sample)
        r = calibrated(ss, estimate(ss, method), method, float(d.n), mode)
        yield d, {**r, **{key: r[key] - d.truth for key in VARIANTS}, "truth": d.truth}


def main(argv=None):
    import accuracy
    from interval_carry import HELD_OUT
    from rscale.sim.benchmark import SimSpec
    ap = argparse.ArgumentParser()
    ap.add_argument("--set", dest="which", default="design")
    ap.add_argument("--method", default="evt-eb")
    ap.add_argument("--fractions", default="0.01,0.05")
    ap.add_argument("--pool", type=float, default=N_SIM, help="N of the simulator cells (a small pool: shallow samples)")
    ap.add_argument("--k", type=int, default=4000, help="top scores kept per query")
    ap.add_argument("--held-out", action="store_true",
                    help="allow cov3 and the real sets: the single measurement written down before it")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    import accuracy_table as T
    held = {"cov3", *T.REAL_SETS}
    if a.which not in DESIGN_SETS and not (a.held_out and a.which in held):
        raise SystemExit(f"--set {a.which}: not design data (held-out sets need --held-out)")
    mode = "expected" if a.method == "evt-eb" else "plugin"
    rows = []
    print("| set | scenario | S/N | r at d = 1e-3 | r at d = 1 | k | error " + " | ".join(VARIANTS) + " |")
    print("|---|---|---|---|---|---|" + "---|" * len(VARIANTS))

    def show(r):
        rows.append(r)
        print(f"| {r['set']} | {r['scenario']} | {r['fraction']:g} | {r['r_at_1e-3']:.2f} | {r['r_at_1']:.2f} | {r['k']:.2f} | "
              + " | ".join(f"{r[v]:+.4f}" for v in VARIANTS) + " |", flush=True)
    if a.which in T.REAL_SETS:
        for d, r in real_cells(a.which, a.method, mode):
            show({**r, "set": a.which, "scenario": f"draw {d.draw}", "fraction": d.fraction})
    else:
        scenarios, offset = HELD_OUT["cov3"] if a.which == "cov3" else accuracy.SETS[a.which]
        for name, family, hl, nq in scenarios:
            spec = SimSpec(name=name, family=family, n_queries=nq, hardness=hl)
            for f in (float(x) for x in a.fractions.split(",")):
                r = sim_cell(spec, f, 7 + offset, a.method, mode, "realised" if a.which == "cov3" else "law", a.pool, a.k)
                show({**r, "set": a.which, "scenario": name, "fraction": f})
    for f in sorted({r["fraction"] for r in rows}):
        rs = [r for r in rows if r["fraction"] == f]
        print(f"MAE at {f:g} ({len(rs)} cells): " + ", ".join(f"{v} {np.mean([abs(r[v]) for r in rs]):.4f}" for v in VARIANTS))
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
