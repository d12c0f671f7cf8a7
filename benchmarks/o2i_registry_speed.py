"""Cost of registering O2I results and reading them back, at the default run's size and the paper's.

A synthetic `rscale o2i run` output folder (the run's own table writer, random values of the right
shapes: 5 distances, 20 ordered pairs, conditions baseline / gp / box_crop / alpha_qe, canvases
of 6 sizes) with O objects and B backbones is registered into a fresh registry, registered again
(a no-op), rendered by `rscale report`'s O2I section and verified. Side by side: reading the
run's tables alone (the floor every registration pays: it checks and slices them).

Run: .venv/bin/python benchmarks/o2i_registry_speed.py [--objects 200 --backbones 1] [--objects 3000 --backbones 3]
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import numpy as np


def synthetic_run(out: Path, objects: int, backbones: int, seed: int = 0) -> Path:
    from rscale.api.o2i import FORMAT, SCHEMA_VERSION, _write_table

    rng = np.random.default_rng(seed)
    dist = [3.0 * 3.3 ** (k / 4) for k in range(5)]
    pairs = [(q, t) for q in dist for t in dist if q != t]
    names = [f"bb{i}" for i in range(backbones)]
    tables = {n: [] for n in ("cross_distance", "recall_by_ratio", "decomposition", "canvas", "asymmetry",
                              "asymmetry_test", "interventions", "ranks")}
    for b in names:
        for q, t in pairs:
            r1 = float(rng.random())
            tables["cross_distance"].append({"backbone": b, "d_q": q, "d_t": t, "ratio": q / t, "R@1": r1,
                                             "R@5": min(1.0, r1 + 0.1), "R@10": min(1.0, r1 + 0.2), "MRR": r1})
            tables["decomposition"].append({"backbone": b, "d_q": q, "d_t": t, "alpha": r1, "beta": r1,
                                            "gamma": 1 - r1, "delta": 1 - r1, "epsilon": 1.0, "note": ""})
            for iv in ("gp", "box_crop", "alpha_qe"):
                tables["interventions"].append({"backbone": b, "intervention": iv, "status": "measured", "d_q": q,
                                                "d_t": t, "R@1_gain": 0.01, "R@1_p_holm": 0.5, "MRR_gain": 0.0,
                                                "MRR_p_holm": 1.0})
        tables["interventions"].append({"backbone": b, "intervention": "msa", "status": "not applicable"})
        for ratio in sorted({round(q / t, 2) for q, t in pairs}):
            tables["recall_by_ratio"].append({"backbone": b, "ratio": ratio, "R@1": 0.5, "pairs": 2})
        for s in (256, 384, 512, 768, 1024, 1536):
            for u in (256, 384, 512, 768, 1024, 1536):
                tables["canvas"].append({"backbone": b, "size_a": s, "size_b": u, "cosine": 0.9})
        for m in (0.3, 0.6, 0.9, 1.2):
            tables["asymmetry"].append({"backbone": b, "magnitude": m, "mrr_tight_query": 0.5, "mrr_wide_query": 0.4,
                                        "difference": 0.1})
        tables["asymmetry_test"].append({"backbone": b, "mrr_tight_query": 0.5, "mrr_wide_query": 0.4,
                                         "difference": 0.1, "favoured": "tight query", "ci_low": 0.05,
                                         "ci_high": 0.15, "p_value": 1e-3, "test": "paired-t", "objects": objects,
                                         "pairs_each_side": 10})
        ranks = rng.integers(1, 5 * objects, size=(4, len(pairs), objects))
        for c, cond in enumerate(("baseline", "gp", "box_crop", "alpha_qe")):
            for p, (q, t) in enumerate(pairs):
                tables["ranks"] += [{"backbone": b, "condition": cond, "object_id": f"obj{i:05d}", "d_q": q, "d_t": t,
                                     "rank": int(ranks[c, p, i])} for i in range(objects)]
    written = {n: _write_table(rows, out / "tables", n) for n, rows in tables.items()}
    assets = {f"obj{i:05d}": {"digest": "sha256:" + f"{i:064x}", "licence": "Zlib", "source": "synthetic"}
              for i in range(objects)}
    man = {"format": FORMAT, "schema_version": SCHEMA_VERSION, "params": {"objects": objects, "backbones":
           [{"name": b, "model": b, "pooling": "pooled"} for b in names]},
           "renders": {"digest": "sha256:" + "a" * 64, "renderer": "synthetic", "protocol": {}, "count": objects * 5},
           "assets": assets, "tables": written,
           "backbones": {b: {"model_type": "mobilenet_v2", "pooling": "pooled", "resolution": 224,
                             "weights": "sha256:" + "b" * 64, "preprocessing": "resize", "licence": "?"} for b in names}}
    (out / "manifest.json").write_text(json.dumps(man, indent=2, sort_keys=True) + "\n")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, default=200)
    ap.add_argument("--backbones", type=int, default=1)
    args = ap.parse_args()
    import pyarrow
    import pyarrow.parquet as pq

    from rscale.api.o2i import read_manifest
    from rscale.api.o2i_registry import register_o2i, report_lines
    from rscale.store.registry import Registry, clear_caches

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t = time.perf_counter()
        run = synthetic_run(tmp / "run", args.objects, args.backbones)
        t_make = time.perf_counter() - t
        man = read_manifest(run)
        t = time.perf_counter()
        for n, e in man["tables"].items():
            pq.read_table(run / "tables" / e["file"]).to_pylist()
        t_read = time.perf_counter() - t
        t = time.perf_counter()
        res = register_o2i(run, registry=tmp / "reg")
        t_reg = time.perf_counter() - t
        t = time.perf_counter()
        again = register_o2i(run, registry=tmp / "reg")
        t_again = time.perf_counter() - t
        assert all(r["created"] for r in res["results"]) and not any(r["created"] for r in again["results"])
        clear_caches()
        reg = Registry(tmp / "reg")
        t = time.perf_counter()
        lines = report_lines(reg)
        t_report = time.perf_counter() - t
        t = time.perf_counter()
        rep = reg.verify()
        t_verify = time.perf_counter() - t
        assert not rep["corrupt"] and len(rep["checked"]) == 8 * args.backbones
        ranks = man["tables"]["ranks"]["rows"]
        size = sum(p.stat().st_size for p in (tmp / "reg" / "blobs").rglob("*.parquet"))
    print(f"machine: {platform.machine()} {platform.processor() or ''}, python {platform.python_version()}, "
          f"pyarrow {pyarrow.__version__}")
    print(f"{args.objects} objects x {args.backbones} backbone(s): {ranks:,} rank rows, registry blobs {size / 1e6:.2f} MB "
          f"(synthetic folder written in {t_make:.1f} s)")
    print(f"read the run's 8 tables (to rows): {t_read:.2f} s")
    print(f"register (check + slice + store): {t_reg:.2f} s ({t_reg / t_read:.1f}x the read)")
    print(f"register again (no-op):           {t_again:.2f} s")
    print(f"report's O2I section (cold):      {t_report:.2f} s ({len(lines)} lines)")
    print(f"verify:                           {t_verify:.2f} s")


if __name__ == "__main__":
    main()
