"""The third real-embedding set (benchmarks/realset3, docs/realset3.md): its look-alike and selection
rules on hand-made glyphs, the renderer and the stages on matplotlib's bundled fonts (a stand-in
corpus that every test environment has), and the integrity of the committed data."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from benchmark_modules import load_benchmark
from realset_checks import check_committed_glyph_set, check_real_set_data

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "realset3" / "data"


build = load_benchmark("realset3/build.py", "realset3_build")


def _font(name):
    import matplotlib
    return str(Path(matplotlib.get_data_path()) / "fonts" / "ttf" / name)


STANDIN_FONTS = [("mpl", _font(f)) for f in ("DejaVuSans.ttf", "DejaVuSans-Bold.ttf", "DejaVuSerif.ttf",
                                            "DejaVuSansMono.ttf", "STIXGeneral.ttf", "cmr10.ttf")]


def _e(cp, digest, family="F", file=None):
    return {"package": "p", "file": file or f"/f/{family}.ttf", "family": family, "cp": cp, "digest": digest}


# ---------------------------------------------------------------- rules on hand-made glyphs
def test_look_alikes_are_the_nfkc_group_and_one_step_of_shared_renders():
    A, FULL_A, ALPHA, B, C = 0x41, 0xFF21, 0x391, 0x42, 0x43
    entries = [_e(A, "d1", "F1"), _e(ALPHA, "d1", "F1"),        # font 1 draws A and Alpha alike
               _e(ALPHA, "d2", "F2"), _e(B, "d2", "F2"),        # font 2 reuses its Alpha for B
               _e(FULL_A, "d3", "F3"), _e(C, "d4", "F3")]
    alike = build.look_alikes(entries)
    assert alike[A] == {A, FULL_A, ALPHA}           # NFKC (fullwidth A) and the shared render
    assert B not in alike[A]                        # not transitive: A ~ Alpha ~ B does not make A ~ B
    assert alike[ALPHA] == {ALPHA, A, B}
    assert alike[FULL_A] == {FULL_A, A, ALPHA}      # through its NFKC group's member A
    assert alike[C] == {C}


def test_selection_follows_the_design():
    X, Y, Z, W = 0x58, 0x59, 0x5A, 0x57
    entries = []
    for cp in (X, Y, Z, W):
        for fam in ("F1", "F2", "F3"):
            for style in ("R", "B"):                  # two files per family
                entries.append(_e(cp, f"{cp}-{fam}-{style}", fam, f"/f/{fam}-{style}.ttf"))
    entries.append(_e(0x3A7, f"{X}-F1-R", "F1", "/f/F1-R.ttf"))   # Greek Chi drawn as F1-R's X: a look-alike of X
    entries.append(_e(0x3A7, "chi-F2", "F2", "/f/F2-R.ttf"))
    entries.append(_e(0x2C6F, "only-one", "F1", "/f/F1-R.ttf"))   # a codepoint in one family: no positive
    pool_only = [_e(0x100 + i, f"pool-{i:03d}", "F9") for i in range(20)]
    queries, qrels, pool, counts = build.select(entries + pool_only, max_queries=3, max_positives=1, pool_target=12)
    assert len(queries) == 3 and counts["queries"] == 3
    order = sorted({e["cp"] for e in entries + pool_only},
                   key=lambda c: hashlib.sha256(build.codepoint_name(c).encode()).hexdigest())
    accepted = [e["cp"] for _, e in queries]
    assert accepted == [c for c in order if c in accepted]                # taken in hash order
    assert 0x2C6F not in accepted                   # one family only: no positive
    assert not (X in accepted and 0x3A7 in accepted)  # Chi is a look-alike of X: never both
    for qid, q in queries:
        pos = [e for k, e in qrels if k == qid]
        assert len(pos) == 1 and pos[0]["cp"] == q["cp"] and pos[0]["family"] != q["family"]
        assert qid == f"q:{build.codepoint_name(q['cp'])}:{Path(q['file']).stem}"
        ranked = sorted((e for e in entries if e["cp"] == q["cp"]), key=lambda e: hashlib.sha256(
            f"{build.codepoint_name(q['cp'])}\t{Path(e['file']).name}".encode()).hexdigest())
        assert q is ranked[0]
    # the pool: no glyph of a look-alike of a query, one entry per image, in digest order, capped
    taken = set().union(*(build.look_alikes(entries + pool_only)[e["cp"]] for _, e in queries))
    assert all(e["cp"] not in taken for e in pool)
    assert [e["digest"] for e in pool] == sorted(e["digest"] for e in pool) and len(pool) == 12
    if X in accepted:
        assert not any(e["cp"] == 0x3A7 for e in pool)     # Chi goes with X, in every font
    assert counts["pool_available"] >= counts["pool"] == 12


def test_a_candidate_whose_look_alikes_a_query_took_is_skipped():
    A, ALPHA = 0x41, 0x391
    entries = [_e(A, "a1", "F1"), _e(A, "a2", "F2"), _e(ALPHA, "a1", "F1"), _e(ALPHA, "al2", "F2")]
    queries, qrels, pool, counts = build.select(entries, max_queries=10)
    assert len(queries) == 1 and pool == []                     # A and Alpha are one character here
    assert counts["look_alike_codepoints_taken"] == 1


# ---------------------------------------------------------------- renderer and fonts
def test_a_glyph_renders_the_same_pixels_centred_at_its_size():
    r = build.Renderer()
    path = _font("DejaVuSans.ttf")
    big, small = r(path, ord("O")), r(path, ord("o"))
    assert big.size == small.size == (build.CANVAS, build.CANVAS)
    assert build.content_digest(big) == build.content_digest(build.Renderer()(path, ord("O")))
    ink = [np.argwhere(np.asarray(im) < 128) for im in (big, small)]
    heights = [np.ptp(a[:, 0]) for a in ink]
    assert heights[0] > 1.2 * heights[1]                          # O is taller than o: the em is kept
    for a in ink:                                                 # for O and o the box is about the ink
        centre = (a.min(0) + a.max(0)) / 2
        assert np.all(np.abs(centre - build.CANVAS / 2) <= 2)
    assert r(path, 0x20) is None                                  # a space has no ink


def test_the_centred_box_is_pillows_getbbox_not_the_ink():
    # docs/realset3.md: the box joins the ink with the pen's origin, advance and baseline, so a dash
    # keeps its height above the baseline instead of moving to the centre
    from PIL import ImageFont
    path = _font("DejaVuSans.ttf")
    left, top, right, bottom = ImageFont.truetype(path, build.EM, layout_engine=ImageFont.Layout.BASIC).getbbox("-")
    ink = np.argwhere(np.asarray(build.Renderer()(path, ord("-"))) < 128)
    assert ink[:, 0].min() == (build.CANVAS - (bottom - top)) // 2      # the box's top is the ink's top
    assert (ink[:, 0].min() + ink[:, 0].max()) / 2 < build.CANVAS / 2 - 4  # so the dash sits above the centre


def test_a_glyph_wider_than_the_box_is_drawn_smaller_to_fit(monkeypatch):
    monkeypatch.setattr(build, "EM", 400)
    im = build.Renderer()(_font("DejaVuSans.ttf"), ord("W"))
    ink = np.argwhere(np.asarray(im) < 255)
    assert (ink.max(0) - ink.min(0)).max() <= build.MAX_INK + 1


def test_a_fonts_codepoints_leave_out_controls_spaces_and_marks():
    family, cps = build.font_family_and_codepoints(_font("DejaVuSans.ttf"))
    assert family == "DejaVu Sans"
    assert ord("A") in cps and 0x3A9 in cps                       # Latin and Greek letters
    assert 0x20 not in cps and 0xA0 not in cps and 0x301 not in cps and 0xAD not in cps


# ---------------------------------------------------------------- stages on a stand-in corpus
def test_embed_stage_checks_every_render_and_resumes(tmp_path, monkeypatch, torch_threads_kept):
    work = tmp_path / "work"
    build.stage_corpus(work, packages=(), fonts=STANDIN_FONTS[:3], max_queries=3, max_positives=2, pool_target=40)
    glyphs = pq.read_table(work / "glyphs.parquet").to_pandas()
    assert (glyphs.role == "query").sum() == 3 and (glyphs.role == "pool").sum() == 40
    build.stage_embed(work)
    vec = {}
    for c in range(len(build.chunks_of(glyphs))):
        z = np.load(work / "emb" / f"chunk-{c:04d}.npz")
        vec.update(zip(z["ids"].tolist(), z["vectors"]))
    assert set(vec) == set(glyphs["id"])
    v = np.stack(list(vec.values()))
    assert v.shape[1] == 1280 and np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)
    stamp = (work / "emb" / "chunk-0000.npz").stat().st_mtime_ns
    build.stage_embed(work)                                       # resumed: nothing left to do
    assert (work / "emb" / "chunk-0000.npz").stat().st_mtime_ns == stamp
    # a render that is not the corpus stage's stops the build
    glyphs.loc[glyphs.index[0], "digest"] = "0" * 64
    import pyarrow as pa
    pq.write_table(pa.Table.from_pandas(glyphs, preserve_index=False), work / "glyphs.parquet")
    (work / "emb" / "chunk-0000.npz").unlink()
    with pytest.raises(SystemExit, match="renders differently"):
        build.stage_embed(work)


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    """The corpus stage on matplotlib's fonts, random unit vectors standing in for the embedding."""
    work = tmp_path_factory.mktemp("realset3-work")
    build.stage_corpus(work, packages=(), fonts=STANDIN_FONTS, max_queries=12, pool_target=5000)
    glyphs = pq.read_table(work / "glyphs.parquet").to_pandas()
    rng = np.random.default_rng(3)
    centre = {q: rng.standard_normal(32) for q in glyphs.loc[glyphs.role == "query", "id"]}
    emb = work / "emb"
    emb.mkdir()
    rows = glyphs.set_index("id")
    for c, (ids, _, _, _) in enumerate(build.chunks_of(glyphs)):
        vs = []
        for i in ids:
            role, qid = rows.at[i, "role"], rows.at[i, "query_id"]
            base = centre[qid] if role != "pool" else 0.5 * centre[rng.choice(list(centre))]
            v = base + (0.6 if role != "query" else 0.3) * rng.standard_normal(32)
            vs.append(v / np.linalg.norm(v))
        np.savez(emb / f"chunk-{c:04d}.npz", ids=np.asarray(ids, dtype=str), vectors=np.asarray(vs, np.float32))
    (emb / "model.json").write_text(json.dumps({"name": "stand-in"}))
    out = work / "data"
    build.stage_score(work, out)
    return work, out, glyphs


