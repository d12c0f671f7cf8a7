"""Shareable bundles: one tar holding a version's blobs and a manifest describing them.

Layout of a bundle (uncompressed tar)::

    manifest.json                 sorted JSON: schema version, rscale version, license, the version's
                                  identity and lineage, summary stats, and every file with its
                                  sha256, size, kind and row count
    blobs/<64 hex>.parquet        the files, named by digest

A bundle is data from elsewhere: import trusts nothing in it that it can check.

- **Members.** The tar holds exactly ``manifest.json`` and one regular file per manifest entry,
  each at ``blobs/<its digest's hex>.parquet`` (no other name, no duplicate, no link or device);
  any other path in the manifest (absolute, ``..``, a file of the importer's machine) is refused
  before anything is read. Members are streamed into a private ``.import-*`` folder inside the
  target registry (tar paths are never used as file names), and checked for size and sha256.
- **Content.** Every blob is read as what the manifest says it is (hardness table, tail fits,
  sample stats) with that format's reader; their rows must agree (the tail fits cover the
  hardness table's queries; the sample stats are the ones the hardness was estimated from:
  same queries, positives, S and counts); a hardness table that used tail fits needs them; the
  manifest's estimator, parameters and lineage must be what the hardness table and its digests
  give.
- **Summaries.** The summary that drives answers (sizes, rule shares, replicates, budget check,
  rejected-tail share) is recomputed from the verified blobs by the caller's
  ``summarize``, and the manifest's own copy must match it: counts always, statistical terms
  when the bundle comes from the same rscale code. What is stored is the recomputed summary.

Artifact bundles (bundle version 2: one registered artifact of another kind, such as one
backbone's O2I results, artifacts.py) hold ``artifact`` instead of ``version``, and their files'
``kind`` is the blob's role (an O2I table name). The same member rules apply; the content check
is the caller's ``check_artifact`` (each blob read as the table its role names), and the content
digest, lineage digest and summary are recomputed and must match the manifest's.

Anything that fails is refused with one FormatError line, and the target is left as it was
(no catalog row, no blob, no folder). Only then are the blobs copied in and the version's rows
added (one transaction, a no-op when the same content is already registered).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

import numpy as np

from rscale.errors import FormatError, RscaleError, SchemaVersionError
from rscale.store.artifacts import Artifact, content_of
from rscale.store.atomic import atomic_path
from rscale.store.catalog import BLOB_KINDS
from rscale.store.hashing import canonical_digest, hex_of, is_digest
from rscale.store.integrity import IMPORT_PREFIX
from rscale.store.registry import Registry, Version

BUNDLE_VERSION = 1              # a hardness version's bundle
ARTIFACT_BUNDLE_VERSION = 2     # an artifact's bundle (import reads both)
# summary fields that are plain counts of the blobs: compared whatever code made the bundle
COUNT_FIELDS = ("queries", "positives", "S_min", "S_max", "rules", "draws")
# summary fields that are not derived from the blobs (run ids live in sidecars and MLflow)
INFO_FIELDS = ("sample_mlflow_run_id", "imported_from", "license")


def member_name(digest: str) -> str:
    return f"blobs/{hex_of(digest)}.parquet"


def export_bundle(reg: Registry, version: Version, out: str | os.PathLike, license: str = "unspecified") -> Path:
    out = Path(out)
    files = []
    for kind in BLOB_KINDS:
        digest = getattr(version, kind)
        if not digest:
            continue
        path = reg.existing_blob(digest, f"{kind} of {version.ref}")
        files.append({"kind": kind, "digest": digest, "bytes": path.stat().st_size, "path": member_name(digest)})
    manifest = {
        "format": "rscale-bundle", "bundle_version": BUNDLE_VERSION, "license": license,
        "version": {"backbone": version.backbone, "benchmark": version.benchmark, "source": version.source,
                    "estimator": version.estimator, "version": version.version, "lineage": version.lineage,
                    "params": version.params, "code_version": version.code_version,
                    "mlflow_run_id": version.mlflow_run_id, "created": version.created},
        "summary": version.summary, "files": files,
    }
    return _write_bundle(reg, manifest, out)


def export_artifact_bundle(reg: Registry, a: Artifact, out: str | os.PathLike, license: str = "unspecified") -> Path:
    """An artifact (artifacts.py) as a bundle: its blobs by role, its row's identity and lineage."""
    files = []
    for role in sorted(a.blobs):
        path = reg.artifact_blob(a, role)
        files.append({"kind": role, "digest": a.blobs[role], "bytes": path.stat().st_size,
                      "path": member_name(a.blobs[role])})
    manifest = {
        "format": "rscale-bundle", "bundle_version": ARTIFACT_BUNDLE_VERSION, "license": license,
        "artifact": {"kind": a.kind, "name": a.name, "benchmark": a.benchmark, "version": a.version,
                     "content": a.content, "lineage": a.lineage, "inputs": a.inputs, "params": a.params,
                     "code_version": a.code_version, "mlflow_run_id": a.mlflow_run_id, "created": a.created},
        "summary": a.summary, "files": files,
    }
    return _write_bundle(reg, manifest, out)


