"""Nothing is answered from data whose digest was not checked (issue 12 item 4)."""

import os
import re

import numpy as np
import pytest

from rscale import api
from rscale.cli import main
from rscale.errors import RegistryError
from rscale.store.catalog_cache import content_key
from rscale.store.registry import Registry, clear_caches

from test_registry import make_files

Q = "mAP@1000 at N=1e8 for sim_gaussian@v1"


@pytest.fixture
def two_versions(tmp_path):
    reg_root = tmp_path / "reg"
    api.register(*make_files(tmp_path, seed=0, queries=20, s=200_000), registry=reg_root)
    api.register(*make_files(tmp_path, seed=1, queries=20, s=200_000), registry=reg_root)
    reg = Registry(reg_root)
    v1, v2 = reg.get("sim_gaussian", "v1"), reg.get("sim_gaussian", "v2")
    return reg_root, reg, v1, v2


def _rewrite(path, data):
    os.chmod(path, 0o644)
    path.write_bytes(data)
    os.chmod(path, 0o444)


def test_every_byte_flip_in_a_hardness_blob_is_refused_as_corrupt(two_versions):
    reg_root, reg, v1, _ = two_versions
    good = api.query(Q, reg_root, bootstrap=0)["rows"][0]["value"]
    p = reg.blob_path(v1.hardness)
    data = p.read_bytes()
    positions = np.linspace(0, len(data) - 1, 40).astype(int)
    for pos in positions:                     # 40 single-byte flips, each a new process's first read
        _rewrite(p, data[:pos] + bytes([data[pos] ^ 0x10]) + data[pos + 1:])
        clear_caches()
        with pytest.raises(RegistryError, match=r"blob sha256:[0-9a-f]{64} \(hardness of sim_gaussian@v1\) "
                                                r"corrupt: .*rscale verify"):
            api.query(Q, reg_root, bootstrap=0)
    _rewrite(p, data)
    clear_caches()
    assert api.query(Q, reg_root, bootstrap=0)["rows"][0]["value"] == good


def test_a_blob_swapped_or_linked_to_another_versions_is_refused_in_the_same_process(two_versions):
    reg_root, reg, v1, v2 = two_versions
    a = api.query(Q, reg_root, bootstrap=0)["rows"][0]["value"]      # v1 verified and cached
    p1, p2 = reg.blob_path(v1.hardness), reg.blob_path(v2.hardness)
    tmp = p1.with_name("swap")
    tmp.write_bytes(p2.read_bytes())
    os.replace(tmp, p1)                                              # v2's bytes under v1's name
    swapped = r"\(hardness of sim_gaussian@v1\) corrupt: (its bytes do not hash|\d+ bytes, the catalog records)"
    with pytest.raises(RegistryError, match=swapped):
        api.query(Q, reg_root, bootstrap=0)
    p1.unlink()
    os.symlink(p2, p1)                                               # or a link to v2's blob
    with pytest.raises(RegistryError, match="corrupt: it is a symbolic link"):
        api.query(Q, reg_root, bootstrap=0)
    clear_caches()
    with pytest.raises(RegistryError, match="symbolic link"):
        api.query(Q, reg_root, bootstrap=0)
    assert api.query("mAP@1000 at N=1e8 for sim_gaussian@v2", reg_root, bootstrap=0)["rows"][0]["value"] != a


