"""Training images and student views of the O2I LoRA fine-tune (O2I paper, section 5.4, App. M).

Training images (:func:`training_source`) come from an image folder, a list of paths (one per
line in a text file, or a Python list), the gallery side of an ILIAS-layout folder (every
instance's ``pos/`` images, read with :mod:`rscale.store.ilias_layout`; never its ``query/``
images), or an O2I render set (:mod:`rscale.producers.o2i`) restricted to the training side of a
split by object (:func:`split_objects`): every render of an evaluation object stays out of
training. Evaluation query images (an ILIAS root's own queries, and any ``queries`` given) are
refused in a training list by path and by content digest (:func:`check_no_queries`).
:func:`training_images` opens every image before anything is written, so an unreadable file stops
the run with its path and nothing on disk.

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


@dataclass(frozen=True)
class TrainingSource:
    """What a run trains on: the image paths, the kind of source they came from (one of
    :data:`SOURCE_KINDS`), where it was, and the evaluation query images checked absent from it."""

    kind: str
    paths: tuple
    location: str | None = None
    queries: tuple = ()

    def lineage(self) -> dict:
        """The run's record of its source: kind, location, image count, and the checked queries'
        count and digest (each query's name and sha256, as :func:`list_digest_lines`)."""
        from rscale.store.hashing import digest_lines
        return {"kind": self.kind, "location": self.location, "images": len(self.paths),
                "excluded_queries": len(self.queries),
                "excluded_queries_sha256": digest_lines(list_digest_lines(self.queries)) if self.queries else None}


SOURCE_KINDS = ("folder", "list", "paths", "ilias", "renders")


def ilias_instances(path):
    """The instances of ``path`` when it is an ILIAS-layout folder (:func:`rscale.store.ilias_layout.instances`:
    ``<instance>/query/`` and ``<instance>/pos/``, some query), else None."""
    from rscale.store.ilias_layout import instances
    path = Path(path)
    if not path.is_dir():
        return None
    try:
        return instances(path)
    except FormatError:                  # no instance with a query: a plain image folder
        return None


def query_paths(source) -> list[Path]:
    """Evaluation query images: an ILIAS-layout folder's ``query/`` images, or the images of a
    folder, list file or list of paths. A list file without entries names none (the pipeline's
    default, pipelines/lora/evaluation_queries.txt: a file, so that DVC tracks its content)."""
    if not isinstance(source, (list, tuple)) and not Path(source).exists():
        raise FormatError("evaluation queries not found (expected an ILIAS-layout folder, an image folder or a "
                          "list file)", path=str(source))
    found = ilias_instances(source) if not isinstance(source, (list, tuple)) else None
    if found is not None:
        return [q for inst in found for q in inst.queries]
    return _listed_paths(source, allow_empty=not isinstance(source, (list, tuple)) and Path(source).is_file())


def layout_queries(paths) -> list[Path]:
    """The queries of every ILIAS-layout root that one of ``paths`` lies in a ``query/`` folder of
    (``ROOT/<instance>/query/<name>``, read with the layout reader): listed or found in a folder,
    such an image is an evaluation query."""
    roots = dict.fromkeys(Path(p).parent.parent.parent for p in paths if Path(p).parent.name == "query")
    found = (ilias_instances(r) for r in roots)
    return [q for insts in found if insts for inst in insts for q in inst.queries]


def check_no_queries(paths, queries) -> None:
    """Refuse a training list that holds an evaluation query image: the same file (resolved path)
    or the same bytes (sha256; only files of a query's size are hashed). One InvalidArgumentError
    naming the count and the first pairs."""
    from rscale.producers.lineage import digest_file

    if not queries:
        return
    by_path = {Path(q).resolve(): Path(q) for q in queries}
    sizes = {}
    for q in queries:
        try:
            sizes.setdefault(Path(q).stat().st_size, []).append(Path(q))
        except OSError:
            continue                         # a missing query cannot be in the training list by content
    digests = {}

    def digest(p):
        if p not in digests:
            digests[p] = digest_file(p)
        return digests[p]

    hits = []
    for p in paths:
        p = Path(p)
        if p.resolve() in by_path:
            hits.append(f"{p} is query {by_path[p.resolve()]}")
            continue
        try:
            same_size = sizes.get(p.stat().st_size, ())
        except OSError:
            continue                         # unreadable: training_images names it
        twin = next((q for q in same_size if digest(q) == digest(p)), None)
        if twin is not None:
            hits.append(f"{p} has the bytes of query {twin}")
    if hits:
        raise InvalidArgumentError(f"{len(hits)} of {len(paths)} training images are evaluation query images "
                                   f"(never train on them): {'; '.join(hits[:3])}; train on the gallery side "
                                   "(an ILIAS root's pos/ images) or a separate set, without these files")


def training_source(source, queries=None) -> TrainingSource:
    """The training images of ``source`` (an ILIAS-layout folder: its instances' positives, never
    its queries; an image folder, recursively; a list file, one path a line relative to it; a list of paths), checked
    against the evaluation queries: an ILIAS root's own, those of any ILIAS root a listed image lies
    in the ``query/`` folder of (:func:`layout_queries`), and those of ``queries`` (:func:`query_paths`)."""
    found = ilias_instances(source) if not isinstance(source, (list, tuple)) else None
    if found is not None:
        paths = [p for inst in found for p in inst.positives]
        if not paths:
            raise FormatError("no <instance>/pos/*.jpg or *.png in this ILIAS-layout folder: nothing on its gallery "
                              "side to train on", path=str(source))
        own = [q for inst in found for q in inst.queries]
        kind = "ilias"
    else:
        paths = _listed_paths(source)
        own = layout_queries(paths)
        kind = "paths" if isinstance(source, (list, tuple)) else ("folder" if Path(source).is_dir() else "list")
    excluded = list(dict.fromkeys(own + (query_paths(queries) if queries is not None else [])))
    check_no_queries(paths, excluded)
    return TrainingSource(kind, tuple(paths), None if kind == "paths" else str(source), tuple(excluded))


def image_paths(source) -> list[Path]:
    """Paths of a training source (:func:`training_source`): an ILIAS-layout folder gives its
    gallery side only."""
    return list(training_source(source).paths)


def _listed_paths(source, *, allow_empty: bool = False) -> list[Path]:
    """A folder's images (recursively, sorted), a text file's paths (one per line, relative to the
    file's folder; blank lines and ``#`` comments skipped) or a list's; empty only if ``allow_empty``."""
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
    if not paths and not allow_empty:
        raise InvalidArgumentError("no training images: the list is empty")
    return paths


def render_source(render_set, split: ObjectSplit, queries=None) -> TrainingSource:
    """The renders of the split's training objects, checked against ``queries`` (if any)."""
    paths = render_set_paths(render_set, split)
    excluded = list(dict.fromkeys(layout_queries(paths) + (query_paths(queries) if queries is not None else [])))
    check_no_queries(paths, excluded)
    return TrainingSource("renders", tuple(paths), str(render_set.manifest), tuple(excluded))


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
