"""What the real-embedding validation sets share (docs/realset.md, docs/realset2.md): the Debian
packages' recorded versions, the disjoint-draw protocol and the scoring of one draw.

Both builds partition their pool by ``hash_uniform(id, PARTITION_SEED)``: draw j of fraction f
holds the ids with j f u_max <= u < (j + 1) f u_max (u_max = 1 for a whole pool), :data:`DRAWS`
disjoint draws per fraction of :data:`FRACTIONS`, and score the whole pool (the truth, top
:data:`K_TRUTH`) and every draw (top :data:`K_DRAW`) with the scoring engine at fraction 1.0.

It also holds the chunked, resumable embedding that the larger sets' builds share
(:func:`embed_chunks`, :func:`claim_chunk`, :func:`embedded_prefix`, :func:`embedded_vectors`).

``benchmarks/realset/build.py`` and ``embed.py`` import it by name (their folder is on their path);
``benchmarks/realset2/build.py`` and ``benchmarks/realset3/build.py`` load it by file, as
``realset2/check.py`` loads ``realset/check.py``.
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


def claim_chunk(emb: Path, n_chunks: int):
    """The lowest chunk neither embedded nor claimed by a live worker, claimed for this process.

    A claim is ``chunk-NNNN.claim`` holding the worker's pid, made with O_EXCL; a claim whose pid is
    gone (a killed worker) is taken over. So any number of workers share the chunks in order, and
    the embedded chunks stay a prefix, up to the few in flight."""
    import os
    for c in range(n_chunks):
        if (emb / f"chunk-{c:04d}.npz").exists():
            continue
        claim = emb / f"chunk-{c:04d}.claim"
        for _ in range(2):
            try:
                fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                try:
                    pid = int(claim.read_text() or "0")
                    os.kill(pid, 0)
                    break                       # a live worker has it
                except (ProcessLookupError, ValueError):
                    claim.unlink(missing_ok=True)   # a dead worker's claim: retry once
                    continue
                except (FileNotFoundError, PermissionError):
                    break
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            if (emb / f"chunk-{c:04d}.npz").exists():    # finished between the check and the claim
                claim.unlink(missing_ok=True)
                break
            return c
    return None


def embed_chunks(work: Path, sizes, embed_chunk, info: dict, unit: str = "items") -> None:
    """Embed chunks until none is left; any number of workers may run this at once on one WORK.

    ``sizes``: each chunk's length; ``embed_chunk(c)`` -> (ids, vectors) of chunk c; ``info``: what
    determines the vectors (the model), written to WORK/emb/model.json by the first worker and
    required equal by every later one. Each chunk is claimed (:func:`claim_chunk`), embedded and
    saved atomically as WORK/emb/chunk-NNNN.npz (ids as str, so it loads without pickle)."""
    import json
    import os
    import time

    import numpy as np
    emb = Path(work) / "emb"
    emb.mkdir(parents=True, exist_ok=True)
    if not (emb / "model.json").exists():
        (emb / "model.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    elif json.loads((emb / "model.json").read_text()) != info:
        sys.exit(f"{emb} holds chunks embedded by another model ({emb / 'model.json'}): use another --work")
    me = f"worker {os.getpid()}"
    t0, done, n = time.perf_counter(), 0, len(sizes)
    while (c := claim_chunk(emb, n)) is not None:
        ids, vec = embed_chunk(c)
        tmp = emb / f".chunk-{c:04d}.{os.getpid()}.tmp.npz"
        np.savez(tmp, ids=np.asarray(ids, dtype=str), vectors=vec)
        tmp.replace(emb / f"chunk-{c:04d}.npz")
        (emb / f"chunk-{c:04d}.claim").unlink(missing_ok=True)
        done += len(ids)
        secs = time.perf_counter() - t0
        missing = [x for x in range(n) if not (emb / f"chunk-{x:04d}.npz").exists()]
        print(f"{me}: chunk {c}, {done} {unit} in {secs:.0f}s ({done / secs:.0f} {unit}/s); all workers: "
              f"{n - len(missing)}/{n} chunks, {sum(sizes[x] for x in missing)} {unit} left, embedded prefix "
              f"{embedded_prefix(work, n)} chunks", flush=True)
    print(f"{me}: done, {done} {unit} in {time.perf_counter() - t0:.0f}s", flush=True)


def embedded_vectors(work: Path, n_chunks: int) -> dict:
    """{id: vector} of the embedded prefix of WORK's chunks (:func:`embedded_prefix`)."""
    import numpy as np
    vec: dict = {}
    for c in range(embedded_prefix(work, n_chunks)):
        z = np.load(Path(work) / "emb" / f"chunk-{c:04d}.npz")
        vec.update(zip(z["ids"].tolist(), z["vectors"]))
    return vec


