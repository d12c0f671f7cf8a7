"""Arguments several command groups share: the registry folder, gallery sizes, output paths.

Each check here runs before a command does any work, so a refused argument leaves nothing behind.
"""

from __future__ import annotations

from pathlib import Path

import typer

from rscale.errors import InvalidArgumentError


def _registry_folder(value: Path | None) -> Path | None:
    if value is not None and value.exists() and not value.is_dir():
        raise InvalidArgumentError(f"--registry {value} is a file, not a registry folder; pass the folder that "
                                   "holds catalog.duckdb (or a new folder name)")
    return value


def registry_option():
    return typer.Option(None, "--registry", "-r", envvar="RSCALE_REGISTRY", callback=_registry_folder,
                        help="Registry folder (default: ./registry).")


def gallery_size(text: str, option: str = "--n") -> int:
    """A gallery size in the query grammar's spelling (1e8, 759k, 100_000_000): a whole number
    between 1 and 1e15, read by the same parser as ``N=`` in a query."""
    from rscale.query.grammar import parse_size
    try:
        return parse_size(text)
    except ValueError as exc:
        raise InvalidArgumentError(f"{option} {text}: {exc}; write e.g. 1e8, 759k or 100_000_000") from None


def positive_int(value: int, option: str, minimum: int = 1, maximum: int | None = None) -> int:
    if value < minimum or (maximum is not None and value > maximum):
        within = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum:,}"
        raise InvalidArgumentError(f"{option} {value}: give a whole number {within}")
    return value


# bounds on work a typo could make unbounded (issue 12): a 95% percentile interval is stable well
# before 10,000 resamples; a log-N curve needs no more than 1,000 points
MAX_BOOTSTRAP = 10_000
MAX_POINTS = 1_000


def output_file(path: Path | None, option: str = "--out") -> Path | None:
    """An output path that must name a file: refused when it is an existing folder."""
    if path is not None and path.is_dir():
        raise InvalidArgumentError(f"{option} {path} is a folder; name the file to write (e.g. {path}/out.parquet)")
    return path


def output_folder(path: Path, option: str = "--out") -> Path:
    """An output path that must name a folder: refused when it is an existing file."""
    if path.exists() and not path.is_dir():
        raise InvalidArgumentError(f"{option} {path} is a file; name a folder to write into")
    return path


CI_KINDS = ("benchmark", "population")   # rscale.core.interval.CI_KINDS (not imported: the cold path)


def ci_option():
    import click
    return typer.Option("benchmark", "--ci", click_type=click.Choice(CI_KINDS),
                        help="benchmark: the value of these queries (distractor sampling and tail-model "
                             "uncertainty, from the stored replicates); population: also the query bootstrap.")
