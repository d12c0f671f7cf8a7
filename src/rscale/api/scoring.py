"""Producers behind the CLI: descriptor sets, scoring, feature extraction."""

from __future__ import annotations

import numpy as np


def read_qrels(path) -> dict:
    """query_id -> list of positive ids, from a Parquet (or CSV) file with those two columns."""
    from rscale.errors import FormatError, InvalidArgumentError
    path = str(path)
    try:
        if path.endswith(".csv"):
            import pyarrow.csv as pcsv
            table = pcsv.read_csv(path)
        else:
            import pyarrow.parquet as pq
            table = pq.read_table(path)
    except Exception as exc:
        raise FormatError(f"cannot read qrels ({type(exc).__name__}: {exc})", path=path) from None
    for col in ("query_id", "positive_id"):
        if col not in table.column_names:
            raise FormatError(f"missing column '{col}'", path=path, hint="qrels have columns query_id, positive_id")
    out: dict = {}
    for q, p in zip(table.column("query_id").to_pylist(), table.column("positive_id").to_pylist()):
        out.setdefault(str(q), []).append(str(p))
    return out


def scored_backbone(queries_manifest: dict, distractors_manifest: dict) -> str:
    """The name of the system a scoring run evaluates: the distractor set's backbone, plus
    ``-<intervention>`` when the queries were extracted under a query-side intervention (``gp``,
    ``msa``), so the registry keeps baseline and intervention apart (``dinov2-gp``)."""
    name = str(distractors_manifest.get("backbone", "unknown"))
    intervention = str(queries_manifest.get("intervention", "none") or "none")
    return name if intervention == "none" else f"{name}-{intervention}"


