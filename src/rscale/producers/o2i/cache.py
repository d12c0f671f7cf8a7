"""Content-addressed render cache and the render-set manifest.

Layout under a cache directory::

    renders/<2 hex>/<64 hex>.png        the render (RGB, background neutral gray)
    renders/<2 hex>/<64 hex>.mask.png   its object mask (1-bit)
    assets/<32 hex>/mesh.obj            user meshes converted to OBJ (rscale.producers.o2i.assets)
    manifests/<16 hex>.parquet          a render set's manifest (unless another path is given)

A render's key is the sha256 of the canonical JSON of everything that decides its pixels: the
asset's identity (mesh-file digest, URDF scale, rpy, colour), its orientation, the distance, the
camera / light / background / resolution, and the renderer version (pybullet's version and
``RENDER_CODE_VERSION`` for the TinyRenderer; pyrender's, PyOpenGL's, the GL renderer's and
``PBR_CODE_VERSION`` for pyrender, plus the user GLB's own digest, which it draws). A render whose two files exist is read, never redrawn, so re-running
renders nothing new; a changed parameter changes the key and renders only what it changes. A
cached file that does not decode (damaged outside rscale) is drawn again.

The manifest (one row per object x distance, in asset order then distance order) is written last,
under a temporary name then renamed; render files are written the same way. Every asset is
checked (file present, readable, not degenerate) before anything is rendered; an object clipped at
a distance stops the run with no manifest (the renders already in the cache are complete files).

Manifest columns: ``object_id``, ``distance_index``, ``distance``, ``path``, ``mask_path``
(relative to the manifest's folder), ``image_sha256``, ``o2i``, ``bbox_x0/y0/x1/y1`` (x1, y1
exclusive), ``width``, ``height``, ``asset_digest``, ``asset_source``, ``licence``,
``render_key``. File metadata: ``rscale.format`` = ``o2i-renders``, ``rscale.schema_version`` = 1,
``rscale.protocol`` (JSON), ``rscale.renderer``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from rscale.errors import FormatError, InvalidArgumentError, SchemaVersionError
from rscale.producers.o2i.assets import Asset, normalisation
from rscale.producers.o2i.images import object_bbox, object_o2i
from rscale.producers.o2i.render import (DEFAULT_RENDERER, RenderProtocol, check_renderer, object_orientation,
                                         open_renderer, renderer_version)
from rscale.store.atomic import atomic_path
from rscale.store.hashing import canonical_digest, sha256_file

FORMAT = "o2i-renders"
SCHEMA_VERSION = 1
COLUMNS = ("object_id", "distance_index", "distance", "path", "mask_path", "image_sha256", "o2i",
           "bbox_x0", "bbox_y0", "bbox_x1", "bbox_y1", "width", "height", "asset_digest", "asset_source",
           "licence", "render_key")


def render_key(asset: Asset, distance: float, protocol: RenderProtocol, renderer: str = DEFAULT_RENDERER) -> str:
    """sha256 of everything that decides one render's pixels (hex, no prefix); ``renderer`` is a
    name of RENDERERS (its version string goes in, so the same object drawn by two renderers has
    two keys; pyrender reads a user GLB itself, so its digest goes in too)."""
    ident = {"asset": asset.identity(), "orientation": list(object_orientation(asset, protocol)),
             "distance": float(distance), "camera": protocol.camera(), "renderer": renderer_version(renderer)}
    if renderer != DEFAULT_RENDERER and asset.original_digest:
        ident["original"] = asset.original_digest
    return canonical_digest(ident).split(":", 1)[1]


@dataclass(frozen=True)
class RenderRecord:
    object_id: str
    distance_index: int
    distance: float
    path: Path
    mask_path: Path
    image_sha256: str
    o2i: float
    bbox: tuple
    width: int
    height: int
    asset_digest: str
    asset_source: str
    licence: str
    render_key: str

    def image(self) -> np.ndarray:
        return load_rgb(self.path)

    def mask(self) -> np.ndarray:
        return load_mask(self.mask_path)


@dataclass
class RenderSet:
    """The renders of a list of assets under one protocol (treat as read-only); ``rendered`` counts
    the frames the call that made it drew."""

    manifest: Path
    protocol: dict
    renderer: str
    records: list
    rendered: int = 0

    @property
    def object_ids(self) -> list[str]:
        return list(dict.fromkeys(r.object_id for r in self.records))

    @property
    def distances(self) -> list[float]:
        return list(self.protocol["distances"])

    @cached_property
    def _index(self) -> dict:
        return {(r.object_id, r.distance_index): r for r in self.records}

    def record(self, object_id: str, distance_index: int) -> RenderRecord:
        try:
            return self._index[object_id, distance_index]
        except KeyError:
            raise InvalidArgumentError(f"no render of object '{object_id}' at distance index {distance_index} "
                                       f"({len(self.object_ids)} objects, {len(self.distances)} distances)") from None

    def o2i_matrix(self) -> np.ndarray:
        """(objects, distances) O2I of every render, rows in object order."""
        out = np.full((len(self.object_ids), len(self.distances)), np.nan)
        row = {o: i for i, o in enumerate(self.object_ids)}
        for r in self.records:
            out[row[r.object_id], r.distance_index] = r.o2i
        return out

    def items(self, distance_index: int | None = None) -> list[tuple]:
        """(id, image path, None) triples for ``rscale.producers.extract.extract``; id is
        ``<object>@d<k>``."""
        return [(f"{r.object_id}@d{r.distance_index}", r.path, None) for r in self.records
                if distance_index is None or r.distance_index == distance_index]

    def content_digest(self) -> str:
        """The set's identity: sha256 over (object, distance index, image digest) of every render."""
        return canonical_digest([[r.object_id, r.distance_index, r.image_sha256] for r in self.records])

    def lineage(self) -> dict:
        """What made the set: protocol, renderer version, each asset's digest and licence, and the
        renders' content digest."""
        assets = {r.object_id: {"digest": r.asset_digest, "source": r.asset_source, "licence": r.licence}
                  for r in self.records}
        return {"protocol": self.protocol, "renderer": self.renderer, "assets": assets,
                "renders": self.content_digest()}

    def verify(self) -> dict:
        """Re-hash every render against the manifest: {"checked", "missing": [paths], "corrupt": [paths]}."""
        missing, corrupt = [], []
        for r in self.records:
            if not (r.path.is_file() and r.mask_path.is_file()):
                missing.append(str(r.path))
            elif sha256_file(r.path) != r.image_sha256:
                corrupt.append(str(r.path))
        return {"checked": len(self.records), "missing": missing, "corrupt": corrupt}


