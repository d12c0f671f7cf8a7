"""What the real-embedding validation sets share (docs/realset.md, docs/realset2.md): the Debian
packages' recorded versions, the disjoint-draw protocol and the scoring of one draw.

Both builds partition their pool by ``hash_uniform(id, PARTITION_SEED)``: draw j of fraction f
holds the ids with j f u_max <= u < (j + 1) f u_max (u_max = 1 for a whole pool), :data:`DRAWS`
disjoint draws per fraction of :data:`FRACTIONS`, and score the whole pool (the truth, top
:data:`K_TRUTH`) and every draw (top :data:`K_DRAW`) with the scoring engine at fraction 1.0.

``benchmarks/realset/build.py`` and ``embed.py`` import it by name (their folder is on their path);
``benchmarks/realset2/build.py`` loads it by file, as ``realset2/check.py`` loads ``realset/check.py``.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

PARTITION_SEED = 14
FRACTIONS = (0.01, 0.02, 0.05, 0.10)
DRAWS = 5
K_TRUTH = 1000
K_DRAW = 1000


def package_versions(packages, doc: str) -> dict:
    """{package: installed Debian version}; exits naming the package and ``doc`` when one is missing."""
    out = {}
    for p in packages:
        v = subprocess.run(["dpkg-query", "-W", "-f=${Version}", p], capture_output=True, text=True)
        if v.returncode != 0:
            sys.exit(f"package {p} is not installed: apt-get install {p} (see {doc} for the versions)")
        out[p] = v.stdout.strip()
    return out


def draw_name(f: float, j: int) -> str:
    return f"draw-{round(f * 100):02d}pct-{j}"


def score_draws(run, u, u_max: float = 1.0) -> dict:
    """{name: S}: ``run(name, mask, k)`` on the whole pool (``truth``, :data:`K_TRUTH`) and on every
    draw of every fraction (:data:`K_DRAW`), in that order; ``u`` the pool's partition values."""
    import numpy as np
    sizes = {"truth": run("truth", np.ones(len(u), bool), K_TRUTH)}
    for f in FRACTIONS:
        for j in range(DRAWS):
            # a cut pool is the slice u <= u_max: the draws are the same slices of it, scaled
            lo, hi = j * f * u_max, (j + 1) * f * u_max
            sizes[draw_name(f, j)] = run(draw_name(f, j), (u >= lo) & (u < hi), K_DRAW)
    return sizes


def score_draw(sets: Path, out: Path, name: str, ids, vectors, *, k: int, meta: dict, benchmark: str,
               **write_options) -> int:
    """Score one distractor set (``ids``, ``vectors``) against WORK/sets' queries and positives at
    fraction 1.0, keep its top ``k`` (at most its size), and write OUT/NAME.sample_stats.parquet with the
    engine's float32 scores stored as float32 (lossless) and ``write_options`` for pyarrow; the
    distractor set is removed after. Returns S."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rscale.api.scoring import score
    from rscale.store.descriptor_set import write_descriptor_set
    from rscale.store.sample_stats_file import read_sample_stats, to_table

    dset = sets / name
    write_descriptor_set(dset, [(ids, vectors)], role="distractors", dtype="float32", meta=meta)
    tmp = sets / f"{name}.sample_stats.parquet"
    score(sets / "queries", sets / "positives", qrels=sets / "qrels.parquet", distractors_dir=dset, out=tmp,
          fraction=1.0, k=min(k, len(ids)), meta={"benchmark": benchmark, "draw": name}, lineage=False)
    t = to_table(read_sample_stats(tmp))
    for col in ("top_scores", "positive_scores"):
        t = t.set_column(t.column_names.index(col), col, t.column(col).cast(pa.list_(pa.float32())))
    pq.write_table(t, out / f"{name}.sample_stats.parquet", compression="zstd", compression_level=19, **write_options)
    shutil.rmtree(dset)
    return len(ids)


def file_digests(out: Path) -> dict:
    """{name: sha256} of every parquet file in OUT (the manifest's ``files``)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(Path(out).glob("*.parquet"))}
