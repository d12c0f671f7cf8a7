"""Commands that make descriptors and sample stats: extract, make-descriptors, score."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from rscale.cli import output
from rscale.cli.options import output_file, output_folder

ENGINE_HELP = ("local (this process) or ray (Ray tasks / Ray Data; the distributed extra): the same outputs. "
               "Without --address, a local Ray instance on this machine's CPUs.")
ADDRESS_HELP = "Ray cluster to run on (--engine ray): auto, ray://head:10001 or host:6379."


def extract(images: Path = typer.Argument(..., help="Image folder, list file, or ILIAS root (--layout ilias)."),
            model: Path = typer.Option(..., "--model", help="Local transformers checkpoint folder."),
            out: Path = typer.Option(..., "--out", "-o", help="Output descriptor-set folder."),
            role: str = typer.Option("distractors", help="queries, positives or distractors."),
            layout: str = typer.Option("folder", help="folder (or list file) or ilias."),
            crop: bool = typer.Option(False, help="ILIAS: crop queries to their *_bbox.txt boxes."),
            pooling: str = typer.Option("cls", help="cls, mean or pooled."),
            resolution: Optional[int] = typer.Option(None, help="Input resolution (default: the checkpoint's)."),
            preprocessing: str = typer.Option("auto", help="processor (the checkpoint's image processor), resize "
                                              "(plain resize: fixed-resolution protocols) or auto."),
            batch_size: int = typer.Option(32),
            intervention: Optional[str] = typer.Option(None, help="Query-side: gp or msa."),
            shard_size: int = typer.Option(4096),
            engine: str = typer.Option("local", help=ENGINE_HELP),
            address: Optional[str] = typer.Option(None, help=ADDRESS_HELP),
            fmt: str = output.format_option(output.TEXT, output.JSON)):
    """Extract L2-normalised descriptors with a local transformers backbone (extract extra)."""
    from rscale import api

    output_folder(out)
    summary = api.extract(images, model_dir=model, out=out, role=role, layout=layout, crop=crop, pooling=pooling,
                          resolution=resolution, batch_size=batch_size, intervention=intervention,
                          shard_size=shard_size, preprocessing=preprocessing, engine=engine, address=address)
    output.print_mapping(summary, fmt)


def extract_backbone(name: str = typer.Argument(..., help="The entry's name under real_backbones: in params.yaml."),
                     part: str = typer.Option(..., "--part", help="gallery (positives, distractors, qrels) or queries."),
                     out: Path = typer.Option(..., "--out", "-o", help="Output folder."),
                     config: Path = typer.Option(Path("params.yaml"), "--config", help="params.yaml with the entry."),
                     progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bars."),
                     fmt: str = output.format_option(output.TEXT, output.JSON)):
    """Extract a params.yaml `real_backbones` entry's gallery or queries (the DVC stages real_gallery, real_queries)."""
    from rscale.api.real_backbones import extract_real_backbone

    output_folder(out)
    summary = extract_real_backbone(config, name, part=part, out=out, progress=progress)
    output.print_mapping(summary, fmt)


def score_backbone(name: str = typer.Argument(..., help="The entry's name under real_backbones: in params.yaml."),
                   out: Path = typer.Option(..., "--out", "-o", help="Sample-stats Parquet file to write (and "
                                            "<stem>.candidates.parquet next to it)."),
                   config: Path = typer.Option(Path("params.yaml"), "--config", help="params.yaml with the entry."),
                   progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bars."),
                   fmt: str = output.format_option(output.TEXT, output.JSON)):
    """Score a params.yaml `real_backbones` entry's sample, keeping score.candidates lists (the DVC stage real_score)."""
    from rscale.api.real_backbones import score_real_backbone

    output_file(out)
    summary = score_real_backbone(config, name, out=out, progress=progress)
    output.print_mapping(summary, fmt)
    if summary.get("drifting"):
        output.warn(summary["drift"])


def make_descriptors(
        out: Path = typer.Option(..., "--out", "-o", help="Folder for queries/, positives/, distractors/, qrels.parquet."),
        instances: int = typer.Option(200, help="Object instances (one query each)."),
        dim: int = typer.Option(64, help="Descriptor dimension."),
        positives: int = typer.Option(4, help="Positives per instance."),
        distractors: int = typer.Option(200_000, help="Distractor pool size."),
        hard_share: float = typer.Option(0.01, help="Share of near-duplicate distractors (0 to 1)."),
        noise_low: float = typer.Option(0.6, help="Lowest per-instance noise of queries/positives."),
        noise_high: float = typer.Option(0.6, help="Highest per-instance noise (harder objects)."),
        seed: int = typer.Option(0),
        backbone: str = typer.Option("sim_desc", help="Name recorded as the backbone (simulated)."),
        fmt: str = output.format_option(output.TEXT, output.JSON)):
    """Generate simulated descriptor sets (the embedded stand-in for feature extraction)."""
    from rscale import api

    output_folder(out)
    text = api.make_descriptor_sets(out, instances=instances, dim=dim, positives=positives, distractors=distractors,
                                    hard_share=hard_share, seed=seed, backbone=backbone, noise=(noise_low, noise_high))
    output.print_message(text, fmt, {"written": str(out)})


def score(queries: Path = typer.Option(..., "--queries", help="Query descriptor set (folder with manifest.json)."),
          positives: Path = typer.Option(..., "--positives", help="Positive descriptor set."),
          qrels: Path = typer.Option(..., "--qrels", help="Parquet/CSV with columns query_id, positive_id."),
          distractors: Path = typer.Option(..., "--distractors", help="Distractor descriptor set."),
          out: Path = typer.Option(..., "--out", "-o", help="Sample-stats Parquet file to write."),
          fraction: float = typer.Option(1.0, help="Share of the pool to score (hash-sampled, nested); 1 = exact."),
          seed: int = typer.Option(0, help="Sampling seed."),
          k: int = typer.Option(4000, help="Top scores kept per query."),
          candidates: int = typer.Option(0, help="Also keep each query's top R sampled distractors by id, written "
                                         "next to the output as <stem>.candidates.parquet (for rerank-sample; "
                                         "0 = none, R <= --k)."),
          halves: bool = typer.Option(False, "--halves", help="Record each sampled distractor's half-sample "
                                      "membership by id, so backbones scored on the same sample pair (A vs B)."),
          backend: str = typer.Option("auto", help="numpy (BLAS), faiss, torch (a CUDA GPU when present) or auto "
                                                   "(torch on a GPU for large jobs, else numpy)."),
          engine: str = typer.Option("local", help=ENGINE_HELP),
          address: Optional[str] = typer.Option(None, help=ADDRESS_HELP),
          fmt: str = output.format_option(output.TEXT, output.JSON)):
    """Score descriptors: a uniform sample of the distractors against the queries -> sample stats."""
    from rscale import api

    output_file(out)
    summary = api.score(queries_dir=queries, positives_dir=positives, qrels=qrels, distractors_dir=distractors,
                        out=out, fraction=fraction, seed=seed, k=k, backend=backend, engine=engine, address=address,
                        progress=True, candidates=candidates, halves=halves)
    output.print_mapping(summary, fmt)
    if summary.get("drifting"):
        output.warn(summary["drift"])


COMMANDS = {"extract": extract, "extract-backbone": extract_backbone, "make-descriptors": make_descriptors,
            "score": score, "score-backbone": score_backbone}
