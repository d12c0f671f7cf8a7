"""The seventh real-embedding validation set (docs/realset7.md): icons of Paper, Mint-Y and YASIS.

The icon set of docs/realset.md built from another corpus, by the same rules and the same code
(``benchmarks/realset/embed.py`` and ``build.py``, loaded through ``benchmarks/realset6/build.py``),
with realset6's added rule over both earlier icon sets: no icon file stem that is a query of
``realset`` or ``realset6`` is a query here, and a query is taken from an instance's 1x folders
(``query_from_scaled=False``: the rule amended after the first build gave 3 queries, before any
measurement; docs/realset7.md). Held out: nothing is measured on it until the round
that uses it has written down its rule (docs/realset7.md).

Run (docs/realset7.md, "Rebuilding"):
  PYTHONPATH=src .venv/bin/python benchmarks/realset7/build.py embed --work /tmp/realset7 --part 0 --parts 2 &
  PYTHONPATH=src .venv/bin/python benchmarks/realset7/build.py embed --work /tmp/realset7 --part 1 --parts 2
  PYTHONPATH=src .venv/bin/python benchmarks/realset7/build.py score --work /tmp/realset7 --out benchmarks/realset7/data
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGES = ["paper-icon-theme", "mint-y-icons", "gnome-icon-theme-yasis"]
BENCHMARK = "realset7-icons"
EARLIER_ICON_SETS = ("realset", "realset6")


def realset6_build():
    """benchmarks/realset6/build.py: the icon build's loader and the earlier sets' query stems."""
    spec = importlib.util.spec_from_file_location("realset6_build_for_7", HERE.parent / "realset6" / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def excluded_query_stems() -> frozenset[str]:
    """The file stems of every earlier icon set's queries."""
    return realset6_build().query_stems_of(EARLIER_ICON_SETS)


def main(argv=None):
    return realset6_build().icon_set_main(argv, packages=PACKAGES, doc="docs/realset7.md", benchmark=BENCHMARK,
                                          not_query_stems=excluded_query_stems(), query_from_scaled=False)


if __name__ == "__main__":
    main()
