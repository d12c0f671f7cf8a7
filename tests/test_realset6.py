"""The held-out sixth real-embedding set (benchmarks/realset6, docs/realset6.md): its build is the
icon build of realset with its own packages and one added rule (no icon name that is a realset
query is a query here), and its committed data is whole and consistent. No estimator runs here:
the set is held out for one measurement by a later round."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from benchmark_modules import load_benchmark
from realset_checks import ICON_EMBED_ARGV, ICON_SCORE_ARGV, check_real_set_data, icon_build_calls

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "realset6" / "data"


def _load():
    return load_benchmark("realset6/build.py", "realset6_build")


def test_the_build_is_the_icon_build_with_this_sets_packages_and_excluded_query_names(monkeypatch):
    build = _load()
    seen, embed = icon_build_calls(build, monkeypatch)
    assert seen == {"embed": ICON_EMBED_ARGV[1:], "packages": build.PACKAGES, "doc": "docs/realset6.md",
                    "suffix": ".png", "score": ICON_SCORE_ARGV[1:], "benchmark": "realset6-icons",
                    "stems": build.icon_query_stems(), "scaled": True}
    assert not set(build.PACKAGES) & set(embed.PACKAGES)              # another corpus than realset's


def test_the_excluded_names_are_realsets_query_stems():
    stems = _load().icon_query_stems()
    qids = pq.read_table(ROOT / "benchmarks" / "realset" / "data" / "qrels.parquet")["query_id"].to_pylist()
    assert len(stems) == len(set(qids)) == 500                        # one query per stem there
    assert {q.rsplit("/", 1)[1] for q in qids} == stems and "accessories-calculator" in stems


def _files(rows):
    return pd.DataFrame([{"real_path": f"/usr/share/icons/{theme}/{size}/apps/{stem}.png", "digest": f"{theme}-{stem}-{w}",
                          "width": w, "error": ""} for theme, size, stem, w in rows])


def test_an_icon_name_that_may_not_be_a_query_is_skipped_and_stays_in_the_pool():
    icons = _load().icon_build("build")
    rows = [(t, f"{w}x{w}", stem, w) for t in ("A",) for stem in ("folder", "mail", "edit") for w in (16, 48)]
    free, _, pool_free = icons.select(_files(rows))
    assert len(free) == 3 and pool_free == []
    first = next(iter(free))
    stem = first.rsplit("/", 1)[1]
    queries, qrels, pool = icons.select(_files(rows), not_query_stems=frozenset({stem, "nothing"}))
    assert sorted(queries) == sorted(q for q in free if q != first)
    assert pool == sorted([f"A-{stem}-16", f"A-{stem}-48"])           # its images are pool images
    assert icons.select(_files(rows), frozenset()) == (free, *icons.select(_files(rows))[1:])


def test_the_committed_set_is_whole_and_consistent():
    build = _load()
    man = json.loads((DATA / "manifest.json").read_text())
    assert man["benchmark"] == build.BENCHMARK and sorted(man["packages"]) == sorted(build.PACKAGES)
    assert (man["queries"], man["positives"], man["pool"]) == (500, 3087, 19208)
    assert sum(p.stat().st_size for p in DATA.iterdir()) < 40e6
    check_real_set_data(DATA, man, n_brute=100)
    qids = set(pq.read_table(DATA / "qrels.parquet")["query_id"].to_pylist())
    assert len(qids) == 500 and not {q.rsplit("/", 1)[1] for q in qids} & build.icon_query_stems()
