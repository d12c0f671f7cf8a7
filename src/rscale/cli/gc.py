"""``rscale gc``: free what killed writers left in a registry (a dry run unless --apply)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def gc(registry: Optional[Path] = typer.Option(None, "--registry", "-r", envvar="RSCALE_REGISTRY",
                                               help="Registry folder (default: ./registry)."),
       grace: float = typer.Option(3600.0, "--grace", help="Only leftovers untouched for this many seconds."),
       apply: bool = typer.Option(False, "--apply", help="Delete them (default: only list what would go)."),
       fmt: str = typer.Option("text", "--format", help="text or json.")):
    """Free orphan blobs, temp files and .import-* folders of killed writers; never a referenced blob."""
    import json

    from rscale import api
    from rscale.errors import InvalidArgumentError

    if not grace >= 0:
        raise InvalidArgumentError(f"--grace {grace}: give a number of seconds >= 0")
    if fmt not in ("text", "json"):
        raise InvalidArgumentError(f"--format {fmt}: choose text or json")
    out = api.gc(registry, grace_s=grace, dry_run=not apply)
    if fmt == "json":
        typer.echo(json.dumps(out, indent=2, sort_keys=True))
        return
    verb = "would free" if out["dry_run"] else "freed"
    typer.echo(f"{verb} {len(out['freed'])} leftover(s), {out['bytes'] / 1e6:.1f} MB; kept {len(out['kept'])} "
               f"younger than {grace:g} s" + ("; run with --apply to free them" if out["dry_run"] and out["freed"] else ""))
    for item in out["freed"]:
        typer.echo(f"  {verb}: {item}")


COMMANDS = {"gc": gc}
