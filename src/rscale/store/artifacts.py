"""Registered artifacts besides hardness versions: the catalog's ``artifacts`` table.

An artifact is a *kind* (``o2i``: one backbone's results of the controlled O2I benchmark; ``rerank``:
one ``rscale rerank`` output, the reranked lists, per-query metrics and the record of what made them),
a series (name, benchmark) and a version number v1, v2, ... It references blobs by *role* (for
``o2i`` a table name: ``cross_distance``, ``ranks``, ...), stored in the same content-addressed
blob store as hardness tables, under the same rules (blobs.py: written atomically and durably,
read only after the size and sha256 check).

- ``content`` = ``sha256:`` of the canonical JSON of ``{"blobs": {role: digest}}``: the artifact's
  identity. Registering the same content again in its series is a no-op returning that version.
- ``lineage`` = the canonical digest of ``inputs``, the record of what made it (for ``o2i``: the
  run manifest's digest, the renderer and renders digest, each asset's digest, the model weights'
  digest, the parameters and code version).
- ``row_digest`` = the canonical digest of everything the row says except ``created``;
  ``rscale verify`` recomputes it, and readers refuse a row that does not match.

References are ``KIND:NAME[@vN|@latest|@TAG]`` (``o2i:mobilenet_v2_imagenet@v1``); a kind prefix
is not a valid backbone name (names are letters, digits and ``_ . -``), so the forms never clash.

Tags (``rscale tag o2i:NAME@vN released``) are rows of the catalog's one ``tags`` table, set and
resolved as a hardness version's are (Registry.tag, resolution.names_version): an artifact
series is keyed there as backbone ``KIND:NAME`` (its reference, which no hardness backbone can be),
its benchmark, and empty source and estimator.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from rscale.errors import NotFoundError
from rscale.store.catalog import insert_blobs
from rscale.store.catalog import json_object as _obj
from rscale.store.hashing import canonical_digest
from rscale.store.resolution import names_version, version_names

ARTIFACT_KINDS = ("o2i", "rerank")
_COLS = ("kind, name, benchmark, version, content, blobs, lineage, inputs, params, code_version, mlflow_run_id, "
         "summary, CAST(created AS VARCHAR), row_digest")
REF_RE = re.compile(r"(?P<kind>[a-z0-9]+):(?P<name>[A-Za-z0-9_.\-]+)(?:@(?P<version>[A-Za-z0-9_.\-]+))?")


@dataclass(frozen=True)
class Artifact:
    kind: str
    name: str
    benchmark: str
    version: int
    content: str
    blobs: dict                       # role -> digest
    lineage: str
    inputs: dict
    params: dict
    code_version: str
    mlflow_run_id: str | None
    summary: dict
    created: str
    row_digest: str
    sizes: dict = field(default_factory=dict)       # role -> bytes recorded at registration
    tags: tuple[str, ...] = ()                       # its tags, "latest" when it is the highest version

    @property
    def ref(self) -> str:
        return f"{self.kind}:{self.name}@v{self.version}"

    @property
    def series(self) -> tuple[str, str, str]:
        return (self.kind, self.name, self.benchmark)

    @property
    def latest(self) -> bool:
        return "latest" in self.tags

    @property
    def tag_series(self) -> tuple[str, str, str, str]:
        """The key its tags have in the catalog's ``tags`` table (backbone, benchmark, source, estimator)."""
        return tag_series(self.kind, self.name, self.benchmark)

    def content_digest(self) -> str:
        return artifact_row_digest(self.series, self.version, self.content, self.blobs, self.lineage, self.inputs,
                                   self.params, self.code_version, self.mlflow_run_id, self.summary)

    def sealed(self) -> bool:
        return self.row_digest == self.content_digest() and self.content == content_of(self.blobs) \
            and self.lineage == canonical_digest(self.inputs)


def tag_series(kind: str, name: str, benchmark: str) -> tuple[str, str, str, str]:
    return (f"{kind}:{name}", benchmark, "", "")


def content_of(blobs: dict) -> str:
    """An artifact's identity: the digest of its blobs by role."""
    return canonical_digest({"blobs": dict(blobs)})


def artifact_row_digest(series, version, content, blobs, lineage, inputs, params, code_version, mlflow_run_id,
                        summary) -> str:
    return canonical_digest({"series": list(series), "version": int(version), "content": content,
                             "blobs": dict(blobs), "lineage": lineage, "inputs": inputs or {},
                             "params": params or {}, "code_version": code_version or "",
                             "mlflow_run_id": mlflow_run_id, "summary": summary or {}})


def blob_kind(kind: str, role: str) -> str:
    """The ``blobs`` table's kind of an artifact blob: ``o2i.cross_distance``."""
    return f"{kind}.{role}"


def _plain(x):
    return json.loads(json.dumps(x or {}, sort_keys=True, default=str))


