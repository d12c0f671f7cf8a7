"""O2I results in the registry: `rscale o2i register` / `o2i run --registry` on tiny runs (64 px
renders, a tiny random MobileNetV2 and ViT), read back by verify, report, compare, gc and bundles,
and refused when the folder, a stored table, a catalog row or a bundle is not what it claims."""

import gzip
import hashlib
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pybullet")
pytest.importorskip("torch")
pytest.importorskip("transformers")
pq = pytest.importorskip("pyarrow.parquet")

sys.path.insert(0, str(Path(__file__).parent))
from cli_checks import one_line_exit_2  # noqa: E402
from test_o2i_pipeline import section, tiny_mobilenet, tiny_vit  # noqa: E402

from rscale.api import o2i as api_o2i  # noqa: E402
from rscale.api.o2i_registry import register_o2i  # noqa: E402
from rscale.cli import main  # noqa: E402
from rscale.store.hashing import canonical_digest  # noqa: E402
from rscale.store.o2i_results import TABLES  # noqa: E402
from rscale.store.registry import CATALOG_VERSION, Registry, clear_caches  # noqa: E402

GOLDEN = Path(__file__).parent / "golden"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Run A: backbone mb (its run-id sidecar as an MLflow run writes it: the real MLflow path runs in
    test_o2i_run_with_registry_...); run B: vit and mb over the same renders and cache."""
    from rscale.store.run_sidecar import write_run_sidecar
    tmp = tmp_path_factory.mktemp("o2ireg")
    mb, vit = tiny_mobilenet(tmp / "mb"), tiny_vit(tmp / "vit")
    a = api_o2i.run_o2i(api_o2i.load_o2i_config(section=section(
        tmp, [{"name": "mb", "model": str(mb), "pooling": "pooled"}], objects=3)), tmp / "a", progress=False,
        lineage=False)
    write_run_sidecar(a.out / "manifest.json", "o2i", "0f1e2d3c4b5a69788796a5b4c3d2e1f0")
    b = api_o2i.run_o2i(api_o2i.load_o2i_config(section=section(
        tmp, [{"name": "vit", "model": str(vit), "pooling": "cls"}, {"name": "mb", "model": str(mb),
                                                                       "pooling": "pooled"}], objects=3)),
        tmp / "b", progress=False, lineage=False)
    return {"tmp": tmp, "a": a.out, "b": b.out, "mb": mb, "vit": vit}


def run_rows(out, name, backbone):
    """A run table's rows of one backbone, read straight from the output folder."""
    man = api_o2i.read_manifest(out)
    rows = pq.read_table(Path(out) / "tables" / man["tables"][name]["file"]).to_pylist()
    return [r for r in rows if r["backbone"] == backbone]


def tree(root: Path) -> dict:
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(root.rglob("*")) if p.is_file()}


def same_values(stored: list, expected: list) -> bool:
    """Row lists equal up to empty cells (a column only other backbones fill is not stored)."""
    def filled(r):
        return {k: v for k, v in r.items() if v is not None}
    return len(stored) == len(expected) and all(filled(s) == filled(e) for s, e in zip(stored, expected))


