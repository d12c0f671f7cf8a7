"""Crash harness (issue 12): SIGKILL `register` and `import` at random points, then check that
no version is lost or half-visible, and that the registry verifies clean after `rscale gc`.

RSCALE_CRASH_TRIALS sets the number of kills (default 12: CI); docs/reliability.md records a
larger run and its command."""

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from rscale import api
from rscale.store.registry import Registry, clear_caches

from test_registry import make_files

TRIALS = int(os.environ.get("RSCALE_CRASH_TRIALS", "12"))
SRC = os.path.join(os.path.dirname(__file__), "..", "src")


def _spawn(code, stdout=subprocess.DEVNULL):
    env = {**os.environ, "PYTHONPATH": os.path.abspath(SRC) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=stdout, stderr=subprocess.PIPE)


def _check_invariants(root, committed):
    """Every visible version has all its blobs, intact; every version seen before is still there."""
    clear_caches()
    reg = Registry(root)
    versions = reg.versions()
    keys = {(v.backbone, v.version): v for v in versions}
    assert set(committed) <= set(keys), "a committed version was lost"
    for bb in {v.backbone for v in versions}:
        numbers = sorted(v.version for v in versions if v.backbone == bb)
        assert numbers == list(range(1, len(numbers) + 1)), f"{bb}: version numbers {numbers}"
    report = reg.verify()
    assert report["corrupt"] == [] and report["missing"] == [] and report["extra"] == [], report
    for v in versions:                                    # visible means readable
        reg.read_hardness(v)
    return {k: v.hardness for k, v in keys.items()}


@pytest.mark.slow
def test_sigkill_at_random_points_of_register_and_import(tmp_path):
    rng = random.Random(12)
    root = tmp_path / "reg"
    api.register(*make_files(tmp_path / "base", seed=100, queries=10, s=50_000), registry=root)
    jobs = []
    src = tmp_path / "src"
    for i in range(TRIALS):
        h, s = make_files(tmp_path / f"in{i}", seed=i, queries=10, s=50_000)
        if i % 2 == 0:
            jobs.append(("register", f"from rscale import api; api.register({str(h)!r}, None, registry={str(root)!r}, "
                                     f"backbone='crash{i}')"))
        else:
            api.register(h, s, registry=src, backbone=f"crash{i}")
            bundle, _ = api.export(f"crash{i}", tmp_path / f"b{i}.tar", registry=src)
            jobs.append(("import", f"from rscale import api; api.import_({str(bundle)!r}, {str(root)!r})"))
    # how long an uninterrupted run takes (interpreter start included), per kind
    full = {}
    for kind, code in (jobs[0], jobs[1]):
        probe = code.replace(str(root), str(tmp_path / f"probe-{kind}"))
        t = time.perf_counter()
        p = _spawn(probe)
        assert p.wait() == 0, p.stderr.read().decode()
        full[kind] = time.perf_counter() - t
    committed = _check_invariants(root, {})
    kills = {"register": 0, "import": 0}
    for kind, code in jobs:
        p = _spawn(code)
        time.sleep(rng.uniform(0.3, 1.1) * full[kind])
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            kills[kind] += 1
        p.wait()
        p.stderr.close()
        committed = _check_invariants(root, committed)
    # after gc, nothing is left but what versions reference; the runs that were killed can be redone
    leftovers = Registry(root).verify()["leftovers"]
    freed = Registry(root).gc(grace_s=0, dry_run=False)
    assert sorted(freed["freed"]) == sorted(leftovers)
    report = Registry(root).verify()
    assert {k: report[k] for k in ("corrupt", "missing", "extra", "leftovers")} == \
        {"corrupt": [], "missing": [], "extra": [], "leftovers": []}
    for kind, code in jobs:
        p = _spawn(code)
        assert p.wait() == 0, p.stderr.read().decode()
        p.stderr.close()
    final = _check_invariants(root, committed)
    assert len(final) == 1 + TRIALS                       # every job's version, exactly once
    assert sum(kills.values()) >= TRIALS // 3             # the harness did kill runs in flight
    print(f"crash harness: {TRIALS} trials, kills {kills}, leftovers freed by gc {len(leftovers)} "
          f"({freed['bytes']} bytes), lost 0, half-visible 0, full runs {full}")