def score(queries_dir, positives_dir, *, qrels, distractors_dir, out, fraction: float = 1.0, seed: int = 0,
          k: int = 4000, backend: str = "auto", chunk: int = 16384, meta: dict | None = None,
          lineage: bool = True, engine: str = "local", address: str | None = None, num_cpus: int | None = None,
          progress: bool = False, candidates: int = 0, halves: bool = False) -> dict:
    """Score a hash-sampled share of a distractor set against the queries; write sample stats.

    ``fraction`` 1.0 scores the whole pool (the exact full-gallery evaluation); below 1 it scores
    the nested uniform sample {id : hash(seed, id) < fraction}. Shards are scored separately and
    merged, with the shard-to-shard drift check.

    ``engine``: ``local`` (this process) or ``ray`` (one Ray task per shard, on the cluster at
    ``address`` or a local instance of ``num_cpus`` CPUs; rscale.distributed.scoring): the same
    sample stats, byte for byte. The Ray engine keeps finished shards' partials in
    ``<out>.partials/`` until the sample stats are written, so a rerun after a crash scores only
    the missing shards.

    ``candidates`` R (0 = off, the default): also keep each query's R best sampled distractors by
    id and write them next to the sample stats, ``<stem>.candidates.parquet``
    (:mod:`rscale.store.candidate_lists`), the lists ``rscale rerank-sample`` reranks. R <= k;
    to rerank the top K' of a gallery of N from a sample of S, R >= K' S / N with a margin
    (:func:`rscale.score.candidates.candidate_count`).

    ``halves`` (off by default): also record which half of each of the 8 replicate
    splits every sampled distractor is in, by its id (:mod:`rscale.core.halves`, sample stats schema
    version 3), so that two backbones scored on the same sample have paired replicates
    (``rscale query "... for A vs B"``).
    """
    import json
    import math
    import time

    from rscale.errors import FormatError, InvalidArgumentError
    from rscale.store.descriptor_set import DescriptorSet
    from rscale.score.engine import Queries, choose_backend, to_sample_stats
    from rscale.store.sample_stats_file import write_sample_stats

    # every argument is checked before any work, and the run is recorded only once the scores are in
    if not (isinstance(fraction, (int, float)) and math.isfinite(fraction) and 0 < fraction <= 1):
        raise InvalidArgumentError(f"fraction must lie in (0, 1] (the share of the pool to score; 1 = all of it), "
                                   f"got {fraction}")
    for name, value in (("k", k), ("chunk", chunk)):
        if value < 1:
            raise InvalidArgumentError(f"{name} must be a whole number >= 1, got {value}")
    if isinstance(candidates, bool) or not isinstance(candidates, int) or not 0 <= candidates <= k:
        raise InvalidArgumentError(f"candidates must be a whole number in [0, k={k}] (the top sampled distractors "
                                   f"kept by id for reranking; 0 = none), got {candidates!r}")
    from rscale.distributed.runtime import check_engine
    check_engine(engine, address)
    qs, ps, ds = DescriptorSet.open(queries_dir), DescriptorSet.open(positives_dir), DescriptorSet.open(distractors_dir)
    # the Ray engine's tasks check their own distractor shard (the driver never reads the pool)
    for d in (qs, ps, ds) if engine == "local" else (qs, ps):
        stale = d.verify()
        if stale:
            raise FormatError(f"{stale[0]} does not match its digest in the manifest ({len(stale)} stale file(s))",
                              path=str(d.root / stale[0]),
                              hint="the set changed after it was written; re-extract it (finished shards are kept)")
    if not (qs.dim == ps.dim == ds.dim):
        raise FormatError(f"descriptor dimensions differ: queries {qs.dim}, positives {ps.dim}, distractors {ds.dim}",
                          path=str(distractors_dir), hint="score sets extracted with the same backbone and pooling")
    rel = read_qrels(qrels)
    q_ids = qs.ids().astype(str)
    q_vec = np.concatenate([np.asarray(v, dtype=np.float32) for _, v in qs.shards()])
    p_ids = ps.ids().astype(str)
    p_vec = np.concatenate([np.asarray(v, dtype=np.float32) for _, v in ps.shards()])
    where = {p: i for i, p in enumerate(p_ids)}
    known_queries = set(q_ids.tolist())
    strangers = sorted(q for q in rel if q not in known_queries)
    if strangers:
        raise FormatError(f"{len(strangers)} query id(s) in the qrels are not in the query set, e.g. {strangers[0]!r}",
                          path=str(qrels), hint=f"drop those rows or score with the query set they belong to "
                                                f"({queries_dir})")
    missing = sorted({p for q in q_ids for p in rel.get(q, []) if p not in where})
    if missing:
        raise FormatError(f"{len(missing)} positive id(s) in the qrels are not in the positive set, e.g. "
                          f"{missing[0]!r}", path=str(qrels))
    backend = choose_backend(backend, len(q_ids), int(ds.manifest.get("count", 0) * min(fraction, 1.0)), ds.dim)
    queries = Queries.build(q_vec, q_ids, p_vec, p_ids, lambda i: [where[p] for p in rel.get(q_ids[i], [])],
                            backend=backend)
    from pathlib import Path

    from rscale.producers.lineage import digest_file, producer_run
    inputs = {"queries": digest_file(Path(queries_dir) / "manifest.json"),
              "positives": digest_file(Path(positives_dir) / "manifest.json"),
              "distractors": digest_file(Path(distractors_dir) / "manifest.json"),
              "qrels": digest_file(qrels)}
    params = {"fraction": fraction, "seed": seed, "k": k, "backend": backend, "chunk": chunk,
              **({"candidates": candidates} if candidates else {}), **({"halves": True} if halves else {})}
    # the benchmark is what the queries (and their positives) were drawn from: their sets record it
    benchmark = qs.manifest.get("benchmark") or ps.manifest.get("benchmark")
    meta = {**({"benchmark": str(benchmark)} if benchmark else {}), **(meta or {}),
            "backbone": scored_backbone(qs.manifest, ds.manifest),
            "distractor_source": ds.manifest.get("source", str(distractors_dir)),
            "sampler": f"hash(seed={seed}) < {fraction:g}", "seed": str(seed),
            **{f"input_{name}": d for name, d in inputs.items()},
            "weights_sha256": ds.manifest.get("weights_sha256", ""),
            # a LoRA-merged backbone's base weights, adapter and training list (producers.lora)
            **({"model_lineage": json.dumps(ds.manifest["model_lineage"], sort_keys=True)}
               if ds.manifest.get("model_lineage") else {})}
    t = time.perf_counter()
    extra = {}
    if engine == "local":
        from rscale.score.engine import merge_shard_partials
        from rscale.score.shard import score_shard, shard_offsets
        partials = [score_shard(queries, i, v, k=k, backend=backend, chunk=chunk, fraction=fraction, seed=seed,
                                where=str(ds.root / s["vectors"]), candidates=candidates, offset=o, halves=halves)
                    for (i, v), s, o in zip(ds.shards(), ds.manifest["shards"], shard_offsets(ds.manifest))]
        merged, report = merge_shard_partials(partials)
    else:
        from rscale.distributed.runtime import ray_session
        from rscale.distributed.scoring import score_on_ray
        from rscale.store.partial_file import remove_partials
        from rscale.store.hashing import canonical_digest
        common = canonical_digest({"queries": inputs["queries"], "positives": inputs["positives"],
                                   "qrels": inputs["qrels"], **params})
        from rscale.errors import RscaleError
        checkpoint = Path(str(out) + ".partials")
        existed = checkpoint.exists()
        try:
            with ray_session(address, num_cpus) as ray:
                merged, report, resumed = score_on_ray(ray, queries, ds, k=k, backend=backend, chunk=chunk,
                                                       fraction=fraction, seed=seed, common=common,
                                                       checkpoint=checkpoint, progress=progress,
                                                       candidates=candidates, halves=halves)
        except RscaleError:
            # refused input (a damaged shard): a refused command leaves nothing behind; a crash
            # (anything else) keeps the finished partials for the rerun
            if not existed:
                remove_partials(checkpoint)
            raise
        extra = {"engine": "ray", "shards": len(ds.manifest["shards"]), "resumed_shards": resumed}
    if candidates:
        meta["candidates"] = str(candidates)
    ss = to_sample_stats(queries, merged, meta)
    secs = time.perf_counter() - t
    with producer_run("score", params, inputs, enabled=lineage) as run:
        if candidates:
            from rscale.store.candidate_lists import candidates_path, write_candidates
            lists = candidates_path(out)
            write_candidates(lists, queries.ids, ds.ids().astype(str)[merged.cand.positions], merged.cand.scores,
                             sample_stats=Path(out).name)
            run.output("candidates", digest_file(lists))
            from rscale.store.run_sidecar import write_run_sidecar
            write_run_sidecar(lists, "score", run.run_id)     # the lists' lineage: `rscale rerank` records it
        write_sample_stats(ss, out)
        run.output("sample_stats", digest_file(out))
        from rscale.store.run_sidecar import write_run_sidecar
        write_run_sidecar(out, "score", run.run_id)
        run.metric("seconds_scoring", secs)
        run.metric("sampled", float(ss.n_sampled.max()))
    if engine == "ray":
        remove_partials(checkpoint)
    if candidates:
        extra["candidates"] = str(candidates_path(out))
    return {**extra, "written": str(out), "queries": ss.n_queries, "positives": ss.n_positives,
            "S": int(ss.n_sampled.max()), "K": ss.k, "seconds": round(secs, 2), "backend": backend,
            "drift": None if report is None else report.message(),
            "drifting": None if report is None else report.drifting}


