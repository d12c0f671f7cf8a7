"""Objects for the controlled O2I benchmark: the meshes in the pybullet wheel and user meshes.

An :class:`Asset` is one object: an OBJ file pybullet can load, where it came from, its licence and
a content digest (sha256 over the mesh file, its ``mtllib`` files and the textures those name, in
a fixed order), plus the pose and colour its URDF gives it (mesh scale, visual rpy, rgba).

Default objects (:func:`pybullet_assets`), all from ``pybullet_data.getDataPath()``:

* ``random_000`` .. ``random_999``: the procedurally generated meshes under ``random_urdfs/``
  (each URDF's random colour): 999 of the 1,000, ``random_168`` has only NaN vertices;
* ``REAL_OBJECTS``: the real-world meshes (Stanford bunny, textured duck, mug, teddy, soccer ball,
  lego brick, jenga block, domino, torus, textured sphere, tray and five toy shapes).

Licences were read from the wheel: it ships no per-asset licence file except ``domino/license.txt``;
the duck's COLLADA source (``duck.dae``) carries Sony's SCEA Shared Source License; the bunny is
the Stanford 3D Scanning Repository's bunny, decimated (the file names no source; the
repository's terms ask for credit); everything else falls under the wheel's ``LICENSE.txt``
(zlib). See docs/o2i.md.

User meshes (:func:`user_assets`: OBJ, GLB/GLTF, PLY, STL, OFF) are read with trimesh, refused
when degenerate, and converted once to OBJ (+ MTL and texture when the mesh has one) under
``<cache>/assets/<sha256 of the user's file>/``, so a file is converted once wherever it lives.
The asset's digest is that of the converted files (what the TinyRenderer reads). Vertex colours
are not carried over (pybullet's OBJ path has none). A GLB also keeps its own path and digest
(``original``): the pyrender renderer (rscale.producers.o2i.pbr) draws the file itself, with its
PBR materials, textures and vertex colours.

Every object is normalised when rendered (:func:`normalisation`): the centre of its bounding box
goes to the origin and it is scaled so its farthest vertex lies at distance 1 (a unit bounding
sphere), so a camera distance means the same for every object.
"""

from __future__ import annotations

import os
import re
import shutil
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from rscale.errors import FormatError, InvalidArgumentError, MissingExtraError, NotFoundError
from rscale.store.hashing import hex_of, sha256_bytes, sha256_file

ZLIB = "Zlib"
WHEEL_LICENCE = "pybullet wheel LICENSE.txt (no per-asset licence file)"

# id, file under pybullet_data (URDF for pose/colour, or a bare OBJ), licence, where it was read
REAL_OBJECTS = (
    ("bunny", "bunny.obj", "Stanford-3D-Scanning-Repository",
     "decimated Stanford bunny; no licence file in the wheel (the repository asks for credit)"),
    ("duck", "duck_vhacd.urdf", "SCEA-Shared-Source-1.0", "duck.dae <copyright>: Sony Computer Entertainment 2006"),
    ("soccerball", "soccerball.urdf", ZLIB, "soccerball.obj header (Erwin Coumans); " + WHEEL_LICENCE),
    ("teddy", "teddy_vhacd.urdf", ZLIB, WHEEL_LICENCE),
    ("mug", "objects/mug.urdf", ZLIB, WHEEL_LICENCE),
    ("lego", "lego/lego.urdf", ZLIB, WHEEL_LICENCE),
    ("jenga", "jenga/jenga.urdf", ZLIB, WHEEL_LICENCE),
    ("domino", "domino/domino.urdf", ZLIB, "domino/license.txt (Erwin Coumans; cite PyBullet); " + WHEEL_LICENCE),
    ("torus", "torus/torus_textured.obj", ZLIB, WHEEL_LICENCE),
    ("sphere", "sphere2.urdf", ZLIB, WHEEL_LICENCE),
    ("tray", "tray/traybox.urdf", ZLIB, WHEEL_LICENCE),
    ("toy_concave_box", "toys/concave_box.urdf", ZLIB, WHEEL_LICENCE),
    ("toy_cube", "toys/cube.obj", ZLIB, WHEEL_LICENCE),
    ("toy_cylinder", "toys/cylinder.obj", ZLIB, WHEEL_LICENCE),
    ("toy_prism", "toys/prism.obj", ZLIB, WHEEL_LICENCE),
    ("toy_shape_sorter", "toys/shape_sorter.obj", ZLIB, WHEEL_LICENCE),
)
N_RANDOM = 1000
# Shipped but unrenderable (every one of the 1,000 checked with load_mesh_vertices): left out of the defaults.
BROKEN_RANDOM = {168: "random_urdfs/168/168.obj: all 35 vertices are NaN"}
USER_FORMATS = (".obj", ".glb", ".gltf", ".ply", ".stl", ".off")
DEFAULT_COLOR = (0.85, 0.75, 0.55, 1.0)      # untextured, no URDF / MTL colour: a light tan, not the gray background


