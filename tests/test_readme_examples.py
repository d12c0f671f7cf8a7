"""The README's command-line tour (the ```sh block under "## Command line") runs as written,
in order, in a fresh folder: only sizes are shrunk (each substitution must still match, so the
README cannot drift from what is run), and the extract lines use a tiny random checkpoint."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from rscale.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"

# (README text, what runs instead): smaller samples and pools, the same commands and options
SHRINK = [
    ("--s 5e6 --k 4000", "--s 2e5 --k 300 --queries 30"),
    ("rscale demo ", "rscale demo --queries 20 --backbone sim_gaussian --n 1e6 "),
    ("--distractors 400000", "--distractors 20000 --instances 30 --dim 16"),
    ("--fraction 0.05", "--fraction 0.05 --k 200"),
]


def tour_commands() -> list[str]:
    text = README.read_text()
    section = text.split("\n## Command line\n", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    joined = block.replace("\\\n", " ")                      # shell line continuations
    return [line.strip() for line in joined.splitlines() if line.strip().startswith("rscale ")]


def argv_of(command: str) -> list[str]:
    """A tour line's words as a shell reads them: a comment starts at a word-initial '#' only
    (``out/o2i#backbone/gp`` is one word), which shlex's comment handling does not know."""
    return shlex.split(re.sub(r"(^|\s)#.*$", "", command))


def shrunk(commands: list[str]) -> list[str]:
    out = list(commands)
    for old, new in SHRINK:
        hits = [i for i, c in enumerate(out) if old in c]
        assert hits, f"README no longer has {old!r}: update SHRINK"
        for i in hits:
            out[i] = out[i].replace(old, new)
    return out


def test_readme_block_is_found():
    commands = tour_commands()
    names = {argv_of(c)[1] for c in commands}
    assert {"simulate", "estimate", "predict", "register", "query", "export", "import", "score", "extract"} <= names
    assert len(commands) >= 20


def test_readme_in_pool_example_is_consistent():
    # shrinking S would hide it: an in-pool gallery holds the sample, so N >= S as written
    from rscale.query.grammar import parse_size
    commands = [argv_of(c) for c in tour_commands()]
    s = next(parse_size(a[a.index("--s") + 1]) for a in commands if a[1] == "simulate")
    pooled = [parse_size(a[a.index("--n") + 1]) for a in commands if "--in-pool" in a]
    assert pooled and all(n >= s for n in pooled)


def _fake_inputs(work: Path):
    """A tiny random DINOv2 checkpoint and small image trees where the README names them, and a
    params.yaml whose O2I section renders 4 objects at 64 px through a tiny random MobileNetV2
    under the default backbone's name (so the tour's `rscale compare` arguments hold), and whose
    lora section fine-tunes that MobileNetV2 for a few steps."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import numpy as np
    from PIL import Image

    torch.manual_seed(0)
    cfg = transformers.Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                    intermediate_size=64, image_size=32, patch_size=8)
    transformers.Dinov2Model(cfg).save_pretrained(work / "ckpt" / "dinov2-l")
    rng = np.random.default_rng(0)

    def image(path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray((rng.random((40, 48, 3)) * 255).astype(np.uint8)).save(path)

    for i in range(4):
        image(work / "images" / f"d{i}.jpg")
    for inst in ("a", "b"):
        image(work / "ilias" / inst / "query" / "q.jpg")
        (work / "ilias" / inst / "query" / "q_bbox.txt").write_text("4 4 30 28")
        image(work / "ilias" / inst / "pos" / "p.jpg")
    import yaml
    from test_o2i_pipeline import DISTANCES, tiny_mobilenet
    o2i = {"objects": 4, "seed": 0, "cache": str(work / "o2i-cache"),
           "render": {"distances": DISTANCES, "resolution": 64},
           "backbones": [{"name": "mobilenet_v2_imagenet", "model": str(tiny_mobilenet(work / "ckpt" / "mb")),
                          "pooling": "pooled"}],
           "canvas": {"distance_index": 0, "sizes": [64, 96], "object_size": 48}, "batch_size": 16}
    # `rscale train-lora`: the tiny MobileNetV2 as the base, a few steps, one of the 4 objects held out
    lora = {"base": str(work / "ckpt" / "mb"), "evaluation": 1, "steps": 3, "batch_size": 4, "warmup_steps": 1}
    (work / "params.yaml").write_text(yaml.safe_dump({"o2i": o2i, "lora": lora}))


def test_readme_tour_runs(tmp_path, monkeypatch, capsys):
    work = tmp_path / "work"
    work.mkdir()
    _fake_inputs(work)
    monkeypatch.chdir(work)
    for command in shrunk(tour_commands()):
        argv = argv_of(command)[1:]
        rc = main(argv)
        captured = capsys.readouterr()
        assert rc == 0, f"{command}\n{captured.err}"
    assert (work / "registry" / "catalog.duckdb").exists() and (work / "out" / "report.md").exists()
    assert (tmp_path / "their-registry" / "catalog.duckdb").exists()
