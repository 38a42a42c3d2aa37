"""Tests for rg_verl.reward.math_verify: math-verify equivalence under a hard time limit."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rg_verl.reward.math_verify as math_verify_mod
from rg_verl.common.final_answer import gsm8k_reference
from rg_verl.reward.math_verify import MAX_ANSWER_CHARS, math_equal, math_equal_status
from rg_verl.reward.time_limit import Status
from tests.helpers import within

# a call that has not returned after this long has hung: the time limit is checked by the status a
# call returns, and the deadline leaves room for a cold start of the worker processes (up to a minute)
HANG_S = 120
HALF_FORMS = ["1/2", "0.5", r"\frac{1}{2}", r"\boxed{\dfrac12}"]
HALF_GOLDS = ["0.5", r"\frac{1}{2}"]


@pytest.mark.parametrize("gold", HALF_GOLDS)
@pytest.mark.parametrize("answer", HALF_FORMS)
def test_equivalent_forms_of_a_half(answer, gold):
    assert math_equal(answer, gold) == 1.0
    assert math_equal(gold, answer) == 1.0  # and with the roles swapped


@pytest.mark.parametrize(
    "answer, gold, expected",
    [
        ("2", "3", 0.0),
        ("3", "2", 0.0),
        ("1/3", "0.5", 0.0),
        (r"\frac{1}{3}", r"\frac{1}{2}", 0.0),
        (r"\sqrt{18}", r"3\sqrt{2}", 1.0),
        (r"3\sqrt{2}", "3", 0.0),
        ("(1, 2)", "2", 0.0),
        ("10^{3}", "1000", 1.0),
        ("1,234", "1234", 1.0),
        (r"\$18", "18", 1.0),
        ("18 dollars", "18", 1.0),
        ("The answer is 5", "5", 1.0),
        (r"The answer is $\boxed{7}$.", r"\boxed{7}", 1.0),
        (r"\pi/2", r"\frac{\pi}{2}", 1.0),
        (r"\{1,2\}", r"\{2,1\}", 1.0),
        ("x = 2", "2", 1.0),
        ("-4", "4", 0.0),
        ("2*sqrt(3)", r"2\sqrt{3}", 1.0),  # plain-text math is read as LaTeX
        ("2*sqrt(3)", "2", 0.0),
        ("sqrt(2)/2", r"\frac{\sqrt{2}}{2}", 1.0),
        ("x**2 + 1", "x^2+1", 1.0),
        ("pi/2", r"\frac{\pi}{2}", 1.0),
        ("-oo", r"-\infty", 1.0),
    ],
)
def test_table(answer, gold, expected):
    assert math_equal(answer, gold) == expected


@pytest.mark.parametrize(
    "answer",
    [
        r"\boxed{9^{9^{9^{9}}}}",
        "9^{9^{9^{9}}}",
        "10^{10^{10}}",
        "2^{2^{2^{2^{2^{2}}}}}",
        "(" * 5000,
        "{" * 3000 + "}" * 3000,
    ],
)
def test_hostile_answers_are_cut_off(answer):
    value, status = within(HANG_S, math_equal_status, answer, "1", timeout=1.0)
    assert value == 0.0 and status in (Status.OK, Status.TIMEOUT)
    assert math_equal("1/2", "0.5") == 1.0  # the pool recovers


def test_hostile_gold_is_cut_off_too():
    value, status = within(HANG_S, math_equal_status, "1", r"\boxed{9^{9^{9^{9}}}}", timeout=0.5)
    assert (value, status) == (0.0, Status.TIMEOUT)


def test_oversize_answer_is_rejected_without_parsing(monkeypatch):
    parsed = []
    monkeypatch.setattr(math_verify_mod, "call_bounded", lambda *args, **kwargs: parsed.append(args))
    big = "1" * 1_000_000
    assert math_equal_status(big, "1") == (0.0, Status.OK)
    assert math_equal_status(r"\boxed{" + big + "}", "1") == (0.0, Status.OK)
    assert math_equal("x" * (MAX_ANSWER_CHARS + 1), "1") == 0.0
    assert parsed == []  # none of them reached the parser
    monkeypatch.undo()
    assert math_equal("7", "7", max_chars=1) == 1.0
    assert math_equal("12", "12.0", max_chars=1) == 0.0


@pytest.mark.parametrize("answer, gold", [(None, "1"), ("1", None), (1, 1), ("", "1"), ("1", ""), ("  ", " ")])
def test_bad_inputs_score_zero(answer, gold):
    assert math_equal(answer, gold) == 0.0


_text = st.text(
    alphabet=st.one_of(st.sampled_from(list("{}\\$^_()[]0123456789+-*/=., xabfroxed%")), st.characters()),
    max_size=60,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(answer=st.one_of(_text, st.sampled_from(HALF_FORMS)), gold=st.one_of(_text, st.sampled_from(HALF_GOLDS)))
def test_math_equal_never_raises(answer, gold):
    value, status = math_equal_status(answer, gold, timeout=0.5)
    assert value in (0.0, 1.0)
    assert status in ("ok", "timeout")  # "error" would be an exception in the worker: a bug


def test_gsm8k_reference_scores_against_model_answers():
    gold = gsm8k_reference("... #### 1,234")
    assert math_equal("1234", gold) == 1.0
    assert math_equal("1,234", gold) == 1.0
    assert math_equal(r"\boxed{1234}", gold) == 1.0
    assert math_equal("1235", gold) == 0.0
