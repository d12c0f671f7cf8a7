"""Command definitions. Heavy work is imported inside each command."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Tail-aware retrieval evaluation: metrics at any gallery size from a small sample.")


def _console():
    """A rich console; piped output gets a wide fixed width so tables are not truncated."""
    import sys

    from rich.console import Console
    return Console() if sys.stdout.isatty() else Console(width=140)


def _parse_size(text: str) -> float:
    from rscale.core.law import check_n
    t = text.strip().lower().replace("_", "")
    mult = {"k": 1e3, "m": 1e6, "b": 1e9}.get(t[-1:], 1.0)
    if t[-1:] in "kmb":
        t = t[:-1]
    try:
        value = float(t) * mult
    except ValueError:
        from rscale.errors import InvalidArgumentError
        raise InvalidArgumentError(f"cannot read gallery size {text!r}; write e.g. 1e8, 759k or 100_000_000") from None
    return check_n(value)


@app.command()
def demo(
    n: str = typer.Option("1e8", "--n", help="Gallery size to predict (1e8, 759k, ...)."),
    fraction: float = typer.Option(0.05, help="Share of the pool that is sampled."),
    k: int = typer.Option(1000, help="mAP cut-off."),
    queries: Optional[int] = typer.Option(None, help="Override the number of queries."),
    seed: int = typer.Option(0, help="Random seed."),
    backbone: Optional[list[str]] = typer.Option(None, "--backbone", "-b", help="Simulated backbone(s)."),
):
    """Simulate benchmarks, sample a share of the pool, print truth next to predictions."""
    from rich.table import Table

    from rscale import api

    size = _parse_size(n)
    rows = api.demo(backbone, n=size, fraction=fraction, k=k, n_queries=queries, seed=seed)
    table = Table(title=f"mAP@{k} at N={size:.3g} predicted from a {fraction:.0%} sample "
                        f"(S={rows[0].s:,}) of simulated benchmarks",
                  caption="truth: exact realised value at N | at S: metric on the sample alone | "
                          "count: x=c/S | oracle: law on the true hardness. (error vs truth)")
    table.add_column("backbone (simulated)", no_wrap=True)
    table.add_column("tail", no_wrap=True)
    table.add_column("Q", justify="right")
    for col in ("truth", "at S", "count", "oracle"):
        table.add_column(col, justify="right", no_wrap=True)
    for r in rows:
        table.add_row(r.backbone, r.family, str(r.n_queries), f"{r.truth:.4f}",
                      f"{r.evaluate_at_s:.4f} ({r.evaluate_at_s - r.truth:+.3f})",
                      f"{r.count:.4f} ({r.count - r.truth:+.3f})",
                      f"{r.true_hardness_expected:.4f} ({r.true_hardness_expected - r.truth:+.3f})")
    _console().print(table)


@app.command()
def simulate(
    backbone: str = typer.Argument(..., help="Simulated backbone preset (sim_bounded, ...)."),
    out: Path = typer.Option(..., "--out", "-o", help="Sample-stats Parquet file to write."),
    s: str = typer.Option("5e6", "--s", help="Sample size S."),
    k: int = typer.Option(4000, help="Top scores kept per query."),
    queries: Optional[int] = typer.Option(None, help="Override the number of queries."),
    seed: int = typer.Option(0),
):
    """Write the sample stats of a simulated backbone (the estimators' input format)."""
    from rscale import api

    path = api.simulate_sample_stats(backbone, out, s=int(_parse_size(s)), k=k, n_queries=queries, seed=seed)
    typer.echo(f"wrote {path}")


@app.command()
def check(path: Path = typer.Argument(..., help="A sample-stats Parquet file.")):
    """Validate a sample-stats file and print a summary."""
    from rscale import api

    info = api.describe_sample_stats(path)
    for key, value in info.items():
        typer.echo(f"{key}: {value}")


@app.command()
def estimate(
    sample_stats: Path = typer.Argument(..., help="Sample-stats Parquet file."),
    method: str = typer.Option("evt", "--method", "-m", help="evt (default), evt-paper or count."),
    param: Optional[list[str]] = typer.Option(None, "--param", "-p", help="Estimator parameter name=value (repeatable)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Hardness Parquet file to write."),
    fmt: str = typer.Option("table", "--format", help="table or json."),
):
    """Estimate per-positive hardness from a distractor sample."""
    import json

    from rscale import api

    summary = api.estimate(sample_stats, method, param or (), out)
    if fmt == "json":
        typer.echo(json.dumps(summary, indent=2))
        return
    for key, value in summary.items():
        typer.echo(f"{key}: {value}")


@app.command()
def predict(
    hardness: Path = typer.Argument(..., help="Hardness Parquet file (from rscale estimate)."),
    metric: list[str] = typer.Option(["mAP@1000"], "--metric", help="Measure(s): mAP@1000, R@1, Recall@100, MRR."),
    n: list[str] = typer.Option(["1e8"], "--n", help="Gallery size(s): 1e8, 759k, ..."),
    mode: str = typer.Option("plugin", help="plugin (default, the paper's) or expected."),
    fmt: str = typer.Option("table", "--format", help="table, json or csv."),
):
    """Predict metrics at any gallery size from stored hardness, with 95% query-bootstrap CIs."""
    from rscale import api

    rows = api.predict(hardness, metric, [_parse_size(v) for v in n], mode=mode)
    _print_rows(rows, fmt, ["measure", "N", "value", "ci_low", "ci_high", "estimator", "mode", "extrapolation"])


def _print_rows(rows, fmt, columns):
    import csv
    import json
    import sys

    from rscale.errors import InvalidArgumentError

    if fmt == "json":
        typer.echo(json.dumps(rows, indent=2))
    elif fmt == "csv":
        w = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    elif fmt == "table":
        from rich.table import Table
        table = Table()
        for c in columns:
            table.add_column(c, justify="left" if c in ("measure", "estimator", "mode") else "right")
        for r in rows:
            cells = []
            for c in columns:
                v = r[c]
                if c == "N":
                    cells.append(f"{v:.3g}")
                elif c == "extrapolation":
                    cells.append(f"{v:.3g}x")
                elif isinstance(v, float):
                    cells.append(f"{v:.4f}")
                else:
                    cells.append(str(v))
            table.add_row(*cells)
        _console().print(table)
    else:
        raise InvalidArgumentError(f"unknown format {fmt!r}; expected table, json or csv")
