"""Descriptor sets on disk: shards of vectors (.npy, memory-mapped) plus ids (Parquet) and a manifest.

Layout of a set (queries, positives or distractors, each its own folder)::

    manifest.json               role, backbone, pooling, resolution, dtype, dim, count, the recipe,
                                and per shard its files, row count and sha256 digests
    recipe.json                 what determines the vectors (weights and input-list digests,
                                parameters); written before the first shard
    shard-00000.npy             (rows, dim) float16 or float32, L2-normalised
    shard-00000.ids.parquet     one column ``id`` (string or int64)

Writing validates every shard (dimension, finite values, unit norm, ids unique across the set)
before anything is written, writes each shard under a temporary name and renames it, and writes
the manifest last: an interrupted write leaves no manifest, and re-running skips shards already
on disk (resumable by shard). A re-run resumes only a folder made by the same recipe: shards
made from other weights, parameters or inputs are refused (:func:`check_recipe`), never reused.
Reading memory-maps one shard at a time, so a 100M set never has to fit in memory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rscale.errors import FormatError, InvalidArgumentError
from rscale.store.atomic import atomic_path, write_text_atomic
from rscale.store.hashing import sha256_file

FORMAT = "rscale-descriptors"
VERSION = 1
NORM_TOLERANCE = 1e-2   # float16 storage rounds norms by ~1e-3
RECIPE_FILE = "recipe.json"


def _canonical(obj):
    """A recipe as JSON would give it back (tuples as lists, numbers and strings as they are)."""
    return json.loads(json.dumps(obj, sort_keys=True, default=str))


def check_recipe(root, recipe: dict) -> None:
    """Refuse to resume a folder whose existing shards were made by another recipe.

    ``recipe`` holds what determines the vectors (weights digest, input-list digest, parameters).
    The folder's recipe is its ``recipe.json`` or, for a complete set, its manifest's; a folder with
    shards and neither cannot be trusted either. Nothing is written or removed here.
    """
    root = Path(root)
    shards = sorted(root.glob("shard-*.npy")) + sorted(root.glob("shard-*.ids.parquet"))
    manifest = root / "manifest.json"
    if not shards and not manifest.exists():
        return
    old = None
    for source in (root / RECIPE_FILE, manifest):
        try:
            data = json.loads(source.read_text())
        except (OSError, ValueError):
            continue
        old = data.get("recipe") if source == manifest else data
        if old is not None:
            break
    want = _canonical(recipe)
    if old == want:
        return
    if old is None:
        problem = "holds descriptor shards without a recipe (made by an older rscale or another tool)"
    else:
        keys = sorted(k for k in set(old) | set(want) if old.get(k) != want.get(k))
        diffs = ", ".join(f"{k}: {old.get(k)!r} there, {want.get(k)!r} now" for k in keys)
        problem = f"holds descriptors of another recipe ({diffs})"
    raise InvalidArgumentError(f"{root} {problem}; its shards would be kept under a manifest that does not describe "
                               "them. Write into a new folder, or delete this one to start over")


def _atomic_np(path: Path, arr: np.ndarray):
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.save(f, arr)


def _atomic_ids(path: Path, ids: np.ndarray):
    import pyarrow as pa
    import pyarrow.parquet as pq
    col = pa.array(ids.astype(np.int64)) if ids.dtype.kind in "iu" else pa.array(ids.astype(str), pa.string())
    with atomic_path(path) as tmp:
        pq.write_table(pa.table({"id": col}), tmp)


def check_vectors(vectors: np.ndarray, dim: int | None, where: str) -> np.ndarray:
    """Validate one block of descriptors; return it as a 2-D float array."""
    v = np.asarray(vectors)
    if v.ndim != 2:
        raise FormatError(f"descriptors must be a 2-D array (rows, dim), got shape {v.shape}", path=where)
    if dim is not None and v.shape[1] != dim:
        raise FormatError(f"descriptor dimension {v.shape[1]} does not match the set's {dim}", path=where,
                          hint="all descriptors of a set come from one backbone and pooling")
    finite = np.isfinite(v).all(axis=1)
    if not finite.all():
        raise FormatError("NaN or infinite value", path=where, row=int(np.flatnonzero(~finite)[0]),
                          hint="check the extractor's dtype (fp16 overflow) and its inputs")
    norms = np.linalg.norm(v.astype(np.float32), axis=1)
    bad = np.abs(norms - 1.0) > NORM_TOLERANCE
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise FormatError(f"descriptor is not L2-normalised (norm {norms[i]:.4f})", path=where, row=i,
                          hint="normalise with v / ||v|| before storing (cosine scores assume unit vectors)")
    return v


@dataclass(frozen=True)
class DescriptorSet:
    root: Path
    manifest: dict

    @classmethod
    def open(cls, root) -> "DescriptorSet":
        root = Path(root)
        path = root / "manifest.json"
        if not path.exists():
            raise FormatError("no manifest.json: not a descriptor set, or its writing was interrupted",
                              path=str(root), hint="re-run the extraction; finished shards are kept")
        manifest = json.loads(path.read_text())
        if manifest.get("format") != FORMAT:
            raise FormatError("manifest is not an rscale descriptor set", path=str(path))
        if int(manifest.get("version", 0)) > VERSION:
            raise FormatError(f"descriptor set version {manifest['version']} is newer than this rscale reads",
                              path=str(path), hint="upgrade rscale")
        return cls(root, manifest)

    @property
    def dim(self) -> int:
        return int(self.manifest["dim"])

    @property
    def count(self) -> int:
        return int(self.manifest["count"])

    def ids(self) -> np.ndarray:
        import pyarrow.parquet as pq
        return np.concatenate([pq.read_table(self.root / s["ids"]).column("id").to_numpy(zero_copy_only=False)
                               for s in self.manifest["shards"]])

    def verify(self) -> list[str]:
        """Shard files whose digest differs from the manifest (empty when all are intact)."""
        return [name for i in range(len(self.manifest["shards"])) for name in self.verify_shard(i)]

    def verify_shard(self, index: int) -> list[str]:
        """The files of shard ``index`` whose digest differs from the manifest."""
        s = self.manifest["shards"][index]
        bad = []
        for key, digest in (("vectors", s["sha256_vectors"]), ("ids", s["sha256_ids"])):
            p = self.root / s[key]
            if not p.exists() or sha256_file(p) != digest:
                bad.append(s[key])
        return bad

    def shard(self, index: int):
        """(ids, vectors) of shard ``index``; vectors memory-mapped in their stored dtype."""
        import pyarrow.parquet as pq
        s = self.manifest["shards"][index]
        vec_path = self.root / s["vectors"]
        try:
            vectors = np.load(vec_path, mmap_mode="r")
        except (OSError, ValueError) as exc:
            raise FormatError(f"corrupt shard ({exc})", path=str(vec_path),
                              hint="run DescriptorSet.verify() and re-extract the shard") from None
        if vectors.shape != (s["count"], self.dim):
            raise FormatError(f"shard has shape {vectors.shape}, manifest says ({s['count']}, {self.dim})",
                              path=str(vec_path), hint="re-extract the shard")
        ids = pq.read_table(self.root / s["ids"]).column("id").to_numpy(zero_copy_only=False)
        return ids, vectors

    def shards(self):
        """Yield (ids, vectors) per shard; vectors memory-mapped in their stored dtype."""
        for i in range(len(self.manifest["shards"])):
            yield self.shard(i)

    def chunks(self, chunk: int = 16384, keep=None):
        """Yield float32 blocks of at most ``chunk`` rows; ``keep(ids) -> mask`` filters rows
        (a sample) before the vectors are touched."""
        for ids, vectors in self.shards():
            mask = None if keep is None else keep(ids)
            for a in range(0, len(ids), chunk):
                b = min(a + chunk, len(ids))
                if mask is None:
                    yield np.asarray(vectors[a:b], dtype=np.float32)
                else:
                    m = mask[a:b]
                    if m.any():
                        yield np.asarray(vectors[a:b][m], dtype=np.float32)


def write_descriptor_set(root, blocks, *, role: str, dtype: str = "float16", meta: dict | None = None,
                         shard_size: int = 1 << 20, recipe: dict | None = None) -> DescriptorSet:
    """Write (ids, vectors) blocks as shards of ``shard_size`` rows; resumable; manifest last.

    ``blocks`` is an iterable of (ids, vectors) pairs; they are re-cut into shards. ``recipe``:
    what determines the vectors; a folder holding shards of another recipe is refused before
    anything is written (:func:`check_recipe`). The role, dtype and shard size are always part of
    it; without one, ``meta`` stands in.
    """
    if dtype not in ("float16", "float32"):
        raise InvalidArgumentError(f"dtype must be float16 or float32, got {dtype!r}")
    root = Path(root)
    recipe = _canonical({"role": role, "dtype": dtype, "shard_size": shard_size,
                         **(meta or {} if recipe is None else recipe)})
    check_recipe(root, recipe)
    root.mkdir(parents=True, exist_ok=True)
    (root / "manifest.json").unlink(missing_ok=True)     # the set is invisible until complete
    write_text_atomic(root / RECIPE_FILE, json.dumps(recipe, indent=2, sort_keys=True))
    from rscale.store.unique_ids import UniqueIds
    shards, seen, dim, count = [], UniqueIds(), None, 0
    buf_ids, buf_vec = [], []

    def flush(ids, vec, index):
        name = f"shard-{index:05d}"
        vp, ip = root / f"{name}.npy", root / f"{name}.ids.parquet"
        arr = np.ascontiguousarray(vec, dtype=dtype)
        if not (vp.exists() and ip.exists()):
            _atomic_np(vp, arr)
            _atomic_ids(ip, ids)
        return {"vectors": vp.name, "ids": ip.name, "count": int(len(ids)),
                "sha256_vectors": sha256_file(vp), "sha256_ids": sha256_file(ip)}

    for ids, vectors in blocks:
        ids = np.asarray(ids)
        v = check_vectors(vectors, dim, f"{root} (rows {count}..{count + len(ids) - 1})")
        dim = v.shape[1]
        if len(ids) != len(v):
            raise FormatError(f"{len(ids)} ids for {len(v)} vectors", path=str(root))
        def earlier():                          # only to confirm a string-hash match
            import pyarrow.parquet as pq
            for s in shards:
                yield pq.read_table(root / s["ids"]).column("id").to_numpy(zero_copy_only=False)
            yield from buf_ids

        dup = seen.add(ids, earlier)
        if dup is not None:
            raise FormatError(f"duplicate id {dup.item() if hasattr(dup, 'item') else dup!r}", path=str(root),
                              hint="ids identify descriptors; each must be unique within the set")
        buf_ids.append(ids)
        buf_vec.append(v)
        count += len(ids)
        while sum(len(b) for b in buf_ids) >= shard_size:
            all_ids, all_vec = np.concatenate(buf_ids), np.concatenate(buf_vec)
            shards.append(flush(all_ids[:shard_size], all_vec[:shard_size], len(shards)))
            buf_ids, buf_vec = [all_ids[shard_size:]], [all_vec[shard_size:]]
    if buf_ids and sum(len(b) for b in buf_ids):
        shards.append(flush(np.concatenate(buf_ids), np.concatenate(buf_vec), len(shards)))
    if dim is None:
        raise FormatError("no descriptors to write", path=str(root))
    manifest = {"format": FORMAT, "version": VERSION, "role": role, "dtype": dtype, "dim": dim,
                "count": count, "shards": shards, **(meta or {}), "recipe": recipe}
    write_text_atomic(root / "manifest.json", json.dumps(manifest, indent=2, sort_keys=True))
    return DescriptorSet(root, manifest)