@dataclass(frozen=True)
class Asset:
    """One object: an OBJ file pybullet loads, its provenance and its content digest."""

    id: str
    path: str                                   # the OBJ file
    source: str                                 # "pybullet_data" or "user"
    licence: str
    licence_source: str                         # where the licence was read
    digest: str                                 # sha256 over the mesh, material and texture files
    scale: tuple = (1.0, 1.0, 1.0)              # URDF mesh scale (before normalisation)
    rpy: tuple = (0.0, 0.0, 0.0)                # URDF visual rotation
    color: tuple | None = None                  # rgba; None: white on a texture, else DEFAULT_COLOR
    textured: bool = False
    original: str | None = None                 # a user GLB itself (pyrender draws it with its PBR materials)
    original_digest: str | None = None          # sha256 of that file

    @property
    def render_color(self) -> tuple:
        if self.color is not None:
            return tuple(self.color)
        return (1.0, 1.0, 1.0, 1.0) if self.textured else DEFAULT_COLOR

    def identity(self) -> dict:
        """What of the asset decides its pixels (goes into every render key)."""
        return {"digest": self.digest, "scale": list(self.scale), "rpy": list(self.rpy),
                "color": list(self.render_color)}


def _data_path() -> Path:
    try:
        import pybullet_data
    except ImportError:
        raise MissingExtraError("pybullet", "o2i") from None
    return Path(pybullet_data.getDataPath())


def mesh_files(obj_path) -> tuple[list[Path], bool]:
    """The OBJ, its existing ``mtllib`` files and the existing textures they name; and whether any
    texture exists (files a renderer reads, in a fixed order)."""
    obj_path = Path(obj_path)
    if not obj_path.is_file():
        raise NotFoundError(f"mesh file {obj_path} does not exist. Reinstall pybullet or check the path")
    files, textured = [obj_path], False
    text = obj_path.read_text(errors="replace")
    for mtl_name in re.findall(r"^\s*mtllib\s+(.+?)\s*$", text, flags=re.M):
        mtl = obj_path.parent / mtl_name
        if not mtl.is_file():
            continue
        files.append(mtl)
        for tex_name in re.findall(r"^\s*map_\w+\s+(.+?)\s*$", mtl.read_text(errors="replace"), flags=re.M):
            tex = mtl.parent / tex_name.split()[-1]
            if tex.is_file() and tex not in files:
                files.append(tex)
                textured = True
    return files, textured


def material_color(files) -> tuple | None:
    """The first ``Kd`` (diffuse colour) of the first MTL among ``files`` as rgba, or None."""
    for f in files:
        if Path(f).suffix.lower() == ".mtl":
            m = re.search(r"^\s*Kd\s+(\S+)\s+(\S+)\s+(\S+)", Path(f).read_text(errors="replace"), flags=re.M)
            if m:
                return tuple(float(x) for x in m.groups()) + (1.0,)
    return None


def files_digest(files) -> str:
    """sha256 over (file name, sha256 of its bytes) of each file, in the order given."""
    return sha256_bytes(b"".join(Path(f).name.encode() + b"\0" + bytes.fromhex(hex_of(sha256_file(f)))
                                 for f in files))


def _floats(text: str | None, n: int, default: tuple) -> tuple:
    if not text:
        return default
    vals = tuple(float(x) for x in text.split())
    return vals if len(vals) == n else default


def _from_urdf(urdf: Path) -> tuple[Path, tuple, tuple, tuple | None]:
    """Mesh file, scale, rpy and rgba of a one-visual URDF."""
    root = ET.parse(urdf).getroot()
    visual = root.find(".//visual")
    mesh = visual.find("geometry/mesh") if visual is not None else None
    if mesh is None:
        raise FormatError("no <visual><geometry><mesh> element", path=str(urdf))
    origin, color = visual.find("origin"), visual.find("material/color")
    return (urdf.parent / mesh.get("filename"), _floats(mesh.get("scale"), 3, (1.0, 1.0, 1.0)),
            _floats(origin.get("rpy") if origin is not None else None, 3, (0.0, 0.0, 0.0)),
            _floats(color.get("rgba"), 4, None) if color is not None else None)


