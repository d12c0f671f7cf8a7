"""The public Python API shared by the CLI and notebooks.

Functions here take plain values (paths, names, numbers) and return plain values or dataclasses;
the CLI only parses arguments and prints.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from rscale.core import law
from rscale.core.estimators import estimate_count


@dataclass(frozen=True)
class DemoRow:
    backbone: str
    family: str
    n_queries: int
    s: int
    n: float
    truth: float
    truth_at_s: float
    evaluate_at_s: float
    count: float
    true_hardness_expected: float


def demo(backbones=None, n: float = 1e8, fraction: float = 0.05, k: int = 1000,
         n_queries: int | None = None, seed: int = 0) -> list[DemoRow]:
    """Simulate each backbone, sample ``fraction`` of an N-distractor pool, and compare.

    Returns, per backbone: the exact realised mAP@k at N (truth), the metric on the sample alone
    (evaluate-at-S), the count estimator's prediction at N, and the law's expected value on the
    true hardness (what a perfect hardness estimate would predict).
    """
    from dataclasses import replace

    from rscale import sim
    from rscale.sim.presets import PRESETS, preset

    names = list(backbones) if backbones else list(PRESETS)
    s = int(round(fraction * n))
    rows = []
    for name in names:
        spec = preset(name)
        if n_queries:
            spec = replace(spec, n_queries=n_queries)
        bench = sim.simulate(spec, seed=seed)
        ss = sim.sample(bench, s, k=4000, seed=seed)
        count = estimate_count(ss).hardness()
        rows.append(DemoRow(
            backbone=name, family=spec.family, n_queries=spec.n_queries, s=s, n=n,
            truth=float(sim.truth(bench, ss, n, "AP", k, seed=seed).mean()),
            truth_at_s=float(sim.truth(bench, ss, s, "AP", k, seed=seed).mean()),
            evaluate_at_s=law.map_at_k(count, s, k),
            count=law.map_at_k(count, n, k),
            true_hardness_expected=law.map_at_k(bench.hardness, n, k, mode="expected"),
        ))
    return rows


def simulate_sample_stats(backbone: str, out, s: int, k: int = 4000, n_queries: int | None = None,
                          seed: int = 0):
    """Simulate a preset backbone and write the sample stats of an S-distractor sample."""
    from dataclasses import replace

    from rscale import sim
    from rscale.sim.presets import preset
    from rscale.store.sample_stats_file import write_sample_stats

    spec = preset(backbone)
    if n_queries:
        spec = replace(spec, n_queries=n_queries)
    ss = sim.sample(sim.simulate(spec, seed=seed), s, k=k, seed=seed)
    return write_sample_stats(ss, out)


def describe_sample_stats(path) -> dict:
    """Read (and so validate) a sample-stats file; return a small summary."""
    from rscale.store.sample_stats_file import read_sample_stats

    ss = read_sample_stats(path)
    return {
        "queries": ss.n_queries,
        "positives": ss.n_positives,
        "K": ss.k,
        "S": f"{int(ss.n_sampled.min()):,}" + ("" if ss.n_sampled.min() == ss.n_sampled.max()
                                              else f"..{int(ss.n_sampled.max()):,}"),
        **{k: v for k, v in sorted(ss.meta.items()) if k != "k"},
    }


def _parse_param(text: str):
    from rscale.errors import InvalidArgumentError
    if "=" not in text:
        raise InvalidArgumentError(f"estimator parameter {text!r} must look like name=value (e.g. q=0.98)")
    key, raw = text.split("=", 1)
    raw = raw.strip()
    low = raw.lower()
    if low in ("true", "false"):
        return key.strip(), low == "true"
    for cast in (int, float):
        try:
            return key.strip(), cast(raw)
        except ValueError:
            pass
    return key.strip(), raw


def estimate(sample_stats, method: str = "evt", params=(), out=None) -> dict:
    """Estimate hardness from a sample-stats file; write it to ``out`` when given.

    Returns a summary: method, queries, positives, share of positives per rule, median tail
    shape, seconds, files written.
    """
    import time

    from rscale.core.estimators.base import HardnessEstimate
    from rscale.core.estimators.evt import rule_shares
    from rscale.core.estimators.methods import HARDNESS_METHODS
    from rscale.core.estimators.methods import estimate as run
    from rscale.errors import InvalidArgumentError
    from rscale.store.hardness_file import write_hardness
    from rscale.store.sample_stats_file import read_sample_stats

    if method not in HARDNESS_METHODS:
        raise InvalidArgumentError(
            f"'{method}' does not produce per-positive hardness (hardness estimators: "
            f"{', '.join(HARDNESS_METHODS)}); the curve baselines are compared in benchmarks/accuracy.py")
    from pathlib import Path

    from rscale.producers.lineage import digest_file, producer_run
    ss = read_sample_stats(sample_stats)
    kwargs = dict(_parse_param(p) for p in params)
    with producer_run("estimate", {"method": method, **kwargs}, {"sample_stats": digest_file(sample_stats)},
                      enabled=out is not None) as record:
        t = time.perf_counter()
        est = run(ss, method, **kwargs)
        secs = time.perf_counter() - t
        assert isinstance(est, HardnessEstimate)
        written = [str(p) for p in write_hardness(est, ss, out)] if out else []
        if written:
            from rscale.producers.lineage import write_run_sidecar
            write_run_sidecar(written[0], "estimate", record.run_id)
        for p in written:
            record.output(Path(p).name, digest_file(p))
        record.metric("seconds", secs)
    summary = {"method": est.method, "queries": ss.n_queries, "positives": ss.n_positives,
               "rules": {k: round(v, 4) for k, v in rule_shares(est).items()}, "seconds": round(secs, 3),
               "written": written}
    if "xi" in est.tail:
        summary["median_tail_shape_xi"] = round(float(np.median(est.tail["xi"])), 4)
    return summary


def predict(hardness, measures=("mAP@1000",), sizes=(1e8,), mode: str | None = None,
            level: float = 0.95, bootstrap: int = 1000, seed: int = 0) -> list[dict]:
    """Predicted metric values with query-bootstrap CIs from a hardness file."""
    from rscale.core.prediction import predict_per_query, resolve_mode
    from rscale.core.uncertainty import bootstrap_indices, percentile_ci, query_bootstrap
    from rscale.query.measures import Measure
    from rscale.store.hardness_file import read_hardness

    est, info = read_hardness(hardness)
    idx = bootstrap_indices(est.n_sampled.size, bootstrap, seed)
    s_max = float(est.n_sampled.max())
    rows = []
    for m in measures:
        measure = m if isinstance(m, Measure) else Measure.parse(m)
        for n in sizes:
            pq = predict_per_query(est, measure.law_metric, n, measure.k, mode)
            lo, hi = percentile_ci(query_bootstrap(pq, idx=idx), level)
            rows.append({"measure": str(measure), "N": float(n), "value": float(pq.mean()),
                         "ci_low": float(lo), "ci_high": float(hi), "level": level,
                         "estimator": est.method, "mode": resolve_mode(measure.law_metric, mode),
                         "extrapolation": float(n) / s_max,
                         "backbone": info["meta"].get("backbone", ""), "queries": int(est.n_sampled.size)})
    return rows


# ---------------------------------------------------------------------------------------------
# Registry


def code_version() -> str:
    """rscale's version plus the git commit of the working directory when there is one."""
    import subprocess

    from rscale import __version__
    try:
        commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                                timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit, dirty = "", ""
    return f"rscale {__version__}" + (f" git {commit}{'+dirty' if dirty else ''}" if commit else "")


