"""The O2I benchmark's result tables as registry blobs: one backbone's slice of each table.

``rscale o2i run`` writes eight tables for all its backbones (``tables/<name>-<sha prefix>.parquet``,
Parquet metadata ``rscale.format = o2i-<name>``, a ``backbone`` column). The registry stores one
*slice* per backbone and table, in a canonical form, so that a backbone's results have the same
bytes (and digests) whichever other backbones shared its run:

- the rows whose ``backbone`` is that backbone, in the run table's order;
- the columns that hold at least one value in those rows, in the run table's column order, each
  typed from its values alone (a column only another backbone fills is dropped);
- metadata ``rscale.format = o2i-<name>``, ``rscale.schema_version = 1``, ``rscale.backbone``.

:func:`read_result_table` reads a slice (or a run table) back and checks it is what it claims:
the format key, the schema version, the columns the analyses need, and one backbone.
"""

from __future__ import annotations

from pathlib import Path

from rscale.errors import FormatError, SchemaVersionError

SCHEMA_VERSION = 1
# table -> the columns the registry's readers (report, compare) rely on, besides `backbone`
TABLES = {
    "cross_distance": ("d_q", "d_t", "ratio", "R@1", "R@5", "R@10", "MRR"),
    "recall_by_ratio": ("ratio", "R@1", "pairs"),
    "decomposition": ("d_q", "d_t", "alpha", "beta", "gamma", "delta", "epsilon"),
    "canvas": ("size_a", "size_b", "cosine"),
    "asymmetry": ("magnitude", "mrr_tight_query", "mrr_wide_query", "difference"),
    "asymmetry_test": ("mrr_tight_query", "mrr_wide_query", "difference", "favoured", "ci_low", "ci_high",
                       "p_value", "test", "objects"),
    "interventions": ("intervention", "status"),
    "ranks": ("condition", "object_id", "d_q", "d_t", "rank"),
}


def backbone_slice(table, name: str, backbone: str):
    """One backbone's rows of a run table, in the canonical form above (a pyarrow Table)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    cols = {}
    if table.num_rows and "backbone" in table.column_names:
        sel = table.filter(pc.equal(table.column("backbone"), backbone))
        for c in sel.column_names:
            values = sel.column(c).to_pylist()          # typed from the slice's own values
            if any(v is not None for v in values):
                cols[c] = pa.array(values)
    out = pa.table(cols) if cols else pa.table({})
    return out.replace_schema_metadata({"rscale.format": f"o2i-{name}", "rscale.schema_version": str(SCHEMA_VERSION),
                                        "rscale.backbone": backbone})


def write_slice(table, path) -> Path:
    import pyarrow.parquet as pq

    pq.write_table(table, path)
    return Path(path)


def read_result_table(path, name: str, *, backbone: str | None = None, where: str | None = None):
    """A result table checked against its declared name: format, schema version, the columns in
    ``TABLES[name]``, rows of ``backbone`` only (when given). FormatError naming ``where`` otherwise."""
    import pyarrow.parquet as pq

    where = where or str(path)
    try:
        table = pq.read_table(path)
    except Exception as exc:             # pyarrow raises several types for a file that is not Parquet
        raise FormatError(f"not a readable Parquet table ({type(exc).__name__})", path=where) from None
    md = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    if md.get("rscale.format") != f"o2i-{name}":
        raise FormatError(f"not the O2I {name} table (rscale.format {md.get('rscale.format')!r})", path=where)
    version = int(md.get("rscale.schema_version", "1") or 1)
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(f"O2I table schema version {version} is newer than this rscale reads "
                                 f"({SCHEMA_VERSION})", path=where, hint="upgrade rscale")
    missing = [c for c in ("backbone", *TABLES[name]) if c not in table.column_names]
    if missing and table.num_rows:
        raise FormatError(f"the O2I {name} table lacks column(s) {missing}", path=where)
    if backbone is not None:
        others = sorted(set(table.column("backbone").to_pylist()) - {backbone}) if table.num_rows else []
        if others or md.get("rscale.backbone", backbone) != backbone:
            raise FormatError(f"the O2I {name} table of {backbone!r} holds rows of {others or md.get('rscale.backbone')}",
                              path=where)
    return table


__all__ = ["SCHEMA_VERSION", "TABLES", "backbone_slice", "read_result_table", "write_slice"]
