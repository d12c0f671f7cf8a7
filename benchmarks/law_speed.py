"""Speed of the law (rscale.core.law) against a per-query Python loop, side by side.

Targets (issue 2): mAP@k for 10k queries / 60k positives at one N in a few ms; a curve over 50
values of N in well under a second. Run: .venv/bin/python benchmarks/law_speed.py
"""

from __future__ import annotations

import platform

import numpy as np
from _timing import best_of

from rscale.core import law


def loop_map(x_groups, n, k):
    vals = []
    for xs in x_groups:
        r = np.arange(1, xs.size + 1) + n * xs
        vals.append(np.sum(np.where(r <= k, np.arange(1, xs.size + 1) / r, 0.0)) / min(k, xs.size))
    return float(np.mean(vals))


def main():
    rng = np.random.default_rng(0)
    q = 10_000
    sizes = rng.multinomial(60_000 - q, np.full(q, 1 / q)) + 1
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    x = np.exp(rng.uniform(np.log(1e-12), 0.0, sizes.sum()))
    t_build, _ = best_of(lambda: law.Hardness.from_flat(x, offsets))
    h = law.Hardness.from_flat(x, offsets)
    groups = [h.x[a:b] for a, b in zip(offsets[:-1], offsets[1:])]
    t_plugin, _ = best_of(lambda: law.map_at_k(h, 1e8, 1000))
    t_loop, _ = best_of(lambda: loop_map(groups, 1e8, 1000), repeat=2)
    ns = np.logspace(5, 9, 50)
    t_curve, _ = best_of(lambda: law.metric_curve(h, "AP", ns, 1000), repeat=3)
    t_expected, _ = best_of(lambda: law.map_at_k(h, 1e8, 1000, "expected"), repeat=3)
    assert abs(law.map_at_k(h, 1e8, 1000) - loop_map(groups, 1e8, 1000)) < 1e-12
    print(f"machine: {platform.machine()} {platform.processor() or ''} python {platform.python_version()} "
          f"numpy {np.__version__}")
    print(f"{q} queries, {sizes.sum()} positives")
    print(f"Hardness.from_flat (sort, once)     {t_build * 1e3:8.2f} ms")
    print(f"mAP@1000 at N=1e8, plugin           {t_plugin * 1e3:8.2f} ms")
    print(f"  same, per-query Python loop       {t_loop * 1e3:8.2f} ms  (vectorised is {t_loop / t_plugin:.0f}x faster)")
    print(f"curve over 50 N, plugin             {t_curve * 1e3:8.2f} ms")
    print(f"mAP@1000 at N=1e8, expected         {t_expected * 1e3:8.2f} ms  ({t_expected / t_plugin:.0f}x the plugin)")


if __name__ == "__main__":
    main()
