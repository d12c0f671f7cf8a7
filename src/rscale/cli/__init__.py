"""The ``rscale`` command line: thin typer commands over :mod:`rscale.api`, one module per
command group (data, registry, querying, producers; assembled in :mod:`rscale.cli.app`) and one
for printing (:mod:`rscale.cli.output`).

Every command parses its arguments, calls one API function and prints. An RscaleError becomes
its message on stderr and a non-zero exit code; users never see a traceback for their own mistakes.
"""

from __future__ import annotations

import os
import sys

# OpenBLAS keeps its worker threads spinning for ~0.1 s after every call by default; between the
# scoring engine's GEMMs that spin takes the cores its post-GEMM threads need (engine 0.72 -> 0.8
# of a bare GEMM when they sleep at once, benchmarks/scoring_speed.py). Read when numpy loads.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

from rscale.cli.app import app  # noqa: E402
from rscale.cli.output import error  # noqa: E402
from rscale.errors import RscaleError


def main(argv=None) -> int:
    from rscale.store.catalog_cache import deferred_snapshot_fills

    # a read fills the catalog snapshot only when its command succeeds: a refused command writes nothing
    with deferred_snapshot_fills() as fills:
        rc = _run(argv)
        if rc == 0:
            fills.write()
    return rc


def _run(argv) -> int:
    try:
        rc = app(args=argv, prog_name="rscale", standalone_mode=False)
        if isinstance(rc, int):  # typer.Exit(code) is returned, not raised, in this mode
            return rc
    except RscaleError as exc:
        error(str(exc))
        return exc.exit_code
    except SystemExit as exc:  # typer's own exits (--help, usage errors)
        return int(exc.code or 0)
    except Exception as exc:
        # click's usage errors (bad option, bad choice, missing argument) arrive here in
        # non-standalone mode: one line naming the problem and where the help is.
        if hasattr(exc, "format_message") and isinstance(getattr(exc, "exit_code", None), int):
            ctx = getattr(exc, "ctx", None)
            where = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            error(f"{exc.format_message()}{where}")
            return exc.exit_code
        if type(exc).__name__ == "Abort":
            print("aborted", file=sys.stderr)
            return 1
        if type(exc).__name__ == "Exit":
            return int(getattr(exc, "exit_code", 0))
        raise
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
