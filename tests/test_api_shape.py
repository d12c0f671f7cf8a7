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


# extras' requirements used without an import (name -> why)
USED_WITHOUT_IMPORT = {"sqlalchemy": "mlflow's SQLite tracking store", "alembic": "mlflow's SQLite tracking store",
                       "dvc": "the pipeline's command-line tool", "pytest": "the test runner"}
IMPORT_NAME = {"pillow": "PIL", "faiss-cpu": "faiss", "mlflow-skinny": "mlflow", "scikit-learn": "sklearn",
               "scikit-image": "skimage", "ir-measures": "ir_measures", "fonttools": "fontTools"}


def _imported_top_levels(folder) -> set:
    import ast
    names = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
            elif (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "importorskip" and node.args
                  and isinstance(node.args[0], ast.Constant)):             # pytest.importorskip("name")
                names.add(str(node.args[0].value).split(".")[0])
    return names


def test_every_declared_extra_is_imported():
    # by rscale's code; the test extra's by the tests
    import re
    import tomllib
    from pathlib import Path

    import rscale
    root = Path(rscale.__file__).resolve().parent
    project = tomllib.loads((root.parents[1] / "pyproject.toml").read_text())["project"]
    in_code, in_tests = _imported_top_levels(root), _imported_top_levels(Path(__file__).resolve().parent)
    unused = []
    for extra, reqs in project["optional-dependencies"].items():
        for req in reqs:
            name = re.split(r"[<>=!~\[ ;]", req, maxsplit=1)[0].lower()
            if name not in USED_WITHOUT_IMPORT and IMPORT_NAME.get(name, name) not in (
                    in_tests if extra == "test" else in_code):
                unused.append(f"{extra}: {name}")
    assert not unused, f"declared but never imported: {unused}"
