"""The public Python API shared by the CLI and notebooks.

Functions take plain values (paths, names, numbers) and return plain values or dataclasses; the
CLI only parses arguments and prints. Grouped by concern:

- :mod:`rscale.api.demo`: simulated benchmarks, truth next to predictions
- :mod:`rscale.api.estimation`: estimate hardness, predict, budget and distractor diagnostics
- :mod:`rscale.api.registry`: register, ls, show, tag, verify, export/import, report, lineage, diff
- :mod:`rscale.api.querying`: the query language answered from the registry, curves
- :mod:`rscale.api.scoring`: descriptor sets, scoring, feature extraction
- :mod:`rscale.api.config`: params.yaml sections and the code version
"""

from __future__ import annotations

from rscale.api.config import code_version, estimator_from_config, load_config  # noqa: F401
from rscale.api.demo import DemoRow, demo, describe_sample_stats, pipeline_demo, simulate_sample_stats  # noqa: F401
from rscale.api.estimation import BUDGET_SIZES, budget_check, distractor_sd, estimate, predict  # noqa: F401
from rscale.api.querying import curve, plot_curve, query  # noqa: F401
from rscale.api.registry import diff, export, import_, lineage, list_versions, register, report, show, tag, verify  # noqa: F401
from rscale.api.scoring import extract, make_descriptor_sets, read_qrels, score  # noqa: F401

__all__ = [
    "DemoRow",
    "demo",
    "pipeline_demo",
    "simulate_sample_stats",
    "describe_sample_stats",
    "estimate",
    "predict",
    "BUDGET_SIZES",
    "budget_check",
    "distractor_sd",
    "code_version",
    "load_config",
    "estimator_from_config",
    "register",
    "list_versions",
    "show",
    "tag",
    "verify",
    "export",
    "import_",
    "report",
    "lineage",
    "diff",
    "query",
    "curve",
    "plot_curve",
    "read_qrels",
    "score",
    "make_descriptor_sets",
    "extract",
]
