"""Stage 2 of the real-embedding validation set: queries, positives, pool, truth and disjoint draws.

Reads what ``embed.py`` wrote under WORK (the per-file table and the vectors of every content
digest), applies the rules of docs/realset.md (instances, greedy query selection, pool
exclusions), writes descriptor sets under WORK/sets, scores the full pool (the truth, fraction
1.0) and each disjoint draw with the scoring engine (``rscale.api.scoring.score``), and writes the
committed files to OUT with a manifest of their sha256 digests.

Run: PYTHONPATH=src .venv/bin/python benchmarks/realset/build.py --work /tmp/realset --out benchmarks/realset/data
Deterministic and offline.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
from pathlib import Path

import numpy as np

from protocol import DRAWS, FRACTIONS, K_DRAW, K_TRUTH, PARTITION_SEED, file_digests, score_draw, score_draws

QUERY_WIDTH = 48
POSITIVE_WIDTHS = (16, 256)      # inclusive range of positive widths
MAX_QUERIES = 500
BENCHMARK = "realset-icons"
BACKBONE = "mobilenet_v2-imagenet@96"
_SIZE = re.compile(r"^\d+(x\d+)?(@\d+x?)?$")
_SCALED = re.compile(r"^\d+(x\d+)?@\d+x?$")     # a HiDPI folder: 48@2x, 24x24@2x


def image_id(digest: str) -> str:
    return f"img-{digest[:16]}"


def instance_key(path: str):
    """(theme, context, stem) of an icon-theme file, None for anything else."""
    parts = Path(path).parts
    if len(parts) < 6 or parts[:4] != ("/", "usr", "share", "icons"):
        return None
    theme = parts[4]
    middle = [p for p in parts[5:-1] if not _SIZE.match(p) and p != "base"]
    context = "/".join(middle) or "-"
    return theme, context, Path(path).stem


def select(files, not_query_stems=frozenset(), query_from_scaled=True):
    """The rules of docs/realset.md -> (queries {qid: digest}, qrels [(qid, pos digest)], pool digests).

    ``not_query_stems``: icon file stems that are never a query here (another icon set's queries:
    docs/realset6.md); their images stay in the pool unless a query here excludes them.
    ``query_from_scaled`` False: an instance's query-width images are counted from its 1x folders
    only (docs/realset7.md: in themes with HiDPI folders the 24-px drawing at @2x is a second
    48-px image of nearly every icon); the @2x one is then neither query nor positive (its width
    is the query's) nor pool image (its stem is the query's)."""
    ok = files[files["error"] == ""]
    inst: dict = {}
    query_width: dict = {}                  # instance -> its query-width digests that may be the query
    stems_of: dict = {}
    # the real file's own path (symlinked aliases resolve to it), so every size of an icon keys alike
    for path, d, w in zip(ok["real_path"], ok["digest"], ok["width"]):
        stems_of.setdefault(d, set()).add(Path(path).stem)
        key = instance_key(path)
        if key is not None:
            inst.setdefault(key, {}).setdefault(int(w), set()).add(d)
            if int(w) == QUERY_WIDTH and (query_from_scaled or not any(_SCALED.match(p) for p in Path(path).parts[5:-1])):
                query_width.setdefault(key, set()).add(d)
    order = sorted(inst, key=lambda k: hashlib.sha256("\t".join(k).encode()).hexdigest())
    used, used_stems, queries, qrels = set(), set(), {}, []
    lo, hi = POSITIVE_WIDTHS
    for key in order:
        if len(queries) == MAX_QUERIES:
            break
        by_w = inst[key]
        if len(query_width.get(key, ())) != 1:
            continue
        (q,) = query_width[key]
        pos = sorted({d for w, ds in by_w.items() if w != QUERY_WIDTH and lo <= w <= hi for d in ds} - {q})
        if (not pos or key[2] in used_stems or key[2] in not_query_stems or q in used
                or used.intersection(pos)):
            continue
        qid = "q:" + "/".join(key)
        queries[qid] = q
        qrels += [(qid, p) for p in pos]
        used.update([q, *pos])
        used_stems.add(key[2])
    pool = sorted(d for d in stems_of if d not in used and not (stems_of[d] & used_stems))
    return queries, qrels, pool


def main(argv=None, benchmark=BENCHMARK, not_query_stems=frozenset(), query_from_scaled=True):
    """Build the set from WORK into OUT (another icon set passes its own name and excluded query
    stems: benchmarks/realset6/build.py)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rscale.store.descriptor_set import write_descriptor_set
    from rscale.score.sampling import hash_uniform
    from rscale.store.sample_stats_file import read_sample_stats

    work, out = Path(a.work), Path(a.out)
    parts = sorted(work.glob("files-part*.parquet"))
    files = pa.concat_tables([pq.read_table(p) for p in parts]).to_pandas()
    embed_meta = [json.loads(pq.read_schema(p).metadata[b"realset.embed"]) for p in parts]
    vec: dict = {}
    for p in sorted(work.glob("embed-part*.npz")):
        z = np.load(p)
        for d, v in zip(z["digests"], z["vectors"]):
            vec.setdefault(str(d), v)
    queries, qrels, pool = select(files, not_query_stems, query_from_scaled)
    pool_ids = np.asarray([image_id(d) for d in pool])
    u = hash_uniform(pool_ids, PARTITION_SEED)

    sets = work / "sets"
    shutil.rmtree(sets, ignore_errors=True)
    meta = {"backbone": BACKBONE, "pooling": "pooled", "resolution": 96, "source": benchmark}
    qids = list(queries)
    write_descriptor_set(sets / "queries", [(np.asarray(qids), np.stack([vec[queries[q]] for q in qids]))],
                         role="queries", dtype="float32", meta=meta)
    pos = sorted({p for _, p in qrels})
    write_descriptor_set(sets / "positives", [(np.asarray([image_id(p) for p in pos]), np.stack([vec[p] for p in pos]))],
                         role="positives", dtype="float32", meta=meta)
    qrels_t = pa.table({"query_id": [q for q, _ in qrels], "positive_id": [image_id(p) for _, p in qrels]})
    pq.write_table(qrels_t, sets / "qrels.parquet")

    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.parquet"):
        old.unlink()

    def run(name, mask, k):
        return score_draw(sets, out, name, pool_ids[mask], np.stack([vec[d] for d in np.asarray(pool)[mask]]), k=k,
                          meta=meta, benchmark=benchmark)

    sizes = score_draws(run, u)
    pq.write_table(qrels_t, out / "qrels.parquet", compression="zstd")
    pkg_of = dict(zip(files["digest"], files["package"]))
    pq.write_table(pa.table({"id": pool_ids, "u": u, "digest": pool, "package": [pkg_of[d] for d in pool]}),
                   out / "pool_ids.parquet", compression="zstd", compression_level=19)
    from rscale.core.metrics import ap_at_k_from_counts
    truth = read_sample_stats(out / "truth.sample_stats.parquet")
    manifest = {
        "format": "rscale-realset", "version": 1, "benchmark": benchmark, "backbone": BACKBONE,
        "packages": embed_meta[0]["versions"], "weights_sha256": embed_meta[0]["weights"],
        "resolution": embed_meta[0]["resolution"],
        **({"renderer": embed_meta[0]["renderer"]} if "renderer" in embed_meta[0] else {}),
        "corpus": {"files": int(len(files)), "unreadable": int((files["error"] != "").sum()),
                   "content_digests": int(files.loc[files["error"] == "", "digest"].nunique())},
        "queries": len(queries), "positives": len(qrels), "pool": len(pool),
        "partition": {"hash": "rscale.score.sampling.hash_uniform(id, seed)", "seed": PARTITION_SEED,
                      "draw": "{id : j f <= u < (j + 1) f}", "fractions": list(FRACTIONS), "draws": DRAWS},
        "sizes": sizes, "k_truth": K_TRUTH, "k_draw": K_DRAW,
        "truth_map_at_1000": float(np.mean(ap_at_k_from_counts(truth.pos_counts, truth.pos_offsets, 1000))),
        "files": file_digests(out),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    print(json.dumps({k: manifest[k] for k in ("queries", "positives", "pool", "truth_map_at_1000", "corpus")}))


if __name__ == "__main__":
    main()
