"""O2I benchmark assets, TinyRenderer and pyrender renders, the render cache and the pure image
derivations.

Renders are tiny (48-96 px, a few objects) except the one slow test of the default protocol. The
pyrender tests need the o2i-pbr extra and libEGL (skipped, saying why, where either is missing);
the refusal when one is missing is tested by hiding them in a subprocess."""

import hashlib
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("pybullet")
trimesh = pytest.importorskip("trimesh")
from PIL import Image  # noqa: E402

from rscale.errors import FormatError, InvalidArgumentError, NotFoundError, RscaleError  # noqa: E402
from rscale.producers import o2i  # noqa: E402
from rscale.producers.o2i import assets as assets_mod  # noqa: E402
from rscale.producers.o2i.images import NEUTRAL, paste_on_canvas, touches_border  # noqa: E402
from rscale.producers.o2i.render import DISTANCE_RATIO, RenderProtocol, TinyRenderer  # noqa: E402

TINY = dict(distances=(3.5, 5.0, 7.0), resolution=64)


def real(*ids):
    by_id = {a.id: a for a in o2i.pybullet_assets("real")}
    return [by_id[i] for i in ids]


# ---------------------------------------------------------------- pure image derivations

def square_mask(h, w, box):
    m = np.zeros((h, w), bool)
    m[box[1]:box[3], box[0]:box[2]] = True
    return m


def test_o2i_and_bbox_hand_cases():
    m = np.zeros((4, 4), bool)
    m[1:3, 1:3] = True
    assert o2i.object_o2i(m) == 0.25
    m2 = np.zeros((5, 8), bool)
    m2[1:3, 3:6] = True
    assert o2i.object_bbox(m2) == (3, 1, 6, 3)
    assert not touches_border(m2)
    m2[4, 7] = True
    assert touches_border(m2) and o2i.object_bbox(m2) == (3, 1, 8, 5)
    with pytest.raises(InvalidArgumentError, match="empty"):
        o2i.object_bbox(np.zeros((3, 3), bool))


def test_o2i_matched_crop_hand_case():
    rgb = np.full((100, 100, 3), 128, np.uint8)
    mask = square_mask(100, 100, (30, 50, 40, 60))
    rgb[mask] = (200, 10, 10)
    c = o2i.o2i_matched_crop(rgb, mask, 0.25, out_size=40)
    assert c.box == (25, 45, 45, 65) and c.o2i == 0.25
    assert c.image.shape == (40, 40, 3)
    assert (c.image[15:25, 15:25] == (200, 10, 10)).all()     # a 2x upscale of a 10 px object: 20 px


def test_o2i_matched_crop_against_brute_force():
    rng = np.random.default_rng(3)
    for trial in range(40):
        h = w = int(rng.integers(30, 90))
        x0, y0 = rng.integers(0, w - 8, size=2)
        bw, bh = rng.integers(3, min(w - x0, h - y0, 25) + 1, size=2)
        mask = square_mask(h, w, (x0, y0, x0 + bw, y0 + bh))
        mask &= rng.random((h, w)) < 0.8
        mask[y0, x0] = mask[y0 + bh - 1, x0 + bw - 1] = True
        n = int(mask.sum())
        rgb = rng.integers(0, 255, size=(h, w, 3), dtype=np.uint8)
        target = float(rng.uniform(n / (h * w) * 1.05, 0.9))
        need = max(bw, bh)
        try:
            c = o2i.o2i_matched_crop(rgb, mask, target, out_size=32)
        except InvalidArgumentError:
            assert np.sqrt(n / target) > w + 1
            continue
        x, y, x1, y1 = c.box
        side = x1 - x
        assert side == y1 - y and 0 <= x and x1 <= w and 0 <= y and y1 <= h
        assert mask[y:y1, x:x1].sum() == n                          # the whole object is inside
        assert c.o2i == n / side ** 2
        # brute force over every admissible side: ours is the closest O2I to the target
        best = min(range(need, min(h, w) + 1), key=lambda L: abs(n / L ** 2 - target))
        assert abs(c.o2i - target) <= abs(n / best ** 2 - target) + 1e-12
        ref = np.asarray(Image.fromarray(np.ascontiguousarray(rgb[y:y1, x:x1])).resize((32, 32), Image.BICUBIC))
        assert np.array_equal(c.image, ref)


def test_o2i_matched_crop_refuses_a_target_below_the_images_own_o2i():
    mask = square_mask(20, 20, (5, 5, 15, 15))
    with pytest.raises(InvalidArgumentError, match="farther"):
        o2i.o2i_matched_crop(np.zeros((20, 20, 3), np.uint8), mask, 0.1)


