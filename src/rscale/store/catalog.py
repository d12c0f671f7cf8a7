"""The DuckDB catalog: what exists, made from what, under which names.

Five tables: ``meta`` (catalog version), ``blobs`` (digest, kind, bytes, rows), ``versions``
(series key, version number, the digests of its hardness / tail fits / sample stats, lineage,
parameters, code version, MLflow run id, summary JSON, and ``row_digest``, the sha256 of the
row's canonical content, which ``rscale verify`` recomputes), ``tags`` and ``artifacts``
(registered results of other kinds, such as per-backbone O2I benchmark results: artifacts.py).
Catalog version 2 added ``row_digest``, version 3 ``artifacts``; an older catalog is read as it
is and migrated (rows sealed, tables added) by the next write. A newer rscale's catalog is
refused, so an older ``rscale gc`` never frees blobs only a newer table references.

DuckDB lets one process hold the file for writing at a time: every connection retries with
back-off while another process holds it, so writers queue up and none fails.
"""

from __future__ import annotations

import json
import random
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from rscale.errors import RegistryError
from rscale.store.hashing import canonical_digest

CATALOG_VERSION = 3
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
ALTER TABLE versions ADD COLUMN IF NOT EXISTS row_digest TEXT;
CREATE TABLE IF NOT EXISTS artifacts (
    kind TEXT NOT NULL, name TEXT NOT NULL, benchmark TEXT NOT NULL, version INTEGER NOT NULL,
    content TEXT NOT NULL, blobs TEXT NOT NULL, lineage TEXT NOT NULL, inputs TEXT, params TEXT,
    code_version TEXT, mlflow_run_id TEXT, summary TEXT, created TIMESTAMP DEFAULT current_timestamp,
    row_digest TEXT NOT NULL,
    PRIMARY KEY (kind, name, benchmark, version));
