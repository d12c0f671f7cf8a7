import json
import multiprocessing as mp
import os
import tarfile
from dataclasses import replace

from pathlib import Path

import numpy as np
import pytest

from rscale import api, sim
from rscale.core.estimators.methods import estimate
from rscale.core.replicates import hardness_replicates
from rscale.errors import FormatError, InvalidArgumentError, NotFoundError, RegistryError, SchemaVersionError
from rscale.sim.presets import PRESETS
from rscale.store.hardness_file import write_hardness
from rscale.store.registry import Registry
from rscale.store.sample_stats_file import write_sample_stats


def make_files(tmp_path, preset="sim_gaussian", seed=0, method="evt", queries=40, s=500_000):
    bench = sim.simulate(replace(PRESETS[preset], n_queries=queries), seed=seed)
    ss = sim.sample(bench, s, k=300, seed=seed)
    s_path = write_sample_stats(ss, tmp_path / f"{preset}-{seed}.ss.parquet")
    h_path = tmp_path / f"{preset}-{seed}-{method}.parquet"
    est = estimate(ss, method)
    est = replace(est, replicates=hardness_replicates(ss, method=method, params=est.params, splits=4))
    write_hardness(est, ss, h_path)
    return h_path, s_path


def test_register_versions_and_idempotence(tmp_path):
    reg = tmp_path / "reg"
    h1, s1 = make_files(tmp_path, seed=0)
    h2, _ = make_files(tmp_path, seed=1)
    a = api.register(h1, s1, registry=reg)
    assert a["created"] and a["ref"] == "sim_gaussian@v1"
    again = api.register(h1, s1, registry=reg)
    assert not again["created"] and again["ref"] == "sim_gaussian@v1"
    b = api.register(h2, None, registry=reg)
    assert b["ref"] == "sim_gaussian@v2"
    versions = api.list_versions(reg)
    assert [v.version for v in versions] == [1, 2]
    assert "latest" in versions[1].tags and "latest" not in versions[0].tags
    v1 = api.show("sim_gaussian@v1", reg)
    assert v1.summary["queries"] == 40 and v1.sample and v1.lineage.startswith("sha256:")
    assert v1.code_version.startswith("rscale ")


def test_blobs_are_read_only_and_content_addressed(tmp_path):
    reg_root = tmp_path / "reg"
    h, s = make_files(tmp_path)
    api.register(h, s, registry=reg_root)
    reg = Registry(reg_root)
    v = reg.get("sim_gaussian")
    p = reg.blob_path(v.hardness)
    assert oct(p.stat().st_mode & 0o777) == "0o444"
    from rscale.store.registry import sha256_file
    assert sha256_file(p) == v.hardness


def test_tags_move_and_resolve(tmp_path):
    reg = tmp_path / "reg"
    h1, _ = make_files(tmp_path, seed=0)
    h2, _ = make_files(tmp_path, seed=1)
    api.register(h1, None, registry=reg)
    api.register(h2, None, registry=reg)
    api.tag("sim_gaussian@v1", "released", registry=reg)
    assert api.show("sim_gaussian@released", reg).version == 1
    api.tag("sim_gaussian@v2", "released", registry=reg)
    assert api.show("sim_gaussian@released", reg).version == 2
    with pytest.raises(RegistryError, match="reserved"):
        api.tag("sim_gaussian@v1", "latest", registry=reg)


def test_unknown_names_suggest(tmp_path):
    reg = tmp_path / "reg"
    h, _ = make_files(tmp_path)
    api.register(h, None, registry=reg)
    with pytest.raises(NotFoundError, match="Did you mean 'sim_gaussian'"):
        api.show("sim-gaussian", reg)
    with pytest.raises(NotFoundError, match="no version 'v9'"):
        api.show("sim_gaussian@v9", reg)
    with pytest.raises(RegistryError, match="no registry at"):
        api.list_versions(tmp_path / "nowhere")


def test_verify_reports_corrupt_missing_extra(tmp_path):
    reg_root = tmp_path / "reg"
    h, s = make_files(tmp_path)
    api.register(h, s, registry=reg_root)
    reg = Registry(reg_root)
    assert len(api.verify(reg_root)["checked"]) == 3
    v = reg.get("sim_gaussian")
    victim = reg.blob_path(v.tail)
    os.chmod(victim, 0o644)
    victim.write_bytes(victim.read_bytes()[:-10] + b"0123456789")
    reg.blob_path(v.sample).unlink()
    (reg.blob_dir / "stray.parquet").write_bytes(b"x")
    report = api.verify(reg_root)
    assert report["corrupt"] == [v.tail] and report["missing"] == [v.sample]
    assert report["extra"] == ["blobs/sha256/stray.parquet"]


def _writer(args):
    root, h, i = args
    from rscale import api as a
    return a.register(h, None, registry=root, backbone=f"bb{i % 3}")["ref"]