def test_register_stores_each_table_with_lineage_and_is_idempotent(runs, tmp_path, capsys):
    reg_dir = tmp_path / "reg"
    assert main(["o2i", "register", str(runs["a"]), "-r", str(reg_dir), "--format", "json"]) == 0
    [res] = json.loads(capsys.readouterr().out)["results"]
    assert res["ref"] == "o2i:mb@v1" and res["created"] and res["series"] == "o2i/mb/o2i"
    reg = Registry(reg_dir)
    [a] = reg.artifacts("o2i")
    from rscale.api.o2i_registry import read_tables
    stored = read_tables(reg, a)
    assert set(stored) == set(TABLES)
    for name in TABLES:                       # every stored slice holds exactly the run's rows of mb
        assert same_values(stored[name], run_rows(runs["a"], name, "mb")), name
    man = api_o2i.read_manifest(runs["a"])
    inp = a.inputs
    assert inp["renders"] == man["renders"]["digest"] and inp["renderer"] == man["renders"]["renderer"]
    assert inp["model"]["weights"] == man["backbones"]["mb"]["weights"]
    assert {k: v["digest"] for k, v in inp["assets"].items()} == {k: v["digest"] for k, v in man["assets"].items()}
    from rscale.store.hashing import sha256_file
    assert inp["run"]["manifest"] == sha256_file(runs["a"] / "manifest.json")
    assert inp["run"]["tables"] == {n: t["sha256"] for n, t in man["tables"].items()}
    assert a.lineage == canonical_digest(inp) and a.sealed()
    from rscale.store.run_sidecar import read_run_id
    assert a.mlflow_run_id == read_run_id(runs["a"] / "manifest.json") == "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
    assert [b["name"] for b in a.params["backbones"]] == ["mb"] and a.params["objects"] == 3
    assert a.summary["objects"] == 3 and a.summary["pairs"] == 12
    assert a.summary["mean_R@1"] == pytest.approx(np.mean([r["R@1"] for r in run_rows(runs["a"], "cross_distance", "mb")]))
    # the same content again: a no-op, the catalog unchanged
    before = (reg_dir / "catalog.duckdb").read_bytes()
    assert main(["o2i", "register", str(runs["a"]), "-r", str(reg_dir)]) == 0
    assert "already registered (no change): o2i:mb@v1" in capsys.readouterr().out
    assert (reg_dir / "catalog.duckdb").read_bytes() == before
    report = reg.verify()
    assert sorted(report["checked"]) == sorted(a.blobs.values()) and not report["corrupt"] + report["missing"]
    assert main(["lineage", "o2i:mb@v1", "-r", str(reg_dir)]) == 0
    lin = json.loads(capsys.readouterr().out)
    assert lin["inputs"] == inp and lin["lineage"] == a.lineage and lin["mlflow_run_id"] == a.mlflow_run_id
    assert {r: o["digest"] for r, o in lin["outputs"].items()} == a.blobs
    assert main(["show", "o2i:mb", "-r", str(reg_dir)]) == 0
    assert json.loads(capsys.readouterr().out)["content"] == a.content


def test_adding_a_backbone_adds_one_version_the_unchanged_one_is_a_no_op(runs, tmp_path):
    reg = tmp_path / "reg"
    register_o2i(runs["a"], registry=reg)
    out = {r["ref"]: r["created"] for r in register_o2i(runs["b"], registry=reg)["results"]}
    # mb's results in run B (beside vit, listed second) are byte-identical slices of the same numbers
    assert out == {"o2i:mb@v1": False, "o2i:vit@v1": True}
    assert sorted(a.ref for a in Registry(reg).artifacts()) == ["o2i:mb@v1", "o2i:vit@v1"]


