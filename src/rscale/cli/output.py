"""Printing for every command: strict JSON, CSV, rich tables, key: value lines, and the
``--format`` option (a fixed choice per command, so ``--format xml`` is a usage error, exit 2)."""

from __future__ import annotations

import sys

import click
import typer

TEXT, TABLE, JSON, CSV, PLOT, MARKDOWN = "text", "table", "json", "csv", "plot", "markdown"


def format_option(*choices: str, help: str | None = None):
    """``--format`` limited to ``choices``; the first is the default (what a person reads)."""
    return typer.Option(choices[0], "--format", click_type=click.Choice(choices),
                        help=help or f"Output format: {', '.join(choices)}.")


def console():
    """A rich console; piped output gets a wide fixed width so tables are not truncated."""
    from rich.console import Console
    return Console() if sys.stdout.isatty() else Console(width=140)


def plain(value):
    """JSON-ready plain values: numpy scalars and arrays, dataclasses, paths and tuples become
    Python numbers, lists, dicts and strings; NaN / inf (no CI, unbounded) become None."""
    import dataclasses
    import math
    from pathlib import PurePath

    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return str(value) if isinstance(value, str) else value    # np.str_ -> str
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return plain({f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
    if isinstance(value, PurePath):
        return str(value)
    if hasattr(value, "tolist"):          # numpy scalars and arrays
        return plain(value.tolist())
    return str(value)


def to_json(value) -> str:
    """Strict JSON for machines (no bare NaN tokens, no numpy reprs)."""
    import json
    return json.dumps(plain(value), indent=2, allow_nan=False)


def print_json(value) -> None:
    typer.echo(to_json(value))


def print_mapping(mapping: dict, fmt: str) -> None:
    """A summary dict as ``key: value`` lines, or as JSON."""
    if fmt == JSON:
        print_json(mapping)
        return
    for key, value in plain(mapping).items():
        typer.echo(f"{key}: {value}")


def print_message(text: str, fmt: str, value) -> None:
    """A one-line status for a person, or ``value`` as JSON for a script."""
    if fmt == JSON:
        print_json(value)
    else:
        typer.echo(text)


def print_rows(rows: list[dict], fmt: str, columns: list[str]) -> None:
    """Prediction rows as a table (``columns``), JSON or CSV (every key)."""
    if fmt == JSON:
        print_json(rows)
    elif fmt == CSV:
        import csv
        if not rows:
            return
        w = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(plain(rows))
    else:
        from rich.table import Table
        table = Table()
        for c in columns:
            table.add_column(c, justify="left" if c in ("backbone", "version", "measure", "estimator", "mode")
                             else "right")
        for r in rows:
            table.add_row(*(_cell(c, r[c]) for c in columns))
        console().print(table)


def _cell(column: str, value) -> str:
    if column == "N":
        return f"{value:.3g}"
    if column == "extrapolation":
        return f"{value:.3g}x"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def printable(text: str) -> str:
    """``text`` with non-printable characters (ESC sequences, bidi overrides) escaped, line breaks
    kept: what a message echoes from the user (a query, a file name) cannot drive the terminal."""
    return "\n".join("".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in line)
                     for line in str(text).split("\n"))


def warn(text: str) -> None:
    print(f"warning: {printable(text)}", file=sys.stderr)


def error(text: str) -> None:
    print(f"error: {printable(text)}", file=sys.stderr)
