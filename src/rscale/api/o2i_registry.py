"""O2I benchmark results in the registry: register a run's tables per backbone, read them back.

An ``rscale o2i run`` output folder holds eight tables for all its backbones. Registration
(:func:`register_o2i`, ``rscale o2i register OUT_DIR`` or ``rscale o2i run --registry DIR``)
first checks the folder completely (an O2I manifest; every table present, hashing to the digest
the manifest records, readable as the table it claims to be; every backbone nameable in a query)
and writes nothing when any check fails. It then stores, per backbone, one *artifact* of kind
``o2i`` (store/artifacts.py) in the series (backbone, benchmark; default ``o2i``): the backbone's
canonical slice of each table (store/o2i_results.py) as content-addressed blobs, with

- ``inputs`` (its lineage record, digested into ``lineage``): the run's code version, the run
  manifest's digest and its table digests, the renderer, renders digest, render protocol and
  count, every asset's digest and licence, the model's weights digest, type, pooling, input size
  and preprocessing;
- ``params``: the run's ``o2i`` parameters with this backbone's entry;
- ``mlflow_run_id``: the run's (its ``manifest.json.run.json`` sidecar), ``code_version``: the
  run's (its manifest's ``code_version``; the registering rscale's for a folder written before
  manifests recorded it), shown by ``rscale show`` / ``lineage`` and in bundles as a hardness
  version's is;
- ``summary``: counts and headline numbers recomputed from the slices (bundles recompute it).

A backbone whose results did not change is a no-op (same content), so adding a backbone to a run
adds one version. :func:`report_lines` renders the registered results for ``rscale report``, from
blobs checked against their digests; :func:`load_compare_operand` lets ``rscale compare`` take
``o2i:NAME[@vN][/CONDITION]``.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from pathlib import Path

import numpy as np

from rscale.errors import FormatError, InvalidArgumentError

KIND = "o2i"
DEFAULT_BENCHMARK = "o2i"
COND_DEFAULT = "baseline"
ALPHA = 0.05


# ---- checking an output folder -------------------------------------------------------------------

def check_o2i_folder(out_dir) -> dict:
    """Everything registration needs from an O2I output folder, checked (FormatError otherwise):
    {"manifest", "manifest_digest", "tables": {name: pyarrow Table}, "backbones", "mlflow_run_id"}."""
    from rscale.api.o2i import SCHEMA_VERSION, read_manifest
    from rscale.api.registry import check_name
    from rscale.store.hashing import sha256_file
    from rscale.store.o2i_results import TABLES, read_result_table
    from rscale.store.run_sidecar import read_run_id

    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        raise FormatError("no such folder: not an O2I output folder", path=str(out_dir),
                          hint="give the folder `rscale o2i run -o FOLDER` wrote")
    man = read_manifest(out_dir)
    mpath = out_dir / "manifest.json"
    if not isinstance(man.get("schema_version"), int) or man["schema_version"] > SCHEMA_VERSION:
        raise FormatError(f"O2I manifest schema version {man.get('schema_version')!r} is not one this rscale reads "
                          f"(<= {SCHEMA_VERSION})", path=str(mpath), hint="upgrade rscale")
    listed = man.get("tables")
    if not isinstance(listed, dict) or not isinstance(man.get("backbones"), dict) or not man["backbones"]:
        raise FormatError("the manifest lists no tables or no backbones", path=str(mpath),
                          hint="re-run `rscale o2i run`")
    missing = sorted(set(TABLES) - set(listed))
    if missing:
        raise FormatError(f"the manifest lists no {', '.join(missing)} table", path=str(mpath),
                          hint="re-run `rscale o2i run` with this rscale")
    tables = {}
    for name in TABLES:
        entry = listed[name]
        if not isinstance(entry, dict) or not isinstance(entry.get("file"), str) or "/" in entry["file"] \
                or entry["file"].startswith("."):
            raise FormatError(f"the manifest's {name} entry names no table file", path=str(mpath))
        path = out_dir / "tables" / entry["file"]
        if not path.is_file():
            raise FormatError(f"the {name} table the manifest lists is missing", path=str(path),
                              hint="re-run `rscale o2i run`")
        if sha256_file(path) != entry.get("sha256"):
            raise FormatError(f"does not hash to the digest the manifest records for the {name} table (edited after "
                              "the run)", path=str(path), hint="re-run `rscale o2i run` to rewrite the folder")
        table = read_result_table(path, name)
        if table.num_rows != entry.get("rows"):
            raise FormatError(f"{table.num_rows} rows, the manifest records {entry.get('rows')}", path=str(path))
        tables[name] = table
    backbones = list(man["backbones"])
    for b in backbones:
        check_name("backbone", b)
        if b not in set(tables["cross_distance"].column("backbone").to_pylist()):
            raise FormatError(f"backbone {b!r} of the manifest has no cross-distance rows",
                              path=str(out_dir / "tables" / listed["cross_distance"]["file"]))
    return {"manifest": man, "manifest_digest": sha256_file(mpath), "tables": tables, "backbones": backbones,
            "mlflow_run_id": read_run_id(mpath)}


def run_code_version(checked: dict) -> str:
    """The code version of the rscale that made the run (its manifest's); a folder written before
    manifests recorded it: the registering rscale's."""
    from rscale.producers.lineage import code_version

    recorded = checked["manifest"].get("code_version")
    return recorded if isinstance(recorded, str) and recorded else code_version()


def lineage_inputs(checked: dict, backbone: str) -> dict:
    """What made one backbone's results: the run, the renders and assets, the model."""
    man = checked["manifest"]
    model = man["backbones"][backbone]
    renders = man.get("renders", {})
    return {"kind": KIND, "code_version": run_code_version(checked),
            "run": {"manifest": checked["manifest_digest"],
                    "tables": {n: t["sha256"] for n, t in sorted(man["tables"].items())}},
            "renderer": renders.get("renderer"), "renders": renders.get("digest"),
            "render_count": renders.get("count"), "protocol": renders.get("protocol"),
            "assets": {k: {"digest": a.get("digest"), "licence": a.get("licence"), "source": a.get("source")}
                       for k, a in sorted(man.get("assets", {}).items())},
            "model": {k: model.get(k) for k in ("model_type", "pooling", "resolution", "weights", "preprocessing",
                                                "licence")}}


def _params(man: dict, backbone: str) -> dict:
    params = dict(man.get("params") or {})
    params["backbones"] = [b for b in params.get("backbones", []) if b.get("name") == backbone]
    return params


# ---- summary (recomputed from the stored slices) -------------------------------------------------

def _num(x):
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def o2i_summary(tables: dict) -> dict:
    """Counts and headline numbers of one backbone's slices ({name: pyarrow Table})."""
    ranks = tables["ranks"]
    tables = {n: t.to_pylist() for n, t in tables.items() if n != "ranks"}      # small: one row per pair
    cd = tables["cross_distance"]
    if ranks.num_rows:
        objects = len(set(ranks.column("object_id").unique().to_pylist()))
        conditions = sorted(ranks.column("condition").unique().to_pylist())
    else:
        objects, conditions = 0, []
    by_mag: dict = {}
    for r in tables["recall_by_ratio"]:
        by_mag.setdefault(round(abs(math.log(r["ratio"])), 1), []).append((r["R@1"], r["pairs"]))
    r1_by_mag = {f"{math.exp(m):.3f}": _num(sum(a * n for a, n in v) / sum(n for _, n in v))
                 for m, v in sorted(by_mag.items())}
    [test] = tables["asymmetry_test"] or [{}]
    ivs: dict = {}
    for r in tables["interventions"]:
        if r.get("status") != "measured":
            ivs[r["intervention"]] = {"status": r.get("status")}
            continue
        e = ivs.setdefault(r["intervention"], {"status": "measured", "pairs": 0, "R@1_significant": 0, "gains": []})
        e["pairs"] += 1
        e["R@1_significant"] += int(r.get("R@1_p_holm") is not None and r["R@1_p_holm"] < ALPHA)
        e["gains"].append(r.get("R@1_gain"))
    for e in ivs.values():
        if "gains" in e:
            e["mean_R@1_gain"] = _num(np.mean([g for g in e.pop("gains") if g is not None]))
    return {"objects": objects,
            "distances": sorted({float(r["d_q"]) for r in cd}),
            "pairs": len(cd), "conditions": conditions,
            "rows": {**{n: len(t) for n, t in tables.items()}, "ranks": ranks.num_rows},
            "mean_R@1": _num(np.mean([r["R@1"] for r in cd])) if cd else None,
            "mean_MRR": _num(np.mean([r["MRR"] for r in cd])) if cd else None,
            "R@1_by_magnitude": r1_by_mag,
            "asymmetry": {"favoured": test.get("favoured"), "difference": _num(test.get("difference")),
                          "p_value": _num(test.get("p_value"))},
            "interventions": ivs}


# ---- registration --------------------------------------------------------------------------------

def register_o2i(out_dir, *, registry=None, benchmark: str = DEFAULT_BENCHMARK, mlflow_run_id=None) -> dict:
    """Register every backbone's results of an O2I output folder (one ``o2i`` artifact each).

    Returns {"registry", "results": [{"ref", "created", "content", "series", "lineage"}]}. Nothing is
    written unless the whole folder checks out; re-registering the same results is a no-op."""
    from rscale.api.registry import check_name
    from rscale.store.o2i_results import TABLES, backbone_slice, write_slice
    from rscale.store.registry import Registry

    benchmark = check_name("benchmark", benchmark, flag="--benchmark")
    checked = check_o2i_folder(out_dir)
    reg = Registry.locate(registry)
    run_id = mlflow_run_id or checked["mlflow_run_id"]
    code = run_code_version(checked)
    results = []
    staging = Path(tempfile.mkdtemp(prefix="rscale-o2i-register-"))
    try:
        for b in checked["backbones"]:
            files, rows, slices = {}, {}, {}
            for name in TABLES:
                t = backbone_slice(checked["tables"][name], name, b)
                files[name] = write_slice(t, staging / f"{b}.{name}.parquet")
                rows[name] = t.num_rows
                slices[name] = t
            a, created = reg.register_artifact(
                kind=KIND, name=b, benchmark=benchmark, files=files, inputs=lineage_inputs(checked, b),
                params=_params(checked["manifest"], b), code_version=code, mlflow_run_id=run_id,
                summary=o2i_summary(slices), rows=rows)
            results.append({"ref": a.ref, "created": created, "content": a.content, "lineage": a.lineage,
                            "series": "/".join(a.series)})
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {"registry": str(reg.root), "results": results}


# ---- reading back --------------------------------------------------------------------------------

def read_tables(reg, a, *, names=None) -> dict:
    """{name: list of row dicts} of an artifact's tables (all: None), each blob checked against
    its digest first."""
    from rscale.errors import RegistryError
    from rscale.store.o2i_results import TABLES, read_result_table

    out = {}
    for name in names or TABLES:
        path = reg.artifact_blob(a, name)
        try:
            out[name] = read_result_table(path, name, backbone=a.name).to_pylist()
        except FormatError as exc:
            raise RegistryError(f"blob {a.blobs[name]} ({name} of {a.ref}) matches its digest but is not an O2I "
                                f"{name} table ({exc.problem}): re-register or restore it") from None
    return out


def _f(x, fmt="{:.3f}") -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else fmt.format(x)


def report_lines(reg) -> list[str]:
    """The ``rscale report`` section of the latest registered O2I results of every backbone
    (none: no lines). Every table is read from a digest-checked blob."""
    from rscale.store.o2i_results import TABLES

    arts = [a for a in reg.artifacts(KIND) if a.latest]
    if not arts:
        return []
    for a in arts:                        # every blob digest-checked, even the per-query ranks it does not show
        for role in TABLES:
            reg.artifact_blob(a, role)
    data = [(a, read_tables(reg, a, names=[n for n in TABLES if n != "ranks"])) for a in arts]
    md = ["## O2I benchmark (registered results)", "",
          "Per backbone, the latest registered version of `rscale o2i register` (cross-distance retrieval, "
          "decomposition, fixed-pixel canvas, asymmetry and query-side interventions; paper 2, sections 4.1-4.4).", "",
          "| version | benchmark | objects | distances | renderer | renders | weights | MLflow run |",
          "|---|---|---|---|---|---|---|---|"]
    for a, _t in data:
        inp = a.inputs
        md.append(f"| {a.ref} | {a.benchmark} | {a.summary.get('objects')} | "
                  f"{', '.join(f'{d:g}' for d in a.summary.get('distances', []))} | {inp.get('renderer')} | "
                  f"`{str(inp.get('renders'))[:19]}` | `{str(inp.get('model', {}).get('weights'))[:19]}` | "
                  f"{a.mlflow_run_id or '-'} |")
    md += ["", "### Cross-distance retrieval", "", "R@1 by mismatch magnitude max(d_q, d_t) / min(d_q, d_t), mean over "
           "the ordered pairs of each magnitude; mean R@1 and MRR over all pairs.", ""]
    mags = sorted({m for a, _t in data for m in a.summary.get("R@1_by_magnitude", {})}, key=float)
    md += ["| version | pairs | mean R@1 | mean MRR | " + " | ".join(f"{m}x" for m in mags) + " |",
           "|---|---|---|---|" + "---|" * len(mags)]
    for a, _t in data:
        r = a.summary.get("R@1_by_magnitude", {})
        md.append(f"| {a.ref} | {a.summary.get('pairs')} | {_f(a.summary.get('mean_R@1'))} | "
                  f"{_f(a.summary.get('mean_MRR'))} | " + " | ".join(_f(r.get(m)) for m in mags) + " |")
    md += ["", "### Decomposition", "", "alpha: raw R@1, beta: with O2I-matched crops; epsilon = (1 - beta) / "
           "(1 - alpha), the share of the loss left once O2I is matched (resolution).", "",
           "| version | mean alpha | mean beta | median epsilon | pairs with epsilon |", "|---|---|---|---|---|"]
    for a, t in data:
        rows = t["decomposition"]
        eps = [r["epsilon"] for r in rows if r.get("epsilon") is not None and math.isfinite(r["epsilon"])]
        md.append(f"| {a.ref} | {_f(np.mean([r['alpha'] for r in rows]) if rows else None)} | "
                  f"{_f(np.mean([r['beta'] for r in rows]) if rows else None)} | "
                  f"{_f(float(np.median(eps)) if eps else None)} | {len(eps)} of {len(rows)} |")
    md += ["", "### Fixed-pixel canvas", "", "Mean cosine between the same object pixels on canvases of two sizes.", ""]
    for a, t in data:
        sizes = list(dict.fromkeys(r["size_a"] for r in t["canvas"]))
        cos = {(r["size_a"], r["size_b"]): r["cosine"] for r in t["canvas"]}
        md += [f"`{a.ref}`:", "", "| size | " + " | ".join(str(s) for s in sizes) + " |", "|---|" + "---|" * len(sizes)]
        md += [f"| {s} | " + " | ".join(_f(cos.get((s, u))) for u in sizes) + " |" for s in sizes]
        md.append("")
    md += ["### Asymmetry", "", "MRR of tight-query -> wide-gallery pairs (d_q < d_t) against the mirrored pairs; "
           "paired t-test over objects (effect = tight - wide).", "",
           "| version | MRR tight query | MRR wide query | difference | 95% CI | p | favoured |",
           "|---|---|---|---|---|---|---|"]
    for a, t in data:
        for r in t["asymmetry_test"]:
            md.append(f"| {a.ref} | {_f(r['mrr_tight_query'])} | {_f(r['mrr_wide_query'])} | "
                      f"{_f(r['difference'], '{:+.3f}')} | [{_f(r['ci_low'], '{:+.3f}')}, {_f(r['ci_high'], '{:+.3f}')}] "
                      f"| {_f(r['p_value'], '{:.3g}')} | {r['favoured']} |")
    md += ["", "### Query-side interventions", "", f"Against the baseline per distance pair: R@1 by McNemar's exact "
           f"test, MRR by the paired t-test, Holm-corrected over each intervention's cells; significant: Holm p < {ALPHA}.",
           "", "| version | intervention | pairs | mean R@1 gain | R@1 significant (gain / loss) | mean MRR gain | "
           "MRR significant |", "|---|---|---|---|---|---|---|"]
    for a, t in data:
        for iv in dict.fromkeys(r["intervention"] for r in t["interventions"]):
            rows = [r for r in t["interventions"] if r["intervention"] == iv]
            if rows[0].get("status") != "measured":
                md.append(f"| {a.ref} | {iv} | - | {rows[0].get('status')} | | | |")
                continue
            sig = [r for r in rows if r.get("R@1_p_holm") is not None and r["R@1_p_holm"] < ALPHA]
            msig = [r for r in rows if r.get("MRR_p_holm") is not None and r["MRR_p_holm"] < ALPHA]
            up = sum(r["R@1_gain"] > 0 for r in sig)
            md.append(f"| {a.ref} | {iv} | {len(rows)} | {_f(np.mean([r['R@1_gain'] for r in rows]), '{:+.3f}')} | "
                      f"{len(sig)} ({up} / {len(sig) - up}) | {_f(np.mean([r['MRR_gain'] for r in rows]), '{:+.3f}')} "
                      f"| {len(msig)} |")
    return md + [""]


def artifact_lineage(ref: str, *, registry=None, benchmark=None) -> dict:
    """``rscale lineage o2i:NAME[@vN]``: what made a registered O2I result, and its stored tables."""
    from rscale.store.artifacts import parse_ref
    from rscale.store.registry import Registry

    kind, name, version = parse_ref(ref)
    reg = Registry.locate(registry)
    a = reg.artifact(kind, name, version, benchmark)
    return {"ref": a.ref, "series": dict(zip(("kind", "name", "benchmark"), a.series)), "content": a.content,
            "lineage": a.lineage, "inputs": a.inputs, "params": a.params, "code_version": a.code_version,
            "mlflow_run_id": a.mlflow_run_id, "created": a.created,
            "outputs": {role: {"digest": d, "path": str(reg.blob_path(d)), "bytes": a.sizes.get(role)}
                        for role, d in sorted(a.blobs.items())}}


# ---- compare operands ----------------------------------------------------------------------------

def load_compare_operand(spec: str, registry=None):
    """``rscale compare`` operand: a sample-stats file or O2I folder (api.o2i.load_compare_run), or a
    registered O2I result ``o2i:NAME[@vN][/CONDITION]`` (condition default baseline)."""
    from rscale.api.o2i import load_compare_run
    from rscale.store.artifacts import parse_ref

    head, _, condition = spec.partition("/")
    ref = parse_ref(head)
    if ref is None or Path(spec.partition("#")[0]).exists():
        return load_compare_run(spec)
    from rscale.api.compare import PerQueryRanks
    from rscale.store.registry import Registry

    reg = Registry.locate(registry)
    a = reg.artifact(ref[0], ref[1], ref[2])
    ranks = read_tables(reg, a, names=["ranks"])["ranks"]
    condition = condition or COND_DEFAULT
    sel = [r for r in ranks if r["condition"] == condition]
    if not sel:
        raise InvalidArgumentError(f"{a.ref} has no condition {condition!r} (conditions: "
                                   f"{', '.join(sorted({r['condition'] for r in ranks}))})")
    ids = np.asarray([f"{r['object_id']}@{r['d_q']:g}->{r['d_t']:g}" for r in sel])
    return PerQueryRanks(ids, np.asarray([r["rank"] for r in sel], dtype=np.int64), np.arange(len(sel) + 1),
                         f"{a.ref}/{condition}")


# ---- bundles -------------------------------------------------------------------------------------

def check_bundle_blobs(meta: dict, files: dict) -> tuple[dict, dict]:
    """Import's content check of an ``o2i`` bundle (``meta``: its manifest's ``artifact``): names a
    query can name, every blob read as the table its role names, holding rows of that backbone only.
    Returns (rows per role, the summary recomputed from them)."""
    from rscale.api.registry import check_name
    from rscale.store.o2i_results import TABLES, read_result_table

    kind, name = meta["kind"], meta["name"]
    check_name("backbone", name)
    check_name("benchmark", meta["benchmark"])
    if kind != KIND:
        raise FormatError(f"artifact kind {kind!r} is not one this rscale imports ({KIND})")
    if set(files) != set(TABLES):
        raise FormatError(f"an o2i bundle holds the tables {', '.join(TABLES)}; this one holds "
                          f"{', '.join(sorted(files)) or 'none'}")
    slices = {}
    for role, path in files.items():
        try:
            slices[role] = read_result_table(path, role, backbone=name, where=f"the file declared as {role}")
        except FormatError as exc:
            raise FormatError(f"the file declared as {role} is not one ({exc.problem})") from None
    return {r: t.num_rows for r, t in slices.items()}, o2i_summary(slices)


def export(ref: str, out, *, registry=None, benchmark=None, license: str = "unspecified"):
    """Write a bundle of one registered O2I result (``o2i:NAME[@vN]``): (path, artifact)."""
    from rscale.store.artifacts import parse_ref
    from rscale.store.bundle import export_artifact_bundle
    from rscale.store.registry import Registry

    parsed = parse_ref(ref)
    if parsed is None:
        raise InvalidArgumentError(f"{ref!r} is not an artifact reference; write o2i:NAME[@vN]")
    reg = Registry.locate(registry)
    a = reg.artifact(parsed[0], parsed[1], parsed[2], benchmark)
    for role in a.blobs:                     # refuse before the bundle is started
        reg.artifact_blob(a, role)
    return export_artifact_bundle(reg, a, out, license=license), a


__all__ = ["artifact_lineage", "check_bundle_blobs", "check_o2i_folder", "export", "lineage_inputs", "load_compare_operand",
           "o2i_summary", "read_tables", "register_o2i", "report_lines"]
