"""The crop reranker's settings: params.yaml's `rerank:` section (the code's defaults, written out),
its precedence (defaults < `rerank:` < a `rerank_backbones` group < arguments) and the values it
refuses. No model is loaded."""

from pathlib import Path

import pytest
import yaml

from rscale import api
from rscale.errors import InvalidArgumentError, RscaleError

ROOT = Path(__file__).resolve().parents[1]


def test_the_committed_params_rerank_section_is_the_codes_defaults():
    section = yaml.safe_load((ROOT / "params.yaml").read_text())["rerank"]
    from rscale.api.rerank import CONFIG_KEYS
    assert set(section) == set(CONFIG_KEYS)                 # every setting written out, nothing else
    assert api.rerank_settings(ROOT / "params.yaml") == api.rerank_settings()


def test_an_integer_in_a_params_file_gives_the_same_region_cache_identity():
    """`min_side: 8` (YAML int) and the default 8.0 once gave different region-cache identities
    (its digest is over the settings' JSON, where 8 and 8.0 differ): the same cache was refused."""
    from dataclasses import asdict

    from rscale.api.rerank import PROPOSAL_KEYS
    from rscale.producers.rerank import ProposalParams
    from rscale.store.hashing import canonical_json

    def identity(s):
        return canonical_json(asdict(ProposalParams(**{k: s[k] for k in PROPOSAL_KEYS})))
    from_file = api.rerank_settings(min_side=8, nms_iou=1, min_objectness=0, first_stage_weight=0)
    assert identity(from_file) == identity(api.rerank_settings(nms_iou=1.0))
    assert identity(api.rerank_settings(min_side=8)) == identity(api.rerank_settings())
    # and the producer's own value: ProposalParams(min_side=4) from Python is the settings' 4.0
    assert canonical_json(asdict(ProposalParams(min_side=4, nms_iou=1))) == identity(
        api.rerank_settings(min_side=4, nms_iou=1))
    assert all(isinstance(from_file[k], float) for k in ("min_side", "nms_iou", "min_objectness", "first_stage_weight"))


@pytest.mark.parametrize("override,message", [
    (dict(nms_iou="abc"), "rerank nms_iou must be a number, got 'abc'"),
    (dict(min_side=[8]), "rerank min_side must be a number"),
    (dict(min_objectness=True), "rerank min_objectness must be a number, got True"),
    (dict(nms_iou=1.5), r"rerank nms_iou must lie in \[0, 1\]"),
    (dict(resolution=0), "rerank resolution must be a whole number >= 1 or null"),
    (dict(resolution=96.5), "rerank resolution must be a whole number >= 1 or null"),
    (dict(max_boxes=True), "rerank max_boxes must be a whole number >= 0"),
    (dict(k=True), "rerank k must be a whole number >= 1"),
])
def test_bad_values_are_one_line_errors(override, message):
    with pytest.raises(InvalidArgumentError, match=message) as info:
        api.rerank_settings(**override)
    assert isinstance(info.value, RscaleError) and info.value.exit_code == 2 and "\n" not in str(info.value)


def _params(tmp_path, rerank=None, group=None):
    cfg = {"rerank_backbones": {"b": {"detector": "owl", **(group or {})}}}
    if rerank is not None:
        cfg["rerank"] = rerank
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path, cfg["rerank_backbones"]["b"]


def test_a_rerank_backbones_group_starts_from_the_params_rerank_section(tmp_path):
    from rscale.api.real_backbones import rerank_group_settings
    path, group = _params(tmp_path, rerank={"nms_iou": 0.3, "max_boxes": 5, "k": 7}, group={"max_boxes": 2})
    s = rerank_group_settings(path, group)
    assert (s["nms_iou"], s["max_boxes"], s["min_side"]) == (0.3, 2, 8.0)    # section, group, default
    path, group = _params(tmp_path, group={"max_boxes": 2})                  # no section: the defaults
    assert rerank_group_settings(path, group) == api.rerank_settings(max_boxes=2)
    path, group = _params(tmp_path, rerank={"boxes": 3})
    with pytest.raises(InvalidArgumentError, match=r"unknown key 'rerank.boxes'"):
        rerank_group_settings(path, group)
