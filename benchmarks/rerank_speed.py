"""Speed of OWLv2 crop reranking (rscale.producers.rerank): region extraction and rescoring.

1. Region extraction, images/s: randomly initialised models of the real shapes (no weights are
   downloaded): Owlv2ForObjectDetection B/16 at 960 px (``--owl-*``) and a ViT retrieval backbone
   (``--vit-*``, default ViT-S/14-like at 224), saved and re-loaded like real checkpoints, through
   ``region_features`` into a fresh region cache. Detector and backbone time are split by timing
   ``raw_proposals`` and ``embed``. Random weights propose degenerate boxes that NMS and
   ``min_side`` drop, so fewer than ``max_boxes`` crops per image are encoded; the crop count is
   printed and the backbone figure is per crop.
2. Rescoring, per query: K' candidates x R regions x D dims of random unit fp16 region
   descriptors (the cache's storage), ``max_region_scores`` (numpy float32 GEMM per query block,
   segmented max) for several block sizes, side by side with the bare GEMM of the same shapes
   and with a Python loop over candidates (a few queries). Two regimes: disjoint candidate lists
   (no two queries share an image: the worst case for blocks) and lists shared by groups of 8
   queries (queries of one instance). The torch path too, on CUDA when present (bf16).

Run (CPU here; the same command on a GPU machine adds the CUDA rows):
    OPENBLAS_THREAD_TIMEOUT=4 PYTHONPATH=src python benchmarks/rerank_speed.py [--images 4] [--queries 16]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import argparse  # noqa: E402
import platform  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from _timing import best_of  # noqa: E402

from rscale.core import rerank as rr  # noqa: E402


def region_extraction(args, root: Path):
    import torch
    import transformers
    from PIL import Image

    from rscale.producers import extract as ex
    from rscale.producers import rerank as prr
    from rscale.producers.rerank_cache import RegionCache
    torch.manual_seed(0)
    text = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2, vocab_size=100,
                max_position_embeddings=16, bos_token_id=0, eos_token_id=1, pad_token_id=1)
    vision = dict(hidden_size=args.owl_hidden, intermediate_size=4 * args.owl_hidden, num_hidden_layers=args.owl_layers,
                  num_attention_heads=args.owl_hidden // 64, image_size=args.owl_res, patch_size=16)
    transformers.Owlv2ForObjectDetection(transformers.Owlv2Config(text_config=text, vision_config=vision,
                                                                  projection_dim=64)).save_pretrained(root / "owl")
    transformers.ViTModel(transformers.ViTConfig(hidden_size=args.vit_hidden, intermediate_size=4 * args.vit_hidden,
                                                 num_hidden_layers=args.vit_layers,
                                                 num_attention_heads=args.vit_hidden // 64, image_size=args.vit_res,
                                                 patch_size=14)).save_pretrained(root / "vit")
    rng = np.random.default_rng(0)
    items = []
    (root / "img").mkdir()
    for i in range(args.images):
        p = root / "img" / f"{i}.jpg"
        Image.fromarray(rng.integers(0, 256, (768, 1024, 3), dtype=np.uint8)).save(p, quality=90)
        items.append((str(i), p))
    det = prr.load_detector(root / "owl", device="cpu")
    bb = ex.load_backbone(root / "vit", device="cpu")
    params = prr.ProposalParams(max_boxes=args.boxes, min_objectness=0.0)
    cache = RegionCache.open(root / "cache", prr.region_identity(det, bb, "bench", "cls", params))
    spent = {"detector": 0.0, "backbone": 0.0, "crops": 0}
    raw, embed = prr.raw_proposals, ex.embed

    def timed_raw(*a, **k):
        t = time.perf_counter()
        out = raw(*a, **k)
        spent["detector"] += time.perf_counter() - t
        return out

    def timed_embed(bb_, pixels, *a, **k):
        t = time.perf_counter()
        out = embed(bb_, pixels, *a, **k)
        spent["backbone"] += time.perf_counter() - t
        spent["crops"] += len(out)
        return out
    prr.raw_proposals, ex.embed = timed_raw, timed_embed
    try:
        t = time.perf_counter()
        prr.region_features(items, det, bb, cache, pooling="cls", params=params, batch_size=args.batch, progress=False)
        total = time.perf_counter() - t
        t = time.perf_counter()
        _, again = prr.region_features(items, det, bb, cache, pooling="cls", params=params, progress=False)
        reuse = time.perf_counter() - t
    finally:
        prr.raw_proposals, ex.embed = raw, embed
    n = args.images
    print(f"\n## region extraction, CPU float32, {n} images 1024x768 (JPEG), batch {args.batch}")
    print(f"detector Owlv2 {args.owl_layers}x{args.owl_hidden} @ {args.owl_res} px; backbone ViT "
          f"{args.vit_layers}x{args.vit_hidden}/14 @ {args.vit_res}; {args.boxes} boxes + whole image")
    print(f"| total | {total:.1f} s | {n / total:.3f} images/s |")
    print(f"| detector | {spent['detector']:.1f} s | {spent['detector'] / n:.2f} s/image |")
    per_crop = spent["backbone"] / max(spent["crops"], 1) * 1e3
    print(f"| backbone ({spent['crops']} crops) | {spent['backbone']:.1f} s | {per_crop:.0f} ms/crop |")
    print(f"| rest (decode, pad, crop, hash, write) | {total - spent['detector'] - spent['backbone']:.1f} s | |")
    print(f"| second run (cache hit, {again} computed) | {reuse:.2f} s | |")


def rescoring(args):
    rng = np.random.default_rng(1)
    q, k, r, d = args.queries, args.k, args.boxes + 1, args.dim
    queries = rng.standard_normal((q, d)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    print(f"\n## rescoring: {q} queries, K'={k} candidates x R={r} regions x D={d} (fp16 regions), numpy "
          f"{np.__version__}, {platform.processor() or platform.machine()}, {os.cpu_count()} cpus")
    for regime, n_images, cand in (
            ("disjoint lists", q * k, np.arange(q * k).reshape(q, k)),
            ("lists shared by 8 queries", (q // 8) * k, np.repeat(np.arange((q // 8) * k).reshape(q // 8, k), 8, axis=0))):
        regions = rng.standard_normal((n_images * r, d)).astype(np.float16)
        regions /= np.linalg.norm(regions.astype(np.float32), axis=1, keepdims=True).astype(np.float16)
        off = np.arange(0, n_images * r + 1, r)
        print(f"\n### {regime}")
        print("| method | ms / query |")
        print("|---|---|")
        ref = None
        t32, regions32 = best_of(lambda: regions.astype(np.float32), 1)
        print(f"| fp16 -> float32 of all regions, once (amortised over the queries) | {t32 / q * 1e3:.1f} |")
        if regime.startswith("disjoint"):            # each query's regions are one contiguous slice
            t_gemm, _ = best_of(lambda: [regions32[cand[i, 0] * r:(cand[i, -1] + 1) * r] @ queries[i]
                                         for i in range(q)], args.repeat)
            print(f"| bare float32 GEMV per query ({k * r} x {d}) @ ({d},), contiguous, no gather | {t_gemm / q * 1e3:.1f} |")
        for block, share in ((1, 2.0), (8, 2.0), (32, 2.0), (8, float("inf"))):
            t, got = best_of(lambda: rr.max_region_scores(queries, cand, regions32, off, block=block, share=share),
                             args.repeat)
            ref = got if ref is None else ref
            np.testing.assert_allclose(got, ref, atol=1e-5)
            how = "always one block GEMM" if share == float("inf") else f"share {share:g}"
            print(f"| max_region_scores, block {block}, {how} | {t / q * 1e3:.1f} |")
        nloop = 2
        t0 = time.perf_counter()
        for i in range(nloop):
            loop = [float((regions32[off[g]:off[g + 1]] @ queries[i]).max()) for g in cand[i]]
            np.testing.assert_allclose(loop, ref[i], atol=1e-5)
        print(f"| Python loop over candidates ({nloop} queries) | {(time.perf_counter() - t0) / nloop * 1e3:.1f} |")
        try:
            import torch

            from rscale.producers.rerank import max_region_scores_torch
        except ImportError:
            continue
        devices = [("cpu", torch.float32)] + ([("cuda", torch.bfloat16)] if torch.cuda.is_available() else [])
        for dev, dt in devices:
            for block in (8, 64):
                t, got = best_of(lambda: max_region_scores_torch(queries, cand, regions, off, device=dev, dtype=dt,
                                                                 block=block), args.repeat)
                err = float(np.abs(got - ref).max())
                print(f"| torch {dev} {str(dt).split('.')[-1]}, block {block} (max |diff| {err:.1e}) | {t / q * 1e3:.1f} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=4)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--boxes", type=int, default=10)
    ap.add_argument("--owl-layers", type=int, default=12)
    ap.add_argument("--owl-hidden", type=int, default=768)
    ap.add_argument("--owl-res", type=int, default=960)
    ap.add_argument("--vit-layers", type=int, default=12)
    ap.add_argument("--vit-hidden", type=int, default=384)
    ap.add_argument("--vit-res", type=int, default=224)
    ap.add_argument("--queries", type=int, default=16)
    ap.add_argument("--k", type=int, default=1000)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--skip-extraction", action="store_true")
    args = ap.parse_args()
    print(f"python {platform.python_version()}, {platform.platform()}")
    rescoring(args)
    if not args.skip_extraction:
        with tempfile.TemporaryDirectory() as tmp:
            region_extraction(args, Path(tmp))


if __name__ == "__main__":
    main()