def load_rgb(path) -> np.ndarray:
    from PIL import Image
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def load_mask(path) -> np.ndarray:
    from PIL import Image
    with Image.open(path) as im:
        return np.asarray(im.convert("1"), dtype=bool)


def _atomic_png(array: np.ndarray, path: Path) -> None:
    """A render, written under a temporary name and renamed (a cache entry: rebuilt if lost, so
    not fsynced one by one; the manifest, written last, is)."""
    from PIL import Image
    with atomic_path(path, durable=False) as tmp:
        Image.fromarray(array).save(tmp, format="PNG", compress_level=3)


def _render_paths(cache_dir: Path, key: str) -> tuple[Path, Path]:
    folder = cache_dir / "renders" / key[:2]
    return folder / f"{key}.png", folder / f"{key}.mask.png"


def _record(asset: Asset, k: int, distance: float, key: str, path: Path, mask_path: Path,
            mask: np.ndarray | None = None) -> RenderRecord:
    """The manifest row of a render on disk (``mask`` given: just written; else the files are
    checked: the mask decoded, the image's PNG chunks and CRCs verified)."""
    if mask is None:
        from PIL import Image
        mask = load_mask(mask_path)
        with Image.open(path) as im:
            im.verify()
    return RenderRecord(asset.id, k, float(distance), path, mask_path,
                        sha256_file(path), object_o2i(mask),
                        object_bbox(mask), int(mask.shape[1]), int(mask.shape[0]), asset.digest, asset.source,
                        asset.licence, key)


def _draw(renderer, asset: Asset, protocol: RenderProtocol, todo: list, paths: list) -> dict:
    """Render the distances ``todo`` of one asset and write them (temp name, rename): {k: mask}."""
    frames = renderer.render_distances(asset, protocol, [protocol.distances[k] for k in todo])
    masks = {}
    for k, frame in zip(todo, frames):
        path, mask_path = paths[k]
        path.parent.mkdir(parents=True, exist_ok=True)
        _atomic_png(frame.rgb, path)
        _atomic_png(frame.mask, mask_path)
        masks[k] = frame.mask
    return masks


_WORKER_RENDERERS: dict = {}


def _draw_in_worker(name, asset, protocol, todo, paths) -> int:
    if name not in _WORKER_RENDERERS:
        _WORKER_RENDERERS[name] = open_renderer(name)
    _draw(_WORKER_RENDERERS[name], asset, protocol, todo, paths)
    return len(todo)


