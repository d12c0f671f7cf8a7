"""The held-out fifth real-embedding set (benchmarks/realset5, docs/realset5.md): its build is the
glyph build of realset3 with its own packages and two added rules (no earlier glyph set's query is
a query here; a glyph FreeType cannot rasterise is skipped and listed), and its committed data is
whole and consistent. No estimator runs here: the set is held out for one measurement by a later
round."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from benchmark_modules import load_benchmark
from realset_checks import check_committed_glyph_set

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "realset5" / "data"


def _load():
    return load_benchmark("realset5/build.py", "realset5_build")


def _e(cp, digest, family, file=None):
    return {"package": "p", "file": file or f"/f/{family}.ttf", "family": family, "cp": cp, "digest": digest}


def test_the_build_is_the_glyph_build_with_this_sets_packages_folder_and_excluded_queries(monkeypatch):
    build = _load()
    glyphs = build.glyph_build()
    seen = {}
    monkeypatch.setattr(build, "glyph_build", lambda: glyphs)
    monkeypatch.setattr(glyphs, "stage_corpus", lambda work, packages, doc, not_queries:
                        seen.update(packages=packages, doc=doc, not_queries=not_queries))
    monkeypatch.setattr(glyphs, "stage_score", lambda work, out, benchmark, pool_cut=0:
                        seen.update(out=out, benchmark=benchmark, pool_cut=pool_cut))
    build.main(["corpus", "--work", "/nonexistent"])
    build.main(["score", "--work", "/nonexistent"])
    assert seen == {"packages": build.PACKAGES, "doc": "docs/realset5.md", "out": DATA,
                    "benchmark": "realset5-script-glyphs", "pool_cut": 0,
                    "not_queries": frozenset(build.other_sets_query_codepoints())}
    assert not set(build.PACKAGES) & set(glyphs.PACKAGES)           # another corpus than realset3's ...
    assert not set(build.PACKAGES) & set(load_benchmark("realset4/build.py", "realset4_build").PACKAGES)  # ... and 4's


def test_the_excluded_codepoints_are_the_earlier_glyph_sets_queries():
    build = _load()
    cps = build.other_sets_query_codepoints()
    for name in ("realset3", "realset4"):
        qids = set(pq.read_table(ROOT / "benchmarks" / name / "data" / "qrels.parquet")["query_id"].to_pylist())
        assert len(qids) == 1000
        assert {int(q.split(":")[1][2:], 16) for q in qids} <= cps
    assert 1000 < len(cps) <= 2000                  # the two sets share some query codepoints


def test_a_codepoint_that_may_not_be_a_query_is_skipped_and_stays_in_the_pool():
    glyphs = _load().glyph_build()
    entries = [_e(cp, f"{cp}-{fam}", fam) for cp in (0x41, 0x42, 0x43) for fam in ("F1", "F2")]
    free, _, _, _ = glyphs.select(entries, max_queries=10)
    assert len(free) == 3
    first = free[0][1]["cp"]
    queries, qrels, pool, counts = glyphs.select(entries, max_queries=10, not_queries={first, 0x99})
    assert [e["cp"] for _, e in queries] == [e["cp"] for _, e in free if e["cp"] != first]
    assert sorted(e["digest"] for e in pool) == [f"{first}-F1", f"{first}-F2"]   # its glyphs are pool images
    assert counts["codepoints_not_queries"] == 1                  # of the corpus' codepoints
    assert "codepoints_not_queries" not in glyphs.select(entries, max_queries=10)[3]


def test_a_glyph_freetype_cannot_rasterise_is_skipped_and_listed():
    glyphs = _load().glyph_build()

    def renderer(path, cp):
        if cp == 0x42:
            raise OSError("raster overflow")
        from PIL import Image
        im = Image.new("L", (8, 8), 255)
        im.putpixel((cp % 8, 0), 0)
        return im
    glyphs.font_family_and_codepoints = lambda path: ("F", [0x41, 0x42, 0x43])
    entries, skipped = glyphs.read_corpus([("p", "/f/a.ttf")], renderer=renderer, progress=False)
    assert [e["cp"] for e in entries] == [0x41, 0x43]
    assert skipped["glyphs_unrenderable"] == ["/f/a.ttf U+0042: raster overflow"]
    glyphs.font_family_and_codepoints = lambda path: ("F", [0x41])
    assert "glyphs_unrenderable" not in glyphs.read_corpus([("p", "/f/a.ttf")], renderer=renderer, progress=False)[1]

    def unreadable(path, cp):
        raise PermissionError(13, "Permission denied", path)
    with pytest.raises(PermissionError):          # any other OSError stops the build
        glyphs.read_corpus([("p", "/f/a.ttf")], renderer=unreadable, progress=False)


def test_the_committed_set_is_whole_and_consistent():
    build = _load()
    check_committed_glyph_set(DATA, build)
    excluded = build.other_sets_query_codepoints()
    qids = set(pq.read_table(DATA / "qrels.parquet")["query_id"].to_pylist())
    assert len(qids) == 1000 and not {int(q.split(":")[1][2:], 16) for q in qids} & excluded