def has_table(con) -> bool:
    return bool(con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'artifacts'").fetchone()[0])


def read_artifacts(catalog) -> list[Artifact]:
    """Every artifact row (sorted by series and version); none in a catalog older than version 3."""
    with catalog.connect() as con:
        if not has_table(con):
            return []
        rows = con.execute(f"SELECT {_COLS} FROM artifacts ORDER BY kind, name, benchmark, version").fetchall()
        sizes = dict(con.execute("SELECT digest, bytes FROM blobs").fetchall())
        tag_rows = con.execute("SELECT backbone, benchmark, source, estimator, version, tag FROM tags").fetchall()
    tagged: dict = {}
    for *key, v, tag in tag_rows:
        tagged.setdefault((*key, int(v)), []).append(tag)
    latest: dict = {}
    for r in rows:
        latest[tuple(r[:3])] = max(latest.get(tuple(r[:3]), 0), int(r[3]))
    out = []
    for kind, name, bench, v, content, blobs, lin, inputs, params, code, run, summary, created, rd in rows:
        blobs = _obj(blobs)
        tags = tagged.get((*tag_series(kind, name, bench), int(v)), []) + \
            (["latest"] if latest[(kind, name, bench)] == int(v) else [])
        out.append(Artifact(kind, name, bench, int(v), content, blobs, lin, _obj(inputs), _obj(params), code or "",
                            run, _obj(summary), created, rd,
                            {role: sizes[d] for role, d in blobs.items() if isinstance(d, str) and d in sizes},
                            tuple(sorted(tags))))
    return out


def artifact_digests(con) -> set[str]:
    """Every blob digest an artifact row references (inside a connection: gc's lock)."""
    if not has_table(con):
        return set()
    out = set()
    for (blobs,) in con.execute("SELECT blobs FROM artifacts").fetchall():
        out.update(d for d in _obj(blobs).values() if isinstance(d, str))
    return out


def add_artifact(catalog, key, blobs: dict, sizes: dict, rows: dict, *, inputs: dict, params, code_version: str,
                 mlflow_run_id, summary, before_commit=None) -> tuple[int, bool]:
    """Insert an artifact version (or find the one with the same content) in one transaction;
    ``before_commit(con)`` runs under the write lock just before COMMIT. Returns (version, created)."""
    kind = key[0]
    content = content_of(blobs)
    inputs, params, summary = _plain(inputs), _plain(params), _plain(summary)
    lineage = canonical_digest(inputs)
    with catalog.transaction(before_commit) as con:
        insert_blobs(con, [(d, blob_kind(kind, role), sizes[role], rows.get(role)) for role, d in sorted(blobs.items())])
        same = con.execute("SELECT version FROM artifacts WHERE kind=? AND name=? AND benchmark=? AND content=?",
                           [*key, content]).fetchone()
        created = same is None
        if created:
            nxt = int(con.execute("SELECT coalesce(max(version), 0) + 1 FROM artifacts WHERE kind=? AND name=? "
                                  "AND benchmark=?", list(key)).fetchone()[0])
            rd = artifact_row_digest(key, nxt, content, blobs, lineage, inputs, params, code_version,
                                     mlflow_run_id, summary)
            con.execute("INSERT INTO artifacts (kind, name, benchmark, version, content, blobs, lineage, inputs, "
                        "params, code_version, mlflow_run_id, summary, row_digest) "
                        "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                        [*key, nxt, content, json.dumps(dict(blobs), sort_keys=True), lineage,
                         json.dumps(inputs, sort_keys=True), json.dumps(params, sort_keys=True), code_version,
                         mlflow_run_id, json.dumps(summary, sort_keys=True), rd])
        else:
            nxt = int(same[0])
    return nxt, created


def parse_ref(text: str) -> tuple[str, str, str | None] | None:
    """``KIND:NAME[@VERSION]`` -> (kind, name, version or None); None when ``text`` is not one."""
    m = REF_RE.fullmatch(text or "")
    if m is None or m["kind"] not in ARTIFACT_KINDS:
        return None
    return m["kind"], m["name"], m["version"]


def resolve_artifact(artifacts: list[Artifact], kind: str, name: str, version: str | None = None,
                     benchmark: str | None = None) -> Artifact:
    """One artifact: a name (no glob), a version (vN or a tag; latest, the default) and optionally a benchmark."""
    from difflib import get_close_matches

    pool = [a for a in artifacts if a.kind == kind and a.name == name and (benchmark is None or a.benchmark == benchmark)]
    if not pool:
        names = sorted({a.name for a in artifacts if a.kind == kind})
        near = get_close_matches(name, names, n=1)
        raise NotFoundError(f"no registered {kind} results for '{name}' (known: {', '.join(names) or 'none'})."
                            + (f" Did you mean '{kind}:{near[0]}'?" if near else ""))
    want = version or "latest"
    hit = [a for a in pool if names_version(a, want)]
    if not hit:
        raise NotFoundError(f"{kind}:{name} has no version '{want}' (has: {', '.join(version_names(pool))})")
    if len(hit) > 1:
        raise NotFoundError(f"{kind}:{name}@{want} is in several benchmarks ({', '.join(a.benchmark for a in hit)}); "
                            "name one with --on")
    return hit[0]


__all__ = ["ARTIFACT_KINDS", "Artifact", "add_artifact", "artifact_digests", "artifact_row_digest", "blob_kind",
           "content_of", "parse_ref", "read_artifacts", "resolve_artifact", "tag_series"]
