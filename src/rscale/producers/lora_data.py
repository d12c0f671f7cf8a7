"""Training images and student views of the O2I LoRA fine-tune (O2I paper, section 5.4, App. M).

Training images come from an image folder, a list of paths (one per line in a text file, or a
Python list), or an O2I render set (:mod:`rscale.producers.o2i`) restricted to the training side
of a split by object (:func:`split_objects`): every render of an evaluation object stays out of
training. :func:`training_images` opens every image before anything is written, so an unreadable
file stops the run with its path and nothing on disk.

The student view (:func:`student_view`) is the same gray-padded, lower-O2I view as the query-side
interventions, built with their code (:func:`rscale.producers.interventions.gray_pad` and, for a
ViT-family backbone pooled on its CLS token, :func:`~rscale.producers.interventions.cls_mask_for_box`,
the MSA attention mask): the image shrunk by ``s`` on a gray canvas of its own size. ``s`` is
drawn log-uniformly from the ``scale_range`` of :class:`rscale.producers.lora.LoraParams`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rscale.errors import FormatError, InvalidArgumentError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp")


@dataclass(frozen=True)
class ObjectSplit:
    """A deterministic split of object ids into training and evaluation sides."""

    train: tuple
    evaluation: tuple
    seed: int

    def to_dict(self) -> dict:
        return {"seed": self.seed, "train": list(self.train), "evaluation": list(self.evaluation)}


def split_objects(object_ids, evaluation: int | float, seed: int = 0) -> ObjectSplit:
    """Split ``object_ids`` by a seeded permutation: ``evaluation`` objects (a count, or a fraction
    in (0, 1)) go to the evaluation side, the rest to training. Both sides keep the input order.

    Depends only on the sorted ids and the seed, so the same objects always land on the same side:
    ``split_objects(["a", "b", "c", "d"], 0.5, seed=0)`` gives two and two, never overlapping."""
    ids = sorted(dict.fromkeys(str(o) for o in object_ids))
    if len(ids) < 2:
        raise InvalidArgumentError(f"a split by object needs at least 2 objects, got {len(ids)}")
    n_eval = int(round(evaluation * len(ids))) if isinstance(evaluation, float) and evaluation < 1 else int(evaluation)
    if not 1 <= n_eval < len(ids):
        raise InvalidArgumentError(f"evaluation side must hold 1..{len(ids) - 1} of the {len(ids)} objects, "
                                   f"got {evaluation}")
    order = np.random.default_rng(int(seed)).permutation(len(ids))
    held = {ids[i] for i in order[:n_eval]}
    given = list(dict.fromkeys(str(o) for o in object_ids))
    return ObjectSplit(tuple(o for o in given if o not in held), tuple(o for o in given if o in held), int(seed))


def image_paths(source) -> list[Path]:
    """Paths of a training source: a folder (its images, recursively, sorted), a text file (one
    path per line, relative to the file's folder; blank lines and ``#`` comments skipped) or a list."""
    if isinstance(source, (list, tuple)):
        paths = [Path(p) for p in source]
    else:
        source = Path(source)
        if source.is_dir():
            paths = sorted(p for p in source.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
            if not paths:
                raise FormatError(f"no images ({', '.join(IMAGE_SUFFIXES)}) in this folder", path=str(source))
        elif source.is_file():
            lines = [ln.strip() for ln in source.read_text().splitlines()]
            paths = [(source.parent / ln) for ln in lines if ln and not ln.startswith("#")]
        else:
            raise FormatError("training images not found (expected a folder, a list file or a list of paths)",
                              path=str(source))
    if not paths:
        raise InvalidArgumentError("no training images: the list is empty")
    return paths


def render_set_paths(render_set, split: ObjectSplit) -> list[Path]:
    """Every render of the split's training objects (all distances)."""
    train = set(split.train)
    unknown = sorted((set(split.train) | set(split.evaluation)) - set(render_set.object_ids))
    if unknown:
        raise InvalidArgumentError(f"split names objects the render set does not hold: {unknown[:5]}")
    return [r.path for r in render_set.records if r.object_id in train]


def training_images(paths) -> list:
    """Open every image (RGB, fully decoded). Raises FormatError naming every unreadable file
    (first five) before anything is trained or written."""
    from PIL import Image

    images, bad = [], []
    for p in paths:
        try:
            with Image.open(p) as im:
                images.append(im.convert("RGB"))
        except Exception as exc:           # PIL raises many types for a damaged or missing file
            bad.append(f"{p} ({type(exc).__name__})")
    if bad:
        raise FormatError(f"{len(bad)} of {len(paths)} training images cannot be read: {'; '.join(bad[:5])}",
                          hint="remove them from the list or replace the files")
    return images


def list_digest_lines(paths) -> list[str]:
    """What identifies a training list: each file's name and content digest (not its location)."""
    from rscale.producers.lineage import digest_file
    return [f"{Path(p).name}\t{digest_file(p)}" for p in paths]


def draw_scales(rng: np.random.Generator, n: int, scale_range) -> np.ndarray:
    """``n`` gray-pad scales, log-uniform on ``scale_range`` = (low, high), 0 < low <= high <= 1."""
    lo, hi = (float(s) for s in scale_range)
    return np.exp(rng.uniform(np.log(lo), np.log(hi), size=n))


def student_view(bb, image, scale: float, mask: bool):
    """The gray-padded view at ``scale`` and, with ``mask``, the MSA attention mask (1, 1, T, T)
    hiding the gray canvas from the CLS token (None otherwise)."""
    from rscale.producers.interventions import cls_mask_for_box, gray_pad

    canvas, box = gray_pad(image, float(scale))
    return canvas, (cls_mask_for_box(bb, box, image.size) if mask else None)