def test_fixed_pixel_canvases_keep_object_pixels_byte_identical():
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 255, size=(80, 80, 3), dtype=np.uint8)
    mask = square_mask(80, 80, (20, 10, 61, 45)) & (rng.random((80, 80)) < 0.7)
    patch, pmask = o2i.object_patch(rgb, mask)
    x0, y0, x1, y1 = o2i.object_bbox(mask)
    assert np.array_equal(patch, rgb[y0:y1, x0:x1]) and np.array_equal(pmask, mask[y0:y1, x0:x1])
    canvases = o2i.fixed_pixel_canvases(rgb, mask, sizes=(41, 64, 100, 256))
    for cv in canvases:
        a, b, c, d = cv.box
        assert (c - a, d - b) == (41, 35) and (a, b) == ((cv.size - 41) // 2, (cv.size - 35) // 2)
        window = cv.image[b:d, a:c]
        assert np.array_equal(window[pmask], patch[pmask])
        outside = np.ones((cv.size, cv.size), bool)
        outside[b:d, a:c] = ~pmask
        assert (cv.image[outside] == NEUTRAL).all()
        assert cv.o2i == pmask.sum() / cv.size ** 2


def test_fixed_pixel_canvases_paper_range_with_object_size():
    rgb = np.zeros((64, 64, 3), np.uint8)
    mask = square_mask(64, 64, (16, 16, 48, 40))
    cvs = o2i.fixed_pixel_canvases(rgb, mask, object_size=256)
    assert [c.size for c in cvs] == [256, 384, 512, 768, 1024, 1536]
    boxes = {(c.box[2] - c.box[0], c.box[3] - c.box[1]) for c in cvs}
    assert boxes == {(256, 192)}                                   # resized once: the same patch everywhere
    assert cvs[0].o2i / cvs[-1].o2i == pytest.approx(36.0)


def test_object_box_crop_margin():
    rgb = np.arange(30 * 40 * 3, dtype=np.uint8).reshape(30, 40, 3)
    mask = square_mask(30, 40, (10, 5, 20, 15))
    crop, box = o2i.object_box_crop(rgb, mask)
    assert box == (10, 5, 20, 15) and np.array_equal(crop, rgb[5:15, 10:20])
    crop, box = o2i.object_box_crop(rgb, mask, margin=0.5)
    assert box == (5, 0, 25, 20) and crop.shape == (20, 20, 3)


# ---------------------------------------------------------------- protocol and assets

def test_default_protocol_is_the_papers_geometric_grid():
    p = RenderProtocol()
    d = np.asarray(p.distances)
    assert len(d) == 5 and p.resolution == 512
    assert d[-1] / d[0] == pytest.approx(DISTANCE_RATIO, rel=1e-4)
    assert np.allclose(d[1:] / d[:-1], DISTANCE_RATIO ** 0.25, rtol=1e-4)
    assert p.min_safe_distance < d[0]                              # the unit sphere always fits


def test_pybullet_assets_list_real_and_procedural_objects():
    every = o2i.pybullet_assets()
    ids = [a.id for a in every]
    assert len(every) == len(o2i.REAL_OBJECTS) + 999 and len(set(ids)) == len(ids)
    assert "random_168" not in ids                                 # shipped with NaN vertices
    for name in ("bunny", "duck", "mug", "teddy", "soccerball", "lego", "jenga", "domino"):
        assert name in ids
    assert ids[-1] == "random_999"
    assert all(a.licence and a.licence_source and a.digest.startswith("sha256:") for a in every)
    by_id = {a.id: a for a in every}
    assert by_id["duck"].licence == "SCEA-Shared-Source-1.0" and by_id["duck"].textured
    assert by_id["jenga"].scale == (0.15, 0.05, 0.03)             # the URDF's scale is kept
    assert by_id["random_000"].color == (0.04, 0.07, 0.91, 1.0)   # and its colour
    files, textured = assets_mod.mesh_files(by_id["duck"].path)
    assert [f.name for f in files] == ["duck.obj", "duck.mtl", "duckCM.png"] and textured
    assert o2i.pybullet_assets("random", limit=3)[2].id == "random_002"


def test_the_shipped_mesh_with_nan_vertices_is_refused():
    path = assets_mod._data_path() / "random_urdfs" / "168" / "168.obj"
    with pytest.raises(FormatError, match="'random_168': the mesh has non-finite vertices"):
        assets_mod.load_mesh_vertices(path, "random_168")


def test_normalisation_gives_a_unit_bounding_sphere():
    for a in real("bunny", "jenga", "lego"):
        centre, radius = o2i.normalisation(a)
        v = trimesh.load(a.path, force="mesh", process=False, skip_materials=True).vertices * np.asarray(a.scale)
        u = (v - centre) / radius
        assert np.linalg.norm(u, axis=1).max() == pytest.approx(1.0)
        assert np.allclose((u.min(axis=0) + u.max(axis=0)) / 2, 0, atol=1e-12)


def test_assets_from_params(tmp_path):
    trimesh.creation.box().export(tmp_path / "crate.stl")
    got = o2i.assets_from_params({"kind": "real", "limit": 2, "meshes": [str(tmp_path / "crate.stl")],
                                  "licence": "CC0-1.0"}, tmp_path / "c")
    assert [a.id for a in got] == ["bunny", "duck", "crate"] and got[-1].licence == "CC0-1.0"
    assert len(o2i.assets_from_params(None, tmp_path)) == len(o2i.REAL_OBJECTS) + 999
    with pytest.raises(InvalidArgumentError, match=r"unknown object parameter\(s\) \['objects'\]"):
        o2i.assets_from_params({"objects": 3}, tmp_path)
    with pytest.raises(InvalidArgumentError, match="no objects"):
        o2i.assets_from_params({"kind": "none"}, tmp_path)


def test_contact_sheet_layout():
    red, blue = np.zeros((10, 20, 3), np.uint8), np.zeros((30, 30, 3), np.uint8)
    red[..., 0], blue[..., 2] = 255, 255
    sheet = o2i.contact_sheet([[red, blue], [blue]], tile=16, gap=2)
    assert sheet.shape == (34, 34, 3)
    assert (sheet[:16, :16] == (255, 0, 0)).all() and (sheet[:16, 18:] == (0, 0, 255)).all()
    assert (sheet[18:, :16] == (0, 0, 255)).all() and (sheet[18:, 18:] == 255).all() and (sheet[16:18] == 255).all()


def test_asset_digest_follows_the_file_bytes(tmp_path):
    box = trimesh.creation.box(extents=(1, 2, 3))
    src = tmp_path / "box.ply"
    box.export(src)
    a1 = o2i.user_assets([src], tmp_path / "cache")[0]
    again = o2i.user_assets([src], tmp_path / "cache")[0]
    assert a1 == again
    trimesh.creation.box(extents=(1, 2, 4)).export(src)
    a2 = o2i.user_assets([src], tmp_path / "cache")[0]
    assert a2.digest != a1.digest and a2.path != a1.path


@pytest.mark.parametrize("ext", [".obj", ".glb", ".ply", ".stl"])
def test_user_meshes_render(tmp_path, ext):
    src = tmp_path / f"capsule{ext}"
    trimesh.creation.capsule(height=1.0, radius=0.3).export(src)
    a = o2i.user_assets([src], tmp_path / "cache", licence="CC0-1.0")[0]
    assert a.id == "capsule" and a.source == "user" and a.licence == "CC0-1.0" and a.path.endswith("mesh.obj")
    rs = o2i.render_set([a], RenderProtocol(**TINY), cache_dir=tmp_path / "cache", progress=False)
    o = rs.o2i_matrix()[0]
    assert (np.diff(o) < 0).all() and o[0] > 0.05


# ---------------------------------------------------------------- rendering

def test_render_geometry_matches_the_projected_unit_sphere():
    # a sphere centred on the optical axis projects to a disk of radius tan(asin(1/d)) / tan(fov/2)
    (sphere,) = real("soccerball")
    p = RenderProtocol(distances=(3.0, 5.0, 9.0), resolution=128)
    with TinyRenderer() as r:
        frames = r.render_distances(sphere, p)
    for d, f in zip(p.distances, frames):
        rho = np.tan(np.arcsin(1 / d)) / np.tan(np.radians(p.fov) / 2)
        assert o2i.object_o2i(f.mask) == pytest.approx(np.pi * rho ** 2 / 4, rel=0.04)
        cx, cy = np.argwhere(f.mask).mean(axis=0)
        assert abs(cx - 63.5) < 1.5 and abs(cy - 63.5) < 1.5       # centred: the object sits at the origin


def test_render_background_and_determinism():
    objs = real("duck", "mug")
    p = RenderProtocol(**TINY)
    with TinyRenderer() as r1, TinyRenderer() as r2:
        for a in objs:
            f1, f2 = r1.render_distances(a, p), r2.render_distances(a, p)
            for x, y in zip(f1, f2):
                assert np.array_equal(x.rgb, y.rgb) and np.array_equal(x.mask, y.mask)
                assert (x.rgb[~x.mask] == p.background).all()
                assert not (x.rgb[x.mask] == p.background).all(axis=1).all()
        assert r1.frames_rendered == 2 * len(p.distances)


def test_a_render_does_not_depend_on_what_the_renderer_drew_before():
    duck, mug = real("duck", "mug")
    p = RenderProtocol(**TINY)
    with TinyRenderer() as used, TinyRenderer() as fresh:
        used.render_distances(duck, p)
        after = used.render_distances(mug, p)
        alone = fresh.render_distances(mug, p)
    for x, y in zip(after, alone):
        assert np.array_equal(x.rgb, y.rgb) and np.array_equal(x.mask, y.mask)


def test_random_orientation_comes_from_the_seed():
    (a,) = real("lego")
    def rgb(**kw):
        with TinyRenderer() as r:
            return r.render_distances(a, RenderProtocol(**TINY, **kw), [3.5])[0].rgb
    canonical = rgb()
    assert np.array_equal(canonical, rgb(seed=5))                 # the seed does not touch a canonical pose
    r1, r1b, r2 = rgb(orientation="random", seed=1), rgb(orientation="random", seed=1), rgb(orientation="random", seed=2)
    assert np.array_equal(r1, r1b) and not np.array_equal(r1, r2) and not np.array_equal(r1, canonical)
    assert o2i.render_key(a, 3.5, RenderProtocol(**TINY)) == o2i.render_key(a, 3.5, RenderProtocol(**TINY, seed=5))
    assert o2i.render_key(a, 3.5, RenderProtocol(**TINY, orientation="random", seed=1)) != \
        o2i.render_key(a, 3.5, RenderProtocol(**TINY, orientation="random", seed=2))


# ---------------------------------------------------------------- cache and manifest

def test_rerun_renders_nothing_and_a_changed_distance_renders_only_it(tmp_path):
    objs = real("bunny", "duck", "torus")
    p = RenderProtocol(**TINY)
    with TinyRenderer() as r:
        rs = o2i.render_set(objs, p, cache_dir=tmp_path, renderer=r, progress=False)
        assert r.frames_rendered == 9 and rs.rendered == 9
        again = o2i.render_set(objs, p, cache_dir=tmp_path, renderer=r, progress=False)
        assert r.frames_rendered == 9 and again.rendered == 0
        assert again.records == rs.records and again.manifest == rs.manifest
        moved = RenderProtocol(distances=(3.5, 5.0, 8.0), resolution=64)
        rs3 = o2i.render_set(objs, moved, cache_dir=tmp_path, renderer=r, progress=False)
        assert r.frames_rendered == 12 and rs3.rendered == 3 and rs3.manifest != rs.manifest
        bigger = o2i.render_set(objs, RenderProtocol(distances=TINY["distances"], resolution=48), cache_dir=tmp_path,
                                renderer=r, progress=False)
        assert bigger.rendered == 9
    assert sorted(p.name for p in tmp_path.rglob("*.tmp-*")) == []


def test_worker_processes_give_the_same_renders(tmp_path):
    objs = real("bunny", "duck", "lego")
    p = RenderProtocol(**TINY)
    serial = o2i.render_set(objs, p, cache_dir=tmp_path / "serial", progress=False)
    par = o2i.render_set(objs, p, cache_dir=tmp_path / "par", progress=False, workers=2)
    assert par.rendered == 9
    assert [(r.image_sha256, r.o2i, r.bbox, r.render_key) for r in par.records] == \
        [(r.image_sha256, r.o2i, r.bbox, r.render_key) for r in serial.records]
    assert o2i.render_set(objs, p, cache_dir=tmp_path / "par", progress=False, workers=2).rendered == 0


def test_a_damaged_cached_render_is_drawn_again(tmp_path):
    objs = real("mug")
    p = RenderProtocol(**TINY)
    with TinyRenderer() as r:
        rs = o2i.render_set(objs, p, cache_dir=tmp_path, renderer=r, progress=False)
        rs.records[1].path.write_bytes(rs.records[1].path.read_bytes()[:40])    # truncated PNG
        again = o2i.render_set(objs, p, cache_dir=tmp_path, renderer=r, progress=False)
        assert again.rendered == 1 and again.records == rs.records


def test_manifest_round_trip_and_contents(tmp_path):
    objs = real("mug", "domino")
    rs = o2i.render_set(objs, RenderProtocol(**TINY), cache_dir=tmp_path / "c", manifest=tmp_path / "m" / "r.parquet",
                        progress=False)
    back = o2i.read_render_set(tmp_path / "m" / "r.parquet")
    assert [(r.object_id, r.distance_index) for r in back.records] == [(a.id, k) for a in objs for k in range(3)]
    for r, b in zip(rs.records, back.records):
        assert b == r
        assert b.image_sha256 == "sha256:" + hashlib.sha256(b.path.read_bytes()).hexdigest()
        assert b.o2i == o2i.object_o2i(b.mask()) and b.bbox == o2i.object_bbox(b.mask())
        assert b.image().shape == (64, 64, 3) and (b.image()[~b.mask()] == NEUTRAL).all()
        assert b.licence == {a.id: a.licence for a in objs}[b.object_id]
    import pyarrow.parquet as pq
    t = pq.read_table(tmp_path / "m" / "r.parquet")
    assert not t.column("path")[0].as_py().startswith("/")           # portable: relative to the manifest
    assert back.protocol["distances"] == [3.5, 5.0, 7.0] and back.renderer.startswith("pybullet-")
    assert back.lineage()["assets"]["mug"]["digest"] == objs[0].digest
    assert back.lineage()["renders"] == rs.content_digest()
    assert back.verify() == {"checked": 6, "missing": [], "corrupt": []}
    back.records[0].path.write_bytes(b"not the render")
    back.records[1].path.unlink()
    assert back.verify() == {"checked": 6, "missing": [str(back.records[1].path)],
                             "corrupt": [str(back.records[0].path)]}
    assert back.items(0)[1][0] == "domino@d0"


def test_protocol_round_trips_through_its_dict_and_refuses_unknown_keys():
    p = RenderProtocol(distances=(3.5, 5.0), resolution=96, orientation="random", seed=3)
    assert RenderProtocol.from_dict(p.to_dict()) == p
    assert RenderProtocol.from_dict(None) == RenderProtocol()
    with pytest.raises(InvalidArgumentError, match=r"unknown render parameter\(s\) \['distance'\]"):
        RenderProtocol.from_dict({"distance": [3, 4]})


def test_derived_items_for_extract(tmp_path):
    rs = o2i.render_set(real("duck", "mug"), RenderProtocol(**TINY), cache_dir=tmp_path, progress=False)
    items = o2i.matched_crop_items(rs, source_index=2, target_index=0)
    assert [i[0] for i in items] == ["duck@d2~d0", "mug@d2~d0"]
    for (iid, path, box), obj in zip(items, ("duck", "mug")):
        far, near = rs.record(obj, 2), rs.record(obj, 0)
        x0, y0, x1, y1 = box
        window = far.mask()[y0:y1, x0:x1]
        assert window.sum() == far.mask().sum()                    # the whole object is in the box
        assert window.mean() == pytest.approx(near.o2i, rel=2.5 / (x1 - x0))
        assert path == far.path
    with pytest.raises(InvalidArgumentError, match="farther"):
        o2i.matched_crop_items(rs, source_index=0, target_index=2)
    assert o2i.box_crop_items(rs, 1) == [(f"{r.object_id}@d1#box", r.path, r.bbox) for r in rs.records
                                         if r.distance_index == 1]
    canv = o2i.canvas_items(rs, tmp_path, distance_index=0, sizes=(64, 96, 128), object_size=None)
    assert [c[0] for c in canv][:3] == ["duck@d0@c64", "duck@d0@c96", "duck@d0@c128"]
    stamps = {c[1]: c[1].stat().st_mtime_ns for c in canv}
    assert o2i.canvas_items(rs, tmp_path, distance_index=0, sizes=(64, 96, 128), object_size=None) == canv
    assert {c[1]: c[1].stat().st_mtime_ns for c in canv} == stamps                # nothing rewritten
    rec = rs.record("duck", 0)
    x0, y0, x1, y1 = rec.bbox
    obj_pixels = rec.image()[y0:y1, x0:x1][rec.mask()[y0:y1, x0:x1]]
    for _, path, _ in canv[:3]:
        img = np.asarray(Image.open(path).convert("RGB"))
        s = img.shape[0]
        a, b = (s - (x1 - x0)) // 2, (s - (y1 - y0)) // 2
        assert np.array_equal(img[b:b + y1 - y0, a:a + x1 - x0][rec.mask()[y0:y1, x0:x1]], obj_pixels)


# ---------------------------------------------------------------- bad input

BAD = [
    ("missing mesh", lambda t: o2i.user_assets([t / "nope.obj"], t), NotFoundError, "nope.obj"),
    ("unreadable mesh", lambda t: o2i.user_assets([t / "bad.glb"], t), FormatError, "cannot read"),
    ("degenerate mesh", lambda t: o2i.user_assets([t / "flat.obj"], t), FormatError, "degenerate"),
    ("unsupported format", lambda t: o2i.user_assets([t / "x.fbx"], t), FormatError, ".fbx"),
    ("duplicate ids", lambda t: o2i.user_assets([t / "a.obj", t / "b/a.obj"], t), InvalidArgumentError, "duplicate"),
    ("mesh file gone", lambda t: assets_mod.mesh_files(t / "gone.obj"), NotFoundError, "gone.obj does not exist"),
    ("one distance", lambda t: RenderProtocol(distances=(3.0,)), InvalidArgumentError, "at least two"),
    ("duplicate distances", lambda t: RenderProtocol(distances=(3.0, 4.0, 3.0)), InvalidArgumentError, "duplicate"),
    ("camera inside object", lambda t: RenderProtocol(distances=(0.5, 3.0)), InvalidArgumentError, "exceed"),
    ("bad resolution", lambda t: RenderProtocol(resolution=4), InvalidArgumentError, "resolution"),
    ("bad orientation", lambda t: RenderProtocol(orientation="tumbling"), InvalidArgumentError, "orientation"),
    ("camera overhead", lambda t: RenderProtocol(elevation=90), InvalidArgumentError, "elevation"),
    ("no workers", lambda t: o2i.render_set(real("mug"), cache_dir=t, workers=0), InvalidArgumentError, "workers"),
    ("clipped, in a worker",
     lambda t: o2i.render_set(real("mug", "soccerball"), RenderProtocol(distances=(1.5, 3.0), resolution=48),
                              cache_dir=t, progress=False, workers=2), InvalidArgumentError, "is clipped at distance 1.5"),
    ("clipped at the closest distance",
     lambda t: o2i.render_set(real("soccerball"), RenderProtocol(distances=(1.5, 3.0), resolution=48), cache_dir=t,
                              progress=False), InvalidArgumentError, "'soccerball' is clipped at distance 1.5"),
    ("canvas smaller than the object",
     lambda t: o2i.fixed_pixel_canvases(np.zeros((64, 64, 3), np.uint8), square_mask(64, 64, (0, 0, 40, 30)),
                                        sizes=(32, 64)), InvalidArgumentError, "canvas 32 px is smaller"),
    ("duplicate canvases",
     lambda t: o2i.fixed_pixel_canvases(np.zeros((8, 8, 3), np.uint8), square_mask(8, 8, (1, 1, 3, 3)),
                                        sizes=(8, 8)), InvalidArgumentError, "duplicate"),
    ("no assets", lambda t: o2i.render_set([], cache_dir=t, progress=False), InvalidArgumentError, "no objects"),
    ("unknown renderer", lambda t: o2i.render_set(real("mug"), cache_dir=t, renderer="blender", progress=False),
     InvalidArgumentError, "renderer must be one of tinyrenderer, pyrender, got 'blender'"),
]


@pytest.mark.parametrize("name,call,err,text", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_one_clear_error_and_nothing_is_written(tmp_path, name, call, err, text):
    (tmp_path / "b").mkdir()
    (tmp_path / "a.obj").write_text("v 0 0 0\n")
    (tmp_path / "b" / "a.obj").write_text("v 0 0 0\n")
    (tmp_path / "flat.obj").write_text("v 0 0 0\nv 0 0 0\nv 0 0 0\nf 1 2 3\n")     # zero extent
    (tmp_path / "bad.glb").write_bytes(b"glTF\x02\x00\x00\x00garbage")
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(err, match=text.replace("(", r"\(").replace(".", r"\.")) as info:
        call(tmp_path)
    assert isinstance(info.value, RscaleError) and "\n" not in str(info.value)
    assert sorted(tmp_path.rglob("*")) == before                  # no manifest, no render, no temp file


def test_a_mesh_pybullet_cannot_draw_is_refused_by_name(tmp_path):
    trimesh.creation.box().export(tmp_path / "box.glb")       # trimesh reads it, pybullet's loader does not
    ghost = o2i.Asset("ghost", str(tmp_path / "box.glb"), "user", "CC0-1.0", "test", "sha256:0")
    with TinyRenderer() as r:
        with pytest.raises(InvalidArgumentError, match="'ghost' covers no pixel at distance 3.5"):
            r.render_distances(ghost, RenderProtocol(**TINY))


def test_a_bad_mesh_in_a_list_stops_before_anything_is_rendered(tmp_path):
    bad = real("bunny")[0].__class__(**{**real("bunny")[0].__dict__, "id": "ghost", "path": str(tmp_path / "g.obj")})
    with TinyRenderer() as r:
        with pytest.raises(NotFoundError, match="'ghost'"):
            o2i.render_set(real("duck") + [bad], RenderProtocol(**TINY), cache_dir=tmp_path / "c", renderer=r,
                           progress=False)
        assert r.frames_rendered == 0
    assert not (tmp_path / "c").exists()


def test_importing_the_package_loads_neither_pybullet_nor_trimesh():
    code = ("import sys, rscale.producers.o2i; "
            "print(','.join(m for m in ('pybullet', 'trimesh', 'PIL.Image') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


# ---------------------------------------------------------------- the default protocol

@pytest.mark.slow
def test_default_protocol_o2i_strictly_decreases_and_nothing_is_clipped(tmp_path):
    objs = real("bunny", "duck", "mug", "lego", "jenga", "soccerball") + o2i.pybullet_assets("random", limit=2)
    rs = o2i.render_set(objs, RenderProtocol(), cache_dir=tmp_path, progress=False)
    o = rs.o2i_matrix()
    assert o.shape == (len(objs), 5)
    assert (np.diff(o, axis=1) < 0).all()
    for r in rs.records:
        assert (r.width, r.height) == (512, 512)
        assert not touches_border(r.mask())
    # projected area goes as 1/d^2 for a small object and as tan^2(asin(1/d)) = 1/(d^2 - 1) for the
    # bounding sphere itself: the extremes' O2I ratio lies between 3.3^2 = 10.9 and 97.0/8 = 12.1
    d = np.asarray(rs.distances)
    ratio = o[:, 0] / o[:, -1]
    assert (ratio > 0.97 * DISTANCE_RATIO ** 2).all() and (ratio < 1.03 * (d[-1] ** 2 - 1) / (d[0] ** 2 - 1)).all()


def test_paste_on_canvas_refuses_a_small_canvas():
    with pytest.raises(InvalidArgumentError, match="at least 5 px"):
        paste_on_canvas(np.zeros((5, 3, 3), np.uint8), np.ones((5, 3), bool), 4)


def test_a_textured_glb_keeps_its_texture(tmp_path):
    m = trimesh.creation.box()
    m.visual = trimesh.visual.TextureVisuals(uv=np.random.default_rng(0).random((len(m.vertices), 2)),
                                             image=Image.new("RGB", (8, 8), (255, 0, 0)))
    m.export(tmp_path / "red.glb")
    (a,) = o2i.user_assets([tmp_path / "red.glb"], tmp_path / "c")
    assert a.textured and a.render_color == (1.0, 1.0, 1.0, 1.0)
    rs = o2i.render_set([a], RenderProtocol(**TINY), cache_dir=tmp_path / "c", progress=False)
    rec = rs.record("red", 0)
    px = rec.image()[rec.mask()].astype(int)
    assert (px[:, 0] > 100).all() and (px[:, 1:] == 0).all()       # red texture, lit: only the red channel


# ---------------------------------------------------------------- pyrender (the o2i-pbr extra, EGL)

def pyrender_or_skip():
    from rscale.errors import MissingExtraError, MissingSystemLibraryError
    from rscale.producers.o2i import pbr
    try:
        pbr.pbr_renderer_version()
    except (MissingExtraError, MissingSystemLibraryError) as exc:
        pytest.skip(f"the pyrender renderer cannot run here: {exc}")
    return pbr


def test_pyrender_and_tinyrenderer_agree_on_masks_and_o2i():
    pbr = pyrender_or_skip()
    p = RenderProtocol(distances=(3.5, 5.0, 7.0), resolution=96)
    with TinyRenderer() as tiny, pbr.PyrenderRenderer() as pr:
        for a in real("soccerball", "duck", "mug", "bunny", "lego"):
            ft, fp = tiny.render_distances(a, p), pr.render_distances(a, p)
            o2i_p = [o2i.object_o2i(f.mask) for f in fp]
            assert np.all(np.diff(o2i_p) < 0), (a.id, o2i_p)          # O2I shrinks with distance
            for d, x, y in zip(p.distances, ft, fp):
                assert o2i.object_o2i(y.mask) == pytest.approx(o2i.object_o2i(x.mask), rel=0.05), (a.id, d)
                assert (x.mask & y.mask).sum() / (x.mask | y.mask).sum() > 0.9, (a.id, d)      # the same pixels
                assert np.abs(np.argwhere(x.mask).mean(0) - np.argwhere(y.mask).mean(0)).max() < 1.0
                assert (y.rgb[~y.mask] == p.background).all()
                assert not (y.rgb[y.mask] == p.background).all(axis=1).all()
        assert pr.frames_rendered == 15
        # independent truth: a sphere on the optical axis projects to a disk of radius tan(asin(1/d)) / tan(fov/2)
        (sphere,) = real("soccerball")
        for d, f in zip(p.distances, pr.render_distances(sphere, p)):
            rho = np.tan(np.arcsin(1 / d)) / np.tan(np.radians(p.fov) / 2)
            assert o2i.object_o2i(f.mask) == pytest.approx(np.pi * rho ** 2 / 4, rel=0.04)


def test_pyrender_keeps_the_tinyrenderers_colours():
    pbr = pyrender_or_skip()
    p = RenderProtocol(distances=(3.5, 5.0), resolution=64)
    with TinyRenderer() as tiny, pbr.PyrenderRenderer() as pr:
        for a in real("duck", "mug", "torus"):          # URDF colour x texture, MTL colour, texture outside its folder
            x, y = tiny.render_distances(a, p, [3.5])[0], pr.render_distances(a, p, [3.5])[0]
            mx, my = x.rgb[x.mask].mean(0), y.rgb[y.mask].mean(0)
            assert np.argsort(mx)[-1] == np.argsort(my)[-1] and np.abs(mx - my).max() < 40, (a.id, mx, my)


def test_the_render_cache_is_keyed_by_renderer(tmp_path):
    pbr = pyrender_or_skip()
    objs = real("duck", "torus")
    p = RenderProtocol(**TINY)
    tiny = o2i.render_set(objs, p, cache_dir=tmp_path, progress=False)
    with pbr.PyrenderRenderer() as r:
        pyr = o2i.render_set(objs, p, cache_dir=tmp_path, renderer=r, progress=False)
        assert pyr.rendered == 6 and r.frames_rendered == 6                 # nothing taken from the tiny renders
        again = o2i.render_set(objs, p, cache_dir=tmp_path, renderer=r, progress=False)
        assert again.rendered == 0 and r.frames_rendered == 6 and again.records == pyr.records
    assert not {x.render_key for x in tiny.records} & {x.render_key for x in pyr.records}
    assert pyr.manifest != tiny.manifest and pyr.renderer == pbr.pbr_renderer_version()
    assert pyr.renderer.startswith("pyrender-0.1.45/pyopengl-") and tiny.renderer.startswith("pybullet-")
    assert o2i.render_key(objs[0], 3.5, p, "pyrender") != o2i.render_key(objs[0], 3.5, p)
    read = o2i.read_render_set(pyr.manifest)
    assert read.renderer == pyr.renderer and read.records == pyr.records
    assert pyr.verify() == {"checked": 6, "missing": [], "corrupt": []}
    np.testing.assert_allclose(pyr.o2i_matrix(), tiny.o2i_matrix(), rtol=0.06)
    by_name = o2i.render_set(objs, p, cache_dir=tmp_path, renderer="pyrender", progress=False)
    assert by_name.rendered == 0 and by_name.records == pyr.records


def test_pyrender_draws_a_glb_with_its_own_pbr_material(tmp_path):
    pbr = pyrender_or_skip()
    import dataclasses
    m = trimesh.creation.capsule(height=1.0, radius=0.4)
    m.visual = trimesh.visual.TextureVisuals(material=trimesh.visual.material.PBRMaterial(
        baseColorFactor=[20, 40, 230, 255], metallicFactor=0.0, roughnessFactor=0.5))
    m.export(tmp_path / "blue.glb")
    (a,) = o2i.user_assets([tmp_path / "blue.glb"], tmp_path / "c")
    assert a.original == str((tmp_path / "blue.glb").resolve()) and a.original_digest.startswith("sha256:")
    p = RenderProtocol(**TINY)
    with pbr.PyrenderRenderer() as r:
        frames = r.render_distances(a, p)
    for f in frames:
        px = f.rgb[f.mask].astype(int)
        assert (px[:, 2] > px[:, 0] + 40).mean() > 0.95                 # the GLB's blue, not the default tan
    assert np.all(np.diff([o2i.object_o2i(f.mask) for f in frames]) < 0)
    other = dataclasses.replace(a, original_digest="sha256:" + "0" * 64)
    assert o2i.render_key(other, 3.5, p, "pyrender") != o2i.render_key(a, 3.5, p, "pyrender")
    assert o2i.render_key(other, 3.5, p) == o2i.render_key(a, 3.5, p)      # the TinyRenderer reads the OBJ only


HIDE_PYRENDER = "import sys; sys.modules['pyrender'] = None\n"
HIDE_EGL = """import ctypes, ctypes.util
find, init = ctypes.util.find_library, ctypes.CDLL.__init__
ctypes.util.find_library = lambda n: None if 'EGL' in n else find(n)
def no_egl(self, name, *a, **k):
    if name and 'EGL' in str(name):
        raise OSError(f'{name}: cannot open shared object file: No such file or directory')
    init(self, name, *a, **k)
ctypes.CDLL.__init__ = no_egl
"""


@pytest.mark.parametrize("hide,text", [(HIDE_PYRENDER, "pip install 'rscale[o2i-pbr]'"),
                                       (HIDE_EGL, "apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri")],
                         ids=["no extra", "no EGL"])
def test_pyrender_without_its_extra_or_egl_is_one_line_exit_2_nothing_written(tmp_path, hide, text):
    import os
    cfg = tmp_path / "params.yaml"
    cfg.write_text(f"o2i:\n  objects: 2\n  cache: {tmp_path / 'cache'}\n  renderer: pyrender\n"
                   "  render: {distances: [3.5, 5.0], resolution: 48}\n")
    code = hide + ("from rscale.cli import main\n"
                   f"sys.exit(main(['o2i', 'run', '--config', {str(cfg)!r}, '-o', {str(tmp_path / 'out')!r}, "
                   "'--no-progress']))\n")
    env = {k: v for k, v in os.environ.items() if k != "PYOPENGL_PLATFORM"}
    out = subprocess.run([sys.executable, "-c", "import sys\n" + code], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and text in lines[0] and "Traceback" not in out.stderr, out.stderr
    assert "renderer: tinyrenderer" in lines[0] or "o2i-pbr" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]      # no output folder, no cache


def test_opening_the_renderer_prints_nothing():
    """pybullet's C banner ("pybullet build time: ...") went to stderr on import, so a CLI run's
    one-line refusal after rendering started (a clipped object) was two lines (regression)."""
    code = ("from rscale.producers.o2i.render import TinyRenderer\n"
            "with TinyRenderer() as r:\n    pass\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stderr == "" and done.stdout == ""
