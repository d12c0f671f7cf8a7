"""The eighth real-embedding validation set (docs/realset8.md): SVG icons of Papirus, Numix and Breeze.

The icon set of docs/realset.md built from SVG themes, by the same rules and the same code
(``benchmarks/realset/embed.py`` with ``suffix=".svg"``: each file rasterised by librsvg at the
size its folder names, then as before; ``build.py``, loaded through
``benchmarks/realset6/build.py``), with the earlier icon sets' added rules: no icon file stem that
is a query of ``realset``, ``realset6`` or ``realset7`` is a query here, and a query is taken from
an instance's 1x folders (``query_from_scaled=False``). Held out: nothing is measured on it until
the round that uses it has written down its rule (docs/realset8.md).

Run (docs/realset8.md, "Rebuilding"):
  PYTHONPATH=src .venv/bin/python benchmarks/realset8/build.py embed --work /tmp/realset8 --part 0 --parts 2 &
  PYTHONPATH=src .venv/bin/python benchmarks/realset8/build.py embed --work /tmp/realset8 --part 1 --parts 2
  PYTHONPATH=src .venv/bin/python benchmarks/realset8/build.py score --work /tmp/realset8 --out benchmarks/realset8/data
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGES = ["papirus-icon-theme", "numix-icon-theme", "breeze-icon-theme"]
BENCHMARK = "realset8-icons"
EARLIER_ICON_SETS = ("realset", "realset6", "realset7")


def realset6_build():
    """benchmarks/realset6/build.py: the icon build's loader and the earlier sets' query stems."""
    spec = importlib.util.spec_from_file_location("realset6_build_for_8", HERE.parent / "realset6" / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def excluded_query_stems() -> frozenset[str]:
    """The file stems of every earlier icon set's queries."""
    return realset6_build().query_stems_of(EARLIER_ICON_SETS)


def main(argv=None):
    return realset6_build().icon_set_main(argv, packages=PACKAGES, doc="docs/realset8.md", benchmark=BENCHMARK,
                                          not_query_stems=excluded_query_stems(), query_from_scaled=False, suffix=".svg")


if __name__ == "__main__":
    main()