def test_writers_readers_and_a_killed_writer_of_the_same_content(tmp_path):
    """Concurrent registrations of one content, a reader querying all along, and a writer of the
    same content killed mid-way: every writer succeeds with the same version, the reader never
    fails, and the registry verifies clean after gc (issue 12 item 5)."""
    root = tmp_path / "reg"
    base_h, _ = make_files(tmp_path / "base", seed=50, queries=10, s=50_000)
    api.register(base_h, None, registry=root, backbone="shared")
    h, _ = make_files(tmp_path / "same", seed=51, queries=10, s=50_000)
    write = f"from rscale import api; print(api.register({str(h)!r}, None, registry={str(root)!r}, backbone='shared')['ref'])"
    read = ("import time\nfrom rscale import api\nn = 0\nend = time.time() + 4\nwhile time.time() < end:\n"
            f"    api.query('mAP@1000 at N=1e8 for shared@v1', {str(root)!r}, bootstrap=0)\n    n += 1\nprint(n)")
    reader = _spawn(read, stdout=subprocess.PIPE)
    victim = _spawn(write)
    writers = [_spawn(write, stdout=subprocess.PIPE) for _ in range(3)]
    time.sleep(random.Random(5).uniform(0.3, 0.9))
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    victim.stderr.close()
    outs = []
    for p in writers:
        out, err = p.communicate()
        assert p.returncode == 0, err.decode()
        outs.append(out.decode().strip())
    assert outs == ["shared@v2"] * 3
    out, err = reader.communicate()
    assert reader.returncode == 0, err.decode()
    assert int(out) > 0
    reg = Registry(root)
    clear_caches()
    assert sorted(v.version for v in reg.versions()) == [1, 2]
    reg.gc(grace_s=0, dry_run=False)
    report = reg.verify()
    assert report["corrupt"] == report["missing"] == report["extra"] == report["leftovers"] == []


def test_gc_with_no_grace_in_a_loop_never_leaves_a_version_without_its_blobs(tmp_path):
    """gc --grace 0 racing registrations: each registration commits with its blobs or fails with
    one clear error; no committed version ever misses a blob."""
    root = tmp_path / "reg"
    api.register(*make_files(tmp_path / "base", seed=60, queries=10, s=50_000), registry=root)
    files = [make_files(tmp_path / f"r{i}", seed=61 + i, queries=10, s=50_000)[0] for i in range(4)]
    gc_loop = ("import time\nfrom rscale.store.registry import Registry\nend = time.time() + 6\nn = 0\n"
               f"while time.time() < end:\n    Registry({str(root)!r}).gc(grace_s=0, dry_run=False)\n    n += 1\n"
               "print(n)")
    writers = "\n".join(
        ["from rscale import api", "from rscale.errors import RegistryError", "ok = bad = 0",
         f"for h in {[str(f) for f in files]!r}:",
         "    try:",
         f"        api.register(h, None, registry={str(root)!r}, backbone='raced'); ok += 1",
         "    except RegistryError as exc:",
         "        assert 'keep disappearing' in str(exc), exc; bad += 1",
         "print(ok, bad)"])
    collector = _spawn(gc_loop, stdout=subprocess.PIPE)
    writer = _spawn(writers, stdout=subprocess.PIPE)
    out, err = writer.communicate()
    assert writer.returncode == 0, err.decode()
    ok, bad = map(int, out.split())
    assert ok + bad == len(files)
    out, err = collector.communicate()
    assert collector.returncode == 0, err.decode()
    assert int(out) > 0
    clear_caches()
    reg = Registry(root)
    report = reg.verify()
    assert report["missing"] == [] and report["corrupt"] == []
    assert len([v for v in reg.versions() if v.backbone == "raced"]) == ok
