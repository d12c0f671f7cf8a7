"""The second real-embedding set (benchmarks/realset2, docs/realset2.md): its build rules on small
hand-made sources, its stages and the check script end to end on a tiny stand-in, and the
integrity of the committed data."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from benchmark_modules import load_benchmark
from realset_checks import check_real_set_data
from rscale.score.sampling import hash_uniform

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "realset2" / "data"


build = load_benchmark("realset2/build.py", "realset2_build")


# ---------------------------------------------------------------- source parsing
def test_a_wordnet_line_gives_key_words_definition_and_examples():
    line = ("01234567 00 a 02 quick(a) 0 speedy 0 001 & 01234568 a 0000 | accomplished rapidly; "
            '"a quick inspection"; "speedy recovery" - Anon  \n')
    key, words, definition, examples = build.parse_wordnet_line(line, "a")
    assert key == "a:01234567"
    assert words == ["quick", "speedy"]
    assert definition == "accomplished rapidly"
    assert examples == ["a quick inspection", "speedy recovery"]
    assert build.parse_wordnet_line("  1 This software and database ...\n", "n") is None
    assert build.lemma_word("Strategic_Intelligence") == "strategic intelligence"


def test_a_gcide_paragraph_is_cleaned_by_the_documented_rules():
    clean = build.clean_gcide_paragraph
    assert clean("   2. To give up absolutely; to forsake entirely; to renounce\n      utterly.\n"
                 "      [1913 Webster]") == "To give up absolutely; to forsake entirely; to renounce utterly."
    # nested brackets go, innermost first; braces go; the attribution goes
    assert clean("(a) A caf[']e [Of. [F.] x] {bar} of the town in the evening. --Shak.") == \
        "A cafe bar of the town in the evening."
    assert clean("Syn: To give up; yield; forego; cede; surrender.") is None
    assert clean("Too short here.") is None                   # 3 words < 5
    assert clean(" ".join(["word"] * 61)) is None             # > 60 words


def _dictd(tmp_path, entries):
    """A dictd pair (index, gzip'd dict) holding ENTRIES [(headwords, text)]."""
    b64 = build._B64

    def enc(n):
        s = ""
        while True:
            s = b64[n % 64] + s
            n //= 64
            if n == 0:
                return s
    body, index = b"", []
    for heads, text in [((["00-database-short"]), "header\n")] + entries:
        raw = text.encode()
        for h in heads:
            index.append(f"{h}\t{enc(len(body))}\t{enc(len(raw))}")
        body += raw
    (tmp_path / "g.index").write_text("\n".join(sorted(index)) + "\n")
    with gzip.open(tmp_path / "g.dict.dz", "wb") as fh:
        fh.write(body)
    return tmp_path / "g.index", tmp_path / "g.dict.dz"


def test_gcide_entries_are_read_once_with_all_their_headwords(tmp_path):
    idx, dz = _dictd(tmp_path, [
        (["Abandon", "abandon"], "Abandon \\A*ban\"don\\, v. t. [OF.]\n\n   1. To give up wholly and for good.\n"
                                 "      [1913 Webster]\n\n   Syn: leave; quit.\n"),
        (["Zero"], "Zero \\Ze\"ro\\ n.\n   1. the number that indicates no quantity at all.\n\n"
                   "   Syn: nought\n        [WordNet 1.5]\n"),
    ])
    got = build.read_gcide(idx, dz)
    assert len(got) == 2
    by_word = {min(w): (tag, texts) for w, tag, texts in got}
    assert by_word["abandon"] == (False, ["To give up wholly and for good."])
    assert by_word["zero"][0] is True                         # copied from WordNet: tagged


# ---------------------------------------------------------------- selection and exclusions
def _wn(key, words, definition, examples=()):
    return (key, list(words), definition, list(examples))


def test_selection_applies_every_exclusion_of_the_design():
    bank1 = ("sloping land beside a body of water", "they pulled the canoe up on the bank")
    bank2 = ("a financial institution that accepts deposits", "he cashed a check at the bank")
    wordnet = [
        _wn("n:1", ["bank"], bank1[0], [bank1[1]]),
        _wn("n:2", ["bank", "depository"], bank2[0], [bank2[1]]),
        _wn("v:3", ["run"], "move fast by using your feet", ["Don't run--you'll be out of breath"]),
        _wn("n:4", ["stone"], "a lump of hard consolidated mineral matter", ["he threw a stone at the window"]),
        _wn("n:5", ["pebble"], "a small smooth rounded rock", ["he threw a stone at the window"]),  # shared example
        _wn("n:6", ["tree"], "a tall perennial woody plant", []),                             # no example
        _wn("n:7", ["x"], "two words", ["an example of x"]),                                  # definition too short
    ]
    quote1 = "As the saying goes, they pulled the canoe up on the bank at dusk."
    quote2 = "He wrote that he cashed a check at the bank on Monday."
    gcide = [
        ({"bank"}, False, ["The margin of a watercourse, the rising ground bordering a river."]),
        ({"zebra"}, True, ["An African wild animal with black and white stripes all over."]),
        ({"quote"}, False, [quote1, quote2]),
        ({"aardvark"}, False, ["A burrowing African mammal that feeds on ants and termites."]),
    ]
    queries, qrels, pool, counts = build.select(wordnet, gcide, max_queries=10, pool_target=10**6)
    keys = [":".join(q.split(":")[1:3]) for q, _, _ in queries]
    # candidates in sha256(key) order; one query per word; no text used twice
    assert keys == sorted(keys, key=lambda k: hashlib.sha256(k.encode()).hexdigest())
    assert len(keys) == 3 and "v:3" in keys
    assert len({"n:1", "n:2"} & set(keys)) == 1 and len({"n:4", "n:5"} & set(keys)) == 1
    pool_texts = {t for _, t, _ in pool}
    assert len({d for d, _, _ in pool}) == len(pool)
    for _, d, t in queries + qrels:
        assert d not in {d for d, _, _ in pool} and t not in pool_texts                # exclusion 1
    # exclusion 2: the other sense of the query's word, both its texts
    assert not (set(bank1) | set(bank2)) & pool_texts
    # exclusion 3: GCIDE's entry of a query word, and GCIDE's copies of WordNet
    assert "The margin of a watercourse, the rising ground bordering a river." not in pool_texts
    assert "An African wild animal with black and white stripes all over." not in pool_texts
    # exclusion 4: a text quoting a positive goes; one quoting an excluded non-positive stays
    if "n:1" in keys:
        assert quote1 not in pool_texts and quote2 in pool_texts
    else:
        assert quote2 not in pool_texts and quote1 in pool_texts
    assert counts["excluded_quoting_a_positive"] == 1
    # the sense that lost its shared example keeps its definition in the pool
    other = "a small smooth rounded rock" if "n:4" in keys else "a lump of hard consolidated mineral matter"
    assert other in pool_texts and "he threw a stone at the window" not in pool_texts
    assert {"A burrowing African mammal that feeds on ants and termites.",
            "a tall perennial woody plant", "two words", "an example of x"} <= pool_texts
    assert counts["pool"] == len(pool) and counts["queries"] == 3 and counts["positives"] == len(qrels) == 3


def test_the_pool_is_capped_with_gcide_texts_in_digest_order():
    wordnet = [_wn("n:1", ["cat"], "a small domesticated feline animal", ["the cat sat on the mat"])]
    gcide = [({f"w{i}"}, False, [f"A distinct dictionary paragraph number {i} of five or more words."])
             for i in range(40)]
    _, _, pool, counts = build.select(wordnet, gcide, max_queries=1, pool_target=10)
    assert len(pool) == 10 and counts["gcide_available"] == 40
    gc = [d for d, _, s in pool if s == "gcide"]
    every = sorted(build.digest(t) for _, _, ts in gcide for t in ts)
    assert gc == every[:len(gc)]


# ---------------------------------------------------------------- the model pipeline, on a tiny model
@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast
    d = tmp_path_factory.mktemp("tiny-bert")
    words = "the a cat dog sat on mat ran fast slow red blue big small word text of and".split()
    (d / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    BertTokenizerFast(vocab_file=str(d / "vocab.txt")).save_pretrained(d)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=5 + len(words), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32, max_position_embeddings=64)).eval().save_pretrained(d)
    return d


