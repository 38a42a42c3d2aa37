"""The critic's summaries: ROC AUC against a pairwise count, the value range."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rg_verl.oreo.metrics import describe, roc_auc


def pairwise_auc(scores, labels) -> float:
    """The definition: over all (positive, negative) pairs, 1 when the positive scores higher, 1/2 on a tie."""
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


# few distinct scores, so ties are common
scored = st.lists(st.tuples(st.integers(-3, 3).map(float) | st.floats(-1, 1), st.booleans()), min_size=2, max_size=30)


@settings(max_examples=200, deadline=None)
@given(pairs=scored)
def test_auc_equals_the_pairwise_count(pairs):
    scores, labels = [s for s, _ in pairs], [y for _, y in pairs]
    if all(labels) or not any(labels):
        assert math.isnan(roc_auc(scores, labels))
    else:
        assert roc_auc(scores, labels) == pytest.approx(pairwise_auc(scores, labels), abs=1e-12)


@settings(max_examples=50, deadline=None)
@given(pairs=scored)
def test_auc_of_negated_scores_is_one_minus_the_auc(pairs):
    scores, labels = [s for s, _ in pairs], [int(y) for _, y in pairs]
    if 0 < sum(labels) < len(labels):
        assert roc_auc([-s for s in scores], labels) == pytest.approx(1 - roc_auc(scores, labels), abs=1e-12)


def test_auc_separation_and_ties():
    assert roc_auc([0.1, 0.2, 0.8, 0.9], [0, 0, 1, 1]) == 1.0
    assert roc_auc([0.9, 0.8, 0.2, 0.1], [0, 0, 1, 1]) == 0.0
    assert roc_auc([0.5] * 6, [0, 1, 0, 1, 1, 0]) == 0.5
    # one tie between a positive and a negative among four pairs: (1 + 1 + 0.5 + 1) / 4
    assert roc_auc([0.3, 0.5, 0.5, 0.9], [0, 0, 1, 1]) == 0.875


@pytest.mark.parametrize("labels", [[1, 1, 1], [0, 0, 0], [True, True, True]])
def test_auc_is_nan_when_a_class_is_absent(labels):
    assert math.isnan(roc_auc([0.1, 0.2, 0.3], labels))


def test_auc_of_nothing_is_nan():
    assert math.isnan(roc_auc([], []))


@pytest.mark.parametrize(
    ("scores", "labels", "message"),
    [
        ([0.1, 0.2], [0], "same length"),
        ([0.1, 0.2], [0, 2], "0/1"),
        ([0.1, 0.2], ["yes", "no"], "0/1"),
        ([0.1, math.nan], [0, 1], "finite"),
    ],
)
def test_auc_refuses_bad_input(scores, labels, message):
    with pytest.raises(ValueError, match=message):
        roc_auc(scores, labels)


def test_describe_gives_the_range_and_centre():
    assert describe([3.0, -1.0, 1.0, 5.0]) == {"mean": 2.0, "median": 2.0, "min": -1.0, "max": 5.0}
    assert all(math.isnan(v) for v in describe([]).values())