SIM_DESCRIPTORS_BENCHMARK = "sim-descriptors"      # the benchmark of make-descriptors' simulated sets


def make_descriptor_sets(out, instances=200, *, dim=64, positives=4, distractors=200_000, hard_share=0.01,
                         seed=0, backbone="sim_desc", shard_size=65_536, noise=(0.6, 0.6)) -> str:
    """Write simulated query/positive/distractor descriptor sets and their qrels under ``out``."""
    from pathlib import Path

    import pyarrow as pa
    import pyarrow.parquet as pq

    from rscale.store.descriptor_set import write_descriptor_set
    from rscale.sim.descriptors import make_descriptors

    from rscale.errors import InvalidArgumentError
    for name, value in (("instances", instances), ("positives", positives), ("distractors", distractors),
                        ("dim", dim - 1), ("shard_size", shard_size)):
        if value < 1:
            raise InvalidArgumentError(f"{name} must be a whole number >= {2 if name == 'dim' else 1}, "
                                       f"got {value + 1 if name == 'dim' else value}")
    if not 0 <= hard_share <= 1:
        raise InvalidArgumentError(f"hard_share must lie in [0, 1] (the share of near-duplicate distractors), "
                                   f"got {hard_share}")
    low, high = noise
    if not (0 <= low <= high):
        raise InvalidArgumentError(f"noise bounds must satisfy 0 <= low <= high, got low {low}, high {high}")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InvalidArgumentError(f"the output {out} is a file; name a folder to write the sets into")
    ds = make_descriptors(n_instances=instances, d=dim, positives_per_instance=positives,
                          n_distractors=distractors, hard_share=hard_share, seed=seed,
                          noise=noise[0] if noise[0] == noise[1] else noise)
    meta = {"backbone": backbone, "pooling": "simulated", "resolution": 0, "source": f"sim:descriptors:{seed}"}
    recipe = {**meta, "generator": "rscale.sim.descriptors", "instances": instances, "dim": dim,
              "positives": positives, "distractors": distractors, "hard_share": hard_share, "seed": seed,
              "noise": list(noise)}
    # the benchmark the queries belong to names the registered series (not part of the recipe:
    # it does not change a vector)
    named = {**meta, "benchmark": SIM_DESCRIPTORS_BENCHMARK}
    write_descriptor_set(out / "queries", [(ds.query_ids, ds.queries)], role="queries", meta=named, recipe=recipe)
    write_descriptor_set(out / "positives", [(ds.positive_ids, ds.positives)], role="positives", meta=named,
                         recipe=recipe)
    blocks = ((np.arange(a, min(a + shard_size, distractors)), ds.distractors[a:a + shard_size])
              for a in range(0, distractors, shard_size))
    write_descriptor_set(out / "distractors", blocks, role="distractors", meta=meta, shard_size=shard_size,
                         recipe=recipe)
    qrels = [(ds.query_ids[q], ds.positive_ids[p]) for q in range(len(ds.query_ids)) for p in ds.positives_of(q)]
    pq.write_table(pa.table({"query_id": [a for a, _ in qrels], "positive_id": [b for _, b in qrels]}),
                   out / "qrels.parquet")
    return f"wrote {out}/queries ({len(ds.query_ids)}), positives ({len(ds.positive_ids)}), " \
           f"distractors ({distractors:,}), qrels.parquet"