def test_the_cli_words_a_corrupt_blob_as_corrupt_not_as_a_format_error(two_versions, capsys):
    reg_root, reg, v1, _ = two_versions
    p = reg.blob_path(v1.hardness)
    data = p.read_bytes()
    _rewrite(p, data[:100] + b"\x00" * 50 + data[150:])
    clear_caches()
    capsys.readouterr()
    assert main(["query", Q, "-r", str(reg_root), "--bootstrap", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.match(r"error: blob sha256:[0-9a-f]{64} .*corrupt.*rscale verify", err), err
    assert "Parquet" not in err and "column" not in err


def test_a_deleted_sample_blob_is_an_error_not_silently_fewer_points(two_versions):
    reg_root, reg, v1, _ = two_versions
    ok = api.curve("mAP@1000 for sim_gaussian@v1", "1e5..1e8", points=4, registry=reg_root, bootstrap=20)
    assert len(ok["series"][0]["sampled"]) == 4
    os.chmod(reg.blob_path(v1.sample), 0o644)
    reg.blob_path(v1.sample).unlink()
    with pytest.raises(RegistryError, match="sample.* missing|missing.*rscale verify"):
        api.curve("mAP@1000 for sim_gaussian@v1", "1e5..1e8", points=4, registry=reg_root, bootstrap=20)


def test_a_blob_is_hashed_once_per_file_identity(two_versions, monkeypatch):
    reg_root, reg, v1, _ = two_versions
    from rscale.store import blobs

    calls = []
    real = blobs.sha256_file
    monkeypatch.setattr(blobs, "sha256_file", lambda p, *a: calls.append(str(p)) or real(p, *a))
    clear_caches()
    for _ in range(5):
        api.query(Q, reg_root, bootstrap=0)
    assert calls == [str(reg.blob_path(v1.hardness))]


def test_a_cold_query_loads_neither_pandas_nor_duckdb_nor_heavy_extras(two_versions):
    # issue 12 item 11: pyarrow's to_numpy imported pandas (~0.2 s of a cold query)
    import subprocess
    import sys

    from test_cli import HEAVY

    reg_root, *_ = two_versions
    api.query(Q, reg_root, bootstrap=0)                  # the snapshot exists
    # a query reads Parquet into arrays: numpy and pyarrow are its own, everything else is heavy
    heavy = tuple(m for m in HEAVY if m not in ("numpy", "pyarrow")) + ("duckdb",)
    code = ("import sys\nfrom rscale.cli import main\n"
            f"assert main(['query', {Q!r}, '-r', {str(reg_root)!r}, '--bootstrap', '0']) == 0\n"
            f"print('LOADED', ','.join(m for m in {heavy!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pandas" in HEAVY and out.stdout.strip().endswith("LOADED"), out.stdout


def test_a_refused_read_writes_no_snapshot_and_a_current_one_is_never_rewritten(two_versions, capsys):
    # a read that fails (a blob failing its digest check, an unknown name) must write nothing,
    # although it read the catalog; a read that succeeds fills an absent snapshot once
    reg_root, reg, v1, _ = two_versions
    argv = ["query", Q, "-r", str(reg_root), "--bootstrap", "0"]
    reg.snapshot.unlink()
    p = reg.blob_path(v1.hardness)
    data = p.read_bytes()
    _rewrite(p, data[:100] + bytes([data[100] ^ 0x10]) + data[101:])
    clear_caches()
    assert main(argv) == 2 and "corrupt" in capsys.readouterr().err
    assert not reg.snapshot.exists()
    clear_caches()
    assert main(["query", "mAP@1000 at N=1e8 for nosuch", "-r", str(reg_root)]) == 2
    assert not reg.snapshot.exists()
    _rewrite(p, data)
    clear_caches()
    assert main(argv) == 0
    assert reg.cache.read_snapshot(content_key(reg.catalog)) == reg.catalog.read_versions()
    st = reg.snapshot.stat()
    for cmd in (argv, ["ls", "-r", str(reg_root)], ["show", "sim_gaussian@v2", "-r", str(reg_root)],
                ["report", "-r", str(reg_root), "-o", str(reg_root.parent / "r.md")]):
        clear_caches()
        assert main(cmd) == 0
        after = reg.snapshot.stat()
        assert (after.st_ino, after.st_mtime_ns) == (st.st_ino, st.st_mtime_ns), cmd
    # outside a command (the Python API) a read fills it at once, as before
    reg.snapshot.unlink()
    clear_caches()
    api.query(Q, reg_root, bootstrap=0)
    assert reg.snapshot.exists()
