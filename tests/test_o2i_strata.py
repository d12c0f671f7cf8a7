"""O2I stratification of an ILIAS-layout benchmark (paper section 5.3, App. P): box files, the
query / positive O2I ratio, `rscale o2i stratify` end to end against brute-force references."""

import json
from pathlib import Path

import numpy as np
import pytest

from rscale.errors import FormatError, InvalidArgumentError
from rscale.store import ilias_layout as layout

Image = pytest.importorskip("PIL.Image")


# ---- box files --------------------------------------------------------------------------------

def test_read_box_formats_and_clipping(tmp_path):
    f = tmp_path / "q_bbox.txt"
    f.write_text("5 6 25 20\n")
    assert layout.read_box(f) == (5.0, 6.0, 25.0, 20.0)
    f.write_text("5,6,\t25.5\n20")
    assert layout.read_box(f, (40, 30)) == (5.0, 6.0, 25.5, 20.0)
    f.write_text("-0.5 0 40.8 31")                      # inclusive ends of tools: clipped to the image
    assert layout.read_box(f, (40, 30)) == (0.0, 0.0, 40.0, 30.0)


@pytest.mark.parametrize("text, size, message", [
    ("5 5 25", None, "expected 4 numbers x1 y1 x2 y2, got 3"),
    ("5 5 25 20 3", None, "got 5"),
    ("", None, "got 0"),
    ("5 five 25 20", None, "'five' is not a number"),
    ("5 5 5 20", None, "box 5 5 5 20 is empty"),
    ("5 20 25 5", None, "is empty"),
    ("5 5 nan 20", None, "not finite"),
    ("5 5 45 20", (40, 30), "x2 = 45 lies outside the 40x30 image"),
    ("-3 5 20 20", (40, 30), "x1 = -3 lies outside"),
    ("5 5 20 32", (40, 30), "y2 = 32 lies outside"),
    ("40.5 5 41 20", (40, 30), "covers no pixel"),
])
def test_bad_box_files_name_the_file_and_the_value(tmp_path, text, size, message):
    f = tmp_path / "img7_bbox.txt"
    f.write_text(text)
    with pytest.raises(FormatError, match="img7_bbox.txt") as exc:
        layout.read_box(f, size)
    assert message in str(exc.value)


def test_ilias_layout_crop_box_is_checked_against_the_image(tmp_path):
    """Regression: ilias_layout took any 4 numbers as a crop box, also one outside the image."""
    from rscale.producers import extract as ex
    root = _tiny_layout(tmp_path / "ilias", [((40, 30), (5, 5, 25, 20), [((40, 30), None)])])
    (root / "i00" / "query" / "q_bbox.txt").write_text("5 5 60 20")
    with pytest.raises(FormatError, match=r"q_bbox.txt: x2 = 60 lies outside the 40x30 image"):
        ex.ilias_layout(root, crop_queries=True)
    assert ex.ilias_layout(root)[0][0][2] is None        # not read without --crop


def _tiny_layout(root, spec):
    """spec: per instance (query size, query box or None, [(positive size, box or None), ...])."""
    for i, (qsize, qbox, positives) in enumerate(spec):
        inst = root / f"i{i:02d}"
        (inst / "query").mkdir(parents=True)
        (inst / "pos").mkdir()
        Image.new("RGB", qsize, (120, 10 * i % 250, 30)).save(inst / "query" / "q.jpg")
        if qbox is not None:
            (inst / "query" / "q_bbox.txt").write_text(" ".join(str(v) for v in qbox))
        for k, (psize, pbox) in enumerate(positives):
            Image.new("RGB", psize, (10, 120, 10 * k)).save(inst / "pos" / f"p{k}.png")
            if pbox is not None:
                (inst / "pos" / f"p{k}_bbox.txt").write_text(",".join(str(v) for v in pbox))
    return root


