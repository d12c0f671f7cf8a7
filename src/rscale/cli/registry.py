"""Commands on the registry: register, ls, show, tag, verify, export, import, lineage."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from rscale.cli import output
from rscale.cli.options import output_file, registry_option


def _series(v) -> str:
    return "/".join(v.series)


def register(
    hardness: Path = typer.Argument(..., help="Hardness Parquet file (its .tail.parquet is taken too)."),
    sample: Optional[Path] = typer.Option(None, "--sample", help="The sample-stats file it was estimated from."),
    backbone: Optional[str] = typer.Option(None, help="Override the backbone name from the file's metadata."),
    benchmark: Optional[str] = typer.Option(None, help="Override the benchmark name."),
    source: Optional[str] = typer.Option(None, help="Override the distractor source."),
    receipt: Optional[Path] = typer.Option(None, help="Write a small JSON receipt (ref + digest), e.g. for DVC."),
    registry: Optional[Path] = registry_option(),
    fmt: str = output.format_option(output.TEXT, output.JSON),
):
    """Store a hardness table as a new immutable version (a no-op if identical content is there)."""
    from rscale import api

    output_file(receipt, "--receipt")     # refused before the registry is touched
    out = api.register(hardness, sample_stats=sample, registry=registry, backbone=backbone, benchmark=benchmark,
                       source=source)
    if receipt:
        import json
        receipt.parent.mkdir(parents=True, exist_ok=True)
        receipt.write_text(json.dumps({k: out[k] for k in ("ref", "hardness", "series")}, indent=2, sort_keys=True) + "\n")
    verb = "registered" if out["created"] else "already registered (no change)"
    output.print_message(f"{verb}: {out['ref']}  [{out['series']}]  {out['hardness']}", fmt, out)


def ls(registry: Optional[Path] = registry_option(),
       fmt: str = output.format_option(output.TABLE, output.JSON)):
    """List every version in the registry: hardness versions, registered O2I results and reranks (kind column)."""
    from rscale import api

    entries = api.list_registered(registry)
    if fmt == output.JSON:
        output.print_json(entries)
        return
    from rich.table import Table
    table = Table()
    for c in ("kind", "backbone", "version", "tags", "benchmark", "source", "estimator", "size", "S", "created"):
        table.add_column(c)
    for e in entries:
        s = e["summary"]
        if e["kind"] == "hardness":
            cells = (e["backbone"], e["source"], e["estimator"], f"{s.get('queries', '')} queries", f"{s.get('S_max', 0):,}")
        elif e["kind"] == "rerank":       # an artifact rerank:NAME@vN: queries x K' reranked
            cells = (e["name"], "-", "-", f"{s.get('queries', '')} queries x K'={s.get('k', '')}", "-")
        else:                             # an artifact (o2i:NAME@vN): objects x distances, no sample size
            cells = (e["name"], "-", "-", f"{s.get('objects', '')} objects x {len(s.get('distances', []))} distances", "-")
        name, source, estimator, size, sample = cells
        table.add_row(e["kind"], name, f"v{e['version']}", ",".join(e["tags"]), e["benchmark"], source, estimator,
                      size, sample, str(e["created"])[:19])
    output.console().print(table)


def show(name: str = typer.Argument(..., help="NAME[@VERSION], e.g. dinov3_l@v2 or dinov3_l@released."),
         benchmark: Optional[str] = typer.Option(None, "--on"),
         estimator: Optional[str] = typer.Option(None, "--using"),
         registry: Optional[Path] = registry_option(),
         fmt: str = output.format_option(output.JSON)):
    """Show one version: identity, lineage and summary (JSON; no Parquet scan)."""
    from rscale import api

    output.print_json(api.show(name, registry=registry, benchmark=benchmark, estimator=estimator))


def tag(name: str = typer.Argument(..., help="NAME@VERSION to tag, or a registered O2I result o2i:NAME@VERSION."),
        tag_name: str = typer.Argument(..., help="Tag, e.g. released."),
        benchmark: Optional[str] = typer.Option(None, "--on"),
        estimator: Optional[str] = typer.Option(None, "--using"),
        registry: Optional[Path] = registry_option(),
        fmt: str = output.format_option(output.TEXT, output.JSON)):
    """Point a movable tag (released, ...) at a version."""
    from rscale import api

    v = api.tag(name, tag_name, registry=registry, benchmark=benchmark, estimator=estimator)
    output.print_message(f"{tag_name} -> {v.ref} [{_series(v)}]", fmt, {"tag": tag_name, "ref": v.ref,
                                                                        "series": _series(v)})


def verify(registry: Optional[Path] = registry_option(),
           fmt: str = output.format_option(output.TEXT, output.JSON)):
    """Re-hash every blob and catalog row; report damage (exit 1) apart from harmless leftovers."""
    from rscale import api

    report = api.verify(registry)
    if fmt == output.JSON:
        output.print_json(report)
    else:
        typer.echo(f"checked: {len(report['checked'])}  corrupt: {len(report['corrupt'])}  "
                   f"missing: {len(report['missing'])}  extra: {len(report['extra'])}  "
                   f"leftovers: {len(report['leftovers'])}  unsealed: {len(report['unsealed'])}")
        for kind in ("corrupt", "missing", "extra", "leftovers", "unsealed"):
            for item in report[kind]:
                typer.echo(f"  {kind}: {item}")
        if report["leftovers"]:
            typer.echo("leftovers are harmless (killed writers); 'rscale gc --apply' frees them")
    if report["corrupt"] or report["missing"] or report["extra"]:
        raise typer.Exit(1)


def gc(registry: Optional[Path] = registry_option(),
       grace: float = typer.Option(3600.0, "--grace", help="Only leftovers untouched for this many seconds."),
       apply: bool = typer.Option(False, "--apply", help="Delete them (default: only list what would go)."),
       fmt: str = output.format_option(output.TEXT, output.JSON)):
    """Free orphan blobs, temp files and .import-* folders of killed writers; never a referenced blob."""
    from rscale import api
    from rscale.errors import InvalidArgumentError

    if not grace >= 0:
        raise InvalidArgumentError(f"--grace {grace}: give a number of seconds >= 0")
    out = api.gc(registry, grace_s=grace, dry_run=not apply)
    if fmt == output.JSON:
        output.print_json(out)
        return
    verb = "would free" if out["dry_run"] else "freed"
    typer.echo(f"{verb} {len(out['freed'])} leftover(s), {out['bytes'] / 1e6:.1f} MB; kept {len(out['kept'])} "
               f"younger than {grace:g} s" + ("; run with --apply to free them" if out["dry_run"] and out["freed"] else ""))
    for item in out["freed"]:
        typer.echo(f"  {verb}: {item}")


def export(name: str = typer.Argument(..., help="NAME[@VERSION] to export."),
           out: Path = typer.Option(..., "--out", "-o", help="Bundle file to write (.tar)."),
           license: str = typer.Option("unspecified", help="License the hardness is shared under."),
           benchmark: Optional[str] = typer.Option(None, "--on"),
           estimator: Optional[str] = typer.Option(None, "--using"),
           registry: Optional[Path] = registry_option(),
           fmt: str = output.format_option(output.TEXT, output.JSON)):
    """Write a verifiable bundle (blobs + manifest with digests) for one version."""
    from rscale import api

    output_file(out)
    path, v = api.export(name, out=out, registry=registry, benchmark=benchmark, estimator=estimator, license=license)
    output.print_message(f"exported {v.ref} [{_series(v)}] to {path}", fmt,
                         {"ref": v.ref, "series": _series(v), "written": str(path)})


def import_(bundle: Path = typer.Argument(..., help="Bundle written by rscale export."),
            registry: Optional[Path] = registry_option(),
            fmt: str = output.format_option(output.TEXT, output.JSON)):
    """Verify a bundle's every digest, then add its version (idempotent)."""
    from rscale import api

    v, created = api.import_(bundle, registry=registry)
    output.print_message(f"{'imported' if created else 'already present'}: {v.ref} [{_series(v)}]", fmt,
                         {"ref": v.ref, "series": _series(v), "created": created})


