"""The region cache: per gallery image, its detector boxes and their descriptors, keyed by content.

Layout of a cache folder::

    cache.json                   format, version, the identity (detector and backbone weights
                                 digests, pooling, resolution, proposal parameters) and its digest
    regions-<16 hex>.parquet     one shard: rows of (image_id, image_sha256, region, x1, y1, x2, y2,
                                 objectness, descriptor), the identity digest in the schema metadata

Region 0 of an image is the whole image (box 0, 0, W, H; objectness NaN); regions 1.. are the
detector's kept boxes, best objectness first. Descriptors are L2-normalised float16
(``fixed_size_list<halffloat>[D]``). Rows are looked up by the image's sha256, so a renamed or
duplicated image reuses its regions, and a second run over the same images computes nothing.
Shards are written whole under a temporary name and renamed, so an interrupted run leaves only
complete shards and the next run computes only the images none of them holds (resumable by
shard). A cache made with another detector, backbone or setting is refused, never mixed: every
shard carries the identity digest and is checked when read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rscale.errors import FormatError

FORMAT = "rscale-region-cache"
VERSION = 1
IDENTITY_KEY = b"rscale.region_cache.identity"


def identity_digest(identity: dict) -> str:
    from rscale.store.hashing import canonical_digest
    return canonical_digest(identity)


@dataclass
class Regions:
    """Regions of a list of images, in that order: image i owns rows offsets[i]:offsets[i+1]."""
    offsets: np.ndarray          # (n_images + 1,) int64
    boxes: np.ndarray            # (M, 4) float32 pixel corners in the original image
    objectness: np.ndarray       # (M,) float32, NaN for the whole-image region
    vectors: np.ndarray          # (M, D) float16, unit norm

    @property
    def count(self) -> int:
        return int(self.offsets[-1])


def _describe(identity: dict) -> str:
    return (f"detector {str(identity.get('detector_sha256', '?'))[:19]}, backbone "
            f"{str(identity.get('backbone_sha256', '?'))[:19]}, pooling {identity.get('pooling')}, "
            f"resolution {identity.get('resolution')}")


class RegionCache:
    def __init__(self, root: Path, identity: dict):
        self.root = root
        self.identity = identity
        self.digest = identity_digest(identity)

    @classmethod
    def open(cls, root, identity: dict) -> "RegionCache":
        """Open (or create) the cache at ``root`` for ``identity``; refuse one made for another."""
        root = Path(root)
        cache = cls(root, identity)
        manifest = root / "cache.json"
        if manifest.exists():
            try:
                m = json.loads(manifest.read_text())
            except ValueError:
                raise FormatError("unreadable cache.json", path=str(manifest),
                                  hint="delete the folder or pass another --cache") from None
            if m.get("format") != FORMAT:
                raise FormatError("not an rscale region cache", path=str(manifest))
            if int(m.get("version", 0)) > VERSION:
                raise FormatError(f"region cache version {m['version']} is newer than this rscale reads",
                                  path=str(manifest), hint="upgrade rscale")
            if m.get("digest") != cache.digest:
                raise FormatError(
                    f"region cache was made with {_describe(m.get('identity', {}))}; this run uses "
                    f"{_describe(identity)}", path=str(root),
                    hint="regions of different detectors or backbones are never mixed: pass another cache folder")
        else:
            if root.exists() and any(root.glob("regions-*.parquet")):
                raise FormatError("region shards without cache.json", path=str(root),
                                  hint="pass an empty or new cache folder")
            from rscale.store.atomic import write_text_atomic
            write_text_atomic(manifest, json.dumps({"format": FORMAT, "version": VERSION, "digest": cache.digest,
                                                    "identity": identity}, sort_keys=True, indent=1) + "\n")
        return cache

    def shard_paths(self) -> list[Path]:
        return sorted(self.root.glob("regions-*.parquet"))

    def known_images(self) -> set[str]:
        """sha256 of every image some shard holds."""
        import pyarrow.parquet as pq
        out: set[str] = set()
        for p in self.shard_paths():
            self._check_shard(p, pq.read_schema(p))
            out.update(pq.read_table(p, columns=["image_sha256"]).column("image_sha256").to_pylist())
        return out

    def _check_shard(self, path: Path, schema) -> None:
        got = (schema.metadata or {}).get(IDENTITY_KEY, b"").decode()
        if got != self.digest:
            raise FormatError(f"shard identity {got[:19] or 'missing'} differs from the cache's {self.digest[:19]}",
                              path=str(path), hint="a shard of another region cache was copied in; remove it")

    def write_shard(self, image_ids, image_sha256s, regions: Regions) -> Path:
        """Write one shard atomically; ``regions`` are those of the listed images, in order."""
        import hashlib

        import pyarrow as pa
        import pyarrow.parquet as pq
        sizes = np.diff(regions.offsets)
        dim = regions.vectors.shape[1]
        vec = np.ascontiguousarray(regions.vectors, dtype=np.float16)
        table = pa.table({
            "image_id": pa.array(np.repeat(np.asarray(image_ids, dtype=object), sizes), pa.string()),
            "image_sha256": pa.array(np.repeat(np.asarray(image_sha256s, dtype=object), sizes), pa.string()),
            "region": pa.array(np.concatenate([np.arange(s) for s in sizes]).astype(np.int16)),
            **{c: pa.array(regions.boxes[:, i].astype(np.float32)) for i, c in enumerate(("x1", "y1", "x2", "y2"))},
            "objectness": pa.array(regions.objectness.astype(np.float32)),
            "descriptor": pa.FixedSizeListArray.from_arrays(pa.array(vec.ravel()), dim),
        }).replace_schema_metadata({IDENTITY_KEY: self.digest.encode()})
        name = hashlib.sha256("\n".join(sorted(image_sha256s)).encode()).hexdigest()[:16]
        path = self.root / f"regions-{name}.parquet"
        from rscale.store.atomic import atomic_path
        with atomic_path(path) as tmp:
            pq.write_table(table, tmp)
        return path

    def regions_of(self, image_sha256s) -> Regions:
        """Regions of the listed images (by sha256, in that order; repeats allowed)."""
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
        wanted = list(image_sha256s)
        want_set = pa.array(sorted(set(wanted)), pa.string())
        parts = []
        for p in self.shard_paths():
            t = pq.read_table(p)
            self._check_shard(p, t.schema)
            parts.append(t.filter(pc.is_in(t.column("image_sha256"), value_set=want_set)))
        if not parts:
            raise FormatError("the region cache holds no shards", path=str(self.root))
        t = pa.concat_tables(parts)
        sha = np.asarray(t.column("image_sha256").to_pylist(), dtype=object)
        region = t.column("region").to_numpy()
        # one block per image: the first shard holding it wins (a duplicate holds the same content)
        order = np.lexsort((region, sha))
        sha, region = sha[order], region[order]
        first = np.flatnonzero(region == 0)
        ends = np.append(first[1:], sha.size)
        block = {s: (a, b) for s, a, b in zip(sha[first], first, ends)}
        missing = [s for s in want_set.to_pylist() if s not in block]
        if missing:
            raise FormatError(f"{len(missing)} images have no regions in the cache (first: {missing[0]})",
                              path=str(self.root), hint="run the region extraction over these images first")
        rows = np.concatenate([order[block[s][0]:block[s][1]] for s in wanted])
        sizes = np.asarray([block[s][1] - block[s][0] for s in wanted], dtype=np.int64)
        desc = t.column("descriptor").combine_chunks()
        dim = desc.type.list_size
        vectors = np.asarray(desc.flatten()).reshape(-1, dim)[rows]
        boxes = np.stack([t.column(c).to_numpy()[rows] for c in ("x1", "y1", "x2", "y2")], axis=1)
        return Regions(np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64), boxes.astype(np.float32),
                       t.column("objectness").to_numpy()[rows].astype(np.float32), vectors.astype(np.float16))
