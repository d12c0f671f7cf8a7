"""The carry rules compared on design data (docs/benchmarks.md, "Carrying the back-test to the
user's factor"): rows written by benchmarks/backtest_rule.py (--grid 4,8,16: every share's error at
m = 2, 4, 8, 16, the estimate's actual error at N = m S and at N = 1e8, the replicate half-width),
for each rule and cap M (factors <= M used) the benchmark interval
[min(v, v - e_hi) - h, max(v, v - e_lo) + h] and its coverage and mean width per set.

Rules (e(f) and its band [e_lo, e_hi]; u = log m, U = log f):
- log:      e_M U / log M (the rule replaced; no band)
- fit:      least squares of the factor means e_m on u through 0, b U (no band)
- fit+PI:   the same with the t prediction band from the means' residuals (n - 1 dof)
- quad:     least squares a u + b u^2 of the means (a bias growing like log^2 f), no band
- quad+PI:  the same with its t prediction band (n - 2 dof)
- walk+PI:  per-doubling increments of e_m as exchangeable draws, continued to f, t band
- sfit+PI:  least squares of every share's error on u through 0, t prediction band of one new
            error (n - 1 dof): the chosen rule (rscale.core.backtest.carry)
- squad+PI: the same with a u + b u^2

Run: PYTHONPATH=src .venv/bin/python benchmarks/backtest_carry_variants.py benchmarks/backtest_carry_design.jsonl
"""

from __future__ import annotations

import json
import sys

import numpy as np
from scipy import stats


def load(path):
    text = open(path).read()
    if text.lstrip().startswith("["):
        return json.loads(text)
    return [json.loads(x) for x in text.splitlines() if x.startswith("{")]


def means(r, cap):
    return {int(m): e for m, e in r["raw_factor"].items() if int(m) <= cap}


def shares(r, cap):
    u, e = [], []
    for m, es in r["share_errors"].items():
        if int(m) <= cap:
            u += [np.log(int(m))] * len(es)
            e += es
    return np.array(u), np.array(e)


def regress(u, e, big_u, quad, band):
    """(point, half-width) of a least-squares fit through 0 (u, or u and u^2) at U."""
    x = np.c_[u, u * u] if quad and len(set(u)) >= 2 else u[:, None]
    xf = np.array([big_u, big_u * big_u][: x.shape[1]])
    beta = np.linalg.lstsq(x, e, rcond=None)[0]
    point = float(xf @ beta)
    dof = len(e) - x.shape[1]
    if not band or dof < 1:
        return point, 0.0
    s = np.sqrt(np.sum((e - x @ beta) ** 2) / dof)
    return point, stats.t.ppf(0.975, dof) * s * np.sqrt(1 + xf @ np.linalg.inv(x.T @ x) @ xf)


def walk(lad, big_u):
    ms = sorted(lad)
    e = [0.0] + [lad[m] for m in ms]
    u = [0.0] + [np.log(m) for m in ms]
    d = np.diff(e) / np.diff(u)
    n = len(d)
    mu = float(np.mean(d))
    s = float(np.std(d, ddof=1)) if n > 1 else abs(mu)
    k = max(big_u - u[-1], 0.0)
    return e[-1] + k * mu, stats.t.ppf(0.975, max(n - 1, 1)) * np.sqrt(k * s ** 2 + k ** 2 * s ** 2 / n)


def band(r, cap, rule):
    big_u = np.log(1.0 / r["fraction"])
    lad = means(r, cap)
    if rule == "log":
        top = max(lad)
        return (lad[top] * big_u / np.log(top),) * 2
    if rule == "walk+PI":
        p, h = walk(lad, big_u)
    elif rule.startswith("s"):
        p, h = regress(*shares(r, cap), big_u, quad="quad" in rule, band=True)
    else:
        ms = sorted(lad)
        p, h = regress(np.log(ms), np.array([lad[m] for m in ms]), big_u, quad="quad" in rule, band="PI" in rule)
    return p - h, p + h


def interval(r, cap, rule):
    v, h = r["v"], r["half"]
    if not cap:
        return v - h, v + h
    lo, hi = band(r, cap, rule)
    return min(v, v - hi) - h, max(v, v - lo) + h


VARIANTS = [(0, "-"), (4, "log"), (4, "fit+PI"), (4, "sfit+PI"), (4, "squad+PI"), (8, "log"), (8, "quad+PI"),
            (8, "walk+PI"), (16, "log"), (16, "fit"), (16, "fit+PI"), (16, "quad"), (16, "quad+PI"),
            (16, "walk+PI"), (16, "sfit+PI"), (16, "squad+PI")]


def main(argv=None):
    rows = [r for p in (argv if argv is not None else sys.argv[1:]) for r in load(p)]
    sets = list(dict.fromkeys(r.get("set", "design") for r in rows))
    print(f"{len(rows)} cells")
    print("| cap M | rule | all: coverage, width | " + " | ".join(f"{s}" for s in sets) + " |")
    print("|---|---|---|" + "---|" * len(sets))
    for cap, rule in VARIANTS:
        def stat(sub):
            iv = [interval(r, cap, rule) for r in sub]
            cov = np.mean([lo <= r["truth"] <= hi for r, (lo, hi) in zip(sub, iv)])
            return f"{cov:.0%} ({len(sub)}), {np.mean([hi - lo for lo, hi in iv]):.3f}"
        per = [stat([r for r in rows if r.get("set", "design") == s]) for s in sets]
        print(f"| {cap or 'none'} | {rule} | {stat(rows)} | " + " | ".join(per) + " |")


if __name__ == "__main__":
    main()