def test_embeddings_are_mask_mean_pooled_unit_vectors_whatever_the_batching(tiny_model_dir):
    import torch
    tok, model = build.load_text_model(tiny_model_dir)
    texts = ["the cat sat on the mat", "a dog", "red blue big small word text of and the cat ran fast", "slow"]
    vec = build.embed_texts(tok, model, texts, batch=3)
    np.testing.assert_allclose(np.linalg.norm(vec, axis=1), 1.0, atol=1e-6)
    for i, t in enumerate(texts):                     # one at a time: no padding at all
        with torch.inference_mode():
            h = model(**tok([t], return_tensors="pt")).last_hidden_state[0].mean(0).numpy()
        np.testing.assert_allclose(vec[i], h / np.linalg.norm(h), atol=1e-5)


def _texts_table(work, n_queries, n_pool, rng):
    rows = {"id": [], "digest": [], "text": [], "role": [], "source": [], "query_id": [], "u": []}

    def add(i, t, role, src, q, u):
        for k, v in zip(rows, (i, build.digest(t), t, role, src, q, u)):
            rows[k].append(v)
    words = "the a cat dog sat on mat ran fast slow red blue big small".split()
    for q in range(n_queries):
        qid = f"q:n:{q:08d}:w{q}"
        add(qid, f"query {q} " + " ".join(rng.choice(words, 4)), "query", "wordnet-definition", qid, -1.0)
        for p in range(1 + q % 3):
            add(f"txt-p{q}-{p}", f"positive {q} {p} " + " ".join(rng.choice(words, 5)), "positive",
                "wordnet-example", qid, -1.0)
    ids = np.asarray([f"txt-{i:016x}" for i in range(n_pool)])
    for i, u in zip(ids, hash_uniform(ids, build.PARTITION_SEED)):
        add(i, f"pool {i} " + " ".join(rng.choice(words, 6)), "pool", "gcide", "", float(u))
    work.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(rows), work / "texts.parquet")
    (work / "corpus.json").write_text(json.dumps({"versions": {"wordnet-base": "test", "dict-gcide": "test"},
                                                  "counts": {"queries": n_queries}}))
    return pq.read_table(work / "texts.parquet").to_pandas()


