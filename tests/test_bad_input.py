"""The bad-input trial table (issue 11): each row is a malformed input a new user could give.

Every row must end the same way: exit code 2, one line on stderr that names the problem (the
file, column or value) and the fix, no traceback, and nothing written: the working folder's
tree (inputs, outputs, the registry, no mlruns.db / mlartifacts) is byte-for-byte unchanged.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rscale.cli import main


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """Valid inputs every row starts from: sample stats, hardness, a registry, a bundle and
    descriptor sets (small), made once."""
    from rscale import api

    root = tmp_path_factory.mktemp("base")
    old_uri = os.environ.get("MLFLOW_TRACKING_URI")
    os.environ["MLFLOW_TRACKING_URI"] = "sqlite:///" + str(tmp_path_factory.mktemp("mlflow") / "mlruns.db")
    try:
        api.simulate_sample_stats("sim_gaussian", root / "ss.parquet", s=200_000, k=300, n_queries=30, seed=0)
        api.estimate(root / "ss.parquet", method="evt", params=[], out=root / "h.parquet")
        api.register(root / "h.parquet", sample_stats=root / "ss.parquet", registry=root / "registry")
        api.export("sim_gaussian@v1", root / "b.tar", registry=root / "registry")
        api.make_descriptor_sets(root / "sets", instances=8, dim=8, positives=2, distractors=3000, seed=0)
    finally:
        if old_uri is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = old_uri
    for p in root.rglob("*.run.json"):          # sidecars name the throw-away MLflow store
        p.unlink()
    # no catalog snapshot: a refused read must not fill it either (it is written only by a
    # command that succeeds, catalog_cache.py)
    (root / "registry" / "catalog.snapshot.json").unlink()
    (root / "afile").write_text("not a folder\n")
    (root / "adir").mkdir()
    return root


# ---- setups: damage a copy of the inputs before the command runs --------------------------------------

def _rewrite_parquet(path: Path, change):
    table = pq.read_table(path)
    pq.write_table(change(table), path)


def _set_meta(path: Path, key: str, value: str):
    def change(table):
        md = dict(table.schema.metadata or {})
        md[key.encode()] = value.encode()
        return table.replace_schema_metadata(md)
    _rewrite_parquet(path, change)


def _set_column(path: Path, name: str, values):
    def change(table):
        i = table.column_names.index(name)
        return table.set_column(i, name, pa.array(values, table.schema.field(name).type)).replace_schema_metadata(
            table.schema.metadata)
    _rewrite_parquet(path, change)


def _rewrite_shard(root: Path, change):
    """Change a descriptor set's first shard; keep the manifest's digests true (``fix_digest``) or stale."""
    vp = root / "shard-00000.npy"
    arr = np.load(vp)
    arr = change(arr.astype(np.float32)).astype(arr.dtype)
    np.save(vp, arr)


def _fix_digest(root: Path):
    from rscale.store.registry import sha256_file
    m = json.loads((root / "manifest.json").read_text())
    m["shards"][0]["sha256_vectors"] = sha256_file(root / "shard-00000.npy")
    (root / "manifest.json").write_text(json.dumps(m, indent=2, sort_keys=True))


def unnormalised(w):
    _rewrite_shard(w / "sets" / "distractors", lambda a: a * 3.0)
    _fix_digest(w / "sets" / "distractors")


def nan_descriptor(w):
    def change(a):
        a[5, 0] = np.nan
        return a
    _rewrite_shard(w / "sets" / "distractors", change)
    _fix_digest(w / "sets" / "distractors")


def stale_digest(w):
    def change(a):
        a = a.copy()
        a[[0, 1]] = a[[1, 0]]            # still unit vectors, other bytes
        return a
    _rewrite_shard(w / "sets" / "distractors", change)


def unknown_query_in_qrels(w):
    t = pq.read_table(w / "sets" / "qrels.parquet")
    extra = pa.table({"query_id": ["nosuchquery"], "positive_id": [t.column("positive_id")[0].as_py()]})
    pq.write_table(pa.concat_tables([t, extra]), w / "sets" / "qrels.parquet")


def delete_blob(w):
    from rscale.store.registry import Registry
    r = Registry(w / "registry")
    p = r.blob_path(r.get("sim_gaussian").tail)
    p.chmod(0o644)
    p.unlink()


SS = "ss.parquet"
H = "h.parquet"
Q = "mAP@1000 at N=1e8 for sim_gaussian"
SCORE = ["score", "--queries", "sets/queries", "--positives", "sets/positives", "--qrels", "sets/qrels.parquet",
         "--distractors", "sets/distractors", "-o", "new.parquet"]
MAKE = ["make-descriptors", "-o", "newsets", "--instances", "4", "--dim", "8", "--distractors", "500"]

# id, argv, setup (damages the copy first) or None, fragments the one-line message must contain
ROWS = [
    # tracebacks before
    ("schema-version-not-int", ["check", "bad.parquet"], lambda w: (shutil.copy(w / SS, w / "bad.parquet"),
     _set_meta(w / "bad.parquet", "rscale.schema_version", "two")), ["bad.parquet", "rscale.schema_version", "'two'"]),
    ("hardness-schema-version-not-int", ["predict", "bad.parquet"],
     lambda w: (shutil.copy(w / H, w / "bad.parquet"), _set_meta(w / "bad.parquet", "rscale.schema_version", "1.x")),
     ["bad.parquet", "rscale.schema_version", "'1.x'", "rscale estimate"]),
    ("meta-not-object", ["check", "bad.parquet"], lambda w: (shutil.copy(w / SS, w / "bad.parquet"),
     _set_meta(w / "bad.parquet", "rscale.meta", "[1, 2]")), ["bad.parquet", "rscale.meta", "JSON object"]),
    ("estimate-param-not-number", ["estimate", SS, "-p", "q=abc", "-o", "new.parquet"], None,
     ["q=abc", "number"]),
    ("estimate-param-unknown", ["estimate", SS, "-p", "qq=0.9", "-o", "new.parquet"], None, ["qq"]),
    # evt's experimental modes were removed (issue 14): the parameter, and what to use instead
    ("estimate-evt-param-removed", ["estimate", SS, "-m", "evt", "-p", "pool_xi=shrink", "-o", "new.parquet"], None,
     ["pool_xi", "-m evt-eb", "shape_average"]),
    ("estimate-evt-posterior-removed", ["estimate", SS, "-m", "evt", "-p", "posterior=true", "-o", "new.parquet"],
     None, ["posterior", "-m evt-eb"]),
    ("estimate-out-is-dir", ["estimate", SS, "-o", "adir"], None, ["--out adir", "folder", "file"]),
    ("predict-huge-cutoff", ["predict", H, "--metric", "mAP@99999999999999999999"], None,
     ["mAP@99999999999999999999", "cut-off"]),
    ("register-registry-is-file", ["register", H, "-r", "afile"], None, ["--registry afile", "folder"]),
    ("query-registry-is-file", ["query", Q, "-r", "afile"], None, ["--registry afile", "folder"]),
    ("import-registry-is-file", ["import", "b.tar", "-r", "afile"], None, ["--registry afile", "folder"]),
    ("export-blob-deleted", ["export", "sim_gaussian@v1", "-o", "x.tar"], delete_blob,
     ["missing", "rscale verify"]),
    ("register-receipt-is-dir", ["register", H, "--receipt", "adir"], None, ["--receipt adir", "folder"]),
    ("score-fraction-nan", SCORE + ["--fraction", "nan"], None, ["fraction", "(0, 1]", "got nan"]),
    ("score-k-zero", SCORE + ["--k", "0"], None, ["k must be", ">= 1", "got 0"]),
    ("score-k-negative", SCORE + ["--k", "-3"], None, ["k must be", ">= 1", "got -3"]),
    ("make-descriptors-hard-share-2", MAKE + ["--hard-share", "2"], None, ["hard_share", "[0, 1]", "got 2"]),
    ("make-descriptors-noise-inverted", MAKE + ["--noise-low", "0.9", "--noise-high", "0.2"], None,
     ["noise", "0 <= low <= high", "low 0.9, high 0.2"]),
    ("make-descriptors-out-is-file", ["make-descriptors", "-o", "afile"], None, ["--out afile", "folder"]),
    ("curve-points-negative", ["curve", "mAP@1000 for sim_gaussian", "--points", "-3", "--format", "json"], None,
     ["--points -3", "from 2"]),
    # accepted before
    ("estimate-format-xml", ["estimate", SS, "--format", "xml"], None, ["'xml'", "--format", "json"]),
    ("ls-format-xml", ["ls", "--format", "xml"], None, ["'xml'", "--format"]),
    ("query-format-xml", ["query", Q, "--format", "xml"], None, ["'xml'", "--format"]),
    ("verify-format-xml", ["verify", "--format", "xml"], None, ["'xml'", "--format"]),
    ("score-format-xml", SCORE + ["--format", "xml"], None, ["'xml'", "--format"]),
    ("score-fraction-1.5", SCORE + ["--fraction", "1.5"], None, ["fraction", "(0, 1]", "got 1.5"]),
    ("score-fraction-0", SCORE + ["--fraction", "0"], None, ["fraction", "(0, 1]", "got 0"]),
    ("make-descriptors-noise-negative", MAKE + ["--noise-low", "-0.1"], None, ["noise", "0 <= low", "low -0.1"]),
    ("query-bootstrap-unbounded", ["query", Q, "--bootstrap", "1000000000"], None,
     ["--bootstrap 1000000000", "0 to 10,000"]),
    ("curve-points-unbounded", ["curve", "mAP@1000 for sim_gaussian", "--points", "100000000", "--format", "json"],
     None, ["--points 100000000", "2 to 1,000"]),
    ("curve-points-zero", ["curve", "mAP@1000 for sim_gaussian", "--points", "0", "--format", "json"], None,
     ["--points 0", "from 2"]),
    ("hardness-n-sampled-negative", ["predict", "bad.parquet"],
     lambda w: (shutil.copy(w / H, w / "bad.parquet"),
                _set_column(w / "bad.parquet", "n_sampled", [-1] * pq.read_metadata(w / H).num_rows)),
     ["bad.parquet", "column 'n_sampled'", "row 0", "-1"]),
    ("score-unnormalised-distractors", SCORE, unnormalised, ["shard-00000.npy", "row 0", "L2-normalised"]),
    ("score-stale-manifest-digest", SCORE, stale_digest, ["shard-00000.npy", "digest", "manifest"]),
    ("score-qrels-unknown-query", SCORE, unknown_query_in_qrels, ["qrels.parquet", "'nosuchquery'", "query set"]),
    ("predict-n-not-whole", ["predict", H, "--n", "1234.5"], None, ["--n 1234.5", "whole number"]),
    ("predict-n-fraction", ["predict", H, "--n", "1.5"], None, ["--n 1.5", "whole number"]),
    ("predict-n-too-large", ["predict", H, "--n", "1e30"], None, ["--n 1e30", "1e15"]),
    ("simulate-s-not-whole", ["simulate", "sim_gaussian", "-o", "new.parquet", "--s", "1e5.5"], None, ["--s 1e5.5"]),
    # wrote on failure before
    ("make-descriptors-no-distractors", MAKE[:-2] + ["--distractors", "0"], None, ["distractors", ">= 1", "got 0"]),
    # messages that misled
    ("score-nan-descriptor", SCORE, nan_descriptor, ["shard-00000.npy", "row 5", "NaN"]),
    ("sample-stats-is-dir", ["check", "adir"], None, ["adir", "folder", "sample-stats"]),
    ("predict-sample-is-dir", ["predict", H, "--sample", "adir"], None, ["adir", "folder"]),
    ("query-unknown-estimator", ["query", Q + " using foo"], None, ["'foo'", "evt", "count"]),
    ("query-control-characters", ["query", Q + " on \x1b[2Jbench"], None, ["\\x1b[2Jbench"]),
    # O2I results in the registry
    ("o2i-register-not-an-o2i-folder", ["o2i", "register", "adir"], None, ["adir", "no manifest.json", "o2i run"]),
    ("o2i-register-registry-is-file", ["o2i", "register", "adir", "-r", "afile"], None, ["--registry afile", "folder"]),
    ("compare-unknown-o2i-result", ["compare", "o2i:nope/baseline", "o2i:nope/gp"], None,
     ["no registered o2i results for 'nope'"]),
    ("export-unknown-o2i-result", ["export", "o2i:nope@v1", "-o", "x.tar"], None, ["o2i", "'nope'"]),
    ("ids-print-plainly", ["check", "bad.parquet"],
     lambda w: (shutil.copy(w / SS, w / "bad.parquet"),
                _set_column(w / "bad.parquet", "n_sampled", [5] * 30)),
     ["bad.parquet", "(query_id 'q", "n_sampled"]),
]


def tree(root: Path) -> dict:
    """Every path under root with its kind, size, mtime and content digest."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_dir():
            out[rel] = "dir"
        else:
            st = p.stat()
            out[rel] = (st.st_size, st.st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
    return out


@pytest.mark.parametrize("argv,setup,fragments", [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_bad_input_is_one_line_exit_2_nothing_written(base, tmp_path, monkeypatch, capsys, argv, setup, fragments):
    work = tmp_path / "w"
    shutil.copytree(base, work)
    if setup is not None:
        setup(work)
    monkeypatch.chdir(work)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)     # a producer run would create ./mlruns.db
    before = tree(work)
    capsys.readouterr()
    try:
        rc = main(list(argv))
    except Exception as exc:                     # a traceback for the user
        pytest.fail(f"raised {type(exc).__name__}: {exc}")
    err = capsys.readouterr().err
    after = tree(work)
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err and "np.str_" not in err
    assert lines[0].isprintable(), lines[0]          # no terminal control characters echoed
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in: {lines[0]}"
    assert after == before, sorted(set(after.items()) ^ set(before.items()))
