"""Working with the hardness registry: register, list, tag, verify, share, report, compare."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from rscale.api.querying import query


def registration_summary(hardness, sample_stats=None, *, tail_fits=None) -> dict:
    """The summary a version is registered with: what its hardness table carries (sizes, rule
    shares, replicates, the sufficient-budget check :func:`rscale.core.budget.budget_check` from
    the stored half-sample replicates, or its ``error`` when the table has none) and, when given
    the sample stats it was estimated from, the share of rejected tails. No estimator fit: the
    interval and the budget check come from what the file stores. Import recomputes it from a
    bundle's verified blobs."""
    from rscale.core.estimators.base import rule_shares
    from rscale.errors import RscaleError
    from rscale.store.hardness_file import read_hardness

    est, info = read_hardness(hardness)
    summary = {"queries": int(est.n_sampled.size), "positives": int(est.x.size),
               "S_min": int(est.n_sampled.min()), "S_max": int(est.n_sampled.max()),
               "rules": {k: round(v, 4) for k, v in rule_shares(est).items()},
               "draws": 0 if est.draws is None else int(est.draws.shape[1]),
               "replicates": 0 if est.replicates is None else int(est.replicates.shape[1])}
    if est.replicates is not None and info["replicates"].get("split_key"):
        summary["split_key"] = info["replicates"]["split_key"]    # versions with one key pair (for A vs B)
    from rscale.core.budget import budget_check
    try:
        summary["budget"] = budget_check(est)
    except RscaleError as exc:  # no replicates stored (rscale.core.budget.NO_REPLICATES): say so, still register
        summary["budget"] = {"error": str(exc)}
    if sample_stats is None:
        return summary
    from rscale.store.sample_stats_file import read_sample_stats
    ss = read_sample_stats(sample_stats)
    from rscale.store.hardness_file import read_tail_fits, tail_path
    tails = tail_path(hardness) if tail_fits is None else Path(tail_fits)
    if est.method in ("evt", "evt-paper") and tails.exists():
        from dataclasses import replace

        from rscale.core.estimators.evt_config import REJECT_LEVEL
        from rscale.core.estimators.rejected_tails import rejected_tails
        _qids, fits = read_tail_fits(tails)
        flagged, _ = rejected_tails(replace(est, tail=fits), ss, REJECT_LEVEL)
        summary["rejected_tails"] = {"level": REJECT_LEVEL, "rejected_share": round(float(flagged.mean()), 4)}
    return summary


GLOB_CHARS = "*?[]"


def check_name(kind: str, name: str, *, flag: str = "") -> str:
    """``name`` if a query can name it, else InvalidArgumentError saying what is allowed.

    The test is the query grammar itself (:func:`rscale.query.grammar.parse`): every name must
    come back from ``... for NAME`` as a plain backbone name, with no glob character (it would
    match other names), so one rule holds for all; a benchmark must also come back from
    ``... on NAME``, a tag from ``... for x@NAME``.
    """
    from rscale.errors import InvalidArgumentError
    from rscale.query.grammar import KEYWORDS, MODES, RERANKED

    if _nameable(kind, name):
        return name
    fix = nameable_form(kind, name)
    hint = f" (e.g. {fix!r}{' with ' + flag if flag else ''})" if fix else ""
    raise InvalidArgumentError(
        f"{kind} name {name!r} cannot be named in a query: use letters, digits and _ . -{hint}; "
        f"no spaces, '/', '@', ',', '=' or glob characters ({' '.join(GLOB_CHARS)}), and not a query word "
        f"({', '.join(KEYWORDS + MODES + (RERANKED, 'vs'))})")


def _nameable(kind: str, text: str) -> bool:
    from rscale.errors import QuerySyntaxError
    from rscale.query.grammar import BackboneRef, parse

    if not text or text != text.strip() or any(c in text for c in GLOB_CHARS):
        return False
    try:
        # one rule for every name: what the grammar reads as a plain backbone name
        if parse(f"R@1 for {text}").backbones != (BackboneRef(text),):
            return False
        if kind == "backbone":
            return True
        if kind == "benchmark":
            return parse(f"R@1 on {text}").benchmark == text
        return parse(f"R@1 for x@{text}").backbones == (BackboneRef("x", text),)
    except QuerySyntaxError:
        return False


