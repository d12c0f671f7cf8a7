"""The optional higher-fidelity renderer: pyrender's physically based (metallic-roughness) shading
on a headless EGL context; on a machine without a GPU that is Mesa's llvmpipe, on the CPU.

Install: ``pip install 'rscale[o2i-pbr]'`` (pyrender 0.1.45, which pins PyOpenGL 3.1.0; checked
headless on EGL with pyglet 2.1) plus the system's libEGL and Mesa (Debian: ``libegl1
libegl-mesa0 libgl1-mesa-dri``). ``PYOPENGL_PLATFORM`` is set to ``egl`` unless the environment
already names a platform. Select it with ``o2i.renderer: pyrender`` in params.yaml.

The same :class:`~rscale.producers.o2i.render.RenderProtocol` as the TinyRenderer, so the O2I of
a render does not depend on the renderer (tests/test_render.py checks the two masks agree):

* the object normalised to the unit bounding sphere, URDF scale and rpy, the protocol's
  orientation (pybullet's quaternion, the same numbers);
* the camera: the same look-at (eye at ``d`` along azimuth / elevation, z up) and the same
  vertical field of view, near and far planes;
* the light: one directional light from ``light_direction`` with ``light_color``, radiance
  ``diffuse * pi`` (a Lambertian surface then reflects ``diffuse * albedo * cos``, as
  TinyRenderer's diffuse term), ambient ``ambient * light_color``; no shadows. Specular comes from
  the material's roughness, not ``specular``;
* materials: a user GLB is read as itself (trimesh keeps its PBR materials, textures and vertex
  colours); any other object gets its texture (if any) times ``render_color`` (sRGB, converted to
  linear: pyrender's output is gamma-encoded), metallic 0, roughness 0.7, as the TinyRenderer
  multiplies its texture by the colour; faces are drawn from both sides;
* the mask is the depth buffer's covered pixels (one object in the scene, so it is the object's
  exact segmentation); background and clip checks as the TinyRenderer.

Importing this module loads neither pyrender nor OpenGL.
"""

from __future__ import annotations

import os
from functools import lru_cache

import numpy as np

from rscale.errors import MissingExtraError, MissingSystemLibraryError
from rscale.producers.o2i.assets import Asset, normalisation
from rscale.producers.o2i.render import Frame, RenderProtocol, camera_direction, check_frame, object_orientation

NAME = "pyrender"
# Bump when a change to this module changes pixels (it is part of every pyrender render key).
PBR_CODE_VERSION = 1
EXTRA = "o2i-pbr"
ROUGHNESS = 0.7
EGL_PACKAGES = "libegl1 libegl-mesa0 libgl1-mesa-dri"


def _egl_refusal(detail: str) -> MissingSystemLibraryError:
    return MissingSystemLibraryError(
        f"renderer 'pyrender' needs an EGL context (libEGL + Mesa), which could not be opened ({detail}). Install "
        f"them (Debian/Ubuntu: apt-get install {EGL_PACKAGES}) or use o2i.renderer: tinyrenderer")


def load_pyrender():
    """The pyrender module on the EGL platform; MissingExtraError when the extra is not installed,
    MissingSystemLibraryError when PyOpenGL cannot load libEGL."""
    os.environ.setdefault("PYOPENGL_PLATFORM", "egl")
    try:
        import pyrender
    except ModuleNotFoundError:                  # pyrender, or one of the modules it imports
        raise MissingExtraError("pyrender", EXTRA) from None
    except (ImportError, OSError, AttributeError) as exc:    # PyOpenGL: "Unable to load EGL library"
        raise _egl_refusal(f"{type(exc).__name__}: {exc}") from None
    return pyrender


def _offscreen(pyrender, width: int, height: int):
    try:
        return pyrender.OffscreenRenderer(width, height)
    except Exception as exc:                     # EGL reports a missing device or driver in many types
        raise _egl_refusal(f"{type(exc).__name__}: {exc}") from None


@lru_cache(maxsize=1)
def pbr_renderer_version() -> str:
    """pyrender's and PyOpenGL's versions, the GL platform, the GL renderer and version strings
    (Mesa llvmpipe and a GPU driver shade differently) and this module's code version."""
    from importlib.metadata import version

    pyrender = load_pyrender()
    probe = _offscreen(pyrender, 8, 8)
    try:
        from OpenGL import GL
        gl = f"{GL.glGetString(GL.GL_RENDERER).decode()}; {GL.glGetString(GL.GL_VERSION).decode()}"
    finally:
        probe.delete()
    return (f"pyrender-{version('pyrender')}/pyopengl-{version('PyOpenGL')}/{os.environ['PYOPENGL_PLATFORM']}/"
            f"{gl}/rscale-{PBR_CODE_VERSION}")


def quaternion_matrix(q) -> np.ndarray:
    """3 x 3 rotation of the unit quaternion (x, y, z, w) (pybullet's order)."""
    x, y, z, w = (float(c) for c in q)
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def object_pose(asset: Asset, protocol: RenderProtocol) -> np.ndarray:
    """4 x 4 map of a mesh-file vertex v to R ((v * scale - centre) / radius), as the TinyRenderer
    places it (visual frame at -centre / radius, mesh scale scale / radius, body orientation R)."""
    centre, radius = normalisation(asset)
    place = np.eye(4)
    place[:3, :3] = np.diag(np.asarray(asset.scale, dtype=np.float64) / radius)
    place[:3, 3] = -np.asarray(centre) / radius
    rot = np.eye(4)
    rot[:3, :3] = quaternion_matrix(object_orientation(asset, protocol))
    return rot @ place


