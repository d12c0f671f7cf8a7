"""Carry rules that model the share's handicap, compared on the design rows of
benchmarks/backtest_handicap.py (docs/benchmarks.md, "The share's handicap in the back-test").

Each row holds, per (factor f, share size 1/m), every share's signed error (prediction minus
the exact value of its target gallery), u = log f, w = log m. Rules give a band [e_lo, e_hi] for
the error at U = log(N / S) of the full sample (w = 0); the interval is the shipped union
[min(v, v - e_hi) - h, max(v, v - e_lo) + h] (h the replicate half-width).

- old:    every (2, 2) and (4, 4) error on u through 0, t band (the shipped rule, sfit+PI at M = 4)
- lvl:    e(1, 1) (the estimate against its own sample, no fit) plus the increments of the shares
          over their own gallery (e(f, m) - e(1, m), the same share), regressed on u through 0,
          t band of one new increment: e(U) = e_11 + c U
- lvlq:   lvl with the quarters' increments alone (no counts of the halves needed)
- lvlw:   the same with the increment's slope depending on the share size, c + d w, at w = 0
- lvl2:   increments on u and u^2 through 0 (a bias growing faster than log f), at w = 0
- lvl2q:  the quarters' increments alone on u and u^2
- lvl2w:  every increment on u, u^2 and u w through 0, at w = 0 (the chosen candidate,
          rscale.core.backtest.carry_level): a bias growing faster than log f, at a rate that
          depends on the share's excess count; t band of one new increment (n - 3 dof)
- env:    the union of the lvl and old bands (either may be right)
- lvl2w8: lvl2w with the eighths' increments too (rows of ``backtest_handicap.py --eighths``: each
          eighth over the union of itself and the next j - 1 eighths, j = 2..8, u up to log 8 and
          w = log 8), the quarters' as in lvl2w (every union)
- lvl2w8c: the same with every share size in the one balanced design (each share with its next
          j - 1 in cyclic order: 4 quarters x 3 unions, 8 eighths x 7), so no size counts more
          because its unions are combinatorially many
- lvl0:   e(1, 1) plus the stored shares' errors at the sample ((2, 2), (4, 4)) less e(1, 1), on u
          through 0: a level without the shares' own counts (what format 4 already stores), which
          treats each share's own level as the estimate's; t band of one new error

Run: PYTHONPATH=src .venv/bin/python benchmarks/backtest_handicap_rules.py benchmarks/backtest_handicap_design.jsonl [...]
"""

from __future__ import annotations

import json
import sys

import numpy as np
from scipy import stats


def load(paths):
    return [json.loads(x) for p in paths for x in open(p).read().splitlines() if x.startswith("{")]


def points(r, groups):
    u, w, e = [], [], []
    for key, es in r["errors"].items():
        f, m = map(int, key.split(","))
        if (f, m) in groups:
            u += [np.log(f)] * len(es)
            w += [np.log(m)] * len(es)
            e += es
    return np.array(u), np.array(w), np.array(e)


def ols_band(x, e, xf, level=0.95):
    beta = np.linalg.lstsq(x, e, rcond=None)[0]
    dof = len(e) - x.shape[1]
    point = float(xf @ beta)
    if dof < 1:
        return point, point
    s = np.sqrt(np.sum((e - x @ beta) ** 2) / dof)
    half = stats.t.ppf(0.5 + level / 2, dof) * s * np.sqrt(1 + xf @ np.linalg.pinv(x.T @ x) @ xf)
    return point - half, point + half


def _cyclic_index(i, j, g=4):
    """Index, among ``itertools.combinations`` of the other g - 1 shares taken j - 1 at a time (the
    order backtest_handicap.py stores the quarters' unions in), of share i's next j - 1 in cyclic order."""
    import itertools
    others = [o for o in range(g) if o != i]
    rest = tuple(sorted((i + t) % g for t in range(1, j)))
    return list(itertools.combinations(others, j - 1)).index(rest)


