"""The hardness registry: content-addressed Parquet blobs plus a DuckDB catalog.

Layout of a registry folder::

    catalog.duckdb                      what exists, made from what, under which names
    blobs/sha256/<2 hex>/<64 hex>.parquet   immutable, read-only artifacts (sample stats, hardness,
                                        tail fits), named by the sha256 of their bytes

A *series* is one backbone x benchmark x distractor source x estimator; each registration adds a
version v1, v2, ... to its series, unless the same hardness bytes are already a version of it (then
it is a no-op returning that version). Tags (``released``, or any name) point at a version and
move atomically; ``latest`` is always the highest version.

Writes: a blob is copied to a temporary file in the blob folder, re-hashed, made read-only and
renamed into place (atomic on one filesystem); the catalog rows of a registration are one DuckDB
transaction. DuckDB lets one process hold the catalog for writing at a time, so every connection
retries with back-off while another process holds it (several writers queue up, none fails).
Reading needs only duckdb, pyarrow and numpy.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import lru_cache
from pathlib import Path

import numpy as np

from rscale.errors import NotFoundError, RegistryError

CATALOG_VERSION = 1
SNAPSHOT_FORMAT = "rscale-catalog-snapshot/1"
DEFAULT_ROOT = "registry"
_DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS blobs (
    digest TEXT PRIMARY KEY, kind TEXT NOT NULL, bytes BIGINT NOT NULL, rows BIGINT,
    created TIMESTAMP DEFAULT current_timestamp);
CREATE TABLE IF NOT EXISTS versions (
    backbone TEXT NOT NULL, benchmark TEXT NOT NULL, source TEXT NOT NULL, estimator TEXT NOT NULL,
    version INTEGER NOT NULL,
    hardness TEXT NOT NULL, tail TEXT, sample TEXT,
    lineage TEXT NOT NULL, params TEXT, code_version TEXT, mlflow_run_id TEXT, summary TEXT,
    created TIMESTAMP DEFAULT current_timestamp,
    PRIMARY KEY (backbone, benchmark, source, estimator, version));
CREATE TABLE IF NOT EXISTS tags (
    backbone TEXT NOT NULL, benchmark TEXT NOT NULL, source TEXT NOT NULL, estimator TEXT NOT NULL,
    tag TEXT NOT NULL, version INTEGER NOT NULL,
    PRIMARY KEY (backbone, benchmark, source, estimator, tag));
"""