def nameable_form(kind: str, text: str) -> str | None:
    """``text`` with every character a name may not hold turned into ``_`` (``ilias v2`` ->
    ``ilias_v2``), when that is a name a query can use (:func:`check_name`); None otherwise."""
    import re
    fix = re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9_.\-]", "_", str(text))).strip("_")
    return fix if fix and _nameable(kind, fix) else None


def register(hardness, sample_stats=None, *, registry=None, backbone=None, benchmark=None, source=None,
             mlflow_run_id=None) -> dict:
    """Register a hardness file (with its tail fits and, optionally, its sample stats). Sample
    stats with rerank scores (schema version 2) also give the version its reranked-law input
    (:func:`rscale.api.rerank.write_reranked_input_for`), which ``... reranked@K'`` queries read."""
    from rscale.store.hardness_file import read_hardness, tail_path
    from rscale.store.registry import Registry

    est, info = read_hardness(hardness)
    meta = info["meta"]
    backbone = check_name("backbone", backbone or meta.get("backbone") or "unnamed", flag="--backbone")
    benchmark = check_name("benchmark", benchmark or meta.get("benchmark") or "unknown", flag="--benchmark")
    from rscale.producers.lineage import code_version
    from rscale.store.run_sidecar import read_run_id
    mlflow_run_id = mlflow_run_id or read_run_id(hardness)
    tail = tail_path(hardness)
    ss = None
    if sample_stats is not None:
        from rscale.api.estimation import check_sample_of
        from rscale.store.sample_stats_file import read_sample_stats
        ss = read_sample_stats(sample_stats)
        check_sample_of(ss, est, info=info, sample_name=sample_stats, hardness_name=hardness)
    summary = registration_summary(hardness, sample_stats)
    if sample_stats is not None:
        summary["sample_mlflow_run_id"] = read_run_id(sample_stats)
    reg = Registry.locate(registry)
    import tempfile
    with tempfile.TemporaryDirectory(prefix="rscale-rerank-") as tmp:
        rerank_file = None
        if ss is not None and ss.has_rerank:
            from rscale.api.rerank import write_reranked_input_for
            rerank_file, summary["rerank"] = write_reranked_input_for(hardness, ss, out=Path(tmp) / "reranked.parquet")
        version, created = reg.register(
            backbone=backbone,
            benchmark=benchmark,
            source=source or meta.get("distractor_source") or "unknown",
            estimator=est.method, hardness_file=hardness, tail_file=tail if tail.exists() else None,
            sample_file=sample_stats, rerank_file=rerank_file, params=est.params, code_version=code_version(),
            mlflow_run_id=mlflow_run_id, summary=summary,
            blob_rows={"hardness": int(est.x.size), "tail": int(est.n_sampled.size),
                       "sample": int(est.n_sampled.size),
                       "rerank": int(est.n_sampled.size) * (1 + summary.get("rerank", {}).get("replicates", 0))})
    return {"ref": version.ref, "created": created, "hardness": version.hardness,
            "registry": str(reg.root), "series": "/".join(version.series),
            **({"reranked": version.summary["rerank"]} if version.rerank else {})}


def list_versions(registry=None) -> list:
    """Every hardness version (rscale.store.catalog.Version), with its tags."""
    from rscale.store.registry import Registry
    return Registry.locate(registry).versions()


def list_registered(registry=None) -> list[dict]:
    """What ``rscale ls`` lists: every hardness version, then every artifact version (``o2i:NAME@vN``),
    each as its fields plus ``kind`` (``hardness``, or the artifact's kind) and ``ref``."""
    from dataclasses import asdict

    from rscale.store.registry import Registry

    reg = Registry.locate(registry)
    versions = reg.versions()                        # refuses a missing registry
    return [{"kind": "hardness", "ref": v.ref, **asdict(v)} for v in versions] + \
        [{"ref": a.ref, **asdict(a)} for a in reg.artifacts()]


def show(name: str, registry=None, *, benchmark=None, estimator=None):
    from rscale.store.artifacts import parse_ref
    from rscale.store.registry import Registry
    if parse_ref(name) is not None:                   # o2i:NAME[@vN]: a registered O2I result
        kind, base, ver = parse_ref(name)
        return Registry.locate(registry).artifact(kind, base, ver, benchmark)
    base, _, ver = name.partition("@")
    return Registry.locate(registry).get(base, ver or None, benchmark=benchmark, estimator=estimator)


