"""The crop reranker's commands: rerank (OWLv2 proposals, region features, max-region rescoring)
and predict-rerank (the reranked metric at any gallery size from a reranked distractor sample)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from rscale.cli import output
from rscale.cli.options import _registry_folder, ci_option, gallery_size, output_folder, positive_int


def rerank(queries: Path = typer.Option(..., "--queries", help="Query descriptor set (the first stage's queries)."),
           candidates: Path = typer.Option(..., "--candidates", help="First-stage lists: Parquet with query_id, "
                                           "gallery_id, score, rank."),
           gallery: Path = typer.Option(..., "--gallery", help="Image folder the first stage scored (ids as "
                                        "rscale extract names them)."),
           detector: Path = typer.Option(..., "--detector", help="Local OWLv2 checkpoint folder."),
           backbone: Path = typer.Option(..., "--backbone", help="Local checkpoint folder of the backbone that "
                                         "extracted the queries."),
           cache: Path = typer.Option(..., "--cache", help="Region cache folder (created if absent, reused)."),
           out: Path = typer.Option(..., "--out", "-o", help="Output folder (appears whole)."),
           qrels: Optional[Path] = typer.Option(None, "--qrels", help="Parquet with query_id, positive_id: "
                                                "per-query R@1 and mAP@K' before and after."),
           k: Optional[int] = typer.Option(None, "--k", help="K': candidates reranked per query (default 1000)."),
           first_stage_weight: Optional[float] = typer.Option(None, help="w in (1-w) region + w first-stage "
                                                              "score (default 0: the paper's)."),
           max_boxes: Optional[int] = typer.Option(None, help="Boxes kept per image after NMS (default 10)."),
           config: Optional[Path] = typer.Option(None, "--config", help="params.yaml-style file: its rerank: "
                                                 "section sets the defaults."),
           device: Optional[str] = typer.Option(None, help="cpu or cuda (default: cuda when present)."),
           registry: Optional[Path] = typer.Option(None, "--registry", "-r", callback=_registry_folder,
                                                   help="Also register the output in this registry folder as "
                                                        "rerank:NAME@vN (a no-op if unchanged)."),
           name: Optional[str] = typer.Option(None, "--name", help="With --registry: the artifact's name "
                                              "(default: the query set's backbone)."),
           benchmark: Optional[str] = typer.Option(None, "--benchmark", help="With --registry: its benchmark "
                                                   "(default: unknown)."),
           fmt: str = output.format_option(output.TEXT, output.JSON)):
    """Rerank first-stage candidates by the max cosine over OWLv2 object crops (extract extra)."""
    from rscale import api

    output_folder(out)
    output_folder(cache, "--cache")
    summary = api.rerank(queries, candidates, gallery=gallery, detector=detector, backbone=backbone, cache=cache,
                         out=out, qrels=qrels, config=config, k=k, first_stage_weight=first_stage_weight,
                         max_boxes=max_boxes, device=device, progress=fmt != output.JSON, registry=registry,
                         name=name, benchmark=benchmark)
    r = summary.pop("registered", None) if fmt != output.JSON else None
    output.print_mapping(summary, fmt)
    if r is not None:
        typer.echo(f"{r['ref']} [{r['series']}] {'registered' if r['created'] else 'unchanged'} in {r['registry']}")


def rerank_sample(
        sample_stats: Path = typer.Argument(..., help="First-stage sample stats scored with --candidates R."),
        queries: Path = typer.Option(..., "--queries", help="Query descriptor set (the first stage's queries)."),
        distractors: Path = typer.Option(..., "--distractors", help="Distractor images (folder or list file) the "
                                         "candidate ids name."),
        positives: Path = typer.Option(..., "--positives", help="Positive images (folder, e.g. an ILIAS root, or "
                                       "list file) the sample stats' positive ids name."),
        detector: Path = typer.Option(..., "--detector", help="Local OWLv2 checkpoint folder."),
        backbone: Path = typer.Option(..., "--backbone", help="Local checkpoint folder of the first stage's backbone."),
        cache: Path = typer.Option(..., "--cache", help="Region cache folder (created if absent, reused)."),
        out: Path = typer.Option(..., "--out", "-o", help="Sample stats to write (schema version 2)."),
        candidates: Optional[Path] = typer.Option(None, "--candidates", help="Candidate lists (default: "
                                                  "<stem>.candidates.parquet next to the sample stats)."),
        first_stage_weight: Optional[float] = typer.Option(None, help="w in (1-w) region + w first-stage score."),
        max_boxes: Optional[int] = typer.Option(None, help="Boxes kept per image after NMS (default 10)."),
        config: Optional[Path] = typer.Option(None, "--config", help="params.yaml-style file: its rerank: section."),
        device: Optional[str] = typer.Option(None, help="cpu or cuda (default: cuda when present)."),
        fmt: str = output.format_option(output.TEXT, output.JSON)):
    """Rerank a sample's top candidates and its positives: sample stats with rerank scores (schema 2)."""
    from rscale import api
    from rscale.cli.options import output_file

    output_file(out)
    output_folder(cache, "--cache")
    summary = api.rerank_sample(sample_stats, queries=queries, distractors=distractors, positives=positives,
                                detector=detector, backbone=backbone, cache=cache, out=out, candidates=candidates,
                                config=config, first_stage_weight=first_stage_weight, max_boxes=max_boxes,
                                device=device, progress=fmt != output.JSON)
    output.print_mapping(summary, fmt)


