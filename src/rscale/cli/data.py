"""Commands on files: simulate sample stats, check them, estimate hardness, predict from it."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from rscale.cli import output
from rscale.cli.options import ci_option, gallery_size, output_file, positive_int


def simulate(
    backbone: str = typer.Argument(..., help="Simulated backbone preset (sim_bounded, ...)."),
    out: Path = typer.Option(..., "--out", "-o", help="Sample-stats Parquet file to write."),
    s: str = typer.Option("5e6", "--s", help="Sample size S."),
    k: int = typer.Option(4000, help="Top scores kept per query."),
    queries: Optional[int] = typer.Option(None, help="Override the number of queries."),
    seed: int = typer.Option(0),
    halves: bool = typer.Option(False, "--halves", help="Record half-sample membership (as 'rscale score "
                                "--halves'): presets simulated with the same --seed, --s and --k pair in 'for A vs B'."),
    fmt: str = output.format_option(output.TEXT, output.JSON),
):
    """Write the sample stats of a simulated backbone (the estimators' input format)."""
    from rscale import api

    output_file(out)
    positive_int(k, "--k")
    if queries is not None:
        positive_int(queries, "--queries")
    path = api.simulate_sample_stats(backbone, out, s=gallery_size(s, "--s"), k=k, n_queries=queries, seed=seed,
                                      halves=halves)
    output.print_message(f"wrote {path}", fmt, {"written": str(path)})


def check(path: Path = typer.Argument(..., help="A sample-stats Parquet file."),
          fmt: str = output.format_option(output.TEXT, output.JSON)):
    """Validate a sample-stats file and print a summary."""
    from rscale import api

    output.print_mapping(api.describe_sample_stats(path), fmt)


def estimate(
    sample_stats: Path = typer.Argument(..., help="Sample-stats Parquet file."),
    method: str = typer.Option("evt-eb", "--method", "-m", help="evt-eb (default), evt, evt-paper, count or sdm (docs/design.md)."),
    param: Optional[list[str]] = typer.Option(None, "--param", "-p", help="Estimator parameter name=value (repeatable)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Hardness Parquet file to write."),
    config: Optional[Path] = typer.Option(None, "--config", help="Take method and parameters from the "
                                          "'estimate:' section of this YAML file (params.yaml)."),
    replicates: int = typer.Option(16, "--replicates", help="Hardness replicates stored for the interval "
                                   "(half of them half-sample splits, 2 fits each; 0: none)."),
    backtest: bool = typer.Option(True, "--backtest/--no-backtest", help="Store the back-test (predicting the "
                                  "sample from its quarters: 4 fits) that calibrates the interval."),
    fmt: str = output.format_option(output.TEXT, output.JSON),
):
    """Estimate per-positive hardness from a distractor sample, with the replicates every
    command's interval comes from."""
    from rscale import api

    output_file(out)
    params = list(param or ())
    if config:
        method, from_file = api.estimator_from_config(config)
        params = from_file + params
    positive_int(replicates, "--replicates", minimum=0, maximum=MAX_REPLICATES)
    output.print_mapping(api.estimate(sample_stats, method=method, params=params, out=out, replicates=replicates,
                                      backtest=backtest), fmt)


MAX_REPLICATES = 256
PREDICTION_COLUMNS = ["measure", "N", "value", "ci_low", "ci_high", "ci_kind", "estimator", "mode", "extrapolation"]


def predict(
    hardness: Path = typer.Argument(..., help="Hardness Parquet file (from rscale estimate)."),
    metric: list[str] = typer.Option(["mAP@1000"], "--metric", help="Measure(s): mAP@1000, R@1, Recall@100, MRR."),
    n: list[str] = typer.Option(["1e8"], "--n", help="Gallery size(s): 1e8, 759k, ... (whole numbers up to 1e15)."),
    mode: Optional[str] = typer.Option(None, help="plugin or expected (default: expected for evt-eb; otherwise plugin for mAP/MRR, expected for R/Recall)."),
    in_pool: bool = typer.Option(False, "--in-pool", help="The gallery contains the sample (a fixed pool of size N): "
                                 "condition on the observed counts."),
    sample: Optional[Path] = typer.Option(None, "--sample", help="The sample stats the hardness came from "
                                          "(checked to be its sample)."),
    ci: str = ci_option(),
    fmt: str = output.format_option(output.TABLE, output.JSON, output.CSV),
):
    """Predict metrics at any gallery size from stored hardness, with the 95% interval rscale
    query reports (from the replicates the file carries; --ci population adds the query bootstrap)."""
    from rscale import api

    sizes = [float(gallery_size(v)) for v in n]
    rows = api.predict(hardness, measures=metric, sizes=sizes, mode=mode, in_pool=in_pool, sample_stats=sample,
                       ci_kind=ci)
    output.print_rows(rows, fmt, PREDICTION_COLUMNS)


COMMANDS = {"simulate": simulate, "check": check, "estimate": estimate, "predict": predict}