def test_layout_boxes_and_ratios_match_a_loop(tmp_path):
    from rscale.api.o2i_strata import query_ratios
    spec = [((40, 30), (0, 0, 20, 15), [((100, 50), (10, 10, 20, 20)), ((20, 20), (0, 0, 10, 10))]),
            ((64, 64), (0, 0, 64, 64), [((64, 64), (0, 0, 8, 8)), ((64, 64), None)]),     # one unboxed positive
            ((50, 50), None, [((50, 50), (0, 0, 25, 25))]),                                  # no query box
            ((50, 50), (5, 5, 10, 10), [((50, 50), None)])]                                  # no positive box
    root = _tiny_layout(tmp_path / "ilias", spec)
    boxes = layout.read_layout_boxes(root)
    assert boxes.query_ids.tolist() == ["i00/query/q", "i01/query/q", "i02/query/q", "i03/query/q"]
    assert boxes.pos_ids.tolist()[:3] == ["i00/pos/p0", "i00/pos/p1", "i01/pos/p0"]
    assert boxes.query_sizes[0].tolist() == [40, 30] and boxes.pos_offsets.tolist() == [0, 2, 4, 5, 6]
    ids = np.array(["i03/query/q", "i01/query/q", "i02/query/q", "i00/query/q"])      # the runs' order
    keep, ratio, excluded = query_ratios(boxes, ids)
    assert keep.tolist() == [False, True, False, True]
    assert excluded == {"no_query_box": 1, "no_positive_box": 1}
    want_i01 = 1.0 / (64 / 64 ** 2)                      # the unboxed positive is left out of the mean
    want_i00 = (300 / 1200) / np.mean([100 / 5000, 100 / 400])
    np.testing.assert_allclose(ratio, [want_i01, want_i00])
    _, cropped, _ = query_ratios(boxes, ids, query_cropped=True)        # the query as seen fills its crop
    np.testing.assert_allclose(cropped, [1 / (64 / 64 ** 2), 1 / np.mean([100 / 5000, 100 / 400])])
    with pytest.raises(InvalidArgumentError, match=r"1 of the runs' 2 queries are not in the layout \(e.g. 'x/query/q'\)"):
        query_ratios(boxes, np.array(["i00/query/q", "x/query/q"]))
    with pytest.raises(InvalidArgumentError, match="none of the runs' 2 queries has both a box"):
        query_ratios(boxes, np.array(["i02/query/q", "i03/query/q"]))


# ---- end to end: layout -> descriptor sets -> rscale score --fraction 1 -> rscale o2i stratify ---

N_INST, N_POS, DIM = 60, 3, 16


