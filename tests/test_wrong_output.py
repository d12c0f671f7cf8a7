"""Regression tests for the wrong answers of issue 11 (each failed before its fix)."""

from dataclasses import replace

import pytest

from rscale import api, sim
from rscale.core.estimators.methods import estimate
from rscale.core.replicates import hardness_replicates
from rscale.errors import InvalidArgumentError
from rscale.sim.presets import PRESETS
from rscale.store.hardness_file import write_hardness
from rscale.store.sample_stats_file import write_sample_stats


def make_files(tmp_path, preset="sim_gaussian", seed=0, queries=40, s=500_000, k=300, name=None):
    bench = sim.simulate(replace(PRESETS[preset], n_queries=queries), seed=seed)
    ss = sim.sample(bench, s, k=k, seed=seed)
    stem = name or f"{preset}-{seed}-{queries}-{s}"
    s_path = write_sample_stats(ss, tmp_path / f"{stem}.ss.parquet")
    h_path = tmp_path / f"{stem}.parquet"
    est = estimate(ss, "evt")
    write_hardness(replace(est, replicates=hardness_replicates(ss, method="evt", params=est.params, splits=2)), ss,
                   h_path)
    return h_path, s_path


def test_one_backbone_on_two_benchmarks_is_two_rows_compared_on_their_own_values(tmp_path):
    reg = tmp_path / "reg"
    ha, _ = make_files(tmp_path, "sim_gaussian")
    hb, _ = make_files(tmp_path, "sim_bounded")
    api.register(ha, None, registry=reg, backbone="bb", benchmark="bench_a")
    api.register(hb, None, registry=reg, backbone="bb", benchmark="bench_b")
    ans = api.query("mAP@1000 at N=1e8 for bb", reg, bootstrap=300)
    by = {r["benchmark"]: r["value"] for r in ans["rows"]}
    assert set(by) == {"bench_a", "bench_b"}
    want_a = api.predict(ha, ["mAP@1000"], sizes=[1e8], bootstrap=0)[0]["value"]
    want_b = api.predict(hb, ["mAP@1000"], sizes=[1e8], bootstrap=0)[0]["value"]
    assert by == {"bench_a": pytest.approx(want_a), "bench_b": pytest.approx(want_b)}
    # same query ids on both benchmarks: the paired difference is taken between the two series'
    # own per-query values (it was 0 when both were keyed 'bb@v1')
    from rscale.core.prediction import predict_per_query
    from rscale.core.uncertainty import paired_difference
    from rscale.store.hardness_file import read_hardness
    pa = predict_per_query(read_hardness(ha)[0], "AP", 1e8, 1000)
    pb = predict_per_query(read_hardness(hb)[0], "AP", 1e8, 1000)
    hi, lo = (pa, pb) if pa.mean() > pb.mean() else (pb, pa)
    d = paired_difference(hi, lo, 300, 0, 0.95)
    assert d.value > 0.01 and d.resolved
    assert not any("not ranked" in w for w in ans["warnings"])


def test_warnings_name_the_series_they_are_about(tmp_path):
    # one backbone on two benchmarks: a small sample on one of them; its warning must say which
    reg = tmp_path / "reg"
    small, _ = make_files(tmp_path, s=20_000)
    big, _ = make_files(tmp_path, seed=1)
    api.register(small, None, registry=reg, backbone="bb", benchmark="tiny")
    api.register(big, None, registry=reg, backbone="bb", benchmark="large")
    ws = api.query("mAP@1000 at N=1e7 for bb", reg, bootstrap=0)["warnings"]
    bulk = [w for w in ws if "inside the bulk" in w]
    assert len(bulk) == 1 and "on tiny" in bulk[0] and "large" not in bulk[0]


def test_register_refuses_a_sample_the_hardness_was_not_estimated_from(tmp_path):
    reg = tmp_path / "reg"
    h, s = make_files(tmp_path, seed=0)
    _, other_draw = make_files(tmp_path, seed=1)            # same query ids, another draw of the sample
    _, other_queries = make_files(tmp_path, seed=0, queries=30)
    for wrong, what in ((other_draw, "differ"), (other_queries, "query ids differ")):
        with pytest.raises(InvalidArgumentError, match=f"not the sample of .*{what}"):
            api.register(h, wrong, registry=reg)
        with pytest.raises(InvalidArgumentError, match=f"not the sample of .*{what}"):
            api.predict(h, sample_stats=wrong, bootstrap=10)
    assert not (reg / "catalog.duckdb").exists()
    assert api.register(h, s, registry=reg)["created"]


