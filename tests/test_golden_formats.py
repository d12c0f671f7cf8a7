"""Golden files (tests/golden/): a catalog of each version and a bundle written by an earlier
rscale must keep loading with their recorded digests and decoded values, so a writer and a
reader changed together cannot drift unnoticed."""

import gzip
import shutil
from pathlib import Path

import numpy as np
import pytest

from rscale import api
from rscale.store.bundle import read_manifest
from rscale.store.registry import Registry

GOLDEN = Path(__file__).parent / "golden"
HARDNESS = "sha256:ff285c38b6c18e28eda9fcef9a27d5a9e92663bf7e1adf766395a2d203e5daef"
TAIL = "sha256:2d9f334a19ab81b78a7648454cd88c35ac3e50be582df4436427f5dd445b084c"
SAMPLE = "sha256:0a82504ae97d38ee3d93147ffcd9562b9163064938d4bf96a8f51e60dbf734bb"
LINEAGE_V1 = "sha256:7b766358d3e356ee656e45b8b40da693ced20b54dc88c906bb1f8c7270095bbc"
ROW_DIGEST_V2 = "sha256:2c9050460947dae21063147da34b9b8104bab7b37233231b0b572f270d2934c5"
SERIES = ("sim_gaussian", "sim-ilias", "sim:gaussian", "evt")


def unpack(tmp_path, catalog_version):
    root = tmp_path / f"reg-v{catalog_version}"
    shutil.copytree(GOLDEN / "catalog-v1" / "blobs", root / "blobs")
    with gzip.open(GOLDEN / f"catalog-v{catalog_version}" / "catalog.duckdb.gz") as src, \
            open(root / "catalog.duckdb", "wb") as dst:
        shutil.copyfileobj(src, dst)
    return root


def check_decoded(reg, v):
    assert (v.hardness, v.tail, v.sample) == (HARDNESS, TAIL, SAMPLE)
    assert v.series == SERIES and v.version == 1 and v.tags == ("latest",)
    assert v.summary["queries"] == 12 and v.summary["positives"] == 48 and v.summary["S_max"] == 20000
    est, info = reg.read_hardness(v)
    assert est.offsets.tolist() == [0, 5, 10, 11, 17, 20, 23, 28, 31, 38, 41, 44, 48]
    assert float(est.x.sum()) == pytest.approx(4.255221965621643, rel=1e-12)
    assert dict(zip(*np.unique(est.rule, return_counts=True))) == {"count": 21, "endpoint": 11, "tail": 16}
    assert info["query_ids"][0] == "q00000" and est.method == "evt"
    ss = reg.read_sample(v)
    assert ss.n_queries == 12 and int(ss.n_sampled[0]) == 20000


def test_catalog_version_1_loads_and_is_sealed_by_the_next_write(tmp_path):
    root = unpack(tmp_path, 1)
    reg = Registry(root)
    (v,) = reg.versions()
    assert v.lineage == LINEAGE_V1 and v.row_digest is None and v.code_version == "rscale 0.1.0 git f7770ef294e7"
    check_decoded(reg, v)
    report = reg.verify()
    assert sorted(report["checked"]) == sorted([HARDNESS, TAIL, SAMPLE])
    assert report["unsealed"] == ["sim_gaussian@v1 [sim_gaussian/sim-ilias/sim:gaussian/evt]"]
    assert report["corrupt"] == report["missing"] == report["extra"] == []
    reg.init()                                           # any write migrates: rows get their digests
    (v2,) = Registry(root).versions()
    assert v2.sealed() and reg.verify()["unsealed"] == []


def test_catalog_version_2_loads_with_its_row_digest(tmp_path):
    root = unpack(tmp_path, 2)
    reg = Registry(root)
    (v,) = reg.versions()
    assert v.row_digest == ROW_DIGEST_V2 and v.sealed()
    assert v.sizes == {"hardness": 3904, "tail": 4557, "sample": 9174}
    check_decoded(reg, v)
    report = reg.verify()
    assert report["corrupt"] == report["unsealed"] == [] and len(report["checked"]) == 3


def test_bundle_version_1_manifest_and_import(tmp_path):
    bundle = GOLDEN / "bundle-v1.tar"
    m = read_manifest(bundle)
    assert m["bundle_version"] == 1 and m["license"] == "CC-BY-4.0" and m["rscale_version"] == "0.1.0"
    assert {f["kind"]: (f["digest"], f["bytes"]) for f in m["files"]} == {
        "hardness": (HARDNESS, 3904), "tail": (TAIL, 4557), "sample": (SAMPLE, 9174)}
    assert m["version"]["lineage"] == LINEAGE_V1 and m["summary"]["S_max"] == 20000
    v, created = api.import_(bundle, tmp_path / "dst")
    assert created and v.lineage == LINEAGE_V1 and v.summary["license"] == "CC-BY-4.0"
    check_decoded(Registry(tmp_path / "dst"), v)
