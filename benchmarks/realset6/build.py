"""The sixth real-embedding validation set (docs/realset6.md): icons of five other icon themes.

The icon set of docs/realset.md built from another corpus (the Moka, Faba, Faenza, Yaru,
nuoveXT2 and GNOME-Colors themes' PNG files), by the same rules and the same code
(``benchmarks/realset/embed.py`` and ``build.py``, loaded by file), with one rule added: no icon
file stem that is a query of ``realset`` is a query here. Held out: nothing is measured on it
until the round that uses it has written down its rule (docs/realset6.md).

Run (docs/realset6.md, "Rebuilding"):
  PYTHONPATH=src .venv/bin/python benchmarks/realset6/build.py embed --work /tmp/realset6 --part 0 --parts 2 &
  PYTHONPATH=src .venv/bin/python benchmarks/realset6/build.py embed --work /tmp/realset6 --part 1 --parts 2
  PYTHONPATH=src .venv/bin/python benchmarks/realset6/build.py score --work /tmp/realset6 --out benchmarks/realset6/data
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ICON_SET = HERE.parent / "realset"
PACKAGES = ["moka-icon-theme", "faba-icon-theme", "faenza-icon-theme", "yaru-theme-icon", "lxde-icon-theme",
            "gnome-colors-common"]
BENCHMARK = "realset6-icons"


def icon_build(name: str):
    """benchmarks/realset/``name``.py (the icon sets' one embedding and build)."""
    if str(ICON_SET) not in sys.path:
        sys.path.insert(0, str(ICON_SET))          # they import protocol.py by name
    spec = importlib.util.spec_from_file_location(f"realset_{name}", ICON_SET / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def icon_query_stems(name: str = "realset", root: Path = HERE.parent) -> frozenset[str]:
    """The icon file stems of icon set ``name``'s queries, from its committed qrels (a query id
    is ``q:THEME/CONTEXT/STEM``)."""
    import pyarrow.parquet as pq
    qids = pq.read_table(root / name / "data" / "qrels.parquet", columns=["query_id"])["query_id"].to_pylist()
    return frozenset(q.rsplit("/", 1)[1] for q in qids)


def query_stems_of(names, root: Path = HERE.parent) -> frozenset[str]:
    """The icon file stems of the queries of every icon set in ``names``."""
    return frozenset().union(*(icon_query_stems(name, root) for name in names))


def icon_set_main(argv, *, packages, doc: str, benchmark: str, not_query_stems=frozenset(),
                  query_from_scaled: bool = True, suffix: str = ".png"):
    """The command line of an icon set's build (``embed`` or ``score``) on the icon build of
    docs/realset.md: this set's ``packages`` (their ``suffix`` files) and design ``doc``, its
    ``benchmark`` name, the query stems it excludes and where its queries may come from."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("embed", "score"):
        sys.exit("usage: build.py embed --work DIR [--part I --parts N] | score --work DIR --out DIR")
    if argv[0] == "embed":
        return icon_build("embed").main(argv[1:], packages=packages, doc=doc, suffix=suffix)
    return icon_build("build").main(argv[1:], benchmark=benchmark, not_query_stems=not_query_stems,
                                    query_from_scaled=query_from_scaled)


def main(argv=None):
    return icon_set_main(argv, packages=PACKAGES, doc="docs/realset6.md", benchmark=BENCHMARK,
                         not_query_stems=icon_query_stems())


if __name__ == "__main__":
    main()