@pytest.mark.slow
def test_concurrent_writers_in_several_processes(tmp_path):
    hs = [make_files(tmp_path, seed=i, queries=10)[0] for i in range(6)]
    root = str(tmp_path / "reg")
    Registry(root).init()
    ctx = mp.get_context("spawn")
    with ctx.Pool(4) as pool:
        refs = pool.map(_writer, [(root, str(h), i) for i, h in enumerate(hs)])
    assert sorted(refs) == sorted(["bb0@v1", "bb0@v2", "bb1@v1", "bb1@v2", "bb2@v1", "bb2@v2"])
    versions = Registry(root).versions()
    assert len(versions) == 6
    assert not api.verify(root)["corrupt"]


def test_query_answers_from_registry(tmp_path):
    reg = tmp_path / "reg"
    for preset in ("sim_gaussian", "sim_bounded"):
        h, _ = make_files(tmp_path, preset=preset)
        api.register(h, None, registry=reg)
    ans = api.query("map@1000, R@1 at N=1e6,1e8 for sim_*", reg)
    assert ans["query"] == "mAP@1000, R@1 at N=1e6,1e8 for sim_*"
    assert len(ans["rows"]) == 8
    for r in ans["rows"]:
        assert r["ci_low"] <= r["value"] <= r["ci_high"]
    by = {(r["backbone"], r["measure"], r["N"]): r["value"] for r in ans["rows"]}
    assert by[("sim_gaussian", "mAP@1000", 1e6)] >= by[("sim_gaussian", "mAP@1000", 1e8)]
    # the stored answer equals predicting from the original file
    one = api.query("mAP@1000 at N=1e8 for sim_gaussian", reg)["rows"][0]
    h, _ = make_files(tmp_path, preset="sim_gaussian")
    assert one["value"] == pytest.approx(api.predict(h, ["mAP@1000"], sizes=[1e8])[0]["value"])


def test_query_errors(tmp_path):
    reg = tmp_path / "reg"
    h, _ = make_files(tmp_path)
    api.register(h, None, registry=reg)
    from rscale.errors import QuerySyntaxError
    with pytest.raises(QuerySyntaxError, match="add 'at N=1e8'"):
        api.query("mAP@1000 for sim_gaussian", reg)
    with pytest.raises(NotFoundError, match="Did you mean"):
        api.query("mAP@1000 at N=1e8 for sim_gausian", reg)


def test_a_right_name_on_a_wrong_benchmark_names_the_benchmarks_it_has(tmp_path):
    """Regression: "unknown backbone 'sim_gaussian' with benchmark 'x' ... Did you mean 'sim_gaussian'?"
    suggested the very name asked for; the benchmark was the wrong part."""
    reg = tmp_path / "reg"
    h, _ = make_files(tmp_path)
    api.register(h, None, registry=reg)
    bench = api.show("sim_gaussian", reg).benchmark
    with pytest.raises(NotFoundError) as err:
        api.query(f"mAP@1000 at N=1e8 for sim_gaussian on {bench}x", reg)
    msg = str(err.value)
    assert "Did you mean 'sim_gaussian'" not in msg
    assert f"has no series with benchmark '{bench}x'" in msg and f"on {bench} using" in msg
    assert f"Did you mean benchmark '{bench}'?" in msg


def test_bundle_round_trip_and_tamper(tmp_path):
    src = tmp_path / "src"
    h, s = make_files(tmp_path)
    api.register(h, s, registry=src)
    bundle, v = api.export("sim_gaussian", tmp_path / "b.tar", registry=src, license="CC-BY-4.0")
    dst = tmp_path / "dst"
    imported, created = api.import_(bundle, dst)
    assert created and imported.hardness == v.hardness
    imported2, created2 = api.import_(bundle, dst)
    assert not created2 and imported2.version == imported.version
    assert imported.summary["license"] == "CC-BY-4.0"
    # tamper with one blob: refused, nothing new visible
    tampered = tmp_path / "t.tar"
    with tarfile.open(bundle) as tin, tarfile.open(tampered, "w") as tout:
        for m in tin.getmembers():
            data = tin.extractfile(m).read()
            if m.name.startswith("blobs/") and m.size < 200_000:
                data = data[:-1] + bytes([data[-1] ^ 1])
            import io
            tout.addfile(m, io.BytesIO(data))
    fresh = tmp_path / "fresh"
    with pytest.raises(FormatError, match="does not match its digest"):
        api.import_(tampered, fresh)
    assert not (fresh / "catalog.duckdb").exists()
    assert not list(fresh.glob("blobs/**/*.parquet"))
    # truncated
    trunc = tmp_path / "trunc.tar"
    trunc.write_bytes(bundle.read_bytes()[:5000])
    with pytest.raises(FormatError):
        api.import_(trunc, fresh)
    # a path escaping the target
    evil = tmp_path / "evil.tar"
    with tarfile.open(bundle) as tin, tarfile.open(evil, "w") as tout:
        manifest = tin.extractfile("manifest.json").read()
        import io
        info = tarfile.TarInfo("manifest.json")
        info.size = len(manifest)
        tout.addfile(info, io.BytesIO(manifest))
        bad = tarfile.TarInfo("../escape.txt")
        bad.size = 3
        tout.addfile(bad, io.BytesIO(b"bad"))
    with pytest.raises(FormatError, match="unexpected member"):
        api.import_(evil, fresh)
    assert not (tmp_path / "escape.txt").exists()
    # a bundle from a newer rscale
    newer = tmp_path / "newer.tar"
    with tarfile.open(bundle) as tin, tarfile.open(newer, "w") as tout:
        for m in tin.getmembers():
            data = tin.extractfile(m).read()
            if m.name == "manifest.json":
                man = json.loads(data)
                man["bundle_version"] = 99
                data = json.dumps(man).encode()
                m.size = len(data)
            import io
            tout.addfile(m, io.BytesIO(data))
    with pytest.raises(SchemaVersionError, match="upgrade rscale"):
        api.import_(newer, fresh)


