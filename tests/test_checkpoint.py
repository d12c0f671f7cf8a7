"""The one local-checkpoint-folder check (rscale.producers.checkpoint), as extract's backbone loader
and the reranker's detector loader see it."""

import pytest

from rscale.errors import FormatError
from rscale.producers.checkpoint import checkpoint_config


def test_checkpoint_folder_check(tmp_path):
    with pytest.raises(FormatError, match="nowhere: no config.json: not a transformers detector checkpoint"):
        checkpoint_config(tmp_path / "nowhere", what="detector")
    (tmp_path / "config.json").write_text('{"model_type": "vit"}')
    with pytest.raises(FormatError, match="no weights file .* in the backbone folder"):
        checkpoint_config(tmp_path, what="backbone")
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert checkpoint_config(tmp_path) == {"model_type": "vit"}
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(FormatError, match="config.json is not a JSON object"):
        checkpoint_config(tmp_path)


def test_broken_config_json_is_a_format_error_not_a_traceback(tmp_path):
    # regression: extract's loader used to let json.JSONDecodeError escape (a traceback from the CLI)
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from rscale.producers import extract as ex
    (tmp_path / "config.json").write_text("{not json")
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(FormatError, match="cannot read the backbone's config.json"):
        ex.load_backbone(tmp_path)
