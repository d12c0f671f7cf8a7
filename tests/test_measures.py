import pytest
from hypothesis import given
from hypothesis import strategies as st

from rscale.errors import InvalidArgumentError
from rscale.query.measures import Measure

CANONICAL = [
    ("mAP@1000", "mAP@1000"), ("map@1000", "mAP@1000"), ("AP@100", "mAP@100"), ("MAP @ 100", "mAP@100"),
    ("mAP@1e3", "mAP@1000"), ("mAP@1_000", "mAP@1000"), ("R@1", "R@1"), ("hit@5", "R@5"),
    ("success@10", "R@10"), ("recall@100", "Recall@100"), ("MRR", "MRR"), ("rr", "MRR"), ("mrr@10", "MRR@10"),
]


@pytest.mark.parametrize("text,want", CANONICAL)
def test_canonical_spelling(text, want):
    assert str(Measure.parse(text)) == want


BAD = [
    ("mAP", "needs a cut-off"), ("nDCG@10", "unknown measure 'nDCG'"), ("mAPP@10", "Did you mean 'mAP'"),
    ("mAP@0", "whole number >= 1"), ("mAP@2.5", "cannot read measure"), ("", "cannot read measure"),
    ("mAP@99999999999999999999", "at most 1e15"),
]


@pytest.mark.parametrize("text,msg", BAD)
def test_bad_measures(text, msg):
    with pytest.raises(InvalidArgumentError, match=msg):
        Measure.parse(text)


@given(st.sampled_from(["mAP", "R", "Recall", "MRR"]), st.integers(1, 10**6))
def test_round_trip(name, k):
    m = Measure(name, k)
    assert Measure.parse(str(m)) == m
    assert hash(Measure.parse(str(m))) == hash(m)