def test_small_samples_are_flagged_when_extrapolated(tmp_path):
    # below 50k sampled distractors the simulator's interval coverage falls: say so, with the size
    reg = tmp_path / "reg"
    api.register(*make_files(tmp_path, s=20_000), registry=reg)
    ans = api.query("mAP@1000 at N=1e6 for sim_gaussian", reg)
    assert any("S=20,000" in w and "sample 50,000 or more" in w for w in ans["warnings"])
    near = api.query("mAP@1000 at N=1e5 for sim_gaussian", reg)      # 5x the sample: no warning
    assert not any("inside the bulk" in w for w in near["warnings"])
    big = tmp_path / "big"
    api.register(*make_files(tmp_path, seed=1), registry=big)
    assert not any("inside the bulk" in w for w in api.query("mAP@1000 at N=1e8 for sim_gaussian", big)["warnings"])


@pytest.mark.slow
def test_budget_warning_diff_and_lineage(tmp_path):
    reg = tmp_path / "reg"
    # near-duplicate tails on a small sample with many queries (little query noise): the last
    # doubling still moves mAP@1000 at N >= 1e7 by more than the noise, so the budget flags it
    h, s = make_files(tmp_path, preset="sim_neardup", queries=1000, s=200_000)
    out = api.register(h, s, registry=reg)
    v = api.show(out["ref"], reg)
    b = v.summary["budget"]
    assert b["N"][0] == 1e5 and len(b["sufficient"]) == len(b["N"]) == len(b["noise"])
    unsupported = [n for n, ok in zip(b["N"], b["sufficient"]) if not ok]
    assert unsupported and b["sufficient"][0]
    i = b["N"].index(unsupported[0])
    assert abs(b["last_step"][i]) > b["noise"][i]
    # a size the budget does not support produces a warning naming it and the figures
    ans = api.query(f"mAP@1000 at N={int(unsupported[0])} for sim_neardup", reg, bootstrap=0)
    want = (f"sim_neardup: the sample (S=200,000) does not support N={unsupported[0]:g}: halving it moves mAP@1000 "
            f"at N={unsupported[0]:g} by {b['last_step'][i]:+.4f}, more than query-sampling noise ({b['noise'][i]:.4f})")
    assert want in ans["warnings"]
    # a supported size does not
    assert not any("does not support" in w for w in api.query("mAP@1000 at N=1e5 for sim_neardup", reg,
                                                               bootstrap=0)["warnings"])
    lin = api.lineage("sim_neardup", reg)
    assert lin["inputs"]["sample"]["digest"] == v.sample
    assert lin["inputs"]["sample"]["meta"]["backbone"] == "sim_neardup"
    assert lin["params"]["count_test"] == 0.01
    # v2, v3: the sample estimated twice (the default threshold, then q=0.9) by rscale estimate, which
    # records the split key: their replicates pair
    for name, params in (("v2", []), ("v3", ["q=0.9"])):
        api.estimate(s, "evt", params=params, out=tmp_path / f"{name}.parquet", replicates=8)
        api.register(tmp_path / f"{name}.parquet", s, registry=reg)
    d = api.diff("sim_neardup@v2", "sim_neardup@v3", registry=reg, top=3)
    assert d["queries_compared"] == 1000 and len(d["largest_query_changes"]) == 3
    assert d["ci_low"] <= d["difference"] <= d["ci_high"] and d["ci_kind"] == "benchmark"
    # refused as 'for A vs B' refuses: v1 was written without a split key, v4 is another sample
    _, s4 = make_files(tmp_path, preset="sim_neardup", seed=5, queries=1000, s=200_000)
    api.estimate(s4, "evt", out=tmp_path / "v4.parquet", replicates=8)
    api.register(tmp_path / "v4.parquet", None, registry=reg)
    with pytest.raises(InvalidArgumentError, match="split_key"):
        api.diff("sim_neardup@v1", "sim_neardup@v2", registry=reg)
    with pytest.raises(InvalidArgumentError, match="do not pair"):
        api.diff("sim_neardup@v2", "sim_neardup@v4", registry=reg)
    same = api.diff("sim_neardup@v1", "sim_neardup@v1", registry=reg)
    assert same["difference"] == 0 and same["rule_changed_share"] == 0


def test_missing_blob_is_a_clear_error(tmp_path):
    reg_root = tmp_path / "reg"
    h, _ = make_files(tmp_path)
    api.register(h, None, registry=reg_root)
    reg = Registry(reg_root)
    reg.blob_path(reg.get("sim_gaussian").hardness).unlink()
    with pytest.raises(RegistryError, match="missing.*rscale verify"):
        api.query("mAP@1000 at N=1e8 for sim_gaussian", reg_root)


