"""The render protocol and pybullet's TinyRenderer (pure CPU, no GL, no system packages).

Protocol (:class:`RenderProtocol`, defaults after the O2I paper's §3.1: five camera distances,
viewpoint, lighting and a neutral background fixed, 512 x 512):

* the object is normalised to a unit bounding sphere (rscale.producers.o2i.assets), so a distance
  is in units of the object's radius and means the same for every object;
* distances: a geometric grid from 3.0 to 9.9 (3.3x, the paper's extreme camera-distance ratio):
  3.0 * 3.3 ** (k / 4), k = 0..4. Geometric because the analyses are functions of d_q / d_t
  (paper Fig. 2, App. F): every adjacent pair then has the same ratio (1.348), the ten ordered
  pairs each way fall on four mismatch magnitudes, and the apparent size (~1/d) and O2I (~1/d^2)
  step by constant factors. At 3.0 with a 40 degree field of view the unit sphere spans 97% of
  the frame's half-width (it fits from 1 / sin(20 deg) = 2.92; with a 2 px margin at 512 px from
  2.96, ``RenderProtocol.min_safe_distance``), so no object can be clipped;
* camera: perspective, 40 degree vertical field of view, looking at the origin from azimuth 30
  and elevation 20 degrees, z up; near/far planes 0.1 / 100;
* light: pybullet's directional light from (1, 1, 2), white, ambient / diffuse / specular
  0.6 / 0.35 / 0.05, no shadows;
* background: every pixel outside the segmentation mask is set to neutral gray (128, 128, 128),
  the gray of the GP intervention's canvas;
* orientation: "canonical" (the URDF's pose) or "random" (a uniform rotation drawn from
  (seed, object id), the same at every distance).

Clipping: an object whose mask touches the image border at any distance is refused
(:class:`rscale.errors.InvalidArgumentError` naming the object, the distance and the smallest
distance the unit sphere always fits at); no re-framing, so the camera is the same for every object.

Renderers (``RENDERERS``, params.yaml ``o2i.renderer``): ``tinyrenderer`` (the default, this
module) and ``pyrender`` (physically based shading on EGL, behind the ``o2i-pbr`` extra:
rscale.producers.o2i.pbr). Both take the same protocol and give the object's exact mask;
:func:`renderer_version` names the one that drew a render (part of every render key).
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache

import numpy as np

from rscale.errors import InvalidArgumentError, MissingExtraError
from rscale.producers.interventions import GRAY
from rscale.producers.o2i.assets import Asset, normalisation
from rscale.producers.o2i.images import touches_border

# Bump when a change to this module changes pixels (it is part of every render key).
RENDER_CODE_VERSION = 1
DISTANCE_RATIO = 3.3
DEFAULT_DISTANCES = tuple(round(3.0 * DISTANCE_RATIO ** (k / 4), 4) for k in range(5))
ORIENTATIONS = ("canonical", "random")
DEFAULT_RENDERER = "tinyrenderer"
RENDERERS = (DEFAULT_RENDERER, "pyrender")


@dataclass(frozen=True)
class RenderProtocol:
    """Everything a render depends on besides the object (see the module docstring)."""

    distances: tuple = DEFAULT_DISTANCES
    resolution: int = 512
    fov: float = 40.0
    azimuth: float = 30.0
    elevation: float = 20.0
    light_direction: tuple = (1.0, 1.0, 2.0)
    light_color: tuple = (1.0, 1.0, 1.0)
    ambient: float = 0.6
    diffuse: float = 0.35
    specular: float = 0.05
    background: tuple = GRAY
    orientation: str = "canonical"
    seed: int = 0
    near: float = field(default=0.1, repr=False)
    far: float = field(default=100.0, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "distances", tuple(float(d) for d in self.distances))
        for name in ("light_direction", "light_color", "background"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        self.validate()

    @property
    def min_safe_distance(self) -> float:
        """The distance from which any normalised object fits in the frame with a 2 px margin.

        The unit sphere seen from d spans tan(asin(1/d)) / tan(fov/2) of the half-width, so it
        fits with m px to spare from d = 1 / sin(atan((1 - 2m / resolution) tan(fov/2))); m = 2
        covers TinyRenderer's one-pixel offset (2.96 at 512 px, 3.10 at 64 px, fov 40)."""
        t = (1 - 4 / self.resolution) * np.tan(np.radians(self.fov) / 2)
        return float(1.0 / np.sin(np.arctan(t)))

    def validate(self) -> None:
        d = self.distances
        if len(d) < 2:
            raise InvalidArgumentError(f"distances: the benchmark needs at least two camera distances, got {list(d)}. "
                                       f"Give two or more, e.g. the default {list(DEFAULT_DISTANCES)}")
        dup = sorted({x for x in d if d.count(x) > 1})
        if dup:
            raise InvalidArgumentError(f"distances: duplicate camera distance(s) {dup} in {list(d)}. "
                                       "Give each distance once")
        if not all(np.isfinite(x) and x > 1.0 + self.near for x in d):
            raise InvalidArgumentError(f"distances: every distance must exceed {1 + self.near:g} (the object is "
                                       f"a unit sphere; the camera must be outside it), got {list(d)}")
        if not 8 <= int(self.resolution) <= 8192 or int(self.resolution) != self.resolution:
            raise InvalidArgumentError(f"resolution must be an integer in [8, 8192], got {self.resolution}")
        if not -89.0 <= self.elevation <= 89.0:
            raise InvalidArgumentError(f"elevation must lie in [-89, 89] degrees (z is up), got {self.elevation}")
        if not 1.0 <= self.fov <= 150.0:
            raise InvalidArgumentError(f"fov must lie in [1, 150] degrees, got {self.fov}")
        if self.orientation not in ORIENTATIONS:
            raise InvalidArgumentError(f"orientation must be one of {ORIENTATIONS}, got {self.orientation!r}")
        if len(self.background) != 3 or not all(0 <= int(c) <= 255 for c in self.background):
            raise InvalidArgumentError(f"background must be three 0-255 values, got {list(self.background)}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, params: dict | None) -> "RenderProtocol":
        """From a params.yaml section (or a manifest's protocol); unknown keys are refused by name."""
        params = dict(params or {})
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(params) - set(known))
        if unknown:
            raise InvalidArgumentError(f"unknown render parameter(s) {unknown} (known: {', '.join(known)})")
        return cls(**params)

    def camera(self) -> dict:
        """The per-render parameters that do not depend on the object or the distance."""
        d = self.to_dict()
        for k in ("distances", "seed", "orientation"):
            d.pop(k)
        return d


