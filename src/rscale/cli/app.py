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


def _json(value) -> str:
    """Strict JSON for machines: NaN / inf (no CI, unbounded) become null, not bare NaN tokens."""
    import json
    import math

    def clean(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v
    return json.dumps(clean(value), indent=2, default=str, allow_nan=False)


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
    registry: Optional[Path] = typer.Option(None, "--registry", "-r", help="After `dvc repro`: answer from "
                                            "this registry (with --config) instead of simulating in process."),
    config: Path = typer.Option(Path("params.yaml"), "--config", help="The pipeline's params.yaml."),
):
    """Simulate benchmarks, sample a share of the pool, print truth next to predictions."""
    from rich.table import Table

    from rscale import api

    if registry is not None:
        rows = api.pipeline_demo(config, registry)
        table = Table(title=f"rscale query answers from {registry} next to the exact value")
        table.caption = ("exact: the simulator's exact realised value, or the full pool scored by the same engine; "
                         "evaluate-at-S: the metric on the sample alone; count: hardness c/S extrapolated")
        for c in ("query", "S", "exact value", "evt [95% CI] (error)", "evaluate-at-S", "count"):
            table.add_column(c, no_wrap=c != "query")
        for r in rows:
            table.add_row(f"{r['query']} ({r['version']})", f"{r['S']:,}", f"{r['truth']:.4f} ({r['truth_kind']})",
                          f"{r['predicted']:.4f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}] ({r['predicted'] - r['truth']:+.4f})",
                          f"{r['evaluate_at_s']:.4f} ({r['evaluate_at_s'] - r['truth']:+.3f})",
                          f"{r['count']:.4f} ({r['count'] - r['truth']:+.3f})")
        _console().print(table)
        return

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
    config: Optional[Path] = typer.Option(None, "--config", help="Take method and parameters from the "
                                          "'estimate:' section of this YAML file (params.yaml)."),
    fmt: str = typer.Option("table", "--format", help="table or json."),
):
    """Estimate per-positive hardness from a distractor sample."""

    from rscale import api

    params = list(param or ())
    if config:
        method, from_file = api.estimator_from_config(config)
        params = from_file + params
    summary = api.estimate(sample_stats, method, params, out)
    if fmt == "json":
        typer.echo(_json(summary))
        return
    for key, value in summary.items():
        typer.echo(f"{key}: {value}")


@app.command()
def predict(
    hardness: Path = typer.Argument(..., help="Hardness Parquet file (from rscale estimate)."),
    metric: list[str] = typer.Option(["mAP@1000"], "--metric", help="Measure(s): mAP@1000, R@1, Recall@100, MRR."),
    n: list[str] = typer.Option(["1e8"], "--n", help="Gallery size(s): 1e8, 759k, ..."),
    mode: Optional[str] = typer.Option(None, help="plugin or expected (default: plugin for mAP/MRR, expected for R/Recall)."),
    in_pool: bool = typer.Option(False, "--in-pool", help="The gallery contains the sample (a fixed pool of size N): "
                                 "condition on the observed counts."),
    sample: Optional[Path] = typer.Option(None, "--sample", help="The sample stats the hardness came from: "
                                          "widen the CI as rscale query does (distractor, convergence and "
                                          "tail-model terms)."),
    fmt: str = typer.Option("table", "--format", help="table, json or csv."),
):
    """Predict metrics at any gallery size from stored hardness, with 95% CIs (query bootstrap;
    with --sample also the distractor-sampling, convergence and tail-model terms)."""
    from rscale import api

    rows = api.predict(hardness, metric, [_parse_size(v) for v in n], mode=mode, in_pool=in_pool, sample_stats=sample)
    _print_rows(rows, fmt, ["measure", "N", "value", "ci_low", "ci_high", "ci", "estimator", "mode", "extrapolation"])


def _print_rows(rows, fmt, columns):
    import csv
    import sys

    from rscale.errors import InvalidArgumentError

    if fmt == "json":
        typer.echo(_json(rows))
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


REGISTRY_OPT = typer.Option(None, "--registry", "-r", envvar="RSCALE_REGISTRY",
                            help="Registry folder (default: ./registry).")