def test_corrupt_catalog_is_a_clear_error(tmp_path):
    reg_root = tmp_path / "reg"
    reg_root.mkdir()
    (reg_root / "catalog.duckdb").write_bytes(b"not a database")
    with pytest.raises(RegistryError, match="restore it from a backup"):
        api.list_versions(reg_root)


def test_curve_data_and_plot(tmp_path):
    reg = tmp_path / "reg"
    h, s = make_files(tmp_path, queries=50)
    api.register(h, s, registry=reg)
    data = api.curve("mAP@1000 for sim_gaussian", "1e5..1e9", points=9, registry=reg, bootstrap=50)
    (series,) = data["series"]
    assert len(series["N"]) == 9 and series["N"][0] == 1e5 and series["N"][-1] == 1e9
    assert all(lo <= v <= hi for v, lo, hi in zip(series["value"], series["ci_low"], series["ci_high"]))
    assert all(a >= b - 1e-12 for a, b in zip(series["value"], series["value"][1:]))  # non-increasing
    assert len(series["sampled"]) == 4  # S and three nested sub-samples
    # the point measured at N = S is the exact metric of the sample gallery
    from rscale.core import law
    from rscale.store.sample_stats_file import read_sample_stats
    ss = read_sample_stats(s)
    exact = law.map_at_k(law.Hardness.from_counts(ss.pos_counts, ss.pos_offsets, 500_000), 500_000, 1000)
    assert series["sampled"][-1] == (500_000.0, pytest.approx(exact))
    from rscale.errors import QuerySyntaxError
    with pytest.raises(QuerySyntaxError, match="names no sizes"):
        api.curve("mAP@1000 at N=1e8 for sim_gaussian", registry=reg)
    pytest.importorskip("matplotlib")
    out = api.plot_curve(data, tmp_path / "c.png")
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.endswith("c.png")


def test_a_curve_on_a_short_top_list_draws_the_points_its_list_allows(tmp_path):
    """Regression: the nested sub-samples of the measured points (a decoration of the curve) raised
    when a halving left a query none of its stored top scores, so `rscale curve` refused a version
    with a short top list (K = 20 of S = 200) altogether."""
    from rscale import sim
    from rscale.sim.benchmark import HardnessLaw, SimSpec
    from rscale.store.sample_stats_file import write_sample_stats
    bench = sim.simulate(SimSpec(name="short", family="gaussian", n_queries=30,
                                 hardness=HardnessLaw("loguniform", 1.0, 1e-6, 1e-1, immune=0.05)), seed=3)
    ss = sim.sample(bench, 200, k=20, seed=1)
    write_sample_stats(ss, tmp_path / "s.parquet")
    api.estimate(tmp_path / "s.parquet", "count", out=tmp_path / "h.parquet")
    api.register(tmp_path / "h.parquet", tmp_path / "s.parquet", registry=tmp_path / "reg", backbone="short",
                 benchmark="x")
    (series,) = api.curve("mAP@100 for short using count", registry=tmp_path / "reg", points=5,
                          bootstrap=20)["series"]
    sizes = [n for n, _ in series["sampled"]]
    assert 2 <= len(sizes) < 4 and sizes[-1] == 200.0     # S and the halvings the list allowed, not three
    assert len(series["value"]) == len(series["N"]) == 5


