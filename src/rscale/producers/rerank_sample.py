"""Reranking a distractor sample: first-stage sample stats -> sample stats schema 2 with rerank scores.

The reranked law (:mod:`rscale.core.rerank_law`, docs/rerank.md) needs, per query, the rerank
scores of the sample's top R first-stage candidates (in first-stage order) and of the query's
positives. ``rscale score --candidates R`` keeps the ids of those R candidates
(``<stem>.candidates.parquet``); this module rescores them, and every positive, with the list
reranker's own code (:class:`rscale.producers.rerank.RegionScorer`: OWLv2 proposals, the region
cache, max-region cosine, the same first-stage blend), so a rerank score here is the score
``rscale rerank`` gives the same (query, image) pair.

The candidate lists must be those of the sample stats: the same queries, and the first-stage
scores of each list equal to the sample stats' top R (checked; lists of another run are refused).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np

from rscale.core import rerank as core_rerank
from rscale.errors import FormatError
from rscale.producers.rerank import ProposalParams, RegionScorer, gallery_items

SCORE_TOLERANCE = 1e-5      # candidate-list scores vs the sample stats' top scores (float32 rounding)


def rerank_sample(sample_stats, queries, distractors, positives, detector_dir, backbone_dir, cache_dir, out, *,
                  candidates=None, first_stage_weight: float = 0.0, params: ProposalParams = ProposalParams(),
                  pooling: str | None = None, resolution: int | None = None, batch_size: int = 16,
                  shard_size: int = 1024, block: int = 8, device: str | None = None, progress: bool = True,
                  lineage: bool = True) -> dict:
    """Write ``out``: the sample stats ``sample_stats`` plus the rerank scores of each query's top
    candidates (``candidates``, default ``<stem>.candidates.parquet`` next to it; all R of each
    list) and of its positives (schema version 2).

    ``queries``: the first stage's query descriptor set; ``distractors`` / ``positives``: the
    images the candidate ids and the positive ids name (folders, id -> path mappings or (id, path)
    pairs, ids as ``rscale extract`` names them); detector, backbone and cache as
    :func:`rscale.producers.rerank.rerank`. Everything is checked before any region is computed.
    """
    from rscale.core.sample_stats import SampleStats
    from rscale.producers.lineage import digest_file, producer_run
    from rscale.store.candidate_lists import candidates_path, list_length, read_candidates
    from rscale.store.descriptor_set import DescriptorSet
    from rscale.store.run_sidecar import write_run_sidecar
    from rscale.store.sample_stats_file import read_sample_stats, write_sample_stats

    core_rerank.combined_scores(0.0, 0.0, first_stage_weight)            # validates the weight
    ss = read_sample_stats(sample_stats)
    candidates = Path(candidates) if candidates is not None else candidates_path(sample_stats)
    if not candidates.is_file():
        raise FormatError("no candidate lists for these sample stats", path=str(candidates),
                          hint="score with --candidates R (it writes <stem>.candidates.parquet next to the "
                               "sample stats), or pass --candidates FILE")
    r = list_length(candidates)
    qids, cand_ids, cand_scores, _ = read_candidates(candidates, max(r, 1))      # all of the shortest list
    if r > ss.k:
        raise FormatError(f"the candidate lists hold {r} per query, more than the sample stats' K={ss.k}",
                          path=str(candidates), hint="score again with --candidates R <= --k")
    row = {q: i for i, q in enumerate(qids)}
    missing = [q for q in ss.query_ids if q not in row]
    if missing or len(qids) != ss.n_queries:
        extra = sorted(set(qids) - set(ss.query_ids.tolist()))
        what = (f"query {str(missing[0])!r} of the sample stats has no list" if missing
                else f"query {str(extra[0])!r} is not in the sample stats")
        raise FormatError(f"{what}: these lists belong to another scoring run", path=str(candidates),
                          column="query_id", hint="rerank the lists `rscale score --candidates` wrote with these sample stats")
    order = np.asarray([row[q] for q in ss.query_ids])
    cand_ids, cand_scores = cand_ids[order], cand_scores[order]
    off = np.abs(cand_scores - ss.top_scores[:, :r])
    if not np.all(off <= SCORE_TOLERANCE):
        q = int(np.argmax(off.max(axis=1)))
        raise FormatError(f"the first-stage scores of query {str(ss.query_ids[q])!r}'s list differ from the sample "
                          f"stats' top scores (by {float(off[q].max()):.3g}): these lists belong to another scoring "
                          f"run", path=str(candidates), column="score",
                          hint="rerank the lists `rscale score --candidates` wrote with these sample stats")

    qset = DescriptorSet.open(queries)
    qpos = {q: i for i, q in enumerate(np.asarray(qset.ids()).astype(str))}
    unknown_q = [q for q in ss.query_ids if q not in qpos]
    if unknown_q:
        raise FormatError(f"query id {str(unknown_q[0])!r} is not in the query descriptor set {qset.root} "
                          f"({len(unknown_q)} unknown)", path=str(sample_stats), column="query_id")
    d_items, p_items = gallery_items(distractors), gallery_items(positives)
    d_pos, p_pos = {g: i for i, (g, _) in enumerate(d_items)}, {g: i for i, (g, _) in enumerate(p_items)}
    for ids, where, column, name in ((cand_ids.ravel(), d_pos, "gallery_id", "distractor"),
                                     (ss.pos_ids, p_pos, "positive_ids", "positive")):
        unknown = np.flatnonzero(~np.isin(ids, list(where)))
        if unknown.size:
            raise FormatError(f"{name} id {str(ids[unknown[0]])!r} names no {name} image ({unknown.size} unknown)",
                              path=str(candidates if name == "distractor" else sample_stats), column=column,
                              hint=f"pass the {name} images the first stage extracted (ids as rscale extract names them)")

    scorer = RegionScorer.open(qset, detector_dir, backbone_dir, cache_dir, params=params, pooling=pooling,
                               resolution=resolution, device=device)
    used_d = sorted(set(cand_ids.ravel().tolist()), key=d_pos.get)
    used_p = sorted(set(ss.pos_ids.tolist()), key=p_pos.get)
    regions, computed = scorer.regions([d_items[d_pos[g]] for g in used_d] + [p_items[p_pos[g]] for g in used_p],
                                       batch_size=batch_size, shard_size=shard_size, progress=progress)
    index = {("d", g): i for i, g in enumerate(used_d)} | {("p", g): len(used_d) + i for i, g in enumerate(used_p)}
    qvec = np.concatenate([np.asarray(v, np.float32) for _, v in qset.shards()])[[qpos[q] for q in ss.query_ids]]
    top_index = np.vectorize(lambda g: index[("d", g)], otypes=[np.int64])(cand_ids)
    top_region = scorer.max_region_scores(qvec, top_index, regions, block=block)
    pos_index = np.asarray([index[("p", g)] for g in ss.pos_ids], np.int64)[:, None]
    pos_region = scorer.max_region_scores(qvec[ss.positive_query()], pos_index, regions, block=block)[:, 0]
    top_rerank = core_rerank.combined_scores(top_region.astype(np.float64), cand_scores, first_stage_weight)
    pos_rerank = core_rerank.combined_scores(pos_region.astype(np.float64), ss.pos_scores, first_stage_weight)

    run_params = {"candidates": r, "first_stage_weight": first_stage_weight, "pooling": scorer.pooling,
                  "resolution": scorer.bb.resolution, "detector_resolution": scorer.det.resolution,
                  **asdict(scorer.params)}
    inputs = {"sample_stats": digest_file(sample_stats), "candidates": digest_file(candidates),
              "queries": digest_file(Path(queries) / "manifest.json"), "detector": scorer.det.digest,
              "backbone": scorer.backbone_digest, "region_cache": scorer.cache.digest}
    meta = {**{k: v for k, v in ss.meta.items() if not k.startswith("rerank_")},
            "rerank_candidates": str(r), "rerank_first_stage_weight": str(first_stage_weight),
            **{f"rerank_input_{k}": v for k, v in inputs.items()}}
    fields = {k: v for k, v in ss.__dict__.items() if k not in ("meta", "top_rerank", "pos_rerank")}
    out_ss = SampleStats(**fields, meta=meta, top_rerank=np.asarray(top_rerank, np.float64).reshape(ss.n_queries, r),
                         pos_rerank=np.asarray(pos_rerank, np.float64))
    with producer_run("rerank", run_params, inputs, enabled=lineage) as run:
        write_sample_stats(out_ss, out)
        run.output("sample_stats", digest_file(out))
        write_run_sidecar(out, "rerank", run.run_id)
        run.metric("images_computed", float(computed))
    return {"queries": ss.n_queries, "candidates": r, "positives": ss.n_positives, "images": len(used_d) + len(used_p),
            "images_computed": int(computed), "regions": regions.count,
            "positives_reranked_above_first_stage": float(np.mean(pos_rerank > ss.pos_scores)),
            "written": str(out)}


def gallery_top_lists(sample_stats, out, *, depth: int, candidates=None) -> Path:
    """The first-stage top ``depth`` (K') of the whole gallery, positives included, as candidate
    lists ``rscale rerank`` reads: from a fraction-1.0 scoring's sample stats (every distractor
    scored) and its candidate lists (R >= K'), the top K' distractors and the query's positives
    merged by first-stage score, a distractor tied with a positive first (the engine's tie rule).
    Reranking these lists gives the exact reranked metric of the full gallery, the truth a
    prediction from a sample is checked against (docs/rerank.md)."""
    from rscale.errors import InvalidArgumentError
    from rscale.store.candidate_lists import candidates_path, read_candidates, write_candidates
    from rscale.store.sample_stats_file import read_sample_stats

    ss = read_sample_stats(sample_stats)
    lists = Path(candidates) if candidates is not None else candidates_path(sample_stats)
    qids, gids, scores, _ = read_candidates(lists, depth)
    row = {q: i for i, q in enumerate(ss.query_ids)}
    if set(qids.tolist()) != set(row):
        raise FormatError("the candidate lists and the sample stats name different queries", path=str(lists),
                          column="query_id")
    sampler = str(ss.meta.get("sampler", ""))
    if sampler and not sampler.endswith("< 1"):
        raise InvalidArgumentError(f"{sample_stats} is a sample (sampler {ss.meta.get('sampler')!r}); the full "
                                   "gallery's top lists need a scoring at fraction 1.0")
    out_ids = np.empty((len(qids), depth), dtype=object)
    out_scores = np.empty((len(qids), depth), np.float32)
    for qi, q in enumerate(qids):
        i = row[q]
        a, b = ss.pos_offsets[i], ss.pos_offsets[i + 1]
        s = np.concatenate([np.float32(scores[qi]), np.float32(ss.pos_scores[a:b])])
        kind = np.concatenate([np.zeros(depth, np.int8), np.ones(b - a, np.int8)])
        ids = np.concatenate([gids[qi].astype(object), ss.pos_ids[a:b].astype(object)])
        order = np.lexsort((np.arange(s.size), kind, -s))[:depth]
        out_ids[qi], out_scores[qi] = ids[order], s[order]
    return write_candidates(out, qids, out_ids.astype(str), out_scores, sample_stats=Path(sample_stats).name)