@app.command()
def register(
    hardness: Path = typer.Argument(..., help="Hardness Parquet file (its .tail.parquet is taken too)."),
    sample: Optional[Path] = typer.Option(None, "--sample", help="The sample-stats file it was estimated from."),
    backbone: Optional[str] = typer.Option(None, help="Override the backbone name from the file's metadata."),
    benchmark: Optional[str] = typer.Option(None, help="Override the benchmark name."),
    source: Optional[str] = typer.Option(None, help="Override the distractor source."),
    receipt: Optional[Path] = typer.Option(None, help="Write a small JSON receipt (ref + digest), e.g. for DVC."),
    registry: Optional[Path] = REGISTRY_OPT,
):
    """Store a hardness table as a new immutable version (a no-op if identical content is there)."""
    from rscale import api

    out = api.register(hardness, sample, registry, backbone, benchmark, source)
    if receipt:
        import json
        receipt.parent.mkdir(parents=True, exist_ok=True)
        receipt.write_text(json.dumps({k: out[k] for k in ("ref", "hardness", "series")}, indent=2, sort_keys=True) + "\n")
    verb = "registered" if out["created"] else "already registered (no change)"
    typer.echo(f"{verb}: {out['ref']}  [{out['series']}]  {out['hardness']}")


@app.command("ls")
def ls_(registry: Optional[Path] = REGISTRY_OPT,
        fmt: str = typer.Option("table", "--format", help="table or json.")):
    """List every version in the registry."""
    import json

    from rich.table import Table

    from rscale import api

    versions = api.list_versions(registry)
    if fmt == "json":
        typer.echo(json.dumps([{**v.__dict__, "tags": list(v.tags)} for v in versions], indent=2, default=str))
        return
    table = Table()
    for c in ("backbone", "version", "tags", "benchmark", "source", "estimator", "queries", "S", "created"):
        table.add_column(c)
    for v in versions:
        table.add_row(v.backbone, f"v{v.version}", ",".join(v.tags), v.benchmark, v.source, v.estimator,
                      str(v.summary.get("queries", "")), f"{v.summary.get('S_max', 0):,}", v.created[:19])
    _console().print(table)


@app.command()
def show(name: str = typer.Argument(..., help="NAME[@VERSION], e.g. dinov3_l@v2 or dinov3_l@released."),
         benchmark: Optional[str] = typer.Option(None, "--on"),
         estimator: Optional[str] = typer.Option(None, "--using"),
         registry: Optional[Path] = REGISTRY_OPT):
    """Show one version: identity, lineage and summary (no Parquet scan)."""
    import json

    from rscale import api

    v = api.show(name, registry, benchmark, estimator)
    typer.echo(json.dumps({**v.__dict__, "tags": list(v.tags)}, indent=2, default=str))


@app.command()
def tag(name: str = typer.Argument(..., help="NAME@VERSION to tag."),
        tag_name: str = typer.Argument(..., help="Tag, e.g. released."),
        benchmark: Optional[str] = typer.Option(None, "--on"),
        estimator: Optional[str] = typer.Option(None, "--using"),
        registry: Optional[Path] = REGISTRY_OPT):
    """Point a movable tag (released, ...) at a version."""
    from rscale import api

    v = api.tag(name, tag_name, registry, benchmark, estimator)
    typer.echo(f"{tag_name} -> {v.ref} [{'/'.join(v.series)}]")


@app.command()
def verify(registry: Optional[Path] = REGISTRY_OPT,
           fmt: str = typer.Option("table", "--format", help="table or json.")):
    """Re-hash every blob; report missing, corrupt and extra files (exit 1 if any)."""
    import json

    from rscale import api

    report = api.verify(registry)
    if fmt == "json":
        typer.echo(json.dumps(report, indent=2))
    else:
        typer.echo(f"checked: {len(report['checked'])}  corrupt: {len(report['corrupt'])}  "
                   f"missing: {len(report['missing'])}  extra: {len(report['extra'])}")
        for kind in ("corrupt", "missing", "extra"):
            for item in report[kind]:
                typer.echo(f"  {kind}: {item}")
    if report["corrupt"] or report["missing"] or report["extra"]:
        raise typer.Exit(1)


@app.command()
def query(text: str = typer.Argument(..., help='e.g. "mAP@1000 at N=1e8 for dinov3_l"'),
          registry: Optional[Path] = REGISTRY_OPT,
          fmt: str = typer.Option("table", "--format", help="table, json or csv."),
          bootstrap: int = typer.Option(1000, help="Query-bootstrap resamples for the CI (0: values only).")):
    """Answer a query from stored hardness (see the grammar in the README)."""
    import sys

    from rscale import api

    if bootstrap < 0:
        from rscale.errors import InvalidArgumentError
        raise InvalidArgumentError(f"--bootstrap {bootstrap}: give a number of resamples >= 0 (0 = no CI)")
    ans = api.query(text, registry, bootstrap=bootstrap)
    if fmt == "json":
        typer.echo(_json(ans))
        return
    if fmt == "csv":
        _print_rows(ans["rows"], "csv", [])
        return
    typer.echo(f"query: {ans['query']}")
    _print_rows(ans["rows"], "table", ["backbone", "version", "measure", "N", "value", "ci_low", "ci_high",
                                       "range_low", "range_high", "estimator", "extrapolation"])
    for w in ans["warnings"]:
        print(f"warning: {w}", file=sys.stderr)