def test_report_shows_o2i_results_next_to_hardness_versions(runs, tmp_path, capsys):
    """A catalog of version 2 (golden: one hardness version) gains the O2I results; report shows both,
    with the numbers of the run's own tables."""
    root = tmp_path / "reg"
    shutil.copytree(GOLDEN / "catalog-v1" / "blobs", root / "blobs")
    with gzip.open(GOLDEN / "catalog-v2" / "catalog.duckdb.gz") as src, open(root / "catalog.duckdb", "wb") as dst:
        shutil.copyfileobj(src, dst)
    register_o2i(runs["b"], registry=root)
    reg = Registry(root)
    with reg.connect() as con:
        assert con.execute("SELECT value FROM meta WHERE key = 'catalog_version'").fetchone()[0] == str(CATALOG_VERSION)
    assert [v.ref for v in reg.versions()] == ["sim_gaussian@v1"] and reg.versions()[0].sealed()
    assert main(["report", "-r", str(root), "--n", "1e6"]) == 0
    text = capsys.readouterr().out
    assert "| sim_gaussian | sim-ilias | evt | v1 |" in text and "## O2I benchmark (registered results)" in text
    for b in ("mb", "vit"):
        cd = run_rows(runs["b"], "cross_distance", b)
        [t] = run_rows(runs["b"], "asymmetry_test", b)
        assert f"| o2i:{b}@v1 | 12 | {np.mean([r['R@1'] for r in cd]):.3f} | {np.mean([r['MRR'] for r in cd]):.3f} |" \
            in text
        assert f"| o2i:{b}@v1 | {t['mrr_tight_query']:.3f} | {t['mrr_wide_query']:.3f} | {t['difference']:+.3f} |" in text
        assert f"{t['p_value']:.3g} | {t['favoured']} |" in text
        for iv in ("gp", "box_crop", "alpha_qe"):
            rows = [r for r in run_rows(runs["b"], "interventions", b) if r["intervention"] == iv]
            sig = sum(r["R@1_p_holm"] < 0.05 for r in rows)
            assert f"| o2i:{b}@v1 | {iv} | 12 | {np.mean([r['R@1_gain'] for r in rows]):+.3f} | {sig} (" in text
    assert "| o2i:vit@v1 | msa | 12 |" in text and "| o2i:mb@v1 | msa | - | not applicable" in text
    cv = {(r["size_a"], r["size_b"]): r["cosine"] for r in run_rows(runs["b"], "canvas", "mb")}
    assert f"| 64 | {cv[(64, 64)]:.3f} | {cv[(64, 96)]:.3f} | {cv[(64, 128)]:.3f} |" in text
    assert reg.verify()["corrupt"] == []


def test_compare_takes_a_registered_o2i_result(runs, tmp_path, capsys):
    reg = tmp_path / "reg"
    register_o2i(runs["a"], registry=reg)
    assert main(["compare", "o2i:mb/baseline", "o2i:mb@v1/gp", "-r", str(reg), "--format", "json"]) == 0
    from_registry = json.loads(capsys.readouterr().out)
    assert main(["compare", f"{runs['a']}#mb/baseline", f"{runs['a']}#mb/gp", "--format", "json"]) == 0
    from_folder = json.loads(capsys.readouterr().out)
    assert from_registry["measures"] == from_folder["measures"] and from_registry["queries"] == 36
    assert main(["compare", "o2i:mb/nope", "o2i:mb/gp", "-r", str(reg)]) == 2
    assert "has no condition 'nope'" in capsys.readouterr().err


def test_a_tampered_table_or_row_is_refused_by_verify_report_and_compare(runs, tmp_path, capsys):
    reg_dir = tmp_path / "reg"
    register_o2i(runs["a"], registry=reg_dir)
    reg = Registry(reg_dir)
    [a] = reg.artifacts("o2i")
    assert main(["report", "-r", str(reg_dir)]) == 0           # read (and cached as verified) once
    capsys.readouterr()
    blob = reg.blob_path(a.blobs["cross_distance"])
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.chmod(0o644)
    blob.write_bytes(bytes(data))
    blob.chmod(0o444)
    assert main(["verify", "-r", str(reg_dir)]) == 1
    assert f"corrupt: {a.blobs['cross_distance']}" in capsys.readouterr().out
    one_line_exit_2(capsys, ["report", "-r", str(reg_dir)], a.blobs["cross_distance"], "corrupt", "rscale verify")
    blob = reg.blob_path(a.blobs["ranks"])
    blob.chmod(0o644)
    blob.write_bytes(blob.read_bytes()[:-3])
    one_line_exit_2(capsys, ["compare", "o2i:mb/baseline", "o2i:mb/gp", "-r", str(reg_dir)], a.blobs["ranks"])
    # an edited catalog row (a forged summary) is refused too
    reg2 = tmp_path / "reg2"
    register_o2i(runs["a"], registry=reg2)
    import duckdb
    con = duckdb.connect(str(reg2 / "catalog.duckdb"))
    con.execute("UPDATE artifacts SET summary = replace(summary, '\"objects\": 3', '\"objects\": 300')")
    con.close()
    clear_caches()
    assert main(["verify", "-r", str(reg2)]) == 1
    assert "corrupt: catalog row o2i:mb@v1 [o2i/mb/o2i]" in capsys.readouterr().out
    one_line_exit_2(capsys, ["report", "-r", str(reg2)], "o2i:mb@v1", "does not match its row digest")


