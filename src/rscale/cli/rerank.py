"""The crop reranker's commands: rerank (OWLv2 proposals, region features, max-region rescoring)
and predict-rerank (the reranked metric at any gallery size from a reranked distractor sample)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from rscale.cli import output
from rscale.cli.options import output_folder


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
           fmt: str = output.format_option(output.TEXT, output.JSON)):
    """Rerank first-stage candidates by the max cosine over OWLv2 object crops (extract extra)."""
    from rscale import api

    output_folder(out)
    output_folder(cache, "--cache")
    summary = api.rerank(queries, candidates, gallery=gallery, detector=detector, backbone=backbone, cache=cache,
                         out=out, qrels=qrels, config=config, k=k, first_stage_weight=first_stage_weight,
                         max_boxes=max_boxes, device=device, progress=fmt != output.JSON)
    output.print_mapping(summary, fmt)


COMMANDS = {"rerank": rerank}
