"""The crop reranker's output in the registry: one ``rscale rerank`` folder -> an artifact of kind
``rerank`` (store/artifacts.py), ``rerank:NAME@vN``.

Registration (:func:`register_rerank`; ``rscale rerank ... --registry DIR``) first checks the
folder completely (an ``rscale-rerank`` manifest; every file it lists present and hashing to the
digest it records; the lists readable with their columns; a name a query can name) and writes
nothing when a check fails. The artifact's blobs, by role:

- ``reranked``: ``reranked.parquet``, the reranked lists;
- ``metrics``: ``metrics.parquet``, per-query R@1 and mAP@K' before and after (with qrels only);
- ``record``: a one-row Parquet table of what made them, ``params`` and ``inputs`` as canonical
  JSON (:func:`write_record`). It is part of the content, so the same settings and inputs give
  the same artifact (a no-op) and a changed setting a new version, even where the lists come out
  byte-identical; the MLflow run id and the code version stay out of it (catalog columns).

``inputs`` (its lineage record): ``kind``, the digests the producer recorded (first-stage
candidate file, query set manifest, detector weights, backbone weights, region cache identity,
qrels) with ``first_stage_run``, the MLflow run id of the scoring run that wrote the candidate
file when it left a ``<file>.run.json`` sidecar (``rscale score --candidates`` does; lists made
otherwise are recorded by digest only), and ``run``: the output manifest's digest. ``params``: the
rerank settings. ``mlflow_run_id``: the rerank run's (the manifest's sidecar). ``summary``: queries,
K', regions, images and the mean metrics (not the images computed by that run: a rerun with a warm
cache registers the same thing).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from rscale.errors import FormatError

KIND = "rerank"
LIST_COLUMNS = ("query_id", "gallery_id", "rank", "score", "region_score", "first_stage_score", "first_stage_rank")
ROLES = {"reranked": "reranked.parquet", "metrics": "metrics.parquet"}


def check_rerank_folder(out_dir) -> dict:
    """Everything registration needs from an ``rscale rerank`` output folder, checked (FormatError
    otherwise): {"manifest", "manifest_digest", "files": {role: path}, "rows": {role: n}, "mlflow_run_id"}."""
    import pyarrow.parquet as pq

    from rscale.producers.rerank import OUTPUT_FORMAT, OUTPUT_VERSION
    from rscale.store.hashing import sha256_file
    from rscale.store.run_sidecar import read_run_id

    out_dir = Path(out_dir)
    mpath = out_dir / "manifest.json"
    if not mpath.is_file():
        raise FormatError("no manifest.json: not an rscale rerank output folder", path=str(out_dir),
                          hint="give the folder `rscale rerank -o FOLDER` wrote")
    try:
        man = json.loads(mpath.read_text())
    except ValueError:
        raise FormatError("unreadable manifest.json", path=str(mpath), hint="re-run `rscale rerank`") from None
    if not isinstance(man, dict) or man.get("format") != OUTPUT_FORMAT:
        raise FormatError(f"not an {OUTPUT_FORMAT} manifest", path=str(mpath), hint="re-run `rscale rerank`")
    if not isinstance(man.get("version"), int) or man["version"] > OUTPUT_VERSION:
        raise FormatError(f"rerank output version {man.get('version')!r} is not one this rscale reads "
                          f"(<= {OUTPUT_VERSION})", path=str(mpath), hint="upgrade rscale")
    listed = man.get("files")
    if not isinstance(listed, dict) or ROLES["reranked"] not in listed or set(listed) - set(ROLES.values()):
        raise FormatError("the manifest's files are not reranked.parquet [and metrics.parquet]", path=str(mpath),
                          hint="re-run `rscale rerank`")
    for key in ("params", "inputs", "summary"):
        if not isinstance(man.get(key), dict):
            raise FormatError(f"the manifest has no '{key}' mapping", path=str(mpath), hint="re-run `rscale rerank`")
    files, rows = {}, {}
    for role, name in ROLES.items():
        if name not in listed:
            continue
        path = out_dir / name
        if not path.is_file():
            raise FormatError(f"the {name} the manifest lists is missing", path=str(path), hint="re-run `rscale rerank`")
        if sha256_file(path) != listed[name]:
            raise FormatError(f"does not hash to the digest the manifest records for {name} (edited after the run)",
                              path=str(path), hint="re-run `rscale rerank` to rewrite the folder")
        try:
            schema = pq.read_schema(path)
            rows[role] = pq.ParquetFile(path).metadata.num_rows
        except Exception as exc:                       # noqa: BLE001 - any reader failure is a bad file
            raise FormatError(f"not a readable Parquet file ({exc})", path=str(path)) from None
        if role == "reranked":
            missing = [c for c in LIST_COLUMNS if c not in schema.names]
            if missing:
                raise FormatError(f"missing column(s) {', '.join(missing)}", path=str(path), hint="re-run `rscale rerank`")
        files[role] = path
    return {"manifest": man, "manifest_digest": sha256_file(mpath), "files": files, "rows": rows,
            "mlflow_run_id": read_run_id(mpath)}


def series_name(checked: dict, name: str | None = None) -> str:
    """The artifact's name: ``name``, else the backbone the query set records (the first stage's)."""
    from rscale.api.registry import check_name
    from rscale.errors import InvalidArgumentError

    name = name or checked["manifest"].get("backbone")
    if not name:
        raise InvalidArgumentError("the rerank output records no backbone name: give --name NAME")
    return check_name("backbone", str(name), flag="--name")


def lineage_inputs(checked: dict) -> dict:
    return {"kind": KIND, **checked["manifest"]["inputs"], "run": {"manifest": checked["manifest_digest"]}}


def rerank_summary(manifest: dict) -> dict:
    return {k: v for k, v in sorted(manifest["summary"].items()) if k not in ("images_computed", "written")}


def write_record(path, params: dict, inputs: dict) -> Path:
    """The ``record`` blob: one row, ``params`` and ``inputs`` as canonical JSON strings."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rscale.store.hashing import canonical_json
    table = pa.table({"params": [canonical_json(params).decode()], "inputs": [canonical_json(inputs).decode()]})
    table = table.replace_schema_metadata({"rscale.format": "rerank-record"})
    pq.write_table(table, path)
    return Path(path)