def render_set(assets, protocol: RenderProtocol | None = None, cache_dir="o2i-cache", manifest=None,
               renderer=DEFAULT_RENDERER, progress: bool = True, workers: int = 1) -> RenderSet:
    """Render every asset at every protocol distance (cached), then write the manifest.

    ``renderer``: a name of RENDERERS (``tinyrenderer``, the default, or ``pyrender``; one is
    opened and closed), or an open renderer to reuse (TinyRenderer, PyrenderRenderer). ``workers``
    > 1 renders objects in that many processes (one renderer each; the pixels do not depend on
    it). ``manifest``: its path (default ``<cache_dir>/manifests/<digest>.parquet``)."""
    from rich.progress import Progress

    name = check_renderer(renderer if isinstance(renderer, str) else renderer.name)
    version = renderer_version(name)     # a renderer that cannot run here is refused before any object is read
    protocol = protocol or RenderProtocol()
    assets = list(assets)
    if not assets:
        raise InvalidArgumentError("no objects to render: give at least one asset")
    if int(workers) < 1:
        raise InvalidArgumentError(f"workers must be >= 1, got {workers}")
    ids = [a.id for a in assets]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise InvalidArgumentError(f"duplicate object ids {dup}: each object must have its own id")
    for a in assets:                     # refuse missing / unreadable / degenerate meshes before rendering
        normalisation(a)
    cache_dir = Path(cache_dir)
    keys = [[render_key(a, d, protocol, name) for d in protocol.distances] for a in assets]
    paths = [[_render_paths(cache_dir, k) for k in ks] for ks in keys]
    if manifest is None:
        digest = canonical_digest([[a.id, ks] for a, ks in zip(assets, keys)]).split(":", 1)[1]
        manifest = cache_dir / "manifests" / f"{digest[:16]}.parquet"
    manifest = Path(manifest)

    def record(i, k, mask=None):
        return _record(assets[i], k, protocol.distances[k], keys[i][k], *paths[i][k], mask)

    done, todo = {}, {}
    with Progress(disable=not progress, transient=True) as bar:
        task = bar.add_task("rendering", total=len(assets) * len(protocol.distances))
        for i in range(len(assets)):
            for k in range(len(protocol.distances)):
                try:
                    done[i, k] = record(i, k)
                    bar.advance(task)
                except (OSError, ValueError, SyntaxError):      # absent, or damaged outside rscale: redraw
                    todo.setdefault(i, []).append(k)
        rendered = 0
        if todo and int(workers) > 1 and len(todo) > 1:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor, as_completed

            with ProcessPoolExecutor(min(int(workers), len(todo)), mp_context=multiprocessing.get_context("spawn")) as ex:
                futures = {ex.submit(_draw_in_worker, name, assets[i], protocol, ks, paths[i]): i
                           for i, ks in todo.items()}
                try:
                    for f in as_completed(futures):
                        n = f.result()
                        rendered += n
                        bar.advance(task, n)
                except BaseException:
                    ex.shutdown(cancel_futures=True)
                    raise
            for i, ks in todo.items():
                for k in ks:
                    done[i, k] = record(i, k)
        elif todo:
            own = isinstance(renderer, str)
            renderer = open_renderer(name) if own else renderer
            try:
                for i, ks in todo.items():
                    for k, mask in _draw(renderer, assets[i], protocol, ks, paths[i]).items():
                        done[i, k] = record(i, k, mask)
                        rendered += 1
                        bar.advance(task)
            finally:
                if own:
                    renderer.close()
    records = [done[i, k] for i in range(len(assets)) for k in range(len(protocol.distances))]
    result = RenderSet(manifest, protocol.to_dict(), version, records, rendered)
    write_manifest(result)
    return result


def write_manifest(rs: RenderSet) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(rs.manifest)
    path.parent.mkdir(parents=True, exist_ok=True)
    base = path.parent.resolve()
    rows = {c: [] for c in COLUMNS}
    for r in rs.records:
        for c in COLUMNS:
            if c.startswith("bbox_"):
                rows[c].append(r.bbox[("x0", "y0", "x1", "y1").index(c[5:])])
            elif c in ("path", "mask_path"):
                rows[c].append(os.path.relpath(Path(getattr(r, c)).resolve(), base))
            else:
                rows[c].append(getattr(r, c))
    table = pa.table(rows).replace_schema_metadata({
        "rscale.format": FORMAT, "rscale.schema_version": str(SCHEMA_VERSION),
        "rscale.protocol": json.dumps(rs.protocol, sort_keys=True), "rscale.renderer": rs.renderer})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
    return path


def read_render_set(manifest) -> RenderSet:
    """A render set from its manifest (paths resolved against the manifest's folder)."""
    import pyarrow.parquet as pq

    path = Path(manifest)
    if not path.is_file():
        raise FormatError("render manifest not found", path=str(path), hint="Run the rendering step first")
    try:
        table = pq.read_table(path)
    except Exception as e:
        raise FormatError(f"not a Parquet file ({type(e).__name__})", path=str(path)) from None
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    if meta.get("rscale.format") != FORMAT:
        raise FormatError(f"not an O2I render manifest (rscale.format={meta.get('rscale.format')!r})", path=str(path))
    if int(meta.get("rscale.schema_version", "1")) > SCHEMA_VERSION:
        raise SchemaVersionError(f"written by a newer schema version {meta['rscale.schema_version']}", path=str(path),
                                 hint="Upgrade rscale")
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise FormatError(f"missing columns {missing}", path=str(path))
    d = table.to_pydict()
    def resolve(rel: str) -> Path:
        return Path(os.path.normpath(path.parent / rel))

    records = [RenderRecord(d["object_id"][i], int(d["distance_index"][i]), float(d["distance"][i]),
                            resolve(d["path"][i]), resolve(d["mask_path"][i]), d["image_sha256"][i], float(d["o2i"][i]),
                            tuple(int(d[f"bbox_{c}"][i]) for c in ("x0", "y0", "x1", "y1")), int(d["width"][i]),
                            int(d["height"][i]), d["asset_digest"][i], d["asset_source"][i], d["licence"][i],
                            d["render_key"][i])
               for i in range(table.num_rows)]
    return RenderSet(path, json.loads(meta["rscale.protocol"]), meta.get("rscale.renderer", ""), records)
