import json
import multiprocessing as mp
import os
import tarfile
from dataclasses import replace

import numpy as np
import pytest

from rscale import api, sim
from rscale.core.estimators.methods import estimate
from rscale.errors import FormatError, NotFoundError, RegistryError, SchemaVersionError
from rscale.sim.presets import PRESETS
from rscale.store.hardness_file import write_hardness
from rscale.store.registry import Registry
from rscale.store.sample_stats_file import write_sample_stats


def make_files(tmp_path, preset="sim_gaussian", seed=0, method="evt", queries=40, s=500_000):
    bench = sim.simulate(replace(PRESETS[preset], n_queries=queries), seed=seed)
    ss = sim.sample(bench, s, k=300, seed=seed)
    s_path = write_sample_stats(ss, tmp_path / f"{preset}-{seed}.ss.parquet")
    h_path = tmp_path / f"{preset}-{seed}-{method}.parquet"
    write_hardness(estimate(ss, method), ss, h_path)
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
    h2, _ = make_files(tmp_path, preset="sim_neardup", seed=5, queries=1000, s=200_000)
    api.register(h2, None, registry=reg)
    d = api.diff("sim_neardup@v1", "sim_neardup@v2", registry=reg, top=3)
    assert d["queries_compared"] == 1000 and len(d["largest_query_changes"]) == 3
    assert d["ci_low"] <= d["difference"] <= d["ci_high"]
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
    with pytest.raises(RegistryError):
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


