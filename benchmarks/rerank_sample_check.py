"""Issue 15's done-when on real descriptors: the reranked metric predicted from a distractor sample
against the exact reranked metric of the full gallery, with the real ImageNet MobileNetV2.

Inputs: the README example's (``python examples/real_backbone_inputs.py -o out/examples``): the
converted MobileNetV2, the photo set (32 queries, 96 positives, 400 distractors) and the stand-in
detector (a randomly initialised OWLv2: no OWLv2 weights ship offline, so proposals are arbitrary
boxes; the check is of the prediction, whatever the reranker's quality).

1. extract the sets (pooled, the checkpoint's processor), score the whole pool (fraction 1.0)
   keeping each query's top K' by id, and score a ``--fraction`` sample at each ``--seeds`` keeping
   the top R = ceil(1.25 K' f) + 2;
2. truth: :func:`rscale.producers.rerank_sample.gallery_top_lists` (the gallery's top K', positives
   included) reranked by ``rscale rerank`` (mAP@K' and R@1 per query, ``rscale.core.metrics``);
3. prediction: ``rerank_sample`` on each sample, then ``api.predict_reranked`` at N = the pool
   (count hardness; the default GPD-smoothed joint tail, and plain counts for comparison).

Run: PYTHONPATH=src python benchmarks/rerank_sample_check.py --examples out/examples -o out/bench/rerank_sample
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from pathlib import Path

import numpy as np


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=Path, default=Path("out/examples"))
    ap.add_argument("-o", "--out", type=Path, default=Path("out/bench/rerank_sample"))
    ap.add_argument("--depth", type=int, default=50)
    ap.add_argument("--fraction", type=float, default=0.5)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--max-boxes", type=int, default=5)
    args = ap.parse_args(argv)

    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch

    from rscale import api
    from rscale.core import rerank_law as law
    from rscale.core.estimators.methods import estimate
    from rscale.producers import extract as ex
    from rscale.producers.rerank import ProposalParams, rerank
    from rscale.producers.rerank_sample import gallery_top_lists, rerank_sample
    from rscale.store.sample_stats_file import read_sample_stats

    model = args.examples / "backbones" / "mobilenet_v2_imagenet"
    detector = args.examples / "detectors" / "owlv2_random"
    photos = args.examples / "photos"
    w = args.out
    w.mkdir(parents=True, exist_ok=True)
    times = {}
    t = time.perf_counter()
    queries, positives, qrels = ex.ilias_layout(photos / "instances")
    distractors = ex.image_items(photos / "distractors")
    kw = dict(pooling="pooled", progress=False, lineage=False)
    if not (w / "distractors" / "manifest.json").exists():
        ex.extract(queries, model, w / "queries", role="queries", **kw)
        ex.extract(positives, model, w / "positives", role="positives", **kw)
        ex.extract(distractors, model, w / "distractors", role="distractors", **kw)
        pq.write_table(pa.table({"query_id": [a for a, _ in qrels], "positive_id": [b for _, b in qrels]}),
                       w / "qrels.parquet")
    times["extract_s"] = time.perf_counter() - t
    n, depth = len(distractors), args.depth
    params = ProposalParams(max_boxes=args.max_boxes)
    d_items = [(i, p) for i, p, *_ in distractors]
    p_items = [(i, p) for i, p, *_ in positives]

    def scored(name, fraction, seed, r):
        api.score(w / "queries", w / "positives", qrels=w / "qrels.parquet", distractors_dir=w / "distractors",
                  out=w / f"{name}.parquet", fraction=fraction, seed=seed, k=max(100, r), backend="numpy",
                  lineage=False, candidates=r)
        return rerank_sample(w / f"{name}.parquet", w / "queries", d_items, p_items, detector, model, w / "cache",
                             w / f"{name}.reranked.parquet", params=params, progress=False, lineage=False)

    t = time.perf_counter()
    full = scored("full", 1.0, 0, depth)
    times["rerank_full_sample_s"] = time.perf_counter() - t
    gallery_top_lists(w / "full.parquet", w / "gallery_top.parquet", depth=depth)
    t = time.perf_counter()
    rerank(w / "queries", w / "gallery_top.parquet", dict(d_items) | dict(p_items), detector, model, w / "cache",
           w / "truth", k=depth, qrels=w / "qrels.parquet", params=params, progress=False, lineage=False)
    times["rerank_truth_lists_s"] = time.perf_counter() - t
    m = pq.read_table(w / "truth" / "metrics.parquet").to_pydict()
    measures = (f"mAP@{depth}", "R@1")
    truth = {k: float(np.mean(m[k])) for k in measures}
    first = {k: float(np.mean(m[f"first_stage_{k}"])) for k in measures}
    # the plug-in law on the fraction-1.0 reranked sample stats reproduces the truth (a consistency check)
    v2 = read_sample_stats(w / "full.reranked.parquet")
    h = api.reranked_hardness(v2, estimate(v2, "count"), tail=False)
    plugin = {f"mAP@{depth}": float(law.reranked_per_query(h, "AP", n, depth, depth=depth, mode="plugin").mean()),
              "R@1": float(law.reranked_per_query(h, "R", n, 1, depth=depth, mode="plugin").mean())}
    r = int(math.ceil(1.25 * depth * args.fraction)) + 2
    rows = []
    for seed in (int(s) for s in args.seeds.split(",")):
        scored(f"s{seed}", args.fraction, seed, r)
        path = w / f"s{seed}.reranked.parquet"
        ss = read_sample_stats(path)
        counts_h = api.reranked_hardness(ss, estimate(ss, "count"), tail=False)
        for row, (metric, k) in zip(api.predict_reranked(path, n=n, depth=depth, measures=list(measures),
                                                         method="count", bootstrap=1000),
                                    (("AP", depth), ("R", 1))):
            mm = row["measure"]
            rows.append({"seed": seed, "measure": mm, "S": int(ss.n_sampled.max()), "R": r,
                         "predicted": row["value"], "ci": [row["ci_low"], row["ci_high"]],
                         "counts_only": float(law.reranked_per_query(counts_h, metric, n, k, depth=depth).mean()),
                         "truth": truth[mm], "inside": row["ci_low"] <= truth[mm] <= row["ci_high"],
                         "first_stage_predicted": row["first_stage"], "first_stage_truth": first[mm]})
    result = {"machine": f"{platform.machine()} {platform.processor() or ''}".strip(), "torch": torch.__version__,
              "N": n, "K'": depth, "fraction": args.fraction, "queries": v2.n_queries, "max_boxes": args.max_boxes,
              "truth": truth, "first_stage_truth": first, "plugin_at_fraction_1": plugin,
              "full_sample_images": full["images"], "times_s": {k: round(v, 1) for k, v in times.items()},
              "rows": rows}
    print(json.dumps(result, indent=1))
    (w / "result.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
