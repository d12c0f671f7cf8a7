"""The held-out eighth real-embedding set (benchmarks/realset8, docs/realset8.md): its build is the
icon build of realset on SVG files (rasterised by librsvg at the size their folder names), with
its own packages, the earlier icon sets' query names excluded and queries taken from 1x folders;
its committed data is whole and consistent. No estimator runs here: the set is held out for one
measurement by a later round."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from benchmark_modules import load_benchmark
from realset_checks import ICON_EMBED_ARGV, ICON_SCORE_ARGV, check_real_set_data, icon_build_calls

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "realset8" / "data"


def _load():
    return load_benchmark("realset8/build.py", "realset8_build")


def test_the_build_is_the_icon_build_on_svg_files_with_this_sets_packages_and_rules(monkeypatch):
    build = _load()
    seen, embed = icon_build_calls(build, monkeypatch)
    six = build.realset6_build()
    earlier = six.icon_query_stems("realset") | six.icon_query_stems("realset6") | six.icon_query_stems("realset7")
    assert seen == {"embed": ICON_EMBED_ARGV[1:], "packages": build.PACKAGES, "doc": "docs/realset8.md",
                    "suffix": ".svg", "score": ICON_SCORE_ARGV[1:], "benchmark": "realset8-icons",
                    "stems": earlier, "scaled": False}
    others = set(embed.PACKAGES) | set(load_benchmark("realset6/build.py", "realset6_build_p").PACKAGES) \
        | set(load_benchmark("realset7/build.py", "realset7_build_p").PACKAGES)
    assert not set(build.PACKAGES) & others                                   # another corpus


@pytest.mark.parametrize("path,size", [
    ("/usr/share/icons/Papirus/48x48/apps/firefox.svg", 48),
    ("/usr/share/icons/breeze/actions/22/edit-copy.svg", 22),
    ("/usr/share/icons/Numix/24@2x/apps/mail.svg", 48),
    ("/usr/share/icons/T/24x24@2x/apps/mail.svg", 48),
    ("/usr/share/icons/T/16/apps/32/mail.svg", 16),                # the first size folder
    ("/usr/share/icons/Papirus/symbolic/apps/mail-symbolic.svg", None),
    ("/usr/share/icons/T/scalable/apps/mail.svg", None),
    ("/usr/share/icons/T/apps/mail48.svg", None),                  # a file name is not a folder
])
def test_an_svg_is_rendered_at_the_size_its_folder_names(path, size):
    assert _load().realset6_build().icon_build("embed").folder_size(path) == size


def test_an_svg_is_rasterised_by_rsvg_convert_at_that_size_and_decoded_to_rgba(monkeypatch):
    """load_rgba hands an SVG to rsvg-convert at its folder's size, aspect ratio kept, and decodes
    the PNG it writes; a PNG is read as before, without the renderer."""
    from PIL import Image
    embed = _load().realset6_build().icon_build("embed")
    calls = []

    def fake_run(cmd, capture_output, check):
        calls.append(cmd)
        buf = io.BytesIO()
        Image.new("RGBA", (int(cmd[2]), int(cmd[4])), (10, 20, 30, 128)).save(buf, "PNG")
        return subprocess.CompletedProcess(cmd, 0, stdout=buf.getvalue())

    monkeypatch.setattr(embed.subprocess, "run", fake_run)
    im = embed.load_rgba("/usr/share/icons/Numix/24@2x/apps/mail.svg")
    assert calls == [["rsvg-convert", "-w", "48", "-h", "48", "-a", "-f", "png",
                      "/usr/share/icons/Numix/24@2x/apps/mail.svg"]]
    assert im.mode == "RGBA" and im.size == (48, 48) and im.getpixel((3, 3)) == (10, 20, 30, 128)


def test_a_png_is_decoded_without_the_renderer(tmp_path, monkeypatch):
    from PIL import Image
    embed = _load().realset6_build().icon_build("embed")
    Image.new("RGB", (16, 16), (1, 2, 3)).save(tmp_path / "a.png")
    monkeypatch.setattr(embed.subprocess, "run", lambda *a, **k: pytest.fail("a PNG needs no renderer"))
    im = embed.load_rgba(tmp_path / "a.png")
    assert im.mode == "RGBA" and np.asarray(im)[0, 0].tolist() == [1, 2, 3, 255]


def test_the_committed_set_is_whole_and_consistent():
    build = _load()
    man = json.loads((DATA / "manifest.json").read_text())
    assert man["benchmark"] == build.BENCHMARK and sorted(man["packages"]) == sorted(build.PACKAGES)
    assert man["renderer"] == "rsvg-convert version 2.54.7"
    assert (man["queries"], man["positives"], man["pool"]) == (500, 2314, 72512)
    assert sum(p.stat().st_size for p in DATA.iterdir()) < 50e6
    check_real_set_data(DATA, man, n_brute=100)
    qids = set(pq.read_table(DATA / "qrels.parquet")["query_id"].to_pylist())
    assert len(qids) == 500 and not {q.rsplit("/", 1)[1] for q in qids} & build.excluded_query_stems()


def test_the_accuracy_table_does_not_list_the_held_out_real_set():
    """realset8 is held out (docs/realset8.md): no seen-set list names it until a round spends it."""
    at = load_benchmark("accuracy_table.py", "accuracy_table_for_realset8_test")
    et = load_benchmark("edge_transfer.py", "edge_transfer_for_realset8")
    assert "realset8" not in at.REAL_SETS and "realset8" not in et.SEEN_REAL_SETS


def test_the_svg_listing_keeps_each_real_file_once_and_only_under_a_size_folder(monkeypatch, tmp_path):
    """list_files(".svg"): the package's SVG files, symlinks resolved to one real file, those whose
    real path names no size left out; the PNG listing of the same package is untouched by it."""
    embed = _load().realset6_build().icon_build("embed")
    root = tmp_path / "usr" / "share" / "icons" / "T"
    for folder in ("48x48/apps", "16x16/apps", "symbolic/apps", "scalable/apps"):
        (root / folder).mkdir(parents=True)
    for folder in ("48x48/apps", "16x16/apps", "symbolic/apps", "scalable/apps"):
        (root / folder / "mail.svg").write_text("<svg/>")
    (root / "48x48" / "apps" / "mail-alias.svg").symlink_to(root / "48x48" / "apps" / "mail.svg")
    (root / "48x48" / "apps" / "mail.png").write_bytes(b"")
    listed = [str(p) for p in sorted(root.rglob("*")) if p.is_file() or p.is_symlink()]
    monkeypatch.setattr(embed.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(
        cmd, 0, stdout="\n".join(listed) + "\n"))
    svgs = embed.list_files(["pkg"], ".svg")
    assert [(p, Path(f).relative_to(root).as_posix(), Path(r).relative_to(root).as_posix()) for p, f, r in svgs] == [
        ("pkg", "16x16/apps/mail.svg", "16x16/apps/mail.svg"),
        ("pkg", "48x48/apps/mail-alias.svg", "48x48/apps/mail.svg")]      # the alias lists first; one real file
    assert [Path(r).name for _, _, r in embed.list_files(["pkg"])] == ["mail.png"]