def test_the_corpus_stage_writes_the_selection_and_its_counts(standin):
    work, _, glyphs = standin
    corpus = json.loads((work / "corpus.json").read_text())
    c = corpus["counts"]
    assert c["queries"] == 12 and c["positives"] == int((glyphs.role == "positive").sum())
    assert c["pool"] == min(5000, c["pool_available"]) == int((glyphs.role == "pool").sum())
    assert corpus["renderer"]["canvas"] == build.CANVAS and corpus["renderer"]["freetype"]
    assert glyphs["id"].is_unique                                  # one row per image
    pool = glyphs[glyphs.role == "pool"]
    taken = set(glyphs.loc[glyphs.role != "pool", "cp"])
    assert not taken & set(pool["cp"])


def test_score_stage_writes_truth_draws_and_a_manifest_that_match(standin):
    _, out, glyphs = standin
    man = json.loads((out / "manifest.json").read_text())
    assert man["pool"] == man["pool_designed"] == int((glyphs.role == "pool").sum()) and man["u_max"] == 1.0
    pool = pq.read_table(out / "pool_ids.parquet").to_pandas()
    assert list(pool.columns) == ["id", "u", "source", "font", "codepoint"]
    check_real_set_data(out, man)



def test_a_cut_pool_is_the_lowest_partition_slice_and_its_draws_are_slices_of_it(standin, tmp_path):
    """``score --pool-cut M`` (a diagnostic derivative: the same queries, a shallower sample at each
    fraction) keeps the M pool images of lowest u, and its truth and draws are consistent with that
    pool as a whole set's are with the whole pool."""
    work, full, glyphs = standin
    cut = 1200
    out = tmp_path / "cut"
    build.stage_score(work, out, pool_cut=cut)
    man = json.loads((out / "manifest.json").read_text())
    pool = pq.read_table(out / "pool_ids.parquet").to_pandas()
    whole = pq.read_table(full / "pool_ids.parquet").to_pandas()
    assert man["pool"] == cut and man["pool_designed"] == len(whole) and man["u_max"] < 1.0
    assert set(pool["id"]) == set(whole.nsmallest(cut, "u")["id"]) and man["u_max"] == pool["u"].max()
    check_real_set_data(out, man)
    with pytest.raises(SystemExit, match="--pool-cut"):
        build.stage_score(work, tmp_path / "bad", pool_cut=len(whole) + 1)


