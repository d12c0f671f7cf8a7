"""Commands that answer from stored hardness: query, diff, curve, report, demo."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from rscale.cli import output
from rscale.cli.options import (
    MAX_BOOTSTRAP,
    MAX_POINTS,
    ci_option,
    gallery_size,
    output_file,
    positive_int,
    registry_option,
)

QUERY_COLUMNS = ["backbone", "version", "measure", "N", "value", "ci_low", "ci_high", "ci_kind",
                 "estimator", "extrapolation"]
PAIRED_COLUMNS = ["backbone", "version", "versus", "versus_version", "measure", "N", "value", "ci_low", "ci_high",
                  "ci_kind", "value_a", "value_b", "estimator", "extrapolation"]     # value: A - B


def query(text: str = typer.Argument(..., help='e.g. "mAP@1000 at N=1e8 for dinov3_l"'),
          registry: Optional[Path] = registry_option(),
          fmt: str = output.format_option(output.TABLE, output.JSON, output.CSV),
          bootstrap: int = typer.Option(1000, help="Query-bootstrap resamples for --ci population (0: values "
                                                  "only; at most 10,000)."),
          ci: str = ci_option()):
    """Answer a query from stored hardness (see the grammar in the README)."""
    from rscale import api

    positive_int(bootstrap, "--bootstrap", minimum=0, maximum=MAX_BOOTSTRAP)
    ans = api.query(text, registry=registry, bootstrap=bootstrap, ci_kind=ci)
    if fmt == output.JSON:
        output.print_json(ans)
        return
    if fmt == output.TABLE:
        typer.echo(f"query: {ans['query']}")
    reranked = ["reranked"] if any("reranked" in r for r in ans["rows"]) else []
    paired = any("versus" in r for r in ans["rows"])
    output.print_rows(ans["rows"], fmt, PAIRED_COLUMNS if paired else QUERY_COLUMNS[:3] + reranked + QUERY_COLUMNS[3:])
    if fmt == output.TABLE:
        for r in ans["rows"]:
            if paired and r.get("backtest_at_n") is not None:
                said = (f"predicting the sample from 1/{r['backtest_factor']} of it was off by "
                        f"{r['backtest_error']:+.4f} in the difference; " if r.get("backtest_factor") else "")
                typer.echo(f"back-test, {r['backbone']}@{r['version']} - {r['versus']}@{r['versus_version']} "
                           f"{r['measure']} at N={r['N']:.3g}: {said}at {r['extrapolation']:.3g}x the difference's "
                           f"term is {r['backtest_at_n']:+.4f} ({r['backtest_low']:+.4f}..{r['backtest_high']:+.4f})")
            elif r.get("backtest_factor"):
                typer.echo(f"back-test, {r['backbone']}@{r['version']} {r['measure']} at N={r['N']:.3g}: predicting the "
                           f"sample from 1/{r['backtest_factor']} of it was off by {r['backtest_error']:+.4f}; carried to "
                           f"{r['extrapolation']:.3g}x that is {r['backtest_at_n']:+.4f} "
                           f"({r['backtest_low']:+.4f}..{r['backtest_high']:+.4f}), and the interval reaches that far "
                           "from the value")
    for w in ans["warnings"]:
        output.warn(w)


def diff(a: str = typer.Argument(..., help="NAME[@VERSION] (the reference)."),
         b: str = typer.Argument(..., help="NAME[@VERSION] (compared against a)."),
         metric: str = typer.Option("mAP@1000", "--metric"),
         n: str = typer.Option("1e8", "--n"),
         top: int = typer.Option(10, help="How many of the most-changed queries to list."),
         benchmark: Optional[str] = typer.Option(None, "--on"),
         estimator: Optional[str] = typer.Option(None, "--using"),
         fmt: str = output.format_option(output.TEXT, output.JSON),
         bootstrap: int = typer.Option(1000, help="Query-bootstrap resamples for --ci population (0: the difference "
                                                  "only; at most 10,000)."),
         ci: str = ci_option(),
         registry: Optional[Path] = registry_option()):
    """What changed from a to b (b - a): the paired difference 'rscale query "... for b vs a"' answers,
    the queries that changed most, and per-positive hardness ratios."""
    from rscale import api

    positive_int(top, "--top", minimum=0)
    positive_int(bootstrap, "--bootstrap", minimum=0, maximum=MAX_BOOTSTRAP)
    out = api.diff(a, b, registry=registry, measure=metric, n=float(gallery_size(n)), top=top, benchmark=benchmark,
                   estimator=estimator, ci_kind=ci, bootstrap=bootstrap)
    if fmt == output.JSON:
        output.print_json(out)
        return
    verdict = "resolved" if out["resolved"] else "NOT resolved (CI contains 0)"
    typer.echo(f"{out['measure']} at N={out['N']:.3g}: a={out['value_a']:.4f} b={out['value_b']:.4f} "
               f"b-a={out['difference']:+.4f} [95% CI {out['ci_low']:+.4f}, {out['ci_high']:+.4f}, "
               f"ci_kind {out['ci_kind']}] {verdict}")
    typer.echo(f"queries compared: {out['queries_compared']}, positives: {out['positives_compared']}, "
               f"median log10 hardness ratio b/a: {out['median_log10_hardness_ratio']}, "
               f"rule changed: {out['rule_changed_share']}")
    for r in out["largest_query_changes"]:
        typer.echo(f"  {r['query_id']}: {r['a']:.4f} -> {r['b']:.4f} ({r['delta']:+.4f})")
    for w in out["warnings"]:
        output.warn(w)


def curve(text: str = typer.Argument(..., help='e.g. "mAP@1000 for dinov3_l, siglip2_l"'),
          n: Optional[str] = typer.Option(None, "--n", help="Range of gallery sizes, e.g. 1e5..1e9 (default: from "
                                          "1e5, or below the measured points, to 1e9)."),
          points: int = typer.Option(25, help="Points on the curve (2 to 1,000)."),
          out: Optional[Path] = typer.Option(None, "--out", "-o", help="Image to write (png, svg, pdf)."),
          fmt: str = output.format_option(output.PLOT, output.JSON, output.CSV,
                                          help="plot (needs --out), json or csv."),
          ci: str = ci_option(),
          registry: Optional[Path] = registry_option()):
    """Metric vs N with its CI band and the points measured on the sample."""
    from rscale import api
    from rscale.errors import InvalidArgumentError

    positive_int(points, "--points", minimum=2, maximum=MAX_POINTS)
    output_file(out)
    if fmt == output.PLOT and out is None:
        raise InvalidArgumentError("--format plot needs --out FILE.png (or use --format json/csv)")
    data = api.curve(text, n_range=n, points=points, registry=registry, ci_kind=ci)
    if fmt == output.JSON:
        output.print_json(data)
    elif fmt == output.CSV:
        typer.echo("backbone,version,measure,N,value,ci_low,ci_high,ci_kind")
        for s in data["series"]:
            for row in zip(s["N"], s["value"], s["ci_low"], s["ci_high"]):
                typer.echo(f"{s['backbone']},{s['version']},{s['measure']}," + ",".join(f"{x:g}" for x in row)
                           + f",{s['ci_kind']}")
    else:
        typer.echo(f"wrote {api.plot_curve(data, out)}")


def report(out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write markdown (.md) or HTML (.html)."),
           metric: list[str] = typer.Option(["mAP@1000"], "--metric"),
           n: list[str] = typer.Option(["1e6", "1e7", "1e8", "1e9"], "--n"),
           ci: str = ci_option(),
           fmt: str = output.format_option(output.MARKDOWN, output.JSON, help="markdown (or HTML by --out's suffix) "
                                           "or json: the report's rows, each the row rscale query answers."),
           registry: Optional[Path] = registry_option()):
    """Summarise a registry: backbones x gallery sizes, with estimator diagnostics (markdown or HTML)."""
    from rscale import api

    output_file(out)
    sizes = [float(gallery_size(v)) for v in n]
    if fmt == output.JSON:
        from rscale.errors import InvalidArgumentError
        if out is not None:
            raise InvalidArgumentError("--format json prints the rows; --out writes markdown or HTML: give one of them")
        output.print_json({"ci_kind": ci, "rows": api.report_rows(registry, measures=metric, sizes=sizes, ci_kind=ci)})
        return
    text = api.report(registry, measures=metric, sizes=sizes, ci_kind=ci)
    if out is None:
        typer.echo(text)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".html":
        import html
        body = html.escape(text)
        text = f"<!doctype html><meta charset=utf-8><title>rscale report</title><pre>{body}</pre>\n"
    out.write_text(text)
    typer.echo(f"wrote {out}")


def demo(
    n: str = typer.Option("1e8", "--n", help="Gallery size to predict (1e8, 759k, ...)."),
    fraction: float = typer.Option(0.05, help="Share of the pool that is sampled."),
    k: int = typer.Option(1000, help="mAP cut-off."),
    queries: Optional[int] = typer.Option(None, help="Override the number of queries."),
    seed: int = typer.Option(0, help="Random seed."),
    backbone: Optional[list[str]] = typer.Option(None, "--backbone", "-b", help="Simulated backbone(s)."),
    registry: Optional[Path] = typer.Option(None, "--registry", "-r", help="After `dvc repro`: answer from "
                                            "this registry (with --config) instead of simulating in process."),
    config: Path = typer.Option(Path("params.yaml"), "--config", help="The pipeline's params.yaml."),
    fmt: str = output.format_option(output.TABLE, output.JSON),
):
    """Simulate benchmarks, sample a share of the pool, print truth next to predictions."""
    from rscale import api

    if registry is not None:
        rows = api.pipeline_demo(config, registry)
        if fmt == output.JSON:
            output.print_json(rows)
            return
        _print_pipeline_demo(rows, registry)
        return
    size = gallery_size(n)
    positive_int(k, "--k")
    if not 0 < fraction < 1:
        from rscale.errors import InvalidArgumentError
        raise InvalidArgumentError(f"--fraction {fraction}: give the sampled share of the pool, between 0 and 1")
    rows = api.demo(backbone, n=float(size), fraction=fraction, k=k, n_queries=queries, seed=seed)
    if fmt == output.JSON:
        output.print_json(rows)
        return
    from rich.table import Table
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
    output.console().print(table)


def _print_pipeline_demo(rows, registry) -> None:
    from rich.table import Table
    # a plain line, not the table's title: rich wraps a title to the table's width, and the
    # registry is a path of any length
    typer.echo(f"rscale query answers from {registry} next to the exact value")
    table = Table()
    table.caption = ("exact: the simulator's exact realised value, or the full pool scored by the same engine; "
                     "evaluate-at-S: the metric on the sample alone; count: hardness c/S extrapolated")
    estimators = ", ".join(sorted({str(r["estimator"]) for r in rows})) or "prediction"   # what answered, not a name fixed here
    for c in ("query", "S", "exact value", f"{estimators} [95% CI] (error)", "evaluate-at-S", "count"):
        table.add_column(c, no_wrap=c != "query")
    for r in rows:
        table.add_row(f"{r['query']} ({r['version']})", f"{r['S']:,}", f"{r['truth']:.4f} ({r['truth_kind']})",
                      f"{r['predicted']:.4f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}] ({r['predicted'] - r['truth']:+.4f})",
                      f"{r['evaluate_at_s']:.4f} ({r['evaluate_at_s'] - r['truth']:+.3f})",
                      f"{r['count']:.4f} ({r['count'] - r['truth']:+.3f})")
    output.console().print(table)


COMMANDS = {"query": query, "diff": diff, "curve": curve, "report": report, "demo": demo}