def sha256_file(path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()


def canonical_digest(obj) -> str:
    """sha256 of the canonical (sorted, compact) JSON of ``obj``: a lineage identity."""
    data = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Version:
    backbone: str
    benchmark: str
    source: str
    estimator: str
    version: int
    hardness: str
    tail: str | None
    sample: str | None
    lineage: str
    params: dict
    code_version: str
    mlflow_run_id: str | None
    summary: dict
    created: str
    tags: tuple[str, ...] = ()

    @property
    def ref(self) -> str:
        return f"{self.backbone}@v{self.version}"

    @property
    def series(self) -> tuple[str, str, str, str]:
        return (self.backbone, self.benchmark, self.source, self.estimator)


_CATALOG_CACHE: dict[str, tuple[tuple, tuple]] = {}   # catalog path -> (file identity, versions)


@lru_cache(maxsize=8)
def _decoded_hardness(path: str, digest: str):
    from rscale.store.hardness_file import read_hardness

    est, info = read_hardness(path)
    for a in [est.x, est.offsets, est.rule, est.n_sampled, est.draws, *est.tail.values(), *info.values()]:
        if isinstance(a, np.ndarray):
            a.flags.writeable = False
    return est, info


class Registry:
    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.catalog = self.root / "catalog.duckdb"
        self.blob_dir = self.root / "blobs" / "sha256"

    # -- opening ---------------------------------------------------------------------------
    @classmethod
    def locate(cls, root: str | os.PathLike | None = None) -> "Registry":
        """The registry at ``root``, else $RSCALE_REGISTRY, else ./registry."""
        return cls(root or os.environ.get("RSCALE_REGISTRY") or DEFAULT_ROOT)

    def exists(self) -> bool:
        return self.catalog.exists()

    def init(self) -> "Registry":
        self.blob_dir.mkdir(parents=True, exist_ok=True)
        with self.connect(write=True) as con:
            con.execute(_DDL)
            con.execute("INSERT INTO meta VALUES ('catalog_version', ?) ON CONFLICT DO NOTHING",
                        [str(CATALOG_VERSION)])
        return self

    @contextmanager
    def connect(self, write: bool = False, timeout: float = 60.0):
        import duckdb

        if not write and not self.catalog.exists():
            raise RegistryError(f"no registry at {self.root} (no catalog.duckdb). Create one with "
                                f"'rscale register ...' or point RSCALE_REGISTRY / --registry at an existing one")
        deadline = time.monotonic() + timeout
        delay = 0.01
        while True:
            try:
                con = duckdb.connect(str(self.catalog), read_only=not write)
                break
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                    raise RegistryError(f"cannot open {self.catalog}: {exc}") from None
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 0.5)
        try:
            if not write:
                self._check_version(con)
            yield con
        finally:
            con.close()

    def _check_version(self, con):
        try:
            row = con.execute("SELECT value FROM meta WHERE key = 'catalog_version'").fetchone()
        except Exception:
            raise RegistryError(f"{self.catalog} is not an rscale catalog (or is corrupt); "
                                "restore it from a backup or re-create the registry") from None
        if row and int(row[0]) > CATALOG_VERSION:
            raise RegistryError(f"{self.catalog} was written by a newer rscale (catalog version {row[0]}); upgrade rscale")

    # -- blobs -----------------------------------------------------------------------------
    def blob_path(self, digest: str) -> Path:
        hexd = digest.split(":", 1)[1]
        return self.blob_dir / hexd[:2] / f"{hexd}.parquet"

    def existing_blob(self, digest: str, owner: str = "") -> Path:
        """The path of a blob that must exist; a clear error when it does not."""
        p = self.blob_path(digest)
        if not p.exists():
            raise RegistryError(f"the blob {digest} of {owner or 'this version'} is missing from {self.root}. "
                                "Run 'rscale verify' and restore it (rscale import BUNDLE, or dvc pull)")
        return p

    def read_hardness(self, v: "Version"):
        """A version's hardness table, decoded: (HardnessEstimate, info). Cached in process by
        digest (blobs are immutable, so a cached table is never stale); arrays are read-only."""
        return _decoded_hardness(str(self.existing_blob(v.hardness, v.ref)), v.hardness)

    def _put_blob(self, src) -> tuple[str, bool]:
        """Copy a file into the blob store (atomic, read-only): (digest, whether this call created it)."""
        digest = sha256_file(src)
        dest = self.blob_path(digest)
        if dest.exists():
            return digest, False
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}-{random.randrange(1 << 30)}")
        try:
            shutil.copyfile(src, tmp)
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            if sha256_file(tmp) != digest:
                raise RegistryError(f"copy of {src} changed while being written; try again")
            os.chmod(tmp, 0o444)
            os.replace(tmp, dest)
        finally:
            if tmp.exists():
                os.chmod(tmp, 0o644)
                tmp.unlink()
        return digest, True

    # -- registration ----------------------------------------------------------------------
    def register(self, *, backbone: str, benchmark: str, source: str, estimator: str,
                 hardness_file, tail_file=None, sample_file=None, params: dict | None = None,
                 code_version: str = "", mlflow_run_id: str | None = None, summary: dict | None = None,
                 blob_rows: dict | None = None) -> tuple[Version, bool]:
        """Add a version (or find the identical one). Returns (version, created)."""
        if not self.exists():
            self.init()
        blob_rows = blob_rows or {}
        files = {"hardness": hardness_file, "tail": tail_file, "sample": sample_file}
        digests, new_blobs = {}, []
        try:
            for kind, f in files.items():
                if f:
                    digests[kind], created = self._put_blob(f)
                    if created:
                        new_blobs.append(digests[kind])
            return self._register_rows(backbone, benchmark, source, estimator, digests, params, code_version,
                                       mlflow_run_id, summary, blob_rows)
        except BaseException:
            # nothing half-done stays behind: blobs this call added and no catalog row references go
            self._drop_unreferenced(new_blobs)
            raise

    def _drop_unreferenced(self, digests):
        if not digests:
            return
        try:
            with self.connect() as con:
                known = {r[0] for r in con.execute("SELECT digest FROM blobs").fetchall()}
        except Exception:
            known = set()
        for d in digests:
            p = self.blob_path(d)
            if d not in known and p.exists():
                os.chmod(p, 0o644)
                p.unlink()

    def _register_rows(self, backbone, benchmark, source, estimator, digests, params, code_version,
                       mlflow_run_id, summary, blob_rows):
        lineage = canonical_digest({"inputs": {"sample": digests.get("sample")}, "estimator": estimator,
                                    "params": params or {}, "code_version": code_version})
        key = (backbone, benchmark, source, estimator)
        with self.connect(write=True) as con:
            con.execute("BEGIN TRANSACTION")
            try:
                for kind, d in digests.items():
                    con.execute("INSERT INTO blobs (digest, kind, bytes, rows) VALUES (?, ?, ?, ?) "
                                "ON CONFLICT DO NOTHING",
                                [d, kind, self.blob_path(d).stat().st_size, blob_rows.get(kind)])
                same = con.execute(
                    "SELECT version FROM versions WHERE backbone=? AND benchmark=? AND source=? AND estimator=? "
                    "AND hardness=?", [*key, digests["hardness"]]).fetchone()
                created = same is None
                if created:
                    nxt = con.execute(
                        "SELECT coalesce(max(version), 0) + 1 FROM versions WHERE backbone=? AND benchmark=? "
                        "AND source=? AND estimator=?", list(key)).fetchone()[0]
                    con.execute(
                        "INSERT INTO versions (backbone, benchmark, source, estimator, version, hardness, tail, "
                        "sample, lineage, params, code_version, mlflow_run_id, summary) "
                        "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                        [*key, nxt, digests["hardness"], digests.get("tail"), digests.get("sample"), lineage,
                         json.dumps(params or {}, sort_keys=True, default=str), code_version, mlflow_run_id,
                         json.dumps(summary or {}, sort_keys=True, default=str)])
                else:
                    nxt = int(same[0])
                con.execute("COMMIT")
            except Exception:
                con.execute("ROLLBACK")
                raise
        return self.get(backbone, f"v{nxt}", benchmark, source, estimator), created

    def tag(self, version: Version, tag: str) -> None:
        if tag == "latest" or tag.startswith("v") and tag[1:].isdigit():
            raise RegistryError(f"'{tag}' is reserved (latest is always the highest version; vN names versions)")
        with self.connect(write=True) as con:
            con.execute("INSERT OR REPLACE INTO tags VALUES (?, ?, ?, ?, ?, ?)", [*version.series, tag, version.version])

    # -- reading ---------------------------------------------------------------------------
    _COLS = ("backbone, benchmark, source, estimator, version, hardness, tail, sample, lineage, params, "
             "code_version, mlflow_run_id, summary, CAST(created AS VARCHAR)")

    def _version(self, row, tags=()) -> Version:
        (bb, bm, src, est, v, h, t, s, lin, params, code, run, summary, created) = row
        return Version(bb, bm, src, est, int(v), h, t, s, lin, json.loads(params or "{}"), code or "", run,
                       json.loads(summary or "{}"), created, tuple(tags))

    def versions(self) -> list[Version]:
        """Every version with its tags.

        Cached, keyed by the catalog's file identity (mtime, size, inode of the file and its WAL):
        in memory for this process, and on disk in ``catalog.snapshot.json`` (derived, written
        atomically, ignored when its key does not match), so a cold ``rscale query`` does not open
        or even import DuckDB while the catalog is unchanged. A catalog modified under 2 s before
        the read is never cached: file times are coarse, and a write in the same tick could leave
        the key unchanged.
        """
        key = self._catalog_key()
        hit = _CATALOG_CACHE.get(str(self.catalog))
        if hit is not None and hit[0] == key:
            return list(hit[1])
        out = self._read_snapshot(key)
        if out is None:
            out = self._read_versions()
            if self._stable(key):
                self._write_snapshot(key, out)
        if self._stable(key):
            _CATALOG_CACHE[str(self.catalog)] = (key, tuple(out))
        return out

    @property
    def snapshot(self) -> Path:
        return self.root / "catalog.snapshot.json"

    @staticmethod
    def _stable(key: tuple) -> bool:
        return key[0] is not None and all(k is None or time.time_ns() - k[0] > 2_000_000_000 for k in key)

    def _read_snapshot(self, key: tuple) -> list[Version] | None:
        try:
            data = json.loads(self.snapshot.read_text())
            if data.get("format") != SNAPSHOT_FORMAT or data.get("key") != json.loads(json.dumps(key)):
                return None
            return [Version(**{**v, "tags": tuple(v["tags"])}) for v in data["versions"]]
        except (OSError, ValueError, TypeError, KeyError):
            return None                                   # absent, stale or damaged: read the catalog

    def _write_snapshot(self, key: tuple, versions: list[Version]) -> None:
        tmp = self.snapshot.with_name(f".{self.snapshot.name}.tmp-{os.getpid()}-{random.randrange(1 << 30)}")
        try:
            tmp.write_text(json.dumps({"format": SNAPSHOT_FORMAT, "key": key,
                                       "versions": [{**v.__dict__, "tags": list(v.tags)} for v in versions]}))
            os.replace(tmp, self.snapshot)
        except OSError:
            tmp.unlink(missing_ok=True)                   # a read-only registry: no snapshot, still correct

    def _catalog_key(self) -> tuple:
        parts = []
        for p in (self.catalog, self.catalog.with_name(self.catalog.name + ".wal")):
            try:
                st = p.stat()
                parts.append((st.st_mtime_ns, st.st_size, st.st_ino))
            except FileNotFoundError:
                parts.append(None)
        return tuple(parts)

    def _read_versions(self) -> list[Version]:
        with self.connect() as con:
            rows = con.execute(f"SELECT {self._COLS} FROM versions ORDER BY backbone, benchmark, source, "
                               "estimator, version").fetchall()
            tags = con.execute("SELECT backbone, benchmark, source, estimator, version, tag FROM tags").fetchall()
        tag_map: dict = {}
        for *key, v, tag in tags:
            tag_map.setdefault((*key, v), []).append(tag)
        out = [self._version(r) for r in rows]
        latest = {}
        for v in out:
            latest[v.series] = max(latest.get(v.series, 0), v.version)
        return [Version(**{**v.__dict__, "tags": tuple(sorted(tag_map.get((*v.series, v.version), [])
                                                              + (["latest"] if latest[v.series] == v.version else [])))})
                for v in out]

    def backbones(self) -> list[str]:
        return sorted({v.backbone for v in self.versions()})

    def resolve(self, name: str, version: str | None = None, benchmark: str | None = None,
                source: str | None = None, estimator: str | None = None,
                catalog: list[Version] | None = None) -> list[Version]:
        """Versions matching a name or glob, a version (vN or tag; default latest) and filters.

        One version per matching series. Unknown names raise NotFoundError with near matches.
        """
        allv = self.versions() if catalog is None else catalog   # pass it to resolve many names at once
        pool = [v for v in allv if fnmatchcase(v.backbone, name)
                and (benchmark is None or v.benchmark == benchmark)
                and (source is None or v.source == source)
                and (estimator is None or v.estimator == estimator)]
        if not pool:
            names = sorted({v.backbone for v in allv})
            from difflib import get_close_matches
            near = get_close_matches(name, names, n=1)
            hint = f" Did you mean '{near[0]}'?" if near else ""
            what = f"backbone '{name}'"
            if any(fnmatchcase(v.backbone, name) for v in allv):
                what += " with " + ", ".join(f"{k} '{val}'" for k, val in
                                             (("benchmark", benchmark), ("source", source), ("estimator", estimator)) if val)
            raise NotFoundError(f"unknown {what} (known: {', '.join(names) or 'none: the registry is empty'}).{hint}")
        want = version or "latest"
        picked, series = [], sorted({v.series for v in pool})
        for key in series:
            cand = [v for v in pool if v.series == key]
            if want.startswith("v") and want[1:].isdigit():
                hit = [v for v in cand if v.version == int(want[1:])]
            else:
                hit = [v for v in cand if want in v.tags]
            if hit:
                picked.append(hit[0])
        if not picked:
            have = sorted({f"v{v.version}" for v in pool} | {t for v in pool for t in v.tags})
            raise NotFoundError(f"{name} has no version '{want}' (has: {', '.join(have)})")
        return picked

    def get(self, name, version=None, benchmark=None, source=None, estimator=None) -> Version:
        found = self.resolve(name, version, benchmark, source, estimator)
        if len(found) > 1:
            opts = "; ".join(f"on {v.benchmark} using {v.estimator} (source {v.source})" for v in found)
            raise NotFoundError(f"'{name}' matches several series: {opts}. Narrow it with on/using")
        return found[0]

    # -- verification ----------------------------------------------------------------------
    def verify(self) -> dict:
        """Re-hash every blob: {'checked', 'corrupt', 'missing', 'extra'} (lists of digests/paths)."""
        with self.connect() as con:
            known = [r[0] for r in con.execute("SELECT digest FROM blobs ORDER BY digest").fetchall()]
        report = {"checked": [], "corrupt": [], "missing": [], "extra": []}
        for d in known:
            p = self.blob_path(d)
            if not p.exists():
                report["missing"].append(d)
            elif sha256_file(p) != d:
                report["corrupt"].append(d)
            else:
                report["checked"].append(d)
        # the derived catalog snapshot must say what the catalog says whenever its key matches
        snap = self._read_snapshot(self._catalog_key())
        if snap is not None and snap != self._read_versions():
            report["corrupt"].append(self.snapshot.name)
        expected = {self.blob_path(d) for d in known}
        if self.blob_dir.exists():
            for p in sorted(self.blob_dir.rglob("*")):
                if p.is_file() and p not in expected:
                    report["extra"].append(str(p.relative_to(self.root)))
        return report