def check_renderer(name: str) -> str:
    """``name`` if it is one of RENDERERS, else InvalidArgumentError naming them."""
    if name not in RENDERERS:
        raise InvalidArgumentError(f"renderer must be one of {', '.join(RENDERERS)}, got {name!r}")
    return name


def renderer_version(name: str = DEFAULT_RENDERER) -> str:
    """What drew a render, part of every render key: for the TinyRenderer pybullet's version plus
    this module's code version; for pyrender rscale.producers.o2i.pbr.pbr_renderer_version."""
    if check_renderer(name) == "pyrender":
        from rscale.producers.o2i.pbr import pbr_renderer_version
        return pbr_renderer_version()
    return _tiny_version()


@lru_cache(maxsize=1)
def _tiny_version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        pb = version("pybullet")
    except PackageNotFoundError:
        raise MissingExtraError("pybullet", "o2i") from None
    return f"pybullet-{pb}/tinyrenderer/rscale-{RENDER_CODE_VERSION}"


def open_renderer(name: str = DEFAULT_RENDERER):
    """A new renderer of that name (a context manager with ``render_distances``)."""
    if check_renderer(name) == "pyrender":
        from rscale.producers.o2i.pbr import PyrenderRenderer
        return PyrenderRenderer()
    return TinyRenderer()


def import_pybullet():
    """pybullet, imported with its C-level "pybullet build time: ..." banner kept off stderr: printed
    there, it made every later one-line refusal of a CLI run (a clipped object, say) two lines."""
    import os
    import sys
    if "pybullet" in sys.modules:
        return sys.modules["pybullet"]
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            try:
                import pybullet
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)
    return pybullet


def camera_direction(protocol: RenderProtocol) -> np.ndarray:
    """Unit vector from the origin to the camera (azimuth from +x towards +y, elevation above xy)."""
    az, el = np.radians(protocol.azimuth), np.radians(protocol.elevation)
    return np.array([np.cos(el) * np.cos(az), np.cos(el) * np.sin(az), np.sin(el)])


