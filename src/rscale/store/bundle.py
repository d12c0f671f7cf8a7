"""Shareable bundles: one tar holding a version's blobs and a manifest that can vouch for them.

Layout of a bundle (uncompressed tar)::

    manifest.json                 sorted JSON: schema version, rscale version, license, the version's
                                  identity and lineage, summary stats, and every file with its
                                  sha256, size, kind and row count
    blobs/<64 hex>.parquet        the files, named by digest

Import extracts into a private temporary folder inside the target registry (tarfile's ``data``
filter: no absolute paths, no ``..``, no links or devices), checks every file's size and digest
against the manifest, and only then copies the blobs in and adds the catalog rows (one
transaction, a no-op when the same content is already registered). A tampered, truncated or
foreign bundle is refused before anything becomes visible.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import tempfile
from pathlib import Path

from rscale.errors import FormatError, SchemaVersionError
from rscale.store.registry import Registry, Version, sha256_file

BUNDLE_VERSION = 1


def export_bundle(reg: Registry, version: Version, out: str | os.PathLike, license: str = "unspecified") -> Path:
    out = Path(out)
    files = []
    for kind in ("hardness", "tail", "sample"):
        digest = getattr(version, kind)
        if not digest:
            continue
        path = reg.blob_path(digest)
        files.append({"kind": kind, "digest": digest, "bytes": path.stat().st_size,
                      "path": f"blobs/{digest.split(':', 1)[1]}.parquet"})
    manifest = {
        "format": "rscale-bundle", "bundle_version": BUNDLE_VERSION, "license": license,
        "version": {"backbone": version.backbone, "benchmark": version.benchmark, "source": version.source,
                    "estimator": version.estimator, "version": version.version, "lineage": version.lineage,
                    "params": version.params, "code_version": version.code_version,
                    "mlflow_run_id": version.mlflow_run_id, "created": version.created},
        "summary": version.summary, "files": files,
    }
    from rscale import __version__
    manifest["rscale_version"] = __version__
    data = json.dumps(manifest, sort_keys=True, indent=2).encode()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    try:
        with tarfile.open(tmp, "w") as tar:
            info = tarfile.TarInfo("manifest.json")
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
            for f in files:
                tar.add(reg.blob_path(f["digest"]), arcname=f["path"], recursive=False)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return out


def read_manifest(bundle: str | os.PathLike) -> dict:
    try:
        with tarfile.open(bundle, "r") as tar:
            member = tar.getmember("manifest.json")
            manifest = json.load(tar.extractfile(member))
    except (tarfile.TarError, KeyError, OSError, json.JSONDecodeError) as exc:
        raise FormatError(f"not a readable rscale bundle ({type(exc).__name__}: {exc})", path=str(bundle),
                          hint="re-export it with 'rscale export'") from None
    if manifest.get("format") != "rscale-bundle":
        raise FormatError("not an rscale bundle (manifest format is missing)", path=str(bundle))
    if int(manifest.get("bundle_version", 0)) > BUNDLE_VERSION:
        raise SchemaVersionError(f"bundle version {manifest['bundle_version']} is newer than this rscale reads "
                                 f"({BUNDLE_VERSION})", path=str(bundle), hint="upgrade rscale")
    return manifest


def import_bundle(reg: Registry, bundle: str | os.PathLike) -> tuple[Version, bool]:
    """Verify every file of the bundle, then register its version. Returns (version, created)."""
    bundle = str(bundle)
    manifest = read_manifest(bundle)
    files = manifest.get("files", [])
    allowed = {"manifest.json"} | {f["path"] for f in files}
    reg.root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".import-", dir=reg.root) as tmpdir:
        try:
            with tarfile.open(bundle, "r") as tar:
                for member in tar.getmembers():
                    if member.name not in allowed or not member.isfile():
                        raise FormatError(f"unexpected member {member.name!r} in the bundle", path=bundle,
                                          hint="bundles hold manifest.json and the blobs it lists, nothing else")
                tar.extractall(tmpdir, filter="data")
        except tarfile.TarError as exc:
            raise FormatError(f"the bundle cannot be unpacked ({exc})", path=bundle,
                              hint="it is truncated or not a tar; fetch it again") from None
        by_kind = {}
        for f in files:
            p = Path(tmpdir) / f["path"]
            if not p.exists():
                raise FormatError(f"{f['path']} is listed in the manifest but missing", path=bundle)
            if p.stat().st_size != f["bytes"] or sha256_file(p) != f["digest"]:
                raise FormatError(f"{f['path']} does not match its digest in the manifest (tampered or truncated)",
                                  path=bundle, hint="nothing was imported; fetch the bundle again")
            by_kind[f["kind"]] = p
        if "hardness" not in by_kind:
            raise FormatError("the bundle has no hardness file", path=bundle)
        v = manifest["version"]
        return reg.register(backbone=v["backbone"], benchmark=v["benchmark"], source=v["source"],
                            estimator=v["estimator"], hardness_file=by_kind["hardness"],
                            tail_file=by_kind.get("tail"), sample_file=by_kind.get("sample"),
                            params=v.get("params"), code_version=v.get("code_version", ""),
                            mlflow_run_id=v.get("mlflow_run_id"),
                            summary={**manifest.get("summary", {}), "imported_from": f"v{v['version']}",
                                     "license": manifest.get("license")})


__all__ = ["export_bundle", "import_bundle", "read_manifest"]