def register_rerank(out_dir, *, registry=None, name: str | None = None, benchmark: str | None = None) -> dict:
    """Register an ``rscale rerank`` output folder as ``rerank:NAME@vN``. Returns {"registry", "ref",
    "created", "content", "lineage", "series"}; nothing is written unless the folder checks out,
    and the same folder (or a rerun with the same inputs and settings) is a no-op."""
    from rscale.api.registry import check_name
    from rscale.producers.lineage import code_version
    from rscale.store.registry import Registry

    benchmark = check_name("benchmark", benchmark or "unknown", flag="--benchmark")
    checked = check_rerank_folder(out_dir)
    name = series_name(checked, name)
    man = checked["manifest"]
    reg = Registry.locate(registry)
    staging = Path(tempfile.mkdtemp(prefix="rscale-rerank-register-"))
    try:
        files = dict(checked["files"])
        files["record"] = write_record(staging / "record.parquet", man["params"], man["inputs"])
        a, created = reg.register_artifact(
            kind=KIND, name=name, benchmark=benchmark, files=files, inputs=lineage_inputs(checked),
            params=man["params"], code_version=code_version(), mlflow_run_id=checked["mlflow_run_id"],
            summary=rerank_summary(man), rows={**checked["rows"], "record": 1})
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {"registry": str(reg.root), "ref": a.ref, "created": created, "content": a.content, "lineage": a.lineage,
            "series": "/".join(a.series)}


def check_bundle_blobs(meta: dict, files: dict) -> tuple[dict, dict]:
    """Import's content check of a ``rerank`` bundle (``meta``: its manifest's ``artifact``): names a
    query can name, the roles (reranked, record, optionally metrics), each blob read as what its
    role says, the record agreeing with the bundle's params and inputs. Returns (rows per role, the
    summary recomputed from the blobs: queries, K' and the mean metrics)."""
    import numpy as np
    import pyarrow.parquet as pq

    from rscale.api.registry import check_name

    check_name("backbone", meta["name"])
    check_name("benchmark", meta["benchmark"])
    if not {"reranked", "record"} <= set(files) <= {"reranked", "record", "metrics"}:
        raise FormatError(f"a rerank bundle holds reranked, record [and metrics]; this one holds "
                          f"{', '.join(sorted(files)) or 'none'}")
    tables = {}
    for role, path in files.items():
        try:
            tables[role] = pq.read_table(path)
        except Exception as exc:                       # noqa: BLE001 - any reader failure is a bad blob
            raise FormatError(f"the file declared as {role} is not a Parquet table ({exc})") from None
    missing = [c for c in LIST_COLUMNS if c not in tables["reranked"].column_names]
    if missing:
        raise FormatError(f"the file declared as reranked lacks column(s) {', '.join(missing)}")
    record = tables["record"]
    if (record.schema.metadata or {}).get(b"rscale.format") != b"rerank-record" or record.num_rows != 1:
        raise FormatError("the file declared as record is not a rerank record (one row, rscale.format rerank-record)")
    try:
        params, inputs = (json.loads(record.column(c)[0].as_py()) for c in ("params", "inputs"))
    except (KeyError, TypeError, ValueError):
        raise FormatError("the record's params / inputs are not JSON") from None
    want = {k: v for k, v in (meta.get("inputs") or {}).items() if k not in ("kind", "run")}
    if params != meta.get("params") or inputs != want:
        raise FormatError("the record's params or inputs are not the bundle's (the manifest was edited)")
    lists = tables["reranked"]
    summary = {"queries": len(set(lists.column("query_id").to_pylist())),
               "k": int(max(lists.column("rank").to_pylist(), default=0))}
    if "metrics" in tables:
        for name in tables["metrics"].column_names:
            if name == "query_id":
                continue
            v = np.asarray(tables["metrics"].column(name).to_numpy(zero_copy_only=False), np.float64)
            summary[name] = float(np.nanmean(v)) if np.isfinite(v).any() else None
    return {role: t.num_rows for role, t in tables.items()}, summary


__all__ = ["check_bundle_blobs", "check_rerank_folder", "lineage_inputs", "register_rerank", "rerank_summary", "series_name", "write_record"]
