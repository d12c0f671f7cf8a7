"""A prior on the level carry's curvature b shared across cells, tried on the design rows of
benchmarks/backtest_handicap.py (docs/benchmarks.md, "A shared prior on the level carry's
curvature"). Design data only: nothing here was run on cov3 or the real sets.

The level carry (rscale.core.backtest.carry_level, rule lvl2w of backtest_handicap_rules.py)
regresses every share's increment over its own gallery on u, u^2 and u w through 0 (u = log
factor, w = log share count) and extrapolates to U = log(N / S) at w = 0. Its factors reach
u = log 4 at most, so the curvature b is carried to U^2 (21 at 1%, 9 at 5%) with the standard
error of a 44-point fit: that is where its width comes from.

The curvature is a shape error of the tail model, the same kind in every cell, so the cells can
share it. Rules:

- lvl2w:  the shipped candidate, b from the cell alone.
- eb:     b ~ N(mu, tau^2) learnt from the *other* cells (leave one cell out: the cell scored never
          informs its own prior), mu and tau^2 by the DerSimonian-Laird moments of the other
          cells' own b estimates and their standard errors; the cell's fit is the OLS with the
          prior as one pseudo-observation (weight s^2 / tau^2, s the cell's residual sd), band
          the t band of one new increment at n - 2 dof (b no longer costs a degree of freedom).
- ebf:    the same with the prior learnt from the other cells *of the same fraction* only
          (the curvature's size may differ between 1% and 5%).
- pool:   b fixed at mu (tau = 0: full pooling), the limiting case.

Run: PYTHONPATH=src .venv/bin/python benchmarks/backtest_curvature_prior.py benchmarks/backtest_handicap_design.jsonl
"""

from __future__ import annotations

import sys

import numpy as np
from scipy import stats

from backtest_handicap_rules import increments, interval as union_interval, load, ols_band


def design(r):
    u, w, d = increments(r)
    x = np.c_[u, u * u, u * w]
    big_u = np.log(1.0 / r["fraction"])
    return x, d, np.array([big_u, big_u * big_u, 0.0])


def own_fit(r):
    """(b, se(b), residual sd) of the cell's own lvl2w fit."""
    x, d, _ = design(r)
    beta = np.linalg.lstsq(x, d, rcond=None)[0]
    dof = len(d) - x.shape[1]
    s = np.sqrt(np.sum((d - x @ beta) ** 2) / dof)
    cov = s * s * np.linalg.pinv(x.T @ x)
    return float(beta[1]), float(np.sqrt(cov[1, 1])), float(s)


def dersimonian_laird(b, se):
    b, v = np.asarray(b), np.asarray(se) ** 2
    w = 1.0 / v
    mu_fixed = np.sum(w * b) / np.sum(w)
    q = np.sum(w * (b - mu_fixed) ** 2)
    tau2 = max(0.0, (q - (len(b) - 1)) / (np.sum(w) - np.sum(w * w) / np.sum(w)))
    ws = 1.0 / (v + tau2)
    return float(np.sum(ws * b) / np.sum(ws)), float(tau2)


def prior_band(r, mu, tau2, level=0.95):
    """e_11 + the t band of one new increment at U, with b ~ N(mu, tau2) as a pseudo-observation."""
    x, d, xf = design(r)
    _, _, s = own_fit(r)
    e11 = r["errors"]["1,1"][0]
    if tau2 <= 0:  # full pooling: b fixed at mu, a and c fitted to what it leaves
        lo, hi = ols_band(x[:, [0, 2]], d - mu * x[:, 1], xf[[0, 2]], level)
        return e11 + mu * xf[1] + lo, e11 + mu * xf[1] + hi
    k = s / np.sqrt(tau2)
    xa = np.vstack([x, [0.0, k, 0.0]])
    ya = np.r_[d, k * mu]
    beta = np.linalg.lstsq(xa, ya, rcond=None)[0]
    dof = len(d) - 2
    s2 = np.sqrt(np.sum((d - x @ beta) ** 2) / dof)
    point = float(xf @ beta)
    half = stats.t.ppf(0.5 + level / 2, dof) * s2 * np.sqrt(1 + xf @ np.linalg.pinv(xa.T @ xa) @ xf)
    return e11 + point - half, e11 + point + half


def intervals(rows, rule):
    fits = [own_fit(r) for r in rows]
    out = []
    for i, r in enumerate(rows):
        if rule == "lvl2w":
            out.append(union_interval(r, "lvl2w"))
            continue
        others = [j for j in range(len(rows)) if j != i
                  and (rule != "ebf" or rows[j]["fraction"] == r["fraction"])]
        mu, tau2 = dersimonian_laird([fits[j][0] for j in others], [fits[j][1] for j in others])
        lo, hi = prior_band(r, mu, 0.0 if rule == "pool" else tau2)
        v, h = r["v"], r["half"]
        out.append((min(v, v - hi) - h, max(v, v - lo) + h))
    return out


RULES = ["lvl2w", "eb", "ebf", "pool"]


def main(argv=None):
    rows = load(argv if argv is not None else sys.argv[1:])
    print(f"{len(rows)} cells")
    print("| cell | error | own b (se) | " + " | ".join(RULES) + " |")
    print("|---|---|---|" + "---|" * len(RULES))
    ivs = {rule: intervals(rows, rule) for rule in RULES}
    for i, r in enumerate(rows):
        b, se, _ = own_fit(r)
        cells = []
        for rule in RULES:
            lo, hi = ivs[rule][i]
            mark = "" if lo <= r["truth"] <= hi else " miss"
            cells.append(f"{hi - lo:.3f}{mark}")
        print(f"| {r['set']} {r['scenario']} {r['fraction']:.0%} | {r['v'] - r['truth']:+.4f} | "
              f"{b:+.5f} ({se:.5f}) | " + " | ".join(cells) + " |")
    print()
    print("| rule | covered | mean width | 1% width | 5% width |")
    print("|---|---|---|---|---|")
    for rule in RULES:
        iv = ivs[rule]
        cov = sum(lo <= r["truth"] <= hi for r, (lo, hi) in zip(rows, iv))
        wid = np.array([hi - lo for lo, hi in iv])
        fr = np.array([r["fraction"] for r in rows])
        print(f"| {rule} | {cov}/{len(rows)} | {wid.mean():.4f} | {wid[fr == 0.01].mean():.4f} | "
              f"{wid[fr == 0.05].mean():.4f} |")


if __name__ == "__main__":
    main()