def _benchmark(root, seed=0):
    """An ILIAS layout with boxes spanning query/positive ratios 0.3x-30x, and two exact runs on it.

    The treatment's query descriptors are less noisy for ratios in [1, 10) only, so it gains there.
    Instance 0 has no query box, instance 1 no positive boxes (both left out)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rscale.api.scoring import score
    from rscale.store.descriptor_set import write_descriptor_set

    rng = np.random.default_rng(seed)
    data = root / "ilias"
    ratios = {}
    for i in range(N_INST):
        inst = data / f"obj{i:02d}"
        (inst / "query").mkdir(parents=True)
        (inst / "pos").mkdir()
        w, h = (int(v) for v in rng.integers(40, 80, 2))
        qf = float(np.exp(rng.uniform(np.log(0.08), np.log(0.9))))
        bw, bh = max(2, int(round(w * np.sqrt(qf)))), max(2, int(round(h * np.sqrt(qf))))
        x1, y1 = int(rng.integers(0, w - bw + 1)), int(rng.integers(0, h - bh + 1))
        Image.new("RGB", (w, h), (100, 100, 100)).save(inst / "query" / "q.jpg")
        if i != 0:
            (inst / "query" / "q_bbox.txt").write_text(f"{x1} {y1} {x1 + bw} {y1 + bh}")
        pf = []
        for k in range(N_POS):
            pw, ph = (int(v) for v in rng.integers(40, 80, 2))
            f = float(np.exp(rng.uniform(np.log(0.01), np.log(0.6))))
            cw, ch = max(2, int(round(pw * np.sqrt(f)))), max(2, int(round(ph * np.sqrt(f))))
            Image.new("RGB", (pw, ph), (90, 90, 90)).save(inst / "pos" / f"p{k}.jpg")
            if i != 1:
                (inst / "pos" / f"p{k}_bbox.txt").write_text(f"0,0,{cw},{ch}")
                pf.append(cw * ch / (pw * ph))
        if i > 1:
            ratios[f"obj{i:02d}/query/q"] = (bw * bh / (w * h)) / np.mean(pf)
    centres = rng.normal(size=(N_INST, DIM))
    pos = centres[:, None, :] + 0.6 * rng.normal(size=(N_INST, N_POS, DIM))
    qids = [f"obj{i:02d}/query/q" for i in range(N_INST)]
    pids = [f"obj{i:02d}/pos/p{k}" for i in range(N_INST) for k in range(N_POS)]
    helped = np.array([1.0 <= ratios.get(q, 0.0) < 10.0 for q in qids])
    noise = rng.normal(size=(N_INST, DIM))
    dist = rng.normal(size=(400, DIM))
    unit = lambda x: (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)  # noqa: E731
    pq.write_table(pa.table({"query_id": [q for q in qids for _ in range(N_POS)], "positive_id": pids}),
                   root / "qrels.parquet")
    write_descriptor_set(root / "positives", [(np.array(pids), unit(pos.reshape(-1, DIM)))], role="positives",
                         dtype="float32")
    write_descriptor_set(root / "distractors", [(np.array([f"d{j}" for j in range(400)]), unit(dist))],
                         role="distractors", dtype="float32")
    runs = {}
    for name, scale in (("base", np.full(N_INST, 1.6)), ("treat", np.where(helped, 0.3, 1.6))):
        write_descriptor_set(root / name, [(np.array(qids), unit(centres + scale[:, None] * noise))],
                             role="queries", dtype="float32")
        score(root / name, root / "positives", qrels=root / "qrels.parquet", distractors_dir=root / "distractors",
              out=root / f"{name}.parquet", fraction=1.0, k=20, backend="numpy", lineage=False)
        runs[name] = root / f"{name}.parquet"
    return data, runs, ratios


def _brute_ranks(root, name):
    """Dense scores of each query against its positives and every distractor; ranks by a loop."""
    from rscale.store.descriptor_set import DescriptorSet
    load = lambda p: (DescriptorSet.open(p).ids().astype(str),  # noqa: E731
                      np.concatenate([np.asarray(v) for _, v in DescriptorSet.open(p).shards()]))
    qid, q = load(root / name)
    pid, p = load(root / "positives")
    _, d = load(root / "distractors")
    ranks = {}
    for i, qi in enumerate(qid):
        inst = qi.split("/")[0]
        ps = sorted((float(q[i] @ p[j]) for j in range(len(pid)) if pid[j].startswith(inst + "/")), reverse=True)
        ds = q[i] @ d.T
        ranks[qi] = [j + 1 + int(np.sum(ds >= s)) for j, s in enumerate(ps)]
    return ranks


def _ap(r, k=1000):
    r = sorted(r)
    return sum((j + 1) / rk for j, rk in enumerate(r) if rk <= k) / min(k, len(r))


def test_stratify_cli_end_to_end_matches_brute_force(tmp_path, capsys):
    from scipy import stats
    from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar
    from statsmodels.stats.multitest import multipletests

    from rscale.cli import main
    data, runs, ratios = _benchmark(tmp_path)
    table, plot = tmp_path / "out" / "strata.parquet", tmp_path / "out" / "strata.png"
    assert main(["o2i", "stratify", str(runs["base"]), str(runs["treat"]), "--layout", str(data), "--format", "json",
                 "-m", "R@1", "-m", "mAP@1000", "--table", str(table), "--plot", str(plot)]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["queries"] == N_INST - 2 and res["excluded"] == {"no_query_box": 1, "no_positive_box": 1}
    edges = [0.0, 1.0, 10 ** (1 / 3), 10 ** (2 / 3), 10.0, None]                 # JSON: inf is null
    np.testing.assert_allclose(res["edges"][:-1], edges[:-1])
    assert res["edges"][-1] is None
    assert res["median_ratio"] == pytest.approx(np.median(list(ratios.values())))
    base, treat = _brute_ranks(tmp_path, "base"), _brute_ranks(tmp_path, "treat")
    e = np.array(edges[:-1] + [np.inf])
    pvals = {"R@1": [], "mAP@1000": []}
    for row in res["rows"]:
        lo, hi = e[row["bin"]], e[row["bin"] + 1]
        qs = [q for q, r in ratios.items() if lo <= r < hi]
        assert row["n"] == len(qs) == res["counts"][row["bin"]]
        if row["measure"] == "R@1":
            x = np.array([float(min(base[q]) == 1) for q in qs])
            y = np.array([float(min(treat[q]) == 1) for q in qs])
        else:
            x, y = np.array([_ap(base[q]) for q in qs]), np.array([_ap(treat[q]) for q in qs])
        if not qs:
            assert row["gain"] is None and row["p_value"] is None
            continue
        assert row["baseline"] == pytest.approx(x.mean()) and row["gain"] == pytest.approx(y.mean() - x.mean())
        if len(qs) < 2:
            assert row["p_value"] is None
            continue
        if row["measure"] == "R@1":
            tab = [[np.sum((x == 1) & (y == 1)), np.sum((x == 1) & (y == 0))],
                   [np.sum((x == 0) & (y == 1)), np.sum((x == 0) & (y == 0))]]
            assert row["p_value"] == pytest.approx(sm_mcnemar(tab, exact=True).pvalue)
        elif np.ptp(y - x) > 0:
            assert row["p_value"] == pytest.approx(stats.ttest_rel(y, x).pvalue, rel=1e-6)
        pvals[row["measure"]].append((row["p_value"], row["p_holm"]))
    for m, pairs in pvals.items():
        np.testing.assert_allclose([h for _, h in pairs], multipletests([p for p, _ in pairs], method="holm")[1])
    helped = [r for r in res["rows"] if r["measure"] == "mAP@1000" and 1.0 <= r["low"] < 10.0 and r["n"] >= 5]
    assert helped and all(r["gain"] > 0 for r in helped)
    # the written table holds the same rows; the plot is a PNG
    import pyarrow.parquet as pq
    t = pq.read_table(table)
    assert t.schema.metadata[b"rscale.format"] == b"o2i-strata"
    meta = json.loads(t.schema.metadata[b"rscale.meta"])
    assert meta["queries"] == N_INST - 2 and meta["baseline"] == str(runs["base"])
    assert t.column("gain").to_pylist()[1] == pytest.approx(res["rows"][1]["gain"])
    assert t.num_rows == len(res["rows"]) == 10
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert set(res["written"]) == {"table", "plot"}
    # the human table
    assert main(["o2i", "stratify", str(runs["base"]), str(runs["treat"]), "--layout", str(data)]) == 0
    text = capsys.readouterr().out
    assert "median ratio" in text and "4.64-10" in text and ">=10" in text and "left out: 1 without a query box" in text


def test_stratify_summary_line_survives_long_run_paths(tmp_path, capsys):
    """The run paths label the comparison; under a long temporary directory the summary used to be
    the table's title, which rich wrapped to the table's width, splitting "median ratio" (a CI
    clone failed on it). The summary is one plain line whatever the paths' length."""
    import shutil

    from rscale.cli import main
    data, runs, _ = _benchmark(tmp_path)
    deep = tmp_path / ("a-long-experiment-directory-name-" * 3) / "runs"
    deep.mkdir(parents=True)
    moved = {k: Path(shutil.copy(v, deep / v.name)) for k, v in runs.items() if k in ("base", "treat")}
    assert main(["o2i", "stratify", str(moved["base"]), str(moved["treat"]), "--layout", str(data)]) == 0
    lines = capsys.readouterr().out.splitlines()
    summary = [x for x in lines if "median ratio" in x]
    assert len(summary) == 1 and str(moved["treat"]) in summary[0] and str(moved["base"]) in summary[0]
    assert "left out: 1 without a query box, 1 without positive boxes" in summary[0]