def test_code_version_is_the_packages_own_not_the_working_directorys(tmp_path, monkeypatch):
    import subprocess
    from pathlib import Path

    import rscale
    from rscale.producers.lineage import code_version

    other = tmp_path / "other-repo"
    other.mkdir()
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    run = lambda *a: subprocess.run(["git", *a], cwd=other, check=True, capture_output=True, text=True,  # noqa: E731
                                    env={**__import__("os").environ, **env}).stdout.strip()
    run("init", "-q")
    (other / "f.txt").write_text("x")
    run("add", "f.txt")
    run("commit", "-qm", "other")
    foreign = run("rev-parse", "--short=12", "HEAD")
    monkeypatch.chdir(other)
    got = code_version()
    assert got.startswith(f"rscale {rscale.__version__}") and foreign not in got
    pkg = Path(rscale.__file__).resolve().parent
    own = subprocess.run(["git", "-C", str(pkg), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    tracked = subprocess.run(["git", "-C", str(pkg), "ls-files", "--error-unmatch", "__init__.py"], capture_output=True)
    if own.returncode == 0 and tracked.returncode == 0:        # running from a checkout: its own commit
        assert f" git {own.stdout.strip()}" in got
    else:
        assert got == f"rscale {rscale.__version__}"


@pytest.mark.parametrize("name", ["facebook/dinov2-large", "my model", "*", "a@b", "dino*", "x,y", "a=b", "for",
                                  "Expected", "a b"])
def test_names_a_query_cannot_name_are_refused_at_registration(tmp_path, name):
    from rscale.api.registry import check_name
    reg = tmp_path / "reg"
    h, _ = make_files(tmp_path, queries=10)
    with pytest.raises(InvalidArgumentError, match="cannot be named in a query: use letters, digits and _ . -"):
        api.register(h, None, registry=reg, backbone=name)
    with pytest.raises(InvalidArgumentError, match="benchmark name"):
        api.register(h, None, registry=reg, benchmark=name)
    assert not (reg / "catalog.duckdb").exists()
    api.register(h, None, registry=reg)
    with pytest.raises(InvalidArgumentError, match="tag name"):
        api.tag("sim_gaussian@v1", name, registry=reg)
    for kind in ("backbone", "benchmark", "tag"):
        with pytest.raises(InvalidArgumentError):
            check_name(kind, name)
        with pytest.raises(InvalidArgumentError):
            check_name(kind, "")


def test_every_accepted_name_can_be_queried(tmp_path):
    reg = tmp_path / "reg"
    h, _ = make_files(tmp_path, queries=10)
    out = api.register(h, None, registry=reg, backbone="dinov2-large_v1.5", benchmark="ilias.mini-2")
    api.tag(out["ref"], "rel-1.0", registry=reg)
    (row,) = api.query("R@1 at N=1e6 for dinov2-large_v1.5@rel-1.0 on ilias.mini-2", reg, bootstrap=0)["rows"]
    assert (row["backbone"], row["benchmark"], row["version"]) == ("dinov2-large_v1.5", "ilias.mini-2", "v1")
    # the message suggests a name that works
    with pytest.raises(InvalidArgumentError, match="e.g. 'facebook_dinov2-large' with --backbone"):
        api.register(h, None, registry=reg, backbone="facebook/dinov2-large")


def test_curve_starts_at_its_measured_points_and_draws_the_reported_interval(tmp_path):
    reg = tmp_path / "reg"
    h, s = make_files(tmp_path, s=20_000, queries=50)
    api.register(h, s, registry=reg)
    data = api.curve("mAP@1000 for sim_gaussian", registry=reg, points=9, bootstrap=200)
    (series,) = data["series"]
    first_measured = series["sampled"][0][0]
    assert first_measured < 1e4 and series["N"][0] <= first_measured
    assert series["N"][-1] >= 1e9
    # the band is the interval `rscale query` reports at the same sizes (same bootstrap and seed)
    band = api.curve("mAP@1000 for sim_gaussian", "1e6..1e8", points=3, registry=reg, bootstrap=200)["series"][0]
    assert band["N"] == [1e6, 1e7, 1e8]
    rows = api.query("mAP@1000 at N=1e6,1e7,1e8 for sim_gaussian", reg, bootstrap=200)["rows"]
    assert [r["value"] for r in rows] == pytest.approx(band["value"])
    assert [r["ci_low"] for r in rows] == pytest.approx(band["ci_low"])
    assert [r["ci_high"] for r in rows] == pytest.approx(band["ci_high"])
    # and it is the interval `rscale predict` gives from the file (the same core function)
    direct = api.predict(h, ["mAP@1000"], sizes=[1e8], bootstrap=200)[0]
    assert (band["ci_low"][-1], band["ci_high"][-1]) == pytest.approx((direct["ci_low"], direct["ci_high"]))
    assert band["ci_low"][-1] < band["value"][-1] < band["ci_high"][-1]


def test_a_writer_killed_while_creating_the_catalog_leaves_no_tableless_catalog(tmp_path, monkeypatch):
    """Regression: the first registration into a new registry opened catalog.duckdb in place and
    then ran its DDL; killed in between (tests/test_o2i_registry.py's kill harness hit it), it left
    a catalog.duckdb without tables that every later command refused as "not an rscale catalog".
    The catalog is now built under a temporary name and linked into place whole."""
    import duckdb

    from rscale.store import catalog as catalog_mod

    path = tmp_path / "reg" / "catalog.duckdb"
    real_connect = duckdb.connect

    def dying_connect(target, *a, **kw):          # the writer "dies" right after the file appears
        con = real_connect(target, *a, **kw)
        if not kw.get("read_only") and not hasattr(dying_connect, "done"):
            dying_connect.done = True
            con.close()
            raise KeyboardInterrupt("killed")
        return con

    monkeypatch.setattr(duckdb, "connect", dying_connect)
    with pytest.raises(KeyboardInterrupt):
        catalog_mod.Catalog(path).init()
    monkeypatch.setattr(duckdb, "connect", real_connect)
    assert not path.exists()                      # nothing half-made under the real name ...
    assert not [p for p in path.parent.iterdir() if not p.name.startswith(".")]
    catalog_mod.Catalog(path).init()              # ... and the next writer creates it normally
    assert catalog_mod.Catalog(path).read_versions() == []