@app.command("export")
def export_(name: str = typer.Argument(..., help="NAME[@VERSION] to export."),
            out: Path = typer.Option(..., "--out", "-o", help="Bundle file to write (.tar)."),
            license: str = typer.Option("unspecified", help="License the hardness is shared under."),
            benchmark: Optional[str] = typer.Option(None, "--on"),
            estimator: Optional[str] = typer.Option(None, "--using"),
            registry: Optional[Path] = REGISTRY_OPT):
    """Write a verifiable bundle (blobs + manifest with digests) for one version."""
    from rscale import api

    path, v = api.export(name, out, registry, benchmark, estimator, license)
    typer.echo(f"exported {v.ref} [{'/'.join(v.series)}] to {path}")


@app.command("import")
def import_cmd(bundle: Path = typer.Argument(..., help="Bundle written by rscale export."),
               registry: Optional[Path] = REGISTRY_OPT):
    """Verify a bundle's every digest, then add its version (idempotent)."""
    from rscale import api

    v, created = api.import_(bundle, registry)
    typer.echo(f"{'imported' if created else 'already present'}: {v.ref} [{'/'.join(v.series)}]")


@app.command()
def report(out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write markdown (.md) or HTML (.html)."),
           metric: list[str] = typer.Option(["mAP@1000"], "--metric"),
           n: list[str] = typer.Option(["1e6", "1e7", "1e8", "1e9"], "--n"),
           registry: Optional[Path] = REGISTRY_OPT):
    """Summarise a registry: backbones x gallery sizes, with estimator diagnostics."""
    from rscale import api

    text = api.report(registry, metric, [_parse_size(v) for v in n])
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


@app.command()
def lineage(name: str = typer.Argument(..., help="NAME[@VERSION]."),
            benchmark: Optional[str] = typer.Option(None, "--on"),
            estimator: Optional[str] = typer.Option(None, "--using"),
            registry: Optional[Path] = REGISTRY_OPT):
    """What made a version: estimator, parameters, code version, run id, input digests (JSON)."""
    import json

    from rscale import api

    typer.echo(json.dumps(api.lineage(name, registry, benchmark, estimator), indent=2, default=str))


@app.command()
def diff(a: str = typer.Argument(..., help="NAME[@VERSION] (the reference)."),
         b: str = typer.Argument(..., help="NAME[@VERSION] (compared against a)."),
         metric: str = typer.Option("mAP@1000", "--metric"),
         n: str = typer.Option("1e8", "--n"),
         top: int = typer.Option(10, help="How many of the most-changed queries to list."),
         benchmark: Optional[str] = typer.Option(None, "--on"),
         estimator: Optional[str] = typer.Option(None, "--using"),
         fmt: str = typer.Option("table", "--format", help="table or json."),
         registry: Optional[Path] = REGISTRY_OPT):
    """Per-query metric and per-positive hardness differences between two versions (b - a)."""

    from rscale import api

    out = api.diff(a, b, registry, metric, _parse_size(n), top, benchmark, estimator)
    if fmt == "json":
        typer.echo(_json(out))
        return
    verdict = "resolved" if out["resolved"] else "NOT resolved (CI contains 0)"
    typer.echo(f"{out['measure']} at N={out['N']:.3g}: a={out['value_a']:.4f} b={out['value_b']:.4f} "
               f"b-a={out['difference']:+.4f} [95% CI {out['ci_low']:+.4f}, {out['ci_high']:+.4f}] {verdict}")
    typer.echo(f"queries compared: {out['queries_compared']}, positives: {out['positives_compared']}, "
               f"median log10 hardness ratio b/a: {out['median_log10_hardness_ratio']}, "
               f"rule changed: {out['rule_changed_share']}")
    for r in out["largest_query_changes"]:
        typer.echo(f"  {r['query_id']}: {r['a']:.4f} -> {r['b']:.4f} ({r['delta']:+.4f})")