def test_gc_never_frees_a_registered_o2i_blob(runs, tmp_path, capsys):
    reg_dir = tmp_path / "reg"
    register_o2i(runs["a"], registry=reg_dir)
    orphan = Registry(reg_dir).blobs.put(runs["b"] / "report.md")[0]       # a blob nothing references
    assert main(["gc", "-r", str(reg_dir), "--grace", "0", "--apply", "--format", "json"]) == 0
    freed = json.loads(capsys.readouterr().out)["freed"]
    assert freed == [str(Registry(reg_dir).blob_path(orphan).relative_to(reg_dir))]
    clear_caches()
    report = Registry(reg_dir).verify()
    assert len(report["checked"]) == len(TABLES) and report["leftovers"] == [] and report["corrupt"] == []


BAD_FOLDERS = [
    ("not a folder", lambda d: d / "missing", "not an O2I output folder"),
    ("no manifest", lambda d: (d / "empty").mkdir() or d / "empty", "no manifest.json: not an O2I output folder"),
    ("another manifest", lambda d: (d / "x").mkdir() or (d / "x" / "manifest.json").write_text('{"format": "rscale-descriptors"}')
     and d / "x", "not an O2I manifest"),
]


def copy_run(runs, dst: Path) -> Path:
    shutil.copytree(runs["a"], dst)
    return dst


@pytest.mark.parametrize("what,make,message", BAD_FOLDERS, ids=[b[0] for b in BAD_FOLDERS])
def test_not_an_o2i_folder_is_refused_nothing_written(tmp_path, capsys, what, make, message):
    folder = make(tmp_path)
    before = tree(tmp_path)
    one_line_exit_2(capsys, ["o2i", "register", str(folder), "-r", str(tmp_path / "reg")], message)
    assert tree(tmp_path) == before and not (tmp_path / "reg").exists()


def test_a_table_that_does_not_match_the_manifest_is_refused_nothing_written(runs, tmp_path, capsys):
    reg_dir = tmp_path / "reg"
    register_o2i(runs["b"], registry=reg_dir)                   # an existing registry must stay as it is
    out = copy_run(runs, tmp_path / "edited")
    man = api_o2i.read_manifest(out)
    path = out / "tables" / man["tables"]["asymmetry_test"]["file"]
    t = pq.read_table(path)
    import pyarrow as pa
    forged = t.set_column(t.column_names.index("p_value"), "p_value", pa.array([1e-9]))
    pq.write_table(forged.replace_schema_metadata(t.schema.metadata), path)     # still a valid table
    before = tree(tmp_path)
    one_line_exit_2(capsys, ["o2i", "register", str(out), "-r", str(reg_dir)], str(path),
                    "does not hash to the digest the manifest records")
    assert tree(tmp_path) == before
    # a manifest whose table list lost an entry; a table declared as another one
    man2 = json.loads((out / "manifest.json").read_text())
    path.write_bytes((runs["a"] / "tables" / man["tables"]["asymmetry_test"]["file"]).read_bytes())
    del man2["tables"]["canvas"]
    (out / "manifest.json").write_text(json.dumps(man2))
    before = tree(tmp_path)
    one_line_exit_2(capsys, ["o2i", "register", str(out), "-r", str(reg_dir)], "lists no canvas table")
    man2["tables"]["canvas"] = dict(man["tables"]["recall_by_ratio"])
    (out / "manifest.json").write_text(json.dumps(man2))
    one_line_exit_2(capsys, ["o2i", "register", str(out), "-r", str(reg_dir)], "not the O2I canvas table")
    assert {k: v for k, v in tree(tmp_path).items() if not k.startswith("edited/")} == \
        {k: v for k, v in before.items() if not k.startswith("edited/")}


