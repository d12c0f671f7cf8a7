"""Crafted bundles (issue 12 items 1-3): each is refused by `rscale import` with exit 2 and one
line, and the target registry is left byte-for-byte as it was (no row, no blob, no folder)."""

import io
import json
import os
import tarfile

import pytest

from rscale import api
from rscale.cli import main
from rscale.store.hashing import sha256_bytes

from test_registry import make_files


# the code version the bundle is exported and imported under: the same rscale, so the manifest's
# statistical summary terms are compared too (a checkout's version changes with its dirty state)
CODE = "rscale 0.1.0 git test-fixed"


@pytest.fixture(autouse=True)
def _same_code(monkeypatch):
    monkeypatch.setattr("rscale.producers.lineage.code_version", lambda: CODE)


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """A registry holding one version with its sample stats, and that version's bundle."""
    tmp = tmp_path_factory.mktemp("bundle")
    h, s = make_files(tmp, queries=20, s=200_000)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("rscale.producers.lineage.code_version", lambda: CODE)
        api.register(h, s, registry=tmp / "src")
    bundle, v = api.export("sim_gaussian", tmp / "good.tar", registry=tmp / "src", license="CC-BY-4.0")
    with tarfile.open(bundle) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    manifest = json.loads(members.pop("manifest.json"))
    # another version of the same backbone: a sample that the first hardness was not estimated from
    h2, s2 = make_files(tmp, seed=7, queries=20, s=200_000)
    return {"bundle": bundle, "version": v, "manifest": manifest, "members": members, "tmp": tmp,
            "other_sample": s2.read_bytes(), "other_hardness": h2.read_bytes()}


def write_bundle(path, manifest, members):
    """A tar with manifest.json first, then (name, bytes) members in order."""
    with tarfile.open(path, "w") as tar:
        for name, data in [("manifest.json", json.dumps(manifest, sort_keys=True, indent=2).encode()), *members]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return path


def entry(kind, data):
    d = sha256_bytes(data)
    return {"kind": kind, "digest": d, "bytes": len(data), "path": f"blobs/{d.split(':')[1]}.parquet"}


def by_kind(g, kind):
    f = next(f for f in g["manifest"]["files"] if f["kind"] == kind)
    return f, g["members"][f["path"]]


def replace_kind(g, kind, data):
    """The manifest and members with ``kind``'s blob replaced by ``data`` (digest updated: a consistent
    forgery that only a content check can catch)."""
    man = json.loads(json.dumps(g["manifest"]))
    members = []
    for f in man["files"]:
        if f["kind"] == kind:
            f.update(entry(kind, data))
            members.append((f["path"], data))
        else:
            members.append((f["path"], g["members"][f["path"]] if f["path"] in g["members"] else b""))
    return man, members


def case_garbage_as_hardness(g, path):
    return write_bundle(path, *replace_kind(g, "hardness", os.urandom(4000)))


def case_sample_as_hardness(g, path):
    _, sample = by_kind(g, "sample")
    man, members = replace_kind(g, "hardness", sample)
    keep = [f for f in man["files"] if f["kind"] != "sample"]
    man["files"] = keep
    return write_bundle(path, man, [(f["path"], dict(members)[f["path"]]) for f in keep])


def case_tail_fits_only(g, path):
    f, data = by_kind(g, "tail")
    man = {**g["manifest"], "files": [f]}
    return write_bundle(path, man, [(f["path"], data)])


def case_hardness_without_its_tail_fits(g, path):
    keep = [f for f in g["manifest"]["files"] if f["kind"] != "tail"]
    return write_bundle(path, {**g["manifest"], "files": keep}, [(f["path"], g["members"][f["path"]]) for f in keep])


def case_sample_of_another_estimate(g, path):
    return write_bundle(path, *replace_kind(g, "sample", g["other_sample"]))


def case_hardness_of_another_estimate(g, path):
    return write_bundle(path, *replace_kind(g, "hardness", g["other_hardness"]))


