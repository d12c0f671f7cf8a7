"""Issue 15's done-when on real descriptors: the reranked metric predicted from a distractor sample
against the exact reranked metric of the full gallery, with the real ImageNet MobileNetV2.

Inputs: the README example's (``python examples/real_backbone_inputs.py -o out/examples``): the
converted MobileNetV2, the photo set (32 queries, 96 positives, 400 distractors) and the stand-in
detector (a randomly initialised OWLv2: no OWLv2 weights ship offline, so proposals are arbitrary
boxes; the check is of the prediction, whatever the reranker's quality).

1. extract the sets (pooled, the checkpoint's processor), score the whole pool (fraction 1.0)
   keeping each query's top K' by id, and score a ``--fraction`` sample at each ``--seeds`` keeping
   the top R = ceil(2 K' f) + 2 (the halves of the benchmark interval reach the top K' too);
2. truth: :func:`rscale.producers.rerank_sample.gallery_top_lists` (the gallery's top K', positives
   included) reranked by ``rscale rerank`` (mAP@K' and R@1 per query, ``rscale.core.metrics``);
3. prediction: ``rerank_sample`` on each sample, then ``api.predict_reranked`` at N = the pool
   (count hardness, the query's default modes; the default GPD-smoothed joint tail, and plain
   counts for comparison) with the interval ``rscale query`` reports (``--ci``, default benchmark:
   half-sample replicates plus the gallery's outranking noise).

``--instances hard``: the example's own instances are too easy for MobileNetV2 (mAP@50 = 1.0 before
and after reranking: nothing to predict), so the hard variant cuts the instances from the quadrants
of the 10 *distractor* photos instead (as the example cuts its instances), whose random crops are
the distractors: near-duplicate textures outrank positives.

Run: PYTHONPATH=src python benchmarks/rerank_sample_check.py --examples out/examples -o out/bench/rerank_sample [--instances hard] [--ci population]
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from pathlib import Path

import numpy as np


def write_hard_instances(out: Path) -> None:
    """ILIAS tree of instances cut from the distractor photos' quadrants (query: the quadrant's centre
    crop; positives: the quadrant, its mirror, a zoomed-out view), with the example's own cutting."""
    import importlib.util

    from PIL import ImageOps
    spec = importlib.util.spec_from_file_location("real_backbone_inputs",
                                                  Path(__file__).resolve().parents[1] / "examples" / "real_backbone_inputs.py")
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    for name in m.DISTRACTOR_PHOTOS:
        im = m.photo(name)
        w, h = im.size
        for qi, (x, y) in enumerate(((0, 0), (w // 2, 0), (0, h // 2), (w // 2, h // 2))):
            qw, qh = w // 2, h // 2
            inst = out / f"{name}-{qi}"
            m._save(im.crop((x + qw // 6, y + qh // 6, x + qw - qw // 6, y + qh - qh // 6)), inst / "query" / "q.png")
            region = im.crop((x, y, x + qw, y + qh))
            m._save(region, inst / "pos" / "whole.png")
            m._save(ImageOps.mirror(region), inst / "pos" / "mirrored.png")
            big = (max(0, x - qw // 4), max(0, y - qh // 4), min(w, x + qw + qw // 4), min(h, y + qh + qh // 4))
            m._save(im.crop(big), inst / "pos" / "zoomed_out.png")


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=Path, default=Path("out/examples"))
    ap.add_argument("-o", "--out", type=Path, default=Path("out/bench/rerank_sample"))
    ap.add_argument("--depth", type=int, default=50)
    ap.add_argument("--fraction", type=float, default=0.5)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--max-boxes", type=int, default=5)
    ap.add_argument("--instances", choices=("example", "hard"), default="example")
    ap.add_argument("--ci", choices=("benchmark", "population"), default="benchmark",
                    help="the interval's kind (rscale predict-rerank --ci)")
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
    instances = photos / "instances"
    if args.instances == "hard":
        instances = w / "hard_instances"
        if not instances.exists():
            write_hard_instances(instances)
    queries, positives, qrels = ex.ilias_layout(instances)
    distractors = ex.image_items(photos / "distractors")
    kw = dict(pooling="pooled", progress=False, lineage=False)
    sets = w / args.instances
    if not (w / "distractors" / "manifest.json").exists():
        ex.extract(distractors, model, w / "distractors", role="distractors", **kw)
    if not (sets / "positives" / "manifest.json").exists():
        ex.extract(queries, model, sets / "queries", role="queries", **kw)
        ex.extract(positives, model, sets / "positives", role="positives", **kw)
        pq.write_table(pa.table({"query_id": [a for a, _ in qrels], "positive_id": [b for _, b in qrels]}),
                       sets / "qrels.parquet")
    times["extract_s"] = time.perf_counter() - t
    w = sets                                   # scorings, reranked stats and truth per instance set
    n, depth = len(distractors), args.depth
    params = ProposalParams(max_boxes=args.max_boxes)
    d_items = [(i, p) for i, p, *_ in distractors]
    p_items = [(i, p) for i, p, *_ in positives]

    def scored(name, fraction, seed, r):
        api.score(w / "queries", w / "positives", qrels=w / "qrels.parquet", distractors_dir=w.parent / "distractors",
                  out=w / f"{name}.parquet", fraction=fraction, seed=seed, k=max(100, r), backend="numpy",
                  lineage=False, candidates=r)
        return rerank_sample(w / f"{name}.parquet", w / "queries", d_items, p_items, detector, model, w.parent / "cache",
                             w / f"{name}.reranked.parquet", params=params, progress=False, lineage=False)

    t = time.perf_counter()
    full = scored("full", 1.0, 0, depth)
    times["rerank_full_sample_s"] = time.perf_counter() - t
    gallery_top_lists(w / "full.parquet", w / "gallery_top.parquet", depth=depth)
    t = time.perf_counter()
    rerank(w / "queries", w / "gallery_top.parquet", dict(d_items) | dict(p_items), detector, model, w.parent / "cache",
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
    # the benchmark interval's half-samples must reach the gallery's top K' too: a half keeps about
    # half of the R reranked candidates (the fewest any query keeps), so twice the slice, not 1.25x
    r = int(math.ceil(2.0 * depth * args.fraction)) + 2
    rows = []
    for seed in (int(s) for s in args.seeds.split(",")):
        scored(f"s{seed}", args.fraction, seed, r)
        path = w / f"s{seed}.reranked.parquet"
        ss = read_sample_stats(path)
        counts_h = api.reranked_hardness(ss, estimate(ss, "count"), tail=False)
        for row, (metric, k) in zip(api.predict_reranked(path, n=n, depth=depth, measures=list(measures),
                                                         method="count", ci_kind=args.ci),
                                    (("AP", depth), ("R", 1))):
            mm = row["measure"]
            rows.append({"seed": seed, "measure": mm, "S": int(ss.n_sampled.max()), "R": r, "mode": row["mode"],
                         "predicted": row["value"], "ci": [row["ci_low"], row["ci_high"]], "ci_kind": row["ci_kind"],
                         "counts_only": float(law.reranked_per_query(counts_h, metric, n, k, depth=depth,
                                                                     mode=row["mode"]).mean()),
                         "truth": truth[mm], "inside": row["ci_low"] <= truth[mm] <= row["ci_high"],
                         "first_stage_predicted": row["first_stage"], "first_stage_truth": first[mm]})
    result = {"instances": args.instances, "machine": f"{platform.machine()} {platform.processor() or ''}".strip(), "torch": torch.__version__,
              "N": n, "K'": depth, "fraction": args.fraction, "queries": v2.n_queries, "max_boxes": args.max_boxes,
              "truth": truth, "first_stage_truth": first, "plugin_at_fraction_1": plugin,
              "full_sample_images": full["images"], "times_s": {k: round(v, 1) for k, v in times.items()},
              "rows": rows}
    print(json.dumps(result, indent=1))
    (w / "result.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
