"""`rscale o2i run` (the controlled O2I benchmark end to end), `rscale o2i register` (its results
into the registry), `rscale o2i stratify` (gains per O2I ratio bin on a real benchmark) and
`rscale compare` (two runs, paired).

Thin commands over :mod:`rscale.api.o2i`, :mod:`rscale.api.o2i_registry`,
:mod:`rscale.api.o2i_strata` and :mod:`rscale.api.compare`; heavy imports happen inside the commands.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import typer

from rscale.cli import output
from rscale.cli.options import _registry_folder, output_file, registry_option

o2i_app = typer.Typer(add_completion=False, no_args_is_help=True,
                      help="The controlled object-to-image (O2I) ratio-mismatch benchmark.")


def run(config: Path = typer.Option(Path("params.yaml"), "--config", help="params.yaml with an `o2i:` section."),
        objects: Optional[int] = typer.Option(None, "--objects", help="Number of objects (overrides o2i.objects)."),
        out: Path = typer.Option(Path("out/o2i"), "--out", "-o", help="Output folder (tables, plots, report.md)."),
        progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bars."),
        registry: Optional[Path] = typer.Option(None, "--registry", "-r", callback=_registry_folder,
                                                help="Also register the results in this registry folder "
                                                     "(as `rscale o2i register` does)."),
        benchmark: str = typer.Option("o2i", "--benchmark", help="Benchmark name the results are registered under."),
        receipt: Optional[Path] = typer.Option(None, help="With --registry: write a JSON receipt (refs + digests), "
                                                          "e.g. for DVC."),
        fmt: str = output.format_option(output.TABLE, output.JSON, help="table or json (the summary)."),
        ):
    """Render -> extract -> evaluate -> analyse for the backbones in params.yaml `o2i.backbones`."""
    from rscale.api import o2i as api_o2i
    from rscale.errors import InvalidArgumentError

    output_file(receipt, "--receipt")
    if receipt is not None and registry is None:
        raise InvalidArgumentError("--receipt records a registration: give --registry DIR too")
    if registry is not None:
        from rscale.api.registry import check_name
        check_name("benchmark", benchmark, flag="--benchmark")      # refused before the run, not after it
    cfg = api_o2i.load_o2i_config(config, objects=objects)
    res = api_o2i.run_o2i(cfg, out, progress=progress)
    c = res.counters
    value = {"out": str(res.out), "rendered": c.rendered, "extracted": c.extracted, "reused": c.reused,
             "seconds": {k: round(v, 2) for k, v in c.seconds.items()}, **res.summary}
    if registry is not None:
        from rscale.api.o2i_registry import register_o2i
        value["registered"] = register_o2i(res.out, registry=registry, benchmark=benchmark)
        _write_receipt(receipt, value["registered"])
    if fmt == output.JSON:
        output.print_json(value)
        return
    typer.echo(f"wrote {res.out}/report.md, {len(res.manifest['tables'])} tables, {len(res.manifest['plots'])} plots")
    typer.echo(f"frames rendered {c.rendered}, descriptor sets extracted {c.extracted} (reused {c.reused}); seconds: "
          + ", ".join(f"{k} {v:.1f}" for k, v in c.seconds.items()))
    for b, s in res.summary["backbones"].items():
        r1 = ", ".join(f"{m:.3f}x: {v:.3f}" for m, v in s["R@1_by_magnitude"].items())
        a = s["asymmetry"]
        typer.echo(f"{b}: mean R@1 by mismatch {r1}; asymmetry favours {a['favoured']} "
              f"(tight - wide MRR {a['difference']:+.3f}, p {a['p_value']:.3g})")
    if registry is not None:
        _echo_registered(value["registered"])


def _write_receipt(receipt: Optional[Path], registered: dict) -> None:
    if receipt is None:
        return
    import json
    receipt.parent.mkdir(parents=True, exist_ok=True)
    receipt.write_text(json.dumps([{k: r[k] for k in ("ref", "content", "series")} for r in registered["results"]],
                                  indent=2, sort_keys=True) + "\n")


def _echo_registered(registered: dict) -> None:
    for r in registered["results"]:
        verb = "registered" if r["created"] else "already registered (no change)"
        typer.echo(f"{verb}: {r['ref']}  [{r['series']}]  {r['content']}")


def register(out_dir: Path = typer.Argument(..., help="An output folder of `rscale o2i run`."),
             benchmark: str = typer.Option("o2i", "--benchmark", help="Benchmark name of the series (default o2i)."),
             receipt: Optional[Path] = typer.Option(None, help="Write a small JSON receipt (refs + digests)."),
             registry: Optional[Path] = registry_option(),
             fmt: str = output.format_option(output.TEXT, output.JSON),
             ):
    """Store each backbone's O2I results as an immutable version `o2i:BACKBONE@vN` (a no-op if unchanged)."""
    from rscale.api.o2i_registry import register_o2i

    output_file(receipt, "--receipt")      # refused before the registry is touched
    out = register_o2i(out_dir, registry=registry, benchmark=benchmark)
    _write_receipt(receipt, out)
    if fmt == output.JSON:
        output.print_json(out)
        return
    _echo_registered(out)