def _manifest_text_edit(g, path, old, new):
    text = json.dumps(g["manifest"], sort_keys=True, indent=2)
    assert text.count(old) >= 1
    edited = text.replace(old, new, 1)
    assert len(edited) == len(text)                                   # a one-byte edit
    return write_bundle(path, json.loads(edited), list(g["members"].items()))


def case_summary_s_max_one_byte(g, path):
    s_max = g["manifest"]["summary"]["S_max"]
    return _manifest_text_edit(g, path, f'"S_max": {s_max}', f'"S_max": {s_max + 1}'[:len(f'"S_max": {s_max}')])


def case_summary_interval_term_one_byte(g, path):
    step = g["manifest"]["summary"]["budget"]["noise"][3]
    old = repr(step)
    new = old[:-1] + ("1" if old[-1] != "1" else "2")
    return _manifest_text_edit(g, path, old, new)


def case_estimator_claim(g, path):
    man = json.loads(json.dumps(g["manifest"]))
    man["version"]["estimator"] = "count"
    return write_bundle(path, man, list(g["members"].items()))


def case_lineage_claim(g, path):
    man = json.loads(json.dumps(g["manifest"]))
    man["version"]["lineage"] = "sha256:" + "1" * 64
    return write_bundle(path, man, list(g["members"].items()))


def _path_case(g, path, new_path):
    man = json.loads(json.dumps(g["manifest"]))
    f = next(f for f in man["files"] if f["kind"] == "hardness")
    f["path"] = new_path
    return write_bundle(path, man, [(p, d) for p, d in g["members"].items() if p != by_kind(g, "hardness")[0]["path"]])


def case_absolute_path(g, path):
    # the importer's own copy of the hardness blob lies at this absolute path: it must not be read
    outside = g["tmp"] / "outside-hardness.parquet"
    outside.write_bytes(by_kind(g, "hardness")[1])
    return _path_case(g, path, str(outside))


def case_dotdot_path(g, path):
    outside = path.parent / "escaped.parquet"
    outside.write_bytes(by_kind(g, "hardness")[1])
    return _path_case(g, path, "../escaped.parquet")


def case_listed_but_not_a_member(g, path):
    f, _ = by_kind(g, "sample")
    return write_bundle(path, g["manifest"], [(p, d) for p, d in g["members"].items() if p != f["path"]])


def case_member_not_listed(g, path):
    return write_bundle(path, g["manifest"], [*g["members"].items(), ("blobs/extra.parquet", b"x")])


def case_member_twice(g, path):
    f, data = by_kind(g, "hardness")
    return write_bundle(path, g["manifest"], [*g["members"].items(), (f["path"], os.urandom(len(data)))])


def case_escaping_member(g, path):
    return write_bundle(path, g["manifest"], [*g["members"].items(), ("../escape.txt", b"bad")])


def case_truncated(g, path):
    path.write_bytes(g["bundle"].read_bytes()[:9000])
    return path


def case_tampered_blob(g, path):
    f, data = by_kind(g, "hardness")
    members = dict(g["members"])
    members[f["path"]] = data[:-1] + bytes([data[-1] ^ 1])
    return write_bundle(path, g["manifest"], list(members.items()))


def case_not_a_tar(g, path):
    path.write_bytes(b"\x00" * 2048 + b"not a tar at all")
    return path


