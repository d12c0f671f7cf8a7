import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rscale.errors import QuerySyntaxError
from rscale.query.grammar import BackboneRef, Query, format_size, parse, parse_size
from rscale.query.measures import Measure

CANONICAL = [
    ("mAP@1000 at N=1e8 for dinov3_l", "mAP@1000 at N=1e8 for dinov3_l"),
    ("map@1000 at n = 1e8 for dinov3_l", "mAP@1000 at N=1e8 for dinov3_l"),
    ("mAP@100, R@1, MRR at N=1e6,1e7,1e8 for dinov3_l", "mAP@100, R@1, MRR at N=1e6,1e7,1e8 for dinov3_l"),
    ("mAP@1000 at N=759k for dinov3_l", "mAP@1000 at N=759k for dinov3_l"),
    ("mAP@1000 at N=100_000_000 for dinov3_l", "mAP@1000 at N=1e8 for dinov3_l"),
    ("mAP@1000 at N=5M for a, b", "mAP@1000 at N=5M for a, b"),
    ("mAP@1000 at N=1.2B for *", "mAP@1000 at N=1200M for *"),
    ("mAP@1000 for dinov3_l , siglip2_l", "mAP@1000 for dinov3_l, siglip2_l"),
    ("mAP@1000 at N=1e8 for dinov3_l on ilias", "mAP@1000 at N=1e8 for dinov3_l on ilias"),
    ("mAP@1000 on ilias at N=1e8 for dinov3_l using evt", "mAP@1000 at N=1e8 for dinov3_l on ilias using evt"),
    ("mAP@1000 at N=1e8 for dinov3_l@v2", "mAP@1000 at N=1e8 for dinov3_l@v2"),
    ("mAP@1000 at N=1e8 for dino*@released expected", "mAP@1000 at N=1e8 for dino*@released expected"),
    ("mAP @ 1000 at N=1e8 for x PLUGIN", "mAP@1000 at N=1e8 for x plugin"),
    ("Recall@100 at N=12345 for x", "Recall@100 at N=12345 for x"),
    # reranked@K': after the backbones in the canonical form, wherever it is written
    ("mAP@1000 at N=1e8 for dinov3_l reranked@1000", "mAP@1000 at N=1e8 for dinov3_l reranked@1000"),
    ("mAP@100 reranked @ 1_000 at N=1e8 for a, b", "mAP@100 at N=1e8 for a, b reranked@1000"),
    ("R@1 at N=1e8 for x on ilias RERANKED@50 expected", "R@1 at N=1e8 for x reranked@50 on ilias expected"),
    ("mAP@1000 at N=1e8 for x expected reranked@1000", "mAP@1000 at N=1e8 for x reranked@1000 expected"),
    ("mAP@1000 at N=1e8 for reranked_dinov3", "mAP@1000 at N=1e8 for reranked_dinov3"),   # a name, not the clause
    # a paired difference: two backbones around vs (or a free-standing '-')
    ("mAP@1000 at N=1e8 for dinov3_l VS dinov2_b", "mAP@1000 at N=1e8 for dinov3_l vs dinov2_b"),
    ("mAP@1000 for a@v2 - b on x at N=1e8", "mAP@1000 at N=1e8 for a@v2 vs b on x"),
    ("mAP@1000 at N=1e8 for a-b", "mAP@1000 at N=1e8 for a-b"),                          # a name with '-'
]


@pytest.mark.parametrize("text,want", CANONICAL)
def test_canonical(text, want):
    q = parse(text)
    assert str(q) == want
    assert parse(str(q)) == q


