"""Tests of rg_verl.evaluation.metrics: pass@k, mean@k, majority votes and the aggregated rates."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rg_verl.evaluation.metrics import (
    aggregate,
    default_k_values,
    majority_answer,
    majority_correct,
    mean_at_k,
    pass_at_k,
)


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (10, 3, 1, 0.3),
        (10, 3, 2, 1 - 21 / 45),
        (10, 3, 5, 1 - 21 / 252),
        (10, 3, 8, 1.0),  # fewer than k wrong: some correct one is always drawn
        (3, 0, 3, 0.0),
        (3, 3, 1, 1.0),
        (1, 1, 1, 1.0),
        (200, 1, 100, 0.5),
    ],
)
def test_pass_at_k_known_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_rejects_bad_arguments():
    for n, c, k in [(3, 1, 4), (3, 4, 1), (3, 1, 0), (0, 0, 1)]:
        with pytest.raises(ValueError):
            pass_at_k(n, c, k)


@given(st.integers(1, 60).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))))
def test_pass_at_k_properties(nc):
    n, c = nc
    values = [pass_at_k(n, c, k) for k in range(1, n + 1)]
    assert values[0] == pytest.approx(c / n)  # pass@1 is the accuracy
    assert all(0.0 <= v <= 1.0 for v in values)
    assert all(a <= b + 1e-12 for a, b in zip(values[:-1], values[1:], strict=True))  # monotone in k
    for k, value in enumerate(values, start=1):  # the binomial form
        assert value == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), abs=1e-9)
    assert values[-1] == (1.0 if c else 0.0)
    if c < n:
        assert all(pass_at_k(n, c, k) <= pass_at_k(n, c + 1, k) + 1e-12 for k in range(1, n + 1))  # monotone in c


@given(st.lists(st.booleans(), min_size=1, max_size=20))
def test_mean_at_k_full_is_accuracy(correct):
    assert mean_at_k(correct, len(correct)) == pytest.approx(sum(correct) / len(correct))
    assert mean_at_k(correct, 1) == float(correct[0])


def test_majority_vote_table():
    assert majority_answer(["3", "4", "4", None, None, None]) == "4"
    assert majority_answer(["3", "4"]) == "3"  # tie: first seen wins
    assert majority_answer([None]) is None
    assert majority_correct(["3", "4", "4"], [False, True, True], 3) == 1.0
    assert majority_correct(["3", "3", "4"], [False, False, True], 3) == 0.0
    assert majority_correct(["3", "4", "4"], [False, True, True], 1) == 0.0
    assert majority_correct([None, None, "4"], [False, False, True], 3) == 1.0  # no answer: no vote
    assert majority_correct([None, None], [False, False], 2) == 0.0


@given(st.integers(1, 10_000))
def test_default_k_values_are_powers_of_two_then_n(n):
    values = default_k_values(n)
    assert values[-1] == n and values == sorted(set(values))
    assert all(k == 2**i for i, k in enumerate(values[:-1])) and (len(values) == 1 or values[-2] * 2 >= n)


@given(
    st.lists(
        st.lists(st.tuples(st.sampled_from(["a", "b", "c", None]), st.booleans()), min_size=3, max_size=3),
        min_size=1,
        max_size=8,
    )
)
def test_aggregate_properties(raw):
    # completions whose answer is the same get the same correctness, as with a real scorer
    truth = {"a": True, "b": False, "c": False, None: False}
    items = [
        [{"model_answer": a, "accuracy": float(truth[a]), "score": float(truth[a])} for a, _ in item] for item in raw
    ]
    metrics = aggregate(items, [1, 2, 3])
    assert metrics["pass@1"] == pytest.approx(metrics["accuracy"])
    assert metrics["mean@3"] == pytest.approx(metrics["accuracy"])
    assert metrics["pass@1"] <= metrics["pass@2"] + 1e-12 <= metrics["pass@3"] + 2e-12
    assert metrics["maj@3"] <= metrics["pass@3"] + 1e-12  # a correct majority needs a correct completion
    assert metrics["num_items"] == len(items) and metrics["num_completions"] == 3 * len(items)


def test_aggregate_rates_table():
    items = [
        [
            {"score": 1.0, "accuracy": 1.0, "correct_strict": 1.0, "correct_lenient": 1.0, "format_ok": 1.0,
             "answer_found": 1.0, "revised": 0.0, "self_corrected": 0.0, "num_tokens": 10, "model_answer": "x"},
            {"score": 1.0, "accuracy": 1.0, "correct_strict": 0.0, "correct_lenient": 1.0, "format_ok": 0.0,
             "answer_found": 1.0, "revised": 1.0, "self_corrected": 1.0, "num_tokens": 30, "model_answer": "x"},
        ],
        [
            {"score": 0.0, "accuracy": 0.0, "correct_strict": 0.0, "correct_lenient": 0.0, "format_ok": 0.0,
             "answer_found": 0.0, "revised": 0.0, "self_corrected": 0.0, "num_tokens": None, "model_answer": None},
            {"score": 0.0, "accuracy": 0.0, "correct_strict": 0.0, "correct_lenient": 0.0, "format_ok": 1.0,
             "answer_found": 1.0, "revised": 1.0, "self_corrected": 0.0, "num_tokens": 20, "model_answer": "y"},
        ],
    ]  # fmt: skip
    m = aggregate(items, [1, 2])
    assert (m["accuracy"], m["accuracy_strict"], m["accuracy_lenient"]) == (0.5, 0.25, 0.5)
    assert (m["format_rate"], m["answer_rate"], m["revision_rate"], m["self_correction_rate"]) == (0.5, 0.75, 0.5, 0.5)
    assert m["mean_response_tokens"] == 20.0  # unknown lengths are left out
    assert (m["pass@2"], m["maj@2"], m["mean@1"]) == (0.5, 0.5, 0.5)
    assert aggregate([], [1])["accuracy"] is None