CASES = {name[len("case_"):]: fn for name, fn in globals().items() if name.startswith("case_")}
EXPECTED = {
    "garbage_as_hardness": "declared as hardness is not one",
    "sample_as_hardness": "declared as hardness is not one",
    "tail_fits_only": "no hardness file",
    "hardness_without_its_tail_fits": "tail fits the bundle does not hold",
    "sample_of_another_estimate": "not the ones the hardness table was estimated from",
    "hardness_of_another_estimate": "not the ones the hardness table was estimated from",
    "summary_s_max_one_byte": "summary field 'S_max'",
    "summary_interval_term_one_byte": "summary field 'budget'",
    "estimator_claim": "estimator 'count'",
    "lineage_claim": "lineage digest",
    "absolute_path": "members of the bundle named by their digest",
    "dotdot_path": "members of the bundle named by their digest",
    "listed_but_not_a_member": "not a member of the bundle",
    "member_not_listed": "unexpected member",
    "member_twice": "twice",
    "escaping_member": "unexpected member",
    "truncated": "truncated|cannot be unpacked|not a readable",
    "tampered_blob": "does not match its digest",
    "not_a_tar": "not a readable rscale bundle",
}


def tree(root):
    """Everything under ``root``: folders, files with their bytes (None when it does not exist)."""
    if not root.exists():
        return None
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        out[rel + "/"] = sorted(dirnames)
        for f in filenames:
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                out[os.path.join(rel, f)] = fh.read()
    return out


def test_every_case_has_an_expectation():
    assert set(CASES) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(CASES))
def test_crafted_bundle_is_refused_and_nothing_changes(name, good, tmp_path, capsys):
    bundle = CASES[name](good, tmp_path / f"{name}.tar")
    # an existing registry (holding the other version), and a folder that does not exist yet
    existing = tmp_path / "existing"
    h2, _ = make_files(tmp_path, seed=3, queries=10, s=100_000)
    api.register(h2, None, registry=existing)
    fresh = tmp_path / "fresh" / "registry"
    for target in (existing, fresh):
        before = tree(target)
        capsys.readouterr()
        rc = main(["import", str(bundle), "-r", str(target)])
        err = capsys.readouterr().err
        assert rc == 2, err
        assert err.count("\n") == 1 and err.startswith("error: "), err
        import re
        assert re.search(EXPECTED[name], err), err
        assert tree(target) == before, f"{name}: {target} changed"
    assert not (tmp_path / "fresh").exists()
    assert not (tmp_path / "escape.txt").exists()


def test_the_good_bundle_imports_with_a_recomputed_summary(good, tmp_path, capsys):
    target = tmp_path / "dst"
    assert main(["import", str(good["bundle"]), "-r", str(target)]) == 0
    v = api.show("sim_gaussian", target)
    src = good["version"]
    assert (v.hardness, v.tail, v.sample, v.lineage) == (src.hardness, src.tail, src.sample, src.lineage)
    for key in ("S_max", "rules", "budget", "rejected_tails", "replicates"):
        assert v.summary[key] == src.summary[key], key
    assert v.summary["license"] == "CC-BY-4.0" and v.summary["imported_from"] == "v1"
    assert api.verify(target)["corrupt"] == [] and api.verify(target)["leftovers"] == []
    q = "mAP@1000 at N=1e8 for sim_gaussian"
    assert api.query(q, target)["rows"] == api.query(q, good["tmp"] / "src")["rows"]


def test_summary_terms_from_another_rscale_are_recomputed_not_trusted(good, tmp_path):
    # a bundle made by other code: its statistical terms may differ, so they are not compared,
    # but what is stored is recomputed from the blobs; the forged value never shows
    man = json.loads(json.dumps(good["manifest"]))
    man["summary"]["budget"]["noise"] = [9.0] * len(man["summary"]["budget"]["noise"])
    man["version"]["code_version"] = "rscale 0.0.1 git 000000000000"
    from rscale.store.hashing import canonical_digest
    man["version"]["lineage"] = canonical_digest({"inputs": {"sample": good["version"].sample},
                                                  "estimator": "evt", "params": man["version"]["params"],
                                                  "code_version": man["version"]["code_version"]})
    bundle = write_bundle(tmp_path / "other-code.tar", man, list(good["members"].items()))
    v, created = api.import_(bundle, tmp_path / "dst")
    assert created and v.summary["budget"] == good["version"].summary["budget"]
