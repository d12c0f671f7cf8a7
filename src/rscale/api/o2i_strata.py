"""O2I stratification of a real benchmark (O2I paper, section 5.3, App. P): `rscale o2i stratify`.

Two runs of the same queries (a baseline and a treatment: another backbone, or a query-side
intervention) on an ILIAS-layout benchmark whose queries and positives carry box files
(rscale.store.ilias_layout, docs/formats.md). Per query, its O2I is its box area over its image
area, and its ratio is that O2I over the mean O2I of its boxed positives
(rscale.core.o2i.query_positive_ratio); queries are binned by that ratio on log-spaced edges
(rscale.core.o2i.log_ratio_edges) and, per bin and measure, the treatment's gain over the baseline
is tested on the paired per-query values (McNemar's exact test for R@k hits, the paired t-test for
AP and the other continuous measures; Holm across each measure's bins: rscale.core.o2i.stratify).

A run is whatever ``rscale compare`` takes (rscale.api.compare.load_run,
rscale.api.o2i.load_compare_run): the sample-stats Parquet file of an exact evaluation
(``rscale score --fraction 1``) of the descriptor sets ``rscale extract --layout ilias`` wrote from
the same folder, so query ids are ``<instance>/query/<name>``. Queries without a box file, or
whose positives have none, are left out and counted (``excluded``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rscale.core import o2i as core
from rscale.errors import InvalidArgumentError, MissingExtraError
from rscale.query.measures import Measure

DEFAULT_MEASURES = ("R@1", "R@10", "mAP@1000")
TABLE_FORMAT = "o2i-strata"


@dataclass(frozen=True)
class Strata:
    """Gains per bin of query / positive O2I ratio (rows as rscale.core.o2i.stratify's)."""

    label_baseline: str
    label_treatment: str
    layout: str
    edges: np.ndarray
    counts: np.ndarray
    median_ratio: float
    rows: list
    query_ids: np.ndarray          # (Q,) the stratified queries
    ratio: np.ndarray              # (Q,) their query / positive O2I ratios
    excluded: dict                 # reason -> number of the runs' queries left out
    query_cropped: bool = False
    confidence: float = 0.95
    holm_family: str = "bins"
    written: dict = field(default_factory=dict)   # "table" / "plot" -> path

    def to_dict(self) -> dict:
        return {"baseline": self.label_baseline, "treatment": self.label_treatment, "layout": self.layout,
                "queries": int(self.query_ids.size), "excluded": dict(self.excluded),
                "median_ratio": self.median_ratio, "edges": [float(e) for e in self.edges],
                "counts": [int(c) for c in self.counts], "query_cropped": self.query_cropped,
                "confidence": self.confidence,
                "holm": self.holm_family, "rows": [dict(r) for r in self.rows], "written": dict(self.written)}


def bin_label(low: float, high: float) -> str:
    """``<1``, ``1-2.15``, ``>=10`` (3 significant digits)."""
    if low <= 0:
        return f"<{high:.3g}"
    if not np.isfinite(high):
        return f">={low:.3g}"
    return f"{low:.3g}-{high:.3g}"


def _load(run, label):
    from rscale.api.compare import PerQueryRanks, load_run
    if isinstance(run, str):
        from rscale.api.o2i import load_compare_run
        got = load_compare_run(run)
    else:
        got = load_run(run, label)
    if label is not None and got.label != label:
        got = PerQueryRanks(got.query_ids, got.ranks, got.offsets, label, got.n_relevant, got.meta)
    return got


def _check_output(path, suffix: str, option: str) -> Path | None:
    if path is None:
        return None
    path = Path(path)
    if path.suffix.lower() != suffix:
        raise InvalidArgumentError(f"{option} {path}: expected a {suffix} file name (e.g. strata{suffix})")
    if path.is_dir():
        raise InvalidArgumentError(f"{option} {path} is a folder; give a file name (e.g. {path / ('strata' + suffix)})")
    return path


def query_ratios(boxes, query_ids, *, query_cropped: bool = False) -> tuple[np.ndarray, np.ndarray, dict]:
    """(kept mask over ``query_ids``, their ratios, excluded counts) from a LayoutBoxes value.

    ``query_cropped``: the runs saw each boxed query cropped to its box (``rscale extract --crop``),
    so its O2I as seen is 1 and the ratio is 1 / mean positive O2I.
    """
    index = {q: i for i, q in enumerate(boxes.query_ids.tolist())}
    missing = [q for q in query_ids.tolist() if q not in index]
    if missing:
        raise InvalidArgumentError(
            f"{len(missing)} of the runs' {query_ids.size} queries are not in the layout (e.g. {missing[0]!r}); "
            "--layout must be the folder the runs were extracted from (ids <instance>/query/<name>)")
    rows = np.array([index[q] for q in query_ids.tolist()], dtype=np.int64)
    has_q = boxes.query_has_box[rows]
    pos_ok = boxes.pos_has_box
    cum = np.concatenate([[0], np.cumsum(pos_ok, dtype=np.int64)])
    n_boxed_pos = cum[boxes.pos_offsets[1:]] - cum[boxes.pos_offsets[:-1]]
    has_p = n_boxed_pos[rows] > 0
    keep = has_q & has_p
    excluded = {"no_query_box": int(np.sum(~has_q)), "no_positive_box": int(np.sum(has_q & ~has_p))}
    if not keep.any():
        raise InvalidArgumentError(
            f"none of the runs' {query_ids.size} queries has both a box and a boxed positive in the layout "
            f"({excluded['no_query_box']} without a query box, {excluded['no_positive_box']} without positive boxes); "
            "add <name>_bbox.txt files beside the images (docs/formats.md, ILIAS layout)")
    kept = rows[keep]
    q_o2i = core.box_o2i(boxes.query_boxes[kept], boxes.query_sizes[kept])
    if query_cropped:
        q_o2i = np.ones_like(q_o2i)
    off = boxes.pos_offsets
    sel = np.concatenate([np.flatnonzero(pos_ok[s:t]) + s for s, t in zip(off[kept], off[kept + 1])])
    p_o2i = core.box_o2i(boxes.pos_boxes[sel], boxes.pos_sizes[sel])
    offsets = np.concatenate([[0], np.cumsum(n_boxed_pos[kept])])
    return keep, core.query_positive_ratio(q_o2i, p_o2i, offsets), excluded


def stratify_by_o2i(baseline, treatment, *, layout, measures=DEFAULT_MEASURES, low: float = 1.0,
                    high: float = 10.0, bins: int = 3, edges=None, confidence: float = 0.95,
                    holm_family: str = "bins", query_cropped: bool = False, table=None, plot=None,
                    labels: tuple[str, str] | None = None) -> Strata:
    """Gains of ``treatment`` over ``baseline`` per bin of query / positive O2I ratio (module docstring).

    ``baseline`` / ``treatment``: sample-stats paths of exact evaluations (or the other forms
    ``rscale compare`` takes, or PerQueryRanks). ``layout``: the ILIAS-layout folder with the
    box files; ``query_cropped``: the runs' queries were cropped to their boxes
    (``rscale extract --crop``), so a query's O2I as seen is 1. Bins: ``edges`` if given, else
    :func:`rscale.core.o2i.log_ratio_edges` (``low``, ``high``, ``bins``). ``table`` (.parquet)
    and ``plot`` (.png): optional outputs, written only once everything is computed.
    """
    from rscale.api.compare import align
    from rscale.store.ilias_layout import read_layout_boxes

    table, plot = _check_output(table, ".parquet", "--table"), _check_output(plot, ".png", "--plot")
    e = core.log_ratio_edges(low, high, bins) if edges is None else np.asarray(edges, dtype=np.float64)
    ms = [m if isinstance(m, Measure) else Measure.parse(m) for m in measures]
    if not ms:
        raise InvalidArgumentError("name at least one measure to stratify (e.g. R@1, mAP@1000)")
    if len(set(ms)) != len(ms):
        raise InvalidArgumentError(f"a measure is named twice in {[str(m) for m in ms]}")
    a = _load(baseline, labels[0] if labels else None)
    b = _load(treatment, labels[1] if labels else None)
    a, b = align(a, b)
    keep, ratio, excluded = query_ratios(read_layout_boxes(layout), a.query_ids, query_cropped=query_cropped)
    base = {str(m): a.values(m)[keep] for m in ms}
    treat = {str(m): b.values(m)[keep] for m in ms}
    st = core.stratify(ratio, base, treat, edges=e, confidence=confidence, holm_family=holm_family)
    rows = [{**r, "label": bin_label(r["low"], r["high"])} for r in st.rows]
    res = Strata(a.label, b.label, str(layout), st.edges, st.counts, st.median_ratio, rows,
                 a.query_ids[keep], ratio, excluded, query_cropped, confidence, st.holm_family)
    png = strata_plot_png(res) if plot is not None else None     # before any write: a missing extra writes nothing
    if table is not None:
        res.written["table"] = str(write_strata_table(res, table))
    if plot is not None:
        from rscale.store.atomic import write_bytes_atomic
        res.written["plot"] = str(write_bytes_atomic(plot, png))
    return res


def write_strata_table(res: Strata, path) -> Path:
    """One row per (bin, measure), the run labels and bins in the file's metadata (atomic write)."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from rscale.store.atomic import atomic_path

    cols = list(dict.fromkeys(k for r in res.rows for k in r))
    types = {"only_baseline": pa.int64(), "only_treatment": pa.int64()}
    tab = pa.table({c: pa.array([r.get(c) for r in res.rows], type=types.get(c)) for c in cols})
    meta = {k: v for k, v in res.to_dict().items() if k not in ("rows", "written")}
    meta["edges"] = [e if np.isfinite(e) else None for e in meta["edges"]]       # strict JSON: inf as null
    tab = tab.replace_schema_metadata({"rscale.format": TABLE_FORMAT, "rscale.schema_version": "1",
                                       "rscale.meta": json.dumps(meta, sort_keys=True)})
    with atomic_path(path) as tmp:
        pq.write_table(tab, tmp)
    return Path(path)


def strata_plot_png(res: Strata) -> bytes:
    """PNG of the gain per bin (points with their CI), one series per measure; filled where p (Holm) < 0.05."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingExtraError("matplotlib", "plot") from None
    import io

    measures = list(dict.fromkeys(r["measure"] for r in res.rows))
    n_bins = res.edges.size - 1
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=100)
    width = 0.7 / max(1, len(measures))
    for j, m in enumerate(measures):
        rows = [r for r in res.rows if r["measure"] == m]
        x = np.array([r["bin"] for r in rows]) + (j - (len(measures) - 1) / 2) * width
        g = np.array([r["gain"] for r in rows], float)
        lo, hi = np.array([r["ci_low"] for r in rows], float), np.array([r["ci_high"] for r in rows], float)
        sig = np.array([np.isfinite(r["p_holm"]) and r["p_holm"] < 0.05 for r in rows])
        line = ax.errorbar(x, g, yerr=[g - lo, hi - g], fmt="o", mfc="white", capsize=2, label=m)
        ax.plot(x[sig], g[sig], "o", color=line[0].get_color(), zorder=3)
    ax.axhline(0.0, color="0.6", lw=0.8)
    labels = [f"{bin_label(res.edges[k], res.edges[k + 1])}\nn={int(res.counts[k])}" for k in range(n_bins)]
    ax.set_xticks(range(n_bins), labels, fontsize=8)
    ax.set_xlabel("query O2I / mean positive O2I")
    ax.set_ylabel(f"gain ({res.label_treatment.split('/')[-1][:24]} - baseline)", fontsize=8)
    ax.set_title(f"gain per O2I-ratio bin (median ratio {res.median_ratio:.2f}x; filled: p Holm < 0.05)", fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()
