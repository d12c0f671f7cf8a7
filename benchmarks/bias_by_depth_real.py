"""Where the estimator's error on the real sets comes from, by how deep each positive sits
relative to the sample: benchmarks/bias_by_depth.py's question asked of the seen real-embedding
sets, whose committed truth holds every positive's full-pool count K (docs/benchmarks.md, "Where
the real sets' error lives").

A real set has no "true hardness", only the realised one: x = K / N with N the pool. Per cell (one
draw of one fraction, the estimator fitted once, no replicates) the positives are split by depth
x S = K S / N (the number of the draw's distractors expected above them) into the bands of
bias_by_depth.py, and each band's estimated hardness (every posterior draw) is set to K / N in
turn; the table gives how far the predicted mAP@1000 at N moves (what the band carries) and the
band's median log10(estimate / (K / N)) over its positives with K > 0 (those with K = 0 have no
finite ratio; their count is printed). As there, the bands interact through each query's AP. The
error is printed against the law's value under x = K / N in the same mode (``law``: what the
realised hardness predicts, which in expected mode spreads each count K into Binomial(N, K / N))
and against the realised truth (``truth``, the manifest's mAP@1000).

A second table splits the positives the draw counts nothing above (c = 0) by how far above the
draw's top score they sit, in units of the spread of its top ten scores (g = (score - top_1) /
(top_1 - top_10)), and compares, per bin, the full-pool counts K with the estimate's expected
counts N x_hat: the share with K = 0, the means and the medians. A tail model matched in the mean
gives mean N x_hat = mean K in every bin; over-dispersed counts (many zeros and a few large K at
the same x_hat) show as a K = 0 share above the model's e^(-N x_hat) at equal means.

With ``--halves``, a third table asks whether the sample itself sees the same: the draw's first
replicate split (``rscale.core.replicates.replicate_halves``), evt-eb fitted on each half, and for
the positives one half counts nothing above, the other half's counts against the first half's
model, in both directions, by the same bins of g (computed within the fitted half).

Seen sets only (edge_transfer.SEEN_REAL_SETS): a held-out set is refused.

Run: PYTHONPATH=src .venv/bin/python benchmarks/bias_by_depth_real.py [--sets realset,realset3]
     [--fractions 0.01,0.05] [--draw 0] [--halves] [-p xi_max=0] [--json rows.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bias_by_depth import BANDS, add_estimator_options, band_moves, estimator_options, mean_metric  # noqa: E402
from edge_transfer import SEEN_REAL_SETS  # noqa: E402

GAP_BINS = ((-np.inf, 0.5), (0.5, 1.0), (1.0, 2.0), (2.0, 4.0), (4.0, np.inf))   # g, in top-10 spreads


def by_gap(ss, x_hat, k_full, n: float) -> list:
    """Per bin of g (module docstring) of the positives with sampled count 0: positives, the share
    with K = 0, mean and median K, mean and median N x_hat, and the model's own P(K = 0),
    the mean of exp(-N x_hat)."""
    pq = ss.positive_query()
    top = ss.top_scores[pq, 0]
    spread = np.maximum(top - ss.top_scores[pq, min(9, ss.top_scores.shape[1] - 1)], 1e-12)
    g = (ss.pos_scores - top) / spread
    beyond = ss.pos_counts == 0
    out = []
    for lo, hi in GAP_BINS:
        m = beyond & (g >= lo) & (g < hi)
        if not m.any():
            continue
        lam = n * x_hat[m]
        out.append({"gap": [lo, hi], "positives": int(m.sum()), "k_zero_share": float(np.mean(k_full[m] == 0)),
                    "model_k_zero_share": float(np.mean(np.exp(-lam))), "mean_k": float(k_full[m].mean()),
                    "mean_model_k": float(lam.mean()), "median_k": float(np.median(k_full[m])),
                    "median_model_k": float(np.median(lam))})
    return out


def halves_by_gap(ss, method: str = "evt-eb", params: dict | None = None) -> list:
    """The third table's bins (module docstring) for one draw: per bin, positives, the other
    half's K = 0 share against the model's mean e^(-mu), and its mean count against mu."""
    from rscale.core.estimators.methods import estimate
    from rscale.core.replicates import replicate_halves
    a, b = replicate_halves(ss, 0, splits=8)
    g, mu, other = [], [], []
    for x, y in ((a, b), (b, a)):
        est = estimate(x, method, **(params or {}))
        x_hat = est.x if est.draws is None else est.draws.mean(axis=1)
        pq = x.positive_query()
        top = x.top_scores[pq, 0]
        spread = np.maximum(top - x.top_scores[pq, min(9, x.top_scores.shape[1] - 1)], 1e-12)
        m = x.pos_counts == 0
        g.append(((x.pos_scores - top) / spread)[m])
        mu.append((x_hat * y.n_sampled[pq])[m])
        other.append(y.pos_counts[m])
    g, mu, other = (np.concatenate(v) for v in (g, mu, other))
    out = []
    for lo, hi in GAP_BINS:
        m = (g >= lo) & (g < hi)
        if m.any():
            out.append({"gap": [lo, hi], "positives": int(m.sum()), "k_zero_share": float(np.mean(other[m] == 0)),
                        "model_k_zero_share": float(np.mean(np.exp(-mu[m]))), "mean_k": float(other[m].mean()),
                        "mean_model_k": float(mu[m].mean())})
    return out


def real_cell(name: str, fraction: float, draw: int = 0, method: str = "evt-eb", mode: str = "expected",
              root: Path = HERE, params: dict | None = None) -> dict:
    from rscale.core.estimators.methods import estimate
    from rscale.store.sample_stats_file import read_sample_stats
    data = root / name / "data"
    man = json.loads((data / "manifest.json").read_text())
    n = float(man["pool"])
    truth = read_sample_stats(data / "truth.sample_stats.parquet")
    ss = read_sample_stats(data / f"draw-{round(fraction * 100):02d}pct-{draw}.sample_stats.parquet")
    if not np.array_equal(ss.pos_offsets, truth.pos_offsets):
        raise SystemExit(f"{name}: the draw's positives are not the truth's")
    t = time.perf_counter()
    est = estimate(ss, method, **(params or {}))
    secs = time.perf_counter() - t
    x_true = truth.pos_counts / n
    draws = est.x[None] if est.draws is None else est.draws.T            # (D, P)
    s_pos = np.repeat(est.n_sampled, np.diff(est.offsets)).astype(np.float64)
    depth = x_true * s_pos
    pred = mean_metric(draws, est.offsets, n, mode)
    at_k = mean_metric(x_true[None], est.offsets, n, mode)
    x_hat = draws.mean(axis=0)
    bands = []
    for (lo, hi), (sel, moved) in zip(BANDS, band_moves(draws, x_true, est.offsets, depth, n, mode, pred)):
        pos = sel & (x_true > 0)
        ratio = float(np.median(np.log10(np.maximum(x_hat[pos], 1e-300) / x_true[pos]))) if pos.any() else float("nan")
        bands.append({"band": [lo, hi], "positives": int(sel.sum()), "zero_count": int((sel & (x_true == 0)).sum()),
                      "carries": moved, "median_log10_ratio": ratio})
    return {"set": name, "fraction": fraction, "draw": draw, "method": method, "params": params or {}, "n": n, "s": float(est.n_sampled.max()),
            "error_law": pred - at_k, "error_truth": pred - float(man["truth_map_at_1000"]), "pred": pred,
            "bands": bands, "gaps": by_gap(ss, x_hat, truth.pos_counts, n), "fit_seconds": secs}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default=",".join(SEEN_REAL_SETS))
    ap.add_argument("--fractions", default="0.01,0.05")
    ap.add_argument("--draw", type=int, default=0)
    add_estimator_options(ap)
    ap.add_argument("--json", default=None)
    ap.add_argument("--halves", action="store_true", help="also the third table (the draw's own halves)")
    a = ap.parse_args(argv)
    params = estimator_options(a)
    mode = "expected" if a.method == "evt-eb" else "plugin"
    rows = []
    print("| set | S/N | error vs law at K/N | vs truth | " + " | ".join(
        f"x S in [{lo:g}, {hi:g}): n (K = 0), carries, log10 ratio" for lo, hi in BANDS) + " | sum of bands |")
    print("|---|---|---|---|" + "---|" * len(BANDS) + "---|")
    for name in a.sets.split(","):
        if name not in SEEN_REAL_SETS:
            raise SystemExit(f"--sets {name}: not a seen real set ({', '.join(SEEN_REAL_SETS)})")
        for f in (float(x) for x in a.fractions.split(",")):
            r = real_cell(name, f, a.draw, a.method, mode, params=params)
            rows.append(r)
            print(f"| {name} | {f:.0%} | {r['error_law']:+.4f} | {r['error_truth']:+.4f} | "
                  + " | ".join(f"{b['positives']} ({b['zero_count']}), {b['carries']:+.4f}, {b['median_log10_ratio']:+.2f}"
                               for b in r["bands"])
                  + f" | {sum(b['carries'] for b in r['bands']):+.4f} |", flush=True)
    print("\n| set | S/N | g = gap above the top / top-10 spread | positives (c = 0) | K = 0 share: pool, model "
          "| mean K: pool, model | median K: pool, model |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        for b in r["gaps"]:
            lo, hi = b["gap"]
            print(f"| {r['set']} | {r['fraction']:.0%} | [{lo:g}, {hi:g}) | {b['positives']} | {b['k_zero_share']:.2f}, "
                  f"{b['model_k_zero_share']:.2f} | {b['mean_k']:.2f}, {b['mean_model_k']:.2f} | "
                  f"{b['median_k']:.1f}, {b['median_model_k']:.2f} |")
    if a.halves:
        from rscale.store.sample_stats_file import read_sample_stats
        print("\n| set | S/N | g (within the fitted half) | positives (c = 0 in it) | other half's K = 0 share: "
              "observed, model | other half's mean count: observed, model |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            ss = read_sample_stats(HERE / r["set"] / "data" /
                                   f"draw-{round(r['fraction'] * 100):02d}pct-{r['draw']}.sample_stats.parquet")
            r["halves"] = halves_by_gap(ss, r["method"], params)
            for b in r["halves"]:
                lo, hi = b["gap"]
                print(f"| {r['set']} | {r['fraction']:.0%} | [{lo:g}, {hi:g}) | {b['positives']} | "
                      f"{b['k_zero_share']:.2f}, {b['model_k_zero_share']:.2f} | {b['mean_k']:.3f}, {b['mean_model_k']:.3f} |",
                      flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