def embedded_set(table, vec: dict):
    """What :func:`write_scored_set` scores, from a build's table (one row per id: ``id``, ``role``
    query / positive / pool, ``query_id``, ``u``) and the embedded vectors: (its set arguments
    ``queries``, ``positives``, ``qrels``, ``pool_ids``, ``pool_vectors``, ``u_max``; the embedded
    pool's rows in id order; the designed pool's size). Exits when a query or positive is not
    embedded; a cut embedding keeps the pool's embedded slice u <= u_max."""
    import numpy as np
    queries = table[table["role"] == "query"]
    positives = table[table["role"] == "positive"]
    if not all(i in vec for i in queries["id"]) or not all(i in vec for i in positives["id"]):
        sys.exit("the queries and positives are not embedded yet: run the embed stage (chunk 0 first)")
    pool = table[(table["role"] == "pool") & table["id"].isin(vec)].sort_values("id", kind="stable")
    full_pool = int((table["role"] == "pool").sum())
    pool_ids = pool["id"].to_numpy()
    pos_ids = sorted(set(positives["id"]))
    args = {"queries": (queries["id"].to_numpy(), np.stack([vec[i] for i in queries["id"]])),
            "positives": (np.asarray(pos_ids), np.stack([vec[i] for i in pos_ids])),
            "qrels": (positives["query_id"].tolist(), positives["id"].tolist()),
            "pool_ids": pool_ids, "pool_vectors": np.stack([vec[i] for i in pool_ids]),
            "u_max": 1.0 if len(pool) == full_pool else float(pool["u"].max())}
    return args, pool, full_pool


def cut_pool(args: dict, pool, size: int):
    """(``args``, ``pool``) of :func:`embedded_set` with the pool cut to its ``size`` lowest partition
    values u (a uniform slice u <= u_max of the pool, so :func:`score_draws` cuts the same draws
    from it): the same queries and data with a shallower sample at each fraction."""
    import numpy as np
    u = pool["u"].to_numpy()
    if not 0 < size <= len(u):
        sys.exit(f"--pool-cut {size}: must lie in 1..{len(u)} (the embedded pool)")
    keep = np.zeros(len(u), bool)
    keep[np.argsort(u, kind="stable")[:size]] = True
    cut = {**args, "pool_ids": args["pool_ids"][keep], "pool_vectors": args["pool_vectors"][keep],
           "u_max": float(u[keep].max())}
    return cut, pool[keep]


def embedded_prefix(work: Path, n_chunks: int) -> int:
    """How many leading chunks are embedded (a cut embedding keeps the uniform slice u < u_max)."""
    c = 0
    while c < n_chunks and (Path(work) / "emb" / f"chunk-{c:04d}.npz").exists():
        c += 1
    return c


def write_scored_set(work: Path, out: Path, *, queries, positives, qrels, pool_ids, pool_vectors, pool_columns: dict,
                     u_max: float, meta: dict, benchmark: str, manifest: dict) -> dict:
    """Score a built set and write what is committed: the truth and every draw's sample stats
    (:func:`score_draws`), ``qrels.parquet``, ``pool_ids.parquet`` (id, then ``pool_columns``, which
    hold ``u``) and ``manifest.json`` (``manifest``'s entries, then the pool, the partition, the
    sizes, the truth's mAP@1000 and every file's sha256). ``queries``/``positives``: (ids, vectors);
    ``qrels``: (query ids, positive ids); the descriptor sets go to WORK/sets. Returns the manifest."""
    import json
    import time

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rscale.core.metrics import ap_at_k_from_counts
    from rscale.store.descriptor_set import write_descriptor_set
    from rscale.store.sample_stats_file import read_sample_stats

    sets = Path(work) / "sets"
    shutil.rmtree(sets, ignore_errors=True)
    write_descriptor_set(sets / "queries", [queries], role="queries", dtype="float32", meta=meta)
    write_descriptor_set(sets / "positives", [positives], role="positives", dtype="float32", meta=meta)
    qrels_t = pa.table({"query_id": list(qrels[0]), "positive_id": list(qrels[1])})
    pq.write_table(qrels_t, sets / "qrels.parquet")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.parquet"):
        old.unlink()

    def run(name, mask, k):
        # byte-stream-split floats compress ~2x better under zstd (lossless; any Parquet reader)
        size = score_draw(sets, out, name, pool_ids[mask], pool_vectors[mask], k=k, meta=meta, benchmark=benchmark,
                          use_dictionary=False,
                          use_byte_stream_split=["top_scores.list.element", "positive_scores.list.element"])
        print(f"scored {name}: S = {size}", flush=True)
        return size

    t0 = time.perf_counter()
    sizes = score_draws(run, np.asarray(pool_columns["u"]), u_max)
    pq.write_table(qrels_t, out / "qrels.parquet", compression="zstd")
    pq.write_table(pa.table({"id": pool_ids, **pool_columns}), out / "pool_ids.parquet", compression="zstd",
                   compression_level=19)
    truth = read_sample_stats(out / "truth.sample_stats.parquet")
    manifest = {
        **manifest, "pool": int(len(pool_ids)), "u_max": u_max,
        "partition": {"hash": "rscale.score.sampling.hash_uniform(id, seed)", "seed": PARTITION_SEED,
                      "draw": "{id : j f u_max <= u < (j + 1) f u_max}", "fractions": list(FRACTIONS), "draws": DRAWS},
        "sizes": sizes, "k_truth": K_TRUTH, "k_draw": K_DRAW, "score_seconds": round(time.perf_counter() - t0, 1),
        "truth_map_at_1000": float(np.mean(ap_at_k_from_counts(truth.pos_counts, truth.pos_offsets, 1000))),
        "files": file_digests(out),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest
