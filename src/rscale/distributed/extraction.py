"""Extraction on Ray Data: ``map_batches`` with a callable class on an actor pool
(``compute=ray.data.ActorPoolStrategy(size=...)``), the model loaded once per actor.

Each actor sets torch's thread count to the CPUs Ray reserved for it (``num_cpus`` of the actor):
left alone, torch in every actor sizes its pool to the whole machine and the actors oversubscribe
the cores. On a cluster with GPUs each actor takes one (``num_gpus=1``) and runs there.

Everything but the loop over batches is the local extractor's
(:class:`rscale.producers.extract.ExtractionPlan`): the same shards, manifest, recipe, lineage and
resume (shards an earlier run finished are read back, only the others go to Ray). The dataset keeps
the items' order (``preserve_order``), so the driver re-cuts the stream of vectors into the same
shards; vectors equal the local engine's up to float rounding (batches may be cut differently).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rscale.errors import InvalidArgumentError


class BatchEmbedder:
    """The callable class of ``map_batches``: built once per actor, called per batch of rows
    ``{"id", "path", "box"}`` (box "" or "x1,y1,x2,y2") -> ``{"id", "vector"}``."""

    def __init__(self, model_dir, *, resolution, preprocessing, pooling, intervention, threads, device):
        import torch

        from rscale.producers import extract as ex
        torch.set_num_threads(int(threads))
        self.threads = torch.get_num_threads()
        with ex.quiet_weight_loading(True):
            self.bb = ex.load_backbone(model_dir, resolution, device, preprocessing=preprocessing, inference=True)
        self.pooling = pooling
        self.intervention = _intervention(intervention)

    def __call__(self, batch: dict) -> dict:
        from rscale.producers.extract import embed_items
        items = [(i, p, tuple(float(x) for x in b.split(",")) if b else None)
                 for i, p, b in zip(batch["id"], batch["path"], batch["box"])]
        return {"id": np.asarray(batch["id"]), "vector": embed_items(self.bb, items, self.pooling, self.intervention)}


def _intervention(name):
    """The query-side intervention named ``name`` (None, none, gp, msa), built."""
    from rscale.producers.interventions import GrayPad, MaskedScales
    if name in (None, "none"):
        return None
    if name not in ("gp", "msa"):
        raise InvalidArgumentError(f"unknown intervention {name!r}; expected gp, msa or none")
    return {"gp": GrayPad, "msa": MaskedScales}[name]()


def extract_on_ray(ray, items, model_dir, out_dir, *, role: str, pooling: str = "cls", resolution=None,
                   batch_size: int = 32, shard_size: int = 4096, intervention: str | None = None,
                   preprocessing: str = "auto", actors: int | None = None, threads_per_actor: int | None = None,
                   progress: bool = True, meta: dict | None = None, lineage: bool = True):
    """Descriptors of ``items`` into a descriptor set, embedded by an actor pool on Ray.

    ``actors`` x ``threads_per_actor`` defaults to the cluster's CPUs split into actors of up to 4
    threads (one actor per GPU where the cluster has GPUs). ``intervention``: None, gp or msa."""
    from rscale.distributed.runtime import cluster_cpus, cluster_gpus
    from rscale.producers import extract as ex

    items = list(items)
    if not items:
        raise InvalidArgumentError("no images to extract")
    for name, value in (("actors", actors), ("threads_per_actor", threads_per_actor)):
        if value is not None and value < 1:
            raise InvalidArgumentError(f"{name} must be a whole number >= 1, got {value}")
    make = _intervention(intervention)
    # the driver loads the backbone too: what it resolves (type, resolution, preprocessing) is recorded
    with ex.quiet_weight_loading(not progress):
        bb = ex.load_backbone(model_dir, resolution, "cpu", preprocessing=preprocessing, inference=True)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plan = ex.ExtractionPlan.of(items, model_dir, bb, role=role, pooling=pooling, batch_size=batch_size,
                                shard_size=shard_size, intervention=make, meta=meta)
    from rscale.store.descriptor_set import check_recipe
    check_recipe(out_dir, {"role": role, "dtype": "float32", "shard_size": shard_size, **plan.recipe})
    todo = [s for s, _ in plan.shards() if plan.finished(out_dir, s, load=False) is None]
    rows = [{"id": str(it[0]), "path": str(it[1]),
             "box": ",".join(repr(float(b)) for b in it[2]) if len(it) > 2 and it[2] is not None else ""}
            for s, part in plan.shards() if s in set(todo) for it in part]
    gpus = cluster_gpus(ray)
    cpus = cluster_cpus(ray)
    threads = threads_per_actor or max(1, min(4, cpus))
    n_actors = actors or (gpus if gpus else max(1, cpus // threads))
    stream = iter(())
    if rows:
        import logging
        ctx = ray.data.DataContext.get_current()
        ctx.execution_options.preserve_order = True
        ctx.enable_progress_bars = False             # rscale's own bar (stderr) counts the images
        ctx.print_on_execution_start = False
        logging.getLogger("ray.data").setLevel(logging.WARNING)
        ds = ray.data.from_items(rows, override_num_blocks=max(1, min(len(rows) // max(batch_size, 1), 4 * n_actors)))
        ds = ds.map_batches(BatchEmbedder, batch_size=batch_size, batch_format="numpy",
                            compute=ray.data.ActorPoolStrategy(size=n_actors),
                            fn_constructor_kwargs=dict(model_dir=str(model_dir), resolution=resolution,
                                                       preprocessing=preprocessing, pooling=pooling,
                                                       intervention=intervention, threads=threads,
                                                       device="cuda" if gpus else "cpu"),
                            num_cpus=threads, num_gpus=1 if gpus else 0)
        stream = iter(ds.iter_batches(batch_size=None, batch_format="numpy"))

    def shard_blocks():
        from rich.console import Console
        from rich.progress import Progress
        buf_ids, buf_vec, have = [], [], 0
        with Progress(console=Console(stderr=True), disable=not progress, transient=True) as bar:
            task = bar.add_task(f"extracting {role} on Ray ({n_actors} actors x {threads} threads)", total=len(items))
            for s, part in plan.shards():
                ids = np.asarray([it[0] for it in part])
                if s not in todo:
                    bar.advance(task, len(part))
                    yield ids, plan.finished(out_dir, s)
                    continue
                while have < len(part):
                    batch = next(stream)
                    buf_ids.append(batch["id"])
                    buf_vec.append(np.asarray(batch["vector"], dtype=np.float32))
                    have += len(batch["id"])
                    bar.advance(task, len(batch["id"]))
                got_ids, got_vec = np.concatenate(buf_ids), np.concatenate(buf_vec)
                if [str(i) for i in got_ids[:len(part)]] != [str(i) for i in ids]:
                    raise RuntimeError("Ray Data returned rows out of order (preserve_order was not honoured)")
                buf_ids, buf_vec, have = [got_ids[len(part):]], [got_vec[len(part):]], have - len(part)
                yield ids, got_vec[:len(part)]

    return plan.write(out_dir, shard_blocks(), lineage=lineage), {"actors": n_actors, "threads_per_actor": threads,
                                                                   "shards_extracted": len(todo)}
