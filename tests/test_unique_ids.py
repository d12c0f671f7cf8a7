"""The descriptor-set writer's id check in 8 bytes per id (rscale.store.unique_ids) against a
Python set, including forced 64-bit hash collisions, which must be confirmed on the ids."""

import numpy as np
import pytest

from rscale.errors import FormatError
from rscale.store import unique_ids
from rscale.store.descriptor_set import write_descriptor_set
from rscale.store.unique_ids import UniqueIds, id_keys


def _first_duplicate(blocks):
    seen = set()
    for b in blocks:
        values = b.tolist()
        for i, x in enumerate(values):
            if x in seen or x in values[:i] or x in values[i + 1:]:
                return len(seen), x
        seen.update(values)
    return None


@pytest.mark.parametrize("kind", ["int", "str"])
def test_agrees_with_a_python_set(kind):
    rng = np.random.default_rng(1)
    for _ in range(200):
        blocks = []
        for _ in range(rng.integers(1, 7)):
            pool = rng.integers(0, 150, rng.integers(0, 25))
            blocks.append(pool if kind == "int" else np.array([f"img/{x:04d}" for x in pool]))
        want = _first_duplicate(blocks)
        u, got, added = UniqueIds(), None, []
        for b in blocks:
            got = u.add(b, lambda: iter(added))
            if got is not None:
                break
            added.append(b)
        assert (got is None) == (want is None)
        if got is not None:   # the id returned really is a duplicate
            assert np.concatenate(added + [b]).tolist().count(got) >= 2


def test_a_string_key_ignores_padding_and_integers_are_exact():
    assert id_keys(np.array(["ab"]))[0] == id_keys(np.array(["ab", "abcdefgh"]))[0]
    assert id_keys(np.array(["ab"]))[0] != id_keys(np.array(["ba"]))[0]
    np.testing.assert_array_equal(id_keys(np.array([3, 2**40])), np.array([3, 2**40], dtype=np.uint64))


def test_hash_collisions_are_confirmed_on_the_ids(monkeypatch, tmp_path):
    # every string the same key: each block collides with all earlier ones, yet only a real
    # duplicate may be refused, through the ids the writer already wrote to its shards
    monkeypatch.setattr(unique_ids, "id_keys", lambda ids: np.zeros(len(ids), dtype=np.uint64)
                        if np.asarray(ids).dtype.kind not in "iu" else np.asarray(ids).astype(np.uint64))
    v = np.eye(4, dtype=np.float32)
    blocks = [(np.array(["a0", "a1"]), v[:2]), (np.array(["b0", "b1"]), v[2:])]
    with pytest.raises(FormatError, match="duplicate id 'a1'"):
        write_descriptor_set(tmp_path / "x", [blocks[0], (np.array(["a2"]), v[:1]), (np.array(["a1"]), v[:1])],
                             role="distractors", shard_size=2)
    with pytest.raises(FormatError, match="duplicate id 'q'"):
        write_descriptor_set(tmp_path / "w", [blocks[0], (np.array(["q", "r", "q"]), v[:3])], role="distractors")
    # distinct ids spread over written shards and the buffer: all collide, none is a duplicate
    ds = write_descriptor_set(tmp_path / "y", [*blocks, (np.array(["c0"]), v[:1])], role="distractors",
                              shard_size=3)
    assert ds.count == 5
    with pytest.raises(FormatError, match="duplicate id 'b0'"):
        write_descriptor_set(tmp_path / "z", [*blocks, (np.array(["b0"]), v[:1])], role="distractors", shard_size=3)