def test_bundle_round_trip_and_forged_bundles(runs, tmp_path, capsys):
    import io
    import tarfile
    src = tmp_path / "src"
    register_o2i(runs["a"], registry=src)
    bundle = tmp_path / "mb.tar"
    assert main(["export", "o2i:mb@v1", "-o", str(bundle), "-r", str(src), "--license", "CC0-1.0"]) == 0
    capsys.readouterr()
    assert main(["import", str(bundle), "-r", str(tmp_path / "dst")]) == 0
    assert "imported: o2i:mb@v1" in capsys.readouterr().out
    [a], [b] = Registry(src).artifacts(), Registry(tmp_path / "dst").artifacts()
    assert (b.content, b.lineage, b.inputs, b.blobs) == (a.content, a.lineage, a.inputs, a.blobs)
    assert b.summary["license"] == "CC0-1.0" and Registry(tmp_path / "dst").verify()["corrupt"] == []
    assert main(["import", str(bundle), "-r", str(tmp_path / "dst")]) == 0
    assert "already present: o2i:mb@v1" in capsys.readouterr().out

    with tarfile.open(bundle) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))
        members = {m.name: tar.extractfile(m).read() for m in tar if m.name != "manifest.json"}

    def forged(name, edit, members=members):
        m = json.loads(json.dumps(manifest))
        mem = dict(members)
        edit(m, mem)
        path = tmp_path / f"{name}.tar"
        with tarfile.open(path, "w") as tar:
            for arc, data in [("manifest.json", json.dumps(m).encode()), *mem.items()]:
                info = tarfile.TarInfo(arc)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return path

    by_role = {f["kind"]: f for f in manifest["files"]}

    def swap_roles(m, mem):                   # the canvas blob declared as cross_distance and back
        for f in m["files"]:
            if f["kind"] in ("canvas", "cross_distance"):
                f["kind"] = "canvas" if f["kind"] == "cross_distance" else "cross_distance"
        m["artifact"]["content"] = canonical_digest({"blobs": {f["kind"]: f["digest"] for f in m["files"]}})

    cases = {
        "summary": (lambda m, mem: m["summary"].update({"mean_R@1": 0.99}), "summary field 'mean_R@1'"),
        "lineage": (lambda m, mem: m["artifact"]["inputs"]["model"].update({"weights": "sha256:" + "0" * 64}),
                    "lineage digest"),
        "content": (lambda m, mem: m["artifact"].update({"content": "sha256:" + "1" * 64}), "content digest"),
        "roles": (swap_roles, "not the O2I cross_distance table"),
        "missing table": (lambda m, mem: (m["files"].remove(by_role["ranks"]),
                                          mem.pop(by_role["ranks"]["path"])), "holds the tables"),
        "other backbone": (lambda m, mem: m["artifact"].update({"name": "vit"}), "holds rows of"),
        "bad name": (lambda m, mem: m["artifact"].update({"name": "my model"}), "cannot be named in a query"),
    }
    for name, (edit, message) in cases.items():
        target = tmp_path / f"t-{name}"
        shutil.copytree(tmp_path / "dst", target)
        clear_caches()
        before = tree(target)
        one_line_exit_2(capsys, ["import", str(forged(name, edit)), "-r", str(target)], message)
        assert tree(target) == before, name
        one_line_exit_2(capsys, ["import", str(forged(name, edit)), "-r", str(tmp_path / f"new-{name}")], message)
        assert not (tmp_path / f"new-{name}").exists()


