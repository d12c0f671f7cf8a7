"""Is this folder a local transformers checkpoint? The one check every producer that loads
weights runs first (extract's backbones, the reranker's OWLv2 detector), so all of them refuse a
wrong folder with the same message: no ``config.json``, or no weights file next to it.

Nothing here imports torch or transformers: the check runs before the heavy imports, and a
refused folder costs nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

from rscale.errors import FormatError

WEIGHTS_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json")
NO_DOWNLOAD_HINT = ("download the weights once elsewhere (huggingface-cli download ...) and pass the local folder; "
                    "rscale never downloads at run time")


def checkpoint_config(path, *, what: str = "checkpoint", hint: str = NO_DOWNLOAD_HINT) -> dict:
    """The parsed ``config.json`` of a local transformers checkpoint folder that also holds a
    weights file (one of :data:`WEIGHTS_FILES`); a :class:`FormatError` naming the folder and
    the fix otherwise. ``what`` names the checkpoint in the message ("detector", "backbone")."""
    path = Path(path)
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise FormatError(f"no config.json: not a transformers {what} checkpoint folder",
                          path=str(path), hint=hint)
    try:
        cfg = json.loads(cfg_file.read_text())
    except (OSError, ValueError) as exc:
        raise FormatError(f"cannot read the {what}'s config.json ({exc})", path=str(cfg_file)) from None
    if not isinstance(cfg, dict):
        raise FormatError(f"the {what}'s config.json is not a JSON object", path=str(cfg_file))
    if not any((path / n).exists() for n in WEIGHTS_FILES):
        raise FormatError(f"no weights file (model.safetensors or pytorch_model.bin) in the {what} folder", path=str(path),
                          hint="copy the checkpoint's weights into this folder")
    return cfg