def test_failed_registration_leaves_nothing_behind(tmp_path, monkeypatch):
    reg_root = tmp_path / "reg"
    h1, s1 = make_files(tmp_path, seed=0)
    api.register(h1, s1, registry=reg_root)
    before = api.verify(reg_root)
    h2, s2 = make_files(tmp_path, seed=1)

    def boom(*a, **k):
        raise RuntimeError("disk full in the middle of the catalog transaction")
    monkeypatch.setattr(Registry, "_register_rows", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        api.register(h2, s2, registry=reg_root)
    monkeypatch.undo()
    after = api.verify(reg_root)
    assert after == before                     # no orphan blobs, nothing corrupt or missing
    assert [v.version for v in api.list_versions(reg_root)] == [1]
    # a sample-stats file is not a hardness table: refused before anything is written
    from rscale.errors import FormatError
    with pytest.raises(FormatError):
        api.register(s2, None, registry=reg_root)
    assert api.verify(reg_root) == before


def test_sensitivity_range_is_stored_and_reported(tmp_path):
    reg = tmp_path / "reg"
    h, s = make_files(tmp_path, preset="sim_gaussian", queries=60)
    api.register(h, s, registry=reg)
    sens = api.show("sim_gaussian", reg).summary["sensitivity"]
    assert all(lo <= hi for lo, hi in zip(sens["low"], sens["high"]))
    row = api.query("mAP@1000 at N=1e8 for sim_gaussian", reg)["rows"][0]
    i = sens["N"].index(1e8)
    assert row["range_low"] == pytest.approx(min(row["ci_low"], sens["low"][i]))
    assert row["range_high"] == pytest.approx(max(row["ci_high"], sens["high"][i]))
    assert row["range_low"] <= row["value"] <= row["range_high"]
    # a measure without a stored band: the range is the CI
    r1 = api.query("R@1 at N=1e8 for sim_gaussian", reg)["rows"][0]
    assert (r1["range_low"], r1["range_high"]) == (r1["ci_low"], r1["ci_high"])


def test_reported_ci_adds_the_distractor_and_convergence_terms(tmp_path):
    reg = tmp_path / "reg"
    h, s = make_files(tmp_path, preset="sim_gaussian", queries=60)
    api.register(h, s, registry=reg)
    dsd = api.show("sim_gaussian", reg).summary["distractor_sd"]
    assert dsd["splits"] == 3 and all(v >= 0 for v in dsd["sd"])
    with_term = api.query("mAP@1000 at N=1e8 for sim_gaussian", reg)["rows"][0]
    h2, _ = make_files(tmp_path, preset="sim_gaussian", queries=60)
    plain = api.predict(h2, ["mAP@1000"], sizes=[1e8])[0]           # query bootstrap only
    assert with_term["value"] == pytest.approx(plain["value"])
    assert with_term["ci_low"] <= plain["ci_low"] + 1e-12 and with_term["ci_high"] >= plain["ci_high"] - 1e-12
    i = dsd["N"].index(1e8)
    extra, bias = 1.96 * dsd["sd"][i], 2.0 * abs(dsd["step"][i])
    v = with_term["value"]
    assert bias > 0
    assert v - with_term["ci_low"] == pytest.approx(np.hypot(v - plain["ci_low"], extra) + bias, rel=1e-6)
    assert with_term["ci_high"] - v == pytest.approx(np.hypot(plain["ci_high"] - v, extra) + bias, rel=1e-6)


def _registry_written_a_minute_ago(tmp_path):
    """A registry with one version whose catalog was last written a minute ago (cacheable)."""
    from rscale.store.registry import Registry

    reg_path = tmp_path / "reg"
    h1, s1 = make_files(tmp_path, seed=0)
    api.register(h1, s1, registry=reg_path)
    reg = Registry(reg_path)
    old = reg.catalog.stat().st_mtime - 60
    os.utime(reg.catalog, (old, old))
    return reg_path, reg


def test_catalog_and_hardness_caches_never_serve_stale_answers(tmp_path, monkeypatch):
    from rscale.store.registry import Registry

    reg_path, reg = _registry_written_a_minute_ago(tmp_path)
    first = reg.versions()
    real_connect = Registry.connect

    def refuse(self, write=False, **kw):
        if not write:
            raise AssertionError("catalog read although it did not change")
        return real_connect(self, write=write, **kw)

    monkeypatch.setattr(Registry, "connect", refuse)
    assert Registry(reg_path).versions() == first       # served from the cache: no connection
    monkeypatch.setattr(Registry, "connect", real_connect)
    h2, s2 = make_files(tmp_path, seed=1)
    api.register(h2, s2, registry=reg_path)                      # the catalog changes: the cache must notice
    assert [v.version for v in Registry(reg_path).versions()] == [1, 2]
    # a freshly written catalog is not cached at all (coarse file times)
    monkeypatch.setattr(Registry, "connect", refuse)
    with pytest.raises(AssertionError, match="did not change"):
        Registry(reg_path).versions()
    monkeypatch.setattr(Registry, "connect", real_connect)
    # decoded hardness is cached by digest and cannot be modified through the cache
    v = Registry(reg_path).resolve("sim_gaussian", "v1")[0]
    a, _ = reg.read_hardness(v)
    b, _ = reg.read_hardness(v)
    assert a is b and not a.x.flags.writeable
    with pytest.raises(ValueError):
        a.x[0] = 0.5


def test_catalog_snapshot_serves_cold_processes_and_never_goes_stale(tmp_path, monkeypatch):
    import subprocess
    import sys

    from rscale.store import registry as registry_module
    from rscale.store.registry import Registry

    reg_path, reg = _registry_written_a_minute_ago(tmp_path)
    first = reg.versions()
    assert reg.snapshot.exists()
    # a cold process answers from the snapshot without importing duckdb at all
    code = ("import sys; from rscale import api; "
            f"rows = api.query('mAP@1000 at N=1e8 for sim_gaussian', {str(reg_path)!r}, bootstrap=0)['rows']; "
            "print(len(rows), 'duckdb' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["1", "False"]
    # same process, memory cache cleared: served from the file
    registry_module._CATALOG_CACHE.clear()
    monkeypatch.setattr(Registry, "_read_versions", lambda self: pytest.fail("catalog read"))
    assert Registry(reg_path).versions() == first
    monkeypatch.undo()
    # a registration changes the catalog: the snapshot's key no longer matches
    h2, s2 = make_files(tmp_path, seed=1)
    api.register(h2, s2, registry=reg_path)
    registry_module._CATALOG_CACHE.clear()
    assert [v.version for v in Registry(reg_path).versions()] == [1, 2]
    # a damaged snapshot is ignored, and a tampered one (matching key) is reported by verify
    old = reg.catalog.stat().st_mtime - 60
    os.utime(reg.catalog, (old, old))
    registry_module._CATALOG_CACHE.clear()
    reg.snapshot.write_text("{not json")
    assert [v.version for v in Registry(reg_path).versions()] == [1, 2]
    assert reg.verify()["corrupt"] == []
    data = json.loads(reg.snapshot.read_text())
    data["versions"][0]["hardness"] = "sha256:" + "0" * 64
    reg.snapshot.write_text(json.dumps(data))
    assert reg.verify()["corrupt"] == ["catalog.snapshot.json"]


def test_rejected_tails_widen_the_interval_and_warn(tmp_path):
    bench = sim.simulate(replace(PRESETS["sim_neardup"], n_queries=80), seed=2)
    ss = sim.sample(bench, 1_000_000, k=4000, seed=2)
    s_path = write_sample_stats(ss, tmp_path / "nd.ss.parquet")
    h_path = tmp_path / "nd.parquet"
    write_hardness(estimate(ss, "evt"), ss, h_path)
    reg = tmp_path / "reg"
    api.register(h_path, s_path, registry=reg)
    check = api.show("sim_neardup", reg).summary["tail_check"]
    assert check["rejected_share"] >= 0.05
    ans = api.query("mAP@1000 at N=1e8 for sim_neardup", reg)
    row = ans["rows"][0]
    alt = check["alternative"][check["N"].index(1e8)]
    assert alt < row["value"] and row["ci_low"] <= alt        # the interval reaches the count bound
    for key in ("own_shape", "shared_shape", "heavy_shape", "single_threshold"):   # every other tail model
        assert row["ci_low"] <= check[key][check["N"].index(1e8)] <= row["ci_high"], key
    assert any("fitted tail of" in w and "rejected" in w for w in ans["warnings"])


def test_reported_ci_reads_whichever_tail_alternatives_a_version_stored():
    # versions registered by an older rscale have only some of the summary's terms
    from rscale.api.querying import _reported_ci

    dsd = {"measure": "mAP@1000", "N": [1e6, 1e8], "sd": [0.0, 0.0], "step": [0.0, 0.0]}
    old = {"measure": "mAP@1000", "N": [1e6, 1e8], "alternative": [0.5, 0.45]}
    new = {**old, "own_shape": [0.5, 0.62], "shared_shape": [0.5, 0.51], "heavy_shape": [0.5, 0.40],
           "single_threshold": [0.5, 0.66]}
    assert _reported_ci(None, None, "mAP@1000", 1e8, 0.5, 0.48, 0.52) == (0.48, 0.52)
    assert _reported_ci(dsd, old, "mAP@1000", 1e8, 0.5, 0.48, 0.52) == pytest.approx((0.45, 0.52))
    assert _reported_ci(dsd, new, "mAP@1000", 1e8, 0.5, 0.48, 0.52) == pytest.approx((0.40, 0.66))
    # another measure than the stored one: its terms do not apply
    assert _reported_ci(dsd, new, "R@1", 1e8, 0.5, 0.48, 0.52) == (0.48, 0.52)
    # log-N interpolation between stored sizes
    lo, hi = _reported_ci(dsd, new, "mAP@1000", 1e7, 0.5, 0.48, 0.52)
    assert lo == pytest.approx(0.45) and hi == pytest.approx(0.58)
