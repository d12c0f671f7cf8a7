"""The public Python API shared by the CLI and notebooks.

Functions take plain values (paths, names, numbers) and return plain values or dataclasses; the
CLI only parses arguments and prints. Grouped by concern:

- :mod:`rscale.api.demos`: simulated benchmarks, truth next to predictions (not ``demo``: a
  submodule of that name would shadow the ``demo`` function once imported)
- :mod:`rscale.api.estimation`: estimate hardness (with its replicates), predict, the budget check
- :mod:`rscale.api.registry`: register, ls, show, tag, verify, export/import, report, lineage, diff
- :mod:`rscale.api.querying`: the query language answered from the registry, curves
- :mod:`rscale.api.scoring`: descriptor sets, scoring, feature extraction
- :mod:`rscale.api.real_backbones`: a params.yaml ``real_backbones`` entry (the DVC pipeline's real backbones)
- :mod:`rscale.api.config`: params.yaml sections (the one config reader)
- :mod:`rscale.api.compare`: paired comparison of two runs (effect, CI, p, Holm)
- :mod:`rscale.api.rerank`: the OWLv2 crop reranker end to end, reranked metrics at any N
- :mod:`rscale.api.o2i`: the controlled O2I benchmark end to end (render, extract, evaluate, analyse)
- :mod:`rscale.api.o2i_registry`: O2I results registered per backbone (``o2i:NAME@vN``), read back
- :mod:`rscale.api.o2i_strata`: O2I stratification of a real (ILIAS-layout) benchmark's gains
- :mod:`rscale.api.lora`: the O2I LoRA fine-tune (train, merge) and the walk from an artifact back to
  the base weights, adapter and training images of the backbone that made it

The code version recorded in lineage is :func:`rscale.producers.lineage.code_version`.
"""

from __future__ import annotations

import importlib

# name -> submodule; resolved on first use so `api.query` does not import the simulator,
# the scoring producers or the demo (the cold `rscale query` path, benchmarks/query_speed.py)
_HOME = {
    "compare": ("PerQueryRanks", "load_run"),    # not `compare`: it would shadow the submodule rscale.api.compare
    "config": ("estimator_from_config", "load_config"),
    "demos": ("DemoRow", "demo", "describe_sample_stats", "pipeline_demo", "simulate_sample_stats"),
    "estimation": ("BUDGET_SIZES", "budget_check", "estimate", "predict"),
    "lora": ("load_lora_config", "model_lineage", "train_lora"),
    "o2i": ("load_compare_run", "load_o2i_config", "o2i_run", "run_o2i"),
    "o2i_registry": ("register_o2i",),
    "o2i_strata": ("stratify_by_o2i",),
    "querying": ("curve", "plot_curve", "query"),
    "real_backbones": ("extract_real_backbone", "load_real_backbone", "load_rerank_group", "rerank_real_backbone",
                       "score_real_backbone"),
    "rerank": ("predict_reranked", "rerank", "rerank_sample", "rerank_settings", "reranked_hardness"),
    "registry": ("diff", "export", "gc", "import_", "lineage", "list_registered", "list_versions", "register",
                 "registration_summary", "report", "report_rows", "show", "tag", "verify"),
    "scoring": ("extract", "make_descriptor_sets", "read_qrels", "score"),
}
_WHERE = {name: module for module, names in _HOME.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'rscale.api' has no attribute {name!r}")
    home = importlib.import_module(f"rscale.api.{module}")
    # bind every name of that submodule now: importing rscale.api.demo set the package attribute
    # ``demo`` to the submodule, which would otherwise shadow the function api.demo
    for other in _HOME[module]:
        globals()[other] = getattr(home, other)
    return globals()[name]


def __dir__():
    return sorted(set(globals()) | set(__all__))
