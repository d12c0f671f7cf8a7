"""The typer app: every command group's commands under one ``rscale`` entry point.

One module per group (:mod:`~rscale.cli.data`, :mod:`~rscale.cli.registry`,
:mod:`~rscale.cli.querying`, :mod:`~rscale.cli.producers`, :mod:`~rscale.cli.rerank`,
:mod:`~rscale.cli.o2i`, :mod:`~rscale.cli.lora`) and one for printing
(:mod:`~rscale.cli.output`); heavy work is imported inside each command.
"""

from __future__ import annotations

import typer

from rscale.cli import data, lora, o2i, producers, querying, registry, rerank

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Tail-aware retrieval evaluation: metrics at any gallery size from a small sample.")

GROUPS = (querying, data, registry, producers, rerank, o2i, lora)
for _group in GROUPS:
    for _name, _command in _group.COMMANDS.items():
        app.command(_name)(_command)
    for _name, _sub in getattr(_group, "SUBAPPS", {}).items():
        app.add_typer(_sub, name=_name)