def increments(r, halves=True, eighths=False, cyclic=False):
    """(u, w, increment) of every share over its own gallery: the same share's error at its
    union targets minus its error at its own (the halves: half i's error at the sample minus at
    its own half; the quarters: each union containing quarter i minus quarter i's own)."""
    er = r["errors"]
    u, w, d = [], [], []
    if halves:
        h1, h2 = np.array(er["1,2"]), np.array(er["2,2"])
        u += [np.log(2)] * len(h1); w += [np.log(2)] * len(h1); d += list(h2 - h1)
    q1 = np.array(er["1,4"])
    for j, per in ((2, 3), (3, 3), (4, 1)):
        ej = np.array(er[f"{j},4"]).reshape(4, per)
        for i in range(4):
            if cyclic:
                u += [np.log(j)]; w += [np.log(4)]; d += [ej[i][_cyclic_index(i, j)] - q1[i]]
            else:
                u += [np.log(j)] * per; w += [np.log(4)] * per; d += list(ej[i] - q1[i])
    if eighths:
        e1 = np.array(er["1,8"])
        for j in range(2, 9):
            u += [np.log(j)] * 8; w += [np.log(8)] * 8; d += list(np.array(er[f"{j},8"]) - e1)
    return np.array(u), np.array(w), np.array(d)


def band(r, rule):
    big_u = np.log(1.0 / r["fraction"])
    if rule == "old":
        u, _, e = points(r, {(2, 2), (4, 4)})
        return ols_band(u[:, None], e, np.array([big_u]))
    e11 = r["errors"]["1,1"][0]
    if rule == "lvl0":
        u, _, e = points(r, {(2, 2), (4, 4)})
        lo, hi = ols_band(u[:, None], e - e11, np.array([big_u]))
        return e11 + lo, e11 + hi
    u, w, d = increments(r, halves=rule not in ("lvlq", "lvl2q"), eighths=rule.startswith("lvl2w8"),
                         cyclic=rule == "lvl2w8c")
    if rule in ("lvl", "lvlq"):
        lo, hi = ols_band(u[:, None], d, np.array([big_u]))
    elif rule == "lvlw":
        lo, hi = ols_band(np.c_[u, u * w], d, np.array([big_u, 0.0]))
    elif rule in ("lvl2w", "lvl2w8", "lvl2w8c"):
        lo, hi = ols_band(np.c_[u, u * u, u * w], d, np.array([big_u, big_u * big_u, 0.0]))
    elif rule in ("lvl2", "lvl2q"):
        lo, hi = ols_band(np.c_[u, u * u], d, np.array([big_u, big_u * big_u]))
    elif rule == "env":
        a, b = band(r, "old")
        c, dd = band(r, "lvl")
        return min(a, c), max(b, dd)
    else:
        raise ValueError(rule)
    return e11 + lo, e11 + hi


def interval(r, rule):
    v, h = r["v"], r["half"]
    if rule == "none":
        return v - h, v + h
    lo, hi = band(r, rule)
    return min(v, v - hi) - h, max(v, v - lo) + h


RULES = ["none", "old", "lvl", "lvlq", "lvlw", "lvl2", "lvl2q", "lvl2w", "env", "lvl0", "lvl2w8", "lvl2w8c"]


def main(argv=None):
    rows = load(argv if argv is not None else sys.argv[1:])
    groups = list(dict.fromkeys((r["set"], r["method"]) for r in rows))
    print(f"{len(rows)} cells")
    print("| rule | all | " + " | ".join(f"{s} {m}" for s, m in groups) + " |")
    print("|---|---|" + "---|" * len(groups))
    has8 = all("1,8" in r["errors"] for r in rows)
    for rule in (x for x in RULES if has8 or not x.startswith("lvl2w8")):
        def stat(sub):
            iv = [interval(r, rule) for r in sub]
            cov = np.mean([lo <= r["truth"] <= hi for r, (lo, hi) in zip(sub, iv)])
            return f"{cov:.0%} ({len(sub)}), {np.mean([hi - lo for lo, hi in iv]):.3f}"
        per = [stat([r for r in rows if (r["set"], r["method"]) == g]) for g in groups]
        print(f"| {rule} | {stat(rows)} | " + " | ".join(per) + " |")
    if "--cells" in (argv or sys.argv):
        pass
    print()
    print("| set | scenario | S/N | error | old band | lvl band | lvlw band |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        bands = [band(r, x) for x in ("old", "lvl", "lvlw")]
        print(f"| {r['set']} {r['method']} | {r['scenario']} | {r['fraction']:.0%} | {r['v'] - r['truth']:+.3f} | "
              + " | ".join(f"{a:+.3f}..{b:+.3f}" for a, b in bands) + " |")


if __name__ == "__main__":
    main()