@pytest.mark.parametrize("case, message", [
    ("bad_box", "obj05/pos/p1_bbox.txt: 'x' is not a number"),
    ("wrong_layout", "queries are not in the layout"),
    ("table_suffix", "--table"),
    ("sampled", "not an exact evaluation"),
    ("bins", "ratio bins: bins must be a whole number >= 1, got 0"),
])
def test_stratify_cli_refuses_bad_input_and_writes_nothing(tmp_path, capsys, case, message):
    from rscale.api.scoring import score
    from rscale.cli import main
    data, runs, _ = _benchmark(tmp_path)
    out = tmp_path / "out"
    extra = []
    table = out / "t.parquet"
    if case == "bad_box":
        (data / "obj05" / "pos" / "p1_bbox.txt").write_text("0 0 x 5")
    elif case == "wrong_layout":
        import shutil
        shutil.rmtree(data / "obj07")
    elif case == "table_suffix":
        table = out / "t.csv"
    elif case == "sampled":
        score(tmp_path / "base", tmp_path / "positives", qrels=tmp_path / "qrels.parquet",
              distractors_dir=tmp_path / "distractors", out=tmp_path / "half.parquet", fraction=0.5, k=20,
              backend="numpy", lineage=False)
        runs["base"] = tmp_path / "half.parquet"
    elif case == "bins":
        extra = ["--bins", "0"]
    capsys.readouterr()
    before = _tree(tmp_path)
    assert main(["o2i", "stratify", str(runs["base"]), str(runs["treat"]), "--layout", str(data),
                 "--table", str(table), "--plot", str(out / "p.png"), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not out.exists() and _tree(tmp_path) == before


def _tree(root):
    import hashlib
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None
            for p in sorted(root.rglob("*"))}


@pytest.mark.slow
def test_stratify_after_rscale_extract_and_score_on_generated_images(tmp_path, capsys):
    """The whole path a user runs: images with boxes -> `rscale extract --layout ilias` (a tiny
    random ViT; baseline and the gp intervention) -> `rscale score --fraction 1` -> `rscale o2i
    stratify`: the extractor's ids are the layout's, so every boxed query is stratified, with the
    ratio a loop over the box files gives."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from rscale.cli import main
    torch.manual_seed(0)
    model = tmp_path / "vit"
    transformers.ViTModel(transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                                 intermediate_size=64, image_size=32, patch_size=8)).save_pretrained(model)
    rng = np.random.default_rng(3)
    data, want = tmp_path / "ilias", {}
    for i in range(8):
        inst = data / f"o{i}"
        (inst / "query").mkdir(parents=True)
        (inst / "pos").mkdir()
        colour = rng.integers(60, 255, 3)

        def picture(path, w, h, frac):
            arr = np.full((h, w, 3), 128, np.uint8)
            bw, bh = max(2, int(w * np.sqrt(frac))), max(2, int(h * np.sqrt(frac)))
            arr[:bh, :bw] = colour
            Image.fromarray(arr).save(path)
            (path.parent / f"{path.stem}_bbox.txt").write_text(f"0 0 {bw} {bh}")
            return bw * bh / (w * h)

        q = picture(inst / "query" / "q.jpg", 48, 40, float(rng.uniform(0.05, 0.9)))
        ps = [picture(inst / "pos" / f"p{k}.jpg", 40, 48, float(rng.uniform(0.02, 0.5))) for k in range(2)]
        want[f"o{i}/query/q"] = q / np.mean(ps)
    (data / "o7" / "query" / "q_bbox.txt").unlink()               # one query without a box
    del want["o7/query/q"]
    (tmp_path / "dis").mkdir()
    for j in range(12):
        Image.fromarray(rng.integers(0, 255, (40, 40, 3), dtype=np.uint8)).save(tmp_path / "dis" / f"d{j}.png")
    assert main(["extract", str(tmp_path / "dis"), "--model", str(model), "-o", str(tmp_path / "sets" / "dis")]) == 0
    runs = {}
    for name, extra in (("base", []), ("gp", ["--intervention", "gp"])):
        sets = tmp_path / "sets" / name
        assert main(["extract", str(data), "--layout", "ilias", "--model", str(model), "-o", str(sets), *extra]) == 0
        runs[name] = tmp_path / f"{name}.parquet"
        assert main(["score", "--queries", str(sets / "queries"), "--positives", str(sets / "positives"),
                     "--qrels", str(sets / "qrels.parquet"), "--distractors", str(tmp_path / "sets" / "dis"),
                     "--fraction", "1", "--k", "5", "--backend", "numpy", "-o", str(runs[name])]) == 0
    capsys.readouterr()
    assert main(["o2i", "stratify", str(runs["base"]), str(runs["gp"]), "--layout", str(data), "--format", "json",
                 "--low", "0.5", "--high", "8", "--bins", "2"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["queries"] == 7 and res["excluded"] == {"no_query_box": 1, "no_positive_box": 0}
    np.testing.assert_allclose(res["edges"][:-1], [0, 0.5, 2.0, 8.0])
    assert sum(res["counts"]) == 7
    assert res["median_ratio"] == pytest.approx(np.median(list(want.values())))
    e = [0, 0.5, 2.0, 8.0, np.inf]
    assert res["counts"] == [sum(e[b] <= r < e[b + 1] for r in want.values()) for b in range(4)]


def test_a_missing_plot_extra_writes_no_table_either(tmp_path, monkeypatch):
    """The plot is drawn before any write: without matplotlib, --table is not left half-done."""
    import sys

    from rscale.api.o2i_strata import stratify_by_o2i
    from rscale.errors import MissingExtraError
    data, runs, _ = _benchmark(tmp_path)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(MissingExtraError, match=r"rscale\[plot\]"):
        stratify_by_o2i(str(runs["base"]), str(runs["treat"]), layout=data, table=tmp_path / "o" / "t.parquet",
                        plot=tmp_path / "o" / "p.png")
    assert not (tmp_path / "o").exists()
    res = stratify_by_o2i(str(runs["base"]), str(runs["treat"]), layout=data, table=tmp_path / "o" / "t.parquet")
    assert res.written == {"table": str(tmp_path / "o" / "t.parquet")}
