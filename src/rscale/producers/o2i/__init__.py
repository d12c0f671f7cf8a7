"""The asset and rendering half of the controlled O2I benchmark (O2I-mismatch paper, §3).

    assets   objects: the pybullet wheel's meshes, user meshes via trimesh, licences, digests
    render   the protocol (distances, camera, light, background), pybullet's TinyRenderer, the renderer choice
    pbr      the optional pyrender renderer (PBR shading, GLB materials) on EGL (extra o2i-pbr)
    cache    content-addressed renders (PNG + mask) and the render-set manifest (Parquet)
    images   pure derivations: O2I, boxes, O2I-matched crops, fixed-pixel canvases, box crops
    derived  a render set's derived inputs as extract items: matched-crop and box-crop boxes, canvas files

Typical use (pybullet and trimesh come with ``pip install 'rscale[o2i]'``)::

    from rscale.producers import o2i
    rs = o2i.render_set(o2i.pybullet_assets(limit=200), o2i.RenderProtocol(), cache_dir="o2i-cache")
    rgb, mask = rs.record("bunny", 0).image(), rs.record("bunny", 0).mask()

Importing this package loads neither pybullet, trimesh nor pyrender; they load when an asset is
read or a frame rendered.
"""

from rscale.producers.o2i.assets import (REAL_OBJECTS, Asset, assets_from_params, normalisation, pybullet_assets,
                                         user_assets)
from rscale.producers.o2i.cache import RenderRecord, RenderSet, read_render_set, render_key, render_set
from rscale.producers.o2i.derived import box_crop_items, canvas_items, matched_crop_items
from rscale.producers.o2i.images import (CANVAS_SIZES, contact_sheet, fixed_pixel_canvases, o2i_matched_box,
                                         o2i_matched_crop, object_bbox, object_box_crop, object_o2i, object_patch)
from rscale.producers.o2i.render import (DEFAULT_DISTANCES, RENDERERS, RenderProtocol, TinyRenderer, open_renderer,
                                         renderer_version)

__all__ = ["Asset", "REAL_OBJECTS", "assets_from_params", "normalisation", "pybullet_assets", "user_assets", "RenderRecord", "RenderSet",
           "read_render_set", "render_key", "render_set", "box_crop_items", "canvas_items", "matched_crop_items",
           "CANVAS_SIZES", "contact_sheet", "fixed_pixel_canvases", "o2i_matched_box", "o2i_matched_crop",
           "object_bbox", "object_box_crop", "object_o2i", "object_patch", "DEFAULT_DISTANCES", "RenderProtocol",
           "RENDERERS", "TinyRenderer", "open_renderer", "renderer_version"]