def rerank_backbone(name: str = typer.Argument(..., help="The entry's name under real_backbones: in params.yaml."),
                    out: Path = typer.Option(..., "--out", "-o", help="Sample stats to write (schema version 2)."),
                    config: Path = typer.Option(Path("params.yaml"), "--config", help="params.yaml with the entry."),
                    progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bars."),
                    fmt: str = output.format_option(output.TEXT, output.JSON)):
    """Rerank a params.yaml `real_backbones` entry's scored sample (the DVC stage real_rerank)."""
    from rscale.api.real_backbones import rerank_real_backbone
    from rscale.cli.options import output_file

    output_file(out)
    summary = rerank_real_backbone(config, name, out=out, progress=progress)
    output.print_mapping(summary, fmt)


def predict_rerank(
        sample_stats: Path = typer.Argument(..., help="Sample stats with rerank scores (schema version 2)."),
        metric: Optional[list[str]] = typer.Option(None, "--metric", help="Measure(s) with a cut-off <= K': "
                                                   "mAP@1000, R@1, Recall@100, MRR@1000 (default: mAP@K', R@1)."),
        n: list[str] = typer.Option(["1e8"], "--n", help="Gallery size(s): 1e8, 759k, ... (at least K')."),
        depth: int = typer.Option(1000, "--depth", help="K': first-stage candidates the reranker reorders."),
        method: str = typer.Option("evt-eb", help="First-stage hardness estimator (evt-eb, evt, evt-paper, count, ...)."),
        mode: Optional[str] = typer.Option(None, help="expected (exact expectation) or plugin (counts at their "
                                           "centres); default: rscale query's per-measure default."),
        replicates: int = typer.Option(16, help="Half-sample replicates, as rscale estimate (0: none, no "
                                       "benchmark interval)."),
        bootstrap: int = typer.Option(1000, help="Query-bootstrap resamples for --ci population (at most 10,000)."),
        ci: str = ci_option(),
        fmt: str = output.format_option(output.TABLE, output.JSON, output.CSV)):
    """Predict the metric after reranking the top K' at any gallery size, from a reranked sample
    (the value and interval rscale query gives a version registered from it)."""
    from rscale import api
    from rscale.cli.options import MAX_BOOTSTRAP

    positive_int(depth, "--depth")
    positive_int(bootstrap, "--bootstrap", minimum=0, maximum=MAX_BOOTSTRAP)
    positive_int(replicates, "--replicates", minimum=0)
    sizes = [float(gallery_size(v)) for v in n]
    rows = api.predict_reranked(sample_stats, n=sizes, depth=depth, measures=metric, method=method, mode=mode,
                                ci_kind=ci, replicates=replicates, bootstrap=bootstrap)
    for row in rows:
        row["N"] = row.pop("n")
    output.print_rows(rows, fmt, ["measure", "N", "depth", "value", "ci_low", "ci_high", "ci_kind", "first_stage",
                                  "method", "mode"])


COMMANDS = {"rerank": rerank, "rerank-sample": rerank_sample, "rerank-backbone": rerank_backbone,
            "predict-rerank": predict_rerank}