def test_o2i_run_with_registry_registers_and_writes_a_receipt(runs, tmp_path, capsys):
    import yaml
    sec = section(runs["tmp"], [{"name": "mb", "model": str(runs["mb"]), "pooling": "pooled"}], objects=3)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"o2i": sec}))
    receipt = tmp_path / "r" / "o2i.json"
    assert main(["o2i", "run", "--config", str(tmp_path / "params.yaml"), "-o", str(tmp_path / "o"), "--no-progress",
                 "--registry", str(tmp_path / "reg"), "--receipt", str(receipt)]) == 0
    out = capsys.readouterr().out
    assert "registered: o2i:mb@v1  [o2i/mb/o2i]" in out
    [a] = Registry(tmp_path / "reg").artifacts()
    from rscale.store.run_sidecar import read_run_id
    assert a.mlflow_run_id and a.mlflow_run_id == read_run_id(tmp_path / "o" / "manifest.json")   # the run's own
    assert json.loads(receipt.read_text()) == [{"ref": "o2i:mb@v1", "content": a.content, "series": "o2i/mb/o2i"}]
    # the same results as run A's (same renders, weights and parameters): one content
    register_o2i(runs["a"], registry=tmp_path / "reg2")
    assert Registry(tmp_path / "reg2").artifacts()[0].content == a.content
    before = tree(tmp_path)
    one_line_exit_2(capsys, ["o2i", "run", "--config", str(tmp_path / "params.yaml"), "-o", str(tmp_path / "o2"),
                             "--receipt", str(tmp_path / "x.json")], "--receipt records a registration")
    one_line_exit_2(capsys, ["o2i", "run", "--config", str(tmp_path / "params.yaml"), "-o", str(tmp_path / "o2"),
                             "--registry", str(tmp_path / "reg3"), "--benchmark", "a b"], "cannot be named")
    assert tree(tmp_path) == before


def test_concurrent_registrations_of_one_run_make_one_version(runs, tmp_path):
    """Three processes register the same folder into one registry at once (DuckDB queues the writers):
    one version, every process answers, the registry verifies clean."""
    import os
    import subprocess
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": src}
    cmd = [sys.executable, "-m", "rscale.cli", "o2i", "register", str(runs["b"]), "-r", str(tmp_path / "reg"),
           "--format", "json"]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [o[1] for o in outs]
    created = [r["created"] for o in outs for r in json.loads(o[0])["results"]]
    assert created.count(True) == 2 and created.count(False) == 4          # mb and vit, once each
    reg = Registry(tmp_path / "reg")
    assert sorted(a.ref for a in reg.artifacts()) == ["o2i:mb@v1", "o2i:vit@v1"]
    report = reg.verify()
    assert len(report["checked"]) == 2 * len(TABLES) and report["corrupt"] == report["leftovers"] == []