def _write_bundle(reg: Registry, manifest: dict, out) -> Path:
    from rscale import __version__
    out = Path(out)
    manifest["rscale_version"] = __version__
    data = json.dumps(manifest, sort_keys=True, indent=2).encode()
    with atomic_path(out) as tmp:
        with tarfile.open(tmp, "w") as tar:
            info = tarfile.TarInfo("manifest.json")
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
            for f in manifest["files"]:
                tar.add(reg.blob_path(f["digest"]), arcname=f["path"], recursive=False)
    return out


def _refuse(problem: str, bundle: str, hint: str = "nothing was imported; fetch the bundle again") -> FormatError:
    return FormatError(problem, path=bundle, hint=hint)


def read_manifest(bundle: str | os.PathLike) -> dict:
    bundle = str(bundle)
    try:
        with tarfile.open(bundle, "r") as tar:
            member = tar.getmember("manifest.json")
            if not member.isfile():
                raise _refuse("manifest.json is not a regular file", bundle)
            manifest = json.load(tar.extractfile(member))
    except (tarfile.TarError, KeyError, OSError, EOFError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise FormatError(f"not a readable rscale bundle ({type(exc).__name__}: {exc})", path=bundle,
                          hint="re-export it with 'rscale export'") from None
    if not isinstance(manifest, dict) or manifest.get("format") != "rscale-bundle":
        raise FormatError("not an rscale bundle (manifest format is missing)", path=bundle)
    try:
        bundle_version = int(manifest.get("bundle_version", 0))
    except (TypeError, ValueError):
        raise _refuse(f"bundle_version {manifest.get('bundle_version')!r} is not a number", bundle) from None
    if bundle_version > ARTIFACT_BUNDLE_VERSION:
        raise SchemaVersionError(f"bundle version {manifest['bundle_version']} is newer than this rscale reads "
                                 f"({ARTIFACT_BUNDLE_VERSION})", path=bundle, hint="upgrade rscale")
    if "artifact" in manifest:
        _check_artifact_shape(manifest, bundle)
    else:
        _check_manifest_shape(manifest, bundle)
    return manifest


def _check_manifest_shape(manifest: dict, bundle: str) -> None:
    v = manifest.get("version")
    if not isinstance(v, dict) or not all(isinstance(v.get(k), str) and v.get(k)
                                          for k in ("backbone", "benchmark", "source", "estimator", "lineage")):
        raise _refuse("the manifest's 'version' lacks backbone, benchmark, source, estimator or lineage", bundle)
    if not isinstance(v.get("params", {}), dict) or not isinstance(manifest.get("summary", {}), dict):
        raise _refuse("the manifest's params or summary is not an object", bundle)
    files = manifest.get("files")
    if not isinstance(files, list):
        raise _refuse("the manifest has no file list", bundle)
    kinds = set()
    for i, f in enumerate(files):
        if not isinstance(f, dict) or f.get("kind") not in BLOB_KINDS or not is_digest(f.get("digest")) \
                or not isinstance(f.get("bytes"), int) or isinstance(f.get("bytes"), bool) or f["bytes"] < 0:
            raise _refuse(f"file entry {i} of the manifest is malformed (needs kind hardness|tail|sample, a sha256 "
                          "digest and a byte count)", bundle)
        if f.get("path") != member_name(f["digest"]):
            raise _refuse(f"file entry {i} names the path {f.get('path')!r}; a bundle's files are "
                          f"{member_name(f['digest'])!r}, members of the bundle named by their digest", bundle)
        if f["kind"] in kinds:
            raise _refuse(f"the manifest lists two {f['kind']} files", bundle)
        kinds.add(f["kind"])
    if "hardness" not in kinds:
        raise _refuse("the bundle has no hardness file", bundle, hint="a version is its hardness table: re-export it")


def _check_artifact_shape(manifest: dict, bundle: str) -> None:
    import re

    a = manifest.get("artifact")
    if "version" in manifest or not isinstance(a, dict) or not all(
            isinstance(a.get(k), str) and a.get(k) for k in ("kind", "name", "benchmark", "content", "lineage")):
        raise _refuse("the manifest's 'artifact' lacks kind, name, benchmark, content or lineage", bundle)
    if not all(isinstance(a.get(k, {}), dict) for k in ("inputs", "params")) \
            or not isinstance(manifest.get("summary", {}), dict):
        raise _refuse("the manifest's inputs, params or summary is not an object", bundle)
    files = manifest.get("files")
    if not isinstance(files, list) or not files:
        raise _refuse("the manifest has no file list", bundle)
    roles, digests = set(), set()
    for i, f in enumerate(files):
        if not isinstance(f, dict) or not isinstance(f.get("kind"), str) or not re.fullmatch(r"[a-z0-9_]+", f["kind"]) \
                or not is_digest(f.get("digest")) or not isinstance(f.get("bytes"), int) \
                or isinstance(f.get("bytes"), bool) or f["bytes"] < 0:
            raise _refuse(f"file entry {i} of the manifest is malformed (needs a role, a sha256 digest and a byte "
                          "count)", bundle)
        if f.get("path") != member_name(f["digest"]):
            raise _refuse(f"file entry {i} names the path {f.get('path')!r}; a bundle's files are "
                          f"{member_name(f['digest'])!r}, members of the bundle named by their digest", bundle)
        if f["kind"] in roles or f["digest"] in digests:
            raise _refuse(f"the manifest lists the {f['kind']} file or its blob twice", bundle)
        roles.add(f["kind"])
        digests.add(f["digest"])


def _import_artifact(reg: Registry, manifest: dict, files: dict, bundle: str, check_artifact, code_version: str):
    """The artifact half of :func:`import_bundle`: content check, digests, summary, then register."""
    a = manifest["artifact"]
    if check_artifact is None:
        raise _refuse(f"this is a bundle of a {a['kind']!r} artifact, which this import cannot check", bundle,
                      hint="import it with 'rscale import'")
    try:
        rows, recomputed = check_artifact(a, files)
    except RscaleError as exc:
        raise _refuse(getattr(exc, "problem", str(exc)), bundle) from None
    digests = {f["kind"]: f["digest"] for f in manifest["files"]}
    if content_of(digests) != a["content"]:
        raise _refuse("the manifest's content digest is not the digest of its files", bundle)
    if canonical_digest(a.get("inputs") or {}) != a["lineage"]:
        raise _refuse("the manifest's lineage digest is not the digest of its inputs", bundle)
    claimed = manifest.get("summary", {})
    same_code = bool(code_version) and a.get("code_version") == code_version
    for key in sorted(recomputed):
        if key in INFO_FIELDS or (not same_code and key not in claimed):
            continue
        if _plain(claimed.get(key)) != _plain(recomputed[key]):
            raise _refuse(f"the manifest's summary field {key!r} is not what its blobs give (recomputed: "
                          f"{json.dumps(_plain(recomputed[key]))[:80]}); the manifest was edited", bundle)
    summary = {**recomputed, "imported_from": f"{a['kind']}:{a['name']}@v{a.get('version')}",
               "license": manifest.get("license")}
    return reg.register_artifact(kind=a["kind"], name=a["name"], benchmark=a["benchmark"], files=files,
                                 inputs=a.get("inputs") or {}, params=a.get("params") or {},
                                 code_version=a.get("code_version", ""), mlflow_run_id=a.get("mlflow_run_id"),
                                 summary=summary, rows=rows)


def _stream_members(bundle: str, manifest: dict, staging: Path) -> dict[str, Path]:
    """Copy each listed member into ``staging`` (named by digest), checking size and digest."""
    import hashlib

    wanted = {f["path"]: f for f in manifest["files"]}
    out, seen = {}, set()
    try:
        with tarfile.open(bundle, "r") as tar:
            for member in tar:
                if member.name in seen:
                    raise _refuse(f"the bundle holds {member.name!r} twice", bundle)
                seen.add(member.name)
                if member.name == "manifest.json":
                    if not member.isfile():
                        raise _refuse("manifest.json is not a regular file", bundle)
                    continue
                if member.name not in wanted or not member.isfile():
                    raise _refuse(f"unexpected member {member.name!r} in the bundle", bundle,
                                  hint="bundles hold manifest.json and the blobs it lists, nothing else")
                f = wanted[member.name]
                dest = staging / f"{hex_of(f['digest'])}.parquet"
                h, size = hashlib.sha256(), 0
                src = tar.extractfile(member)
                with open(dest, "wb") as w:
                    for block in iter(lambda: src.read(1 << 20), b""):
                        h.update(block)
                        size += len(block)
                        w.write(block)
                if size != f["bytes"] or "sha256:" + h.hexdigest() != f["digest"]:
                    raise _refuse(f"{member.name} does not match its digest in the manifest (tampered or truncated)",
                                  bundle)
                out[f["kind"]] = dest
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise _refuse(f"the bundle cannot be unpacked ({type(exc).__name__}: {exc})", bundle,
                      hint="it is truncated or not a tar; fetch it again") from None
    for path, f in wanted.items():
        if f["kind"] not in out:
            raise _refuse(f"{path} is listed in the manifest but is not a member of the bundle", bundle)
    return out


def _read_as_declared(files: dict[str, Path], manifest: dict, bundle: str):
    """Decode every blob with its kind's reader and check that they describe one version."""
    from rscale.store.hardness_file import read_hardness, read_tail_fits
    from rscale.store.sample_stats_file import read_sample_stats

    def decoded(kind, reader):
        try:
            return reader(files[kind])
        except FormatError as exc:
            raise _refuse(f"the file declared as {kind} is not one ({exc.problem})", bundle) from None

    est, info = decoded("hardness", read_hardness)
    qids = info["query_ids"]
    rows = {"hardness": int(est.x.size)}
    v = manifest["version"]
    if est.method != v["estimator"]:
        raise _refuse(f"the manifest says estimator {v['estimator']!r}, the hardness table was made by "
                      f"{est.method!r}", bundle)
    if canonical_digest(est.params) != canonical_digest(v.get("params", {})):
        raise _refuse("the manifest's params differ from those recorded in the hardness table", bundle)
    if "tail" in files:
        tail_q, _fits = decoded("tail", read_tail_fits)
        if not np.array_equal(tail_q, qids):
            raise _refuse("the tail fits do not cover the hardness table's queries (in its order)", bundle)
        rows["tail"] = int(tail_q.size)
    elif np.any(est.rule != "count"):
        raise _refuse("the hardness table took values from tail fits the bundle does not hold", bundle,
                      hint="re-export the version with its tail fits")
    if "sample" in files:
        ss = decoded("sample", read_sample_stats)
        same = (np.array_equal(ss.query_ids, qids) and np.array_equal(ss.pos_offsets, est.offsets)
                and np.array_equal(ss.n_sampled, est.n_sampled) and np.array_equal(ss.pos_counts, info["counts"])
                and np.array_equal(ss.pos_ids, np.asarray(info["positive_ids"].to_pylist(), dtype=str)))
        if not same:
            raise _refuse("the sample stats are not the ones the hardness table was estimated from (queries, "
                          "positives, S or counts differ)", bundle)
        rows["sample"] = int(ss.n_queries)
    return rows


def _plain(x):
    return json.loads(json.dumps(x, sort_keys=True, default=str))


def _check_summary(claimed: dict, recomputed: dict, same_code: bool, bundle: str) -> None:
    for key in sorted(recomputed):
        if key in INFO_FIELDS or (not same_code and key not in COUNT_FIELDS):
            continue
        if _plain(claimed.get(key)) != _plain(recomputed[key]):
            raise _refuse(f"the manifest's summary field {key!r} is not what its blobs give (recomputed: "
                          f"{json.dumps(_plain(recomputed[key]))[:80]}); the manifest was edited", bundle)


def _remove_tree(path: Path) -> None:
    for p in [path, *path.rglob("*")]:
        if p.is_dir():
            os.chmod(p, 0o755)
    shutil.rmtree(path, ignore_errors=True)


def import_bundle(reg: Registry, bundle: str | os.PathLike, *, summarize, code_version: str = "",
                  check_artifact=None, reranked_input=None) -> tuple[Version | Artifact, bool]:
    """Check everything in the bundle (module docstring), then register its version.

    ``summarize(hardness_path, sample_path_or_None, tail_fits=tail_path_or_None) -> dict`` recomputes the registration
    summary (the api layer's); ``code_version`` is this rscale's, to tell whether the manifest's
    statistical summary terms must match exactly; ``check_artifact(artifact_meta, {role: path})
    -> (rows per role, summary)`` reads an artifact bundle's blobs as their roles (the api layer's,
    by kind); ``reranked_input(hardness_path, sample_path, out_path) -> (path, summary) or None``
    rebuilds a version's reranked input from its verified hardness and sample stats (it is derived
    from them, so bundles do not carry it). Returns (version or artifact, created).
    """
    bundle = str(bundle)
    manifest = read_manifest(bundle)
    created_dirs = []
    for d in reversed([reg.root, *reg.root.parents]):
        if not d.exists():
            created_dirs.append(d)
    try:
        reg.root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FormatError(f"cannot create the registry folder ({exc.strerror})", path=str(reg.root)) from None
    try:
        staging = Path(tempfile.mkdtemp(prefix=IMPORT_PREFIX, dir=reg.root))
    except OSError as exc:
        _remove_created(created_dirs)
        raise FormatError(f"cannot write into the registry ({exc.strerror})", path=str(reg.root),
                          hint="import into a registry folder you can write") from None
    ok = False
    try:
        files = _stream_members(bundle, manifest, staging)
        if "artifact" in manifest:
            out = _import_artifact(reg, manifest, files, bundle, check_artifact, code_version)
            ok = True
            return out
        rows = _read_as_declared(files, manifest, bundle)
        v = manifest["version"]
        try:
            recomputed = summarize(files["hardness"], files.get("sample"), tail_fits=files.get("tail"))
        except RscaleError as exc:
            raise _refuse(f"its blobs cannot be summarised ({exc})", bundle) from None
        claimed = manifest.get("summary", {})
        _check_summary(claimed, recomputed, bool(code_version) and v.get("code_version") == code_version, bundle)
        lineage = canonical_digest({"inputs": {"sample": next((f["digest"] for f in manifest["files"]
                                                                if f["kind"] == "sample"), None)},
                                    "estimator": v["estimator"], "params": v.get("params") or {},
                                    "code_version": v.get("code_version", "")})
        if lineage != v["lineage"]:
            raise _refuse("the manifest's lineage digest is not the digest of its inputs, estimator, params and "
                          "code version", bundle)
        summary = {**recomputed, "sample_mlflow_run_id": claimed.get("sample_mlflow_run_id"),
                   "imported_from": f"v{v.get('version')}", "license": manifest.get("license")}
        rerank_file = None
        if reranked_input is not None and files.get("sample"):
            made = reranked_input(files["hardness"], files["sample"], staging / "reranked.parquet")
            if made is not None:
                rerank_file, summary["rerank"] = made
                rows["rerank"] = rows["sample"] * (1 + summary["rerank"]["replicates"])      # one row per set and query
        out = reg.register(backbone=v["backbone"], benchmark=v["benchmark"], source=v["source"],
                           estimator=v["estimator"], hardness_file=files["hardness"],
                           tail_file=files.get("tail"), sample_file=files.get("sample"), rerank_file=rerank_file,
                           params=v.get("params"), code_version=v.get("code_version", ""),
                           mlflow_run_id=v.get("mlflow_run_id"), summary=summary, blob_rows=rows)
        ok = True
        return out
    finally:
        _remove_tree(staging)
        if not ok:
            _remove_created(created_dirs)


def _remove_created(created_dirs) -> None:
    for d in reversed(created_dirs):
        try:
            d.rmdir()                 # only if empty: what this import created and nothing else uses
        except OSError:
            pass


__all__ = ["ARTIFACT_BUNDLE_VERSION", "BUNDLE_VERSION", "export_artifact_bundle", "export_bundle", "import_bundle", "member_name", "read_manifest"]