@app.command()
def curve(text: str = typer.Argument(..., help='e.g. "mAP@1000 for dinov3_l, siglip2_l"'),
          n: str = typer.Option("1e5..1e9", "--n", help="Range of gallery sizes, e.g. 1e5..1e9."),
          points: int = typer.Option(25, help="Points on the curve."),
          out: Optional[Path] = typer.Option(None, "--out", "-o", help="Image to write (png, svg, pdf)."),
          fmt: str = typer.Option("plot", "--format", help="plot (needs --out), json or csv."),
          registry: Optional[Path] = REGISTRY_OPT):
    """Metric vs N with its CI band and the points measured on the sample."""

    from rscale import api
    from rscale.errors import InvalidArgumentError

    data = api.curve(text, n, points, registry)
    if fmt == "json":
        typer.echo(_json(data))
    elif fmt == "csv":
        typer.echo("backbone,version,measure,N,value,ci_low,ci_high")
        for s in data["series"]:
            for row in zip(s["N"], s["value"], s["ci_low"], s["ci_high"]):
                typer.echo(f"{s['backbone']},{s['version']},{s['measure']}," + ",".join(f"{x:g}" for x in row))
    elif fmt == "plot":
        if out is None:
            raise InvalidArgumentError("--format plot needs --out FILE.png (or use --format json/csv)")
        typer.echo(f"wrote {api.plot_curve(data, out)}")
    else:
        raise InvalidArgumentError(f"unknown format {fmt!r}; expected plot, json or csv")


@app.command()
def score(queries: Path = typer.Option(..., "--queries", help="Query descriptor set (folder with manifest.json)."),
          positives: Path = typer.Option(..., "--positives", help="Positive descriptor set."),
          qrels: Path = typer.Option(..., "--qrels", help="Parquet/CSV with columns query_id, positive_id."),
          distractors: Path = typer.Option(..., "--distractors", help="Distractor descriptor set."),
          out: Path = typer.Option(..., "--out", "-o", help="Sample-stats Parquet file to write."),
          fraction: float = typer.Option(1.0, help="Share of the pool to score (hash-sampled, nested); 1 = exact."),
          seed: int = typer.Option(0, help="Sampling seed."),
          k: int = typer.Option(4000, help="Top scores kept per query."),
          backend: str = typer.Option("auto", help="numpy (BLAS), faiss, torch (a CUDA GPU when present) or auto "
                                                   "(torch on a GPU for large jobs, else numpy)."),
          fmt: str = typer.Option("table", "--format", help="table or json.")):
    """Score descriptors: a uniform sample of the distractors against the queries -> sample stats."""
    import sys

    from rscale import api

    summary = api.score(queries, positives, qrels, distractors, out, fraction, seed, k, backend)
    if fmt == "json":
        typer.echo(_json(summary))
    else:
        for key, value in summary.items():
            typer.echo(f"{key}: {value}")
    if summary.get("drifting"):
        print(f"warning: {summary['drift']}", file=sys.stderr)


@app.command("make-descriptors")
def make_descriptors_cmd(
        out: Path = typer.Option(..., "--out", "-o", help="Folder for queries/, positives/, distractors/, qrels.parquet."),
        instances: int = typer.Option(200, help="Object instances (one query each)."),
        dim: int = typer.Option(64, help="Descriptor dimension."),
        positives: int = typer.Option(4, help="Positives per instance."),
        distractors: int = typer.Option(200_000, help="Distractor pool size."),
        hard_share: float = typer.Option(0.01, help="Share of near-duplicate distractors."),
        noise_low: float = typer.Option(0.6, help="Lowest per-instance noise of queries/positives."),
        noise_high: float = typer.Option(0.6, help="Highest per-instance noise (harder objects)."),
        seed: int = typer.Option(0),
        backbone: str = typer.Option("sim_desc", help="Name recorded as the backbone (simulated).")):
    """Generate simulated descriptor sets (the embedded stand-in for feature extraction)."""
    from rscale import api

    typer.echo(api.make_descriptor_sets(out, instances, dim, positives, distractors, hard_share, seed, backbone,
                                        noise=(noise_low, noise_high)))


@app.command()
def extract(images: Path = typer.Argument(..., help="Image folder, list file, or ILIAS root (--layout ilias)."),
            model: Path = typer.Option(..., "--model", help="Local transformers checkpoint folder."),
            out: Path = typer.Option(..., "--out", "-o", help="Output descriptor-set folder."),
            role: str = typer.Option("distractors", help="queries, positives or distractors."),
            layout: str = typer.Option("folder", help="folder (or list file) or ilias."),
            crop: bool = typer.Option(False, help="ILIAS: crop queries to their *_bbox.txt boxes."),
            pooling: str = typer.Option("cls", help="cls, mean or pooled."),
            resolution: Optional[int] = typer.Option(None, help="Input resolution (default: the checkpoint's)."),
            batch_size: int = typer.Option(32),
            intervention: Optional[str] = typer.Option(None, help="Query-side: gp or msa."),
            shard_size: int = typer.Option(4096)):
    """Extract L2-normalised descriptors with a local transformers backbone (extract extra)."""
    from rscale import api

    typer.echo(api.extract(images, model, out, role, layout, crop, pooling, resolution, batch_size,
                           intervention, shard_size))


__import__("rscale.cli.o2i", fromlist=["register"]).register(app)   # rscale o2i ..., rscale compare