BAD = [
    ("", "empty query"),
    ("mAP at N=1e8 for x", "mAP needs a cut-off"),
    ("nDCG@10 at N=1e8 for x", "unknown measure 'nDCG'"),
    ("mAP@1000 at N=0 for x", "whole number between 1"),
    ("mAP@1000 at N=1e8 fro x", "did you mean 'for'"),
    ("mAP@1000 at M=1e8 for x", "expected N=<size>"),
    ("mAP@1000 at N=1e8 for a b", "unexpected word 'b'"),
    ("mAP@1000 at N=1e8 for x on", "expected one benchmark"),
    ("mAP@1000 at N=1e8 for x for y", "'for' appears twice"),
    ("mAP@1000 at N=1e8 for x expected plugin", "appears twice"),
    ("mAP@1000 at N=1e8 for x@ on y", "cannot read backbone"),
    ("mAP@1000 at N=1e8 for x reranked", "say how many first-stage candidates are reranked"),
    ("mAP@1000 at N=1e8 for x reranked@top", "cannot read the rerank depth in 'reranked@top'"),
    ("mAP@1000 at N=1e8 for x reranked@0", "a whole number >= 1"),
    ("mAP@1000 at N=1e8 for x reranked@10 reranked@20", "'reranked' appears twice"),
    ("mAP@1000 at N=1e8 for x reranked@10,20", "unexpected ',' in the reranked clause"),
    ("mAP@1000 at N=1e8 for x rerankd@100", "did you mean 'reranked'"),
    ("mAP@1000 at N=1e8 for a, b vs c", "a paired difference compares two backbones: write 'for A vs B'"),
    ("mAP@1000 at N=1e8 for a vs b - c", "a paired difference compares two backbones"),
    ("mAP@1000 at N=1e8 for vs b", "expected a backbone name before 'vs'"),
    ("mAP@1000 at N=1e8 for a -", "expected a backbone name after '-'"),
]


@pytest.mark.parametrize("text,msg", BAD)
def test_bad_queries_point_at_the_problem(text, msg):
    with pytest.raises(QuerySyntaxError) as err:
        parse(text)
    assert msg in str(err.value)
    if text:
        assert "^" in str(err.value)


def test_every_problem_is_listed():
    with pytest.raises(QuerySyntaxError) as err:
        parse("nDCG@10, mAP@0 at N=-1 for x")
    text = str(err.value)
    assert "nDCG" in text and "whole number >= 1" in text and "gallery size" in text
    assert text.count("^") >= 3


def test_reranked_clause_value():
    q = parse("mAP@1000 at N=1e8 for x reranked@250")
    assert q.rerank_depth == 250 and q.backbones == (BackboneRef("x"),)
    assert parse("mAP@1000 at N=1e8 for x").rerank_depth is None
    assert parse("mAP@1000 at N=1e8 for x reranked@250") != parse("mAP@1000 at N=1e8 for x reranked@251")


def test_caret_position():
    with pytest.raises(QuerySyntaxError) as err:
        parse("mAP@1000 at N=1e8 for a b")
    first, caret_line = str(err.value).splitlines()[:2]
    assert first.index("a b") + 2 == caret_line.index("^")


names = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True).filter(
    lambda s: s not in ("at", "for", "on", "using", "expected", "plugin", "n", "reranked", "vs"))


@given(st.lists(st.sampled_from([Measure("mAP", 1000), Measure("R", 1), Measure("MRR"), Measure("Recall", 50)]),
                min_size=1, max_size=3, unique=True),
       st.lists(st.integers(1, 10**12), max_size=3),
       st.lists(st.tuples(names, st.sampled_from([None, "v2", "released"])), min_size=1, max_size=3),
       st.one_of(st.none(), names), st.one_of(st.none(), st.sampled_from(["evt", "evt-paper", "count"])),
       st.sampled_from([None, "expected", "plugin"]), st.one_of(st.none(), st.integers(1, 10**6)), st.booleans())
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])   # a loaded shared machine is no failure
def test_round_trip_property(measures, sizes, backbones, bench, est, mode, depth, paired):
    q = Query(tuple(measures), tuple(sizes), tuple(BackboneRef(n, v) for n, v in backbones), bench, est, mode, depth,
              paired and len(backbones) == 2)
    assert parse(str(q)) == q


@given(st.integers(1, 10**15))
def test_size_format_round_trip(n):
    assert parse_size(format_size(n)) == n


@pytest.mark.parametrize("bad", ["\x1b[2J", "\x1b]0;owned\x07", "\u202e", "\x9b31m"])
def test_control_characters_are_escaped_in_errors(bad):
    # an ESC sequence echoed raw would clear the screen or retitle the terminal
    text = f"mAP@1000 at N=1e8 for a {bad}zz"
    with pytest.raises(QuerySyntaxError) as err:
        parse(text)
    message = str(err.value)
    assert all(ch.isprintable() for line in message.splitlines() for ch in line), repr(message)
    first, caret_line = message.splitlines()[:2]
    shown = repr(bad)[1:-1]
    assert first.endswith(f"for a {shown}zz")
    start = caret_line.index("^")
    assert first[start:start + caret_line.count("^")] == f"{shown}zz"   # the caret still points at the word