"""
_COLS = ("v.backbone, v.benchmark, v.source, v.estimator, v.version, v.hardness, v.tail, v.sample, v.lineage, "
         "v.params, v.code_version, v.mlflow_run_id, v.summary, CAST(v.created AS VARCHAR)")
BLOB_KINDS = ("hardness", "tail", "sample")


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
    row_digest: str | None = None                        # None: a row of a version-1 catalog
    sizes: dict = field(default_factory=dict)            # blob kind -> bytes recorded at registration

    @property
    def ref(self) -> str:
        return f"{self.backbone}@v{self.version}"

    @property
    def series(self) -> tuple[str, str, str, str]:
        return (self.backbone, self.benchmark, self.source, self.estimator)

    def content_digest(self) -> str:
        """The digest of what the row says (not its tags, creation time or sizes)."""
        return row_digest(self.series, self.version, {k: getattr(self, k) for k in BLOB_KINDS}, self.lineage,
                          self.params, self.code_version, self.mlflow_run_id, self.summary)

    def sealed(self) -> bool:
        return self.row_digest is not None and self.row_digest == self.content_digest()


def row_digest(series, version, digests, lineage, params, code_version, mlflow_run_id, summary) -> str:
    return canonical_digest({"series": list(series), "version": int(version),
                             "blobs": {k: digests.get(k) for k in BLOB_KINDS}, "lineage": lineage,
                             "params": params or {}, "code_version": code_version or "",
                             "mlflow_run_id": mlflow_run_id, "summary": summary or {}})


def json_object(text) -> dict:
    """A stored JSON object; a damaged one is kept as text (its row digest then fails: verify says so)."""
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {"unreadable": text}
    return value if isinstance(value, dict) else {"unreadable": text}


def insert_blobs(con, entries) -> None:
    """Record blobs (digest, kind, bytes, rows) in the catalog's blob table; known ones are kept."""
    for digest, kind, size, rows in entries:
        con.execute("INSERT INTO blobs (digest, kind, bytes, rows) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                    [digest, kind, size, rows])


class Catalog:
    def __init__(self, path: Path):
        self.path = Path(path)

    @property
    def wal(self) -> Path:
        return self.path.with_name(self.path.name + ".wal")

    def exists(self) -> bool:
        return self.path.exists()

    @contextmanager
    def connect(self, write: bool = False, timeout: float = 60.0):
        import duckdb

        if not write and not self.path.exists():
            raise RegistryError(f"no registry at {self.path.parent} (no catalog.duckdb). Create one with "
                                f"'rscale register ...' or point RSCALE_REGISTRY / --registry at an existing one")
        deadline = time.monotonic() + timeout
        delay = 0.01
        while True:
            try:
                con = duckdb.connect(str(self.path), read_only=not write)
                break
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                    raise RegistryError(f"cannot open {self.path}: {exc}. If it is damaged, restore it from a "
                                        "backup (or re-create the registry and import bundles)") from None
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 0.5)
            except duckdb.Error as exc:
                raise RegistryError(f"{self.path} is not an rscale catalog (or is corrupt: {type(exc).__name__}); "
                                    "restore it from a backup or re-create the registry") from None
        try:
            if not write:
                self.check_version(con)
            yield con
        finally:
            con.close()

    def stored_version(self, con) -> int:
        try:
            row = con.execute("SELECT value FROM meta WHERE key = 'catalog_version'").fetchone()
        except Exception:
            raise RegistryError(f"{self.path} is not an rscale catalog (or is corrupt); "
                                "restore it from a backup or re-create the registry") from None
        return int(row[0]) if row else CATALOG_VERSION

    def check_version(self, con) -> int:
        v = self.stored_version(con)
        if v > CATALOG_VERSION:
            raise RegistryError(f"{self.path} was written by a newer rscale (catalog version {v}); upgrade rscale")
        return v

    @contextmanager
    def transaction(self, before_commit=None):
        """One write transaction: BEGIN, the body, ``before_commit(con)`` under the write lock
        (a registration's check that its blobs are still there), COMMIT; ROLLBACK on any error."""
        with self.connect(write=True) as con:
            con.execute("BEGIN TRANSACTION")
            try:
                yield con
                if before_commit is not None:
                    before_commit(con)
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise

    def init(self) -> None:
        """Create the tables, or migrate an older catalog (seal its rows with their digests)."""
        if not self.path.exists():
            self._create()
        with self.connect(write=True) as con:
            con.execute(_DDL)
            con.execute("INSERT INTO meta VALUES ('catalog_version', ?) ON CONFLICT DO NOTHING",
                        [str(CATALOG_VERSION)])
            if self.check_version(con) < CATALOG_VERSION:
                con.execute("BEGIN TRANSACTION")
                for v in self._rows(con, CATALOG_VERSION):
                    if v.row_digest is None:
                        con.execute("UPDATE versions SET row_digest = ? WHERE backbone=? AND benchmark=? AND "
                                    "source=? AND estimator=? AND version=?",
                                    [v.content_digest(), *v.series, v.version])
                con.execute("UPDATE meta SET value = ? WHERE key = 'catalog_version'", [str(CATALOG_VERSION)])
                con.execute("COMMIT")

    def _create(self) -> None:
        """A new catalog is built under a temporary name and linked into place whole: a writer
        killed while creating it leaves a stray temporary file (gc's to free), never a
        catalog.duckdb without its tables. Two creators race harmlessly: the first link wins."""
        import os

        import duckdb

        self.path.parent.mkdir(parents=True, exist_ok=True)
        from rscale.store.atomic import temp_path

        tmp = temp_path(self.path)
        try:
            con = duckdb.connect(str(tmp))
            try:
                con.execute(_DDL)
                con.execute("INSERT INTO meta VALUES ('catalog_version', ?) ON CONFLICT DO NOTHING",
                            [str(CATALOG_VERSION)])
                con.execute("CHECKPOINT")
            finally:
                con.close()
            try:
                os.link(tmp, self.path)
            except FileExistsError:
                pass                              # another writer created it first
        finally:
            for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
                leftover.unlink(missing_ok=True)

    # -- reading ---------------------------------------------------------------------------
    def read_versions(self) -> list[Version]:
        with self.connect() as con:
            return self._rows(con, self.stored_version(con))

    def _rows(self, con, catalog_version: int) -> list[Version]:
        digest_col = "v.row_digest" if catalog_version >= 2 else "NULL"
        rows = con.execute(f"SELECT {_COLS}, {digest_col} FROM versions v ORDER BY v.backbone, v.benchmark, "
                           "v.source, v.estimator, v.version").fetchall()
        tags = con.execute("SELECT backbone, benchmark, source, estimator, version, tag FROM tags").fetchall()
        sizes = dict(con.execute("SELECT digest, bytes FROM blobs").fetchall())
        tag_map: dict = {}
        for *key, v, tag in tags:
            tag_map.setdefault((*key, v), []).append(tag)
        latest: dict = {}
        for r in rows:
            latest[tuple(r[:4])] = max(latest.get(tuple(r[:4]), 0), int(r[4]))
        out = []
        for (bb, bm, src, est, v, h, t, s, lin, params, code, run, summary, created, rd) in rows:
            v = int(v)
            vtags = tag_map.get((bb, bm, src, est, v), []) + (["latest"] if latest[(bb, bm, src, est)] == v else [])
            blob_sizes = {k: sizes[d] for k, d in (("hardness", h), ("tail", t), ("sample", s)) if d in sizes}
            out.append(Version(bb, bm, src, est, v, h, t, s, lin, json_object(params), code or "", run,
                               json_object(summary), created, tuple(sorted(vtags)), rd, blob_sizes))
        return out

    def blob_rows(self) -> dict[str, tuple[str, int]]:
        """digest -> (kind, bytes) of every blob the catalog records."""
        with self.connect() as con:
            return {d: (k, int(b)) for d, k, b in con.execute("SELECT digest, kind, bytes FROM blobs").fetchall()}

    # -- writing ---------------------------------------------------------------------------
    def add_version(self, key, digests: dict, sizes: dict, rows: dict, *, lineage: str, params, code_version,
                    mlflow_run_id, summary, before_commit=None) -> tuple[int, bool]:
        """Insert a version (or find the one with the same hardness) in one transaction.

        ``before_commit(con)`` runs under the write lock just before COMMIT (the registration's
        check that its blobs are still there). Returns (version number, created).
        """
        with self.transaction(before_commit) as con:
            insert_blobs(con, [(d, kind, sizes[kind], rows.get(kind)) for kind, d in digests.items()])
            same = con.execute(
                "SELECT version FROM versions WHERE backbone=? AND benchmark=? AND source=? AND estimator=? "
                "AND hardness=?", [*key, digests["hardness"]]).fetchone()
            created = same is None
            if created:
                nxt = con.execute(
                    "SELECT coalesce(max(version), 0) + 1 FROM versions WHERE backbone=? AND benchmark=? "
                    "AND source=? AND estimator=?", list(key)).fetchone()[0]
                params_json = json.loads(json.dumps(params or {}, sort_keys=True, default=str))
                summary_json = json.loads(json.dumps(summary or {}, sort_keys=True, default=str))
                rd = row_digest(key, nxt, digests, lineage, params_json, code_version, mlflow_run_id,
                                summary_json)
                con.execute(
                    "INSERT INTO versions (backbone, benchmark, source, estimator, version, hardness, tail, "
                    "sample, lineage, params, code_version, mlflow_run_id, summary, row_digest) "
                    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    [*key, nxt, digests["hardness"], digests.get("tail"), digests.get("sample"), lineage,
                     json.dumps(params_json, sort_keys=True), code_version, mlflow_run_id,
                     json.dumps(summary_json, sort_keys=True), rd])
            else:
                nxt = int(same[0])
        return int(nxt), created

    def set_tag(self, series, tag: str, version: int) -> None:
        with self.connect(write=True) as con:
            con.execute("INSERT OR REPLACE INTO tags VALUES (?, ?, ?, ?, ?, ?)", [*series, tag, version])


__all__ = ["BLOB_KINDS", "CATALOG_VERSION", "Catalog", "Version", "json_object", "row_digest"]
