"""The held-out seventh real-embedding set (benchmarks/realset7, docs/realset7.md): its build is
the icon build of realset with its own packages, the earlier icon sets' query names excluded and
queries taken from 1x folders, and its committed data is whole and consistent. No estimator runs
here: the set is held out for one measurement by a later round."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from benchmark_modules import load_benchmark
from realset_checks import ICON_EMBED_ARGV, ICON_SCORE_ARGV, check_real_set_data, icon_build_calls

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "realset7" / "data"


def _load():
    return load_benchmark("realset7/build.py", "realset7_build")


def test_the_build_is_the_icon_build_with_this_sets_packages_and_rules(monkeypatch):
    build = _load()
    seen, embed = icon_build_calls(build, monkeypatch)
    six = build.realset6_build()
    assert seen == {"embed": ICON_EMBED_ARGV[1:], "packages": build.PACKAGES, "doc": "docs/realset7.md",
                    "suffix": ".png", "score": ICON_SCORE_ARGV[1:], "benchmark": "realset7-icons",
                    "stems": six.icon_query_stems("realset") | six.icon_query_stems("realset6"), "scaled": False}
    six_packages = load_benchmark("realset6/build.py", "realset6_build_packages").PACKAGES
    assert not set(build.PACKAGES) & (set(embed.PACKAGES) | set(six_packages))     # another corpus


def _files(rows):
    return pd.DataFrame([{"real_path": f"/usr/share/icons/T/{folder}/apps/{stem}.png", "digest": f"{folder}-{stem}",
                          "width": w, "error": ""} for folder, stem, w in rows])


def test_a_query_comes_from_the_1x_folder_when_an_at2x_folder_holds_a_second_48px_image():
    icons = _load().realset6_build().icon_build("build")
    rows = [(f, stem, w) for stem in ("mail", "edit")
            for f, w in (("16", 16), ("24", 24), ("24@2x", 48), ("48", 48), ("48@2x", 96), ("64", 64))]
    assert icons.select(_files(rows))[0] == {}                      # the old rule: two 48-px images, no query
    queries, qrels, pool = icons.select(_files(rows), query_from_scaled=False)
    assert sorted(queries) == ["q:T/apps/edit", "q:T/apps/mail"]
    assert queries["q:T/apps/mail"] == "48-mail"
    mail = sorted(p for q, p in qrels if q == "q:T/apps/mail")
    assert mail == ["16-mail", "24-mail", "48@2x-mail", "64-mail"]  # 24@2x (48 px) is not a positive
    assert pool == []                                               # nor a pool image (the query's stem)


def test_the_committed_set_is_whole_and_consistent():
    build = _load()
    man = json.loads((DATA / "manifest.json").read_text())
    assert man["benchmark"] == build.BENCHMARK and sorted(man["packages"]) == sorted(build.PACKAGES)
    assert (man["queries"], man["positives"], man["pool"]) == (500, 4432, 15095)
    assert sum(p.stat().st_size for p in DATA.iterdir()) < 40e6
    check_real_set_data(DATA, man, n_brute=100)
    qids = set(pq.read_table(DATA / "qrels.parquet")["query_id"].to_pylist())
    assert len(qids) == 500 and not {q.rsplit("/", 1)[1] for q in qids} & build.excluded_query_stems()
