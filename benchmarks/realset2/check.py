"""Run the shipped estimators once on the WordNet set (docs/realset2.md).

The one home of the check is benchmarks/realset/check.py; this runs it on benchmarks/realset2/data
(the same as ``benchmarks/realset/check.py --set realset2``), with the same options.

Run: PYTHONPATH=src .venv/bin/python benchmarks/realset2/check.py [--json FILE] [--methods ...] [--fractions ...]
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv=None):
    spec = importlib.util.spec_from_file_location("realset_check", HERE.parent / "realset" / "check.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--data" not in argv and "--set" not in argv:
        argv = ["--set", HERE.name, *argv]
    return check.main(argv)


if __name__ == "__main__":
    main()
