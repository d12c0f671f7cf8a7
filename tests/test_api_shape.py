"""The public API's shape: keyword-only beyond two arguments, one config reader."""

import inspect

import pytest

from rscale import api
from rscale.errors import FormatError


@pytest.mark.parametrize("name", api.__all__)
def test_public_functions_take_at_most_two_positional_arguments(name):
    value = getattr(api, name)
    if not inspect.isfunction(value):
        return
    positional = [p for p in inspect.signature(value).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    assert len(positional) <= 2, f"{name}: {[p.name for p in positional]} (make the rest keyword-only)"


def test_one_config_reader(tmp_path):
    cfg = tmp_path / "params.yaml"
    cfg.write_text("backbones: [sim_gaussian]\nestimate: {method: count}\n")
    assert api.load_config(cfg)["backbones"] == ["sim_gaussian"]
    assert api.load_config(cfg, "estimate") == {"method": "count"}
    assert api.estimator_from_config(cfg) == ("count", [])
    # the pipeline demo reads the same file through it: a missing section is a FormatError, not a KeyError
    with pytest.raises(FormatError, match="no 'sample:' section"):
        api.pipeline_demo(cfg, tmp_path / "reg")
    cfg.write_text("- a list\n")
    with pytest.raises(FormatError, match="expected a mapping"):
        api.load_config(cfg)
    with pytest.raises(FormatError, match="file not found"):
        api.load_config(tmp_path)