def look_at(eye, target=(0.0, 0.0, 0.0), up=(0.0, 0.0, 1.0)) -> np.ndarray:
    """A camera's pose (OpenGL: looks along its -z, y up) at ``eye`` looking at ``target``: the
    inverse of gluLookAt's view matrix, which pybullet's computeViewMatrix builds."""
    eye = np.asarray(eye, dtype=np.float64)
    back = eye - np.asarray(target, dtype=np.float64)
    back /= np.linalg.norm(back)
    right = np.cross(up, back)
    if np.linalg.norm(right) < 1e-9:             # looking along ``up``: any perpendicular will do
        right = np.cross((0.0, 1.0, 0.0), back)
    right /= np.linalg.norm(right)
    pose = np.eye(4)
    pose[:3, 0], pose[:3, 1], pose[:3, 2], pose[:3, 3] = right, np.cross(back, right), back, eye
    return pose


def _srgb_to_linear(c) -> np.ndarray:
    c = np.asarray(c, dtype=np.float64)
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


def _material(pyrender, asset: Asset):
    """An OBJ's material as the TinyRenderer draws it: its first texture (the file the MTL names,
    read here: trimesh does not follow a path out of the mesh's folder) times ``render_color``."""
    from PIL import Image

    from rscale.producers.o2i.assets import mesh_files

    texture = None
    if asset.textured:
        files, _ = mesh_files(asset.path)
        image = next(f for f in files if f.suffix.lower() not in (".obj", ".mtl"))
        with Image.open(image) as im:
            texture = np.asarray(im.convert("RGBA"))
    return pyrender.MetallicRoughnessMaterial(
        baseColorFactor=[*_srgb_to_linear(asset.render_color[:3]), float(asset.render_color[3])],
        baseColorTexture=texture, metallicFactor=0.0, roughnessFactor=ROUGHNESS, doubleSided=True)


def _meshes(pyrender, asset: Asset) -> list:
    """(pyrender Mesh, 4 x 4 pose in the file's frame) of every geometry of the asset's mesh file
    (the user's GLB itself when there is one)."""
    from rscale.producers.o2i.assets import load_trimesh_scene

    scene = load_trimesh_scene(asset.original or asset.path, asset.id)
    material = None if asset.original is not None else _material(pyrender, asset)
    out = []
    for node in scene.graph.nodes_geometry:
        transform, geometry = scene.graph[node]
        mesh = scene.geometry[geometry]
        if not hasattr(mesh, "faces") or len(mesh.faces) == 0:
            continue
        try:
            pm = pyrender.Mesh.from_trimesh(mesh, material=material)
        except ValueError:                       # face colours cannot be drawn smooth
            pm = pyrender.Mesh.from_trimesh(mesh, material=material, smooth=False)
        out.append((pm, np.asarray(transform, dtype=np.float64)))
    return out


class PyrenderRenderer:
    """pyrender on one EGL context (reused across objects; resized when the resolution changes).
    ``frames_rendered`` counts drawn frames. Use as a context manager (or call ``close``)."""

    name = NAME

    def __init__(self):
        self._pr = load_pyrender()
        pbr_renderer_version()                   # refuses a missing EGL before any object is read
        self._offscreen = None
        self.frames_rendered = 0

    def close(self):
        if self._offscreen is not None:
            self._offscreen.delete()
            self._offscreen = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _context(self, res: int):
        r = self._offscreen
        if r is not None and (r.viewport_width, r.viewport_height) != (res, res):
            self.close()
        if self._offscreen is None:
            self._offscreen = _offscreen(self._pr, res, res)
        return self._offscreen

    def render_distances(self, asset: Asset, protocol: RenderProtocol, distances=None) -> list[Frame]:
        """One frame per distance (protocol.distances by default); refuses an object clipped or
        invisible at any of them (as TinyRenderer.render_distances)."""
        pr = self._pr
        light = np.asarray(protocol.light_color, dtype=np.float64)
        scene = pr.Scene(bg_color=[*(np.asarray(protocol.background) / 255.0), 1.0],
                         ambient_light=protocol.ambient * light)
        body = object_pose(asset, protocol)
        for mesh, transform in _meshes(pr, asset):
            scene.add(mesh, pose=body @ transform)      # (pyrender 0.1.45 drops a parent node's pose)
        scene.add(pr.DirectionalLight(color=light, intensity=protocol.diffuse * np.pi),
                  pose=look_at(protocol.light_direction))       # shines along its -z: from the light to the origin
        camera = scene.add(pr.PerspectiveCamera(yfov=np.radians(protocol.fov), aspectRatio=1.0, znear=protocol.near,
                                                zfar=protocol.far), pose=np.eye(4))
        res = int(protocol.resolution)
        r = self._context(res)
        direction = camera_direction(protocol)
        frames = []
        for d in (protocol.distances if distances is None else distances):
            scene.set_pose(camera, look_at(d * direction))
            color, depth = r.render(scene, flags=pr.RenderFlags.SKIP_CULL_FACES)
            self.frames_rendered += 1
            mask = np.asarray(depth) > 0
            rgb = np.ascontiguousarray(color[..., :3], dtype=np.uint8).copy()
            rgb[~mask] = protocol.background
            check_frame(asset, d, mask, protocol, self.name)
            frames.append(Frame(rgb, mask))
        return frames


__all__ = ["NAME", "PBR_CODE_VERSION", "PyrenderRenderer", "load_pyrender", "look_at", "object_pose",
           "pbr_renderer_version", "quaternion_matrix"]