def test_embed_stage_writes_every_chunk_once_and_resumes(tmp_path, tiny_model_dir, monkeypatch, torch_threads_kept):
    monkeypatch.setattr(build, "CHUNK", 16)
    texts = _texts_table(tmp_path, 5, 60, np.random.default_rng(1))
    build.stage_embed(tmp_path, model_dir=tiny_model_dir)
    chunks = build.chunks_of(texts)
    files = sorted((tmp_path / "emb").glob("chunk-*.npz"))
    assert len(files) == len(chunks) and not list((tmp_path / "emb").glob("*.claim"))
    assert build.embedded_prefix(tmp_path, len(chunks)) == len(chunks)
    tok, model = build.load_text_model(tiny_model_dir)
    for c, f in enumerate(files):
        z = np.load(f)
        ids, tx = zip(*chunks[c])
        assert list(z["ids"]) == list(ids)
        np.testing.assert_allclose(z["vectors"], build.embed_texts(tok, model, list(tx)), atol=1e-6)
    # chunk 0 holds the queries and positives; the pool follows in order of u
    assert set(texts.loc[texts.role != "pool", "id"]) <= {i for ch in chunks[:2] for i, _ in ch}
    pool_order = [i for ch in chunks for i, _ in ch if i.startswith("txt-0")]
    assert pool_order == list(texts[texts.role == "pool"].sort_values("u")["id"])
    stamp = files[-1].stat().st_mtime_ns
    build.stage_embed(tmp_path, model_dir=tiny_model_dir)          # nothing left: nothing rewritten
    assert files[-1].stat().st_mtime_ns == stamp
    info = json.loads((tmp_path / "emb" / "model.json").read_text())
    assert info["max_tokens"] == build.MAX_TOKENS and len(info["weights_sha256"]) == 64


def test_a_dead_workers_claim_is_taken_over_and_a_live_ones_is_not(tmp_path):
    import os
    emb = tmp_path
    (emb / "chunk-0000.npz").write_bytes(b"")
    (emb / "chunk-0001.claim").write_text(str(os.getpid()))      # alive: this process
    (emb / "chunk-0002.claim").write_text("999999999")            # no such process
    assert build.claim_chunk(emb, 4) == 2
    assert (emb / "chunk-0002.claim").read_text() == str(os.getpid())
    assert build.claim_chunk(emb, 4) == 3
    assert build.claim_chunk(emb, 4) is None


