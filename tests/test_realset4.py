"""The held-out fourth real-embedding set (benchmarks/realset4, docs/realset4.md): its build is the
glyph build of realset3 with its own packages, and its committed data is whole and consistent. No
estimator runs here: the set is held out for one measurement by a later round."""

from __future__ import annotations

from pathlib import Path

from benchmark_modules import load_benchmark
from realset_checks import check_committed_glyph_set

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "realset4" / "data"


def _load():
    return load_benchmark("realset4/build.py", "realset4_build")


def test_the_build_is_the_glyph_build_with_this_sets_packages_and_folder(monkeypatch):
    build = _load()
    glyphs = build.glyph_build()
    seen = {}
    monkeypatch.setattr(build, "glyph_build", lambda: glyphs)
    monkeypatch.setattr(glyphs, "stage_corpus", lambda work, packages, doc: seen.update(packages=packages, doc=doc))
    monkeypatch.setattr(glyphs, "stage_score", lambda work, out, benchmark, pool_cut=0:
                        seen.update(out=out, benchmark=benchmark, pool_cut=pool_cut))
    build.main(["corpus", "--work", "/nonexistent"])
    build.main(["score", "--work", "/nonexistent"])
    assert seen == {"packages": build.PACKAGES, "doc": "docs/realset4.md", "out": DATA, "benchmark": "realset4-cjk-glyphs",
                    "pool_cut": 0}
    assert not set(build.PACKAGES) & set(glyphs.PACKAGES)           # another corpus than realset3's


def test_the_committed_set_is_whole_and_consistent():
    check_committed_glyph_set(DATA, _load())