def extract(images, model_dir, *, out, role="distractors", layout="folder", crop=False, pooling="cls",
            resolution=None, batch_size=32, intervention=None, shard_size=4096, progress=True,
            preprocessing="auto", engine="local", address=None, num_cpus=None) -> dict:
    """Extract descriptors of a folder / list file of images, or of an ILIAS-layout tree.

    ``layout='ilias'`` writes ``out/queries``, ``out/positives`` and ``out/qrels.parquet``; the
    ``intervention`` (gp, msa) applies to the queries only. ``preprocessing``: the checkpoint's
    image processor (``processor``), a plain ``resize`` (fixed-resolution protocols), or ``auto``
    (the processor when the checkpoint has one and no resolution is given; resize under MSA,
    whose patch mask needs the whole image). The choice is recorded in each set's manifest.

    ``engine``: ``local`` or ``ray`` (Ray Data on an actor pool, on the cluster at ``address`` or
    a local instance of ``num_cpus`` CPUs; rscale.distributed.extraction): the same sets, manifests
    and recipes, vectors equal up to float rounding.
    """
    from contextlib import nullcontext
    from pathlib import Path

    from rscale.distributed.runtime import check_engine
    from rscale.errors import InvalidArgumentError
    from rscale.producers import extract as ex
    from rscale.producers.interventions import GrayPad, MaskedScales

    interventions = {None: None, "none": None, "gp": GrayPad, "msa": MaskedScales}
    if intervention not in interventions:
        raise InvalidArgumentError(f"unknown intervention {intervention!r}; expected gp, msa or none")
    check_engine(engine, address)
    make = interventions[intervention]
    out = Path(out)
    if preprocessing == "auto" and intervention == "msa":
        preprocessing = "resize"
    kw = dict(pooling=pooling, resolution=resolution, batch_size=batch_size, shard_size=shard_size,
              progress=progress, preprocessing=preprocessing)
    if layout == "ilias":          # the tree is the benchmark: its queries and positives carry its folder's name
        from rscale.api.registry import nameable_form
        benchmark = nameable_form("benchmark", Path(images).resolve().name)
        kw["meta"] = {"benchmark": benchmark} if benchmark else None
    if layout != "ilias":
        items = ex.image_items(images)
        if make and role != "queries":
            raise InvalidArgumentError("interventions apply to queries only (the gallery index is never touched)")
    if engine == "ray":
        from rscale.distributed.extraction import extract_on_ray
        from rscale.distributed.runtime import ray_session
        session = ray_session(address, num_cpus)
    else:
        session = nullcontext()
    pool = {}

    def run(part, where, role, with_intervention):
        if engine == "local":
            return ex.extract(part, model_dir, where, role=role,
                              intervention=make() if make and with_intervention else None, **kw)
        ds, info = extract_on_ray(ray, part, model_dir, where, role=role,
                                  intervention=intervention if with_intervention else None, **kw)
        pool.update(info, shards_extracted=pool.get("shards_extracted", 0) + info["shards_extracted"])
        return ds

    with session as ray:
        if layout == "ilias":
            import pyarrow as pa
            import pyarrow.parquet as pq
            queries, positives, qrels = ex.ilias_layout(images, crop_queries=crop)
            qs = run(queries, out / "queries", "queries", True)
            ps = run(positives, out / "positives", "positives", False)
            pq.write_table(pa.table({"query_id": [a for a, _ in qrels], "positive_id": [b for _, b in qrels]}),
                           out / "qrels.parquet")
            summary = {"queries": qs.count, "positives": ps.count, "qrels": len(qrels), "written": str(out)}
        else:
            ds = run(items, out, role, True)
            summary = {role: ds.count, "written": str(out)}
    return {**({"engine": "ray", **pool} if engine == "ray" else {}), **summary}