def tag(name: str, tag_name: str, *, registry=None, benchmark=None, estimator=None):
    """Point ``tag_name`` at a hardness version (NAME@VERSION) or a registered O2I result
    (o2i:NAME@VERSION); returns the tagged version as it now reads."""
    from rscale.store.artifacts import parse_ref
    from rscale.store.registry import Registry
    check_name("tag", tag_name)
    reg = Registry.locate(registry)
    if parse_ref(name) is not None:                   # o2i:NAME[@vN]: the same tags, keyed by its series
        kind, base, ver = parse_ref(name)
        a = reg.artifact(kind, base, ver, benchmark)
        reg.tag(a, tag_name)
        return reg.artifact(kind, base, f"v{a.version}", a.benchmark)
    base, _, ver = name.partition("@")
    v = reg.get(base, ver or None, benchmark=benchmark, estimator=estimator)
    reg.tag(v, tag_name)
    return reg.get(base, f"v{v.version}", v.benchmark, v.source, v.estimator)


def verify(registry=None) -> dict:
    from rscale.store.registry import Registry
    return Registry.locate(registry).verify()


def export(name: str, out, *, registry=None, benchmark=None, estimator=None, license: str = "unspecified"):
    from rscale.store.artifacts import parse_ref
    from rscale.store.bundle import export_bundle
    from rscale.store.registry import Registry
    if parse_ref(name) is not None:                   # o2i:NAME[@vN]: a registered O2I result
        from rscale.api.o2i_registry import export as export_o2i
        return export_o2i(name, out, registry=registry, benchmark=benchmark, license=license)
    reg = Registry.locate(registry)
    base, _, ver = name.partition("@")
    v = reg.get(base, ver or None, benchmark=benchmark, estimator=estimator)
    for kind in ("hardness", "tail", "sample"):     # refuse before the bundle is started
        if getattr(v, kind):
            reg.existing_blob(getattr(v, kind), f"{v.ref} ({kind})")
    return export_bundle(reg, v, out, license=license), v


def import_(bundle, registry=None):
    """Check a bundle by content (store/bundle.py) and register its version, with the summary
    recomputed from its verified blobs."""
    from rscale.producers.lineage import code_version
    from rscale.store.bundle import import_bundle
    from rscale.store.registry import Registry
    return import_bundle(Registry.locate(registry), bundle, summarize=registration_summary,
                         code_version=code_version(), check_artifact=_check_artifact_blobs,
                         reranked_input=_reranked_input_of)


def _check_artifact_blobs(meta: dict, files: dict):
    """An artifact bundle's content check, by its kind (o2i results, or an rscale rerank output)."""
    if meta.get("kind") == "rerank":
        from rscale.api.rerank_registry import check_bundle_blobs
    else:
        from rscale.api.o2i_registry import check_bundle_blobs
    return check_bundle_blobs(meta, files)


def _reranked_input_of(hardness, sample, out):
    """The reranked input of verified hardness and sample files, or None when the sample has no
    rerank scores (:func:`rscale.api.rerank.write_reranked_input_for`)."""
    from rscale.store.sample_stats_file import read_sample_stats
    ss = read_sample_stats(sample)
    if not ss.has_rerank:
        return None
    from rscale.api.rerank import write_reranked_input_for
    return write_reranked_input_for(hardness, ss, out=out)


def gc(registry=None, *, grace_s: float = 3600.0, dry_run: bool = True) -> dict:
    """Free what killed writers left (orphan blobs, temp files, import folders) older than
    ``grace_s``; a dry run unless ``dry_run=False``. Never a referenced blob."""
    from rscale.store.registry import Registry
    return Registry.locate(registry).gc(grace_s=grace_s, dry_run=dry_run)