def compare(run_a: str = typer.Argument(..., help="Run A (reference): an exact evaluation's sample-stats Parquet "
                                                  "file, an O2I output folder[#BACKBONE/CONDITION], or a registered "
                                                  "O2I result o2i:BACKBONE[@vN][/CONDITION]."),
            run_b: str = typer.Argument(..., help="Run B, same forms; effect = B - A."),
            measure: Optional[list[str]] = typer.Option(None, "--measure", "-m",
                                                        help="Measures (default R@1, R@10, mAP@1000, MRR)."),
            confidence: float = typer.Option(0.95, "--confidence", help="CI level."),
            ci: str = typer.Option("t", "--ci", help="t (paired t interval) or bootstrap."),
            registry: Optional[Path] = registry_option(),
            fmt: str = output.format_option(output.TABLE, output.JSON),
            ):
    """Paired comparison of two runs on the same queries: effect, CI and p per measure (Holm across measures).

    A run is also a registered O2I result, o2i:BACKBONE[@vN][/CONDITION] (condition default baseline)."""
    from rscale.api import compare as cmp
    from rscale.api.o2i_registry import load_compare_operand

    a, b = load_compare_operand(run_a, registry), load_compare_operand(run_b, registry)
    res = cmp.compare(a, b, measures=tuple(measure) if measure else cmp.DEFAULT_MEASURES, confidence=confidence,
                      ci=ci)
    if fmt == output.JSON:
        output.print_json(res.to_dict())
        return
    from rich.table import Table

    typer.echo(f"{res.label_b} - {res.label_a} on {res.n_queries} queries ({res.confidence:.0%} CI, {res.ci_method})")
    table = Table()                       # the summary above, not a title: rich would wrap the run paths
    for col in ("measure", "test", "A", "B", "effect", "CI", "p", "p (Holm)"):
        table.add_column(col)
    for r in res.rows:
        table.add_row(r.measure, r.test, f"{r.value_a:.4f}", f"{r.value_b:.4f}", f"{r.effect:+.4f}",
                      f"[{r.ci_low:+.4f}, {r.ci_high:+.4f}]", f"{r.p_value:.3g}", f"{r.p_holm:.3g}")
    output.console().print(table)


def stratify(baseline: str = typer.Argument(..., help="Baseline run: an exact evaluation's sample-stats Parquet "
                                                     "file (`rscale score --fraction 1`), as `rscale compare` takes."),
             treatment: str = typer.Argument(..., help="Treatment run, same form; gain = treatment - baseline."),
             layout: Path = typer.Option(..., "--layout", help="The ILIAS-layout folder the runs were extracted "
                                                                "from, with <name>_bbox.txt box files."),
             measure: Optional[list[str]] = typer.Option(None, "--measure", "-m",
                                                         help="Measures (default R@1, R@10, mAP@1000)."),
             low: float = typer.Option(1.0, "--low", help="Lowest inner bin edge of the O2I ratio."),
             high: float = typer.Option(10.0, "--high", help="Highest inner bin edge."),
             bins: int = typer.Option(3, "--bins", help="Log-spaced bins between --low and --high "
                                                        "(plus one open bin on each side)."),
             confidence: float = typer.Option(0.95, "--confidence", help="CI level."),
             query_cropped: bool = typer.Option(False, "--query-cropped",
                                                help="The runs' queries were cropped to their boxes (extract "
                                                     "--crop): a query's O2I as seen is 1."),
             holm: str = typer.Option("bins", "--holm", help="Holm family: bins (each measure's bins) or all cells."),
             table_out: Optional[Path] = typer.Option(None, "--table", help="Write the table as Parquet here."),
             plot_out: Optional[Path] = typer.Option(None, "--plot", help="Write a PNG plot of the gains here."),
             fmt: str = output.format_option(output.TABLE, output.JSON),
             ):
    """Gains of TREATMENT over BASELINE per bin of query / positive O2I ratio (paper section 5.3, App. P)."""
    from rscale.api.o2i_strata import DEFAULT_MEASURES, stratify_by_o2i

    res = stratify_by_o2i(baseline, treatment, layout=layout, measures=tuple(measure) if measure else DEFAULT_MEASURES,
                          low=low, high=high, bins=bins, confidence=confidence, holm_family=holm,
                          query_cropped=query_cropped, table=table_out, plot=plot_out)
    if fmt == output.JSON:
        output.print_json(res.to_dict())
        return
    from rich.table import Table

    ex = res.excluded
    left = f"; left out: {ex['no_query_box']} without a query box, {ex['no_positive_box']} without positive boxes" \
        if any(ex.values()) else ""
    # the summary is a plain line, not the table's title: rich wraps a title to the table's width,
    # and the labels are run paths of any length
    typer.echo(f"{res.label_treatment} - {res.label_baseline} by query/positive O2I ratio, "
               f"{res.query_ids.size} queries, median ratio {res.median_ratio:.2f}x{left}")
    table = Table()
    for col in ("ratio", "n", "measure", "test", "baseline", "treatment", "gain", "CI", "p", "p (Holm)"):
        table.add_column(col)

    def num(v, spec):                     # an empty bin has no mean, a bin of one query no test
        return format(v, spec) if math.isfinite(v) else "-"

    for r in res.rows:
        ci = f"[{r['ci_low']:+.4f}, {r['ci_high']:+.4f}]" if math.isfinite(r["ci_low"]) else "-"
        table.add_row(r["label"], str(r["n"]), r["measure"], r["test"], num(r["baseline"], ".4f"),
                      num(r["treatment"], ".4f"), num(r["gain"], "+.4f"), ci, num(r["p_value"], ".3g"),
                      num(r["p_holm"], ".3g"))
    output.console().print(table)
    for kind, path in res.written.items():
        typer.echo(f"wrote {kind} {path}")


o2i_app.command("run")(run)
o2i_app.command("register")(register)
o2i_app.command("stratify")(stratify)

# `rscale o2i run` / `rscale o2i stratify`: a sub-app (app.py adds it by SUBAPPS); `rscale compare`: a plain command
COMMANDS = {"compare": compare}
SUBAPPS = {"o2i": o2i_app}