def lineage(name: str = typer.Argument(..., help="NAME[@VERSION], or a sample-stats file, descriptor set, O2I "
                                                "output or model folder."),
            benchmark: Optional[str] = typer.Option(None, "--on"),
            estimator: Optional[str] = typer.Option(None, "--using"),
            backbone: bool = typer.Option(False, "--backbone", help="Walk on to the backbone's weights and, for a "
                                          "LoRA-merged one, its base weights, adapter and training images."),
            models: Optional[list[Path]] = typer.Option(None, "--models", help="Folders to search for the "
                                                         "backbone's checkpoint (re-hashes base, adapter, list)."),
            registry: Optional[Path] = registry_option(),
            fmt: str = output.format_option(output.JSON)):
    """What made a version: estimator, parameters, code version, run id, input digests (JSON).
    A path, --backbone or --models: back to the backbone weights, base, adapter and training list."""
    from rscale import api

    if backbone or models or Path(name).exists():
        output.print_json(api.model_lineage(name, registry=registry, models=tuple(models or ()),
                                              benchmark=benchmark, estimator=estimator))
        return
    output.print_json(api.lineage(name, registry=registry, benchmark=benchmark, estimator=estimator))


COMMANDS = {"register": register, "ls": ls, "show": show, "tag": tag, "verify": verify, "gc": gc, "export": export,
            "import": import_, "lineage": lineage}