def _pybullet_asset(asset_id: str, rel: str, licence: str, licence_source: str, root: Path) -> Asset:
    path = root / rel
    scale, rpy, color = (1.0, 1.0, 1.0), (0.0, 0.0, 0.0), None
    if path.suffix == ".urdf":
        path, scale, rpy, color = _from_urdf(path)
    files, textured = mesh_files(path)
    if color is None and not textured:
        color = material_color(files)
    return Asset(asset_id, str(path), "pybullet_data", licence, licence_source, files_digest(files),
                 scale, rpy, color, textured)


def pybullet_assets(kind: str = "all", limit: int | None = None) -> list[Asset]:
    """The objects in the pybullet wheel: ``kind`` "real" (REAL_OBJECTS), "random" (the 999
    renderable procedural meshes) or "all" (real first); ``limit`` keeps the first n."""
    if kind not in ("all", "real", "random"):
        raise InvalidArgumentError(f"asset kind must be 'all', 'real' or 'random', got {kind!r}")
    if limit is not None and limit < 1:
        raise InvalidArgumentError(f"asset limit must be >= 1, got {limit}")
    root = _data_path()
    specs = []
    if kind in ("all", "real"):
        specs += [(i, rel, lic, src) for i, rel, lic, src in REAL_OBJECTS]
    if kind in ("all", "random"):
        specs += [(f"random_{k:03d}", f"random_urdfs/{k:03d}/{k:03d}.urdf", ZLIB, WHEEL_LICENCE)
                  for k in range(N_RANDOM) if k not in BROKEN_RANDOM]
    return [_pybullet_asset(*s, root) for s in specs[:limit]]


def _trimesh():
    try:
        import trimesh
    except ImportError:
        raise MissingExtraError("trimesh", "o2i") from None
    return trimesh


def load_mesh_vertices(path, object_id: str = "") -> np.ndarray:
    """Vertices a mesh file's faces use (float64, (n, 3)); refuses missing, unreadable and
    degenerate meshes (no faces, non-finite vertices, zero extent, zero area)."""
    trimesh = _trimesh()
    path = Path(path)
    what = f"object '{object_id}': " if object_id else ""
    if not path.is_file():
        raise NotFoundError(f"{what}mesh file {path} does not exist. Check the path (or drop the object)")
    try:
        mesh = trimesh.load(str(path), force="mesh", process=False, skip_materials=True)
    except Exception as e:                        # trimesh raises many types for bad files
        raise FormatError(f"{what}cannot read the mesh ({type(e).__name__}: {e})", path=str(path),
                          hint="Give an OBJ, GLB, PLY, STL or OFF file trimesh can open") from None
    faces = np.asarray(getattr(mesh, "faces", np.empty((0, 3))))
    verts = np.asarray(getattr(mesh, "vertices", np.empty((0, 3))), dtype=np.float64)
    if faces.size == 0 or verts.size == 0:
        raise FormatError(f"{what}the mesh has no faces", path=str(path), hint="Give a surface mesh, not a point cloud")
    used = verts[np.unique(faces)]
    if not np.isfinite(used).all():
        raise FormatError(f"{what}the mesh has non-finite vertices", path=str(path), hint="Repair or re-export the mesh")
    extent = used.max(axis=0) - used.min(axis=0)
    area = float(getattr(mesh, "area", 0.0))
    if not (extent > 0).any() or not area > 0:
        raise FormatError(f"{what}degenerate mesh (extent {extent.tolist()}, surface area {area:g})", path=str(path),
                          hint="Its faces span no surface; drop it or repair it")
    return used


@lru_cache(maxsize=4096)
def _normalisation(path: str, digest: str, scale: tuple, object_id: str) -> tuple[tuple, float]:
    v = load_mesh_vertices(path, object_id) * np.asarray(scale, dtype=np.float64)
    centre = (v.min(axis=0) + v.max(axis=0)) / 2
    radius = float(np.linalg.norm(v - centre, axis=1).max())
    if not radius > 0:
        raise FormatError(f"object '{object_id}': degenerate mesh (zero extent after its scale {list(scale)})",
                          path=path, hint="Give a non-zero mesh scale")
    return tuple(float(c) for c in centre), radius