def test_the_committed_set_is_whole_and_consistent():
    man = json.loads((DATA / "manifest.json").read_text())
    assert man["pool"] >= 200_000
    check_committed_glyph_set(DATA, build, pool=man["pool"])


# ---------------------------------------------------------------- font collections (docs/realset4.md)
def test_a_collections_members_are_fonts_of_their_own(tmp_path):
    from fontTools.ttLib import TTCollection, TTFont
    ttc = tmp_path / "pair.ttc"
    coll = TTCollection()
    coll.fonts = [TTFont(_font("DejaVuSans.ttf")), TTFont(_font("DejaVuSerif.ttf"))]
    coll.save(str(ttc))
    members = [f"{ttc}#0", f"{ttc}#1"]
    assert build.font_file(members[1]) == (str(ttc), 1) and build.font_file(_font("cmr10.ttf")) == (_font("cmr10.ttf"), 0)
    assert build.font_label(members[1]) == "pair-1" and build.font_label(_font("cmr10.ttf")) == "cmr10"
    assert [build.font_family_and_codepoints(m)[0] for m in members] == ["DejaVu Sans", "DejaVu Serif"]
    r = build.Renderer()
    renders = [build.content_digest(r(m, ord("g"))) for m in members]
    assert renders[0] == build.content_digest(r(_font("DejaVuSans.ttf"), ord("g")))       # member 0 is Sans
    assert renders[1] == build.content_digest(r(_font("DejaVuSerif.ttf"), ord("g")))      # member 1 is Serif
    assert renders[0] != renders[1]


def test_list_fonts_expands_a_collection_into_its_members(tmp_path, monkeypatch):
    from fontTools.ttLib import TTCollection, TTFont
    ttc = tmp_path / "pair.ttc"
    coll = TTCollection()
    coll.fonts = [TTFont(_font("DejaVuSans.ttf")), TTFont(_font("DejaVuSerif.ttf"))]
    coll.save(str(ttc))

    class Listed:
        stdout = f"{ttc}\n{_font('cmr10.ttf')}\n/usr/share/doc/x/README\n"
    monkeypatch.setattr(build.subprocess, "run", lambda *a, **k: Listed())
    real = os.path.realpath
    assert build.list_fonts(("pkg",)) == sorted([("pkg", f"{real(ttc)}#0"), ("pkg", f"{real(ttc)}#1"),
                                                 ("pkg", real(_font("cmr10.ttf")))], key=lambda r: r[1])
