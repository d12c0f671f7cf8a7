"""The O2I LoRA fine-tune's effect on a real network: the default O2I backbone (torchvision's
ImageNet MobileNetV2, converted by rscale.producers.mobilenet), trained on the renders of one set of
objects and evaluated by cross-distance retrieval on held-out objects, next to GP at inference.

    PYTHONPATH=src python benchmarks/lora_effect.py --out /tmp/lora-bench [--objects 120 --evaluation 40]

Protocol (fixed before any result was looked at):
* objects: the first ``--objects`` of ``pybullet_assets("all")``, rendered with the default
  protocol (5 distances, 3.0 .. 9.9) at ``--resolution`` px;
* split: ``split_objects(ids, --evaluation, seed=--split-seed)``; training sees every render of
  the training objects only; evaluation objects are never trained on, and no parameter is chosen
  on them (the LoRA parameters are the module defaults, with ``--steps``);
* evaluation on the held-out objects only (queries and gallery), every ordered distance pair:
  base (frozen model both sides), GP queries (interventions.GrayPad(), 5 views over 4x) against
  the base gallery, LoRA queries against the base gallery (the paper's "an existing index stays
  usable"), and the merged LoRA model on both sides;
* significance: per ordered pair McNemar (R@1) and paired t (MRR) over objects with Holm's
  correction (core.o2i.intervention_table); overall, a paired t over the held-out objects of each
  object's mean over the 20 pairs (objects are the independent units), and McNemar / paired t
  pooled over all pairs x objects (those cells share objects, so the pooled p-values overstate
  the evidence; indicative only).
Writes ``<out>/lora_effect-steps<N>.json`` and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np


def descriptors(bb, records, pooling, intervention=None, batch=25):
    from rscale.producers.extract import embed, open_image, to_pixels
    out = []
    for a in range(0, len(records), batch):
        ims = [open_image(r.path) for r in records[a:a + batch]]
        out.append(embed(bb, to_pixels(bb, ims), pooling) if intervention is None else intervention(bb, ims, pooling))
    return np.concatenate(out)


def cube(rs, objects, vecs):
    """(objects, distances, dim) from per-record descriptors in (object, distance) order."""
    return vecs.reshape(len(objects), len(rs.distances), -1)


def asymmetric(queries, gallery, distances):
    """CrossDistance of per-view queries (O, V, D) against a gallery (O, V, D)."""
    from rscale.core.o2i import CrossDistance, positive_ranks
    n_view = gallery.shape[1]
    pairs = np.asarray([(q, t) for q in range(n_view) for t in range(n_view) if q != t], dtype=np.int64)
    ranks = np.stack([positive_ranks(queries[:, q], gallery, t) for q, t in pairs])
    return CrossDistance(np.asarray(distances, float), pairs, ranks)


def summary(name, cd, base):
    from rscale.core import significance as sig
    row = {"method": name, "R@1": float(cd.recall(1).mean()), "MRR": float(cd.mrr().mean())}
    far = cd.pairs[:, 0] > cd.pairs[:, 1]           # query farther (smaller O2I) than its positive
    row["R@1 far->near"] = float(cd.recall(1)[far].mean())
    row["R@1 near->far"] = float(cd.recall(1)[~far].mean())
    if base is not None:
        mc = sig.mcnemar(base.hits(1).ravel(), cd.hits(1).ravel())
        pt = sig.paired_t(base.reciprocal_ranks().ravel(), cd.reciprocal_ranks().ravel())
        # objects as the unit: each object's mean over the 20 ordered pairs, paired t over objects
        obj_r = sig.paired_t(base.hits(1).mean(axis=0), cd.hits(1).mean(axis=0))
        obj_m = sig.paired_t(base.reciprocal_ranks().mean(axis=0), cd.reciprocal_ranks().mean(axis=0))
        row.update({"R@1 gain": mc.effect, "McNemar p (pooled)": mc.p_value, "discordant": list(mc.discordant),
                    "MRR gain": pt.effect, "paired-t p (pooled)": pt.p_value,
                    "R@1 p (objects)": obj_r.p_value, "R@1 95% CI (objects)": [obj_r.ci_low, obj_r.ci_high],
                    "MRR p (objects)": obj_m.p_value, "MRR 95% CI (objects)": [obj_m.ci_low, obj_m.ci_high]})
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/lora-bench"))
    ap.add_argument("--objects", type=int, default=120)
    ap.add_argument("--evaluation", type=int, default=40)
    ap.add_argument("--split-seed", type=int, default=0)
    ap.add_argument("--resolution", type=int, default=224)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 on a shared, oversubscribed machine)")
    args = ap.parse_args()
    os.environ.setdefault("MLFLOW_TRACKING_URI", "sqlite:///" + str((args.out / "mlruns.db").resolve()))
    args.out.mkdir(parents=True, exist_ok=True)

    import torch

    from rscale.core.o2i import cross_distance, intervention_table
    from rscale.producers import lora, lora_data, o2i
    from rscale.producers.extract import load_backbone
    from rscale.producers.interventions import GrayPad
    from rscale.producers.mobilenet import convert_mobilenet_v2

    torch.set_num_threads(args.threads)
    timings = {}

    def done(step, t0):
        timings[step] = time.perf_counter() - t0
        print(f"{step}: {timings[step]:.1f} s", flush=True)
    t = time.perf_counter()
    base_dir = convert_mobilenet_v2(args.out / "mobilenet_v2").path
    rs = o2i.render_set(o2i.pybullet_assets("all", limit=args.objects), o2i.RenderProtocol(resolution=args.resolution),
                        cache_dir=args.out / "o2i-cache", progress=False)
    split = lora_data.split_objects(rs.object_ids, args.evaluation, seed=args.split_seed)
    (args.out / "split.json").write_text(json.dumps(split.to_dict(), indent=1) + "\n")
    done("convert + render", t)
    held = [r for o in split.evaluation for r in sorted((r for r in rs.records if r.object_id == o),
                                                        key=lambda r: r.distance_index)]

    bb = load_backbone(base_dir, device="cpu")
    pooling = "pooled"

    def cached(name, compute):
        """Descriptors of the held-out renders, kept per (split, render set, model) for re-runs."""
        from rscale.store.registry import canonical_digest
        key = canonical_digest([split.to_dict(), rs.content_digest(), name]).split(":", 1)[1][:16]
        path = args.out / f"desc-{key}.npy"
        if path.exists():
            return np.load(path)
        t0 = time.perf_counter()
        vecs = compute()
        np.save(path, vecs)
        done(name, t0)
        return vecs

    from rscale.producers.lineage import weights_digest
    base_id = weights_digest(base_dir)
    base = cube(rs, split.evaluation, cached(f"base {base_id}", lambda: descriptors(bb, held, pooling)))
    gp = cube(rs, split.evaluation, cached(f"GP {base_id}", lambda: descriptors(bb, held, pooling, GrayPad())))

    params = lora.LoraParams(steps=args.steps, batch_size=args.batch_size)
    t = time.perf_counter()
    res = lora.train_lora(base_dir, None, args.out / f"lora-steps{args.steps}", params, render_set=rs, split=split,
                          progress=True)
    done("train", t)
    t = time.perf_counter()
    adapted = cube(rs, split.evaluation, descriptors(load_backbone(res.model_dir, device="cpu"), held, pooling))
    done("LoRA descriptors", t)

    d = rs.distances
    cd_base = cross_distance(base, d)
    runs = {"base": cd_base, "GP queries (5 views / 4x)": asymmetric(gp, base, d),
            "LoRA queries vs base gallery": asymmetric(adapted, base, d), "LoRA both sides": cross_distance(adapted, d)}
    rows = [summary(name, cd, None if name == "base" else cd_base) for name, cd in runs.items()]
    per_pair = {name: {k: np.asarray(v).tolist() for k, v in intervention_table(cd_base, cd).items()}
                for name, cd in runs.items() if name != "base"}
    report = {"objects": len(rs.object_ids), "train_objects": len(split.train), "evaluation_objects": len(split.evaluation),
              "distances": d, "resolution": args.resolution, "params": params.to_dict(),
              "loss": {"first10": float(np.mean(res.losses[:10])), "last10": float(np.mean(res.losses[-10:]))},
              "merged_model": str(res.model_dir), "summary": rows, "per_pair": per_pair,
              "timings_s": timings, "threads": torch.get_num_threads(), "load_average": os.getloadavg()}
    (args.out / f"lora_effect-steps{args.steps}.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"train loss {report['loss']['first10']:.4f} (first 10 steps) -> {report['loss']['last10']:.4f} (last 10)")
    cols = ["method", "R@1", "MRR", "R@1 far->near", "R@1 near->far", "R@1 gain", "R@1 p (objects)",
            "McNemar p (pooled)", "MRR gain", "MRR p (objects)", "paired-t p (pooled)"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(f"{r[c]:.3g}" if isinstance(r.get(c), float) else str(r.get(c, "")) for c in cols) + " |")
    for name, tab in per_pair.items():
        sig_r = sum(p < 0.05 for p in tab["R@1_p_holm"])
        sig_m = sum(p < 0.05 for p in tab["MRR_p_holm"])
        print(f"{name}: pairs with Holm p < 0.05: R@1 {sig_r}/20, MRR {sig_m}/20")
    print("timings (s):", {k: round(v, 1) for k, v in timings.items()})


if __name__ == "__main__":
    main()