def register(hardness, sample_stats=None, registry=None, backbone=None, benchmark=None, source=None,
             mlflow_run_id=None) -> dict:
    """Register a hardness file (with its tail fits and, optionally, its sample stats)."""
    from rscale.core.estimators.evt import rule_shares
    from rscale.store.hardness_file import read_hardness, tail_path
    from rscale.store.registry import Registry

    est, info = read_hardness(hardness)
    meta = info["meta"]
    from rscale.producers.lineage import read_run_id
    mlflow_run_id = mlflow_run_id or read_run_id(hardness)
    tail = tail_path(hardness)
    summary = {"queries": int(est.n_sampled.size), "positives": int(est.x.size),
               "S_min": int(est.n_sampled.min()), "S_max": int(est.n_sampled.max()),
               "rules": {k: round(v, 4) for k, v in rule_shares(est).items()},
               "draws": 0 if est.draws is None else int(est.draws.shape[1])}
    if sample_stats is not None:
        summary["sample_mlflow_run_id"] = read_run_id(sample_stats)
        from rscale.errors import RscaleError
        try:
            summary["budget"] = budget_check(sample_stats, est.method, est.params)
        except RscaleError as exc:  # a sample too small to halve three times: say so, still register
            summary["budget"] = {"error": str(exc)}
        if est.method == "evt":
            from dataclasses import fields as dc_fields

            from rscale.core.estimators.evt import EVTConfig
            from rscale.core.estimators.sensitivity import sensitivity_range
            from rscale.store.sample_stats_file import read_sample_stats
            known = {f.name for f in dc_fields(EVTConfig)}
            base = {k: v for k, v in est.params.items() if k in known and k not in ("q", "count_test")}
            lo, hi = sensitivity_range(read_sample_stats(sample_stats), "AP", BUDGET_SIZES, 1000, base)
            summary["sensitivity"] = {"measure": "mAP@1000", "N": list(BUDGET_SIZES),
                                      "low": [round(float(v), 5) for v in lo], "high": [round(float(v), 5) for v in hi]}
        try:
            summary["distractor_sd"] = distractor_sd(sample_stats, est.method, est.params)
        except RscaleError as exc:
            summary["distractor_sd"] = {"error": str(exc)}
    reg = Registry.locate(registry)
    version, created = reg.register(
        backbone=backbone or meta.get("backbone") or "unnamed",
        benchmark=benchmark or meta.get("benchmark") or "unknown",
        source=source or meta.get("distractor_source") or "unknown",
        estimator=est.method, hardness_file=hardness, tail_file=tail if tail.exists() else None,
        sample_file=sample_stats, params=est.params, code_version=code_version(),
        mlflow_run_id=mlflow_run_id, summary=summary,
        blob_rows={"hardness": int(est.x.size), "tail": int(est.n_sampled.size),
                   "sample": int(est.n_sampled.size)})
    return {"ref": version.ref, "created": created, "hardness": version.hardness,
            "registry": str(reg.root), "series": "/".join(version.series)}


def list_versions(registry=None) -> list:
    from rscale.store.registry import Registry
    return Registry.locate(registry).versions()


def show(name: str, registry=None, benchmark=None, estimator=None):
    from rscale.store.registry import Registry
    base, _, ver = name.partition("@")
    return Registry.locate(registry).get(base, ver or None, benchmark=benchmark, estimator=estimator)


def tag(name: str, tag_name: str, registry=None, benchmark=None, estimator=None):
    from rscale.store.registry import Registry
    reg = Registry.locate(registry)
    base, _, ver = name.partition("@")
    v = reg.get(base, ver or None, benchmark=benchmark, estimator=estimator)
    reg.tag(v, tag_name)
    return reg.get(base, f"v{v.version}", v.benchmark, v.source, v.estimator)


def verify(registry=None) -> dict:
    from rscale.store.registry import Registry
    return Registry.locate(registry).verify()