def report_rows(registry=None, measures=("mAP@1000",), *, sizes=(1e6, 1e7, 1e8, 1e9), ci_kind: str = "benchmark",
                rerank_depth: int = 1000) -> list[dict]:
    """The rows of :func:`report`: for the latest version of every series, each measure at each
    size, the row ``rscale query`` answers for it (the same interval, its ``ci_kind``), with
    ``stage`` ``first stage``; a version registered with rerank data adds the rows after reranking
    its first-stage top ``rerank_depth`` (``stage`` ``reranked@K'``) at the sizes the stored rerank
    scores reach (the others: a row with ``needs_n`` and no value)."""
    from rscale.query.grammar import format_size
    from rscale.store.registry import Registry

    reg = Registry.locate(registry)
    versions = [v for v in reg.versions() if "latest" in v.tags]
    rows = []
    for m in measures:
        for v in versions:
            ref = f"for {v.backbone}@v{v.version}"
            where = f"on {v.benchmark} using {v.estimator}"
            ans = query(f"{m} at N={','.join(format_size(int(n)) for n in sizes)} {ref} {where}", registry,
                        ci_kind=ci_kind)
            rows += [{**r, "stage": "first stage", "S": v.summary.get("S_max", 0)} for r in ans["rows"]]
            if v.rerank:
                rows += [{**r, "S": v.summary.get("S_max", 0)}
                         for r in _reranked_rows(reg, v, m, sizes, ref, where, rerank_depth, registry, ci_kind)]
    return rows


def report(registry=None, measures=("mAP@1000",), *, sizes=(1e6, 1e7, 1e8, 1e9), ci_kind: str = "benchmark",
           rerank_depth: int = 1000) -> str:
    """A markdown summary of a registry: latest version of every series x measures x sizes
    (:func:`report_rows`). A version registered with rerank data gets a second row, the same
    measure after reranking its first-stage top ``rerank_depth`` (K'), right under its first-stage
    row; a cell whose N the stored rerank scores do not reach at that K' says so."""
    from rscale.query.grammar import format_size
    from rscale.query.measures import Measure
    from rscale.store.registry import Registry

    reg = Registry.locate(registry)
    versions = [v for v in reg.versions() if "latest" in v.tags]
    rows = report_rows(registry, measures, sizes=sizes, ci_kind=ci_kind, rerank_depth=rerank_depth)
    lines = [f"# rscale report: {reg.root}", "", f"Intervals: 95%, ci_kind {ci_kind}.", ""]
    reranked_rows = False
    for m in measures:
        lines += [f"## {m}", "", "| backbone | benchmark | estimator | version | S | stage | "
                  + " | ".join(f"N={format_size(int(n))}" for n in sizes) + " |",
                  "|---|---|---|---|---|---|" + "---|" * len(sizes)]
        measure = str(Measure.parse(m))
        for v in versions:
            head = f"| {v.backbone} | {v.benchmark} | {v.estimator} | v{v.version} | {v.summary.get('S_max', 0):,} |"
            mine = [r for r in rows if r["measure"] == measure and r["backbone"] == v.backbone
                    and r["version"] == f"v{v.version}" and r["benchmark"] == v.benchmark
                    and r["estimator"] == v.estimator]
            for stage in dict.fromkeys(r["stage"] for r in mine):
                reranked_rows |= stage != "first stage"
                lines.append(f"{head} {stage} | " + " | ".join(_report_cell(r) for r in mine if r["stage"] == stage)
                             + " |")
        lines.append("")
    if reranked_rows:
        lines += [f"reranked@{rerank_depth}: the metric after reranking each query's first-stage top {rerank_depth}, "
                  f"predicted from the rerank scores of the sample's top candidates (docs/rerank.md), its interval "
                  f"of ci_kind {ci_kind} too (with the gallery's outranking noise); "
                  "'needs N >= x': the stored scores reach that far only.", ""]
    lines += ["## Estimator diagnostics", "", "| backbone | estimator | queries | positives | rules |", "|---|---|---|---|---|"]
    for v in versions:
        rules = ", ".join(f"{k} {val:.0%}" for k, val in sorted(v.summary.get("rules", {}).items()))
        lines.append(f"| {v.backbone} | {v.estimator} | {v.summary.get('queries')} | {v.summary.get('positives')} | {rules} |")
    from rscale.api.o2i_registry import report_lines
    lines += [""] + report_lines(reg)            # registered O2I results, when there are any
    return "\n".join(lines) + "\n"


def _report_cell(row: dict) -> str:
    if "needs" in row:                       # a reranked cell the stored rerank scores do not reach
        return row["needs"]
    return f"{row['value']:.4f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}]"