def test_failed_registration_leaves_no_damage_only_collectable_orphans(tmp_path, monkeypatch):
    from rscale.store.catalog import Catalog

    reg_root = tmp_path / "reg"
    h1, s1 = make_files(tmp_path, seed=0)
    api.register(h1, s1, registry=reg_root)
    before = api.verify(reg_root)
    h2, s2 = make_files(tmp_path, seed=1)

    def boom(*a, **k):
        raise RuntimeError("disk full in the middle of the catalog transaction")
    monkeypatch.setattr(Catalog, "add_version", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        api.register(h2, s2, registry=reg_root)
    monkeypatch.undo()
    after = api.verify(reg_root)
    # no damage: the blobs it wrote are orphans (never deleted by the failing writer, see the race
    # test below), reported as leftovers and freed by gc
    assert {k: after[k] for k in ("checked", "corrupt", "missing", "extra")} == \
        {k: before[k] for k in ("checked", "corrupt", "missing", "extra")}
    assert len(after["leftovers"]) == 3 and before["leftovers"] == []
    assert [v.version for v in api.list_versions(reg_root)] == [1]
    assert api.gc(reg_root, grace_s=0)["freed"] == after["leftovers"]          # dry run by default
    assert api.verify(reg_root)["leftovers"] == after["leftovers"]
    freed = api.gc(reg_root, grace_s=0, dry_run=False)
    assert freed["freed"] == after["leftovers"] and freed["bytes"] > 0
    assert api.verify(reg_root) == before
    # a sample-stats file is not a hardness table: refused before anything is written
    with pytest.raises(FormatError):
        api.register(s2, None, registry=reg_root)
    assert api.verify(reg_root) == before


def test_interrupted_cleanup_never_deletes_blobs_a_concurrent_registration_references(tmp_path, monkeypatch):
    # issue 12 item 5: A writes blobs, B (same content) finds them present, A fails and cleans up,
    # B commits. Before the fix A's cleanup deleted the blobs B's committed version references.
    from rscale.store.catalog import Catalog

    reg_root = tmp_path / "reg"
    h, s = make_files(tmp_path, seed=0)
    real_add = Catalog.add_version
    state = {}

    def a_fails_after_b_found_the_blobs(self, key, digests, *args, **kw):
        if "b" not in state:
            state["b"] = digests
            # B: its puts find A's blobs present (created=False) ...
            assert all(not Registry(reg_root).blobs.put(f)[1] for f in (h, s))
            raise RuntimeError("A killed before its commit")
        return real_add(self, key, digests, *args, **kw)

    monkeypatch.setattr(Catalog, "add_version", a_fails_after_b_found_the_blobs)
    with pytest.raises(RuntimeError, match="A killed"):
        api.register(h, s, registry=reg_root)
    # ... and B commits after A's failure handling ran
    out = api.register(h, s, registry=reg_root)
    v = api.show(out["ref"], reg_root)
    report = api.verify(reg_root)
    assert report["missing"] == [] and report["corrupt"] == []
    assert sorted(report["checked"]) == sorted(d for d in (v.hardness, v.tail, v.sample) if d)
    assert api.query("mAP@1000 at N=1e8 for sim_gaussian", reg_root, bootstrap=0)["rows"]


def test_gc_never_frees_a_referenced_blob_and_keeps_young_leftovers(tmp_path):
    reg_root = tmp_path / "reg"
    h, s = make_files(tmp_path, seed=0)
    api.register(h, s, registry=reg_root)
    reg = Registry(reg_root)
    v = reg.get("sim_gaussian")
    orphan_src = tmp_path / "orphan.parquet"
    orphan_src.write_bytes(b"an orphan blob of a killed registration")
    orphan, _ = reg.blobs.put(orphan_src)
    tmp = reg.blob_dir / "ab" / ".abcd.parquet.tmp-1-2"
    tmp.parent.mkdir(parents=True, exist_ok=True)
    tmp.write_bytes(b"x" * 100)
    (reg_root / ".import-dead").mkdir()
    (reg_root / ".import-dead" / "blob").write_bytes(b"y" * 50)
    report = api.verify(reg_root)
    assert sorted(report["leftovers"]) == sorted([str(reg.blob_path(orphan).relative_to(reg_root)),
                                                  str(tmp.relative_to(reg_root)), ".import-dead"])
    assert report["corrupt"] == report["missing"] == report["extra"] == []
    young = api.gc(reg_root, dry_run=False)                 # default grace: an hour
    assert young["freed"] == [] and len(young["kept"]) == 3
    old = reg.gc(grace_s=60, dry_run=False, clock=lambda: __import__("time").time() + 120)
    assert sorted(old["freed"]) == sorted(report["leftovers"])
    assert old["bytes"] == len(b"an orphan blob of a killed registration") + 100 + 50
    after = api.verify(reg_root)
    assert after["leftovers"] == [] and sorted(after["checked"]) == sorted([v.hardness, v.tail, v.sample])
    assert not (reg.blob_dir / "ab").exists()                # emptied prefix folders go too


def test_one_interval_for_query_predict_and_curve_from_the_stored_replicates(tmp_path):
    from scipy.stats import t as student_t

    from rscale.core.law import Hardness, per_query
    reg = tmp_path / "reg"
    h, s = make_files(tmp_path, preset="sim_gaussian", queries=60)
    api.register(h, s, registry=reg)
    assert api.show("sim_gaussian", reg).summary["replicates"] == 8
    for kind in ("benchmark", "population"):
        q = api.query("mAP@1000, R@1 at N=1e6,1e8 for sim_gaussian", reg, ci_kind=kind)["rows"]
        p = api.predict(h, ["mAP@1000", "R@1"], sizes=[1e6, 1e8], ci_kind=kind, sample_stats=s)
        c = api.curve("mAP@1000 for sim_gaussian", "1e6..1e8", points=2, registry=reg, ci_kind=kind)["series"][0]
        assert [r["ci_kind"] for r in q + p] == [kind] * 8 and c["ci_kind"] == kind
        assert [(r["value"], r["ci_low"], r["ci_high"]) for r in q] == [(r["value"], r["ci_low"], r["ci_high"]) for r in p]
        assert (c["ci_low"], c["ci_high"]) == ([q[0]["ci_low"], q[1]["ci_low"]], [q[0]["ci_high"], q[1]["ci_high"]])
    # the benchmark interval by hand: t_{pairs} x RMS of the half-sample pair differences, and in
    # quadrature z x the realised value's sd over galleries under the point hardness
    from rscale.store.hardness_file import read_hardness
    est, _ = read_hardness(h)
    m = np.array([per_query(Hardness.from_flat(est.replicates[:, r], est.offsets), "AP", 1e8, 1000).mean()
                  for r in range(8)])
    sd = np.sqrt(np.mean(((m[0::2] - m[1::2]) / 2) ** 2))
    row = api.query("mAP@1000 at N=1e8 for sim_gaussian", reg)["rows"][0]
    assert sd > 0 and row["ci_kind"] == "benchmark"
    from scipy.stats import norm

    from rscale.core.gallery_noise import realised_sd
    g = realised_sd(est.x, est.offsets, "AP", 1e8, 1000)
    assert g > 0
    half = np.hypot(student_t.ppf(0.975, 4) * sd, norm.ppf(0.975) * g)
    assert row["ci_high"] - row["value"] == pytest.approx(half, rel=1e-9)
    assert row["value"] - row["ci_low"] == pytest.approx(half, rel=1e-9)
    # the population interval adds the query bootstrap: wider on both sides
    pop = api.query("mAP@1000 at N=1e8 for sim_gaussian", reg, ci_kind="population")["rows"][0]
    assert pop["ci_low"] < row["ci_low"] and pop["ci_high"] > row["ci_high"] and pop["value"] == row["value"]


def test_registration_does_not_re_estimate(tmp_path, monkeypatch):
    # the interval and the budget check come from the file: registration fits nothing, with or
    # without the sample stats
    import rscale.core.estimators.methods as methods
    h, s = make_files(tmp_path, preset="sim_gaussian", queries=40)
    calls = []
    real = methods.estimate
    monkeypatch.setattr(methods, "estimate", lambda ss, method="evt", **kw: calls.append(ss.n_sampled.max()) or
                        real(ss, method, **kw))
    api.register(h, s, registry=tmp_path / "reg")
    assert calls == []
    summary = api.show("sim_gaussian", tmp_path / "reg").summary
    assert not {"sensitivity", "distractor_sd", "tail_check"} & set(summary)
    assert summary["budget"]["halves"] == 8 and len(summary["budget"]["sufficient"]) == 6
    api.register(h, None, registry=tmp_path / "reg2")
    assert calls == []
    assert api.show("sim_gaussian", tmp_path / "reg2").summary["budget"] == summary["budget"]


def test_a_version_1_hardness_file_still_answers_and_says_it_has_no_interval(tmp_path):
    from rscale.store.hardness_file import hardness_table
    bench = sim.simulate(replace(PRESETS["sim_gaussian"], n_queries=30), seed=0)
    ss = sim.sample(bench, 500_000, k=300, seed=0)
    table = hardness_table(estimate(ss, "evt"), ss)
    import pyarrow.parquet as pq
    md = dict(table.schema.metadata)
    md[b"rscale.schema_version"] = b"1"
    pq.write_table(table.replace_schema_metadata(md), tmp_path / "v1.parquet")
    api.register(tmp_path / "v1.parquet", None, registry=tmp_path / "reg", backbone="old")
    ans = api.query("mAP@1000 at N=1e8 for old", tmp_path / "reg")
    row = ans["rows"][0]
    assert row["ci_kind"] == "benchmark" and np.isnan(row["ci_low"]) and np.isnan(row["ci_high"])
    assert any("no replicates" in w for w in ans["warnings"])
    pop = api.query("mAP@1000 at N=1e8 for old", tmp_path / "reg", ci_kind="population")["rows"][0]
    assert pop["ci_low"] < pop["value"] < pop["ci_high"]


class FakeClock:
    """time.time_ns under the test's control: the cache's 'written in the last 2 s' rule without sleeping."""

    def __init__(self):
        import time
        self.now = time.time_ns()

    def __call__(self):
        return self.now


def test_catalog_and_hardness_caches_never_serve_stale_answers(tmp_path, monkeypatch):
    from rscale.store.catalog import Catalog
    from rscale.store.registry import Registry, clear_caches

    reg_path = tmp_path / "reg"
    api.register(*make_files(tmp_path, seed=0), registry=reg_path)
    clear_caches()
    clock = FakeClock()
    real_read = Catalog.read_versions
    reads = []
    monkeypatch.setattr(Catalog, "read_versions", lambda self: reads.append(1) or real_read(self))
    Registry(reg_path, clock=clock).snapshot.unlink()
    first = Registry(reg_path, clock=clock).versions()      # just written: read, not kept in memory
    assert len(reads) == 1
    Registry(reg_path, clock=clock).snapshot.unlink()
    Registry(reg_path, clock=clock).versions()
    assert len(reads) == 2                                  # not served from memory
    clock.now += 3_000_000_000                              # three seconds later: kept in memory
    Registry(reg_path, clock=clock).snapshot.unlink()
    assert Registry(reg_path, clock=clock).versions() == first and len(reads) == 3
    Registry(reg_path, clock=clock).snapshot.unlink()
    assert Registry(reg_path, clock=clock).versions() == first and len(reads) == 3   # memory: no read
    api.register(*make_files(tmp_path, seed=1), registry=reg_path)   # the catalog changes: the cache must notice
    assert [v.version for v in Registry(reg_path, clock=clock).versions()] == [1, 2]
    # decoded hardness is cached by digest and cannot be modified through the cache
    reg = Registry(reg_path)
    v = reg.resolve("sim_gaussian", "v1")[0]
    a, _ = reg.read_hardness(v)
    b, _ = reg.read_hardness(v)
    assert a is b and not a.x.flags.writeable
    with pytest.raises(ValueError):
        a.x[0] = 0.5


def test_catalog_snapshot_serves_cold_processes_and_never_goes_stale(tmp_path, monkeypatch):
    import subprocess
    import sys

    from rscale.store.catalog import Catalog
    from rscale.store.registry import Registry, clear_caches

    reg_path = tmp_path / "reg"
    api.register(*make_files(tmp_path, seed=0), registry=reg_path)
    reg = Registry(reg_path)
    first = reg.versions()
    assert reg.snapshot.exists()
    # a cold process answers from the snapshot without importing duckdb (or pandas) at all
    code = ("import sys; from rscale import api; "
            f"rows = api.query('mAP@1000 at N=1e8 for sim_gaussian', {str(reg_path)!r}, bootstrap=0)['rows']; "
            "print(len(rows), 'duckdb' in sys.modules, 'pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["1", "False", "False"]
    # same process, memory cache cleared: served from the file
    clear_caches()
    monkeypatch.setattr(Catalog, "read_versions", lambda self: pytest.fail("catalog read"))
    assert Registry(reg_path).versions() == first
    monkeypatch.undo()
    # a registration changes the catalog: the snapshot's key no longer matches
    api.register(*make_files(tmp_path, seed=1), registry=reg_path)
    clear_caches()
    v1, v2 = Registry(reg_path).versions()
    assert (v1.version, v2.version) == (1, 2)
    # a damaged snapshot is ignored
    clear_caches()
    reg.snapshot.write_text("{not json")
    assert [v.version for v in Registry(reg_path).versions()] == [1, 2]
    # an edited one (v1 pointed at v2's hardness, key intact) is ignored too: its row digest breaks
    data = json.loads(reg.snapshot.read_text())
    data["versions"][0]["hardness"] = v2.hardness
    reg.snapshot.write_text(json.dumps(data))
    clear_caches()
    assert Registry(reg_path).get("sim_gaussian", "v1").hardness == v1.hardness
    ans = api.query("mAP@1000 at N=1e8 for sim_gaussian@v1", reg_path, bootstrap=0)["rows"][0]
    clear_caches()
    expect = api.query("mAP@1000 at N=1e8 for sim_gaussian@v1", reg_path, bootstrap=0)["rows"][0]
    assert ans["value"] == expect["value"]
    assert reg.verify()["corrupt"] == []
    # the snapshot is tied to the catalog's bytes: random bytes over the catalog are noticed
    # although mtime, size and inode are kept
    clear_caches()
    st = reg.catalog.path.stat()
    size = st.st_size
    with open(reg.catalog.path, "r+b") as f:
        f.write(os.urandom(size))
    os.utime(reg.catalog.path, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(RegistryError, match="corrupt|restore"):
        Registry(reg_path).versions()


def test_rejected_tails_are_counted_at_registration_and_warned(tmp_path):
    from rscale.core.estimators.rejected_tails import rejected_tails
    bench = sim.simulate(replace(PRESETS["sim_neardup"], n_queries=80), seed=2)
    ss = sim.sample(bench, 1_000_000, k=4000, seed=2)
    s_path = write_sample_stats(ss, tmp_path / "nd.ss.parquet")
    h_path = tmp_path / "nd.parquet"
    est = estimate(ss, "evt")
    write_hardness(est, ss, h_path)
    reg = tmp_path / "reg"
    api.register(h_path, s_path, registry=reg)
    check = api.show("sim_neardup", reg).summary["rejected_tails"]
    assert check["rejected_share"] == round(float(rejected_tails(est, ss)[0].mean()), 4) >= 0.05
    ans = api.query("mAP@1000 at N=1e8 for sim_neardup", reg)
    assert any("fitted tail of" in w and "rejected" in w for w in ans["warnings"])


def test_a_catalog_row_edited_inside_duckdb_is_caught_by_verify_and_queries(tmp_path):
    # issue 12 item 7: each version row carries a digest over its content
    reg_root = tmp_path / "reg"
    api.register(*make_files(tmp_path, seed=0), registry=reg_root)
    reg = Registry(reg_root)
    assert reg.verify()["corrupt"] == []
    with reg.connect(write=True) as con:
        summary = json.loads(con.execute("SELECT summary FROM versions").fetchone()[0])
        summary["S_max"] += 1
        con.execute("UPDATE versions SET summary = ?", [json.dumps(summary, sort_keys=True)])
    from rscale.store.registry import clear_caches
    clear_caches()
    assert reg.verify()["corrupt"] == ["catalog row sim_gaussian@v1 [sim_gaussian/sim-ilias/sim:gaussian/evt]"]
    with pytest.raises(RegistryError, match="does not match its row digest.*rscale verify"):
        api.query("mAP@1000 at N=1e8 for sim_gaussian", reg_root, bootstrap=0)


def test_blob_folder_is_fsynced_after_the_rename_and_before_the_catalog_commit(tmp_path, monkeypatch):
    # issue 12 item 8: a power loss after the commit must not lose the blob's rename
    from rscale.store.catalog import Catalog

    events = []
    real_fsync, real_add = os.fsync, Catalog.add_version

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def add_version(self, *a, **kw):
        events.append(("commit", None))
        return real_add(self, *a, **kw)

    h, s = make_files(tmp_path, seed=0)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(Catalog, "add_version", add_version)
    out = api.register(h, s, registry=tmp_path / "reg")
    monkeypatch.undo()
    reg = Registry(tmp_path / "reg")
    v = reg.get(out["ref"].split("@")[0])
    commit = events.index(("commit", None))
    for digest in (v.hardness, v.tail, v.sample):
        folder = str(reg.blob_path(digest).parent.resolve())
        temp = [i for i, (_, p) in enumerate(events) if p and Path(p).parent == Path(folder)
                and Path(p).name.startswith("." + digest.split(":")[1])]
        assert temp and temp[0] < commit                                   # the content, before its rename
        assert any(temp[0] < i < commit for i, e in enumerate(events) if e == ("fsync", folder))   # the rename


def test_gc_command_is_a_dry_run_until_applied(tmp_path, capsys):
    from rscale.cli import main

    reg_root = tmp_path / "reg"
    api.register(*make_files(tmp_path, seed=0), registry=reg_root)
    (reg_root / ".import-killed").mkdir()
    (reg_root / ".import-killed" / "part").write_bytes(b"z" * 2_000_000)
    capsys.readouterr()
    assert main(["gc", "-r", str(reg_root), "--grace", "0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("would free 1 leftover(s), 2.0 MB") and "--apply" in out
    assert (reg_root / ".import-killed").exists()
    assert main(["verify", "-r", str(reg_root)]) == 0          # leftovers are not damage
    capsys.readouterr()
    assert main(["gc", "-r", str(reg_root), "--grace", "0", "--apply", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"bytes": 2_000_000, "dry_run": False, "freed": [".import-killed"], "kept": []}
    assert not (reg_root / ".import-killed").exists()
    assert main(["gc", "-r", str(reg_root), "--grace", "-1"]) == 2


def test_damaged_registries_give_one_clear_error_not_a_traceback(tmp_path):
    # issue 11: export of a version whose blob was deleted; verify with a blob replaced by a
    # folder; -r naming a file
    reg_root = tmp_path / "reg"
    api.register(*make_files(tmp_path, seed=0), registry=reg_root)
    reg = Registry(reg_root)
    v = reg.get("sim_gaussian")
    p = reg.blob_path(v.tail)
    os.chmod(p, 0o644)
    p.unlink()
    with pytest.raises(RegistryError, match="missing.*rscale verify"):
        api.export("sim_gaussian", tmp_path / "b.tar", registry=reg_root)
    assert not (tmp_path / "b.tar").exists()
    p.mkdir()
    report = api.verify(reg_root)
    assert report["corrupt"] == [v.tail] and report["missing"] == []
    a_file = tmp_path / "not-a-folder"
    a_file.write_text("x")
    for call in (lambda: api.query("mAP@1000 at N=1e8 for x", a_file), lambda: api.import_(a_file, a_file)):
        with pytest.raises(RegistryError, match="is a file, not a registry folder"):
            call()


def test_registering_the_content_again_repairs_a_damaged_blob(tmp_path):
    reg_root = tmp_path / "reg"
    h, s = make_files(tmp_path, seed=0)
    api.register(h, s, registry=reg_root)
    reg = Registry(reg_root)
    v = reg.get("sim_gaussian")
    p = reg.blob_path(v.hardness)
    data = p.read_bytes()
    os.chmod(p, 0o644)
    p.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    assert api.verify(reg_root)["corrupt"] == [v.hardness]
    assert not api.register(h, s, registry=reg_root)["created"]
    assert api.verify(reg_root)["corrupt"] == [] and p.read_bytes() == data


def test_verify_reports_unreadable_catalog_rows_instead_of_crashing(tmp_path):
    reg_root = tmp_path / "reg"
    api.register(*make_files(tmp_path, seed=0), registry=reg_root)
    reg = Registry(reg_root)
    with reg.connect(write=True) as con:
        con.execute("UPDATE versions SET summary = '{not json', hardness = 'garbage'")
    from rscale.store.registry import clear_caches
    clear_caches()
    report = api.verify(reg_root)
    assert "garbage" in report["corrupt"] and any(c.startswith("catalog row sim_gaussian@v1") for c in report["corrupt"])
    with pytest.raises(RegistryError, match="row digest"):
        api.query("mAP@1000 at N=1e8 for sim_gaussian", reg_root, bootstrap=0)


def test_import_into_a_registry_it_cannot_write_is_one_clear_error(tmp_path, monkeypatch):
    src = tmp_path / "src"
    api.register(*make_files(tmp_path, seed=0), registry=src)
    bundle, _ = api.export("sim_gaussian", tmp_path / "b.tar", registry=src)
    target = tmp_path / "ro"
    target.mkdir()

    def read_only(*a, **k):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr("tempfile.mkdtemp", read_only)
    with pytest.raises(FormatError, match="cannot write into the registry.*folder you can write"):
        api.import_(bundle, target)
    assert list(target.iterdir()) == []