def test_a_killed_registration_leaves_no_half_visible_result(runs, tmp_path):
    """SIGKILL `rscale o2i register` at points spread over an uninterrupted run: afterwards every
    result is either absent or complete (all its blobs verify), and after `gc` the registry is clean."""
    import os
    import signal
    import subprocess
    import time
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}

    def start(reg):
        return subprocess.Popen([sys.executable, "-m", "rscale.cli", "o2i", "register", str(runs["b"]), "-r", str(reg)],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    t = time.perf_counter()
    assert start(tmp_path / "full").wait(timeout=300) == 0
    full = time.perf_counter() - t
    killed = 0
    for i, share in enumerate((0.45, 0.6, 0.75, 0.85, 0.95)):
        for attempt in range(3):                # under load a run may finish first: kill earlier
            reg = tmp_path / f"r{i}-{attempt}"
            p = start(reg)
            time.sleep(full * share * 0.6 ** attempt)
            p.send_signal(signal.SIGKILL)
            if p.wait(timeout=60) == -signal.SIGKILL:
                killed += 1
                break
        clear_caches()
        if not (reg / "catalog.duckdb").exists():
            continue
        r = Registry(reg)
        for a in r.artifacts():
            assert set(a.blobs) == set(TABLES)
            for role in TABLES:
                r.artifact_blob(a, role)                         # complete: every blob there and intact
        report = r.verify()
        assert report["corrupt"] == report["missing"] == report["extra"] == [], report
        r.gc(grace_s=0, dry_run=False)
        report = r.verify()
        assert report["leftovers"] == [] and report["corrupt"] == [], report
    assert killed >= 3, f"only {killed} of 5 registrations were still running when killed"


def golden_hardness_registry(root: Path) -> Path:
    """A catalog of version 2 with one hardness version (sim_gaussian@v1), as the report test uses."""
    shutil.copytree(GOLDEN / "catalog-v1" / "blobs", root / "blobs")
    with gzip.open(GOLDEN / "catalog-v2" / "catalog.duckdb.gz") as src, open(root / "catalog.duckdb", "wb") as dst:
        shutil.copyfileobj(src, dst)
    return root


def test_ls_lists_o2i_versions_and_tags_work_for_them_as_for_hardness(runs, tmp_path, capsys):
    root = golden_hardness_registry(tmp_path / "reg")
    register_o2i(runs["a"], registry=root)                                          # o2i:mb@v1 (3 objects)
    two = api_o2i.run_o2i(api_o2i.load_o2i_config(section=section(
        runs["tmp"], [{"name": "mb", "model": str(runs["mb"]), "pooling": "pooled"}], objects=2)),
        tmp_path / "two", progress=False, lineage=False)
    assert [r["ref"] for r in register_o2i(two.out, registry=root)["results"]] == ["o2i:mb@v2"]
    register_o2i(runs["b"], registry=root)                                          # o2i:vit@v1; mb: no change

    def listed():
        assert main(["ls", "-r", str(root), "--format", "json"]) == 0
        return {e["ref"]: e for e in json.loads(capsys.readouterr().out)}

    got = listed()
    assert [(e["kind"], ref) for ref, e in got.items()] == [
        ("hardness", "sim_gaussian@v1"), ("o2i", "o2i:mb@v1"), ("o2i", "o2i:mb@v2"), ("o2i", "o2i:vit@v1")]
    assert [got[r]["tags"] for r in ("o2i:mb@v1", "o2i:mb@v2", "o2i:vit@v1")] == [[], ["latest"], ["latest"]]
    assert got["o2i:mb@v2"]["summary"]["objects"] == 2 and got["o2i:mb@v1"]["content"] != got["o2i:mb@v2"]["content"]
    assert main(["ls", "-r", str(root)]) == 0
    table = capsys.readouterr().out
    assert "hardness" in table and "sim_gaussian" in table and "3 objects x 4" in table and "2 objects x 4" in table

    # tags: the same command, the same tags table and rules as a hardness version's
    assert main(["tag", "o2i:mb@v1", "released", "-r", str(root), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"tag": "released", "ref": "o2i:mb@v1", "series": "o2i/mb/o2i"}
    assert main(["tag", "sim_gaussian@v1", "released", "-r", str(root)]) == 0
    capsys.readouterr()
    reg = Registry(root)
    assert reg.artifact("o2i", "mb", "released").version == 1 and reg.get("sim_gaussian", "released").version == 1
    assert main(["show", "o2i:mb@released", "-r", str(root)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["version"] == 1 and shown["tags"] == ["released"]
    assert listed()["o2i:mb@v1"]["tags"] == ["released"]
    # it moves, as a hardness tag does, and never touches another series
    assert main(["tag", "o2i:mb@v2", "released", "-r", str(root)]) == 0
    assert "released -> o2i:mb@v2 [o2i/mb/o2i]" in capsys.readouterr().out
    got = listed()
    assert (got["o2i:mb@v1"]["tags"], got["o2i:mb@v2"]["tags"]) == ([], ["latest", "released"])
    assert got["sim_gaussian@v1"]["tags"] == ["latest", "released"] and got["o2i:vit@v1"]["tags"] == ["latest"]
    from rscale.api.o2i_registry import load_compare_operand
    assert load_compare_operand("o2i:mb@released/gp", root).label == "o2i:mb@v2/gp"
    with reg.connect() as con:                     # one tags table: the artifact's row keyed by its reference
        rows = sorted(con.execute("SELECT backbone, benchmark, source, estimator, tag, version FROM tags").fetchall())
    assert rows == [("o2i:mb", "o2i", "", "", "released", 2), (*reg.get("sim_gaussian").series, "released", 1)]
    # refusals: one line, exit 2, the registry unchanged
    before = (root / "catalog.duckdb").read_bytes()
    for args, text in [(["tag", "o2i:mb@v1", "latest"], "'latest' is reserved"),
                       (["tag", "o2i:mb@v1", "v3"], "'v3' is reserved"),
                       (["tag", "o2i:mb@v1", "bad tag"], "tag name 'bad tag' cannot be named"),
                       (["show", "o2i:vit@released"], "o2i:vit has no version 'released' (has: latest, v1)"),
                       (["tag", "o2i:nope@v1", "released"], "no registered o2i results for 'nope'")]:
        assert main([*args, "-r", str(root)]) == 2, args
        err = capsys.readouterr().err
        assert text in err and len(err.strip().splitlines()) == 1, (args, err)
    assert (root / "catalog.duckdb").read_bytes() == before
    assert reg.verify()["corrupt"] == [] and reg.get("sim_gaussian").version == 1


def test_the_run_records_its_code_version_and_the_registry_keeps_the_runs(runs, tmp_path, capsys):
    from rscale.api.o2i_registry import check_o2i_folder
    from rscale.producers.lineage import code_version
    man = api_o2i.read_manifest(runs["a"])
    assert man["code_version"] == code_version() and man["code_version"].startswith("rscale ")
    reg_dir = tmp_path / "reg"
    register_o2i(runs["a"], registry=reg_dir)
    [a] = Registry(reg_dir).artifacts()
    assert a.code_version == a.inputs["code_version"] == man["code_version"]
    assert main(["lineage", "o2i:mb@v1", "-r", str(reg_dir)]) == 0
    assert json.loads(capsys.readouterr().out)["code_version"] == man["code_version"]
    assert main(["show", "o2i:mb", "-r", str(reg_dir)]) == 0
    assert json.loads(capsys.readouterr().out)["code_version"] == man["code_version"]
    bundle = tmp_path / "mb.tar"
    assert main(["export", "o2i:mb@v1", "-o", str(bundle), "-r", str(reg_dir)]) == 0
    import tarfile
    with tarfile.open(bundle) as tar:
        assert json.load(tar.extractfile("manifest.json"))["artifact"]["code_version"] == man["code_version"]
    # a run made by another rscale: its code version is recorded, not the registering one's, and is lineage
    old = tmp_path / "old"
    shutil.copytree(runs["a"], old)
    edited = {**man, "code_version": "rscale 0.0.9 git 0123456789ab"}
    (old / "manifest.json").write_text(json.dumps(edited, indent=2, sort_keys=True) + "\n")
    assert check_o2i_folder(old)["manifest"]["code_version"] == "rscale 0.0.9 git 0123456789ab"
    other = tmp_path / "other"
    register_o2i(old, registry=other)
    [b] = Registry(other).artifacts()
    assert b.code_version == b.inputs["code_version"] == "rscale 0.0.9 git 0123456789ab"
    assert b.content == a.content and b.lineage != a.lineage
    # a folder written before manifests recorded it: the registering rscale's
    del edited["code_version"]
    (old / "manifest.json").write_text(json.dumps(edited, indent=2, sort_keys=True) + "\n")
    register_o2i(old, registry=tmp_path / "older")
    assert Registry(tmp_path / "older").artifacts()[0].code_version == code_version()