def object_orientation(asset: Asset, protocol: RenderProtocol) -> tuple:
    """Quaternion (x, y, z, w) the object is rendered at: its URDF rpy, then (orientation
    "random") a uniform rotation drawn from (seed, object id)."""
    p = import_pybullet()
    q = p.getQuaternionFromEuler(list(asset.rpy))
    if protocol.orientation == "random":
        key = int.from_bytes(hashlib.sha256(asset.id.encode()).digest()[:8], "little")
        g = np.random.default_rng([int(protocol.seed), key]).standard_normal(4)
        r = tuple(float(x) for x in g / np.linalg.norm(g))
        _, q = p.multiplyTransforms([0, 0, 0], r, [0, 0, 0], q)
    return tuple(round(float(x), 12) for x in q)


@dataclass(frozen=True)
class Frame:
    """One render: RGB (uint8, H x W x 3, background already neutral) and the object's mask."""

    rgb: np.ndarray
    mask: np.ndarray


class TinyRenderer:
    """pybullet TinyRenderer on a DIRECT connection. ``frames_rendered`` counts getCameraImage calls.

    Use as a context manager (or call ``close``)."""

    name = DEFAULT_RENDERER

    def __init__(self):
        try:
            p = import_pybullet()
        except ImportError:
            raise MissingExtraError("pybullet", "o2i") from None
        self._p = p
        self._cid = p.connect(p.DIRECT)
        self.frames_rendered = 0

    def close(self):
        if self._cid is not None:
            self._p.disconnect(physicsClientId=self._cid)
            self._cid = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def render_distances(self, asset: Asset, protocol: RenderProtocol, distances=None) -> list[Frame]:
        """One frame per distance (protocol.distances by default) of the normalised object;
        refuses an object clipped (mask on the image border) or invisible at any of them."""
        p, cid = self._p, self._cid
        centre, radius = normalisation(asset)
        s = 1.0 / radius
        p.resetSimulation(physicsClientId=cid)      # frees the previous object's visual shapes
        shape = p.createVisualShape(p.GEOM_MESH, fileName=asset.path, meshScale=[a * s for a in asset.scale],
                                    visualFramePosition=[-c * s for c in centre], rgbaColor=list(asset.render_color),
                                    physicsClientId=cid)
        body = p.createMultiBody(baseVisualShapeIndex=shape, baseOrientation=list(object_orientation(asset, protocol)),
                                 physicsClientId=cid)
        res = int(protocol.resolution)
        proj = p.computeProjectionMatrixFOV(protocol.fov, 1.0, protocol.near, protocol.far)
        direction = camera_direction(protocol)
        frames = []
        for d in (protocol.distances if distances is None else distances):
            view = p.computeViewMatrix((d * direction).tolist(), [0, 0, 0], [0, 0, 1])
            _, _, rgba, _, seg = p.getCameraImage(
                res, res, view, proj, lightDirection=list(protocol.light_direction),
                lightColor=list(protocol.light_color), lightAmbientCoeff=protocol.ambient,
                lightDiffuseCoeff=protocol.diffuse, lightSpecularCoeff=protocol.specular, shadow=0,
                renderer=p.ER_TINY_RENDERER, physicsClientId=cid)
            self.frames_rendered += 1
            rgb = np.asarray(rgba, dtype=np.uint8).reshape(res, res, 4)[..., :3].copy()
            mask = np.asarray(seg).reshape(res, res) == body
            rgb[~mask] = protocol.background
            check_frame(asset, d, mask, protocol, self.name)
            frames.append(Frame(rgb, mask))
        return frames


def check_frame(asset: Asset, distance: float, mask: np.ndarray, protocol: RenderProtocol,
                renderer: str = DEFAULT_RENDERER) -> None:
    """Refuse a frame whose mask is empty or touches the image border (the object is clipped)."""
    if not mask.any():
        raise InvalidArgumentError(f"object '{asset.id}' covers no pixel at distance {distance:g} "
                                   f"({protocol.resolution}x{protocol.resolution}): {renderer} could not draw its mesh "
                                   f"({asset.path}), or it is too thin to cover a pixel; re-export the mesh as OBJ, "
                                   "use a higher resolution or smaller distances, or drop the object")
    if touches_border(mask):
        raise InvalidArgumentError(
            f"object '{asset.id}' is clipped at distance {distance:g} (its mask touches the image border). "
            f"Use distances >= {np.ceil(protocol.min_safe_distance * 100) / 100:g} (every normalised object fits "
            f"from there at fov {protocol.fov:g}, {protocol.resolution} px) or a wider fov")
