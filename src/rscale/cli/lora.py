"""`rscale train-lora`: the O2I LoRA fine-tune, merged into a plain checkpoint (docs/lora.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from rscale.cli import output
from rscale.cli.options import output_folder


def _progress(every: int):
    def show(step, steps, loss, lr):
        if step == 1 or step == steps or step % every == 0:
            print(f"step {step}/{steps} loss {loss:.5f} lr {lr:.2e}", file=sys.stderr, flush=True)
    return show


def train_lora(config: Optional[Path] = typer.Option(None, "--config", help="params.yaml with a `lora:` section "
                                                     "(default ./params.yaml when it exists)."),
               base: Optional[str] = typer.Option(None, "--base", help="Base checkpoint folder (overrides lora.base)."),
               data: Optional[str] = typer.Option(None, "--data", help="Training images: a folder or list file; an "
                                                  "ILIAS-layout folder (its pos/ images, never its queries); or an "
                                                  "O2I output folder or render manifest, whose renders are split by "
                                                  "object (overrides lora.data)."),
               queries: Optional[str] = typer.Option(None, "--queries", help="Evaluation queries never trained on: "
                                                     "an ILIAS-layout folder (its query/ images) or an image folder "
                                                     "or list file; refused by path and content (overrides "
                                                     "lora.queries)."),
               evaluation: Optional[float] = typer.Option(None, "--evaluation", help="Renders: objects held out of "
                                                          "training, a count or a share in (0, 1)."),
               split_seed: Optional[int] = typer.Option(None, "--split-seed"),
               out: Optional[Path] = typer.Option(None, "--out", "-o", help="Output folder (overrides lora.out): "
                                                  "model/, adapter/, checkpoints/, training_list.tsv."),
               steps: Optional[int] = typer.Option(None, "--steps"),
               rank: Optional[int] = typer.Option(None, "--rank"),
               lr: Optional[float] = typer.Option(None, "--lr"),
               batch_size: Optional[int] = typer.Option(None, "--batch-size"),
               targets: Optional[str] = typer.Option(None, "--targets", help="Comma-separated module names "
                                                     "(overrides the family's default)."),
               sets: Optional[list[str]] = typer.Option(None, "--set", help="Any lora parameter: key=value "
                                                        "(YAML value), repeatable."),
               resume: Optional[Path] = typer.Option(None, "--resume", help="Checkpoint folder to resume from "
                                                     "(default: the newest under OUT/checkpoints)."),
               device: str = typer.Option("cpu", "--device", help="torch device: cpu, or cuda on a GPU."),
               precision: str = typer.Option("float32", "--precision", help="float32, or bfloat16 (autocast forward "
                                             "passes, float32 weights; for a GPU)."),
               progress: bool = typer.Option(True, "--progress/--no-progress", help="Loss lines on stderr."),
               fmt: str = output.format_option(output.TEXT, output.JSON)):
    """Train LoRA adapters so a gray-padded, lower-O2I view matches the frozen model, then merge them."""
    from rscale.api import lora as api_lora

    if config is None and Path("params.yaml").is_file():
        config = Path("params.yaml")
    overrides = {"base": base, "data": data, "queries": queries, "split_seed": split_seed,
                 "out": str(out) if out is not None else None, "steps": steps, "rank": rank, "lr": lr,
                 "batch_size": batch_size,
                 "evaluation": None if evaluation is None else (int(evaluation) if evaluation >= 1 else evaluation),
                 "targets": [t.strip() for t in targets.split(",") if t.strip()] if targets else None}
    cfg = api_lora.load_lora_config(config, overrides=overrides, sets=sets or ())
    output_folder(cfg.out)
    summary = api_lora.train_lora(cfg, resume=resume, device=device, precision=precision,
                                  progress=_progress(max(1, cfg.params.steps // 20)) if progress else False)
    if fmt == output.JSON:
        output.print_json(summary)
        return
    typer.echo(f"wrote {summary['model']} (merged) and {summary['adapter']}: {summary['steps']} steps, loss "
               f"{summary['loss_first']:.4f} -> {summary['loss_last']:.4f}, {summary['images']} training images "
               f"({summary['source']['kind']}, {summary['source']['excluded_queries']} evaluation queries kept out)")
    typer.echo(f"base {summary['base_weights']}\nmerged {summary['merged_weights']}\nadapter {summary['adapter_sha256']}"
               f"\ntraining list {summary['training_list_sha256']}\nmlflow run {summary['mlflow_run_id']}")


COMMANDS = {"train-lora": train_lora}