def _reranked_rows(reg, v, measure: str, sizes, ref: str, where: str, depth: int, registry, ci_kind: str) -> list:
    """The reranked rows of one version and measure: answered where the stored rerank scores reach
    K' at N, else a row saying what N they need (``needs_n``) or that the cut-off exceeds K'."""
    from rscale.core.rerank_replicates import supported_depth
    from rscale.query.grammar import format_size
    from rscale.query.measures import Measure

    m = Measure.parse(measure)
    stage = f"reranked@{depth}"
    base = {"backbone": v.backbone, "version": f"v{v.version}", "benchmark": v.benchmark, "measure": str(m),
            "estimator": v.estimator, "stage": stage, "reranked": depth, "ci_kind": ci_kind,
            "value": None, "ci_low": None, "ci_high": None}
    if m.k is None or m.k > depth:
        return [{**base, "N": int(n), "needs_n": None, "needs": f"needs a cut-off <= {depth}"} for n in sizes]
    inp, _info = reg.read_reranked(v)
    reach = min(float(s.reach.min()) for s in inp.sets)
    ok = [n for n in sizes if supported_depth(inp, n) >= depth]
    answers = {}
    if ok:
        ans = query(f"{measure} at N={','.join(format_size(int(n)) for n in ok)} {ref} reranked@{depth} {where}",
                    registry, ci_kind=ci_kind)
        answers = {r["N"]: {**r, "stage": stage} for r in ans["rows"]}
    return [answers.get(int(n)) or {**base, "N": int(n), "needs_n": depth / reach, "needs": f"needs N >= {depth / reach:.3g}"}
            for n in sizes]


def lineage(name: str, registry=None, *, benchmark=None, estimator=None) -> dict:
    """What made a version, back to its inputs: estimator, parameters, code, run, input blobs."""
    import pyarrow.parquet as pq

    from rscale.store.artifacts import parse_ref
    from rscale.store.registry import Registry
    if parse_ref(name) is not None:                   # o2i:NAME[@vN]: a registered O2I result
        from rscale.api.o2i_registry import artifact_lineage
        return artifact_lineage(name, registry=registry, benchmark=benchmark)
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


def diff(a: str, b: str, *, registry=None, measure: str = "mAP@1000", n: float = 1e8, top: int = 10,
         benchmark=None, estimator=None, ci_kind: str = "benchmark", bootstrap: int = 1000) -> dict:
    """What changed from version ``a`` to version ``b`` (b - a): the difference of the measure at
    ``n`` with its interval of kind ``ci_kind``, the row ``rscale query "MEASURE at N=n for b vs a"``
    answers (:func:`rscale.api.paired.paired_rows`: paired replicates, the same refusals when the
    two do not pair), plus the queries that changed most and the per-positive hardness ratios."""
    from rscale.api.paired import paired_rows
    from rscale.core.interval import check_ci_kind
    from rscale.query.measures import Measure
    from rscale.store.registry import Registry

    check_ci_kind(ci_kind)
    reg = Registry.locate(registry)
    m = Measure.parse(measure)
    sides = []
    for name in (a, b):
        base, _, ver = name.partition("@")
        v = reg.get(base, ver or None, benchmark=benchmark, estimator=estimator)
        est, info = reg.read_hardness(v)
        sides.append((v, est, info))
    (va, ea, ia), (vb, eb, ib) = sides
    (row,), warnings, ((pb_, pa_),) = paired_rows(reg, (vb, va), cells=[(m, float(n))], ci_kind=ci_kind,
                                                  bootstrap=bootstrap, names=(b, a))
    common = ia["query_ids"]                     # paired_rows: the same queries in the same order
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
    lo, hi = row["ci_low"], row["ci_high"]
    return {
        "a": va.ref + f" [{'/'.join(va.series)}]", "b": vb.ref + f" [{'/'.join(vb.series)}]",
        "measure": str(m), "N": n, "queries_compared": int(common.size),
        "value_a": row["value_b"], "value_b": row["value_a"], "difference": row["value"],
        "ci_low": lo, "ci_high": hi, "ci_kind": ci_kind, "paired": row["paired"],
        "resolved": bool(np.isfinite(lo) and (lo > 0 or hi < 0)),
        "backtest_at_n": row["backtest_at_n"],
        "positives_compared": int(pa_idx.size),
        "median_log10_hardness_ratio": float(np.median(lr[finite])) if finite.any() else None,
        "rule_changed_share": float(np.mean(ra[pa_idx] != rb[pb_idx])) if pa_idx.size else None,
        "largest_query_changes": [{"query_id": str(common[i]), "a": float(pa_[i]), "b": float(pb_[i]),
                                   "delta": float(delta[i])} for i in order],
        "warnings": sorted(set(warnings)),
    }