def normalisation(asset: Asset) -> tuple[tuple, float]:
    """(centre, radius) of the asset after its URDF scale: the bounding box's centre and the
    largest distance of a used vertex from it. Rendering maps x -> (x - centre) / radius."""
    return _normalisation(asset.path, asset.digest, tuple(asset.scale), asset.id)


def _obj_export(mesh) -> tuple[str, dict]:
    trimesh = _trimesh()
    try:
        text, extra = trimesh.exchange.obj.export_obj(mesh, include_texture=True, return_texture=True,
                                                      mtl_name="material.mtl")
    except Exception:                             # materials trimesh cannot export: geometry only
        text, extra = trimesh.exchange.obj.export_obj(mesh, include_texture=False, return_texture=True), {}
        text = text[0] if isinstance(text, tuple) else text
    return text, extra


def user_assets(paths, cache_dir, licence: str = "unspecified", ids=None) -> list[Asset]:
    """Assets from user mesh files, converted to OBJ under ``<cache_dir>/assets/<digest>/``.

    ``ids`` defaults to the file stems (they must be unique); ``licence`` is recorded as given."""
    trimesh = _trimesh()
    paths = [Path(p) for p in paths]
    ids = list(ids) if ids is not None else [p.stem for p in paths]
    if len(ids) != len(paths):
        raise InvalidArgumentError(f"{len(ids)} ids for {len(paths)} mesh files: give one id per file")
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise InvalidArgumentError(f"duplicate object ids {dup}: rename the files or pass ids")
    out = []
    for object_id, path in zip(ids, paths):
        if path.suffix.lower() not in USER_FORMATS:
            raise FormatError(f"object '{object_id}': unsupported mesh format '{path.suffix}'", path=str(path),
                              hint=f"Convert it to one of {', '.join(USER_FORMATS)}")
        load_mesh_vertices(path, object_id)        # refuses missing / unreadable / degenerate first
        digest = sha256_file(path)
        target = Path(cache_dir) / "assets" / digest.split(":")[1][:32]
        obj = target / "mesh.obj"
        if not obj.is_file():
            mesh = trimesh.load(str(path), force="mesh", process=False)
            text, extra = _obj_export(mesh)
            tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            (tmp / "mesh.obj").write_text(text)
            for name, data in extra.items():
                (tmp / name).write_bytes(data)
            try:
                os.replace(tmp, target)
            except OSError:                        # another process converted it first
                shutil.rmtree(tmp, ignore_errors=True)
        files, textured = mesh_files(obj)
        glb = path.suffix.lower() == ".glb"       # self-contained: its digest covers its textures
        out.append(Asset(object_id, str(obj), "user", licence, f"given by the user for {path.name}",
                         files_digest(files), color=None if textured else material_color(files), textured=textured,
                         original=str(path.resolve()) if glb else None, original_digest=digest if glb else None))
    return out


def load_trimesh_scene(path, object_id: str = ""):
    """A mesh file as a trimesh Scene with its materials (what the pyrender renderer draws)."""
    trimesh = _trimesh()
    try:
        return trimesh.load(str(path), force="scene", process=False)
    except Exception as e:                        # trimesh raises many types for bad files
        raise FormatError(f"{'object ' + repr(object_id) + ': ' if object_id else ''}cannot read the mesh "
                          f"({type(e).__name__}: {e})", path=str(path), hint="Give a mesh file trimesh can open") from None


ASSET_PARAMS = ("kind", "limit", "meshes", "licence")


def assets_from_params(params: dict | None, cache_dir) -> list[Asset]:
    """The object list of a params.yaml section: ``kind`` (all / real / random / none, default
    all), ``limit`` (first n of those), ``meshes`` (user mesh files, appended) and ``licence``
    (recorded for the user meshes). Unknown keys are refused by name."""
    params = dict(params or {})
    unknown = sorted(set(params) - set(ASSET_PARAMS))
    if unknown:
        raise InvalidArgumentError(f"unknown object parameter(s) {unknown} (known: {', '.join(ASSET_PARAMS)})")
    kind = params.get("kind", "all")
    out = [] if kind == "none" else pybullet_assets(kind, params.get("limit"))
    meshes = params.get("meshes") or []
    if isinstance(meshes, str):
        meshes = [meshes]
    if meshes:
        out += user_assets(meshes, cache_dir, licence=params.get("licence", "unspecified"))
    if not out:
        raise InvalidArgumentError("no objects: set kind to all / real / random or list meshes")
    return out

