"""The fourth real-embedding validation set (docs/realset4.md): CJK characters across typefaces.

The glyph set of docs/realset3.md built from another corpus: the CJK font packages of Debian
(Chinese, Japanese and Korean typefaces, collections included), by the same rules and the same
code (``benchmarks/realset3/build.py``, loaded by file). Held out: nothing is measured on it until
the round that uses it has written down its rule (docs/realset4.md).

Run (docs/realset4.md, "Rebuilding"):
  PYTHONPATH=src .venv/bin/python benchmarks/realset4/build.py corpus --work /tmp/realset4
  PYTHONPATH=src .venv/bin/python benchmarks/realset4/build.py embed --work /tmp/realset4 &
  PYTHONPATH=src .venv/bin/python benchmarks/realset4/build.py embed --work /tmp/realset4
  PYTHONPATH=src .venv/bin/python benchmarks/realset4/build.py score --work /tmp/realset4 --out benchmarks/realset4/data
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGES = ("fonts-noto-cjk", "fonts-arphic-ukai", "fonts-arphic-uming", "fonts-wqy-zenhei", "fonts-wqy-microhei",
            "fonts-ipafont-gothic", "fonts-ipafont-mincho", "fonts-ipaexfont-gothic", "fonts-ipaexfont-mincho",
            "fonts-nanum", "fonts-unfonts-core", "fonts-baekmuk", "fonts-hanazono", "fonts-vlgothic")
BENCHMARK = "realset4-cjk-glyphs"


def glyph_build():
    """benchmarks/realset3/build.py, the glyph sets' one build."""
    spec = importlib.util.spec_from_file_location("realset3_build", HERE.parent / "realset3" / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(argv=None):
    return glyph_build().main(argv, packages=PACKAGES, benchmark=BENCHMARK, doc="docs/realset4.md",
                              data=HERE / "data", description=__doc__.split("\n")[0])


if __name__ == "__main__":
    main()