def query(text: str, registry=None, bootstrap: int = 1000, seed: int = 0, level: float = 0.95) -> dict:
    """Answer a query from stored hardness: rows of predictions with CIs, plus warnings."""
    from rscale.core.prediction import predict_per_query, resolve_mode
    from rscale.core.uncertainty import bootstrap_indices, paired_difference, percentile_ci, query_bootstrap
    from rscale.errors import QuerySyntaxError
    from rscale.query.grammar import parse
    from rscale.store.hardness_file import read_hardness
    from rscale.store.registry import Registry

    q = parse(text)
    if not q.sizes:
        raise QuerySyntaxError(f"say at which gallery size: add 'at N=1e8' (query: {q})")
    if not q.backbones:
        raise QuerySyntaxError(f"say for which backbones: add 'for NAME' or 'for *' (query: {q})")
    reg = Registry.locate(registry)
    estimator = q.estimator or "evt"
    versions = []
    for ref in q.backbones:
        versions += reg.resolve(ref.name, ref.version, benchmark=q.benchmark, estimator=estimator)
    rows, warnings, per_query = [], [], {}
    for v in versions:
        est, info = read_hardness(reg.existing_blob(v.hardness, v.ref))
        idx = bootstrap_indices(est.n_sampled.size, bootstrap, seed) if bootstrap else None
        s_max = float(est.n_sampled.max())
        for m in q.measures:
            for n in q.sizes:
                pq = predict_per_query(est, m.law_metric, n, m.k, q.mode)
                lo, hi = percentile_ci(query_bootstrap(pq, idx=idx), level) if bootstrap else (np.nan, np.nan)
                lo, hi = _nested_ci(v.summary.get("distractor_sd"), str(m), n, float(pq.mean()), float(lo), float(hi))
                per_query[(v.ref, str(m), n)] = (info["query_ids"], pq)
                r_lo, r_hi = _with_sensitivity(v.summary.get("sensitivity"), str(m), n, float(lo), float(hi))
                rows.append({"backbone": v.backbone, "version": f"v{v.version}", "benchmark": v.benchmark,
                             "measure": str(m), "N": n, "value": float(pq.mean()), "ci_low": float(lo),
                             "ci_high": float(hi), "range_low": r_lo, "range_high": r_hi, "estimator": v.estimator,
                             "mode": resolve_mode(m.law_metric, q.mode),
                             "extrapolation": n / s_max})
    # ranking resolution between backbones evaluated on the same queries
    for m in q.measures:
        for n in q.sizes:
            group = sorted((r for r in rows if r["measure"] == str(m) and r["N"] == n), key=lambda r: -r["value"])
            for a, b in zip(group, group[1:]):
                qa, va = per_query[(f"{a['backbone']}@{a['version']}", str(m), n)]
                qb, vb = per_query[(f"{b['backbone']}@{b['version']}", str(m), n)]
                if not bootstrap or qa.shape != qb.shape or not (qa == qb).all():
                    continue
                d = paired_difference(va, vb, bootstrap, seed, level)
                if not d.resolved:
                    warnings.append(f"{m} at N={n:g}: {a['backbone']} vs {b['backbone']} differ by {d.value:+.4f}, "
                                    f"within resolution ({level:.0%} CI {d.lo:+.4f}..{d.hi:+.4f}): not ranked")
    for v in versions:
        budget = v.summary.get("budget")
        if not budget or "error" in budget:
            continue
        for r in rows:
            if r["backbone"] != v.backbone or r["version"] != f"v{v.version}" or not r["measure"].startswith("mAP"):
                continue
            above = [i for i, bn in enumerate(budget["N"]) if bn >= r["N"]]
            if above and not budget["sufficient"][above[0]]:
                i = above[0]
                warnings.append(
                    f"{v.backbone}: the sample (S={budget['S']:,}) does not support N={r['N']:g}: halving it moves "
                    f"{budget['measure']} at N={budget['N'][i]:g} by {budget['last_step'][i]:+.4f}, more than "
                    f"query-sampling noise ({budget['noise'][i]:.4f})")
    for r in rows:
        if r["extrapolation"] > 1000:
            warnings.append(f"{r['backbone']}: N={r['N']:g} is {r['extrapolation']:.0f}x the sample; "
                            "predictions this far out are not validated")
    return {"query": str(q), "rows": rows, "warnings": sorted(set(warnings))}


def export(name: str, out, registry=None, benchmark=None, estimator=None, license: str = "unspecified"):
    from rscale.store.bundle import export_bundle
    from rscale.store.registry import Registry
    reg = Registry.locate(registry)
    base, _, ver = name.partition("@")
    v = reg.get(base, ver or None, benchmark=benchmark, estimator=estimator)
    return export_bundle(reg, v, out, license=license), v


def import_(bundle, registry=None):
    from rscale.store.bundle import import_bundle
    from rscale.store.registry import Registry
    return import_bundle(Registry.locate(registry), bundle)


def load_config(path, section: str) -> dict:
    """One section of a params.yaml-style file (e.g. ``estimate``), as a dict."""
    import yaml

    from rscale.errors import FormatError
    try:
        with open(path) as f:
            data = yaml.safe_load(f) or {}
    except FileNotFoundError:
        raise FormatError("file not found", path=str(path)) from None
    except yaml.YAMLError as exc:
        raise FormatError(f"not valid YAML ({exc})", path=str(path)) from None
    if section not in data or not isinstance(data[section], dict):
        raise FormatError(f"no '{section}:' section", path=str(path),
                          hint=f"add a mapping under '{section}:' (see params.yaml)")
    return dict(data[section])


def estimator_from_config(path) -> tuple[str, list[str]]:
    """(method, ['name=value', ...]) from the ``estimate:`` section of a config file.

    The section names the method and may hold one sub-mapping of parameters per method
    (``evt: {q: 0.95}``); only the chosen method's parameters are used, so switching the method
    in an experiment needs no other change.
    """
    cfg = load_config(path, "estimate")
    method = str(cfg.get("method", "evt"))
    params = cfg.get(method) or {}
    if not isinstance(params, dict):
        from rscale.errors import FormatError
        raise FormatError(f"'estimate.{method}' must be a mapping of parameters", path=str(path))
    return method, [f"{k}={v}" for k, v in sorted(params.items())]