# ---------------------------------------------------------------- score stage and check, tiny stand-in
def _standin_vectors(work, texts, rng, d=24):
    """Structured stand-in embeddings: positives near their query, the pool spread around them."""
    q = texts[texts.role == "query"]
    centre = {qid: rng.standard_normal(d) for qid in q["id"]}
    vec = {}
    for _, r in texts.iterrows():
        if r.role == "query":
            v = centre[r.id] + 0.3 * rng.standard_normal(d)
        elif r.role == "positive":
            v = centre[r.query_id] + (0.4 + 0.4 * rng.random()) * rng.standard_normal(d)
        else:
            v = centre[rng.choice(list(centre))] * 0.5 + rng.standard_normal(d)
        vec[r.id] = (v / np.linalg.norm(v)).astype(np.float32)
    emb = work / "emb"
    emb.mkdir(exist_ok=True)
    for c, ch in enumerate(build.chunks_of(texts)):
        ids = [i for i, _ in ch]
        np.savez(emb / f"chunk-{c:04d}.npz", ids=np.asarray(ids), vectors=np.stack([vec[i] for i in ids]))
    (emb / "model.json").write_text(json.dumps({"name": "stand-in", "weights_sha256": "none"}))


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    work = tmp_path_factory.mktemp("realset2-work")
    rng = np.random.default_rng(7)
    texts = _texts_table(work, 12, 6000, rng)
    _standin_vectors(work, texts, rng)
    out = work / "data"
    build.stage_score(work, out)
    return work, out, texts


def test_score_stage_writes_truth_draws_and_a_manifest_that_match(standin):
    work, out, texts = standin
    man = json.loads((out / "manifest.json").read_text())
    assert man["pool"] == man["pool_designed"] == 6000 and man["u_max"] == 1.0
    check_real_set_data(out, man)
    enc = pq.ParquetFile(out / "truth.sample_stats.parquet").metadata.row_group(0)
    cols = [enc.column(i) for i in range(enc.num_columns)]
    assert any("BYTE_STREAM_SPLIT" in c.encodings for c in cols if c.path_in_schema.startswith("top_scores"))


def test_a_cut_embedding_keeps_the_uniform_slice_below_u_max(standin, tmp_path):
    import shutil
    work, _, texts = standin
    cut = tmp_path / "work"
    shutil.copytree(work, cut, ignore=shutil.ignore_patterns("data", "sets"))
    n = len(build.chunks_of(texts))
    (cut / "emb" / f"chunk-{n - 1:04d}.npz").unlink()
    (cut / "emb" / f"chunk-{n - 2:04d}.npz").unlink()
    build.stage_score(cut, cut / "data")
    man = json.loads((cut / "data" / "manifest.json").read_text())
    pool = pq.read_table(cut / "data" / "pool_ids.parquet").to_pandas()
    full = texts[texts.role == "pool"]
    assert man["pool"] == len(pool) < man["pool_designed"] == len(full)
    assert set(pool["id"]) == set(full.loc[full.u <= man["u_max"], "id"])
    check_real_set_data(cut / "data", man)


def test_the_check_script_runs_end_to_end_on_the_stand_in(standin, tmp_path, capsys):
    _, out, _ = standin
    check = load_benchmark("realset2/check.py", "realset2_check")
    report = tmp_path / "check.json"
    check.main(["--data", str(out), "--json", str(report), "--methods", "evt-eb,evt,count,loguniform",
                "--fractions", "05pct,10pct"])
    printed = capsys.readouterr().out
    man = json.loads((out / "manifest.json").read_text())
    assert f"truth mAP@1000 at N = {man['pool']:,}: {man['truth_map_at_1000']:.4f}" in printed
    # the default estimator is named as such (evt was, until evt-eb replaced it)
    assert "| evt-eb (default) |" in printed and "| evt |" in printed and "| evt (default) |" not in printed
    assert "| count |" in printed and "| loguniform curve |" in printed
    rows = json.loads(report.read_text())["rows"]
    assert sorted(r["draw"] for r in rows) == [f"draw-{f}-{j}" for f in ("05pct", "10pct") for j in range(5)]
    for r in rows:
        assert np.isfinite(r["evt"]["value"]) and np.isfinite(r["count"]["value"])
        assert r["evt"]["lo"] <= r["evt"]["value"] <= r["evt"]["hi"]


def test_the_check_reads_the_set_named_by_set(monkeypatch):
    check = load_benchmark("realset/check.py", "realset_check")
    seen = {}

    def fake_read(p):
        seen["path"] = Path(p)
        raise SystemExit(0)
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: fake_read(self))
    with pytest.raises(SystemExit):
        check.main(["--set", "realset2"])
    assert seen["path"] == ROOT / "benchmarks" / "realset2" / "data" / "manifest.json"


# ---------------------------------------------------------------- data checks (stand-in and committed)


def test_the_committed_set_is_whole_and_consistent():
    man = json.loads((DATA / "manifest.json").read_text())
    assert man["pool"] >= 200_000 and man["queries"] == 1000
    assert sum(p.stat().st_size for p in DATA.iterdir()) < 60e6
    assert sorted(man["packages"]) == ["dict-gcide", "wordnet-base"]
    check_real_set_data(DATA, man, n_brute=100)