def report(registry=None, measures=("mAP@1000",), sizes=(1e6, 1e7, 1e8, 1e9)) -> str:
    """A markdown summary of a registry: latest version of every series x measures x sizes."""
    from rscale.query.grammar import format_size
    from rscale.store.registry import Registry

    reg = Registry.locate(registry)
    versions = [v for v in reg.versions() if "latest" in v.tags]
    lines = [f"# rscale report: {reg.root}", ""]
    for m in measures:
        lines += [f"## {m}", "", "| backbone | benchmark | estimator | version | S | "
                  + " | ".join(f"N={format_size(int(n))}" for n in sizes) + " |",
                  "|---|---|---|---|---|" + "---|" * len(sizes)]
        for v in versions:
            ans = query(f"{m} at N={','.join(format_size(int(n)) for n in sizes)} for {v.backbone}@v{v.version} "
                        f"on {v.benchmark} using {v.estimator}", registry, bootstrap=200)
            cells = [f"{r['value']:.4f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]" for r in ans["rows"]]
            lines.append(f"| {v.backbone} | {v.benchmark} | {v.estimator} | v{v.version} | "
                         f"{v.summary.get('S_max', 0):,} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["## Estimator diagnostics", "", "| backbone | estimator | queries | positives | rules |", "|---|---|---|---|---|"]
    for v in versions:
        rules = ", ".join(f"{k} {val:.0%}" for k, val in sorted(v.summary.get("rules", {}).items()))
        lines.append(f"| {v.backbone} | {v.estimator} | {v.summary.get('queries')} | {v.summary.get('positives')} | {rules} |")
    return "\n".join(lines) + "\n"


def pipeline_demo(config="params.yaml", registry=None) -> list[dict]:
    """After `dvc repro`: every configured backbone's registry answer next to simulated truth.

    The truth is recomputed by the simulator from the same preset, sample size and seed the
    pipeline's sample stage used (it is deterministic), at the ``report.n`` gallery size.
    """
    from dataclasses import replace

    from rscale import sim
    from rscale.sim.presets import preset

    import yaml
    with open(config) as f:
        cfg = yaml.safe_load(f)
    samp, n = cfg["sample"], float(cfg.get("report", {}).get("n", 1e8))
    rows = []
    for name in cfg["backbones"]:
        spec = replace(preset(name), n_queries=int(samp["queries"]))
        bench = sim.simulate(spec, seed=int(samp["seed"]))
        ss = sim.sample(bench, int(samp["s"]), k=int(samp["k"]), seed=int(samp["seed"]))
        truth = float(sim.truth(bench, ss, n, "AP", 1000, seed=int(samp["seed"])).mean())
        ans = query(f"mAP@1000 at N={int(n)} for {name}", registry)
        r = ans["rows"][0]
        count_h = estimate_count(ss).hardness()
        at_s = float(law.map_at_k(count_h, float(samp["s"]), 1000))
        rows.append({"backbone": name, "query": ans["query"], "version": r["version"], "truth": truth,
                     "predicted": r["value"], "ci_low": r["ci_low"], "ci_high": r["ci_high"],
                     "evaluate_at_s": at_s, "count": float(law.map_at_k(count_h, n, 1000)),
                     "estimator": r["estimator"], "S": int(samp["s"]), "N": n,
                     "truth_kind": "simulated, exact"})
    # descriptor backbones: the truth is the exact full-pool evaluation by the same scoring engine
    import tempfile
    from pathlib import Path
    from rscale.store.sample_stats_file import read_sample_stats
    desc = cfg.get("descriptors", {})
    for name in cfg.get("descriptor_backbones", []) or []:
        base = Path("out/descriptors") / name
        if not (base / "distractors" / "manifest.json").exists():
            continue
        with tempfile.TemporaryDirectory() as tmp:
            full = score(base / "queries", base / "positives", base / "qrels.parquet", base / "distractors",
                         Path(tmp) / "full.parquet", fraction=1.0, k=10, lineage=False)
            ss_full = read_sample_stats(Path(tmp) / "full.parquet")
        pool = float(full["S"])
        truth = float(law.map_at_k(law.Hardness.from_counts(ss_full.pos_counts, ss_full.pos_offsets, pool), pool, 1000))
        ans = query(f"mAP@1000 at N={int(pool)} for {name}", registry)
        r = ans["rows"][0]
        sampled = read_sample_stats(Path("out/sample_stats") / f"{name}.parquet")
        s_size = float(sampled.n_sampled.max())
        count_h = estimate_count(sampled).hardness()
        at_s = float(law.map_at_k(count_h, s_size, 1000))
        rows.append({"backbone": name, "query": ans["query"], "version": r["version"], "truth": truth,
                     "predicted": r["value"], "ci_low": r["ci_low"], "ci_high": r["ci_high"],
                     "evaluate_at_s": at_s, "count": float(law.map_at_k(count_h, pool, 1000)),
                     "estimator": r["estimator"], "S": int(s_size), "N": pool,
                     "truth_kind": "full-pool evaluation"})
    return rows


def lineage(name: str, registry=None, benchmark=None, estimator=None) -> dict:
    """What made a version, back to its inputs: estimator, parameters, code, run, input blobs."""
    import pyarrow.parquet as pq

    from rscale.store.registry import Registry
    reg = Registry.locate(registry)
    base, _, ver = name.partition("@")
    v = reg.get(base, ver or None, benchmark=benchmark, estimator=estimator)
    out = {"ref": v.ref, "series": dict(zip(("backbone", "benchmark", "source", "estimator"), v.series)),
           "lineage": v.lineage, "estimator": v.estimator, "params": v.params, "code_version": v.code_version,
           "mlflow_run_id": v.mlflow_run_id, "created": v.created, "outputs": {}, "inputs": {}}
    for kind in ("hardness", "tail", "sample"):
        digest = getattr(v, kind)
        if not digest:
            continue
        entry = {"digest": digest, "path": str(reg.blob_path(digest))}
        if reg.blob_path(digest).exists():
            md = {k.decode(): val.decode() for k, val in (pq.read_schema(reg.blob_path(digest)).metadata or {}).items()}
            if "rscale.meta" in md:
                entry["meta"] = json.loads(md["rscale.meta"])
        else:
            entry["missing"] = True
        (out["inputs"] if kind == "sample" else out["outputs"])[kind] = entry
    if v.summary.get("sample_mlflow_run_id"):
        out["inputs"].setdefault("sample", {})["mlflow_run_id"] = v.summary["sample_mlflow_run_id"]
    if not v.sample:
        out["inputs"]["note"] = "registered without its sample stats (rscale register --sample records them)"
    return out


def diff(a: str, b: str, registry=None, measure: str = "mAP@1000", n: float = 1e8, top: int = 10,
         benchmark=None, estimator=None) -> dict:
    """Per-query metric and per-positive hardness differences between two versions (b - a)."""
    from rscale.core.prediction import predict_per_query
    from rscale.core.uncertainty import paired_difference
    from rscale.errors import InvalidArgumentError
    from rscale.query.measures import Measure
    from rscale.store.hardness_file import read_hardness
    from rscale.store.registry import Registry

    reg = Registry.locate(registry)
    m = Measure.parse(measure)
    sides = []
    for name in (a, b):
        base, _, ver = name.partition("@")
        v = reg.get(base, ver or None, benchmark=benchmark, estimator=estimator)
        est, info = read_hardness(reg.existing_blob(v.hardness, v.ref))
        sides.append((v, est, info))
    (va, ea, ia), (vb, eb, ib) = sides
    qa, qb = ia["query_ids"], ib["query_ids"]
    common, ia_idx, ib_idx = np.intersect1d(qa, qb, return_indices=True)
    if common.size < 2:
        raise InvalidArgumentError(f"{va.ref} and {vb.ref} share {common.size} queries; a diff needs the same queries")
    pa_ = predict_per_query(ea, m.law_metric, n, m.k)[ia_idx]
    pb_ = predict_per_query(eb, m.law_metric, n, m.k)[ib_idx]
    d = paired_difference(pb_, pa_)
    delta = pb_ - pa_
    order = np.argsort(-np.abs(delta))[:top]
    # per-positive hardness, aligned by (query, positive) ids
    def keyed(est, info):
        qid = np.repeat(info["query_ids"], np.diff(est.offsets))
        pid = np.asarray(info["positive_ids"].to_pylist(), dtype=str)
        return np.char.add(np.char.add(qid.astype(str), "\x00"), pid), est.x, est.rule
    ka, xa, ra = keyed(ea, ia)
    kb, xb, rb = keyed(eb, ib)
    _, pa_idx, pb_idx = np.intersect1d(ka, kb, return_indices=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        lr = np.log10(xb[pb_idx] / xa[pa_idx])
    finite = np.isfinite(lr)
    return {
        "a": va.ref + f" [{'/'.join(va.series)}]", "b": vb.ref + f" [{'/'.join(vb.series)}]",
        "measure": str(m), "N": n, "queries_compared": int(common.size),
        "value_a": float(pa_.mean()), "value_b": float(pb_.mean()), "difference": d.value,
        "ci_low": d.lo, "ci_high": d.hi, "resolved": d.resolved,
        "positives_compared": int(pa_idx.size),
        "median_log10_hardness_ratio": float(np.median(lr[finite])) if finite.any() else None,
        "rule_changed_share": float(np.mean(ra[pa_idx] != rb[pb_idx])) if pa_idx.size else None,
        "largest_query_changes": [{"query_id": str(common[i]), "a": float(pa_[i]), "b": float(pb_[i]),
                                   "delta": float(delta[i])} for i in order],
    }


BUDGET_SIZES = tuple(10.0 ** e for e in range(5, 11))


def distractor_sd(sample_stats, method: str, params: dict, measure: str = "mAP@1000", sizes=BUDGET_SIZES,
                  splits: int = 3) -> dict:
    """The distractor-sampling-plus-fit term of a prediction's uncertainty (the nested bootstrap).

    The sample is split into two disjoint halves ``splits`` times; each half is re-estimated and
    predicts the measure; the spread of the prediction from the whole sample follows from the
    half-sample differences (:func:`rscale.core.uncertainty.distractor_spread`).
    """
    from dataclasses import fields as dc_fields

    from rscale.core.estimators.evt import EVTConfig
    from rscale.core.estimators.methods import estimate as run
    from rscale.core.prediction import predict_per_query
    from rscale.core.subsample import split_halves
    from rscale.core.uncertainty import distractor_spread
    from rscale.query.measures import Measure
    from rscale.store.sample_stats_file import read_sample_stats

    ss = read_sample_stats(sample_stats) if not hasattr(sample_stats, "top_scores") else sample_stats
    m = Measure.parse(measure)
    kwargs = {}
    if method == "evt":
        known = {f.name for f in dc_fields(EVTConfig)}
        kwargs = {k: v for k, v in params.items() if k in known}
    preds = []                                                   # (splits*2, len(sizes))
    for i in range(splits):
        for half in split_halves(ss, seed=100 + i):
            e = run(half, method, **kwargs)
            preds.append([predict_per_query(e, m.law_metric, n, m.k).mean() for n in sizes])
    preds = np.asarray(preds)
    sd = [distractor_spread(preds[:, j]) for j in range(len(sizes))]
    return {"measure": str(m), "N": list(sizes), "sd": [round(float(v), 5) for v in sd], "splits": splits}


def _nested_ci(dsd, measure: str, n: float, value: float, lo: float, hi: float):
    """Widen a query CI by the distractor-sampling term, combined in quadrature on each side."""
    if not dsd or "error" in dsd or dsd.get("measure") != measure or np.isnan(lo):
        return lo, hi
    x = np.log10(np.asarray(dsd["N"], dtype=float))
    if not x[0] <= np.log10(n) <= x[-1]:
        return lo, hi
    extra = 1.96 * float(np.interp(np.log10(n), x, dsd["sd"]))
    return value - float(np.hypot(value - lo, extra)), value + float(np.hypot(hi - value, extra))


def _with_sensitivity(sens, measure: str, n: float, lo: float, hi: float):
    """The union of a CI and the stored estimator-sensitivity band (log-N interpolated), when the
    version has one for this measure; else the CI itself."""
    if not sens or sens.get("measure") != measure or np.isnan(lo):
        return lo, hi
    x = np.log10(np.asarray(sens["N"], dtype=float))
    if not x[0] <= np.log10(n) <= x[-1]:
        return lo, hi
    band_lo = float(np.interp(np.log10(n), x, sens["low"]))
    band_hi = float(np.interp(np.log10(n), x, sens["high"]))
    return min(lo, band_lo), max(hi, band_hi)


def budget_check(sample_stats, method: str, params: dict, measure: str = "mAP@1000",
                 sizes=BUDGET_SIZES, seed: int = 0) -> dict:
    """The sufficient-budget diagnostic of a sample, for the gallery sizes in ``sizes``.

    Re-estimates hardness on nested sub-samples S/8, S/4, S/2 (derived from the sample stats)
    and predicts ``measure`` from each; N is supported when the last doubling (S/2 -> S) moves the
    prediction by less than query-sampling noise and less than 0.01. The sub-samples keep only the
    matching share of the top-K list, so their tail fits see fewer excesses than a real run at that
    size would: the check errs on the side of warning.
    """
    from dataclasses import fields as dc_fields

    from rscale.core.estimators.evt import EVTConfig
    from rscale.core.estimators.methods import estimate as run
    from rscale.core.prediction import predict_per_query
    from rscale.core.subsample import subsample
    from rscale.core.uncertainty import sufficient_budget
    from rscale.query.measures import Measure
    from rscale.store.sample_stats_file import read_sample_stats

    ss = read_sample_stats(sample_stats) if not hasattr(sample_stats, "top_scores") else sample_stats
    m = Measure.parse(measure)
    kwargs = {}
    if method == "evt":
        known = {f.name for f in dc_fields(EVTConfig)}
        kwargs = {k: v for k, v in params.items() if k in known}
    chain = [ss]
    for i in range(3):
        chain.append(subsample(chain[-1], 0.5, seed=seed + i))
    chain = chain[::-1]                                   # S/8, S/4, S/2, S
    fractions = [0.125, 0.25, 0.5, 1.0]
    ests = [run(sub, method, **kwargs) for sub in chain]
    out = {"measure": str(m), "fractions": fractions, "S": int(ss.n_sampled.max()), "N": [], "predictions": [],
           "last_step": [], "last_step_ci": [], "sufficient": []}
    for n in sizes:
        per = [predict_per_query(e, m.law_metric, n, m.k) for e in ests]
        check = sufficient_budget(per, fractions, seed=seed, b=500)
        out["N"].append(float(n))
        out["predictions"].append([round(float(p), 5) for p in check.predictions])
        out["last_step"].append(round(check.last_step.value, 5))
        out["last_step_ci"].append([round(check.last_step.lo, 5), round(check.last_step.hi, 5)])
        out["sufficient"].append(bool(check.sufficient))
        out.setdefault("noise", []).append(round(check.noise, 5))
    ok = [n for n, good in zip(out["N"], out["sufficient"]) if good]
    out["supported_up_to"] = max(ok) if ok and out["sufficient"][0] else None
    return out


def curve(text: str, n_range: str = "1e5..1e9", points: int = 25, registry=None, bootstrap: int = 300,
          seed: int = 0) -> dict:
    """Metric vs N for every backbone of a query (no sizes in it): values, CI band, sampled points.

    The sampled points are exact measurements: the realised metric of the sample itself (N = S,
    plug-in on c / S) and, when the version has its sample stats, of nested sub-samples S/8..S/2.
    """
    from rscale.core import law as law_
    from rscale.core.prediction import predict_per_query
    from rscale.core.subsample import subsample
    from rscale.core.uncertainty import bootstrap_indices, percentile_ci, query_bootstrap
    from rscale.errors import InvalidArgumentError, QuerySyntaxError
    from rscale.query.grammar import parse, parse_size
    from rscale.store.hardness_file import read_hardness
    from rscale.store.registry import Registry
    from rscale.store.sample_stats_file import read_sample_stats

    q = parse(text)
    if q.sizes:
        raise QuerySyntaxError(f"a curve query names no sizes (use --n for the range): {q}")
    if not q.backbones:
        raise QuerySyntaxError(f"say for which backbones: add 'for NAME' (query: {q})")
    try:
        lo_s, hi_s = (parse_size(p) for p in n_range.split(".."))
    except ValueError:
        raise InvalidArgumentError(f"cannot read the range {n_range!r}; write e.g. 1e5..1e9") from None
    if hi_s <= lo_s:
        raise InvalidArgumentError(f"the range {n_range!r} must go from small to large")
    ns = np.unique(np.round(np.geomspace(lo_s, hi_s, points)))
    reg = Registry.locate(registry)
    versions = []
    for ref in q.backbones:
        versions += reg.resolve(ref.name, ref.version, benchmark=q.benchmark, estimator=q.estimator or "evt")
    series = []
    for v in versions:
        est, info = read_hardness(reg.existing_blob(v.hardness, v.ref))
        idx = bootstrap_indices(est.n_sampled.size, bootstrap, seed)
        for m in q.measures:
            vals, los, his = [], [], []
            for n in ns:
                pq = predict_per_query(est, m.law_metric, float(n), m.k, q.mode)
                lo, hi = percentile_ci(query_bootstrap(pq, idx=idx))
                vals.append(float(pq.mean()))
                los.append(float(lo))
                his.append(float(hi))
            sampled = []
            s = float(est.n_sampled.max())
            realised = law_.Hardness.from_flat(info["counts"] / np.repeat(est.n_sampled, np.diff(est.offsets)),
                                               est.offsets)
            sampled.append((s, float(law_.per_query(realised, m.law_metric, s, m.k, "plugin").mean())))
            if v.sample and reg.blob_path(v.sample).exists():
                cur = read_sample_stats(reg.blob_path(v.sample))
                for i in range(3):
                    cur = subsample(cur, 0.5, seed=seed + i)
                    size = float(cur.n_sampled.mean())
                    h = law_.Hardness.from_flat(cur.pos_counts / cur.n_sampled[cur.positive_query()], cur.pos_offsets)
                    sampled.append((size, float(law_.per_query(h, m.law_metric, size, m.k, "plugin").mean())))
            series.append({"backbone": v.backbone, "version": f"v{v.version}", "measure": str(m),
                           "N": ns.tolist(), "value": vals, "ci_low": los, "ci_high": his,
                           "sampled": sorted(sampled)})
    return {"query": str(q), "series": series}


def plot_curve(data: dict, out) -> str:
    """Draw a curve() result to an image file (matplotlib, the 'plot' extra)."""
    from rscale.errors import MissingExtraError
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingExtraError("matplotlib", "plot") from None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, s in enumerate(data["series"]):
        color = f"C{i}"
        label = f"{s['backbone']}@{s['version']} {s['measure']}"
        ax.plot(s["N"], s["value"], color=color, label=label)
        ax.fill_between(s["N"], s["ci_low"], s["ci_high"], color=color, alpha=0.2, linewidth=0)
        if s["sampled"]:
            xs, ys = zip(*s["sampled"])
            ax.scatter(xs, ys, color=color, marker="o", s=18, zorder=3)
    ax.set_xscale("log")
    ax.set_xlabel("gallery size N (distractors)")
    ax.set_ylabel("metric (band: 95% query CI; dots: measured)")
    ax.set_title(data["query"], fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return str(out)


# ---------------------------------------------------------------------------------------------
# Scoring: descriptors -> sample stats


def read_qrels(path) -> dict:
    """query_id -> list of positive ids, from a Parquet (or CSV) file with those two columns."""
    from rscale.errors import FormatError
    path = str(path)
    try:
        if path.endswith(".csv"):
            import pyarrow.csv as pcsv
            table = pcsv.read_csv(path)
        else:
            import pyarrow.parquet as pq
            table = pq.read_table(path)
    except Exception as exc:
        raise FormatError(f"cannot read qrels ({type(exc).__name__}: {exc})", path=path) from None
    for col in ("query_id", "positive_id"):
        if col not in table.column_names:
            raise FormatError(f"missing column '{col}'", path=path, hint="qrels have columns query_id, positive_id")
    out: dict = {}
    for q, p in zip(table.column("query_id").to_pylist(), table.column("positive_id").to_pylist()):
        out.setdefault(str(q), []).append(str(p))
    return out


def score(queries_dir, positives_dir, qrels, distractors_dir, out, fraction: float = 1.0, seed: int = 0,
          k: int = 4000, backend: str = "numpy", chunk: int = 16384, meta: dict | None = None,
          lineage: bool = True) -> dict:
    """Score a hash-sampled share of a distractor set against the queries; write sample stats.

    ``fraction`` 1.0 scores the whole pool (the exact full-gallery evaluation); below 1 it scores
    the nested uniform sample {id : hash(seed, id) < fraction}. Shards are scored separately and
    merged, with the shard-to-shard drift check.
    """
    import time

    from rscale.errors import FormatError
    from rscale.score.descriptor_store import DescriptorSet
    from rscale.score.engine import Queries, score_shards
    from rscale.score.sampling import in_sample
    from rscale.store.sample_stats_file import write_sample_stats

    qs, ps, ds = DescriptorSet.open(queries_dir), DescriptorSet.open(positives_dir), DescriptorSet.open(distractors_dir)
    if not (qs.dim == ps.dim == ds.dim):
        raise FormatError(f"descriptor dimensions differ: queries {qs.dim}, positives {ps.dim}, distractors {ds.dim}",
                          path=str(distractors_dir), hint="score sets extracted with the same backbone and pooling")
    rel = read_qrels(qrels)
    q_ids = qs.ids().astype(str)
    q_vec = np.concatenate([np.asarray(v, dtype=np.float32) for _, v in qs.shards()])
    p_ids = ps.ids().astype(str)
    p_vec = np.concatenate([np.asarray(v, dtype=np.float32) for _, v in ps.shards()])
    where = {p: i for i, p in enumerate(p_ids)}
    missing = sorted({p for q in q_ids for p in rel.get(q, []) if p not in where})
    if missing:
        raise FormatError(f"{len(missing)} positive id(s) in the qrels are not in the positive set, e.g. "
                          f"{missing[0]!r}", path=str(qrels))
    queries = Queries.build(q_vec, q_ids, p_vec, p_ids, lambda i: [where[p] for p in rel.get(q_ids[i], [])])
    keep = None if fraction >= 1.0 else (lambda ids: in_sample(ids, fraction, seed))
    shards = list(ds.shards())   # (ids, memory-mapped vectors) per shard: nothing is loaded yet

    def shard_chunks(ids, vectors):
        mask = None if keep is None else keep(ids)
        for a in range(0, len(ids), chunk):
            block = np.asarray(vectors[a:a + chunk], dtype=np.float32)
            yield block if mask is None else block[mask[a:a + chunk]]

    from pathlib import Path

    from rscale.producers.lineage import digest_file, producer_run
    inputs = {"queries": digest_file(Path(queries_dir) / "manifest.json"),
              "positives": digest_file(Path(positives_dir) / "manifest.json"),
              "distractors": digest_file(Path(distractors_dir) / "manifest.json"),
              "qrels": digest_file(qrels)}
    params = {"fraction": fraction, "seed": seed, "k": k, "backend": backend, "chunk": chunk}
    with producer_run("score", params, inputs, enabled=lineage) as run:
        t = time.perf_counter()
        ss, report = score_shards(
            queries, (shard_chunks(i, v) for i, v in shards), k=k, backend=backend,
            meta={**(meta or {}), "backbone": ds.manifest.get("backbone", "unknown"),
                  "distractor_source": ds.manifest.get("source", str(distractors_dir)),
                  "sampler": f"hash(seed={seed}) < {fraction:g}", "seed": str(seed),
                  **{f"input_{name}": d for name, d in inputs.items()},
                  "weights_sha256": ds.manifest.get("weights_sha256", "")})
        secs = time.perf_counter() - t
        write_sample_stats(ss, out)
        run.output("sample_stats", digest_file(out))
        from rscale.producers.lineage import write_run_sidecar
        write_run_sidecar(out, "score", run.run_id)
        run.metric("seconds_scoring", secs)
        run.metric("sampled", float(ss.n_sampled.max()))
    return {"written": str(out), "queries": ss.n_queries, "positives": ss.n_positives,
            "S": int(ss.n_sampled.max()), "K": ss.k, "seconds": round(secs, 2), "backend": backend,
            "drift": None if report is None else report.message(),
            "drifting": None if report is None else report.drifting}


def make_descriptor_sets(out, instances=200, dim=64, positives=4, distractors=200_000, hard_share=0.01,
                         seed=0, backbone="sim_desc", shard_size=65_536, noise=(0.6, 0.6)) -> str:
    """Write simulated query/positive/distractor descriptor sets and their qrels under ``out``."""
    from pathlib import Path

    import pyarrow as pa
    import pyarrow.parquet as pq

    from rscale.score.descriptor_store import write_descriptor_set
    from rscale.sim.descriptors import make_descriptors

    out = Path(out)
    ds = make_descriptors(n_instances=instances, d=dim, positives_per_instance=positives,
                          n_distractors=distractors, hard_share=hard_share, seed=seed,
                          noise=noise[0] if noise[0] == noise[1] else noise)
    meta = {"backbone": backbone, "pooling": "simulated", "resolution": 0, "source": f"sim:descriptors:{seed}"}
    write_descriptor_set(out / "queries", [(ds.query_ids, ds.queries)], role="queries", meta=meta)
    write_descriptor_set(out / "positives", [(ds.positive_ids, ds.positives)], role="positives", meta=meta)
    blocks = ((np.arange(a, min(a + shard_size, distractors)), ds.distractors[a:a + shard_size])
              for a in range(0, distractors, shard_size))
    write_descriptor_set(out / "distractors", blocks, role="distractors", meta=meta, shard_size=shard_size)
    qrels = [(ds.query_ids[q], ds.positive_ids[p]) for q in range(len(ds.query_ids)) for p in ds.positives_of(q)]
    pq.write_table(pa.table({"query_id": [a for a, _ in qrels], "positive_id": [b for _, b in qrels]}),
                   out / "qrels.parquet")
    return f"wrote {out}/queries ({len(ds.query_ids)}), positives ({len(ds.positive_ids)}), " \
           f"distractors ({distractors:,}), qrels.parquet"


def extract(images, model_dir, out, role="distractors", layout="folder", crop=False, pooling="cls",
            resolution=None, batch_size=32, intervention=None, shard_size=4096, progress=True) -> dict:
    """Extract descriptors of a folder / list file of images, or of an ILIAS-layout tree.

    ``layout='ilias'`` writes ``out/queries``, ``out/positives`` and ``out/qrels.parquet``; the
    ``intervention`` (gp, msa) applies to the queries only.
    """
    from pathlib import Path

    from rscale.errors import InvalidArgumentError
    from rscale.producers import extract as ex
    from rscale.producers.interventions import GrayPad, MaskedScales

    interventions = {None: None, "none": None, "gp": GrayPad, "msa": MaskedScales}
    if intervention not in interventions:
        raise InvalidArgumentError(f"unknown intervention {intervention!r}; expected gp, msa or none")
    make = interventions[intervention]
    out = Path(out)
    kw = dict(pooling=pooling, resolution=resolution, batch_size=batch_size, shard_size=shard_size,
              progress=progress)
    if layout == "ilias":
        import pyarrow as pa
        import pyarrow.parquet as pq
        queries, positives, qrels = ex.ilias_layout(images, crop_queries=crop)
        qs = ex.extract(queries, model_dir, out / "queries", role="queries",
                        intervention=make() if make else None, **kw)
        ps = ex.extract(positives, model_dir, out / "positives", role="positives", **kw)
        pq.write_table(pa.table({"query_id": [a for a, _ in qrels], "positive_id": [b for _, b in qrels]}),
                       out / "qrels.parquet")
        return {"queries": qs.count, "positives": ps.count, "qrels": len(qrels), "written": str(out)}
    src = Path(images)
    exts = {".jpg", ".jpeg", ".png", ".webp", ".bmp"}
    if src.is_dir():
        paths = sorted(p for p in src.rglob("*") if p.suffix.lower() in exts)
        items = [(str(p.relative_to(src).with_suffix("")), p, None) for p in paths]
    elif src.is_file():
        paths = [Path(line.strip()) for line in src.read_text().splitlines() if line.strip()]
        items = [(str(p.with_suffix("")), p, None) for p in paths]
    else:
        raise InvalidArgumentError(f"{src} is neither an image folder nor a list file")
    if make and role != "queries":
        raise InvalidArgumentError("interventions apply to queries only (the gallery index is never touched)")
    ds = ex.extract(items, model_dir, out, role=role, intervention=make() if make else None, **kw)
    return {role: ds.count, "written": str(out)}
